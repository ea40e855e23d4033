package hedge

import (
	"context"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/lazyctx"
	"time"
)

// Do runs fn, hedged: calling it is the caller's promise that fn is
// idempotent. The first attempt runs on the caller's goroutine with a
// context derived from ctx; if it has not returned after the delay, hedges
// start (see the package doc). It returns the error of the attempt that
// decided the race, unchanged (nil for a success). With a percentile delay
// still warming up and no Config.Delay, fn runs once, unhedged, with ctx.
// A context that is already done runs nothing: Do returns ctx.Err() and
// the budget records nothing (every entry point does the same).
//
// Fast path (the first attempt returns before the delay): no goroutine, no
// timer, no allocation; one or two clock reads and a handful of atomics.
func (h *Hedger) Do(ctx context.Context, fn func(context.Context) error) error {
	// Clock read 1: the trigger's deadline and the latency's start.
	_, err := run(h, ctx, h.ticker.Now(), fn, invokeDo, false)
	return err
}

// Call runs fn hedged through h, like [Hedger.Do], and returns the winning
// attempt's result. Calling it is the caller's promise that fn is
// idempotent. The winner's context is not cancelled when Call returns, so a
// result that reads through it (an HTTP response body) stays readable.
func Call[T any](ctx context.Context, h *Hedger, fn func(context.Context) (T, error)) (T, error) {
	return run(h, ctx, h.ticker.Now(), fn, invokeCall[T], false)
}

// DoAtHeld is [Hedger.Do] for a caller that has just read the hedger's
// ticker (now is that reading, the start of the first attempt, so the call
// reads the clock once less), holds permits for the call and keeps its own
// books, as package pipeline does:
//   - it returns only once every attempt it started has returned (the
//     losers' contexts are cancelled when the race is decided, so a callee
//     that honours its context returns at once): a concurrency permit the
//     caller releases afterwards never leaves an attempt running;
//   - the budget's OnRequest and the outcome of the attempt that decides the
//     race are the caller's to record (a pipeline's retry records them);
//     the hedger still asks AllowRetry before each hedge and records the
//     failures of hedges that do not decide the race.
func (h *Hedger) DoAtHeld(ctx context.Context, now int64, fn func(context.Context) error) error {
	_, err := run(h, ctx, now, fn, invokeDo, true)
	return err
}

// CallAtHeld is [Call] with the reading and the contract of [Hedger.DoAtHeld].
func CallAtHeld[T any](ctx context.Context, h *Hedger, now int64, fn func(context.Context) (T, error)) (T, error) {
	return run(h, ctx, now, fn, invokeCall[T], true)
}

func invokeDo(fn func(context.Context) error, ctx context.Context) (struct{}, error) {
	return struct{}{}, fn(ctx)
}

func invokeCall[T any](fn func(context.Context) (T, error), ctx context.Context) (T, error) {
	return fn(ctx)
}

// run is Do and Call: F is the user's function type, invoke calls it. held:
// the DoAtHeld contract.
func run[T, F any](h *Hedger, ctx context.Context, start int64, fn F, invoke func(F, context.Context) (T, error), held bool) (T, error) {
	// A context already done starts nothing, as in a pipeline: one
	// interface call (an atomic load for the standard library's contexts;
	// Done would allocate a cancelCtx's channel).
	if err := ctx.Err(); err != nil {
		var zero T
		return zero, err
	}
	if h.budget != nil && !held {
		h.budget.OnRequest(start)
	}
	if h.async {
		return runAsync[T](h, ctx, fn, start, held)
	}
	d := h.delayNs() // one atomic load with a percentile delay
	if d <= 0 {
		return runPlain(h, ctx, fn, invoke, start, held)
	}
	c := h.newCall(ctx)
	c.fn, c.maker, c.start, c.held = fn, raceMaker[T]{}, start, held
	var ok bool
	// Atomics: a CAS to pop a slot, a store to arm it, a load of the
	// watchdog's run state.
	if c.wd, ok = h.wd.Schedule(atomicx.SatAdd(start, d), c, 0); !ok {
		h.full.Add(1)
	}
	returned := false
	defer func() {
		if !returned {
			abandon(c) // fn panicked or called runtime.Goexit
		}
	}()
	v, err := invoke(fn, c.ctx)
	returned = true
	// One CAS: whoever moves the state out of stRunning (this caller, or
	// the trigger) owns the call.
	if c.st.CompareAndSwap(stRunning, stFinished) {
		// A CAS on the slot and one to free it. The state is reused only
		// when the trigger cannot be running (disarmed, or never armed).
		if h.wd.Cancel(c.wd) || !c.wd.Valid() {
			h.release(c)
		}
		h.done(start, err, held)
		return v, err
	}
	return joinRace[T](h, c, v, err)
}

// runPlain runs fn once with ctx, unhedged (a percentile warming up).
func runPlain[T, F any](h *Hedger, ctx context.Context, fn F, invoke func(F, context.Context) (T, error), start int64, held bool) (T, error) {
	v, err := invoke(fn, ctx)
	h.done(start, err, held)
	return v, err
}

// done records the outcome of a call whose first attempt decided it alone:
// its latency (clock read 2, percentile delay only) and the budget.
func (h *Hedger) done(start int64, err error, held bool) {
	now := start
	if h.percentile {
		now = h.ticker.Now()
		h.ObserveAt(now, time.Duration(now-start))
	}
	if h.budget != nil && !held {
		if err == nil {
			h.budget.OnSuccess(now)
		} else if !h.isFatal(err) {
			h.budget.OnFailure(now)
		}
	}
}

// joinRace is the slow path of run: the trigger fired, so the first
// attempt's outcome joins the race and the caller returns its decision.
func joinRace[T any](h *Hedger, c *call, v T, err error) (T, error) {
	r, start := c.race.(*race[T]), c.start
	// The trigger's CAS to stFired was its last access to c, and the race
	// keeps its own copies: the state (and its slab of contexts) is reused.
	h.release(c)
	// User code before the report (a Ticker, the Fatal classifier): if it
	// panics, the race is aborted (the hedges cancelled) and the panic goes
	// on; the caller's own guard already ran.
	reported := false
	defer func() {
		if !reported {
			r.abort()
		}
	}()
	now := h.ticker.Now()
	h.ObserveAt(now, time.Duration(now-start)) // a cancelled loser records a lower bound
	fatal := err != nil && h.isFatal(err)
	reported = true
	r.report(0, v, err, fatal, false, nil)
	return r.result()
}

// abandon releases a call whose first attempt panicked (or called
// runtime.Goexit): its context is ended (before c can go back to the pool,
// which reuses c.ctx), which releases what its Done registered on the
// caller's context; the trigger is disarmed or the hedges are cancelled;
// the panic goes on.
func abandon(c *call) {
	c.ctx.cancel()
	if c.st.CompareAndSwap(stRunning, stFinished) {
		if c.h.wd.Cancel(c.wd) || !c.wd.Valid() {
			c.h.release(c)
		}
		return
	}
	if c.race != nil {
		c.race.abort()
	}
}

// runAsync is the AsyncFirst mode: every attempt, the first included, runs
// on its own goroutine; the caller waits for the decision.
func runAsync[T, F any](h *Hedger, ctx context.Context, fn F, start int64, held bool) (T, error) {
	// The state is not pooled here: the race owns it from the start.
	first := new(firstCtx)
	lazyctx.Init(&first.Ctx, ctx)
	c := &call{h: h, ctx: first, fn: fn, start: start, held: held}
	r := newRace[T](c)
	r.mu.Lock()
	r.armLocked(1, start)
	r.mu.Unlock()
	go r.run(0, c.ctx)
	return r.result()
}
