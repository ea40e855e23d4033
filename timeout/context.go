package timeout

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Why a context ended (ctx.state). The error itself is derived from the
// code, so ending a context is a CAS on a 32-bit word (no pointer store,
// hence no GC write barrier on the hot path).
const (
	endLive     = 0 // not ended: Err is nil
	endFired    = 1 // our deadline fired: context.DeadlineExceeded
	endFinished = 2 // the call finished first: context.Canceled
	endParent   = 3 // the parent was done first: the parent's Err (stable once non-nil)
)

// closedchan is a reusable closed channel, returned by Done when the
// context was already done before anyone asked for its channel.
var closedchan = make(chan struct{})

func init() { close(closedchan) }

// cancelCtxKey is the address of the context package's private cancelCtxKey,
// captured once by probing context.Cause (see probeCancelCtxKey). A timeout
// context answers nil for it, so that context.Cause and the context
// package's parent lookup do not see through it to an enclosing
// *context.cancelCtx (whose cause would be the wrong answer once this
// context's own deadline fired). If the probe finds nothing (a future Go),
// the key is nil and Value simply delegates.
var cancelCtxKey = probeCancelCtxKey()

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

// ctx is the context handed to the callee in deadline mode and by DoAbandon. A
// fresh one is allocated per call (one 64-byte object) and never reused: a
// callee may keep it, and a kept context stays done with the same error
// forever.
//
// Everything that only some callees need (the Done channel, AfterFunc
// registrations, the parent watch, a fallback timer) lives in a ctxSlow
// allocated on first use, so a callee that only passes the context along or
// polls Err pays for nothing more.
//
// Layout: 48 bytes (parent 16, t 8, deadline 8, state 4+4, slow 8); the
// watch handle travels in the Handle, not here.
type ctx struct {
	parent   context.Context
	t        *Timeout
	deadline int64 // ticker reading
	// state is endLive while the context is live; set once (CAS from
	// endLive), never reset.
	state atomic.Uint32
	slow  atomic.Pointer[ctxSlow]
}

// ctxSlow is the lazily allocated part of a ctx. Its fields are guarded by
// mu except done, which is also read without the lock.
type ctxSlow struct {
	mu        sync.Mutex
	done      atomic.Value // chan struct{}
	closed    bool         // the done channel is closed and the afters ran
	afters    map[*afterEntry]struct{}
	watching  bool        // the parent watch was set up (or is not needed)
	stopWatch func() bool // unregisters the parent watch
	timer     *time.Timer // fallback when the watchdog refused the schedule
}

type afterEntry struct{ f func() }

func (c *ctx) getSlow() *ctxSlow {
	if s := c.slow.Load(); s != nil {
		return s
	}
	s := new(ctxSlow)
	if c.slow.CompareAndSwap(nil, s) {
		return s
	}
	return c.slow.Load()
}

// Deadline returns the instant of the deadline, or the parent's deadline if
// that is earlier. The ticker deadline is converted with the Timeout's
// epoch (a time.Time taken in New, minus the ticker reading then), so
// successive calls return the same value and the result carries a
// monotonic reading (time.Until on it is immune to wall-clock steps).
func (c *ctx) Deadline() (time.Time, bool) {
	d := c.t.epoch.Add(time.Duration(c.deadline))
	if pd, ok := c.parent.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

// Done returns a channel closed when the deadline passes, the parent is
// done, or the call finished (Finish). It is created on first use.
func (c *ctx) Done() <-chan struct{} {
	if s := c.slow.Load(); s != nil {
		if d, ok := s.done.Load().(chan struct{}); ok {
			return d
		}
	}
	return c.doneSlow()
}

// doneSlow is the slow path of Done: create the channel, then make sure the
// parent's cancellation reaches it.
func (c *ctx) doneSlow() <-chan struct{} {
	s := c.getSlow()
	s.mu.Lock()
	d, _ := s.done.Load().(chan struct{})
	if d == nil {
		if s.closed || c.state.Load() != endLive {
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

// Err returns nil while the context is live, then forever the same error:
// context.DeadlineExceeded when the deadline fired, the parent's error when
// the parent was done first, context.Canceled when the call finished first.
// One atomic load, plus the parent's Err while live.
func (c *ctx) Err() error {
	switch c.state.Load() {
	case endLive:
	case endFired:
		return context.DeadlineExceeded
	case endFinished:
		return context.Canceled
	default:
		return c.parentErr()
	}
	// The parent may be done without having told us (we register with it
	// only when Done or AfterFunc is used).
	if e := c.parent.Err(); e != nil {
		c.cancel(endParent)
		return c.Err()
	}
	return nil
}

// parentErr is the error of a context ended by its parent: the parent's
// Err, which the context contract keeps stable once non-nil.
func (c *ctx) parentErr() error {
	if e := c.parent.Err(); e != nil {
		return e
	}
	return context.Canceled // a parent that broke the contract: be safe
}

// Value returns the parent's value for key.
func (c *ctx) Value(key any) any {
	if key == cancelCtxKey && key != nil {
		return nil
	}
	return c.parent.Value(key)
}

// String names the context for debugging.
func (c *ctx) String() string {
	if c.t.name != "" {
		return "timeout.Context(" + c.t.name + ")"
	}
	return "timeout.Context"
}

// AfterFunc arranges for f to be called once the context is done; it is
// what context.WithCancel (and friends, and context.AfterFunc) look for on a
// custom parent, so children derived from this context cost no goroutine.
// f runs synchronously on the goroutine that ends the context (the watchdog,
// the parent's canceller, or Finish), except when the context is already
// done, in which case f starts in its own goroutine (the caller may hold
// locks f needs). The context package wraps user functions passed to
// context.AfterFunc in a goroutine of its own. stop unregisters f; it
// returns true if it stopped f from being called.
func (c *ctx) AfterFunc(f func()) (stop func() bool) {
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

// Fire is the watchdog's callback: the deadline passed.
func (c *ctx) Fire(uint64) { c.cancel(endFired) }

// cancel ends the context with code unless it has already ended. It
// reports whether this call ended it. Fast path: one CAS and one load.
func (c *ctx) cancel(code uint32) bool {
	if !c.state.CompareAndSwap(endLive, code) {
		return false
	}
	// Dekker pairing with getSlow+closeLocked: whoever comes second sees the
	// other's store and does the closing.
	if s := c.slow.Load(); s != nil {
		c.cancelSlow(s)
	}
	return true
}

// cancelSlow is the slow path of cancel: close the channel, run the afters,
// unregister from the parent, stop a fallback timer.
func (c *ctx) cancelSlow(s *ctxSlow) {
	s.mu.Lock()
	afters, stop := c.closeLocked(s)
	s.mu.Unlock()
	runAfters(afters, stop)
}

// closeLocked, with s.mu held: if the context has ended and s is not yet
// closed, close it and return what must run outside the lock.
func (c *ctx) closeLocked(s *ctxSlow) (afters map[*afterEntry]struct{}, stop func() bool) {
	if s.closed || c.state.Load() == endLive {
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
	// A fallback timer is stopped by unwatch (Finish), never here: its
	// Stop result tells DoAbandon whether a wake token is coming.
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
// timeout context: none at all), else context.AfterFunc's goroutine.
func (c *ctx) watchParent(s *ctxSlow) {
	s.mu.Lock()
	if s.watching || s.closed {
		s.mu.Unlock()
		return
	}
	s.watching = true
	s.mu.Unlock()
	if c.parent.Done() == nil {
		return // the parent is never cancelled
	}
	var stop func() bool
	if a, ok := c.parent.(afterFuncer); ok {
		stop = a.AfterFunc(c.parentDone)
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

func (c *ctx) parentDone() { c.cancel(endParent) }
