// Package rampartprom reports rampart's policies to Prometheus: a
// prometheus.Collector of the Stats of every instance it is given.
//
//	c := rampartprom.NewCollector(rampartprom.Config{})
//	prometheus.MustRegister(c)
//	err := c.Add("payments", breaker)
//	c.AddSource(registry) // a *registry.Registry, or any Source
//
// At each scrape Collect reads each instance's Stats once; between scrapes
// nothing runs, and the instances' calls never touch the collector
// (attached or not, an admission costs the same and allocates nothing
// more: TestAdmitAllocsAttached).
//
// The metrics are rampart's scheme, package observe's, shared with package
// rampartotel (docs/observability.md has the table of every metric,
// generated from it), with the names derived mechanically by
// OpenTelemetry's Prometheus compatibility rules: dots become
// underscores, a duration in seconds ends in _seconds, a rate per second
// in _per_second, a ratio in _ratio, a counter in _total (the names
// OpenTelemetry's Prometheus exporter gives rampartotel's instruments).
// Every series has the label rampart_name; the breaker's state is a state set,
// rampart_circuitbreaker_state{rampart_state="open"} being 1 while it is
// open and 0 otherwise:
//
//	rampart_circuitbreaker_state{rampart_name="payments",rampart_state="open"} 1
//	rampart_circuitbreaker_rejected_total{rampart_name="payments"} 1200
//	rampart_ratelimit_rejected_total{rampart_name="login"} 37
//	rampart_bulkhead_wait_time_seconds_total{rampart_name="db"} 0.25
//
// Collected types: *circuitbreaker.Breaker, *ratelimit.Limiter,
// *ratelimit.Sharded, *ratelimit.Keyed, *bulkhead.Bulkhead,
// *adaptive.Limiter, *adaptive.Throttler, *retry.Policy,
// *retry.TokenBucket, *retry.RatioBudget, *timeout.Timeout,
// *hedge.Hedger, *chaos.Injector, *shed.Shedder, a *pipeline.Pipeline
// built with Config.CountStats (one without counts nothing: Add refuses
// it; add its policies), *pipeline.Fallback[T] of any T (recognised by its
// method Stats() pipeline.FallbackStats) and *pipeline.DoFallback. Counts
// split by a value carry one attribute more: rampart.code,
// rampart.policy, rampart.ending, rampart.signal (see
// docs/observability.md). The breaker's successes are counted only with
// circuitbreaker.Config.CountStats. Not collected: ratelimit/redislimit (a
// module of its own, which the adapters do not depend on). A Source's
// instances that cannot be collected (unknown types, pipelines that count
// nothing, a name already collected in the same family) are skipped and
// counted in rampart_skipped_instances{rampart_reason}, so that a
// duplicate name never fails a scrape; so is a panic of a Source's Range
// or of an instance's Stats (reason "panicked"), which is recovered: the
// scrape carries every other instance. Add refuses a name that is not
// valid UTF-8 (a label value must be); a Source's such name is collected
// with U+FFFD in place of each invalid byte sequence.
package rampartprom
