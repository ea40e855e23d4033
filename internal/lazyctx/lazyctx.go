// Package lazyctx is the context.Context that a policy hands to the function
// it protects when it must be able to end that context itself: package
// timeout's per-call context (ended by the deadline, by the parent, or when
// the call finished) and package hedge's first-attempt context (ended by the
// parent, or when a hedge won).
//
// What it is for. A callee that only passes its context along or polls Err
// should cost its caller one small object and nothing more. A [Ctx] is
// 32 bytes (the parent, a 32-bit end code and one pointer); everything only
// some callees need (the Done channel, AfterFunc registrations, the watch on
// the parent, a fallback runtime timer) is allocated on first use. Ending a
// Ctx is a CAS on the end code, plus, only when that state exists, closing
// the channel and running the registrations. An owner embeds Ctx in its own
// per-call object and adds what only it needs (package timeout: the
// deadline, and a Deadline method that reports it; the Fire method its
// watchdog calls).
//
// The contract (that of the context package):
//
//   - Err is nil while the context is live, then the same error forever: a
//     retained context never comes back to life. The error follows from the
//     [Code] the context ended with: [Fired] gives
//     context.DeadlineExceeded, [Finished] context.Canceled, [ParentDone]
//     the parent's Err (stable once non-nil, by the same contract). A parent
//     that ended is noticed by Err even before anyone asked for Done.
//   - Done returns the same channel on every call; it is closed once Err is
//     non-nil. A context that ended before Done was first called returns a
//     shared closed channel.
//   - Deadline and Value are the parent's. An owner with a deadline of its
//     own defines Deadline on the embedding type.
//   - context.Cause is Err, except for a context ended by its parent, where
//     it is the parent's cause (context.WithCancelCause): the context package
//     looks the cause up through Value, and Ctx answers that lookup with the
//     parent's cancelled *context.cancelCtx only then. Otherwise it answers
//     nil, so that Cause and the context package's parent lookup never see
//     through to an enclosing cancelCtx that is still live.
//   - AfterFunc(f) is the hook the context package looks for on a custom
//     parent: children made by context.WithCancel, WithTimeout, WithDeadline
//     and context.AfterFunc register through it, so they cost no goroutine.
//     f runs synchronously on the goroutine that ends the context: the
//     owner's Cancel, or, when the parent ended it, the goroutine on which
//     the parent's own AfterFunc callback runs (the parent's canceller when
//     the parent is itself a Ctx; a goroutine of the context package's for
//     a standard-library parent, one hop later). When the context had
//     already ended, f runs on a goroutine of its own (the caller may hold
//     locks f needs). stop unregisters f and reports whether it did so before f was
//     called.
//   - The parent is watched only once Done or AfterFunc is used: through
//     the parent's own AfterFunc method when it has one (a
//     *context.cancelCtx, via context.AfterFunc, costs no goroutine until it
//     is cancelled; another Ctx costs none at all), otherwise through
//     context.AfterFunc's goroutine. The watch is released when the context
//     ends.
//
// A Ctx is never reused: the owner allocates a fresh one per call (or carves
// it from a slab that is never recycled), because a callee may keep it.
package lazyctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Code says why a [Ctx] ended; Err derives its error from it, so ending a
// context stores no pointer (no GC write barrier on the hot path).
type Code uint32

const (
	// Live: not ended; Err is nil.
	Live Code = iota
	// Fired: the owner's deadline passed; Err is context.DeadlineExceeded.
	Fired
	// Finished: the owner finished the call first (the call returned, a
	// hedge won); Err is context.Canceled.
	Finished
	// ParentDone: the parent ended first; Err is the parent's Err.
	ParentDone
)

// closedchan is a reusable closed channel, returned by Done when the
// context was already done before anyone asked for its channel.
var closedchan = make(chan struct{})

func init() { close(closedchan) }

// cancelCtxKey is the address of the context package's private cancelCtxKey,
// captured once by probing context.Cause (see probeCancelCtxKey): Value
// answers that key itself (see Ctx.cancelCtx). If the probe finds nothing (a
// future Go), the key is nil and Value simply delegates.
var cancelCtxKey = probeCancelCtxKey()

// probeCtx records the key context.Cause looks up.
type probeCtx struct {
	context.Context
	key any
}

func (p *probeCtx) Err() error            { return context.Canceled }
func (p *probeCtx) Value(k any) any       { p.key = k; return nil }
func (p *probeCtx) Done() <-chan struct{} { return closedchan }

func probeCancelCtxKey() any {
	p := &probeCtx{Context: context.Background()}
	_ = context.Cause(p)
	if k, ok := p.key.(*int); ok {
		return k
	}
	return nil
}

// afterFuncer is the interface the context package probes on a parent
// (src/context/context.go): a parent with this method gets its children's
// cancellation registered through it instead of one goroutine per child.
type afterFuncer interface {
	AfterFunc(func()) func() bool
}

// Ctx is a context.Context whose Done channel and registrations are made on
// first use (see the package documentation for the contract). The zero
// value is not usable: call Init before handing the context out.
//
// Layout: 32 bytes (parent 16, code 4+4, slow 8).
type Ctx struct {
	parent context.Context
	// code is Live while the context is live; set once (CAS from Live),
	// never reset.
	code atomic.Uint32
	slow atomic.Pointer[slowState]
}

// slowState is the lazily allocated part of a Ctx. Its fields are guarded
// by mu except done, which is also read without the lock.
type slowState struct {
	mu        sync.Mutex
	done      atomic.Value // chan struct{}
	closed    bool         // the done channel is closed and the afters ran
	afters    map[*afterEntry]struct{}
	watching  bool        // the parent watch was set up (or is not needed)
	stopWatch func() bool // unregisters the parent watch
	timer     *time.Timer // the owner's fallback timer (ArmTimer)
}

type afterEntry struct{ f func() }

// Init sets the parent of a fresh Ctx. It must be called once, before the
// context is shared with another goroutine.
func (c *Ctx) Init(parent context.Context) { c.parent = parent }

// Parent returns the context c was derived from.
func (c *Ctx) Parent() context.Context { return c.parent }

// Code returns why c ended, or Live. One atomic load; it does not consult
// the parent (Err does).
func (c *Ctx) Code() Code { return Code(c.code.Load()) }

// getSlow returns the slow state, creating it on first use.
func (c *Ctx) getSlow() *slowState {
	if s := c.slow.Load(); s != nil {
		return s
	}
	s := new(slowState)
	if c.slow.CompareAndSwap(nil, s) {
		return s
	}
	return c.slow.Load()
}

// Deadline returns the parent's deadline. An owner with a deadline of its
// own shadows it on the embedding type.
func (c *Ctx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done returns a channel closed once the context has ended. It is created
// on first use, together with the watch on the parent.
func (c *Ctx) Done() <-chan struct{} {
	if s := c.slow.Load(); s != nil {
		if d, ok := s.done.Load().(chan struct{}); ok {
			return d
		}
	}
	return c.doneSlow()
}

// doneSlow is the slow path of Done: create the channel, then make sure the
// parent's cancellation reaches it.
func (c *Ctx) doneSlow() <-chan struct{} {
	// A parent that ended before anyone watched it: end now, so that the
	// channel returned is already closed (Err must not be non-nil while
	// Done is open; the watch registered below would close it only later,
	// on context.AfterFunc's goroutine).
	_ = c.Err()
	s := c.getSlow()
	s.mu.Lock()
	d, _ := s.done.Load().(chan struct{})
	if d == nil {
		if s.closed || c.code.Load() != uint32(Live) {
			d = closedchan
		} else {
			d = make(chan struct{})
		}
		s.done.Store(d)
	}
	afters, stop := c.closeLocked(s)
	s.mu.Unlock()
	runAfters(afters, stop)
	c.watchParent(s)
	return d
}

// Err returns nil while the context is live, then forever the error its
// Code gives. One atomic load, plus the parent's Err while live.
func (c *Ctx) Err() error {
	switch Code(c.code.Load()) {
	case Live:
	case Fired:
		return context.DeadlineExceeded
	case Finished:
		return context.Canceled
	default:
		return c.parentErr()
	}
	// The parent may be done without having told us (we register with it
	// only when Done or AfterFunc is used).
	if e := c.parent.Err(); e != nil {
		c.Cancel(ParentDone)
		return c.Err()
	}
	return nil
}

// parentErr is the error of a context ended by its parent: the parent's
// Err, which the context contract keeps stable once non-nil.
func (c *Ctx) parentErr() error {
	if e := c.parent.Err(); e != nil {
		return e
	}
	return context.Canceled // a parent that broke the contract: be safe
}

// Value returns the parent's value for key, except for the context
// package's cancelCtx lookup (see cancelCtx).
func (c *Ctx) Value(key any) any {
	if key == cancelCtxKey && key != nil {
		return c.cancelCtx()
	}
	return c.parent.Value(key)
}

// cancelCtx answers the context package's lookup of the nearest
// *context.cancelCtx, made by context.Cause and when a child is derived.
// For a context ended by its parent it is the parent's answer, provided
// that one is cancelled: context.Cause then reports the parent's cause. In
// every other case it is nil: context.Cause falls back to Err (our deadline
// or our owner's cancellation is the cause, not whatever an enclosing live
// cancelCtx holds), and a derived child registers through AfterFunc. (A
// child never attaches to the parent's cancelCtx through this answer: the
// context package checks that the cancelCtx's channel is this context's
// Done channel, and it never is.)
func (c *Ctx) cancelCtx() any {
	if c.Err() == nil || Code(c.code.Load()) != ParentDone {
		return nil
	}
	v := c.parent.Value(cancelCtxKey)
	if p, ok := v.(context.Context); ok && p.Err() != nil {
		return v
	}
	return nil
}

// String names the context for debugging; owners shadow it with their own
// name.
func (c *Ctx) String() string { return "lazyctx.Ctx" }

// AfterFunc arranges for f to be called once the context is done; it is
// what context.WithCancel (and friends, and context.AfterFunc) look for on a
// custom parent, so children derived from this context cost no goroutine.
// f runs synchronously on the goroutine that ends the context, except when
// the context is already done, in which case f starts in its own goroutine
// (the caller may hold locks f needs). The context package wraps user
// functions passed to context.AfterFunc in a goroutine of its own. stop
// unregisters f; it returns true if it stopped f from being called.
func (c *Ctx) AfterFunc(f func()) (stop func() bool) {
	s := c.getSlow()
	e := &afterEntry{f: f}
	s.mu.Lock()
	afters, stopw := c.closeLocked(s)
	if s.closed {
		s.mu.Unlock()
		runAfters(afters, stopw)
		go f()
		return func() bool { return false }
	}
	if s.afters == nil {
		s.afters = make(map[*afterEntry]struct{})
	}
	s.afters[e] = struct{}{}
	s.mu.Unlock()
	c.watchParent(s)
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.afters[e]; !ok {
			return false
		}
		delete(s.afters, e)
		return true
	}
}

// Cancel ends the context with code (Fired, Finished or ParentDone) unless
// it has already ended, and reports whether this call ended it. When Done
// or AfterFunc were used it also closes the channel, runs the AfterFunc
// registrations (on this goroutine) and releases the watch on the parent.
// Fast path: one CAS and one load. A fallback timer is not stopped here
// (see StopTimer).
func (c *Ctx) Cancel(code Code) bool {
	if code == Live || !c.code.CompareAndSwap(uint32(Live), uint32(code)) {
		return false
	}
	// Dekker pairing with getSlow+closeLocked: whoever comes second sees the
	// other's store and does the closing.
	if s := c.slow.Load(); s != nil {
		c.cancelSlow(s)
	}
	return true
}

// cancelSlow is the slow path of Cancel: close the channel, run the
// afters, unregister from the parent.
func (c *Ctx) cancelSlow(s *slowState) {
	s.mu.Lock()
	afters, stop := c.closeLocked(s)
	s.mu.Unlock()
	runAfters(afters, stop)
}

// closeLocked, with s.mu held: if the context has ended and s is not yet
// closed, close it and return what must run outside the lock.
func (c *Ctx) closeLocked(s *slowState) (afters map[*afterEntry]struct{}, stop func() bool) {
	if s.closed || c.code.Load() == uint32(Live) {
		return nil, nil
	}
	s.closed = true
	if d, _ := s.done.Load().(chan struct{}); d != nil {
		if d != closedchan {
			close(d)
		}
	} else {
		s.done.Store(closedchan)
	}
	afters, s.afters = s.afters, nil
	stop, s.stopWatch = s.stopWatch, nil
	return afters, stop
}

func runAfters(afters map[*afterEntry]struct{}, stop func() bool) {
	for e := range afters {
		e.f()
	}
	if stop != nil {
		stop()
	}
}

// watchParent registers, once, for the parent's cancellation: through the
// parent's own AfterFunc method when it has one (a *context.cancelCtx via
// context.AfterFunc: no goroutine until the parent is cancelled; another
// Ctx: none at all), else context.AfterFunc's goroutine.
func (c *Ctx) watchParent(s *slowState) {
	s.mu.Lock()
	if s.watching || s.closed {
		s.mu.Unlock()
		return
	}
	s.watching = true
	s.mu.Unlock()
	var stop func() bool
	if a, ok := c.parent.(afterFuncer); ok {
		// Checked first: asking such a parent (a Ctx) for Done would make
		// its channel for nothing.
		stop = a.AfterFunc(c.parentDone)
	} else if c.parent.Done() == nil {
		return // the parent is never cancelled
	} else {
		stop = context.AfterFunc(c.parent, c.parentDone)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		stop() // ended meanwhile: unregister now
		return
	}
	s.stopWatch = stop
	s.mu.Unlock()
}

func (c *Ctx) parentDone() { c.Cancel(ParentDone) }

// ArmTimer starts a runtime timer that calls f after d, for an owner whose
// own scheduler refused the deadline (it then costs the slow state, the
// timer and f). The timer lives with the slow state so that the common
// path carries no field for it. f typically calls Cancel(Fired). At most
// one timer per context.
func (c *Ctx) ArmTimer(d time.Duration, f func()) {
	s := c.getSlow()
	s.mu.Lock()
	s.timer = time.AfterFunc(d, f)
	s.mu.Unlock()
}

// StopTimer stops the timer ArmTimer started. It reports whether it stopped
// the timer before it fired; false also when no timer was armed. Ending the
// context does not stop the timer: its owner decides, since the result
// tells it whether f is still coming.
func (c *Ctx) StopTimer() bool {
	s := c.slow.Load()
	if s == nil {
		return false
	}
	s.mu.Lock()
	tm := s.timer
	s.mu.Unlock()
	return tm != nil && tm.Stop()
}
