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
// registration that owns it, after a second CAS, a look at the channel
// and a store: see End).
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
//     Err is non-nil, Done is closed, and so is the channel of any later
//     Done (Err waits for the closing, as the context package's cancelCtx
//     does, and installs the shared closed channel when Done was never
//     asked for).
//   - The first end wins, and a parent that closed Done's channel ended
//     the context: under a *context.cancelCtx parent, Done's channel is a
//     registered child's (see below), which the parent closes itself,
//     without a word to the Ctx. End, on that path only, first claims the
//     context, then looks at the channel: closed, the context ends
//     [ParentDone] (Err and Cause are the parent's) whatever code the
//     owner passed, as a context.WithDeadline child cancelled by its
//     parent keeps the parent's error when its deadline passes later.
//     Readers that meet a claimed context wait (a few instructions) for
//     the decision.
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

// The code word (Ctx.code) holds the Code in its low bits and two flags.
const (
	codeMask = 0xff
	// childBit: Done registered a child on a *context.cancelCtx parent (or
	// is registering one), so Done's channel may be closed by the parent
	// itself, without telling us. It makes End's fast CAS (from a bare
	// Live) fail, so that End takes the path that decides who ended the
	// context first (endChild).
	childBit = 1 << 8
	// pendingBit: an End claimed the context and is deciding its code
	// (endChild); readers wait for the decision.
	pendingBit = 1 << 9
)

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
	// code is the code word: the Code (Live while the context is live;
	// set once, never reset) and the flags childBit and pendingBit.
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
	// channel of its own. Set (once, by the Done that set childBit) before
	// done, so that whoever sees done also sees whether it must cancel or
	// close.
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
// the parent (Err does). While an End is deciding the code (see End) it
// waits for the decision.
func CodeOf(c *Ctx) Code {
	w := c.code.Load()
	if w&pendingBit != 0 {
		w = c.settle()
	}
	return Code(w & codeMask)
}

// settle returns the code word once no End is deciding it: an End that
// claimed the context (endChild) stores its decision a few instructions
// later.
func (c *Ctx) settle() uint32 {
	for {
		if w := c.code.Load(); w&pendingBit == 0 {
			return w
		}
		runtime.Gosched()
	}
}

// live reports whether the settled code word w is that of a live context.
func live(w uint32) bool { return w&codeMask == uint32(Live) }

// End ends c with code (Fired, Finished or ParentDone) unless it has
// already ended, and reports whether this call ended it with code. When
// Done was used it also closes the channel (or cancels the child
// registered on the parent, whose channel it is); when AfterFunc was used
// it runs the registrations (on this goroutine) and releases their watch
// on the parent. Fast path (Done never asked for): one CAS and two loads.
//
// Under a *context.cancelCtx parent, Done's channel is the registered
// child's, which the parent closes itself when it is cancelled: a context
// whose channel the parent closed before End claimed it ends ParentDone,
// whatever code End was given (End then reports false), as a
// context.WithDeadline child cancelled by its parent keeps the parent's
// error when its deadline passes later.
func End(c *Ctx, code Code) bool {
	if code == Live {
		return false
	}
	if !c.code.CompareAndSwap(uint32(Live), uint32(code)) {
		// Ended already, or Done registered a child on the parent.
		return c.endChild(code)
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

// endChild is End for a live context whose Done registered a child on a
// *context.cancelCtx parent (the code word is Live|childBit): the parent
// may have closed Done's channel already. End claims the context (pending)
// first and only then looks at the channel, so that the parent cannot
// close it unseen between the look and the claim: a channel closed before
// the claim was closed by the parent (nothing of ours closes it before a
// decision: release waits for it), and the context ends ParentDone. A
// channel closed after the look is closed on a context that had already
// ended with code; readers that see it closed meanwhile wait in settle for
// the decision. The extra store and the look are paid only on this path,
// which also cancels the child (the parent's lock).
func (c *Ctx) endChild(code Code) bool {
	// A load first: an End on a context that already ended (the usual
	// reason the fast CAS failed) pays no second locked instruction.
	if c.code.Load() != childBit || !c.code.CompareAndSwap(childBit, childBit|pendingBit|uint32(code)) {
		return false // ended already (or being ended)
	}
	ended := code
	if code != ParentDone && c.childClosed() {
		ended = ParentDone
	}
	c.code.Store(childBit | uint32(ended))
	// A Done still publishing the channel releases it when it sees the
	// code (doneChild's tail).
	c.release()
	if s := c.slow.Load(); s != nil {
		c.cancelSlow(s)
	}
	return ended == code
}

// childClosed reports whether the channel of the child that Done
// registered on the parent is published and closed.
func (c *Ctx) childClosed() bool {
	d := atomic.LoadPointer(&c.done)
	if d == nil || d == ptrOf(closedchan) || atomic.LoadPointer(&c.cancel) == nil {
		return false
	}
	select {
	case <-chanOf(d):
		return true
	default:
		return false
	}
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
	if live(c.code.Load()) && isCancelCtx(c.parent) {
		return c.doneChild()
	}
	// A context that ended (a parent that ended before anyone watched it
	// is noticed here) gets the shared closed channel: Err installs it.
	if c.Err() != nil {
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
	if !live(c.settle()) {
		// Ended meanwhile: End may have missed the channel, and the slow
		// state with the watch just registered.
		c.release()
		if s := c.slow.Load(); s != nil {
			c.cancelSlow(s)
		}
	}
	return d
}

// doneChild is doneSlow under a *context.cancelCtx parent: one child
// context.WithCancel registered on it, whose channel is Done's. The
// registering Done first sets childBit in the code word (a CAS from a bare
// Live, which also elects it among concurrent first Dones), so that every
// End from then on decides, in endChild, whether the parent closed the
// channel first.
func (c *Ctx) doneChild() <-chan struct{} {
	if !c.code.CompareAndSwap(uint32(Live), childBit) {
		if live(c.code.Load()) {
			return c.waitDone() // another Done is registering: use its channel
		}
		c.Err() // ended: Err installs the shared closed channel if none
		return c.waitDone()
	}
	child, cancel := context.WithCancel(c.parent)
	atomic.StorePointer(&c.cancel, funcPtr(cancel))
	d := child.Done()
	if !atomic.CompareAndSwapPointer(&c.done, nil, ptrOf(d)) {
		// Only an Err on the ended context can have stored a channel
		// meanwhile (the shared closed one): drop the child, keep that
		// channel.
		cancel()
		return c.waitDone()
	}
	// Ended meanwhile: End may have missed the channel. (Not before the
	// decision: releasing would close the channel End is looking at.)
	if !live(c.settle()) {
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
	w := c.code.Load()
	if live(w) {
		// The parent may be done without having told us (we register with
		// it only when Done or AfterFunc is used).
		if e := c.parent.Err(); e != nil {
			End(c, ParentDone)
		} else {
			return nil
		}
	}
	// Ended: wait for the code if an End is deciding it (endChild).
	w = c.settle()
	// Done, if it was asked for, must be closed before Err reports the end
	// (the ender closes it right after its decision; wait for it as the
	// context package's cancelCtx.Err does). A context without a channel
	// yet gets the shared closed one, so that a Done that follows this Err
	// (or one between its liveness check and its publication) returns a
	// closed channel: one CAS, on the first Err after the end only.
	d := atomic.LoadPointer(&c.done)
	if d == nil && !atomic.CompareAndSwapPointer(&c.done, nil, ptrOf(closedchan)) {
		d = atomic.LoadPointer(&c.done)
	}
	if d != nil && d != ptrOf(closedchan) {
		<-chanOf(d)
	}
	switch Code(w & codeMask) {
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
	if c.Err() == nil || CodeOf(c) != ParentDone {
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
//
// A context whose End is still deciding its code (pendingBit) counts as
// live here: that End runs cancelSlow once it has decided (it loads slow
// after its decision), and releasing now would close the channel it is
// looking at.
func (c *Ctx) closeLocked(s *slowState) (afters map[*afterEntry]struct{}, stop func() bool) {
	if w := c.code.Load(); s.closed || live(w) || w&pendingBit != 0 {
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
