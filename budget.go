package rampart

// Budget limits retries and hedges to a share of the traffic, as gRPC's
// retry throttling (A6) does: package retry's TokenBucket and RatioBudget
// implement it, and a user's type may too. A budget is shared: by the
// calls of one policy, and by a retry policy and a hedger that name the
// same budget. Policies call it; applications do not. The policy notifies
// it of each logical call and of each attempt's result, and asks it before
// each retry or hedge:
//
//   - OnRequest(now) once per logical call, before its first attempt;
//   - OnSuccess(now) after an attempt that succeeded;
//   - OnFailure(now) after an attempt that failed with a retryable error (a
//     retry policy's Decide calls it: do not call it again for the same
//     attempt; for a hedger, a non-fatal error);
//   - AllowRetry(now) before each retry or hedge: true grants it (and
//     counts it, for budgets that count retries), false refuses it.
//
// Every now is a reading of the calling policy's Ticker. Implementations
// must be safe for concurrent use.
type Budget interface {
	// OnRequest records the start of a logical call (not a retry).
	OnRequest(now int64)
	// OnSuccess records an attempt that succeeded.
	OnSuccess(now int64)
	// OnFailure records an attempt that failed with a retryable (for a
	// hedger, a non-fatal) error.
	OnFailure(now int64)
	// AllowRetry reports whether one more retry (or hedge) may start now,
	// and counts it when it may.
	AllowRetry(now int64) bool
}
