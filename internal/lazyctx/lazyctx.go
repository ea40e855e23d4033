// Package lazyctx is the context.Context that a policy hands to the function
// it protects when it must be able to end that context itself: package
// timeout's per-call context (ended by the deadline, by the parent, or when
// the call finished) and package hedge's first-attempt context (ended by the
// parent, or when a hedge won).
//
// What it is for. A callee that only passes its context along or polls Err
// should cost its caller one small object and nothing more. A [Ctx] is
// 48 bytes (the parent, the end code, the Done channel, the parent
// registration's cancel func, the AfterFunc state); the Done channel is made
// on first use, and what only a few callees need (AfterFunc registrations,
// the watch on a parent that has an AfterFunc method) is allocated apart on
// first use. Ending a Ctx is a CAS on the end code and two loads, plus,
// only when Done was asked for, closing the channel (or cancelling the
// registration that owns it).
//
// The owner's operations are package functions ([Init], [End], [CodeOf],
// [Parent]), not methods: the callee receives the Ctx as a context.Context,
// and a type assertion on it must not reach anything that ends it. An owner
// embeds Ctx in its own per-call object and adds what only it needs
// (package timeout: the deadline, and a Deadline method that reports it).
//
// The contract (that of the context package, as context.WithDeadline's
// child):
//
//   - Err is nil while the context is live, then the same error forever: a
//     retained context never comes back to life. The error follows from the
//     [Code] the context ended with: [Fired] gives
//     context.DeadlineExceeded, [Finished] context.Canceled, [ParentDone]
//     the parent's Err (stable once non-nil, by the same contract). A parent
//     that ended is noticed by Err even before anyone asked for Done. Once
//     Err is non-nil, Done is closed (Err waits for the closing, as the
//     context package's cancelCtx does).
//   - Done returns the same channel on every call; it is closed once the
//     context ended. A context that ended before Done was first called
//     returns a shared closed channel.
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
//     owner's End, or, when the parent ended it, the goroutine on which
//     the parent's own AfterFunc callback runs (the parent's canceller when
//     the parent is itself a Ctx; a goroutine of the context package's for
//     a standard-library parent, one hop later). When the context had
//     already ended, f runs on a goroutine of its own (the caller may hold
//     locks f needs). stop unregisters f and reports whether it did so
//     before f was called.
//   - The parent is watched only once Done or AfterFunc is used, so that
//     the Done channel closes when the parent's does. Done registers on the
//     parent in the cheapest way the context package allows: a parent that
//     is never cancelled (Done nil, as Background) needs nothing; a parent
//     with an AfterFunc method (another Ctx) gets a registration through
//     it (no goroutine); a *context.cancelCtx parent (every server
//     request's context) gets a child context.WithCancel, whose Done
//     channel is then this context's (three allocations: the child, its
//     cancel func, its channel; no goroutine). The context package gives
//     no cheaper way to hear of a cancelCtx's cancellation: its children
//     set takes only its own types. Any other cancellable parent is
//     watched through context.AfterFunc (its goroutine). AfterFunc
//     registrations watch the parent too (once per context, shared with
//     Done's watch except for a cancelCtx parent, where context.AfterFunc
//     costs no goroutine). Every watch is released when the context ends.
//
// A Ctx is never reused: the owner allocates a fresh one per call (or carves
// it from a slab that is never recycled), because a callee may keep it.
package lazyctx

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
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
// value is not usable: call [Init] before handing the context out.
//
// Layout: 48 bytes (parent 16, code 4, released 4, done 8, cancel 8,
// slow 8).
type Ctx struct {
	parent context.Context
	// code is Live while the context is live; set once (CAS from Live),
	// never reset.
	code atomic.Uint32
	// released is set (CAS 0 -> 1) by whoever closes the Done channel that
	// Done made: exactly once. (The cancel func of a registered child is
	// idempotent and needs no such guard.)
	released atomic.Uint32
	// done is the Done channel (a chan struct{}), nil until Done is first
	// called; set once (CAS from nil).
	done unsafe.Pointer
	// cancel is the context.CancelFunc of the child that Done registered on
	// the parent (a func value, which is one pointer), nil when Done made a
	// channel of its own. Set before done, so that whoever sees done
	// also sees whether it must cancel or close.
	cancel unsafe.Pointer
	slow   atomic.Pointer[slowState]
}

// slowState is the part of a Ctx that only AfterFunc needs. Its fields are
// guarded by mu.
type slowState struct {
	mu        sync.Mutex
	closed    bool // the context ended and the afters ran
	afters    map[*afterEntry]struct{}
	watching  bool        // the parent watch was set up (or is not needed)
	stopWatch func() bool // unregisters the parent watch
}

type afterEntry struct{ f func() }

// Init sets the parent of a fresh Ctx. It must be called once, before the
// context is shared with another goroutine.
func Init(c *Ctx, parent context.Context) { c.parent = parent }

// Parent returns the context c was derived from.
func Parent(c *Ctx) context.Context { return c.parent }

// CodeOf returns why c ended, or Live. One atomic load; it does not consult
// the parent (Err does).
func CodeOf(c *Ctx) Code { return Code(c.code.Load()) }

// End ends c with code (Fired, Finished or ParentDone) unless it has
// already ended, and reports whether this call ended it. When Done was
// used it also closes the channel (or cancels the child registered on the
// parent, whose channel it is); when AfterFunc was used it runs the
// registrations (on this goroutine) and releases their watch on the
// parent. Fast path (Done never asked for): one CAS and two loads.
func End(c *Ctx, code Code) bool {
	if code == Live || !c.code.CompareAndSwap(uint32(Live), uint32(code)) {
		return false
	}
	// Dekker pairing with doneSlow (publish done, then load code) and with
	// getSlow+closeLocked: whoever comes second sees the other's store and
	// does the closing.
	if atomic.LoadPointer(&c.done) != nil {
		c.release()
	}
	if s := c.slow.Load(); s != nil {
		c.cancelSlow(s)
	}
	return true
}

// release closes the Done channel of an ended context, once: through the
// parent child's cancel func when Done registered one (the channel is that
// child's), else by closing the channel Done made.
func (c *Ctx) release() {
	d := atomic.LoadPointer(&c.done)
	if d == nil {
		return
	}
	if p := atomic.LoadPointer(&c.cancel); p != nil {
		cancelFunc(p)() // idempotent: no need to be the only caller
		return
	}
	if !c.released.CompareAndSwap(0, 1) {
		return
	}
	if ch := chanOf(d); ch != closedchan {
		close(ch)
	}
}

// chanOf and ptrOf convert between a channel and the word that stores it
// (a channel is one pointer), so that Done's fast path is one atomic load
// with no interface or extra indirection.
func chanOf(p unsafe.Pointer) chan struct{} { return *(*chan struct{})(unsafe.Pointer(&p)) }

func ptrOf(ch <-chan struct{}) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&ch)) }

// cancelFunc and funcPtr do the same for a context.CancelFunc (a func value
// is one pointer to its closure).
func cancelFunc(p unsafe.Pointer) context.CancelFunc {
	return *(*context.CancelFunc)(unsafe.Pointer(&p))
}

func funcPtr(f context.CancelFunc) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

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
// on first use, together with the registration on the parent.
func (c *Ctx) Done() <-chan struct{} {
	if d := atomic.LoadPointer(&c.done); d != nil {
		return chanOf(d)
	}
	return c.doneSlow()
}

// doneSlow is the slow path of Done: make the channel and make sure the
// parent's cancellation reaches it (see the package documentation).
func (c *Ctx) doneSlow() <-chan struct{} {
	// A *context.cancelCtx parent (every server request's context) first:
	// its cancellation reaches us, with no goroutine, only through a
	// context of the context package's own making (its children set takes
	// only those). A parent cancelled already cancels that child at once.
	if c.code.Load() == uint32(Live) && isCancelCtx(c.parent) {
		return c.doneChild()
	}
	// A context that ended (a parent that ended before anyone watched it
	// is noticed here) gets the shared closed channel.
	if c.Err() != nil {
		if atomic.CompareAndSwapPointer(&c.done, nil, ptrOf(closedchan)) {
			return closedchan
		}
		return c.waitDone()
	}
	// A parent never cancelled needs no watch; one with an AfterFunc method
	// (another Ctx) gets one through it; a cancellable parent of another
	// type costs context.AfterFunc's goroutine, as a WithCancel child would.
	a, hasAfterFunc := c.parent.(afterFuncer)
	// Checked first: asking such a parent (a Ctx) for Done would make its
	// channel for nothing.
	if !hasAfterFunc && c.parent.Done() != nil {
		a, hasAfterFunc = afterFuncOf{c.parent}, true
	}
	d := make(chan struct{})
	if !atomic.CompareAndSwapPointer(&c.done, nil, ptrOf(d)) {
		return c.waitDone()
	}
	if hasAfterFunc {
		c.watchParent(c.getSlow(), a)
	}
	if c.code.Load() != uint32(Live) {
		c.release() // ended meanwhile: End may have missed the channel
	}
	return d
}

// doneChild is doneSlow under a *context.cancelCtx parent: one child
// context.WithCancel registered on it, whose channel is Done's.
func (c *Ctx) doneChild() <-chan struct{} {
	child, cancel := context.WithCancel(c.parent)
	if !atomic.CompareAndSwapPointer(&c.cancel, nil, funcPtr(cancel)) {
		cancel() // another Done won: use its channel
		return c.waitDone()
	}
	d := child.Done()
	if !atomic.CompareAndSwapPointer(&c.done, nil, ptrOf(d)) {
		// Only the ended path above can have stored a channel meanwhile
		// (the shared closed one): drop the child, keep that channel.
		cancel()
		return c.waitDone()
	}
	if c.code.Load() != uint32(Live) {
		c.release()
	}
	return d
}

// isCancelCtx reports whether parent is, or is derived without a custom
// Done from, a *context.cancelCtx (the test the context package makes
// before it registers a child in the parent's children set): its Value for
// the cancelCtx key is a context whose channel is the parent's. Without the
// key (a future Go), no parent qualifies. (A Ctx parent answers nil while
// live, so its Done is not made here.)
func isCancelCtx(parent context.Context) bool {
	if cancelCtxKey == nil {
		return false
	}
	p, ok := parent.Value(cancelCtxKey).(context.Context)
	if !ok {
		return false
	}
	pd := parent.Done()
	return pd != nil && p.Done() == pd
}

// waitDone returns the channel another goroutine's Done is publishing (a
// few stores away: it already won the CAS that claims the publication).
func (c *Ctx) waitDone() <-chan struct{} {
	for {
		if d := atomic.LoadPointer(&c.done); d != nil {
			return chanOf(d)
		}
		runtime.Gosched()
	}
}

// Err returns nil while the context is live, then forever the error its
// Code gives. One atomic load, plus the parent's Err while live.
func (c *Ctx) Err() error {
	switch Code(c.code.Load()) {
	case Live:
		// The parent may be done without having told us (we register with
		// it only when Done or AfterFunc is used).
		if e := c.parent.Err(); e != nil {
			End(c, ParentDone)
			break
		}
		return nil
	}
	// Ended: Done, if it was asked for, must be closed before Err reports
	// the end (the ender closes it right after its CAS; wait for it as the
	// context package's cancelCtx.Err does).
	if d := atomic.LoadPointer(&c.done); d != nil {
		<-chanOf(d)
	}
	switch Code(c.code.Load()) {
	case Fired:
		return context.DeadlineExceeded
	case Finished:
		return context.Canceled
	default:
		return c.parentErr()
	}
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
// Registering ends nothing: a callee that calls it directly only gets
// called back.
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
	c.watchParentOnce(s)
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

// cancelSlow is the slow path of End: run the afters, unregister their
// watch on the parent.
func (c *Ctx) cancelSlow(s *slowState) {
	s.mu.Lock()
	afters, stop := c.closeLocked(s)
	s.mu.Unlock()
	runAfters(afters, stop)
}

// closeLocked, with s.mu held: if the context has ended and s is not yet
// closed, close it and return what must run outside the lock. The Done
// channel is closed first (release), so that the afters see it closed.
func (c *Ctx) closeLocked(s *slowState) (afters map[*afterEntry]struct{}, stop func() bool) {
	if s.closed || c.code.Load() == uint32(Live) {
		return nil, nil
	}
	s.closed = true
	c.release()
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

// watchParentOnce registers, once, for the parent's cancellation on behalf
// of the AfterFunc registrations: through the parent's own AfterFunc method
// when it has one (another Ctx: no goroutine), else context.AfterFunc (a
// *context.cancelCtx: no goroutine until it is cancelled; another parent:
// context.AfterFunc's goroutine). A parent that is never cancelled needs
// none.
func (c *Ctx) watchParentOnce(s *slowState) {
	if a, ok := c.parent.(afterFuncer); ok {
		c.watchParent(s, a)
		return
	}
	if c.parent.Done() == nil {
		return // the parent is never cancelled
	}
	c.watchParent(s, afterFuncOf{c.parent})
}

// afterFuncOf gives a parent without an AfterFunc method context.AfterFunc
// as one.
type afterFuncOf struct{ ctx context.Context }

func (a afterFuncOf) AfterFunc(f func()) func() bool { return context.AfterFunc(a.ctx, f) }

// watchParent registers, once per context, parentDone through a (the
// parent, or context.AfterFunc on it).
func (c *Ctx) watchParent(s *slowState, a afterFuncer) {
	s.mu.Lock()
	if s.watching || s.closed {
		s.mu.Unlock()
		return
	}
	s.watching = true
	s.mu.Unlock()
	stop := a.AfterFunc(c.parentDone)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		stop() // ended meanwhile: unregister now
		return
	}
	s.stopWatch = stop
	s.mu.Unlock()
}

func (c *Ctx) parentDone() { End(c, ParentDone) }
