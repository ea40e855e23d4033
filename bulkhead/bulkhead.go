// Package bulkhead limits how many calls run at once: the concurrency limit a
// service puts at every entry point and in front of every dependency, so that
// a slow dependency holds a bounded number of goroutines and connections
// instead of all of them.
//
// Build a [Bulkhead] with [New] and wrap each call in [Bulkhead.Do] (or the
// typed [Call]); [Bulkhead.Acquire] (fail fast) or [Bulkhead.AcquireWait]
// (queue up to Config.MaxWait) and then [Bulkhead.Release] bracket a call by
// hand, for a caller that holds the permit across code it does not own. A
// pipeline uses the methods under For composition.
//
// # Which method to use
//
//   - [Bulkhead.Do] and [Call] for ordinary code: they enter (waiting if
//     configured), run the function, and exit on every path, panics and
//     runtime.Goexit included.
//   - [Bulkhead.Acquire] / [Bulkhead.Release] for hot paths and for package
//     pipeline: no closure, no context, no clock read, no allocation.
//   - [Bulkhead.AcquireWait] / [Bulkhead.Release] for the waiting mode without a
//     closure.
//
// Every successful Acquire or AcquireWait must be matched by exactly one Release.
// A Release without an Acquire or AcquireWait would silently widen the limit; the bulkhead
// detects it when it would drive the in-flight count below zero and panics
// with a message naming the bulkhead (see [Bulkhead.Release]).
//
// # Algorithm
//
// A [Bulkhead] is an in-flight counter compared against a maximum (the
// semaphore bulkhead of resilience4j and Polly). The fail-fast path,
// [Bulkhead.Acquire], is one atomic add to take a permit and
// [Bulkhead.Release] is one atomic add to give it back:
//
//	if inFlight.Load() >= max { reject }          // read-only: overload does not bounce the line
//	if inFlight.Add(1) > max  { inFlight.Add(-1); reject } // lost a race at the limit
//	... call ...
//	inFlight.Add(-1)                               // + wake a waiter, only when one is queued
//
// The in-flight count of calls really running never exceeds max: a call that
// overshoots the limit with its add takes its add back before it returns
// false, and the count it saw includes every running call. The price of the
// add-then-undo pattern is a transient over-count: while a losing caller
// holds its add for the few nanoseconds before undoing it, another caller
// may see the limit reached although one permit is free, and be rejected
// spuriously. Only callers racing for the last permit can overshoot, and the
// load before the add keeps most of them from trying: with no more
// goroutines than max it never happens (TestNoRejectionAtExactlyMax).
// Stats.Overshoots counts the rejections decided by an overshooting add,
// which bounds the windows in which a spurious rejection can happen
// (docs/bulkhead.md gives the share measured by TestOverCountRate).
//
// Waiting mode ([Config.MaxWait] > 0, used by [Bulkhead.AcquireWait], [Bulkhead.Do]
// and [Call]) adds a FIFO queue behind a mutex. Only the waiting path pays
// for it: when a permit is free and nobody is queued, AcquireWait is Acquire
// without allocation. [Bulkhead.Release] loads the waiter count (one plain
// atomic load) and takes the lock only when someone is queued. A queued
// waiter is granted its permit by the goroutine that frees one (the permit
// is handed over under the lock, so nobody can overtake the queue's head
// between release and wake-up); a waiter whose context ends or whose
// MaxWait expires at the same moment it is granted gives the permit back.
// Fail-fast callers ([Bulkhead.Acquire]) do not queue; they take a free
// permit if there is one, even while others are queued.
//
// # For composition
//
// A pipeline uses [Bulkhead.MayWait] and [Bulkhead.RejectedError] besides
// [Bulkhead.Acquire], [Bulkhead.AcquireWait] and [Bulkhead.Release].
//
// # Zero value and configuration
//
// The zero Bulkhead is not usable: build one with [New]. The zero [Config]
// is invalid because Max must be at least 1. MaxWait 0 means fail-fast: AcquireWait
// rejects at once when full.
//
// # Concurrency
//
// All methods are safe for concurrent use. [Bulkhead.SetMax] changes the
// limit at run time: growing it wakes waiters, shrinking it never evicts
// running calls (new calls are rejected until enough have exited).
//
// # Live reconfiguration
//
// [Bulkhead.Update] takes a whole Config (start from [Bulkhead.Config]),
// validates it as New does, and applies it while calls run, or refuses it
// with a *rampart.ConfigError naming the field and changes nothing:
//
//   - Max: updatable, as SetMax (which is Update of Max alone). Permits in
//     flight stay valid: above a smaller Max they finish normally and no
//     call is admitted until the count is below it; a larger Max grants
//     queued callers at once.
//   - MaxWait: updatable between positive values; it times the waits that
//     start after Update (a queued call keeps its timer). Fixed between 0
//     and positive: a pipeline chooses its fail-fast or waiting path by
//     [Bulkhead.MayWait] when it is built.
//   - Name: fixed: New builds the rejection error that carries it, once.
//     An empty Name keeps it (a registry names the bulkheads it builds
//     from a Config without one, and that Config, changed, is accepted).
//   - Ticker: fixed: the waits under way are measured on it, and a
//     pipeline checked that its policies share its clock.
//   - Compact: fixed: it chose the memory layout New allocated.
//   - OnRejected, OnWaitAdmit: fixed: the rejection and waiting paths read
//     them from words New set (replacing them would cost every rejection
//     an atomic load of a pointer to the func). Update accepts the func
//     value New was given, as Config returns it, and refuses any
//     other func value; whether another evaluation of the same func
//     literal is accepted is unspecified (it depends on what the literal
//     captures and on the compiler), so pass the value New was given.
//
// Updates are serialised (on the queue's lock, which no fail-fast call
// takes): racing Updates leave the bulkhead on Max and MaxWait of one of
// them, and [Bulkhead.Config] reads both under that lock, never a mix.
// Max and MaxWait are separate atomic words, not one snapshot: a call
// decides admission on Max and how long to queue on MaxWait, each read
// once, so a call that sees the new Max with the old MaxWait (or the
// reverse) acts as it would have just before or just after the Update.
// A single pointer to both would add a dependent load to every Acquire.
//
// # Memory
//
// A bulkhead is 240 B: the in-flight count (written by every admission and
// release) and the rejection count (by every rejection) a cache line apart,
// the words their writers read beside them, and a line of padding before
// the in-flight count that keeps the heap's previous object off its line.
// [Config.Compact] drops that padding: 176 B, for the many cold bulkheads
// (per tenant, per route) on which goroutines do not contend. With 4-byte
// pointers (386, arm) a bulkhead is 224 B, 160 B compact. Unnamed
// bulkheads share one rejection error; a Name adds its own. For scale:
// golang.org/x/sync/semaphore's Weighted is 80 B, a buffered channel of
// 32 empty structs 112 B, failsafe-go's bulkhead 208 B (BenchmarkMemory in
// the bench module).
package bulkhead

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
)

// ErrFull is the sentinel of a bulkhead's rejection: the bulkhead was full
// (and, in waiting mode, stayed full for MaxWait). Match it with errors.Is;
// the error returned also matches [rampart.ErrRejected].
var ErrFull = errors.New("full")

// Config configures a [Bulkhead]. The zero value of each field is its
// documented default, except Max, which must be set.
type Config struct {
	// Max is the most calls allowed in flight at once. Required: at least 1.
	Max int

	// MaxWait is how long AcquireWait, Do and Call wait for a permit when the
	// bulkhead is full, at most (the context can end the wait earlier).
	// 0 (the default) means fail-fast: reject at once. Negative is invalid.
	// Use time.Duration(math.MaxInt64) to wait as long as the context allows.
	// Acquire never waits. The wait runs on a real timer, not on Ticker
	// (which only measures how long calls waited): under testing/synctest
	// it follows the bubble's fake clock, under a ManualTicker real time.
	MaxWait time.Duration

	// Name identifies the bulkhead in its rejection error
	// (`bulkhead "db": full`) and in the Release-without-AcquireWait panic.
	Name string

	// Ticker is the clock used to measure time spent waiting (read only on
	// the waiting path). nil means rampart.DefaultTicker(). Under
	// testing/synctest, pass a ticker created inside the bubble.
	Ticker rampart.Ticker

	// OnRejected, when set, is called on the rejecting goroutine each time a
	// call is refused a permit (full, MaxWait expired, or context ended
	// while waiting), with the in-flight count it saw and the nanoseconds it
	// waited (0 for fail-fast). A panic in it is recovered and counted.
	OnRejected func(inFlight int64, waited time.Duration)

	// OnWaitAdmit, when set, is called when a call that had to queue is
	// granted a permit, with how long it waited. Calls admitted
	// without waiting do not call it (so the fast path stays free).
	OnWaitAdmit func(waited time.Duration)

	// Compact lays the instance out without cache-line padding: smaller
	// (176 B instead of 240 B), for the many cold instances (per-tenant,
	// per-route keys) where goroutines do not contend on one instance; the
	// default pads the words that many goroutines write on every call.
	Compact bool
}

// Stats is a snapshot of a bulkhead's counters, returned by value.
//
// The bulkhead does not count admissions: that would add a second atomic
// add to the admit path. Callers that need it count themselves (or derive
// it from their own request count minus Rejected).
type Stats struct {
	Max            int64         // the current limit
	InFlight       int64         // permits held now (may read one above the truth while a racing rejection undoes its add)
	PeakInFlight   int64         // highest in-flight count ever admitted; never above the Max in force at the time (or, for a call racing a shrinking SetMax, the Max it read)
	Rejected       uint64        // calls refused a permit, for any reason (includes TimedOut and Canceled)
	TimedOut       uint64        // waiting calls whose MaxWait expired
	Canceled       uint64        // waiting calls whose context ended first (or was done before they queued)
	Waiting        int64         // calls queued now
	Overshoots     uint64        // adds that lost the race for the last permit and were undone (each opens a window of a few ns in which another caller may be refused spuriously)
	Waited         uint64        // calls admitted after queueing
	WaitTime       time.Duration // total time spent queueing, admitted or not
	ListenerPanics uint64        // listener panics recovered
}

// Bulkhead is a concurrency limit. Create it with [New] and run calls
// through [Bulkhead.Do] or [Call]; [Bulkhead.Acquire] or
// [Bulkhead.AcquireWait], then exactly one [Bulkhead.Release], bracket a
// call by hand.
//
// Acquire is a load and an atomic add on the in-flight count, Release an
// atomic add and a load of the waiter count (see the package
// documentation); only a queued wait takes a mutex. The zero
// Bulkhead is not usable. A Bulkhead is safe for concurrent use.
//
// A bulkhead is 240 B (176 B with [Config.Compact]); a Name adds its
// rejection error (every unnamed bulkhead shares one).
type Bulkhead struct {
	// inFlight: the permits held, written by every Acquire and Release.
	// The words after it, up to rejected, are read by the same calls (max
	// and peak by Acquire, waiters by Release) and share its line; unless
	// Config.Compact, New allocates the bulkhead inside a paddedBulkhead, so
	// that no other object shares the line.
	inFlight atomic.Int64

	// Read-mostly: max changes only through SetMax, peak only when a new peak
	// is reached (after warm-up, never), waiters only while calls queue.
	max     atomic.Int64
	peak    atomic.Int64
	waiters atomic.Int64

	// Configuration, set in New. maxWait changes through Update (an
	// atomic word: a plain load on amd64 and arm64, read once per
	// AcquireWait and once more if it queues).
	maxWait     atomic.Int64
	ticker      rampart.Ticker
	onWaitAdmit func(waited time.Duration)
	_           [(pad.LineSize - hotLineBytes%pad.LineSize) % pad.LineSize]byte // rejected at least a line from inFlight

	// rejected: written by every rejection, which under overload is every
	// call: a line from inFlight keeps it off inFlight's, and what follows
	// fills the rest of its line (rejections read errFull and onReject).
	rejected atomic.Uint64
	errFull  *rampart.RejectedError // its Name is the bulkhead's (Release's panic names it)
	onReject func(inFlight int64, waited time.Duration)
	compact  bool // Config.Compact, which Update refuses to change (the bytes the name took before)

	// Waiting path and rare counters.
	mu             sync.Mutex
	head, tail     *waiter // FIFO of queued callers, guarded by mu
	overshoots     atomic.Uint64
	timedOut       atomic.Uint64
	canceled       atomic.Uint64
	waited         atomic.Uint64
	waitedNanos    atomic.Int64
	listenerPanics atomic.Uint64
}

// hotLineBytes are the bytes of the Bulkhead's words from inFlight to
// onWaitAdmit, which the padding after them rounds up to a whole line, so
// that rejected starts a line after inFlight: 64 B with 8-byte pointers
// (no padding on 64 B lines), 52 B with 4-byte ones (12 B of padding).
const hotLineBytes = 5*unsafe.Sizeof(atomic.Int64{}) + unsafe.Sizeof(rampart.Ticker(nil)) + unsafe.Sizeof((func(time.Duration))(nil))

// paddedBulkhead is the default layout: a line of padding before the
// bulkhead keeps the object before it off inFlight's line; the bulkhead's
// own words after rejected fill rejected's line (a test checks that they
// span a line), so nothing follows it.
type paddedBulkhead struct {
	_ pad.Line
	b Bulkhead
}

// unnamedFull is the rejection error of every bulkhead without a Name: they
// would all build the same one, so they share it.
var unnamedFull = rampart.NewRejectedError("bulkhead", "", ErrFull)

// waiter is one queued AcquireWait. It is allocated only when a call has to wait.
type waiter struct {
	prev, next *waiter
	ready      chan struct{} // receives one value when granted
	granted    bool          // guarded by Bulkhead.mu
	queued     bool          // guarded by Bulkhead.mu
}

// New returns a bulkhead for cfg, or a *rampart.ConfigError (matching
// rampart.ErrInvalidConfig) when Max < 1 or MaxWait < 0.
func New(cfg Config) (*Bulkhead, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var b *Bulkhead
	if cfg.Compact {
		b = new(Bulkhead)
	} else {
		b = &new(paddedBulkhead).b
	}
	b.compact = cfg.Compact
	b.maxWait.Store(int64(cfg.MaxWait))
	b.ticker = cfg.Ticker
	b.onReject = cfg.OnRejected
	b.onWaitAdmit = cfg.OnWaitAdmit
	b.errFull = unnamedFull
	if cfg.Name != "" {
		b.errFull = rampart.NewRejectedError("bulkhead", cfg.Name, ErrFull)
	}
	if b.ticker == nil {
		b.ticker = rampart.DefaultTicker()
	}
	b.max.Store(int64(cfg.Max))
	return b, nil
}

// validate returns the *rampart.ConfigError of the first invalid field of
// cfg, for New and Update.
func (cfg *Config) validate() error {
	if cfg.Max < 1 {
		return rampart.NewConfigError("bulkhead", "Max", "must be at least 1, got %d", cfg.Max)
	}
	if cfg.MaxWait < 0 {
		return rampart.NewConfigError("bulkhead", "MaxWait", "must not be negative, got %v", cfg.MaxWait)
	}
	if ticker.IsNil(cfg.Ticker) {
		return rampart.NewConfigError("bulkhead", "Ticker", ticker.NilReason, cfg.Ticker)
	}
	return nil
}

// Acquire takes a permit if one is free and returns nil, or returns the
// bulkhead's rejection error ([Bulkhead.RejectedError]) when none is. It
// never waits, reads no clock and allocates nothing. A nil result must be
// matched by exactly one [Bulkhead.Release].
//
// Cost: on admission one atomic add (plus loads of read-mostly words); on
// rejection no write to the in-flight word, only the rejection counter's add
// (so a rejection is cheaper than an admission, and an overloaded bulkhead's
// in-flight line stays shared between cores).
func (b *Bulkhead) Acquire() error {
	// tryAcquire(true) written out, so that a rejection by the load costs no
	// further call: under overload, rejecting is the common case.
	limit := b.max.Load() // read-mostly: changes only in SetMax
	// Load 1: refuse without writing the in-flight word when full.
	if b.inFlight.Load() >= limit {
		b.rejected.Add(1) // the one atomic add of a rejection
		if b.onReject != nil {
			b.notifyReject(0)
		}
		return b.errFull
	}
	// Atomic 1: take the permit.
	n := b.inFlight.Add(1)
	// Load 2: peak is read-mostly: written only when a new peak is reached.
	if n <= limit && n <= b.peak.Load() {
		return nil
	}
	if !b.acquireSlow(n, limit, true) {
		return b.errFull
	}
	return nil
}

// tryAcquire is the fast path of AcquireWait (Acquire writes it out).
// countReject tells the slow path whether a refusal is final (Acquire) or
// will be followed by queueing (AcquireWait).
func (b *Bulkhead) tryAcquire(countReject bool) bool {
	limit := b.max.Load() // read-mostly: changes only in SetMax
	n := int64(math.MaxInt64)
	// Load 1: refuse without writing when full (the common case under
	// overload), so overload does not bounce the in-flight line.
	if b.inFlight.Load() < limit {
		// Atomic 1: take the permit.
		n = b.inFlight.Add(1)
	}
	// Load 2: peak is read-mostly: written only when a new peak is reached.
	if n <= limit && n <= b.peak.Load() {
		return true
	}
	return b.acquireSlow(n, limit, countReject)
}

// acquireSlow finishes tryAcquire when it did not simply admit. Slow path:
// full (n is MaxInt64, nothing was added), lost the race for the last permit
// (n > limit: undo the add), or admitted at a new peak.
func (b *Bulkhead) acquireSlow(n, limit int64, countReject bool) bool {
	if n <= limit {
		atomicx.Max(&b.peak, n)
		return true
	}
	if n != math.MaxInt64 {
		b.undo()
	}
	if countReject {
		b.reject(0)
	}
	return false
}

// undo gives back an add that overshot the limit. Slow path: only callers
// that raced for the last permits get here. It wakes a waiter like Release does,
// because the overshoot may have hidden a free permit from one.
func (b *Bulkhead) undo() {
	b.inFlight.Add(-1)
	b.overshoots.Add(1)
	if b.waiters.Load() != 0 {
		b.dispatch()
	}
}

// reject counts a refusal and calls the listener. Slow path.
func (b *Bulkhead) reject(waited int64) {
	b.rejected.Add(1)
	if b.onReject != nil {
		b.notifyReject(waited)
	}
}

func (b *Bulkhead) notifyReject(waited int64) {
	notify.Call2(&b.listenerPanics, b.onReject, b.inFlight.Load(), time.Duration(waited))
}

// Release gives back a permit taken by Acquire or AcquireWait: one atomic add, plus
// one load of the waiter count; the lock is taken only when a caller is
// queued, to hand it the permit.
//
// Release without a matching AcquireWait is a programming error that would silently
// let one more call in than the limit allows. The bulkhead detects it when it
// would drive the in-flight count below zero, restores the count, and panics
// with a message naming the bulkhead. Detection is therefore certain once the
// bulkhead drains, not at the faulty call itself when other calls are in
// flight (the panic may then surface in a correct caller's Release): the counter
// carries no per-permit identity.
func (b *Bulkhead) Release() {
	// Atomic 1: give the permit back. Load 1: is anybody queued? The load is
	// ordered after the add (Go's atomics are sequentially consistent), so a
	// waiter that registered before it is seen here, and one that registers
	// after it sees the freed permit when it looks before parking.
	if n := b.inFlight.Add(-1); n < 0 || b.waiters.Load() != 0 {
		b.exitSlow(n)
	}
}

// exitSlow handles an unmatched Release or hands the freed permit to the queue.
// Slow path.
func (b *Bulkhead) exitSlow(n int64) {
	if n < 0 {
		b.unmatchedExit()
	}
	b.dispatch()
}

func (b *Bulkhead) unmatchedExit() {
	b.inFlight.Add(1)
	name := b.errFull.Name()
	if name == "" {
		name = "(unnamed)"
	}
	panic("rampart/bulkhead: Release without a matching Acquire on bulkhead " + name +
		": the in-flight count would go negative, which would let more calls in than Max")
}

// AcquireWait takes a permit, waiting for one in FIFO order for at most
// [Config.MaxWait] or until ctx ends. It returns nil when admitted (match it
// with one [Bulkhead.Release]); the bulkhead's rejection error (matching
// [ErrFull] and rampart.ErrRejected) when it is full and MaxWait is 0 or
// expired; or ctx.Err() when the context ended first.
//
// When a permit is free and nobody is queued, AcquireWait does what Acquire does
// and allocates nothing; it then does not look at ctx (a free permit is
// granted even to a context that is already done, like a ready case of a
// select). Only a call that has to wait pays for the queue.
func (b *Bulkhead) AcquireWait(ctx context.Context) error {
	if b.maxWait.Load() == 0 { // fail-fast configuration: exactly Acquire
		if b.Acquire() == nil {
			return nil
		}
		return b.errFull
	}
	// Load 1 (waiters) keeps a new caller behind the queue: FIFO.
	if b.waiters.Load() == 0 && b.tryAcquire(false) {
		return nil
	}
	return b.enterSlow(ctx)
}

// enterSlow queues the caller. Slow path.
func (b *Bulkhead) enterSlow(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		b.canceled.Add(1)
		b.reject(0)
		return err
	}
	start := b.ticker.Now()
	w := &waiter{ready: make(chan struct{}, 1)}
	b.mu.Lock()
	b.push(w)
	b.waiters.Add(1)
	b.dispatchLocked() // a permit may be free (the queue was empty, or an Release just ran)
	granted := w.granted
	b.mu.Unlock()
	if granted {
		return nil
	}

	var timeout <-chan time.Time
	if mw := b.maxWait.Load(); mw != math.MaxInt64 {
		t := time.NewTimer(time.Duration(mw))
		defer t.Stop()
		timeout = t.C
	}
	var cause error
	select {
	case <-w.ready:
		// The permit is granted; it becomes the caller's when AcquireWait
		// returns. Until then a user Ticker that panics or an OnWaitAdmit
		// that calls runtime.Goexit (notify recovers panics only) must
		// not take it away with them.
		admitted := false
		defer func() {
			if !admitted {
				b.Release()
			}
		}()
		waited := b.ticker.Now() - start
		b.waited.Add(1)
		b.waitedNanos.Add(waited)
		if b.onWaitAdmit != nil {
			notify.Call1(&b.listenerPanics, b.onWaitAdmit, time.Duration(waited))
		}
		admitted = true
		return nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-timeout:
		cause = b.errFull
	}

	b.mu.Lock()
	granted = w.granted
	if !granted {
		b.remove(w)
		b.waiters.Add(-1)
	}
	b.mu.Unlock()
	if granted {
		// Granted at the same moment the wait ended: give the permit back
		// (it goes to the next waiter, if any).
		b.Release()
	}
	waited := b.ticker.Now() - start
	b.waitedNanos.Add(waited)
	if cause == b.errFull {
		b.timedOut.Add(1)
	} else {
		b.canceled.Add(1)
	}
	b.reject(waited)
	return cause
}

// dispatch hands free permits to queued callers. Slow path.
func (b *Bulkhead) dispatch() {
	b.mu.Lock()
	b.dispatchLocked()
	b.mu.Unlock()
}

// dispatchLocked grants permits to the queue's head while permits are free.
// The permit is taken with a CAS that never overshoots, so a grant never
// makes the count exceed the limit, even transiently.
func (b *Bulkhead) dispatchLocked() {
	for b.head != nil {
		limit := b.max.Load()
		cur := b.inFlight.Load()
		if cur >= limit {
			return
		}
		if !b.inFlight.CompareAndSwap(cur, cur+1) {
			continue // a concurrent Acquire or Release moved the count: look again
		}
		if cur+1 > b.peak.Load() {
			atomicx.Max(&b.peak, cur+1)
		}
		w := b.head
		b.remove(w)
		b.waiters.Add(-1)
		w.granted = true
		w.ready <- struct{}{} // buffered: never blocks
	}
}

func (b *Bulkhead) push(w *waiter) {
	w.queued = true
	w.prev = b.tail
	if b.tail == nil {
		b.head = w
	} else {
		b.tail.next = w
	}
	b.tail = w
}

func (b *Bulkhead) remove(w *waiter) {
	if !w.queued {
		return
	}
	w.queued = false
	if w.prev == nil {
		b.head = w.next
	} else {
		w.prev.next = w.next
	}
	if w.next == nil {
		b.tail = w.prev
	} else {
		w.next.prev = w.prev
	}
	w.prev, w.next = nil, nil
}

// SetMax changes the limit. Growing it grants permits to queued callers at
// once; shrinking it never evicts running calls: new calls are refused until
// enough of them have exited. An Acquire that read the old limit just before
// a shrink may still be admitted against it, as if it had come first (at
// most one such call per racing goroutine). It returns a *rampart.ConfigError
// when n < 1. It is [Bulkhead.Update] of Max alone.
func (b *Bulkhead) SetMax(n int) error {
	if n < 1 {
		return rampart.NewConfigError("bulkhead", "Max", "must be at least 1, got %d", n)
	}
	b.setMax(n)
	return nil
}

// setMax stores a valid limit and hands the permits it frees to the queue.
func (b *Bulkhead) setMax(n int) {
	b.max.Store(int64(n))
	if b.waiters.Load() != 0 {
		b.dispatch()
	}
}

// Update changes the bulkhead's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates c as New
// does, refuses with a *rampart.ConfigError naming the field a change to a
// field fixed at construction (Name, Ticker, Compact, OnRejected,
// OnWaitAdmit, and MaxWait between 0 and positive; an empty Name keeps the
// name New was given, as a registry's create-or-get sets it), and
// otherwise applies Max as [Bulkhead.SetMax] does and MaxWait for the
// calls that start waiting after it. An invalid or refused c changes nothing. The permits
// in flight stay valid: above a smaller Max they finish normally and new
// calls are refused until the count is below it. Racing Updates apply one
// Config each, whole: the bulkhead ends on Max and MaxWait of the same
// one, and [Bulkhead.Config] never reports a mix.
func (b *Bulkhead) Update(c Config) error {
	if err := c.validate(); err != nil {
		return err
	}
	// Under the queue's lock, which the waiting paths take anyway: Update
	// is rare, and the fail-fast paths never take it.
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkFixed(&c); err != nil {
		return err
	}
	b.maxWait.Store(int64(c.MaxWait))
	b.max.Store(int64(c.Max))
	b.dispatchLocked() // a larger Max grants the queued callers at once
	return nil
}

// checkFixed returns the *rampart.ConfigError of the first field of c that
// differs from the one New fixed.
func (b *Bulkhead) checkFixed(c *Config) error {
	const fixed = "is fixed at construction: "
	switch {
	case c.Name != "" && c.Name != b.errFull.Name(): // "": the name New was given
		return rampart.NewConfigError("bulkhead", "Name", fixed+"New built the rejection error that carries it (got %q, built with %q)", c.Name, b.errFull.Name())
	case !sameTicker(c.Ticker, b.ticker):
		return rampart.NewConfigError("bulkhead", "Ticker", fixed+"waits already started are measured on the old clock; a pipeline checked it shares its own")
	case c.Compact != b.compact:
		return rampart.NewConfigError("bulkhead", "Compact", fixed+"it chose the memory layout New allocated (got %v)", c.Compact)
	case !sameptr.Func(c.OnRejected, b.onReject):
		return rampart.NewConfigError("bulkhead", "OnRejected", fixed+"the rejection path reads it from a word New set; pass the func value New was given")
	case !sameptr.Func(c.OnWaitAdmit, b.onWaitAdmit):
		return rampart.NewConfigError("bulkhead", "OnWaitAdmit", fixed+"the waiting path reads it from a word New set; pass the func value New was given")
	case (c.MaxWait > 0) != (b.maxWait.Load() > 0):
		return rampart.NewConfigError("bulkhead", "MaxWait", fixed+"between 0 (fail-fast) and positive (waiting): a pipeline chose its path by MayWait when it was built (got %v)", c.MaxWait)
	}
	return nil
}

// Max returns the current limit.
func (b *Bulkhead) Max() int { return int(b.max.Load()) }

// Config returns the configuration in force, its Ticker filled in (the
// default when New was given nil): change a field and pass it to
// [Bulkhead.Update].
func (b *Bulkhead) Config() Config {
	b.mu.Lock() // Max and MaxWait of one Update
	defer b.mu.Unlock()
	return Config{
		Max:         int(b.max.Load()),
		MaxWait:     time.Duration(b.maxWait.Load()),
		Name:        b.errFull.Name(),
		Ticker:      b.ticker,
		OnRejected:  b.onReject,
		OnWaitAdmit: b.onWaitAdmit,
		Compact:     b.compact,
	}
}

// MayWait reports whether AcquireWait can wait for a permit (Config.MaxWait > 0).
// A pipeline uses it to re-read the clock after admission, so that a
// deadline does not count the time spent queueing.
func (b *Bulkhead) MayWait() bool { return b.maxWait.Load() > 0 }

// RejectedError returns the bulkhead's preallocated rejection error, the one
// AcquireWait, Do and Call return when full. It matches [ErrFull] and
// rampart.ErrRejected; pipelines return it after a false Acquire.
func (b *Bulkhead) RejectedError() error { return b.errFull }

// Stats returns a snapshot of the counters. It allocates nothing; the
// fields are read one by one, so they are not one atomic snapshot.
func (b *Bulkhead) Stats() Stats {
	return Stats{
		Max:            b.max.Load(),
		InFlight:       b.inFlight.Load(),
		PeakInFlight:   b.peak.Load(),
		Rejected:       b.rejected.Load(),
		Overshoots:     b.overshoots.Load(),
		TimedOut:       b.timedOut.Load(),
		Canceled:       b.canceled.Load(),
		Waiting:        b.waiters.Load(),
		Waited:         b.waited.Load(),
		WaitTime:       time.Duration(b.waitedNanos.Load()),
		ListenerPanics: b.listenerPanics.Load(),
	}
}

// Do runs fn under a permit: AcquireWait (waiting if configured), fn, Release. It
// returns AcquireWait's error without calling fn when refused, and otherwise fn's
// error unchanged. The permit is released on every path out of fn, a panic
// (re-raised) and runtime.Goexit included.
func (b *Bulkhead) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := b.AcquireWait(ctx); err != nil {
		return err
	}
	defer b.Release()
	return fn(ctx)
}

// Call is [Bulkhead.Do] for a function with a typed result. When refused it
// returns the zero T and AcquireWait's error.
func Call[T any](ctx context.Context, b *Bulkhead, fn func(context.Context) (T, error)) (T, error) {
	if err := b.AcquireWait(ctx); err != nil {
		var zero T
		return zero, err
	}
	defer b.Release()
	return fn(ctx)
}
