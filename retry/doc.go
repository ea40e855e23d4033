// Package retry runs an operation again after a failure, with a backoff
// between attempts, limits that always hold, and budgets that keep retries
// from turning an outage into a retry storm.
//
// # Algorithm
//
// After attempt n fails with a retryable error, the policy waits delay(n) and
// tries again, until one of the limits stops it: Config.MaxAttempts attempts
// in all, Config.MaxDuration since the first attempt, the context's deadline
// (a delay that would end at or after the deadline is never slept: the policy
// gives up at once), or a [Budget] that refuses the retry. The delay kinds
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
// What is retried: every error except context.Canceled,
// context.DeadlineExceeded and errors marked with [Permanent], unless
// Config.ShouldRetry decides otherwise (a Permanent error is never retried).
// The typed form [CallIf] adds a predicate on the result (retry on a 503
// response).
//
// Budgets ([TokenBucket]: gRPC A6 retry throttling; [RatioBudget]: the SRE
// book's retry ratio) are shared by every policy (and hedger) that calls the
// same dependency, so that the retries of all callers together stay a small
// fraction of the traffic.
//
// # Cost
//
// A first attempt that succeeds costs one comparison (err == nil), no
// allocation, and no clock read unless Config.MaxDuration is set or a
// [RatioBudget] is attached (it counts requests per time bucket). With a
// [TokenBucket] it adds one atomic load (and an add only while the bucket is
// not full). The attempt count, the last error and the backoff state live in
// the caller's locals: a Policy holds no per-call state. Retrying allocates a
// timer per sleep; giving up allocates the [ExhaustedError].
//
// # Which method to use
//
//   - [Policy.Do] and [Call] / [CallIf]: run a function with retries.
//   - [Policy.Decide] (and the yes/no shorthand [Policy.Next]), [Policy.Sleep]
//     and [Policy.GiveUp]: the primitives package pipeline is built on; the
//     caller keeps the attempt count, the start time and the previous delay,
//     and reads the start only when [Policy.NeedsTime] says it is used.
//
// # Zero value and concurrency
//
// The zero Policy is not usable; create one with [New]. A Policy and the
// budgets are safe for concurrent use by any number of goroutines and are
// meant to be shared (one per dependency).
package retry
