package pipeline

import (
	"errors"
	"time"
)

// ErrPanicked is the error a pipeline hands to its timeout when fn panics or
// calls runtime.Goexit; the breaker records a Failure (without consulting its
// Classify) and the adaptive limit frees the slot as Ignored. The panic
// itself is re-raised unchanged; ErrPanicked is never returned.
var ErrPanicked = errors.New("pipeline: fn panicked or called runtime.Goexit")

// Code says how a call through a pipeline ended.
type Code uint8

const (
	// OK: fn returned a nil error.
	OK Code = iota
	// Failed: fn returned an error (on the last attempt), returned unchanged
	// in Outcome.Err (Policy None), or the pipeline's retry gave up on an
	// error it would have retried (Policy Retry; Err is the retry's
	// give-up error, matching retry.ErrExhausted and wrapping fn's last
	// error).
	Failed
	// Rejected: a policy refused the attempt before fn ran. Outcome.Policy
	// says which one, Outcome.Err is its preallocated rejection error and
	// Outcome.RetryAfter hints when to come back. Also: the retry budget
	// refused a retry (Policy Retry; Err is the retry's give-up error,
	// matching retry.ErrBudget and rampart.ErrRejected and wrapping fn's
	// last error).
	Rejected
	// TimedOut: the pipeline's timeout expired during the last attempt.
	// Outcome.Err is the timeout's error.
	TimedOut
	// Canceled: the caller's context was done before or during the last
	// attempt, or during a sleep between attempts, whatever else the
	// attempt ran into (an attempt that also overran the timeout is
	// Canceled, not TimedOut, with a retry or without). Outcome.Err is the
	// context's error or fn's (the timeout's, when it replaced fn's; with a
	// retry, the retry's give-up wrapping it and the context's error).
	Canceled
)

var codeNames = [...]string{OK: "ok", Failed: "failed", Rejected: "rejected", TimedOut: "timed out", Canceled: "canceled"}

// String returns the code's name ("ok", "rejected", ...).
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "unknown"
}

// Kind names a kind of policy in a pipeline.
type Kind uint8

const (
	// None: no policy (the outcome was not decided by a policy).
	None Kind = iota
	// Retry: the retry policy or its budget.
	Retry
	// Breaker: the circuit breaker.
	Breaker
	// RateLimit: the rate limiter.
	RateLimit
	// Bulkhead: the bulkhead.
	Bulkhead
	// Adaptive: the adaptive concurrency limit.
	Adaptive
	// Timeout: the timeout.
	Timeout
	// Shed: the overload shedder (package shed).
	Shed
)

var kindNames = [...]string{None: "none", Retry: "retry", Breaker: "circuitbreaker", RateLimit: "ratelimit", Bulkhead: "bulkhead", Adaptive: "adaptive", Timeout: "timeout", Shed: "shed"}

// String returns the policy package's name ("circuitbreaker", ...), or "none".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Outcome is the result of [Pipeline.Try] and [TryCall]: what [Pipeline.Do]
// would have returned as an error, plus why and when to come back. It is a
// value; producing one allocates nothing.
type Outcome struct {
	// Err is the error Do would have returned: nil when Code is OK, the
	// user's error unchanged when Failed, a policy's preallocated rejection
	// error when Rejected (matching rampart.ErrRejected), the timeout's
	// error when TimedOut, the context's (or fn's) error when Canceled.
	Err error
	// RetryAfter is a hint of when a new call may be admitted: the rate
	// limiter's wait or the breaker's remaining open time on a rejection, a
	// hint carried by the error (a retry.RetryAfterHint, such as an
	// HTTP Retry-After) on a failure, 0 when
	// there is none.
	RetryAfter time.Duration
	// Attempts counts the attempts made, rejected ones included.
	Attempts int32
	// Code says how the call ended.
	Code Code
	// Policy is the policy that decided the ending: the rejecting policy
	// of a Rejected outcome, Timeout for TimedOut, Retry for a Failed one
	// the retry gave up on ([RetriesExhausted]); None for a success, for
	// fn's own failure (even one whose error carries another pipeline's
	// give-up) and for a cancellation.
	Policy Kind
	// FellBack: a [Fallback] (or [DoFallback]) answered the call. Code,
	// Policy, RetryAfter and Attempts still say how the call through the
	// policies ended (a rejected call is Rejected, by its Policy, and
	// counted so in that policy's Stats), Cause holds the error it ended
	// with, and Err is the fallback's answer: nil when it gave a value.
	FellBack bool
	// Stale: the fallback answered with the last good value (see
	// [FallbackConfig.Stale]), no older than its MaxAge.
	Stale bool
	// Cause is, when FellBack is set, the error the call ended with before
	// the fallback answered: what Err would have been without it. Nil
	// otherwise.
	Cause error
}
