module github.com/rampart-go/rampart/rampartconfig

go 1.26.0

require github.com/rampart-go/rampart v0.0.0

require (
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/rampart-go/rampart => ../
