// Package rampart is the root of a resilience library: circuit breaker, rate
// limiter, bulkhead, retry, timeout, hedging and adaptive concurrency limits,
// one package each, composed by package pipeline in a fixed order.
//
// Start in a policy package: build the policy with its New(Config) and run
// each call through its Do (or the typed Call); to stack several policies,
// build a pipeline.Pipeline with pipeline.New and call its Do. Code in this
// package is called by the policies more than by applications: a test hands
// a [ManualTicker] to Config.Ticker, and code that inspects an error asks
// errors.Is(err, [ErrRejected]) or errors.Is(err, [ErrInvalidConfig]).
//
// This package holds what every policy shares: the clock ([Ticker] and its
// implementations, [NotRead]), the classification of a call ([Result]), the
// retry budget that retries and hedges obey ([Budget]), the root rejection
// sentinel [ErrRejected], and the configuration error [ErrInvalidConfig].
//
// # Conventions every policy follows
//
// Time. A clock reading is an int64 count of monotonic nanoseconds from a
// [Ticker]; [NotRead] means "the clock was not read". A duration is a
// time.Duration. A method that takes a reading is named XAt (AcquireAt(now),
// ReleaseAt(p, now, r), StartAt(parent, now)) and has a one-line shorthand X
// that reads the policy's own Ticker, and only when the decision needs it,
// as in golang.org/x/time/rate (Allow / AllowN, Reserve / ReserveN). Readings
// from different tickers are not comparable, so a pipeline and its policies
// share one ticker (the pipeline checks this). A zero Config.Ticker means
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
// (sync/atomic only); words that many goroutines write on every call sit on
// their own cache lines (or not, with a policy's Config.Compact, for many
// cold instances); the clock is read only when a decision needs it. Allocation budgets are
// tests (testing.AllocsPerRun) and speed is measured in the separate bench
// module against the peer libraries.
//
// # Vocabulary
//
// Every package uses these names for these meanings, and no other.
//
//	concept                name (shorthand / explicit time)             where                      why it differs
//	---------------------  -------------------------------------------  -------------------------  ------------------------------------------
//	a clock reading        now int64 from Ticker(); NotRead             all                        one monotonic int64, not a time.Time,
//	                                                                                               comparable within one Ticker only
//	a duration             time.Duration                                all Configs, waits
//	time-taking method     X(...) / XAt(..., now, ...)                  all                        x/time/rate's rule; rate limits keep its
//	                                                                                               N-names (AllowN, ReserveN) and DelayFrom
//	take a permit          Acquire() / AcquireAt(now) (Permit, error)   circuitbreaker, adaptive   bulkhead: Acquire() error (no permit
//	                       AcquireWait(ctx) / AcquireWaitAt(ctx, now)   adaptive                   value, no clock at admission);
//	                       AcquireWait(ctx) error                       bulkhead                   AcquireWait waits for a free permit
//	                       AcquirePartition(p) / AcquirePartitionAt     adaptive (partitions)      a partition is a guaranteed share
//	                       AcquirePriority(p) / AcquirePriorityAt       shed                       a priority gives way first (lowest shed
//	                                                                                               first); shed also has Acquire/AcquireAt
//	give it back           Release(p, r) / ReleaseAt(p, now, r)         circuitbreaker, adaptive,  bulkhead: Release() (nothing learnt)
//	                                                                    shed
//	the permit value       Permit                                       circuitbreaker, adaptive,
//	                                                                    shed
//	classify an error      Classify(err) Result; Config.Classify        circuitbreaker, adaptive   adaptive's takes ctx (cancellation)
//	a call's result        Result: Success, Failure, Ignored            root                       adaptive: Failure is a drop
//	record a result        Record(accepted) / RecordAt(now, accepted)   adaptive.Throttler         no permit is held
//	rate: take, no wait    Allow() / AllowN(now, n) bool                ratelimit                  a rate limit gives nothing back:
//	rate: take or say      Admit() / AdmitN(now, n) time.Duration       ratelimit                  no Acquire/Release; Admit returns 0 or
//	  how long                                                                                     the wait (the Retry-After hint)
//	rate: reserve          Reserve(maxWait) / ReserveN(now, n, maxWait) ratelimit.Limiter          x/time/rate has no maxWait argument
//	rate: wait             Wait(ctx) / WaitN(ctx, n)                    ratelimit.Limiter          no reading: it sleeps on real time
//	rate: tokens           Tokens() / TokensAt(now)                     ratelimit.Limiter
//	rate: reconfigure      SetRate / SetRateAt, SetLimit / SetLimitAt,  ratelimit.Limiter          x/time/rate's Limit (events/s) is our
//	                       SetBurst / SetBurstAt                                                   Rate (Config.Rate); our Limit is a count
//	                                                                                               per Config.Period
//	reservation            Delay() / DelayFrom(now), Cancel() /         ratelimit.Reservation      Cancel reports whether the permits
//	                       CancelAt(now)                                                           came back
//	bracket a timed call   Start(parent) / StartAt(parent, now),        timeout                    a timeout refuses nothing and holds no
//	                       Finish(h, err) / FinishAt(h, now, err)                                  permit; Finish returns the verdict
//	hedge                  Do, Call; DoAtHeld, CallAtHeld (composition) hedge
//	                       Observe(latency) / ObserveAt(now, latency)
//	budget                 Budget: OnRequest, OnSuccess, OnFailure      root (retry, hedge)        called by policies, not users: notified
//	                       notified; AllowRetry asked                                              (On...) and asked (Allow...)
//	run fn under a policy  Do(ctx, fn) error; Call[T](ctx, p, fn)       all
//	outcome API            Try(ctx, fn) Outcome; TryCall[T]; ...Hedged  pipeline                   the only meaning of Try
//	fallback               NewFallback(FallbackConfig[T]): Call, Try,   pipeline                   bound to one pipeline: a stale value's
//	                       CallHedged, TryHedged; NewDoFallback: Do,                               age is read on its Ticker; outermost
//	                       Try; Outcome.FellBack, Outcome.Cause
//	which endings          Endings: Rejections, RejectionsBy(kinds),    pipeline, httpguard        what a fallback answers; cancellations
//	                       Timeouts, RetriesExhausted, Failures,                                   only when asked for
//	                       Cancellations
//	rejection error        RejectedError() error; ErrX sentinels;       all                        preallocated, matches ErrRejected
//	                       ErrRejected
//	listener               On<Event> func field: OnRejected,            all Configs                primitive arguments
//	                       OnBudgetRefused, OnOverload(on), ...
//	stats                  Stats() Stats: Rejected, Admitted,           all                        counts of outcomes are participles,
//	                       BudgetRefused, PeakInFlight, ListenerPanics                             counts of events plural nouns (Retries)
//	accessors              Ticker(), Stats(), Config() (the              all; Config() where        the name is in Config and in the errors;
//	                       configuration in force, defaults filled in)  Update is (not shed)       no Name()
//	reconfigure live       Update(Config) error                         every policy but shed      validated as New validates; a field fixed
//	                                                                                               at construction is a ConfigError saying
//	                                                                                               why; an empty Name keeps the name; the
//	                                                                                               state is kept
//	opt-in counters        Config.CountStats                            ratelimit, circuitbreaker, off: no shared write on the call path
//	                                                                    pipeline
//	named instances        registry.Registry: Add, Get, Range;          registry                   Range is what exporters and status pages
//	                       registry.Breaker(r, name, c), ...                                       read
//
// # For composition
//
// Each policy package lists under a "For composition" heading the methods
// that exist so that a pipeline (or an adapter such as package httpguard or
// the Redis limiter) can share one clock reading and one classification
// between policies. Applications call Do, Call and the shorthands.
package rampart
