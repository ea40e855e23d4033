package circuitbreaker

import (
	"context"
	"github.com/rampart-go/rampart"
)

// successUntimed is ReleaseAt(p, rampart.NotRead, Success) for a permit that Do
// or Call admitted on a clockless path: closed (the fast paths below), or
// Disabled / MetricsOnly (see needsNoClock), which ReleaseAt records.
func (b *Breaker) successUntimed(cs *settings, p Permit) {
	if w := b.state.Load(); w != p.word || w&stateMask != uint64(Closed) { // atomic 1: still closed in the same generation?
		b.releaseAt(cs, p, rampart.NotRead, rampart.Success) // stale (counted there), or Disabled / MetricsOnly
		return
	}
	if cs.counted { // CountStats only (see releaseAt)
		b.countSuccess()
	}
	if cs.fast == fastCount {
		// Atomics 2–3 (+0–3 counter adds while the window warms); a fast
		// success in a warm window cannot raise any rate: no evaluation.
		if b.count.add(&b.hot.hotWords, codeOK) == codeEmpty {
			b.evaluateCount(cs, p.word, rampart.NotRead)
		}
		return
	}
	if b.hot.consec.Load() != 0 { // atomic 2: a store only after failures
		b.hot.consec.Store(0)
	}
}

// finishSlow records the outcome of a Do or Call that is not an untimed
// success: errors, timed permits, a custom classifier.
func (b *Breaker) finishSlow(cs *settings, p Permit, err error, returned *bool) {
	now := int64(rampart.NotRead)
	if p.start != rampart.NotRead {
		now = b.init.Ticker.Now() // clock read: the call's duration is judged
	}
	// Classify first: a panic in it still finds *returned false, and the
	// deferred release records a failure. From here the permit is
	// recorded exactly once, whatever a listener does.
	r := rampart.Success
	if err != nil || cs.Classify != nil {
		r = b.classifyErr(cs, err)
	}
	*returned = true
	b.releaseAt(cs, p, now, r)
}

// finishAbnormal runs when fn did not return, or Config.Classify panicked
// on its result: a panic is recorded as a failure and re-raised;
// runtime.Goexit releases the permit as Ignored.
func (b *Breaker) finishAbnormal(cs *settings, p Permit, r any) {
	if r != nil {
		now := int64(rampart.NotRead)
		if p.start != rampart.NotRead {
			now = b.init.Ticker.Now()
		}
		b.releaseAt(cs, p, now, rampart.Failure)
		panic(r)
	}
	b.releaseAt(cs, p, rampart.NotRead, rampart.Ignored)
}

// Do runs fn if the breaker admits it and records its outcome. It returns
// fn's error unchanged, or the breaker's preallocated rejection (matching
// ErrOpen and rampart.ErrRejected) without running fn. A panic in fn (or in
// Config.Classify on fn's error) is recorded as a failure and re-raised;
// runtime.Goexit in fn releases the permit. ctx is passed to fn; Do itself does not check it.
//
// On a closed or metrics-only count-window or consecutive breaker with no
// slow-call threshold and no per-call listener, and on a disabled breaker,
// Do reads no clock.
func (b *Breaker) Do(ctx context.Context, fn func(context.Context) error) error {
	// The lazy acquire: a closed breaker that needs no duration (no
	// slow-call threshold, no time window, no per-call listener) reads no
	// clock, and neither does an open one whose open timer has not fired
	// (real-time NanoTicker only), nor a disabled or metrics-only one that
	// needs no time (tested after those two, off the closed path). Do
	// cannot be inlined (defer), so its own body is the cheapest place for
	// these fast paths.
	var p Permit
	w := b.state.Load() // atomic 1: the state word
	cs := b.set.Load()  // the configuration of the call, read once
	switch {
	case w&stateMask == uint64(Closed) && !cs.timed:
		p = Permit{word: w, start: rampart.NotRead}
	case w&stateMask == uint64(Open) && b.hinted && b.hint.expired.Load() != w: // atomic 2: the timer's hint
		b.countRejection() // on this P's counter: no shared word written
		if cs.OnRejected != nil {
			b.notifyRejected(cs, Open)
		}
		return b.errOpen() // rejectOpen's body, written out: one call less
	case b.needsNoClock(cs, w): // Disabled, or MetricsOnly measuring nothing
		p = Permit{word: w, start: rampart.NotRead}
	default:
		var err error
		if p, err = b.acquireAt(cs, b.init.Ticker.Now()); err != nil { // clock read: the decision or the duration needs it
			return err
		}
	}
	returned := false
	defer func() {
		if !returned {
			b.finishAbnormal(cs, p, recover())
		}
	}()
	err := fn(ctx)
	if err == nil && p.start == rampart.NotRead && cs.Classify == nil {
		returned = true
		b.successUntimed(cs, p) // no duration needed: closed (cs.fast is set), or see needsNoClock
	} else {
		b.finishSlow(cs, p, err, &returned)
	}
	return err
}

// Call is Do for a function that returns a value: it returns fn's result and
// error unchanged, or the zero T and the breaker's rejection.
func Call[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	var p Permit
	w := b.state.Load() // atomic 1: the state word (as in Do)
	cs := b.set.Load()  // the configuration of the call, read once (as in Do)
	switch {
	case w&stateMask == uint64(Closed) && !cs.timed:
		p = Permit{word: w, start: rampart.NotRead}
	case w&stateMask == uint64(Open) && b.hinted && b.hint.expired.Load() != w:
		var zero T
		return zero, b.rejectOpen(cs)
	case b.needsNoClock(cs, w):
		p = Permit{word: w, start: rampart.NotRead}
	default:
		var err error
		if p, err = b.acquireAt(cs, b.init.Ticker.Now()); err != nil {
			var zero T
			return zero, err
		}
	}
	returned := false
	defer func() {
		if !returned {
			b.finishAbnormal(cs, p, recover())
		}
	}()
	v, err := fn(ctx)
	if err == nil && p.start == rampart.NotRead && cs.Classify == nil {
		returned = true
		b.successUntimed(cs, p)
	} else {
		b.finishSlow(cs, p, err, &returned)
	}
	return v, err
}
