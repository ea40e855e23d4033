package pipeline

import (
	"context"
	"errors"

	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// attempt holds what one attempt acquired, so that it is released exactly
// once, on the normal path or from the deferred guard when fn panics or
// calls runtime.Goexit.
type attempt struct {
	t0, t1 int64 // clock readings, noTime when not read
	start  int64 // the first attempt's t0, for the retry budget on a panic
	permit circuitbreaker.Permit
	token  adaptive.Token
	th     timeout.Handle
	held   uint8 // heldX bits: the permits to release
	ran    bool  // fn was called: abort records a failure (else the attempt was never made)
}

const (
	heldBreaker = 1 << iota
	heldBulkhead
	heldAdaptive
	heldTimeout
	heldCall // fn is running: set only around the call
)

// loop is the per-call state of the retry loop, in the caller's frame.
type loop struct {
	start    int64 // the first attempt's t0 (noTime before it)
	prev     int64 // the previous retry delay
	deadline int64 // the context's deadline on the ticker; -1: not computed
	last     error // the previous attempt's error, for a give-up
}

// run is the engine behind every entry point: Do, Try, Call and TryCall
// (hedged nil), and the hedged ones through runHedged. Exactly one of fnT
// and fnE is non-nil. It returns the value of the last attempt and fills o,
// a zero Outcome in the caller's frame. (Filling the caller's Outcome rather
// than returning one saves a copy that the CPU stalls on: the fields are
// stored one by one and reloaded as two 16-byte words, which defeats store
// forwarding, about 10 ns per call.)
//
// Each attempt is admitted here, in the one place that writes the
// admission order (breaker, rate limiter, bulkhead, adaptive limit,
// timeout), and released by release, the one place that writes the release
// order (the success, a failure, a rejection's unwind and a panic's abort).
// The admission is written out in this function rather than called, and
// the retry's decision is called only after a failure, because a call that
// succeeds at once is the common case and Go's calling convention, which
// keeps no register across a call, makes each extra call level spill and
// reload the engine's state.
//
// Per attempt, on a success with every policy present and a closed breaker
// that needs no duration: one clock read (t0), then the policies' own
// atomics (breaker: a load; rate limiter: a load and a CAS; bulkhead: an
// add on entry and one on exit), the call, and the breaker's record.
func run[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error, hedged func(context.Context, int64) (T, error), o *Outcome) (v T) {
	// Zeroed, then the few non-zero fields stored: a composite literal
	// with non-zero fields is copied from a static template, a load of a
	// line outside the stack on every call.
	var a attempt
	a.t0, a.t1, a.start = noTime, noTime, noTime
	// The one guard of the call: when fn panics or calls runtime.Goexit
	// (heldCall still set), or a classifier panics while the permits are
	// released, whatever a.held still names is released and the panic goes
	// on unchanged (nothing is recovered). An open-coded defer: a
	// nanosecond or two when nothing panics.
	defer p.releaseHeld(&a)
	var l loop
	l.start, l.deadline = noTime, -1
	// The arguments stay in memory (their address is taken), so the
	// compiler loads each where it is used instead of reloading every one
	// of them into registers after each policy call. Measured against the
	// same build without this line (bench/results/benchstat-pipeline-
	// engine.txt, second table): Pipeline/Reject/rampart-cached is 11 %
	// slower without it (p = 0.02), the other Pipeline benchmarks within
	// noise. To tell whether it still pays: build ./bench with and without
	// this line, run BenchmarkPipeline/Reject/rampart-cached and
	// Pipeline/SuccessNoTimeout/rampart-cached alternately (-count 2, four
	// rounds each) and benchstat them; if ns/op and cpu-ns/op are within
	// noise, delete this line and inMemory.
	inMemory(&ctx, &fnT, &fnE, &o)
	for {
		o.Attempts++
		// One interface call: a context that is already done starts
		// nothing.
		if err := ctx.Err(); err != nil {
			p.canceledBefore(&l, o, err)
			return v
		}
		if p.needT0 || (p.rtNeedsStart && o.Attempts == 1) {
			a.t0 = p.now() // clock read 1 of at most 2 per attempt
		}
		if o.Attempts == 1 && p.rt != nil {
			// The call's start: noTime when neither the retry
			// (rt.NeedsTime) nor another policy needed it, and then
			// ignored by the retry and its budget.
			l.start, a.start = a.t0, a.t0
			if p.bud != nil {
				p.bud.OnRequest(a.t0)
			}
		}
		// Admission, in the pipeline's order. Each permit is marked held
		// in a.held as soon as it is taken: the next stages' rejection
		// listeners are user code, which may call runtime.Goexit (a
		// test's FailNow), and the guard then releases what a.held names.
		// On a rejection the permits taken so far are released and o is
		// filled.
		if p.cb != nil {
			// Closed: one atomic load. Without t0 (no policy needed it) a
			// closed breaker decides alone; any other state needs the
			// time.
			permit, err := p.cb.Acquire(a.t0)
			if err != nil {
				if permit, err = p.breakerRejected(&a, err); err != nil {
					p.reject(o, Breaker, err, int64(p.cb.RemainingOpen(a.t0)))
					return v
				}
			}
			a.permit = permit
			a.held |= heldBreaker
		}
		if p.rl != nil {
			// One load and one CAS when admitted, one load when rejected.
			if wait := p.rl.TryAcquire(a.t0, 1); wait != 0 {
				p.unwind(ctx, &a)
				p.reject(o, RateLimit, p.rl.RejectedError(), wait)
				return v
			}
		}
		if p.bh != nil {
			// One load and one add when a permit is free (no clock, no
			// context); waits only with MaxWait set. Without a queue in
			// the pipeline, TryEnter directly: Enter would call it, one
			// call level more.
			var err error
			if p.mayWait {
				err = p.bh.Enter(ctx)
			} else if !p.bh.TryEnter() {
				err = p.bh.RejectedError()
			}
			if err != nil {
				p.unwind(ctx, &a)
				p.rejectWait(&l, o, Bulkhead, err)
				return v
			}
			a.held |= heldBulkhead
		}
		if p.al != nil {
			// One atomic add when admitted; waits only with a queue.
			tok, err := p.al.AcquireWait(ctx, a.t0)
			if err != nil {
				p.unwind(ctx, &a)
				p.rejectWait(&l, o, Adaptive, err)
				return v
			}
			a.token = tok
			a.held |= heldAdaptive
		}
		if p.mayWait && a.t0 != noTime {
			// Only when a bulkhead or adaptive queue can wait: the attempt
			// may have queued since t0, so the timeout's deadline and the
			// hedger's delay start from a fresh reading taken at
			// admission.
			a.t0 = p.now()
		}
		actx := ctx
		if p.to != nil {
			// Deadline mode: one allocation (the context) and a few CASes
			// to arm a watchdog slot; soft mode: nothing.
			actx, a.th = p.to.Start(ctx, a.t0)
			a.held |= heldTimeout
		}
		a.held |= heldCall
		a.ran = true
		var err error
		switch {
		case hedged != nil:
			v, err = hedged(actx, p.hedgeStart(&a))
		case fnE != nil:
			err = fnE(actx)
		default:
			v, err = fnT(actx)
		}
		if err = p.release(ctx, &a, err, released); err == nil {
			return v // o: Code OK, Err nil
		}
		if err == p.toErr {
			// The timeout's verdict (release's Finish turned the overrun
			// into its error; p.toErr is nil without a timeout).
			o.Code, o.Policy = TimedOut, Timeout
		}
		if p.decide(ctx, &l, a.t1, err, o) {
			return v
		}
		// Retried: the next attempt, o's Code back to OK (it may say
		// TimedOut).
		a = attempt{t0: noTime, t1: noTime, start: l.start}
		o.Code, o.Policy = OK, None
	}
}

// inMemory does nothing; taking its arguments' addresses keeps the
// variables out of registers.
func inMemory[T any](*context.Context, *func(context.Context) (T, error), *func(context.Context) error, **Outcome) {
}

// runHedged is run with the call hedged (see Pipeline.DoHedged): each
// attempt runs fn through the hedger. It is a separate function so that
// only the hedged entry points hand fn to other goroutines, which makes a
// closure passed to them escape to the heap.
func runHedged[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error, o *Outcome) T {
	if p.hg == nil {
		return run(ctx, p, fnT, fnE, nil, o)
	}
	// Held: the hedger returns only when every hedge has returned (the
	// permits released next never leave one running), and leaves the
	// request and the outcome to this pipeline's books (a budget shared
	// with the retry counts them once). start is the attempt's hedgeStart.
	hedged := func(actx context.Context, start int64) (T, error) {
		return hedge.CallAtHeld(actx, p.hg, start, fnT)
	}
	if fnE != nil {
		hedged = func(actx context.Context, start int64) (v T, err error) {
			return v, p.hg.DoAtHeld(actx, start, fnE)
		}
	}
	return run(ctx, p, fnT, fnE, hedged, o)
}

// canceledBefore fills o for an attempt whose context was done before it
// started. After a retry's sleep, the retry gives up on the last error.
// Slow path.
func (p *Pipeline) canceledBefore(l *loop, o *Outcome, err error) {
	o.Code, o.Policy, o.Err = Canceled, None, err
	if o.Attempts > 1 {
		// Ended right after the retry's sleep: give up on the last
		// error.
		o.Attempts--
		o.Err = p.rt.GiveUp(retry.Canceled, int(o.Attempts), l.last, err)
	}
}

// breakerRejected is run's slow path for a breaker that refused the
// attempt: a call whose clock was not read (an open or half-open breaker
// needs the time) is asked again with a reading. It returns the permit, or
// the breaker's error when it still refuses. Rejection path.
func (p *Pipeline) breakerRejected(a *attempt, err error) (circuitbreaker.Permit, error) {
	if a.t0 != noTime {
		return circuitbreaker.Permit{}, err
	}
	a.t0 = p.now() // slow path: an open or half-open breaker
	return p.cb.Acquire(a.t0)
}

// releaseHow says why release gives an attempt's permits back.
type releaseHow uint8

const (
	released releaseHow = iota // fn returned: the outcome is recorded
	unwound                    // a later stage refused the attempt before fn ran: nothing is recorded
	aborted                    // fn (or a classifier in release) panicked or called runtime.Goexit
)

// release ends an attempt: it gives back every permit a.held names and
// records the outcome, in the one release order, innermost first: t1 when a
// policy needs it, the timeout (its verdict turns an overrun into its
// error, which the policies below then see), the adaptive outcome
// classified while every permit is held, the bulkhead, the breaker, the
// retry budget, and the adaptive token last, since its Release may run the
// user's Controller: if that panics, everything else is already released
// and recorded. It returns err as the timeout left it.
//
// how says why the attempt ends:
//   - released: fn returned err. The breaker records it (through its
//     Classify), the budget counts a success, the adaptive limit gets the
//     classified outcome. An overrun comes back as the timeout's error
//     (run then says TimedOut).
//   - unwound: a later stage refused the attempt: the permits come back
//     with no result (breaker and adaptive Ignored, nothing in the budget).
//   - aborted: fn panicked or called runtime.Goexit (heldCall), or a
//     classifier did during a release: the timeout's verdict is discarded,
//     the breaker records a Failure without its Classify (this may run
//     because Classify itself panicked), the budget a failure, the
//     adaptive limit frees the slot as Ignored. An attempt whose fn never
//     ran (a rejection listener called Goexit) is released as Ignored,
//     as unwound does, without a budget failure.
//
// A classifier is user code (Config.AdaptiveClassify, the limiter's or the
// breaker's Classify): if one panics mid-release, the guard in run releases
// whatever a.held still names (aborted). Each bit is cleared before its
// release (the breaker's once its result is classified: a listener may call
// Goexit once the result is applied), so that nothing is released twice.
func (p *Pipeline) release(ctx context.Context, a *attempt, err error, how releaseHow) error {
	a.held &^= heldCall
	if p.needT1 {
		if how == released {
			a.t1 = p.now() // clock read 2 of at most 2 per attempt
		} else if how == aborted && a.t1 == noTime {
			a.t1 = p.readAfterPanic()
		}
	}
	oc := adaptive.Ignored
	if a.held&heldTimeout != 0 {
		// Disarms the watch and ends the context.
		a.held &^= heldTimeout
		if how == released {
			// a.t1 is noTime (timeout.NotRead) unless another policy read
			// it: a deadline-mode timeout then takes the watchdog's
			// verdict.
			err = p.to.Finish(a.th, a.t1, err)
		} else {
			// The verdict is discarded. Without an end reading (a
			// deadline mode that needs none, or a Ticker that panicked)
			// t0 stands in: NotRead would make a soft-mode Finish read
			// the ticker itself.
			end := a.t1
			if end == noTime {
				end = a.t0
			}
			_ = p.to.Finish(a.th, end, ErrPanicked)
		}
	}
	if how == released {
		oc = adaptive.Success
		if err != nil && a.held&heldAdaptive != 0 {
			oc = p.classifyAdaptive(ctx, err) // user code: a panic leaves every permit to abort
		}
	}
	if a.held&heldBulkhead != 0 {
		a.held &^= heldBulkhead
		p.bh.Exit() // one atomic add and one load
	}
	if a.held&heldBreaker != 0 {
		r, end := circuitbreaker.Ignored, a.t1
		switch {
		case how == released:
			r = circuitbreaker.Success
			if err != nil || p.cbClassify {
				r = p.cb.Classify(err) // user code: a panic leaves the permit to abort
			}
		case how == unwound:
			end = noTime
		case a.ran:
			r = circuitbreaker.Failure
		}
		a.held &^= heldBreaker              // recorded from here (a listener may Goexit)
		p.cb.RecordResult(a.permit, end, r) // healthy count window: four loads
	}
	if p.bud != nil {
		switch {
		case how == released && err == nil:
			now := a.t0
			if now == noTime {
				// A retry with no policy reading t0: the call's start
				// (noTime when the retry does not use it).
				now = a.start
			}
			p.bud.OnSuccess(now)
		case how == aborted && a.ran:
			p.bud.OnFailure(a.start)
		}
	}
	if a.held&heldAdaptive != 0 {
		// Cleared before Release: Release frees the slot first and may
		// then run the user's Controller (closing a window), which may
		// panic; abort must not release the token a second time.
		a.held &^= heldAdaptive
		end := a.t1
		if how == unwound {
			end = a.t0
		}
		p.al.Release(a.token, end, oc)
	}
	return err
}

// decide ends a failed attempt whose permits are released (t1 is its end
// reading, noTime when none was read): the call is over (true, o filled) or
// is retried (false, after the retry's sleep). Failure path.
func (p *Pipeline) decide(ctx context.Context, l *loop, t1 int64, err error, o *Outcome) bool {
	rt := p.rt
	if rt == nil || !rt.Retryable(err) {
		*o = p.failed(ctx, *o, err, rt)
		return true
	}
	// Slow path: decide whether to retry.
	now := t1
	if now == noTime {
		now = p.now() // clock read 2, on the failure path only
	}
	if cerr := ctx.Err(); cerr != nil {
		// The caller is gone: no retry is granted (Decide would count one
		// in the budget and call OnRetry), as in retry.Do. An attempt that
		// ended with the caller's own context error returns it as it is,
		// like a non-retryable error (retry.Policy.Decide's contract);
		// otherwise the failure Decide would have recorded is recorded
		// here. errors.Is walks err's chain: failure path only.
		if errors.Is(err, cerr) {
			*o = p.failed(ctx, *o, err, rt)
			return true
		}
		if p.bud != nil {
			p.bud.OnFailure(now)
		}
		o.Code, o.Policy, o.Err = Canceled, None, rt.GiveUp(retry.Canceled, int(o.Attempts), err, cerr)
		return true
	}
	if l.deadline < 0 {
		l.deadline = rt.Deadline(ctx, now)
	}
	delay, stop := rt.Decide(int(o.Attempts), err, l.start, now, l.deadline, l.prev)
	if stop != retry.Continue {
		*o = p.failed(ctx, *o, rt.GiveUp(stop, int(o.Attempts), err, nil), nil)
		if stop == retry.BudgetRefused {
			// The budget shed the retry: a rejection by the retry policy
			// (the error matches retry.ErrBudget and rampart.ErrRejected).
			o.Code, o.Policy = Rejected, Retry
		}
		return true
	}
	if cerr := rt.Sleep(ctx, delay); cerr != nil {
		o.Code, o.Policy, o.Err = Canceled, None, rt.GiveUp(retry.Canceled, int(o.Attempts), err, cerr)
		return true
	}
	l.prev, l.last = delay, err
	return false
}

// classifyAdaptive gives a failed attempt's outcome for the adaptive limit:
// Config.AdaptiveClassify when set, else the limiter's own classification.
// Failure path only.
func (p *Pipeline) classifyAdaptive(ctx context.Context, err error) adaptive.Outcome {
	if p.alClassify != nil {
		return p.alClassify(ctx, err)
	}
	return p.al.Classify(ctx, err)
}

// failed fills o for a call that ended with err after running fn. With a
// retry, a non-retryable error goes through GiveUp (which strips a
// retry.Permanent marker).
func (p *Pipeline) failed(ctx context.Context, o Outcome, err error, rt *retry.Policy) Outcome {
	if rt != nil {
		err = rt.GiveUp(retry.NotRetryable, int(o.Attempts), err, nil)
	}
	o.Err = err
	if o.Code != TimedOut {
		o.Code, o.Policy = Failed, None
		if ctx.Err() != nil {
			o.Code = Canceled
		}
	}
	if h, ok := errors.AsType[retry.RetryAfterHint](err); ok {
		o.RetryAfter = durationOf(int64(h.RetryAfter()))
	}
	return o
}

// unwind releases the permits taken before a rejection, recording no
// result (see release). Rejection path.
func (p *Pipeline) unwind(ctx context.Context, a *attempt) {
	_ = p.release(ctx, a, nil, unwound)
}

// rejectWait fills o for an attempt refused by the queue of policy k (a
// bulkhead or an adaptive limit): a rejection, or the caller's context ended
// during the wait. The latter, on a retried call, ends as a cancellation
// during the retry's sleep does: the retry gives up on the last attempt's
// error (wrapped with the context's), and the attempt that never ran is not
// counted. Rejection path.
func (p *Pipeline) rejectWait(l *loop, o *Outcome, k Kind, err error) {
	p.reject(o, k, err, 0)
	if o.Code == Canceled && o.Attempts > 1 {
		o.Attempts--
		o.Err = p.rt.GiveUp(retry.Canceled, int(o.Attempts), l.last, err)
	}
}

// reject fills o for a rejection by policy k.
func (p *Pipeline) reject(o *Outcome, k Kind, err error, retryAfter int64) {
	o.Code, o.Policy, o.Err, o.RetryAfter = Rejected, k, err, durationOf(retryAfter)
	if !isRejection(err) {
		// A wait for a permit ended with the context: not a rejection.
		o.Code, o.Policy, o.RetryAfter = Canceled, None, 0
	}
}

// hedgeStart is the start of a hedged attempt, handed to the hedger (its
// hedge delay and latency sample count from it): t0 when it was read (after
// admission, when a policy could have queued), which saves the hedger its
// own read; otherwise a fresh reading (the read the hedger would make itself).
func (p *Pipeline) hedgeStart(a *attempt) int64 {
	if a.t0 != noTime {
		return a.t0
	}
	return p.tick.Now() // the hedger's clock (New checks it is the pipeline's)
}

// releaseHeld is run's deferred guard: after a panic or runtime.Goexit in
// fn (heldCall set) or in a classifier during release, it releases what is
// still held (see abort); on every normal return a.held is 0 and it does
// nothing.
func (p *Pipeline) releaseHeld(a *attempt) {
	if a.held != 0 {
		p.abort(a)
	}
}

// readAfterPanic is abort's end reading. The Ticker may be user code: if it
// panics here, abort goes on without the reading (noTime) rather than
// leaving the permits held; the panic that ran abort goes on unchanged.
func (p *Pipeline) readAfterPanic() (now int64) {
	defer func() {
		if recover() != nil {
			now = noTime
		}
	}()
	return p.now()
}

// abort releases an attempt whose fn panicked or called runtime.Goexit, or
// whose classifier panicked during its release: what a.held still names is
// released as aborted (see release). Slow path.
func (p *Pipeline) abort(a *attempt) {
	_ = p.release(context.Background(), a, ErrPanicked, aborted)
}
