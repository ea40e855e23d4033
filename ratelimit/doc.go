// Package ratelimit limits the rate of admissions with GCRA (the generic
// cell rate algorithm): exact, lock-free, allocation-free, and immune to
// stale timestamps.
//
// # Algorithm
//
// A [Limiter] holds one word, alone on its cache line: the theoretical
// arrival time (TAT), the instant at which the limiter would be back to a
// full burst. With emission interval T (1/rate) and tolerance τ = burst·T, a
// request for n permits at time now is admitted when
//
//	max(TAT, now) + n·T − now ≤ τ
//
// and then TAT becomes max(TAT, now) + n·T with one compare-and-swap. A
// rejection only reads the word, so an overloaded limiter does not bounce
// its cache line between cores. Token-bucket and limit-per-period
// configurations are the same thing in other words (see [Config]).
//
// Exactness: the emission interval is kept as an exact fraction (period/limit
// nanoseconds, counted as a whole number of sub-nanosecond units, clock
// readings converted exactly), so rounding never accumulates: over any window
// of length W a limiter admits at most burst + rate·W + 1 permits, and the
// n-th slot of a saturated limiter is n·period/limit rounded up to the
// nanosecond for any n, however long it runs. Time never moves backwards: the TAT only grows, so a caller whose
// now is older than other callers' cannot create credit (x/time/rate's
// golang/go#71360); a stale now counts as an early arrival.
//
// # Which method
//
//   - Fail fast: [Limiter.Allow] (reads the ticker), or [Limiter.AllowN] /
//     [Limiter.TryAcquire] with a now shared with other policies;
//     TryAcquire also tells how long to wait when it rejects.
//   - Wait: [Limiter.Wait] blocks until admitted, or fails at once when the
//     wait would pass the context's deadline.
//   - Schedule: [Limiter.Reserve] commits permits at a future time and
//     returns the delay; [Reservation.Cancel] gives them back when that is
//     exact (see its rule).
//   - Per client or tenant: [Keyed], one limit per key, bounded, idle keys
//     evicted.
//   - Extreme contention: [Sharded], K independent limiters of rate/K.
//
// # Zero value and concurrency
//
// The zero Limiter is not usable: create one with [New] (or [NewKeyed],
// [NewSharded]). Every method is safe for concurrent use. The rate and burst
// can be changed at run time ([Limiter.SetRate], [Limiter.SetLimit],
// [Limiter.SetBurst]); admission never takes a lock.
package ratelimit
