// Package hedge cuts tail latency by hedging: when an idempotent call has not
// finished after a delay, it starts another attempt of the same call; the
// first success wins and the losers' contexts are cancelled (Dean and
// Barroso, "The Tail at Scale"; gRPC A6 hedging).
//
// # Which method to use
//
// Build a [Hedger] with [New] and call [Hedger.Do] (or the typed [Call]) for
// each call that may be hedged; a pipeline uses the methods under For
// composition. Hedging is opt-in per call: calling Do or
// Call is the caller's promise that fn is idempotent (running it twice, or
// abandoning one run half way, is harmless). A call that must not be
// repeated goes around the Hedger, and may still feed its latency
// percentile with [Hedger.Observe]. [Hedger.DoAtHeld] and [CallAtHeld] take the
// start time from a caller that has just read the hedger's ticker (a
// pipeline), saving the call's clock read; [Hedger.Delay] reports the
// current delay.
//
// # Algorithm
//
// The first attempt runs on the caller's goroutine. Before it starts, the
// call arms a deadline (start + delay) on a shared watchdog (one goroutine
// for the library that sweeps a slot table, internal/watchdog). If the
// attempt returns first, the call disarms the slot and returns: no goroutine
// is started, no timer is created and nothing is allocated (see "Cost"). If
// the deadline passes first, the watchdog starts a hedge attempt on a new
// goroutine (and, with MaxHedges > 1, arms the next deadline); the first
// attempt to succeed, or to fail with a fatal error, decides the race, and
// every other attempt's context is cancelled.
//
// Because the first attempt runs on the caller's goroutine, the caller
// returns only when the first attempt returns. When a hedge wins, the first
// attempt's context is cancelled, so the caller returns as soon as the
// callee honours the cancellation: hedging helps callees that honour
// context cancellation (net/http, gRPC, database drivers do). For callees
// that do not, set [Config.AsyncFirst]: the first attempt then runs on its
// own goroutine too and the caller returns as soon as any attempt wins, at
// the price of a goroutine and a few allocations on every call.
//
// The delay is fixed ([Config.Delay]) or a live latency percentile
// ([Config.Percentile], e.g. 0.95) read from a lock-free log-linear histogram
// of the first attempts' latencies (internal/histogram: one atomic add per
// call, quantiles within 1/32 above the exact value). The percentile is
// recomputed every [Config.Refresh] by whichever call first notices the
// period has passed, clamped to [MinDelay, MaxDelay]; the histogram is halved
// at each refresh once it holds 2×WarmUp samples, so it follows a shifting
// distribution with a half-life of one Refresh. Until WarmUp samples exist,
// the delay is Config.Delay (no hedging when that is zero). The latency of a
// first attempt that was cancelled because a hedge won is recorded as the
// time it ran (a lower bound of its real latency): the share of recorded
// latencies above the delay is therefore the share of hedged calls, and a
// p95 delay keeps hedges near 5 % of calls.
//
// # Errors
//
// An attempt that succeeds wins. An attempt that fails with an error for
// which [Config.Fatal] reports true (every error when Fatal is nil, as in
// gRPC with no non-fatal codes) also decides the race: its error is returned
// and the other attempts are cancelled. A non-fatal error lets the other
// attempts go on; when every started attempt has failed, the call returns
// the last error. A failure of the first attempt before the delay returns
// at once (hedging is not retrying: compose with package retry for that).
// The user's error is returned unchanged. When the caller's context ends,
// the call ends with its error as soon as the running attempts return; a
// call whose context is already done runs no attempt and returns the
// context's error at once (as package pipeline does).
//
// A panic (or runtime.Goexit) in the first attempt ends its context, which
// releases what its Done registered on the caller's context, cancels the
// hedges and propagates. A panic
// in a hedge attempt is recovered on its goroutine and, if it decides the
// race, re-raised on the caller's goroutine with the same value.
//
// # Budget
//
// Hedges obey a retry budget ([Config.Budget], the interface that package
// retry's TokenBucket and RatioBudget implement), shared with the retry
// policies of the same dependency, so hedging cannot double the load under
// overload: the hedger calls OnRequest once per call, AllowRetry before each
// hedge (a refusal is counted in [Stats].BudgetRefused and the call goes on
// with the attempts it has), OnSuccess after a successful attempt and
// OnFailure after an attempt that failed with a non-fatal error. AllowRetry
// is asked only while the race is undecided, and an attempt that returns
// while it runs waits for its answer: a grant always starts its hedge.
//
// # Cost
//
// On the path where the first attempt finishes before the delay, a call
// costs a ctx.Err() (an atomic load for the standard library's contexts),
// one clock read (two with a percentile delay), a sync.Pool Get and
// Put of the reusable call state, one watchdog Schedule and Cancel (a few
// CASes), one CAS on the call's state, one histogram add and one atomic load
// (percentile delay); no goroutine, no timer, no allocation per call. The
// first attempt's context is a 48-byte object that is never reused (reusing
// a context breaks the contract for callees that retain it: its Err would go
// back to nil and its values would change); contexts are carved from slabs
// of 128, so a call allocates 1/128 of a 6 KiB slab: 0 allocs/op and 48 B/op
// of garbage (docs/hedge.md has the benchmark). A callee that calls
// Done on the context allocates its Done channel (and, when the caller's
// context can end, a registration on it: one context.WithCancel child under
// the standard library's cancellable contexts, whose channel is Done's, or
// the caller's own AfterFunc method when it has one). A closure passed to Do or Call lives on the heap
// (hedges may run it on other goroutines): one that captures variables costs
// the usual closure allocation; a func value that captures nothing costs
// nothing. A hedge costs a goroutine, a context.WithCancel and the race's
// state (a few hundred bytes).
//
// The winner's context is not cancelled when the call returns, so a result
// that reads through it (an HTTP response body) stays readable; losers'
// contexts are cancelled. A Done channel or hedge context of a winner is
// released when the caller's context ends.
//
// # For composition
//
// A pipeline that holds permits for the call and shares one clock reading
// uses [Hedger.DoAtHeld], [CallAtHeld], [Hedger.ObserveAt] and
// [Hedger.Ticker]. Applications call [Hedger.Do], [Call] and
// [Hedger.Observe].
//
// # Zero value and concurrency
//
// The zero Hedger is not usable; build with [New] (its first call would
// panic). New refuses a Config.Budget that is a nil or zero
// retry.TokenBucket or retry.RatioBudget: build budgets with their
// constructors. A Hedger is safe for concurrent use by any number of
// goroutines.
//
// # Live reconfiguration
//
// [Hedger.Update] takes a whole Config (start from [Hedger.Config]),
// validates it exactly as New does, and applies it while calls run, or
// refuses it with a *rampart.ConfigError naming the field and changes
// nothing. The latency histogram is kept. A call in flight reads the delay
// and MaxHedges afresh at each hedge, as it always did the percentile
// delay, so its next hedge follows the new values; the percentile's
// parameters are read together, under a mutex, by the once-per-Refresh
// recomputation. Updates are serialised: racing Updates leave the hedger
// on the fields of one of them, and [Hedger.Config] never reports a mix.
//
//   - Delay: updatable: the fixed delay from the next call or hedge; with
//     a percentile, the warm-up delay while the histogram warms up
//     (ignored after).
//   - MaxHedges: updatable, from the next hedge.
//   - Percentile, MinDelay, MaxDelay, WarmUp: updatable: the bounds apply
//     at once to the delay in force, the percentile at the next refresh,
//     from the histogram learnt so far. A hedger that warmed up stays on
//     its percentile when WarmUp is raised above the samples it holds
//     (warm-up is judged against the WarmUp it had), and its refreshes
//     keep that delay until the new WarmUp is reached.
//   - Refresh: updatable; a shorter one brings the next refresh forward.
//   - Percentile between 0 and not 0: fixed: New allocated the 10 KB
//     histogram or not.
//   - Ticker, Tick: fixed: New chose the watchdog (the shared one or its
//     own) and its clock, which the calls in flight are scheduled on.
//   - Budget: fixed: a call notifies it at its start and at its end; a
//     budget swapped between the two would see one without the other.
//   - Fatal, AsyncFirst: fixed: every call reads them from words New set.
//   - OnHedge, OnHedgeWon, OnBudgetRefused: fixed: New allocated the
//     listeners' block or not. Update accepts the func values New was
//     given, as Config returns them, and refuses any other func
//     value; whether another evaluation of the same func literal is
//     accepted is unspecified (it depends on what the literal captures
//     and on the compiler), so pass the values New was given.
//   - Name: fixed: it names the hedger in its Config. An empty Name keeps
//     it (a registry names the hedgers it builds from a Config without
//     one, and that Config, changed, is accepted).
package hedge
