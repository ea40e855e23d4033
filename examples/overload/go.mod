module github.com/rampart-go/rampart/examples/overload

go 1.26.0

require (
	github.com/rampart-go/rampart v0.0.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fsnotify/fsnotify v1.10.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.3 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

require (
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.73.1
	github.com/rampart-go/rampart/rampartconfig v0.0.0
	github.com/rampart-go/rampart/rampartprom v0.0.0
	golang.org/x/sys v0.50.0 // indirect
)

replace (
	github.com/rampart-go/rampart => ../..
	github.com/rampart-go/rampart/rampartconfig => ../../rampartconfig
	github.com/rampart-go/rampart/rampartprom => ../../rampartprom
)
