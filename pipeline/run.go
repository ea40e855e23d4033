package pipeline

import (
	"context"
	"errors"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
	"time"
)

// attempt holds what one attempt acquired, so that it is released exactly
// once, on the normal path or from the deferred guard when fn panics or
// calls runtime.Goexit.
type attempt struct {
	t0, t1 int64 // clock readings, rampart.NotRead when not read
	start  int64 // the first attempt's t0, for the retry budget on a panic
	permit circuitbreaker.Permit
	token  adaptive.Permit
	shp    shed.Permit
	th     timeout.Handle
	held   uint8 // heldX bits: the permits to release
	ran    bool  // fn was called: abort records a failure (else the attempt was never made)
}

const (
	heldBreaker = 1 << iota
	heldBulkhead
	heldAdaptive
	heldShed
	heldTimeout
	heldCall // fn is running: set only around the call
	heldPrio // Config.ShedPriority is running: set only around its call, so that the guard counts its panic when no permit is held yet
)

// loop is the per-call state of the retry loop, in the caller's frame.
type loop struct {
	start    int64         // the first attempt's t0 (rampart.NotRead before it)
	prev     time.Duration // the previous retry delay
	deadline int64         // the context's deadline on the ticker; rampart.NotRead: not computed
	last     error         // the previous attempt's error, for a give-up
}

// run is the engine behind Do, Try, Call and TryCall. Exactly one of fnT and
// fnE is non-nil. It returns the value of the last attempt and fills o, a
// zero Outcome in the caller's frame. (Filling the caller's Outcome rather
// than returning one saves a copy that the CPU stalls on: the fields are
// stored one by one and reloaded as two 16-byte words, which defeats store
// forwarding, about 10 ns per call.)
//
// The first attempt takes a fast path written out here (begin and end
// inlined by hand, held bits stored once instead of set and cleared per
// policy, the success released without the retry's bookkeeping), because
// a call that succeeds at once is the common case and Go's calling
// convention, which keeps no register across a call, makes each extra
// call level spill and reload the engine's state. Anything else (a queue
// that may wait, a context already done, a failure) goes to runLoop, the
// general loop through begin, settle and end. (runHedged has only the
// general loop: a hedged call costs goroutines anyway.) The admission order
// is thus written twice, here and in begin, and the release order twice,
// here for a success and in release for everything else (a failure, a
// rejection's unwind, a panic's abort); FuzzFastPathMatchesGeneralPath
// holds this copy to the general one. One copy of each costs the success
// benchmarks 13–33 % (docs/pipeline.md).
//
// Per attempt, on a success with every policy present and a closed breaker
// that needs no duration: one clock read (t0), then the policies' own
// atomics (breaker: a load; rate limiter: a load and a CAS; bulkhead: an
// add on entry and one on exit), the call, and the breaker's record.
func run[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error, o *Outcome) (v T) {
	// Zeroed, then the few non-zero fields stored: a composite literal
	// with non-zero fields is copied from a static template, a load of a
	// line outside the stack on every call.
	var a attempt
	a.t0, a.t1, a.start = rampart.NotRead, rampart.NotRead, rampart.NotRead
	// The one guard of the call: when fn panics or calls runtime.Goexit
	// (heldCall still set), or a classifier panics while the permits are
	// released, whatever a.held still names is released and the panic goes
	// on unchanged (nothing is recovered). An open-coded defer: a
	// nanosecond or two when nothing panics.
	defer p.releaseHeld(&a)
	if !p.fast || ctx.Err() != nil {
		// A queue may wait, or the context is done: the general loop
		// (begin reports the context's error).
		return runLoop(ctx, p, fnT, fnE, o, &a, v, nil, false)
	}
	// The arguments stay in memory (their address is taken), so the
	// compiler loads each where it is used instead of reloading every one
	// of them into registers after each policy call. Measured on a
	// one-release variant of this engine against the same build without
	// this line (bench/results/benchstat-pipeline-engine.txt, second
	// table): Pipeline/Reject/rampart-cached is 11 % slower without it
	// (p = 0.02), the other Pipeline benchmarks within noise; on this
	// engine, bench/results/benchstat-pipeline-fastpath.txt. To tell whether it still pays: build ./bench with and without
	// this line, run BenchmarkPipeline/Reject/rampart-cached and
	// Pipeline/SuccessNoTimeout/rampart-cached alternately (-count 2, four
	// rounds each) and benchstat them; if ns/op and cpu-ns/op are within
	// noise, delete this line and inMemory.
	inMemory(&ctx, &fnT, &fnE, &o)
	// The fast first attempt. Admission, in the pipeline's order, as in
	// begin; a rejection releases what was taken and fills o.
	o.Attempts = 1
	if p.needT0 || p.rtNeedsStart {
		a.t0 = p.now() // clock read 1 of at most 2
	}
	if p.rt != nil {
		a.start = a.t0 // the call's start (see begin)
		if p.bud != nil {
			p.bud.OnRequest(a.t0)
		}
	}
	if p.cb != nil {
		// Closed: one atomic load.
		permit, err := p.cb.AcquireAt(a.t0)
		if err != nil {
			p.breakerRejected(&a, o, err)
			if o.Code != OK {
				return v
			}
			permit = a.permit // admitted after reading the clock
		}
		a.permit = permit
		// Held from here: the next stages' rejection listeners are user
		// code, which may call runtime.Goexit (a test's FailNow).
		a.held = heldBreaker
	}
	if p.rl != nil {
		// One load and one CAS when admitted.
		if wait := p.rl.AdmitN(a.t0, 1); wait != 0 {
			p.rejectAt(&a, o, RateLimit, p.rl.RejectedError(), wait)
			return v
		}
	}
	if p.bh != nil {
		// One load and one add (no queue: p.fast).
		if p.bh.Acquire() != nil {
			p.rejectAt(&a, o, Bulkhead, p.bh.RejectedError(), 0)
			return v
		}
		a.held |= heldBulkhead
	}
	if p.al != nil {
		// One atomic add (no queue: p.fast).
		tok, err := p.al.AcquireWaitAt(ctx, a.t0)
		if err != nil {
			p.rejectAt(&a, o, Adaptive, err, 0)
			return v
		}
		a.token = tok
	}
	if p.sh != nil {
		// Every permit before it is taken: one store names them for the
		// guard and for a rejection's unwind (the shedder's sample and
		// ShedPriority are user code, which may panic or call Goexit).
		a.held = p.held & (heldBreaker | heldBulkhead | heldAdaptive)
		prio := 0
		if p.shPrio != nil {
			// heldPrio around the call: the guard counts a panic in it
			// in Stats.Panicked even when no permit is held (one store
			// before, one after, only with ShedPriority set).
			a.held |= heldPrio
			prio = p.shPrio(ctx)
			a.held &^= heldPrio
		}
		// One atomic add and two loads while not engaged.
		shp, err := p.sh.AcquirePriorityAt(a.t0, prio)
		if err != nil {
			p.rejectAt(&a, o, Shed, err, 0)
			return v
		}
		a.shp = shp
	}
	actx := ctx
	if p.to != nil {
		// Deadline mode: the context (one allocation) and a watchdog
		// slot; soft mode: nothing.
		actx, a.th = p.to.StartAt(ctx, a.t0)
	}
	// Every permit taken, one store: the guard's list if fn panics.
	a.held = p.held | heldCall
	a.ran = true
	var err error
	if fnE != nil {
		err = fnE(actx)
	} else {
		v, err = fnT(actx)
	}
	if p.needT1 {
		a.t1 = p.now() // clock read 2 of at most 2
	}
	if p.to != nil {
		a.held = p.held &^ heldTimeout
		in := err
		if err = p.to.FinishAt(a.th, a.t1, err); err != nil && p.isVerdict(err, in) {
			o.Code, o.Policy = TimedOut, Timeout
		}
	}
	if err == nil {
		// Released in release's order, by hand (see the doc above). The
		// breaker's Classify is user code and runs first, while the guard
		// names every permit; the adaptive limit's Release may run the
		// user's Controller and comes last.
		r := rampart.Success
		if p.cbClassify {
			r = p.cb.Classify(nil) // a panic leaves every permit to the guard
		}
		a.held = p.held & (heldBreaker | heldAdaptive)
		if p.bh != nil {
			p.bh.Release() // one atomic add and one load
		}
		if p.sh != nil {
			p.sh.ReleaseAt(a.shp, a.t1, rampart.Success) // three atomic adds on one line
		}
		if p.cb != nil {
			// Recorded from here: a listener that calls Goexit once the
			// result is applied must not make the guard record it again.
			a.held = p.held & heldAdaptive
			p.cb.ReleaseAt(a.permit, a.t1, r) // healthy count window: four loads
		}
		if p.bud != nil {
			// Recorded from here: if the user's Budget panics, the guard
			// must not record a failure on top (a.ran tells it).
			a.ran = false
			p.bud.OnSuccess(a.t0) // rampart.NotRead when the retry does not use it
		}
		a.held = 0
		if p.al != nil {
			p.al.ReleaseAt(a.token, a.t1, rampart.Success) // last: it may run the Controller
		}
		return v // o: Attempts 1, the rest zero (OK)
	}
	// Failed: the general path records it and decides on a retry.
	a.held = p.held &^ heldTimeout
	return runLoop(ctx, p, fnT, fnE, o, &a, v, err, true)
}

// inMemory does nothing; taking its arguments' addresses keeps the
// variables out of registers.
func inMemory[T any](*context.Context, *func(context.Context) (T, error), *func(context.Context) error, **Outcome) {
}

// runLoop is run's general path, a loop of attempts through begin and end,
// on run's attempt a (which run's guard watches). With failed set, run's
// fast first attempt has run fn and failed with err (a.held names the
// permits it still holds): the failure is recorded and the retry decides
// first. v is the value of that attempt.
func runLoop[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error, o *Outcome, a *attempt, v T, err error, failed bool) T {
	var l loop
	l.start, l.deadline = rampart.NotRead, rampart.NotRead
	if failed {
		l.start = a.start
		if p.settle(ctx, &l, a, err, o) {
			return v
		}
		*a = attempt{t0: rampart.NotRead, t1: rampart.NotRead, start: l.start} // the next attempt
	}
	for {
		actx, admitted := p.begin(ctx, &l, a, o)
		if !admitted {
			return v
		}
		a.held |= heldCall
		a.ran = true
		if fnE != nil {
			err = fnE(actx)
		} else {
			v, err = fnT(actx)
		}
		a.held &^= heldCall
		if p.end(ctx, &l, a, err, o) {
			return v
		}
		*a = attempt{t0: rampart.NotRead, t1: rampart.NotRead, start: l.start} // the next attempt
	}
}

// runHedged is run with the call hedged (see Pipeline.DoHedged). It is a
// separate function so that only the hedged entry points hand fn to other
// goroutines, which makes a closure passed to them escape to the heap.
func runHedged[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error, o *Outcome) (v T) {
	var l loop // as in run
	l.start, l.deadline = rampart.NotRead, rampart.NotRead
	var a attempt
	a.t0, a.t1, a.start = rampart.NotRead, rampart.NotRead, rampart.NotRead
	defer p.releaseHeld(&a) // as in run
	for {
		actx, admitted := p.begin(ctx, &l, &a, o)
		if !admitted {
			return v
		}
		var err error
		a.held |= heldCall
		a.ran = true
		switch {
		case p.hg == nil:
			if fnE != nil {
				err = fnE(actx)
			} else {
				v, err = fnT(actx)
			}
		case fnE != nil:
			// Held: returns only when every hedge has returned (the
			// permits released next never leave one running), and
			// leaves the request and the outcome to this pipeline's
			// books (a budget shared with the retry counts them once).
			err = p.hg.DoAtHeld(actx, p.hedgeStart(&a), fnE)
		default:
			v, err = hedge.CallAtHeld(actx, p.hg, p.hedgeStart(&a), fnT)
		}
		a.held &^= heldCall
		if p.end(ctx, &l, &a, err, o) {
			return v
		}
		a = attempt{t0: rampart.NotRead, t1: rampart.NotRead, start: l.start} // the next attempt
	}
}

// begin starts an attempt: it checks the context, reads t0 when a policy
// needs it, counts the call in the retry budget (first attempt) and takes
// the permits. It returns the context for fn, or false when the call ends
// here (o is filled).
func (p *Pipeline) begin(ctx context.Context, l *loop, a *attempt, o *Outcome) (context.Context, bool) {
	o.Attempts++
	// One interface call: a context that is already done starts nothing.
	if err := ctx.Err(); err != nil {
		o.Code, o.Policy, o.Err = Canceled, None, err
		if o.Attempts > 1 {
			// Ended right after the retry's sleep: give up on the last
			// error.
			o.Attempts--
			o.Err = p.rt.GiveUp(retry.Canceled, int(o.Attempts), l.last, err)
		}
		return nil, false
	}
	rt := p.rt
	if p.needT0 || (p.rtNeedsStart && o.Attempts == 1) {
		a.t0 = p.tick.Now() // clock read 1 of at most 2 per attempt
	}
	if o.Attempts == 1 && rt != nil {
		// The call's start: rampart.NotRead when neither the retry
		// (rt.NeedsTime) nor another policy needed it, and then ignored
		// by the retry and its budget.
		l.start, a.start = a.t0, a.t0
		if p.bud != nil {
			p.bud.OnRequest(a.t0)
		}
	}
	// Admission, in the pipeline's order. On a rejection the permits taken
	// so far are released and o is filled.
	if p.cb != nil {
		// Closed: one atomic load. Without t0 (no policy needed it) a
		// closed breaker decides alone; any other state needs the time.
		permit, err := p.cb.AcquireAt(a.t0)
		if err != nil && a.t0 == rampart.NotRead {
			a.t0 = p.tick.Now() // slow path: an open or half-open breaker
			permit, err = p.cb.AcquireAt(a.t0)
		}
		if err != nil {
			p.reject(o, Breaker, err, p.cb.RemainingOpenAt(a.t0))
			return nil, false
		}
		a.permit = permit
		a.held |= heldBreaker
	}
	if p.rl != nil {
		// One load and one CAS when admitted, one load when rejected.
		if wait := p.rl.AdmitN(a.t0, 1); wait != 0 {
			p.unwind(a)
			p.reject(o, RateLimit, p.rl.RejectedError(), wait)
			return nil, false
		}
	}
	if p.bh != nil {
		// One load and one add when a permit is free (no clock, no
		// context); waits only with MaxWait set.
		if err := p.bh.AcquireWait(ctx); err != nil {
			p.unwind(a)
			p.rejectWait(l, o, Bulkhead, err)
			return nil, false
		}
		a.held |= heldBulkhead
	}
	if p.al != nil {
		// One atomic add when admitted; waits only with a queue.
		tok, err := p.al.AcquireWaitAt(ctx, a.t0)
		if err != nil {
			p.unwind(a)
			p.rejectWait(l, o, Adaptive, err)
			return nil, false
		}
		a.token = tok
		a.held |= heldAdaptive
	}
	if p.mayWait && a.t0 != rampart.NotRead {
		// Only when a bulkhead or adaptive queue can wait: the attempt may
		// have queued since t0, so the timeout's deadline and the hedger's
		// delay start from a fresh reading taken at admission.
		a.t0 = p.tick.Now()
	}
	if p.sh != nil {
		// Last of the admissions, at the admission reading: its slot and
		// its latency sample cover the attempt only, never a queue.
		prio := 0
		if p.shPrio != nil {
			a.held |= heldPrio // as in run: the guard counts a panic in it
			prio = p.shPrio(ctx)
			a.held &^= heldPrio
		}
		shp, err := p.sh.AcquirePriorityAt(a.t0, prio)
		if err != nil {
			p.unwind(a)
			p.reject(o, Shed, err, 0)
			return nil, false
		}
		a.shp = shp
		a.held |= heldShed
	}
	if p.to != nil {
		// Deadline mode: one allocation (the context) and a few CASes to
		// arm a watchdog slot; soft mode: nothing.
		ctx, a.th = p.to.StartAt(ctx, a.t0)
		a.held |= heldTimeout
	}
	return ctx, true
}

// end ends an attempt that ran fn: it releases the permits and records the
// outcome, then decides whether the call is over (true, o filled) or is
// retried (false, after the retry's sleep).
func (p *Pipeline) end(ctx context.Context, l *loop, a *attempt, err error, o *Outcome) bool {
	// A classifier is user code (Config.AdaptiveClassify, the limiter's or
	// the breaker's Classify): if one panics mid-release, the guard in run
	// releases whatever a.held still names, as after a panicking fn.
	// Release, innermost first: t1 when a policy needs it, the timeout's
	// verdict, then the outcome recorded and the permits given back. Each
	// bit of a.held is cleared as its permit is given back.
	if p.needT1 {
		a.t1 = p.tick.Now() // clock read 2 of at most 2 per attempt
	}
	o.Code, o.Policy = OK, None
	if a.held&heldTimeout != 0 {
		// Disarms the watch and ends the context; turns an overrun into
		// the timeout's error, which the policies below then record.
		a.held &^= heldTimeout
		// a.t1 is rampart.NotRead (rampart.NotRead) unless another policy read it:
		// a deadline-mode timeout then takes the watchdog's verdict.
		in := err
		if err = p.to.FinishAt(a.th, a.t1, err); err != nil && p.isVerdict(err, in) {
			o.Code, o.Policy = TimedOut, Timeout
		}
	}
	return p.settle(ctx, l, a, err, o)
}

// settle is the rest of end, after the timeout's verdict: the outcome
// recorded and the permits given back, then the retry's decision. run's
// fast first attempt calls it when the attempt failed.
func (p *Pipeline) settle(ctx context.Context, l *loop, a *attempt, err error, o *Outcome) bool {
	// Both classifiers run while every permit is held (a panicking one
	// leaves them all to abort), then release gives the permits back in
	// the pipeline's release order.
	oc, r, sr := rampart.Success, rampart.Success, rampart.Success
	if err != nil && a.held&heldAdaptive != 0 {
		oc = p.classifyAdaptive(ctx, err)
	}
	if err != nil && a.held&heldShed != 0 {
		sr = p.sh.Classify(ctx, err) // user code: a panic leaves the slot to abort
	}
	if a.held&heldBreaker != 0 && (err != nil || p.cbClassify) {
		r = p.cb.Classify(err) // user code: a panic leaves the permit to abort
	}
	bud, budAt := budgetNone, a.t0
	if err == nil && p.bud != nil {
		bud = budgetSuccess
		if budAt == rampart.NotRead {
			// A retry with no policy reading t0: the call's start
			// (rampart.NotRead when the retry does not use it).
			budAt = l.start
		}
	}
	p.release(a, r, oc, sr, bud, budAt)
	if err == nil {
		o.Code, o.Policy, o.Err = OK, None, nil
		return true
	}
	rt := p.rt
	if rt == nil || !rt.Retryable(err) {
		*o = p.failed(ctx, *o, err, rt)
		return true
	}
	// Slow path: decide whether to retry.
	now := a.t1
	if now == rampart.NotRead {
		now = p.tick.Now() // clock read 2, on the failure path only
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
	if l.deadline == rampart.NotRead {
		l.deadline = rt.Deadline(ctx, now)
	}
	delay, stop := rt.Decide(int(o.Attempts), err, l.start, now, l.deadline, l.prev)
	if stop != retry.Continue {
		*o = p.failed(ctx, *o, rt.GiveUp(stop, int(o.Attempts), err, nil), nil)
		switch {
		case stop == retry.BudgetRefused:
			// The budget shed the retry: a rejection by the retry policy
			// (the error matches retry.ErrBudget and rampart.ErrRejected).
			o.Code, o.Policy = Rejected, Retry
		case o.Code == Failed && stop != retry.NotRetryable:
			// This pipeline's retry gave up on an error it would have
			// retried: the retry decided the ending (RetriesExhausted
			// reads it here, never from fn's error, which may carry
			// another pipeline's give-up).
			o.Policy = Retry
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

// isVerdict reports whether err, what the timeout's FinishAt returned for
// fn's error in, is the timeout's verdict: the preallocated error of the
// configuration the attempt started under, which FinishAt puts in place of
// fn's, or which fn returned itself (its context's error) when it is the
// timeout's current one. Not a comparison with one error kept at New: a
// Timeout.Update gives the calls started after it a new error (it carries
// the duration), and an attempt that overran under it would be reported
// Failed. A *timeout.Error of another timeout that fn returned is fn's.
// Failure path.
func (p *Pipeline) isVerdict(err, in error) bool {
	te, ok := err.(*timeout.Error)
	return ok && (err != in || te == p.to.Err())
}

// classifyAdaptive gives a failed attempt's outcome for the adaptive limit:
// Config.AdaptiveClassify when set, else the limiter's own classification.
// Failure path only.
func (p *Pipeline) classifyAdaptive(ctx context.Context, err error) rampart.Result {
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
	switch {
	case ctx.Err() != nil:
		// The caller is gone: Canceled, even when the attempt also
		// overran the timeout, as settle ends a retried call, so that no
		// fallback answers a caller that left (DefaultEndings).
		o.Code, o.Policy = Canceled, None
	case o.Code != TimedOut:
		o.Code, o.Policy = Failed, None
	}
	if h, ok := errors.AsType[retry.RetryAfterHint](err); ok {
		o.RetryAfter = max(h.RetryAfter(), 0)
	}
	return o
}

// breakerRejected is the slow path of the fast first attempt's breaker
// check, as in begin: a breaker that refused a call whose clock was not read
// (an open or half-open breaker needs the time) is asked again with a
// reading; it fills o when the breaker still refuses, else a.permit.
func (p *Pipeline) breakerRejected(a *attempt, o *Outcome, err error) {
	if a.t0 == rampart.NotRead {
		a.t0 = p.now()
		if a.permit, err = p.cb.AcquireAt(a.t0); err == nil {
			return
		}
	}
	p.reject(o, Breaker, err, p.cb.RemainingOpenAt(a.t0))
}

// rejectAt releases the permits a.held names (taken before the rejection)
// and fills o for a rejection by policy k. Rejection path.
func (p *Pipeline) rejectAt(a *attempt, o *Outcome, k Kind, err error, retryAfter time.Duration) {
	p.unwind(a)
	p.reject(o, k, err, retryAfter)
}

// unwind releases the permits taken before a rejection, recording no
// result. Rejection path.
func (p *Pipeline) unwind(a *attempt) {
	p.release(a, rampart.Ignored, rampart.Ignored, rampart.Ignored, budgetNone, rampart.NotRead)
}

// The budget's part in release: nothing, a success or a failure.
const (
	budgetNone = iota
	budgetSuccess
	budgetFailure
)

// release is the pipeline's release order, written once for every path but
// the fast first attempt's success (run, which holds to it by hand, checked
// by FuzzFastPathMatchesGeneralPath): the bulkhead and the shedder
// (recording sr), which run no user code; the breaker, recording r; the retry budget's record (bud, at budAt); the adaptive limit last, recording oc, since its Release may run
// the user's Controller: if that panics, everything else is released and
// recorded. Each bit of a.held is cleared before its release, so that a
// panic or runtime.Goexit in a listener or the Controller makes the guard
// neither release a permit twice nor leak the others. The breaker records at
// a.t1 (rampart.NotRead before fn ran), the adaptive limit at a.t1 or, when
// no end was read, a.t0: NotRead would make the adaptive queue's handoff
// take MinInt64 for now and shed every waiter as stale.
func (p *Pipeline) release(a *attempt, r, oc, sr rampart.Result, bud int, budAt int64) {
	if a.held&heldBulkhead != 0 {
		a.held &^= heldBulkhead
		p.bh.Release() // one atomic add and one load
	}
	if a.held&heldShed != 0 {
		a.held &^= heldShed
		end := a.t1 // rampart.NotRead only when no Success is recorded
		if end == rampart.NotRead {
			end = a.t0
		}
		p.sh.ReleaseAt(a.shp, end, sr)
	}
	if a.held&heldBreaker != 0 {
		a.held &^= heldBreaker            // recorded from here (a listener may Goexit)
		p.cb.ReleaseAt(a.permit, a.t1, r) // healthy count window: four loads
	}
	if bud != budgetNone {
		// Recorded from here: if the user's Budget panics, abort must not
		// record the attempt again (a.ran tells it).
		a.ran = false
		if bud == budgetSuccess {
			p.bud.OnSuccess(budAt)
		} else {
			p.bud.OnFailure(budAt)
		}
	}
	if a.held&heldAdaptive != 0 {
		a.held &^= heldAdaptive
		end := a.t1
		if end == rampart.NotRead {
			end = a.t0
		}
		p.al.ReleaseAt(a.token, end, oc)
	}
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
func (p *Pipeline) reject(o *Outcome, k Kind, err error, retryAfter time.Duration) {
	o.Code, o.Policy, o.Err, o.RetryAfter = Rejected, k, err, max(retryAfter, 0)
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
	if a.t0 != rampart.NotRead {
		return a.t0
	}
	return p.tick.Now() // the hedger's clock (New checks it is the pipeline's)
}

// releaseHeld is run's deferred guard: after a panic or runtime.Goexit in
// fn (heldCall set), in ShedPriority (heldPrio set) or in a classifier
// during end, it counts the panic (Stats.Panicked) and releases what is
// still held (see abort); on every normal return a.held is 0 and it does
// nothing.
func (p *Pipeline) releaseHeld(a *attempt) {
	if a.held != 0 {
		p.abort(a)
	}
}

// readAfterPanic is abort's end reading. The Ticker may be user code: if it
// panics here, abort goes on without the reading (rampart.NotRead) rather than
// leaving the permits held; the panic that ran abort goes on unchanged.
func (p *Pipeline) readAfterPanic() (now int64) {
	defer func() {
		if recover() != nil {
			now = rampart.NotRead
		}
	}()
	return p.now()
}

// abort releases an attempt whose fn panicked or called runtime.Goexit:
// the breaker records a failure (without its Classify), the adaptive limit frees the
// slot as Ignored, the retry budget records a failure. Slow path.
func (p *Pipeline) abort(a *attempt) {
	// The timeout first (innermost), then release, which clears each bit
	// before its release: a panic in one (a user Controller closing the
	// adaptive window) neither releases a permit twice nor leaks the others.
	// A second exit while this one is handled (a breaker listener or the
	// Ticker calling runtime.Goexit, a user Budget panicking) cuts the
	// releases short: abortRest then gives back what is still held.
	defer p.abortRest(a)
	if p.needT1 && a.t1 == rampart.NotRead {
		a.t1 = p.readAfterPanic()
	}
	if a.held&heldTimeout != 0 {
		a.held &^= heldTimeout
		// Without an end reading (a deadline mode that needs none, or a
		// Ticker that panicked) t0 stands in: NotRead would make a
		// soft-mode Finish read the ticker itself.
		end := a.t1
		if end == rampart.NotRead {
			end = a.t0
		}
		_ = p.to.FinishAt(a.th, end, ErrPanicked) // the verdict is discarded
	}
	// A failure, without the breaker's Classify: this may run because
	// Classify itself panicked. An attempt whose fn never ran (a later
	// stage's rejection listener called Goexit) is released as Ignored, as
	// unwind does, and the budget records nothing.
	r, bud := rampart.Failure, budgetNone
	if a.ran {
		if p.bud != nil {
			bud = budgetFailure
		}
	} else {
		r = rampart.Ignored
	}
	a.held &^= heldCall | heldPrio
	if p.stats != nil {
		p.stats.Add(statPanicked, 1) // the call ends with no Outcome to count
	}
	p.release(a, r, rampart.Ignored, rampart.Ignored, bud, a.start)
}

// abortRest is abort's deferred guard: after a second panic or
// runtime.Goexit during abort it releases, without an outcome, whatever
// a.held still names (nothing when abort ran to its end). Slow path.
func (p *Pipeline) abortRest(a *attempt) {
	if a.held&heldTimeout != 0 {
		a.held &^= heldTimeout
		_ = p.to.FinishAt(a.th, a.t0, ErrPanicked) // the verdict is discarded
	}
	if a.held&(heldBulkhead|heldShed|heldBreaker|heldAdaptive) != 0 {
		p.release(a, rampart.Ignored, rampart.Ignored, rampart.Ignored, budgetNone, rampart.NotRead)
	}
}
