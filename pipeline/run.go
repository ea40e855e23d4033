package pipeline

import (
	"context"
)

// attempt holds what one attempt acquired, so that it can be released
// exactly once, on the normal path or from a deferred call when fn panics or
// calls runtime.Goexit.
type attempt struct {
	t0 int64
	// held records which permits are held, as bits of heldX below.
	held uint8
}

const (
	heldBulkhead = 1 << iota
)

// run is the engine behind Do, Try, Call and TryCall. Exactly one of fnT and
// fnE is non-nil. It returns the value of the last attempt and its outcome.
func run[T any](ctx context.Context, p *Pipeline, fnT func(context.Context) (T, error), fnE func(context.Context) error) (v T, o Outcome) {
	for {
		o.Attempts++
		// Load of the context's state: a call whose context is already done
		// starts nothing.
		if err := ctx.Err(); err != nil {
			o.Code, o.Err = Canceled, err
			return v, o
		}
		var a attempt
		if p.needT0 {
			a.t0 = p.tick.Now() // clock read 1 of at most 2 per attempt
		}
		if !p.admit(ctx, &a, &o) {
			return v, o
		}
		var err error
		v, err = invoke(ctx, p, &a, fnT, fnE)
		err = p.release(&a, err, &o)
		if err == nil {
			o.Code, o.Err = OK, nil
			return v, o
		}
		o.Err = err
		if o.Code == OK {
			o.Code = Failed
		}
		if ctx.Err() != nil && o.Code != TimedOut {
			o.Code = Canceled
		}
		return v, o
	}
}

// admit takes the permits of one attempt in the pipeline's order. On a
// rejection it releases what it took, fills o and returns false.
func (p *Pipeline) admit(ctx context.Context, a *attempt, o *Outcome) bool {
	if p.rl != nil {
		// One load and one CAS when admitted, one load when rejected.
		if wait := p.rl.TryAcquire(a.t0, 1); wait != 0 {
			p.unwind(a)
			p.reject(o, RateLimit, p.rl.RejectedError(), wait)
			return false
		}
	}
	if p.bh != nil {
		if err := p.bh.Enter(ctx); err != nil {
			p.unwind(a)
			p.reject(o, Bulkhead, err, 0)
			return false
		}
		a.held |= heldBulkhead
	}
	return true
}

// unwind releases the permits taken before a rejection, without recording a
// result.
func (p *Pipeline) unwind(a *attempt) {
	if a.held&heldBulkhead != 0 {
		p.bh.Exit()
	}
	a.held = 0
}

// reject fills o for a rejection by policy k.
func (p *Pipeline) reject(o *Outcome, k Kind, err error, retryAfter int64) {
	o.Code, o.Policy, o.Err, o.RetryAfter = Rejected, k, err, durationOf(retryAfter)
	if err != nil && !isRejection(err) {
		// A wait for a permit ended with the context: not a rejection.
		o.Code, o.Policy = Canceled, None
	}
}

// release ends an attempt that ran fn: it reads t1 when a policy needs it,
// lets the timeout turn a missed deadline into its error, records the
// outcome and gives back the permits, innermost first. It returns the
// attempt's error.
func (p *Pipeline) release(a *attempt, err error, o *Outcome) error {
	if a.held&heldBulkhead != 0 {
		p.bh.Exit()
	}
	a.held = 0
	return err
}

// invoke calls fn with a deferred guard that releases the attempt if fn
// panics or calls runtime.Goexit (the panic continues unchanged: nothing is
// recovered).
func invoke[T any](ctx context.Context, p *Pipeline, a *attempt, fnT func(context.Context) (T, error), fnE func(context.Context) error) (v T, err error) {
	done := false
	defer func() {
		if !done {
			p.abort(a)
		}
	}()
	if fnE != nil {
		err = fnE(ctx)
	} else {
		v, err = fnT(ctx)
	}
	done = true
	return v, err
}

// abort releases an attempt whose fn panicked or called runtime.Goexit,
// recording ErrPanicked as its outcome. Slow path.
func (p *Pipeline) abort(a *attempt) {
	var o Outcome
	p.release(a, ErrPanicked, &o)
}
