// Package rampartotel reports rampart's policies to OpenTelemetry: the
// Stats of every instance as observable instruments, and span events on
// rejections, timeouts and state changes.
//
// # Metrics
//
// [New] creates every instrument of rampart's metric scheme on a Meter and
// registers one callback; [Metrics.Add] and [Metrics.AddSource] give it
// the instances to read. At each collection the callback reads each
// instance's Stats once; between collections nothing runs, and the
// instances' calls never touch the adapter (attached or not, an admission
// costs the same and allocates nothing more: TestAdmitAllocsAttached).
//
//	m, err := rampartotel.New(otel.Meter("github.com/me/service"), rampartotel.Config{})
//	if err != nil { ... }
//	err = m.Add("payments", breaker)
//	m.AddSource(registry) // a *registry.Registry, or any Source
//
// The scheme (names, kinds, units, attributes, and the Stats field each
// metric reads) is package observe's, shared with package rampartprom;
// docs/observability.md has one table of every metric, generated from it. In short: names are
// rampart.<package>.<stat> (rampart.circuitbreaker.rejected,
// rampart.bulkhead.in_flight); every series has the attribute
// rampart.name, the instance's name; counts since creation are
// asynchronous counters, the rest gauges; units follow OpenTelemetry's
// conventions ("{call}", "s", "1"). The breaker's state is a state set:
// rampart.circuitbreaker.state{rampart.state} is 1 for the current state
// and 0 for the five others. No semantic convention covers resilience
// policies yet (open-telemetry/semantic-conventions#2355, #3361): this is
// rampart's own scheme, stable within a major version.
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
// module of its own, which the adapters do not depend on). Instances that
// a Source holds and that cannot be collected are counted in
// rampart.skipped_instances{rampart.reason}; so is a panic of a Source's
// Range or of an instance's Stats (reason "panicked"), which is
// recovered, so that it never leaves the SDK's callback (on a
// PeriodicReader's goroutine it would end the process) and every other
// instance is collected. Add refuses a name that is not valid UTF-8 (an
// attribute value must be, for the exporters' encodings); a Source's such
// name is collected with U+FFFD in place of each invalid byte sequence.
//
// Cardinality: the SDK keeps at most 2,000 series per instrument by
// default (sdkmetric.WithCardinalityLimit), and the breaker's state set
// takes 6 per breaker; beyond about 330 breakers on one MeterProvider,
// raise the limit.
//
// # Tracing
//
// The policies' listeners take primitive arguments and no context (see the
// root package, Listeners), so none of them can find the caller's span.
// The span is found where a context is at hand, per call:
//
//   - [Do] and [Try] run a call through a pipeline.Pipeline as its Do and
//     Try do, and on a Rejected or TimedOut outcome add the event
//     rampart.rejected or rampart.timed_out to trace.SpanFromContext(ctx),
//     with the attributes rampart.policy (the pipeline.Kind),
//     rampart.attempts, rampart.retry_after (seconds, when there is a hint)
//     and rampart.error.
//   - [AddOutcomeEvent] adds the event for any Outcome (TryCall,
//     TryHedged).
//   - [OnRejected] wraps httpguard.ServerConfig.OnRejected, whose listener
//     gets the request, and so its context.
//
// State changes: OnStateChange and OnOverload are called without the
// call's context, so [Do] and [Try] watch the pipeline's circuit breaker
// and shedder themselves. When the span records and the pipeline has one
// (its Config().Breaker, .Shed), they read the breaker's State and the
// shedder's Overloaded before and after the call (one atomic load each)
// and, when a reading changed, add rampart.circuitbreaker.transition
// (rampart.name, the breaker's Config.Name; rampart.state.from and
// rampart.state.to, the states' names) or rampart.shed.transition
// (rampart.shed.overloaded, the value after the call), before the
// outcome's event; a panic in fn gets them too. What they see is the state
// before and after this call, so:
//
//   - a transition made by another goroutine's call (or by TransitionTo)
//     while this call ran is attributed to this span too, and to every span
//     of a call that overlapped it;
//   - the steps between are not seen: the call whose probe closes an open
//     breaker (open→half-open at its admission, half-open→closed at its
//     release) gets one event, open→closed; a change undone before the
//     call ended gets none;
//   - a timer-driven transition is seen by the next call: an open breaker
//     whose open time has passed reports Open until the next admission
//     moves it to HalfOpen, and a shedder samples its signals at the calls'
//     admissions;
//   - a change with no call through this pipeline in flight (an Update, a
//     call through another pipeline sharing the policy) is on no span.
//
// Every transition is in the metrics (rampart.circuitbreaker.transitions,
// .state; rampart.shed.overloaded) and in the logs (package rampartslog).
//
// Cost: under a span that does not record (or none), [Do] and [Try] cost
// the pipeline's own method and one context lookup
// (trace.SpanFromContext) more, about 5 ns through a context five values
// deep; the pipeline's Config and the readings are taken only when the
// span records. No call allocates more unless it adds an event
// (TestDoAllocs).
package rampartotel
