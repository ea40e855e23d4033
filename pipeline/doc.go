// Package pipeline composes rampart's policies in one fixed order, with one
// pair of clock reads per attempt, no closure, interface boxing or allocation
// per call, and every permit released exactly once on every path.
//
// Build the policies with their packages' New, put them in a [Config] and
// build a [Pipeline] with [New]; run each call through [Pipeline.Do] (or the
// typed [Call]), or [Pipeline.Try] ([TryCall]) for an [Outcome] that says
// which policy rejected and when to come back. [Pipeline.DoHedged] and its
// kin also hedge the call, for an idempotent fn. A [Fallback] (or, for
// calls that return only an error, a [DoFallback]) wraps a pipeline with
// a fallback stage that answers the calls it does not admit or that fail.
//
// # Order
//
// A [Pipeline] has one field per policy kind; a nil field is absent and costs
// one nil check. An attempt goes through the present policies in this order,
// which is fixed:
//
//	fallback                 outermost, for a call through a Fallback: it
//	                         answers how the call ended, after everything below
//	retry (and its budget)   a loop around everything below
//	circuit breaker          AcquireAt(now) before, ReleaseAt(permit, now, result) after
//	rate limiter             AdmitN(now, 1): admitted or a wait hint
//	bulkhead, adaptive limit a concurrency permit held until the call ends
//	shedder                  AcquirePriorityAt(t0, priority) before,
//	                         ReleaseAt(permit, t1, result) after
//	timeout                  a deadline context around the call
//	hedge                    extra attempts of a slow call (hedged entry points)
//	the call                 fn(ctx)
//
// Why this order:
//
//   - The fallback is outermost because it must see every ending that the
//     policies decide: a rejection by any of them (the retry's budget
//     included), the timeout's verdict on the last attempt, and the retry's
//     give-up once it has no attempt left. Inside the retry it would answer
//     the first failed attempt and there would be nothing left to retry;
//     inside the breaker or the adaptive limit its answer would be recorded
//     as a success of the dependency, which keeps a breaker closed on a
//     dead dependency and feeds the limit a latency that is not the
//     dependency's. Outermost, every policy records the real outcome (its
//     Stats count a rejected call as rejected although the fallback
//     answered), and the fallback runs after every permit is released, so
//     a slow, panicking or runtime.Goexit-calling fallback holds nothing
//     and leaks nothing (the panic goes on unchanged). The same placement
//     is resilience4j's Decorators.withFallback, failsafe-go's Fallback as
//     the first policy of failsafe.With, and Polly's fallback strategy
//     added first to a pipeline.
//
//   - Retry is the outermost policy so that every retry is admitted again
//     by every other policy: retries cannot bypass an open breaker, a rate
//     limit or a full bulkhead, so a retry storm is capped by the same limits as first calls.
//     A caller sleeping between attempts holds no permit: no bulkhead slot, no
//     half-open probe. Rejections by the policies below are not retried: a
//     local rejection is this process shedding load, and retrying it in
//     process would turn shedding back into waiting. They come back at once
//     with a hint of when to come back ([Outcome.RetryAfter]).
//
//   - The breaker comes before the rate limiter so that calls an open breaker
//     refuses spend no rate-limit quota, and because a closed breaker's check
//     is the cheapest (one atomic load).
//
//   - The rate limiter comes before the concurrency limits: it decides in time
//     and holds nothing, while a bulkhead or adaptive permit is held for the
//     whole call; taking the held permit last keeps it held the shortest time,
//     and a call refused for rate never occupies a slot.
//
//   - The bulkhead (a fixed cap) comes before the adaptive limit (a moving
//     cap) when both are set; most pipelines set one of them.
//
//   - The overload shedder (package shed) is the last admission. It guards
//     this process, not a dependency: while the runtime's signals say the
//     process is overloaded it caps the calls in flight at the
//     bandwidth-delay product it measured (the most completions per second
//     times the least latency, Little's law), so what it counts in flight
//     and the latency it learns from must be the process's own work only.
//     After the breaker, a call an open breaker refuses is never in flight
//     for it; after the rate limiter and the concurrency limits, a call
//     they refuse never takes its slot, and a call waiting in a bulkhead or
//     adaptive queue is neither counted in flight (a queue for a slow
//     dependency is not this process's overload) nor timed: its latency
//     sample runs from the admission reading (t0, read again after a queue)
//     to fn's return (t1), the attempt's own. Being last costs nothing that
//     matters: the admissions before it are a few atomics each and fn has
//     not started, so a shed call still spends no work of the process's;
//     the permits taken before it are given back at once, as after any
//     rejection (a rate-limit token is spent, as for a bulkhead
//     rejection). Like the held permits above, its slot is held until fn
//     has returned; the timeout inside it bounds fn only. Netflix's
//     concurrency-limits puts its server limiter in the same place (a
//     servlet filter in front of the handler), judging the handler's own
//     work.
//
//   - The timeout is inside the concurrency limits so that its deadline covers
//     the call only, not admission, and so that the concurrency permit is
//     released only when the call has really returned: a timeout here is a
//     deadline the callee honours, never an abandoned goroutine that would
//     still hold the dependency while its permit is reused. The pipeline
//     uses the timeout's StartAt and FinishAt, which never abandon, whatever
//     the Timeout's abandon settings (MaxAbandoned, Workers, OnAbandon
//     configure timeout.DoAbandon, which a pipeline never calls);
//     abandoning is not available inside a pipeline. A timed-out
//     attempt is recorded as a failure by the breaker and the adaptive limit,
//     and retried by the retry's default classifier (its error matches
//     context.DeadlineExceeded, but the caller's context is live), each
//     retry with a fresh deadline; the caller's context bounds the whole
//     call, retries and sleeps included: once it is done nothing is retried,
//     and an attempt that ended with the caller's own context error returns
//     that error as it is.
//
//   - The hedge is innermost: its extra attempts are copies of one admitted
//     attempt, under its permits and its deadline. Hedging applies only to
//     [Pipeline.DoHedged], [Pipeline.TryHedged], [CallHedged] and
//     [TryCallHedged]: calling them is the caller's promise that fn is
//     idempotent, and they hand fn to other goroutines, so a closure that
//     captures variables is allocated; Do, Try, Call and TryCall never do,
//     so they allocate nothing even for such a closure.
//
// Because the order is fixed and each field has one concrete type, every
// call site in the pipeline calls one known method: nothing is dispatched
// through an interface.
//
// # Time
//
// The pipeline reads its [rampart.Ticker] at most twice per attempt: t0
// before admission, handed to the breaker, the rate limiter, the adaptive
// limit, the shedder and the timeout, and t1 after the call, handed to
// whichever policy records a duration (a breaker with a slow-call threshold
// or a time window, the adaptive limit, the shedder, a soft-mode timeout)
// and to the retry decision. A
// deadline-mode timeout needs only t0: at the end it takes the watchdog's
// verdict (rampart.NotRead), as timeout.Do does, so an attempt is timed out
// when its deadline fired before fn returned; a return after the deadline
// that the watchdog has not yet seen (it fires within one tick) is in time. The retry
// takes the first attempt's t0 as the call's start only when it uses it
// (retry.Policy.NeedsTime: a MaxDuration, or a budget that keeps time such
// as a RatioBudget; a TokenBucket does not). A pipeline whose policies need
// no time reads no clock at all on a success; t1 is read only when a policy
// needs it or a retry decision is made. The policies must use the
// pipeline's ticker (New checks it), since readings of different tickers are
// not comparable. A [rampart.CachedTicker] makes each read one atomic load,
// which the pipeline makes itself (no interface call).
//
// One exception to the two reads: when the bulkhead can wait (MaxWait > 0)
// or the adaptive limit has a queue, t0 is read again once the attempt is
// admitted, so that the timeout's deadline, the shedder's latency sample
// and the hedger's delay count from admission and not from the start of the
// queueing.
//
// The hedged entry points hand the hedger the attempt's start: t0 itself
// when it was read, so the hedger reads no clock of its own for the start;
// otherwise one fresh reading. With a percentile delay the
// hedger also reads the end of the call, for its latency sample.
//
// # Cost
//
// A call whose first attempt is admitted at once (no bulkhead or adaptive
// queue configured) takes a fast path: the admission, the call and the
// release written out in one function, with no retry bookkeeping until an
// attempt fails. What it costs beyond the policies' own atomics is a context
// check, the outcome's attempt count, a few stores of the permit bits that
// the panic guard reads, and that one deferred guard. A failed attempt, a
// retry, a queue that may wait and the hedged entry points take the general
// loop. docs/pipeline.md and the README's benchmark section have the
// measured figures.
//
// # Results
//
// [Pipeline.Do] and [Call] return the user's error unchanged, or a policy's
// preallocated rejection error (matching [rampart.ErrRejected] and the
// policy's sentinel). [Pipeline.Try] and [TryCall] return an [Outcome]
// instead: a [Code], which [Kind] of policy decided the ending
// ([Outcome.Policy]: the rejecting one, [Shed] for the overload shedder;
// [Timeout] for a timeout; [Retry] for the retry giving up, Code Failed),
// and a retry-after hint (the rate limiter's wait, the breaker's remaining
// open time; none from a bulkhead, an adaptive limit or the shedder), for
// callers that treat rejection as normal flow (an HTTP server answering
// 429 or 503). A caller whose context is done at the end of the last
// attempt gets Canceled, even when the attempt also overran the timeout.
//
// # Priorities
//
// The shedder admits by priority (shed.Config.Priorities): a pipeline asks
// [Config.ShedPriority], when set, for each attempt's priority, with the
// caller's context; a server sets the priority in the request's context in
// an earlier middleware (a tenant's tier, a health check, a batch job) and
// reads it there. Without ShedPriority every attempt is priority 0 and
// nothing is asked: no cost.
//
// # Fallback
//
// [NewFallback] builds a [Fallback] around a pipeline from a
// [FallbackConfig]: [FallbackConfig.When] selects the endings it answers
// ([Endings]; by default [DefaultEndings]: a rejection by any policy, a
// timeout, this pipeline's retry giving up (Outcome.Policy Retry, never
// read from fn's error, which may carry a nested pipeline's give-up); fn's
// own errors only where
// [FallbackConfig.Failed] accepts them, never a cancellation unless When
// names [Cancellations]: a canceled caller wants no answer; never a panic),
// and the answer is a Value, a Func of the [Outcome], or the last good
// value ([FallbackConfig.Stale]) while it is no older than MaxAge on the
// pipeline's ticker. [Fallback.Call] and [Fallback.Try] keep fn's result
// type (no interface boxing); a success through them costs what [Call]
// costs, with no allocation (a Stale fallback stores the value: one clock
// read, one allocation and one atomic store per success at a new
// reading). When the fallback answers, the Outcome's FellBack is set, Code,
// Policy and RetryAfter still say how the call ended (so a server counts
// the rejection it answered), Cause is the error it ended with and Err the
// fallback's. [DoFallback] is the same for fn returning only an error:
// its Func returns the call's error, nil to answer it.
//
// # Statistics
//
// With [Config.CountStats] the pipeline counts every call by how it
// ended ([Pipeline.Stats]: by Code, rejections by Kind, the calls that
// panicked, the attempts), and each [Fallback] or [DoFallback] on it its
// answers ([FallbackStats]: by ending, stale values served and expired),
// for an operator's metrics. The counters are striped per P (each core adds
// to its own cache line, pinned to its P as sync.Pool's per-P pools are: no
// lock, no allocation; 128 B per P, allocated at New, and one overflow
// stripe for the Ps past them once GOMAXPROCS is raised); Stats sums
// them. A counting fallback allocates counters of its own, of the same
// size.
// Off, a call pays one branch on a field set at New. There is no latency
// histogram: the pipeline reads the clock only when a policy needs it, so a
// call's duration would cost an extra clock read on most pipelines.
//
// # Release exactly once
//
// Every permit taken for an attempt is released exactly once and every
// outcome recorded exactly once, on every path: success, error, rejection at
// any stage (the permits taken before the rejecting stage are released, the
// breaker's permit without a result), timeout, context cancellation, a panic
// in fn (recorded as a breaker failure, then re-raised unchanged, with its
// original stack), runtime.Goexit in fn (released the same way), and a
// panicking classifier (the same release, then the panic goes on).
//
// # For composition
//
// An adapter (package httpguard) reads the policies a pipeline was built
// with through [Pipeline.Config].
//
// # Concurrency
//
// A Pipeline is immutable after [New] and safe for concurrent use; so are
// the policies it holds, which may be shared with other pipelines (a breaker
// per dependency shared by several call sites, for instance).
//
// # Live reconfiguration
//
// The policies' Update methods reconfigure them while the pipeline runs:
// each call reads the policies' thresholds, limits, listeners and
// classifiers of the moment. New reads, once, only what chooses the
// pipeline's path and clock reads, and each policy's Update refuses, with
// a [*rampart.ConfigError] saying so, a change to it: every policy's
// Ticker; the breaker's [circuitbreaker.Breaker.MeasuresCalls] (a
// SlowCallDuration from or to 0, an OnSuccess or OnFailure from or to nil,
// that would flip it) and whether it has a Classify (from or to nil); the
// retry's NeedsTime (MaxDuration from or to 0, its Budget); the bulkhead's
// MayWait (MaxWait from or to 0); the adaptive limit's MayWait
// (Queue.MaxLength from or to 0) and its Classify; the timeout's Mode. A
// breaker that should time calls later is built with a SlowCallDuration no
// call reaches (an hour), lowered by an Update.
//
// # Zero value
//
// The zero Pipeline is not usable; call [New]. New(Config{}) returns a
// pipeline with no policy, which calls fn directly. The zero value of every
// policy type is not usable either: New returns a [*rampart.ConfigError]
// naming the field of a policy that its package's New did not build (such
// as &bulkhead.Bulkhead{}, which would otherwise reject every call with a
// nil error, or a zero rate limiter or timeout, which would panic in a
// call).
package pipeline
