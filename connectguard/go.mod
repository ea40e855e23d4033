module github.com/rampart-go/rampart/connectguard

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/rampart-go/rampart v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/protobuf v1.36.12
)

require golang.org/x/sys v0.50.0 // indirect

replace github.com/rampart-go/rampart => ../
