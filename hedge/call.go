package hedge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/internal/watchdog"
)

// slabSize is the number of per-call objects carved from one allocation.
const slabSize = 64

// slab is a batch of per-call objects. A slab is held by one goroutine at a
// time (between the Pool's Get and Put), so next needs no atomic; each call
// object is handed out once and never reused.
type slab struct {
	calls [slabSize]call
	next  int
}

// newCall hands out a fresh per-call object: a sync.Pool Get and Put (per-P,
// no lock), and one allocation per slabSize calls.
func (h *Hedger) newCall(parent context.Context) *call {
	s := h.slabs.Get().(*slab)
	c := &s.calls[s.next]
	s.next++
	if s.next < slabSize {
		h.slabs.Put(s)
	}
	c.parent, c.h = parent, h
	return c
}

// Race states of a call (call.st).
const (
	stRunning  = 0 // the first attempt runs; no hedge yet
	stFinished = 1 // the caller finished before the delay (fast path)
	stFired    = 2 // the trigger fired and handed the call to call.race
)

// Context states (call.cst), bits.
const (
	ctxHasDone  = 1 << iota // a Done channel exists
	ctxCanceled             // cancelled by the hedger (a hedge won): Err is context.Canceled
	ctxParent               // the parent ended first: Err is the parent's
)

// call is one hedged call, and the first attempt's context. It is handed
// out once (see slab) and never reused, so a callee that keeps the context
// after the call keeps a valid one: its Err never goes back to nil and its
// values stay those of the caller's context.
type call struct {
	parent context.Context
	h      *Hedger
	// race is written by the trigger (watchdog goroutine) before the
	// stRunning->stFired CAS that publishes it, and read by the caller only
	// after it saw stFired.
	race  racer
	fn    any                            // the user's function, for the race's goroutines
	start int64                          // the first attempt's start (ticker reading)
	wd    watchdog.Handle                // the armed trigger
	maker interface{ make(*call) racer } // a raceMaker[T]: builds the typed race
	st    atomic.Uint32                  // stRunning / stFinished / stFired
	cst   atomic.Uint32                  // ctxHasDone | ctxCanceled | ctxParent
	mu    sync.Mutex                     // guards done, closed, stop, afters (slow path)
	done  chan struct{}                  // created on the first Done
	stop  func() bool                    // stops the AfterFunc on parent
	after map[*afterFunc]struct{}
}

// racer is what a call needs from its typed race.
type racer interface {
	// hedge starts hedge number i at now (budget already granted).
	hedge(i int, now int64)
	// abort ends the race without a result (the first attempt panicked).
	abort()
}

// Fire is the call's hedge trigger, run on the watchdog goroutine when the
// delay passed. It checks the budget, builds the race, publishes it with a
// CAS (losing to the caller's fast path means the call just finished) and
// starts hedge 1.
func (c *call) Fire(uint64) {
	if c.st.Load() != stRunning {
		return
	}
	h := c.h
	now := h.ticker.Now()
	if h.budget != nil && !h.budget.AllowRetry(now) {
		h.refused.Add(1)
		h.notifyRefused(1)
		return
	}
	r := c.maker.make(c)
	c.race = r
	if !c.st.CompareAndSwap(stRunning, stFired) {
		return
	}
	r.hedge(1, now)
}

// --- context.Context of the first attempt ---

// Deadline returns the caller's context's deadline.
func (c *call) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value returns the caller's context's value.
func (c *call) Value(key any) any { return c.parent.Value(key) }

// Err returns context.Canceled once a hedge won, the caller's context's
// error once it ended, nil before. Once non-nil, it never changes.
func (c *call) Err() error {
	s := c.cst.Load()
	switch {
	case s&ctxCanceled != 0:
		return context.Canceled
	case s&ctxParent != 0:
		return c.parent.Err()
	}
	err := c.parent.Err()
	if err == nil {
		return nil
	}
	// Freeze which error this context reports (the hedger may cancel it
	// concurrently).
	c.setErr(ctxParent)
	return c.Err()
}

// setErr sets the error bit if no error bit is set yet; it reports whether
// it did and returns the state word it left.
func (c *call) setErr(bit uint32) (bool, uint32) {
	for {
		s := c.cst.Load()
		if s&(ctxCanceled|ctxParent) != 0 {
			return false, s
		}
		if c.cst.CompareAndSwap(s, s|bit) {
			return true, s | bit
		}
	}
}

// String names the context for debugging.
func (c *call) String() string { return "hedge.firstAttemptContext" }

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Done returns a channel closed when a hedge wins or the caller's context
// ends. It is created on the first call (slow path: an allocation, and a
// context.AfterFunc on the caller's context when that one can end).
func (c *call) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return c.done
	}
	if c.cst.Load()&(ctxCanceled|ctxParent) != 0 || c.parent.Err() != nil {
		c.setErr(ctxParent)
		c.done = closedChan
		return c.done
	}
	c.done = make(chan struct{})
	for {
		s := c.cst.Load()
		if s&(ctxCanceled|ctxParent) != 0 {
			// Cancelled after the check above: the canceller saw no
			// channel, so close it here.
			close(c.done)
			return c.done
		}
		if c.cst.CompareAndSwap(s, s|ctxHasDone) {
			break
		}
	}
	if c.parent.Done() != nil {
		c.stop = context.AfterFunc(c.parent, c.parentDone)
	}
	return c.done
}

// parentDone runs when the caller's context ends (only registered once Done
// was called).
func (c *call) parentDone() {
	c.setErr(ctxParent)
	c.closeDone()
}

// cancel cancels the first attempt's context because a hedge won.
func (c *call) cancel() {
	if ok, s := c.setErr(ctxCanceled); ok && s&ctxHasDone == 0 {
		return // no channel and no AfterFunc to release
	}
	c.closeDone()
}

// closeDone closes the Done channel if it exists and is open, stops the
// AfterFunc on the parent and runs the registered AfterFuncs.
func (c *call) closeDone() {
	c.mu.Lock()
	if c.done == nil || c.done == closedChan {
		c.mu.Unlock()
		return
	}
	select {
	case <-c.done:
		c.mu.Unlock()
		return
	default:
	}
	close(c.done)
	stop, after := c.stop, c.after
	c.stop, c.after = nil, nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	for a := range after {
		go a.f()
	}
}

// afterFunc is one registration of AfterFunc.
type afterFunc struct{ f func() }

// AfterFunc arranges for f to run on its own goroutine once the context is
// done, as context.AfterFunc does. Implementing it lets the context package
// derive children from this context without a goroutine per child.
func (c *call) AfterFunc(f func()) (stop func() bool) {
	done := c.Done()
	a := &afterFunc{f: f}
	c.mu.Lock()
	select {
	case <-done:
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	default:
	}
	if c.after == nil {
		c.after = make(map[*afterFunc]struct{})
	}
	c.after[a] = struct{}{}
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.after[a]; !ok {
			return false
		}
		delete(c.after, a)
		return true
	}
}

// --- the race (hedge path: allocations allowed) ---

// errGoexit is the result of a hedge attempt that called runtime.Goexit.
var errGoexit = errors.New("hedge: attempt called runtime.Goexit")

// raceMaker builds the typed race of a call. It is a zero-size value, so
// storing it in call.maker allocates nothing.
type raceMaker[T any] struct{}

// make builds the race of c (hedge path).
func (raceMaker[T]) make(c *call) racer { return newRace[T](c) }

func newRace[T any](c *call) *race[T] {
	var fn func(context.Context) (T, error)
	switch f := c.fn.(type) {
	case func(context.Context) (T, error):
		fn = f
	case func(context.Context) error:
		fn = func(ctx context.Context) (T, error) {
			var zero T
			return zero, f(ctx)
		}
	}
	return &race[T]{c: c, h: c.h, fn: fn, running: 1, done: make(chan struct{})}
}

// race is the state of a call once a hedge was triggered. Every field but
// the static ones is guarded by mu; done is closed when the race is decided,
// after which val, err, panicked and pval are read-only.
type race[T any] struct {
	c  *call
	h  *Hedger
	fn func(context.Context) (T, error)

	mu       sync.Mutex
	running  int  // attempts started and not yet reported
	decided  bool // a result was chosen
	winner   int
	val      T
	err      error
	panicked bool
	pval     any
	cancels  [MaxMaxHedges + 1]context.CancelFunc // hedges' contexts
	next     watchdog.Handle                      // the next hedge's trigger
	done     chan struct{}
}

// Fire is the trigger of hedges 2..MaxHedges (and of hedge 1 with
// AsyncFirst), run on the watchdog goroutine.
func (r *race[T]) Fire(arg uint64) {
	i := int(arg)
	r.mu.Lock()
	decided := r.decided
	r.mu.Unlock()
	if decided {
		return
	}
	now := r.h.ticker.Now()
	if r.h.budget != nil && !r.h.budget.AllowRetry(now) {
		r.h.refused.Add(1)
		r.h.notifyRefused(i)
		return
	}
	r.hedge(i, now)
}

// hedge starts hedge i on a new goroutine with its own context, and arms
// the next hedge's trigger.
func (r *race[T]) hedge(i int, now int64) {
	r.mu.Lock()
	if r.decided {
		r.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(r.c.parent)
	r.cancels[i] = cancel
	r.running++
	r.armLocked(i+1, now)
	r.mu.Unlock()
	r.h.hedges.Add(1)
	go r.run(i, ctx)
}

// armLocked arms the trigger of hedge i (if any) one delay after now.
func (r *race[T]) armLocked(i int, now int64) {
	if i > r.h.maxHedges {
		return
	}
	if d := r.h.Delay(); d > 0 {
		var ok bool
		if r.next, ok = r.h.wd.Schedule(now+d, r, uint64(i)); !ok {
			r.h.full.Add(1)
		}
	}
}

// run runs attempt i on its goroutine and reports it, panics included.
func (r *race[T]) run(i int, ctx context.Context) {
	if i > 0 {
		r.h.notifyHedge(i)
	}
	var v T
	var err error
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			r.report(i, v, nil, true, p)
		} else {
			r.report(i, v, errGoexit, false, nil)
		}
	}()
	v, err = r.fn(ctx)
	returned = true
	if i == 0 { // AsyncFirst: the first attempt's latency feeds the percentile
		now := r.h.ticker.Now()
		r.h.Observe(now-r.c.start, now)
	}
	r.report(i, v, err, false, nil)
}

// report hands attempt i's outcome to the race: it decides the race when
// the attempt succeeded, panicked, failed fatally, the caller's context
// ended, or it was the last attempt running. A loser's outcome is dropped.
func (r *race[T]) report(i int, v T, err error, panicked bool, p any) {
	h := r.h
	r.mu.Lock()
	r.running--
	if r.decided {
		r.mu.Unlock()
		return
	}
	fatal := err != nil && h.isFatal(err)
	if !panicked && err != nil && !fatal && r.running > 0 && r.c.parent.Err() == nil {
		// A non-fatal failure while other attempts run: they may still win.
		r.mu.Unlock()
		if h.budget != nil {
			h.budget.OnFailure(h.ticker.Now())
		}
		return
	}
	r.decided, r.winner = true, i
	r.val, r.err, r.panicked, r.pval = v, err, panicked, p
	for j, cancel := range r.cancels {
		if j != i && cancel != nil {
			cancel()
		}
	}
	next := r.next
	r.mu.Unlock()
	h.wd.Cancel(next)
	if i != 0 {
		r.c.cancel()
	}
	close(r.done)
	if h.budget != nil && !panicked {
		switch {
		case err == nil:
			h.budget.OnSuccess(h.ticker.Now())
		case !fatal:
			h.budget.OnFailure(h.ticker.Now())
		}
	}
	if i > 0 && err == nil && !panicked {
		h.won.Add(1)
		h.notifyWon(i)
	}
}

// abort ends the race without a result: the first attempt panicked on the
// caller's goroutine; the hedges are cancelled.
func (r *race[T]) abort() {
	r.mu.Lock()
	if r.decided {
		r.mu.Unlock()
		return
	}
	r.decided, r.winner = true, -1
	for _, cancel := range r.cancels {
		if cancel != nil {
			cancel()
		}
	}
	next := r.next
	r.mu.Unlock()
	r.h.wd.Cancel(next)
	close(r.done)
}

// result waits for the decision and returns it, re-raising a hedge's panic.
func (r *race[T]) result() (T, error) {
	<-r.done
	if r.panicked {
		panic(r.pval)
	}
	return r.val, r.err
}
