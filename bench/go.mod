module github.com/rampart-go/rampart/bench

go 1.26.0

require (
	github.com/avast/retry-go/v4 v4.7.0
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/eapache/go-resiliency v1.7.0
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/rampart-go/rampart v0.0.0-00010101000000-000000000000
	github.com/sony/gobreaker/v2 v2.4.0
	go.uber.org/ratelimit v0.3.1
	golang.org/x/exp v0.0.0-20261113113407-e3970619a1a4
	golang.org/x/sync v0.25.0
	golang.org/x/time v0.16.0
)

require (
	github.com/benbjohnson/clock v1.3.0 // indirect
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/rampart-go/rampart => ../
