module github.com/rampart-go/rampart/rampartconfig

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.10.1
	github.com/rampart-go/rampart v0.0.0
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.5
)

require golang.org/x/sys v0.50.0 // indirect

replace github.com/rampart-go/rampart => ../
