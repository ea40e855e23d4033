// Package bench measures rampart against its peers. It is its own module so
// that the peers (failsafe-go, gobreaker, x/time/rate, uber's ratelimit,
// go-resiliency, backoff, retry-go, x/sync) never enter the core module's
// dependency graph.
//
// Naming, so results can be compared mechanically:
//
//	Benchmark<Scenario>/<Case>/<library>
//
// where library is one of rampart, failsafe, gobreaker, xtimerate,
// uberratelimit, goresiliency, backoff, retrygo, xsync, chan, direct (plus a
// suffix after a dash for a rampart variant, e.g. rampart-cached). Every
// benchmark checks that it took the path it claims (admitted or rejected)
// and reports allocations. `make bench-report` runs the suite with -count 5,
// summarises it with benchstat and, with cmd/benchtable, regenerates the full
// tables in bench/README.md and the summary in the root README.
package bench
