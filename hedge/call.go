package hedge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/lazyctx"
	"github.com/rampart-go/rampart/internal/watchdog"
	"time"
)

// cellSlab is the number of first-attempt contexts carved from one
// allocation.
const cellSlab = 128

// newCall takes a call state from the pool (a per-P sync.Pool Get) and a
// fresh context cell from the state's slab (one allocation per cellSlab
// calls).
func (h *Hedger) newCall(parent context.Context) *call {
	c, _ := h.calls.Get().(*call)
	if c == nil {
		c = &call{h: h, next: cellSlab}
	}
	if c.next == len(c.cells) {
		c.cells, c.next = new([cellSlab]firstCtx), 0
	}
	c.ctx = &c.cells[c.next]
	c.next++
	lazyctx.Init(&c.ctx.Ctx, parent)
	return c
}

// release returns a finished call's state to the pool: only when nothing
// can touch it any more (the trigger was cancelled before it fired, or was
// never armed).
func (h *Hedger) release(c *call) {
	// fn and race are cleared so that the pool does not keep the user's
	// closure or a race alive; ctx and maker are overwritten by newCall.
	c.fn, c.race, c.held = nil, nil, false
	c.wd = watchdog.Handle{}
	c.st.Store(stRunning)
	h.calls.Put(c)
}

// Race states of a call (call.st).
const (
	stRunning  = 0 // the first attempt runs; no hedge yet
	stFinished = 1 // the caller finished before the delay (fast path)
	stFired    = 2 // the trigger fired and handed the call to call.race
)

// call is the reusable state of one hedged call; the watchdog fires it. It
// returns to the Hedger's pool when the call finished before the delay and
// its trigger was disarmed before firing; otherwise (a hedge started, or the
// trigger was firing) it is left to the garbage collector.
type call struct {
	h   *Hedger
	ctx *firstCtx // the first attempt's context (never reused)
	// race is written by the trigger (watchdog goroutine) before the
	// stRunning->stFired CAS that publishes it, and read by the caller only
	// after it saw stFired.
	race  racer
	fn    any                            // the user's function, for the race's goroutines
	maker interface{ make(*call) racer } // a raceMaker[T]: builds the typed race
	start int64                          // the first attempt's start (ticker reading)
	wd    watchdog.Handle                // the armed trigger
	st    atomic.Uint32                  // stRunning / stFinished / stFired
	cells *[cellSlab]firstCtx            // the slab contexts are carved from
	next  int                            // the next free cell in cells
	held  bool                           // the DoAtHeld contract
}

// racer is what a call needs from its typed race.
type racer interface {
	// fire asks the budget for hedge number i at now and starts it, unless
	// the race is already decided.
	fire(i int, now int64)
	// abort ends the race without a result (the first attempt panicked).
	abort()
}

// Fire is the call's hedge trigger, run on the watchdog goroutine when the
// delay passed. It builds the race and publishes it with a CAS (losing to
// the caller's fast path means the call just finished: the budget is not
// asked), then asks the budget for hedge 1 under the race's decision check
// (race.fire). A refusal leaves a race with the first attempt alone and no
// next trigger: the first attempt decides it.
func (c *call) Fire(uint64) {
	if c.st.Load() != stRunning {
		return
	}
	h := c.h
	now := h.ticker.Now()
	r := c.maker.make(c)
	c.race = r
	if !c.st.CompareAndSwap(stRunning, stFired) {
		return
	}
	// The caller may reuse c from here (joinRace): only r from now on.
	r.fire(1, now)
}

// --- the first attempt's context ---

// firstCtx is the first attempt's context.Context: a lazyctx.Ctx whose
// parent is the caller's context. Its Err is context.Canceled once a hedge
// won (lazyctx.Finished), the caller's context's error once that one ended
// first (lazyctx.ParentDone), nil before; once non-nil it never changes.
// Deadline and Value are the caller's context's. It is handed out once and
// never reused, so a callee that keeps it after the call keeps a valid
// context. It is 48 bytes, carved from slabs (see newCall); what Done and
// AfterFunc need is allocated on their first use.
type firstCtx struct {
	lazyctx.Ctx
}

// String names the context for debugging.
func (c *firstCtx) String() string { return "hedge.firstAttemptContext" }

// cancel cancels the first attempt's context because a hedge won. A
// context that already ended (the caller's context was done first) keeps
// its error.
func (c *firstCtx) cancel() { lazyctx.End(&c.Ctx, lazyctx.Finished) }

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
	r := &race[T]{h: c.h, first: c.ctx, parent: lazyctx.Parent(&c.ctx.Ctx), start: c.start, fn: fn, running: 1, done: make(chan struct{}), held: c.held}
	if r.held {
		r.idle = make(chan struct{})
	}
	return r
}

// race is the state of a call once a hedge was triggered. Every field but
// the static ones is guarded by mu; done is closed when the race is decided,
// after which val, err, panicked and pval are read-only.
type race[T any] struct {
	h      *Hedger
	first  *firstCtx       // the first attempt's context, cancelled when a hedge wins
	parent context.Context // the caller's context, parent of the hedges' contexts
	start  int64           // the first attempt's start
	fn     func(context.Context) (T, error)

	mu       sync.Mutex
	running  int  // attempts started and not yet reported
	decided  bool // a result was chosen
	winner   int
	val      T
	err      error
	panicked bool
	pval     any
	cancels  [MaxHedgesLimit + 1]context.CancelFunc // hedges' contexts
	next     watchdog.Handle                        // the next hedge's trigger
	done     chan struct{}
	held     bool          // the DoAtHeld contract
	idle     chan struct{} // held: closed when no attempt runs any more
}

// endedLocked counts an attempt that has ended (reported, or the first one
// aborted); the last one closes idle. r.mu held.
func (r *race[T]) endedLocked() {
	r.running--
	if r.running == 0 && r.idle != nil {
		close(r.idle)
	}
}

// Fire is the trigger of hedges 2..MaxHedges (and of hedge 1 with
// AsyncFirst), run on the watchdog goroutine.
func (r *race[T]) Fire(arg uint64) { r.fire(int(arg), r.h.ticker.Now()) }

// fire asks the budget for hedge i and starts it on a new goroutine with
// its own context, arming the next hedge's trigger. The budget is asked
// under r.mu, while the race is undecided: an attempt that ends meanwhile
// reports after the answer, so a grant always starts its hedge and a
// decided race asks nothing. (A hedge whose race is decided before its
// goroutine runs still skips fn: see Stats.Hedges.)
func (r *race[T]) fire(i int, now int64) {
	h := r.h
	r.mu.Lock()
	locked := true
	defer func() {
		if locked { // a decided race, or a Budget panic (the watchdog recovers it)
			r.mu.Unlock()
		}
	}()
	if r.decided {
		return
	}
	if h.budget != nil && !h.budget.AllowRetry(now) {
		h.refused.Add(1)
		locked = false
		r.mu.Unlock()
		h.notifyRefused(i)
		return
	}
	ctx, cancel := context.WithCancel(r.parent)
	r.cancels[i] = cancel
	r.running++
	r.armLocked(i+1, now)
	locked = false
	r.mu.Unlock()
	go r.run(i, ctx)
}

// armLocked arms the trigger of hedge i (if any) one delay after now.
func (r *race[T]) armLocked(i int, now int64) {
	if int64(i) > r.h.maxHedges.Load() {
		return
	}
	if d := r.h.delayNs(); d > 0 {
		var ok bool
		if r.next, ok = r.h.wd.Schedule(atomicx.SatAdd(now, d), r, uint64(i)); !ok {
			r.h.full.Add(1)
		}
	}
}

// run runs attempt i on its goroutine and reports it, panics included. The
// user code after fn (the Fatal classifier, a user Ticker) runs under the
// same guard: a panic there is the attempt's panic, re-raised on the
// caller's goroutine, not a crash of the hedge's.
func (r *race[T]) run(i int, ctx context.Context) {
	var v T
	var err error
	returned := false
	defer func() {
		if returned {
			return
		}
		if p := recover(); p != nil {
			r.report(i, v, nil, false, true, p)
		} else {
			r.report(i, v, errGoexit, false, false, nil)
		}
	}()
	if i > 0 {
		if err = ctx.Err(); err != nil {
			// The race was decided (or the caller's context ended) before
			// this goroutine ran: do not call fn at all.
			fatal := r.h.isFatal(err)
			returned = true
			r.report(i, v, err, fatal, false, nil)
			return
		}
		r.h.hedges.Add(1)
		r.h.notifyHedge(i)
	}
	v, err = r.fn(ctx)
	fatal := err != nil && r.h.isFatal(err)
	if i == 0 { // AsyncFirst: the first attempt's latency feeds the percentile
		now := r.h.ticker.Now()
		r.h.ObserveAt(now, time.Duration(now-r.start))
	}
	returned = true
	r.report(i, v, err, fatal, false, nil)
}

// report hands attempt i's outcome to the race: it decides the race when
// the attempt succeeded, panicked, failed fatally (fatal: the caller ran
// Config.Fatal on err, outside the race's lock), the caller's context
// ended, or it was the last attempt running. A loser's outcome is dropped.
func (r *race[T]) report(i int, v T, err error, fatal, panicked bool, p any) {
	h := r.h
	r.mu.Lock()
	r.endedLocked()
	if r.decided {
		r.mu.Unlock()
		return
	}
	if !panicked && err != nil && !fatal && r.running > 0 && r.parent.Err() == nil {
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
	// The caller is released whatever the user code below does (a Budget,
	// the Ticker, the OnHedgeWon listener): a panic there is re-raised on
	// the caller's goroutine like a hedge's own, a runtime.Goexit ends only
	// this goroutine.
	defer func() {
		if p := recover(); p != nil {
			r.panicked, r.pval = true, p // read by result after done is closed
		}
		// The first attempt's context stays live when that attempt won with
		// what it returned (a result may read through it, as Call's doc
		// says); a first attempt that panicked or called runtime.Goexit
		// returned nothing: end its context, which releases what its Done
		// registered on the caller's context.
		if i != 0 || panicked || err == errGoexit {
			r.first.cancel()
		}
		close(r.done)
	}()
	// Stats, budget and listener before the caller is released, so that
	// they are up to date when the call returns. Held: the decider's
	// outcome is the caller's to record.
	if h.budget != nil && !panicked && !r.held {
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
// caller's goroutine (or its result could not be reported); its context is
// ended and the hedges are cancelled.
func (r *race[T]) abort() {
	r.mu.Lock()
	r.endedLocked() // the first attempt, which will not report
	if r.decided {
		r.mu.Unlock()
		r.waitIdle()
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
	r.first.cancel() // the first attempt is over, without a result
	r.h.wd.Cancel(next)
	close(r.done)
	r.waitIdle()
}

// waitIdle waits, under the DoAtHeld contract, until no attempt runs: the
// losers were cancelled when the race was decided.
func (r *race[T]) waitIdle() {
	if r.idle != nil {
		<-r.idle
	}
}

// result waits for the decision and returns it, re-raising a hedge's panic.
func (r *race[T]) result() (T, error) {
	<-r.done
	r.waitIdle()
	if r.panicked {
		panic(r.pval)
	}
	return r.val, r.err
}
