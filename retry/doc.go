// Package retry runs an operation again after a failure, with a backoff
// between attempts, limits that always hold, and budgets that keep retries
// from turning an outage into a retry storm.
//
// Build a [Policy] with [New] and run the operation through [Policy.Do] (or
// the typed [Call], or [CallIf] to retry on a result too); share one budget
// ([NewTokenBucket] or [NewRatioBudget], set as Config.Budget) between the
// policies that call one dependency. A pipeline, or a caller that writes its
// own retry loop, uses the methods under For composition.
//
// # Which method to use
//
//   - [Policy.Do] and [Call] / [CallIf]: run a function with retries.
//   - [Policy.Decide], [Policy.Sleep] and [Policy.GiveUp]: the primitives package pipeline is built on; the
//     caller keeps the attempt count, the start time and the previous delay,
//     and reads the start only when [Policy.NeedsTime] says it is used.
//
// # Algorithm
//
// After attempt n fails with a retryable error, the policy waits delay(n) and
// tries again, until one of the limits stops it: Config.MaxAttempts attempts
// in all, Config.MaxDuration since the first attempt, the context's deadline
// (a delay that would end at or after the deadline is never slept: the policy
// gives up at once), or a [rampart.Budget] that refuses the retry. The delay kinds
// (see [Backoff]) follow the AWS "Exponential Backoff and Jitter" article;
// all arithmetic is int64 nanoseconds that saturates instead of overflowing:
//
//	exp(n)              = min(MaxDelay, BaseDelay × Multiplier^(n-1))
//	Constant            = BaseDelay
//	Linear              = min(MaxDelay, BaseDelay + (n-1) × Increment)
//	Exponential         = exp(n)
//	FullJitter          = uniform[0, exp(n)]
//	EqualJitter         = exp(n)/2 + uniform[0, exp(n)/2]
//	DecorrelatedJitter  = min(MaxDelay, uniform[BaseDelay, prev × Multiplier]), prev₀ = BaseDelay
//
// An error that carries a server hint ([RetryAfterHint], e.g. an HTTP 429/503
// Retry-After) replaces the backoff for that retry; the hint is still bounded
// by the limits above and by MaxDelay (a longer hint gives up).
//
// What is retried: every error except those marked with [Permanent],
// unless Config.ShouldRetry decides otherwise (a Permanent error is never
// retried), and nothing once the caller's context is done. A context error
// is therefore final only when it is the caller's: an attempt that ended
// because the caller's context did (its error matches ctx.Err() through
// errors.Is) comes back as it is, like a non-retryable error; any other
// error of an attempt the caller gave up on comes back in an
// [*ExhaustedError] ([Canceled]) that matches both it and the context's
// error. An attempt's own timeout while the caller is live (a pipeline's
// per-attempt Timeout, whose error matches context.DeadlineExceeded, or a
// callee's own context.WithTimeout) is retried, as Polly retries its
// TimeoutRejectedException and resilience4j its TimeLimiter's
// TimeoutException. The loop checks the context, not ShouldRetry, which
// sees only the error.
// The typed form [CallIf] adds a predicate on the result (retry on a 503
// response). A call whose context is already done runs nothing: [Policy.Do],
// [Call] and [CallIf] return the context's error as it is, without touching
// the budget, as package pipeline does.
//
// Budgets ([TokenBucket]: gRPC A6 retry throttling; [RatioBudget]: the SRE
// book's retry ratio) are shared by every policy (and hedger) that calls the
// same dependency, so that the retries of all callers together stay a small
// fraction of the traffic.
//
// # Choosing a budget
//
// The two budgets treat a steady failure rate differently. A [TokenBucket]
// stops retrying once failures are common: gRPC A6 takes a dependency that
// fails often for an overloaded one, which retries would only load more.
// Each failed attempt takes 1 token and each success gives TokenRatio back,
// so with a share p of attempts failing the count moves by
// TokenRatio × (1 − p) − p per attempt, and drains when
//
//	p > TokenRatio / (1 + TokenRatio)
//
// whatever MaxAttempts (retries are attempts too). With the defaults
// (MaxTokens 10, TokenRatio 0.1) that is 0.1 / 1.1 = 1/11 ≈ 9.1 % of
// attempts: past it the count sinks towards 0 and cannot climb back above
// MaxTokens/2 = 5, below which no retry is granted, so retries stop
// altogether while the rate lasts. Only 5 tokens separate a full bucket
// from that threshold, so random failures already cost retries below the
// cut-off: with MaxAttempts 3 and independent failures, the defaults grant
// nearly every retry at 5 %, about a fifth of them at 10 % and none at 20 %.
//
// A [RatioBudget] caps retries instead of stopping them: at most Ratio ×
// requests (+ MinRetries) per window, whatever the failure rate. A
// dependency that fails at random keeps its retries up to the cap; one that
// is down gets at most Ratio more load, not none. With MaxAttempts m and a
// share p of attempts failing at random, a call wants
// p + p² + … + p^(m−1) retries on average, and every one is granted while
// that is at most Ratio.
//
// For random failures of a dependency that is not overloaded (a flaky
// network, one bad replica behind a balancer), size the budget for the rate
// to absorb. Up to 20 % with MaxAttempts 3, a call wants 0.2 + 0.2² = 0.24
// retries:
//
//	budget, err := retry.NewRatioBudget(retry.RatioBudgetConfig{Ratio: 0.25})
//
// grants them all up to p = (√2 − 1)/2 ≈ 20.7 % (where p + p² = 0.25),
// and above it still grants 0.25 retries per call: during an outage the
// retries add at most 25 % to the load. A token bucket with a larger ratio
// moves A6's cut-off instead (TokenRatio 0.5: 0.5 / 1.5 = 33 %; TokenRatio
// 1: 50 %) but still stops retrying past it, which is the behaviour to keep
// when a high failure rate means overload.
//
// # Cost
//
// A first attempt that succeeds costs a check of the context (ctx.Err(): an
// atomic load for the standard library's contexts), one comparison (err ==
// nil), no allocation, and no clock read unless Config.MaxDuration is set or a
// [RatioBudget] is attached (it counts requests per time bucket). With a
// [TokenBucket] it adds one atomic load (and an add only while the bucket is
// not full). The attempt count, the last error and the backoff state live in
// the caller's locals: a Policy holds no per-call state. Retrying allocates a
// timer per sleep; giving up allocates the [ExhaustedError].
//
// # Live reconfiguration
//
// [Policy.Update] takes a whole Config (the one New was given, or
// [Policy.Config]'s, the configuration in force with its defaults filled
// in, changed),
// validates it exactly as New does (zero fields mean the same defaults),
// and applies it while calls run, or refuses it with a *rampart.ConfigError
// naming the field and changes nothing. The configuration is one immutable
// object that Do, Call and CallIf load once, when the first attempt of a
// call fails (the first attempt reads only fields fixed at construction,
// without the load), and keep for every retry of it: a call runs wholly
// under the old configuration or wholly under the new one. Each of the primitives
// (Decide, GiveUp, Retryable, NeedsTime, MaxAttempts, Budget) loads it
// once too, so a caller that runs its own loop (package pipeline) sees an
// Update from its next step. The counters (Stats) are kept.
//
//   - MaxAttempts, Backoff, BaseDelay, MaxDelay, Multiplier, Increment,
//     ShouldRetry, Rand, OnRetry, OnGiveUp, OnBudgetRefused: updatable.
//   - MaxDuration: updatable between positive values; from or to 0 it is
//     fixed: it decides whether a call reads the clock at its start
//     (NeedsTime), which a caller of the primitives reads once per call,
//     and a start never read would count as one long ago.
//   - Name: fixed: it names the instance in the give-up errors already
//     returned and to whoever observes them; a renamed policy is another
//     policy. An empty Name keeps it (a registry names the policies it
//     builds from a Config without one, and that Config, changed, is
//     accepted).
//   - Ticker: fixed: the calls in flight measure MaxDuration and the
//     deadline in readings of that clock, and the budget shares it.
//   - Budget: fixed: a call's request, outcomes and retries are charged to
//     one budget, which a caller of the primitives holds across the call;
//     the budget is shared with the other policies of the dependency.
//
// Update allocates the new configuration (one object); calls still
// allocate nothing.
//
// # For composition
//
// A pipeline, or a caller that writes its own retry loop, uses
// [Policy.Budget], [Policy.NeedsTime], [Policy.Retryable], [Policy.Decide],
// [Policy.GiveUp], [Policy.Deadline], [Policy.Sleep] and [Policy.Ticker].
// Applications call [Policy.Do], [Call] and [CallIf].
//
// # Zero value and concurrency
//
// The zero Policy is not usable; build with [New] (its first failed attempt
// would panic). Nor are the zero [TokenBucket] (it would never grant a
// retry) and [RatioBudget] (it would divide by zero): build them with
// [NewTokenBucket] and [NewRatioBudget]; New, and package hedge's New,
// refuse a nil or zero one as Config.Budget. A Policy and the budgets are
// safe for concurrent use by any number of goroutines and are meant to be
// shared (one per dependency).
package retry
