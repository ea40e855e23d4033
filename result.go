package rampart

import "math"

// NotRead is the clock reading that means "the clock was not read". A
// caller passes it as now to a method that accepts it (a closed breaker's
// AcquireAt, a timeout's FinishAt, ...) when it has no reading and the
// decision needs none; the policy then reads its own Ticker if it must.
// It is math.MinInt64, which no real clock reads: rampart's tickers start
// at 0 or later, except a ManualTicker told to start (or set) there, whose
// reading of math.MinInt64 is indistinguishable from not read.
const NotRead int64 = math.MinInt64

// Result is the classification of one call's outcome, the one enum every
// policy that learns from results shares. Each policy maps an error to it
// with its own Classify (a method, and a Config.Classify field) and says
// what each value means to it: for a circuit breaker, Failure counts
// against the breaker's health; for an adaptive concurrency limiter, Failure
// is a drop (a timeout or an overload), and an application error is a
// Success (the dependency answered). A value other than the three constants
// counts as Failure.
type Result uint8

const (
	// Success is a call that completed: a healthy call to a breaker, a
	// latency sample to an adaptive limiter.
	Success Result = iota
	// Failure is a call that counts against the dependency: an unhealthy
	// call to a breaker, a drop (timeout or overload) to an adaptive limiter.
	Failure
	// Ignored is a call that says nothing about the dependency (the caller
	// cancelled, say): it frees its permit and is not counted.
	Ignored
)

var resultNames = [...]string{"success", "failure", "ignored"}

// String returns "success", "failure" or "ignored" ("invalid" for any other
// value).
func (r Result) String() string {
	if int(r) < len(resultNames) {
		return resultNames[r]
	}
	return "invalid"
}
