module github.com/rampart-go/rampart/examples/overload

go 1.26.0

require (
	github.com/rampart-go/rampart v0.0.0
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.50.0 // indirect

replace (
	github.com/rampart-go/rampart => ../..
	github.com/rampart-go/rampart/rampartprom => ../../rampartprom
)
