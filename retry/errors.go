package retry

import (
	"errors"
	"strconv"
	"time"

	"github.com/rampart-go/rampart"
)

// ErrExhausted matches, through errors.Is, every give-up error of a Policy
// (an [*ExhaustedError]): the limits or the budget stopped the retries while
// the last error was still retryable. The user's last error stays reachable
// through errors.Is / errors.As on the same value.
var ErrExhausted = errors.New("retries exhausted")

// ErrBudget matches, through errors.Is, a give-up caused by a [Budget] that
// refused the retry. Such an error also matches [ErrExhausted] and
// [rampart.ErrRejected].
var ErrBudget = errors.New("retry budget exhausted")

// ErrRetryResult is the "last error" of a give-up caused by [CallIf]'s result
// predicate: the last attempt returned no error but a result the predicate
// still wanted to retry. Pass it to [Policy.Decide] as the error of an
// attempt whose result the caller wants retried; it is always retryable.
var ErrRetryResult = errors.New("result rejected by the retry predicate")

// Stop is the outcome of [Policy.Decide]: [Continue] (retry after the
// returned delay) or the reason to stop.
type Stop uint8

const (
	// Continue means: sleep the returned delay, then try again.
	Continue Stop = iota
	// NotRetryable means the error must not be retried (a [Permanent]
	// error, or Config.ShouldRetry said no; the loops of [Policy.Do],
	// [CallIf] and package pipeline also stop with it on the caller's own
	// context error, see [Policy.Decide]). Return the error as it is:
	// [Policy.GiveUp] does.
	NotRetryable
	// MaxAttempts means Config.MaxAttempts attempts have been made.
	MaxAttempts
	// MaxDuration means the next attempt would start after
	// Config.MaxDuration since the first one.
	MaxDuration
	// Deadline means the delay would end at or after the context deadline.
	Deadline
	// HintTooLong means the error's [RetryAfterHint] exceeds MaxDelay.
	HintTooLong
	// BudgetRefused means the [Budget] refused the retry.
	BudgetRefused
	// Canceled means the context was done before the next attempt (pass the
	// context's error as the cause to [Policy.GiveUp]).
	Canceled
)

var stopNames = [...]string{"continue", "not retryable", "max attempts", "max duration",
	"deadline", "retry-after hint too long", "budget refused", "canceled"}

// String returns a short description ("max attempts").
func (s Stop) String() string {
	if int(s) < len(stopNames) {
		return stopNames[s]
	}
	return "stop(" + strconv.Itoa(int(s)) + ")"
}

// ExhaustedError is the give-up error: the policy stopped retrying while the
// last error was still retryable. It matches [ErrExhausted] through
// errors.Is, unwraps to the user's last error (so errors.Is / errors.As reach
// it), matches [ErrBudget] and [rampart.ErrRejected] when a budget refused,
// and matches the context's error when the context ended the retries.
// It is allocated only on give-up and formatted only when Error is called.
type ExhaustedError struct {
	name     string
	attempts int
	reason   Stop
	last     error
	cause    error
}

// Error returns e.g. `retry "db": gave up after 3 attempts (max attempts):
// connection refused`. Each part reads once: a give-up because the context
// ended names the context's error as the reason (`(context deadline
// exceeded)`, not `(canceled)`), and the last error follows only when its
// text says more than that reason.
func (e *ExhaustedError) Error() string {
	s := "retry"
	if e.name != "" {
		s += " " + strconv.Quote(e.name)
	}
	s += ": gave up after " + strconv.Itoa(e.attempts) + " attempt"
	if e.attempts != 1 {
		s += "s"
	}
	why := e.reason.String()
	if e.cause != nil {
		why = e.cause.Error()
	}
	s += " (" + why + ")"
	if e.last != nil {
		if last := e.last.Error(); last != why {
			s += ": " + last
		}
	}
	return s
}

// Unwrap returns the user's last error.
func (e *ExhaustedError) Unwrap() error { return e.last }

// Is reports whether target is [ErrExhausted], the budget sentinels for a
// budget refusal, or the context error that ended the retries.
func (e *ExhaustedError) Is(target error) bool {
	switch {
	case target == ErrExhausted:
		return true
	case e.reason == BudgetRefused && (target == ErrBudget || target == rampart.ErrRejected):
		return true
	case e.cause != nil && target != nil:
		return errors.Is(e.cause, target)
	}
	return false
}

// Attempts returns the number of attempts made.
func (e *ExhaustedError) Attempts() int { return e.attempts }

// Reason returns why the policy stopped.
func (e *ExhaustedError) Reason() Stop { return e.reason }

// Last returns the user's last error (the same as Unwrap).
func (e *ExhaustedError) Last() error { return e.last }

// permanentError marks an error as not retryable.
type permanentError struct{ err error }

func (p *permanentError) Error() string { return p.err.Error() }
func (p *permanentError) Unwrap() error { return p.err }

// Permanent marks err as not retryable: a Policy returns it at once,
// unwrapped (Do returns err itself, not the marker). It may be wrapped
// further (fmt.Errorf("...: %w", retry.Permanent(err))); the policy finds the
// marker anywhere in the chain. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err carries the [Permanent] marker.
func IsPermanent(err error) bool {
	_, ok := errors.AsType[*permanentError](err)
	return ok
}

// RetryAfterHint is implemented by errors that carry a server's hint of
// when to retry (an HTTP Retry-After, a gRPC pushback). The policy finds it
// anywhere in the error chain; a non-negative hint replaces the backoff delay
// of that retry, bounded by MaxDelay (a longer hint stops the retries with
// [HintTooLong]), Config.MaxDuration and the deadline. A negative hint is
// ignored.
type RetryAfterHint interface {
	error
	RetryAfter() time.Duration
}

type hintError struct {
	err   error
	after time.Duration
}

func (h *hintError) Error() string             { return h.err.Error() }
func (h *hintError) Unwrap() error             { return h.err }
func (h *hintError) RetryAfter() time.Duration { return h.after }

// WithRetryAfter returns err annotated with a retry-after hint of d, for
// callers that parse the hint themselves (an HTTP client reading
// Retry-After). WithRetryAfter(nil, d) is nil.
func WithRetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &hintError{err, d}
}
