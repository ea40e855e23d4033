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
// uberratelimit, goresiliency, backoff, retrygo, xsync, chan, direct, plus a
// suffix after a dash for another form of one library: a rampart variant
// (rampart-cached, rampart-do) or a peer's other form (failsafe-permit, its
// primitive). Every benchmark checks that it took the path it claims
// (admitted or rejected) and reports allocations.
//
// Like with like. A row is either an executor (the library runs the
// function: Do, Run, Execute) or a primitive (acquire and release, or allow
// and record, called by hand around the function); the tables divide a
// peer's row only by the rampart row of the same kind and semantics that
// cmd/benchtable/groups.go pairs it with, in the cases it names, and say
// under each scenario what is compared. A new row or case gets its
// declaration there (TestEveryRowOfTheCommittedRunIsDeclared fails until it
// has one). The Memory scenario reports bytes per instance with
// b.ReportMetric(bytes, "B/instance") for Memory/<Policy>/rampart,
// Memory/<Policy>/rampart-compact and Memory/<Policy>/<peer>.
//
// `make bench-report` runs the suite with -count 5, summarises it with
// benchstat and, with cmd/benchtable, regenerates the full tables in
// bench/README.md and the summary in the root README.
package bench
