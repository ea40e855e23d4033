// Package rampart is the root of a resilience library: circuit breaker, rate
// limiter, bulkhead, retry, timeout, hedging and adaptive concurrency limits,
// one package each, composed by package pipeline in a fixed order.
//
// This package holds what every policy shares: the clock ([Ticker] and its
// implementations), the root rejection sentinel [ErrRejected], and the
// configuration error [ErrInvalidConfig].
//
// # Conventions every policy follows
//
// Time. Every time-dependent operation takes the current time as an int64
// count of monotonic nanoseconds from a [Ticker] (AcquireAt(now), Record(p,
// now, err), AdmitN(now, n)). A method without the time argument is a
// one-line shorthand that reads the policy's own ticker. Readings from
// different tickers are not comparable, so a pipeline and its policies share
// one ticker (the pipeline checks this). A zero Config.Ticker means
// [DefaultTicker]. Tests hand a [ManualTicker] to the policy and move time by
// hand; tests under testing/synctest create their ticker inside the bubble.
//
// Rejections. Each policy package declares sentinels (circuitbreaker.ErrOpen,
// bulkhead.ErrFull, ...). Each policy instance builds its rejection errors
// once, at construction, with [NewRejectedError], so a rejection allocates
// nothing and formats nothing. The error carries the policy kind and the
// instance's name and matches both its package sentinel and [ErrRejected]:
//
//	errors.Is(err, circuitbreaker.ErrOpen) // this breaker is open
//	errors.Is(err, rampart.ErrRejected)    // some policy refused the call
//
// A rejection never wraps, replaces or hides the user's own error: errors
// returned by the protected function come back unchanged.
//
// Listeners. A listener is a func field of a policy's Config, nil when
// absent; an absent listener costs a nil check on a field set at
// construction. Listeners take primitive arguments, never event structs. A
// listener that panics is recovered and counted in the policy's stats
// (ListenerPanics); it never breaks the call that notified it. Listeners run
// on the caller's goroutine, synchronously: keep them short.
//
// Configuration. Each policy has a Config struct whose zero fields mean
// documented defaults, and a New(Config) constructor that returns a
// [*ConfigError] (matching [ErrInvalidConfig]) for any invalid value: a
// negative rate, a zero window, a threshold above 100 %, a nil function that
// is required. A policy that New accepted never panics on its hot path.
//
// Hot paths. Admission and release are allocation-free and lock-free
// (sync/atomic only); words written by every call sit alone on a cache line;
// the clock is read only when a decision needs it. Allocation budgets are
// tests (testing.AllocsPerRun) and speed is measured in the separate bench
// module against the peer libraries.
package rampart
