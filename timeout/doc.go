// Package timeout bounds the duration of calls, at a fraction of the cost of
// context.WithTimeout.
//
// Build a [Timeout] with [New] and run each call through [Timeout.Do] (or
// the typed [Call]) when the callee honours its context, or through
// [Timeout.DoAbandon] ([CallAbandon]) when the caller must get its time back
// from a callee that does not. [Timeout.Start] and [Timeout.Finish] bracket
// a call by hand; a pipeline uses the methods under For composition.
//
// Go cannot pre-empt a goroutine, so a timeout is either a deadline that the
// callee honours (it watches its context) or work that the caller abandons.
// A [Timeout] has two modes ([Config].Mode) for the first, and two entry
// points of its own for the second:
//
//   - [ModeDeadline] (default): the function runs on the caller's goroutine
//     with a context that is done at the deadline, when the parent is done,
//     or when the call finishes. The call returns when the function does;
//     the result is [ErrTimeout] if it ended after the deadline. One
//     allocation per call (the context object), no goroutine, no runtime
//     timer; a callee that reads Done adds its channel, and under a
//     cancellable parent the registration on it (see Reading Done).
//   - [ModeSoft]: classification only. The function gets the parent context
//     unchanged, nothing is cancelled, and the call returns [ErrTimeout] if
//     it ended after the deadline. No allocation.
//   - Abandoning, on a Timeout of either mode: [Timeout.DoAbandon] and
//     [CallAbandon] run the function on another goroutine, a worker that the
//     Timeout keeps parked between calls (Config.Workers); the caller
//     returns at the deadline even if the function does not, and the
//     function keeps running, abandoned, with its context done. The number
//     of abandoned functions is bounded (MaxAbandoned); the onDone hook
//     runs only when the abandoned function has truly ended, which is when
//     a bulkhead permit may be released, and the worker is reused only
//     after that. The context and the caller's closure are allocated, and
//     the call costs a hand-off to the worker and back (two goroutine
//     wake-ups: the floor of any timeout that runs the function elsewhere).
//
// Abandoning is a choice at the call site, not a mode (as in Polly v8,
// whose timeout strategy keeps only cooperative cancellation): [Timeout.Do],
// [Call], [Timeout.StartAt] and [Timeout.FinishAt] never abandon, so a
// function handed to them never outlives the call.
//
// # Which method to use
//
//   - [Timeout.Do] and [Call], for a callee that honours its context (a
//     database driver, net/http, gRPC, anything that takes a
//     context.Context and watches it): fn runs on the caller's goroutine
//     and is not kept, so a closure that captures variables stays on the
//     caller's stack. The call ends when fn does.
//   - [Timeout.DoAbandon] and [CallAbandon], for a callee that does not (a
//     legacy or CGo client, a blocking syscall) when the caller must get
//     its time back at the deadline: fn may outlive the call, so its
//     closure is allocated, and an abandoned call's result
//     is lost. Release what the call holds (a bulkhead permit) in onDone,
//     never after the call returns.
//   - [Timeout.StartAt] and [Timeout.FinishAt], the primitives, for a caller
//     that reads the clock itself; they take no function, so they cost only
//     the context whatever the callee captures.
//
// Package pipeline uses the primitives, with its own clock readings, and
// so never abandons:
//
//	ctx, h := t.StartAt(parent, now)   // deadline = now + Duration
//	err := fn(ctx)
//	err = t.FinishAt(h, end, err)      // exactly once, on every path
//
// # Allocations
//
// Allocations per call with a closure that captures two variables (a
// dependency and a query), created at the call, the way callers write
// them (gated by TestAllocsCapturingClosure; go test -run Allocs ./timeout/):
//
//	mode       Do   Call   StartAt/FinishAt   DoAbandon   CallAbandon
//	soft       0    0      0                  4           6
//	deadline   1    1      1                  2           4
//
// Do, Call and StartAt/FinishAt cost the context in deadline mode and nothing
// in soft mode: Do and Call do not keep fn. DoAbandon hands fn to another
// goroutine, so a capturing closure is allocated next to the context; a function value that captures nothing (a top-level
// function) costs nothing. CallAbandon adds a result box and the closure
// that fills it. A soft-mode Timeout has no watchdog, so its DoAbandon
// times the call with a runtime timer (two allocations more, the timer and
// its callback): build the Timeout in deadline mode for DoAbandon. (A Done
// channel, when the callee asks for it, costs one more in deadline mode and
// with DoAbandon, three under a cancellable parent: see Reading Done.)
//
// A live Timeout is 224 B on 64-bit platforms, named or not: DoAbandon's
// worker table, pool of jobs and counters are built by its first call.
//
// # Reading Done
//
// The context makes its Done channel only when the callee asks for it, and
// watches the parent only then. What a callee that reads Done adds to the
// call, by parent (gated by TestAllocsDeadline):
//
//   - a parent that is never cancelled (context.Background, or values on
//     it): the channel, one allocation;
//   - a *context.cancelCtx parent (context.WithCancel, WithTimeout,
//     WithDeadline, and every server request's context): a child
//     context.WithCancel registered in the parent's children set, whose
//     channel is the Done channel: three allocations (the child, its cancel
//     func, the channel) and no goroutine;
//   - another rampart context (a hedge's or a timeout's): the channel and a
//     registration through its AfterFunc, no goroutine;
//   - any other cancellable parent: the channel and context.AfterFunc's
//     registration, which costs that package's goroutine.
//
// What stops it from being cheaper under a cancelCtx parent is the context
// package: a *context.cancelCtx tells only the contexts of its own package
// of its cancellation (its children set has an unexported interface), so
// every context that must close its own Done channel when the parent is
// cancelled pays one such child, or context.AfterFunc's (which costs more:
// lazyctx's BenchmarkParentRegistration), inserted and removed under the
// parent's lock. context.WithTimeout pays the same registration plus its
// runtime timer. Measured on a shared 2-core VM (Go 1.26.8), medians of 8
// runs in a row of one bench binary, process CPU time per call (cd bench &&
// go test -c -o /tmp/bench.test . && /tmp/bench.test -test.run '^$'
// -test.bench '^BenchmarkTimeout$/^(Success|CalleeReadsDone|CancellableParent)$/'
// -test.benchmem; docs/timeout.md has the whole table):
//
//	case                 rampart          context.WithTimeout     ratio
//	Success              177 ns, 1 alloc  856 ns, 4 allocs        4.5x
//	CalleeReadsDone      327 ns, 2        934 ns, 5               2.8x
//	CancellableParent    772 ns, 4        1080 ns, 5              1.4x
//
// Under a cancellable parent the registration alone (cancel-floor: a
// context.WithCancel child, its Done and its cancel, no timeout) costs
// 531 ns, half of context.WithTimeout's cost, which bounds how much
// cheaper any timeout context can be there (1080 / (177 + 531) = 1.5x).
// With a Background parent the channel alone (made and closed, about
// 120 ns) is most of what reading Done adds.
//
// # The watchdog
//
// Deadlines are fired by a shared watchdog ([Watchdog]): one goroutine that
// sweeps a table of armed slots every tick (1 ms by default) and fires the
// due ones. Arming a deadline pops a slot from a lock-free free list and
// stores the deadline; disarming it is one CAS and a push; neither
// allocates. The goroutine starts on first use (never at package
// initialisation) and exits after a second without armed deadlines. By
// default all Timeouts on rampart.DefaultTicker() share the process-wide
// watchdog; a Timeout with its own Tick or Ticker gets its own, stopped by
// [Timeout.Close]; a pipeline can share one ([NewWatchdog], Config.Watchdog).
//
// Precision: a deadline fires no earlier than the deadline and no later than
// one tick after it (plus the watchdog goroutine's scheduling delay on a
// saturated machine). [Timeout.FinishAt] classifies with the caller's own end
// reading, so it is exact: a call that ended at or after its deadline is a
// timeout even if the watchdog had not fired yet. [Timeout.Do] and [Call]
// in deadline mode read the clock only at the start (a clock read costs as
// much as the rest of the call) and classify a call as timed out when its
// deadline fired before it returned: they agree with what the callee's
// context said, with the watchdog's precision. FinishAt with [rampart.NotRead] as the
// end reading does the same (package pipeline uses it when no other policy
// needs the end time).
//
// # The context contract
//
// The context handed to the callee in deadline mode and by DoAbandon is a
// fresh object per call, never reused, so a callee that keeps it sees it
// stay done with the same error forever. Its only methods are those of
// context.Context, String and AfterFunc: a type assertion on it finds
// nothing that fires or ends it. Deadline returns the wall-clock deadline (or
// the parent's, if earlier); Done is created on first use; Err is
// context.DeadlineExceeded once the deadline fired, the parent's error if
// the parent was done first, context.Canceled once the call finished first
// (as with the cancel func of context.WithTimeout); Value is the parent's.
// The context implements the AfterFunc method that the context package
// looks for on a custom parent, so children derived with context.WithCancel,
// WithTimeout or AfterFunc cost no goroutine. context.Cause on it reports
// its Err, or the parent's cause (context.WithCancelCause) when the parent
// ended it. Under a *context.cancelCtx parent its Done channel closes
// within the parent's cancel, as a context.WithDeadline child's does; a
// context derived from it hears of a
// parent's cancellation one hop later, on the goroutine context.AfterFunc
// starts (it hears of the deadline and of the call's end at once).
//
// The first end wins, as under context.WithDeadline: once the parent was
// done (and a callee may have seen Done closed by it), a deadline that
// passes while the callee cleans up changes nothing: its Err and Cause stay
// the parent's.
//
// # A result after the deadline
//
// A call that ends after its deadline is a timeout whatever the function
// returned: [Timeout.FinishAt] and [Timeout.Do] return the instance's
// [*Error] (matching [ErrTimeout] and context.DeadlineExceeded), and
// [Call] returns the function's value next to it. Upstream policies (a
// breaker counting failures, a retry) thus see one consistent outcome for a
// call that overran, whether or not the callee noticed its context.
// The exception is a call whose parent was done first: [Timeout.Do] and
// [Call], which classify by the deadline's firing, return the function's
// error unchanged and count no timeout (the parent's
// cancellation is not this Timeout's doing); [Timeout.FinishAt] with an end
// reading past the deadline still counts one by the clock.
//
// # Live reconfiguration
//
// [Timeout.Update] takes a whole Config (the one New was given, or
// [Timeout.Config]'s, the configuration in force with its defaults filled
// in, changed),
// validates it exactly as New does, and applies it while calls run, or
// refuses it with a *rampart.ConfigError naming the field and changes
// nothing. The configuration is one immutable object that a call loads
// once, at its start (StartAt, Do, Call, DoAbandon), and keeps to its end
// in its Handle (or job): its deadline, its timeout error and its
// listeners are those it started under, never a mix. The counters are
// kept.
//
//   - Duration: updatable; the calls that start after the Update get the
//     new deadline and a new *Error (its message states the Duration:
//     Err returns it). A call in progress keeps its deadline and returns
//     the error it started with.
//   - MaxAbandoned: updatable; the next DoAbandon calls are bounded by it
//     (abandoned functions still running above a lowered bound keep
//     running: new calls are rejected until they return).
//   - OnTimeout, OnAbandon, OnRejected: updatable; each call notifies
//     those of the configuration it started under.
//   - Name: fixed: the timeout and rejection errors carry it, and callers
//     hold those already returned. An empty Name keeps it (a registry
//     names the timeouts it builds from a Config without one, and that
//     Config, changed, is accepted).
//   - Mode: fixed: New chose from it whether calls get a context that the
//     watchdog ends.
//   - Ticker, Watchdog, Tick: fixed: the deadlines of the calls in flight
//     are readings of the clock, armed on the watchdog New chose (Tick
//     chose between the shared watchdog and one of the Timeout's own, and
//     the latter's sweep period). In soft mode Tick is ignored, by New and
//     by Update alike.
//   - Workers: fixed: the first DoAbandon allocates the table of workers
//     at that size.
//
// Update allocates the new configuration (one object and the error's
// message); calls allocate what they did, and the Handle keeps its four
// words: the call's context holds the configuration it started under (in
// soft mode, which has no context, the Handle holds it instead).
//
// # For composition
//
// A pipeline that shares one clock reading between policies uses
// [Timeout.StartAt], [Timeout.FinishAt], [Timeout.Err], [Timeout.Mode] and
// [Timeout.Ticker]. Applications call [Timeout.Do], [Call], the abandon forms
// and the shorthands [Timeout.Start] and [Timeout.Finish].
//
// # Concurrency
//
// DoAbandon's workers: a fixed table of Config.Workers slots (allocated
// by the first DoAbandon), each a goroutine's home with its reused job
// state, on two lock-free stacks (idle workers, slots without goroutine). A
// call pops an idle worker and wakes it; a worker idle for one to two
// seconds exits; Close stops the idle ones and waits for them. A call that
// finds every worker busy (or comes after Close) starts a goroutine of its
// own. Tests under testing/synctest must Close a Timeout that ran
// DoAbandon before the bubble ends (its idle workers are goroutines of the
// bubble).
//
// A Timeout is safe for concurrent use. The success path takes no lock:
// in deadline mode it is one allocation (the context), a CAS to take a watchdog slot (the
// one the previous call on this shard freed), two stores to arm it (its
// deadline, its state), a CAS to disarm it, a CAS to cache it back for the
// next call and a CAS to end the context; in soft mode it is a comparison. Listeners run
// synchronously on the caller's goroutine (OnTimeout, OnAbandon,
// OnRejected); a panicking listener is recovered and counted.
package timeout
