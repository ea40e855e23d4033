package timeout

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// job is one abandon-mode call, pooled: its channels are reused, its
// context never is (a fresh ctx per call).
//
// Ownership protocol. state starts running; exactly one CAS moves it out:
//
//	running --worker returns (CAS)--> done:   the caller owns the job again
//	running --caller leaves  (CAS)--> left:   the worker owns it (recycles it
//	                                          and runs onDone when fn returns)
//
// Tokens, on one channel (so that the caller can wait with a plain receive,
// without a select, when the parent is never cancelled): tokFinished from
// the worker when it wins the CAS to done, tokWake from the watchdog when
// the deadline fires. Before the job is recycled, every token that will be
// sent has been received: the caller receives tokWake whenever unwatch
// reports that the watch fired, and tokFinished whenever it lost (or did not
// try) the CAS to left.
type job struct {
	t        *Timeout
	fn       func(context.Context) error
	c        *ctx
	wh       watchdog.Handle
	onDone   func()
	state    atomic.Uint32
	err      error
	panicVal any
	outcome  uint8      // outNormal / outPanic / outGoexit, written by the worker
	sig      chan uint8 // tokFinished / tokWake; capacity 2
}

const (
	tokFinished = 1
	tokWake     = 2
)

const (
	jobRunning = 0
	jobDone    = 1
	jobLeft    = 2
)

const (
	outNormal = iota
	outPanic
	outGoexit
)

// getJob takes a job from t's pool. The pool is per Timeout (not
// package-wide) so that a Timeout created inside a testing/synctest bubble
// never receives channels made in another bubble.
func (t *Timeout) getJob() *job {
	if j, ok := t.jobs.Get().(*job); ok {
		return j
	}
	return &job{sig: make(chan uint8, 2)}
}

// Fire is the watchdog's callback for an abandon-mode call: end the
// callee's context and wake the caller.
func (j *job) Fire(uint64) {
	j.c.cancel(endFired)
	j.sig <- tokWake
}

// run is the worker goroutine.
func (j *job) run() {
	normal := false
	defer func() {
		if normal {
			return
		}
		if r := recover(); r != nil {
			j.end(nil, outPanic, r)
		} else {
			j.end(nil, outGoexit, nil)
		}
	}()
	err := j.fn(j.c)
	normal = true
	j.end(err, outNormal, nil)
}

// end reports the worker's result: to the caller if it still waits, else it
// cleans up the abandoned call itself (and re-raises a panic: an abandoned
// function that panics crashes the program, as any goroutine's panic does).
func (j *job) end(err error, out uint8, pv any) {
	j.err, j.outcome, j.panicVal = err, out, pv
	if j.state.CompareAndSwap(jobRunning, jobDone) {
		j.sig <- tokFinished
		return
	}
	t, onDone := j.t, j.onDone
	j.recycle()
	t.abandoned.Add(-1)
	if onDone != nil {
		onDone()
	}
	if out == outPanic {
		panic(pv)
	}
}

func (j *job) recycle() {
	t := j.t
	j.t, j.fn, j.c, j.onDone, j.err, j.panicVal, j.outcome = nil, nil, nil, nil, nil, nil, outNormal
	j.wh = watchdog.Handle{}
	j.state.Store(jobRunning)
	t.jobs.Put(j)
}

// DoAbandon calls fn in a goroutine of its own with a deadline context and
// returns when fn returns, at the deadline (within one watchdog tick), or
// when ctx is done, whichever comes first, whatever t's Mode. When it
// returns before fn, fn is abandoned: it keeps running with its context
// done, and onDone (if not nil) runs on fn's goroutine when fn returns.
// Otherwise onDone runs before DoAbandon returns. So onDone runs exactly
// once, after fn has truly ended (or at once, when the call is rejected
// and fn never starts): release a bulkhead permit there, never earlier.
//
// It returns fn's error unchanged; t.Err() when the call overran (fn
// abandoned at the deadline, or fn returned after the deadline fired: like
// Do, DoAbandon reads the clock once, at the start); ctx's error when ctx
// was done first (fn abandoned); or, without starting fn, the rejection
// (matching ErrTooManyAbandoned and rampart.ErrRejected) when MaxAbandoned
// functions are abandoned and still running. The bound is strict: a call
// that cannot take an abandon slot when its deadline comes waits for fn
// instead.
//
// A panic in fn is re-raised on the caller's goroutine when the caller is
// still waiting, and on fn's goroutine (crashing the program, like any
// goroutine's panic) when fn was abandoned; runtime.Goexit in fn ends the
// caller's goroutine too, or only fn's when abandoned.
//
// Costs: the context, a goroutine (with its closure), a pooled job, a
// watchdog slot; see the package documentation for measured figures.
func (t *Timeout) DoAbandon(parent context.Context, fn func(context.Context) error, onDone func()) error {
	if n := t.abandoned.Load(); n >= t.maxAband {
		return t.reject(n, onDone)
	}
	now := t.tk.Now()
	deadline := atomicx.SatAdd(now, t.d) // a huge Duration must not wrap into the past
	j := t.getJob()
	c := &ctx{parent: parent, t: t, deadline: deadline}
	j.t, j.fn, j.c, j.onDone = t, fn, c, onDone
	var wh watchdog.Handle
	if t.wd != nil {
		wh = t.watch(c, j, deadline, now)
	} else {
		t.watchSlow(c, j, deadline, now) // soft mode has no watchdog: a runtime timer
	}
	j.wh = wh
	go j.run()

	var finished, woke bool // the tokens received
	recv := func() {
		if <-j.sig == tokFinished {
			finished = true
		} else {
			woke = true
		}
	}
	if pd := parent.Done(); pd == nil {
		recv()
	} else {
		select {
		case v := <-j.sig:
			finished, woke = v == tokFinished, v == tokWake
		case <-pd:
		}
	}
	// Settle the watch: disarmed, or its token received.
	if !woke && !t.unwatch(c, wh) {
		for !woke {
			recv()
		}
	}
	if finished {
		return t.collect(j)
	}
	// The deadline fired or the parent is done: try to leave.
	if !atomicx.AddBelow(&t.abandoned.Int64, 1, t.maxAband) {
		// No abandon slot: wait for fn (its context is done or will be).
		c.cancel(endParent) // no-op when the deadline fired
		for !finished {
			recv()
		}
		return t.collect(j)
	}
	if !j.state.CompareAndSwap(jobRunning, jobLeft) {
		// fn returned just now: it is ours again.
		t.abandoned.Add(-1)
		for !finished {
			recv()
		}
		return t.collect(j)
	}
	// Abandoned: from here on the worker owns j.
	t.abandonedTotal.Add(1)
	n := t.abandoned.Load()
	if t.onAbandon != nil {
		notify.Call1(&t.listenerPanics, t.onAbandon, n)
	}
	if woke {
		return t.timedOut(t.tk.Now() - (deadline - t.d))
	}
	c.cancel(endParent)
	return c.Err()
}

// collect finishes a call whose worker returned while the caller waited
// (the watch is settled): classify, release, run onDone, re-raise a panic
// or Goexit.
func (t *Timeout) collect(j *job) error {
	c := j.c
	err := t.endFired(c, c.deadline, j.err)
	out, pv, onDone := j.outcome, j.panicVal, j.onDone
	j.recycle()
	if onDone != nil {
		onDone()
	}
	switch out {
	case outPanic:
		panic(pv)
	case outGoexit:
		runtime.Goexit()
	}
	return err
}

// reject is the slow path of DoAbandon when MaxAbandoned is reached.
func (t *Timeout) reject(n int64, onDone func()) error {
	t.rejected.Add(1)
	if t.onRejected != nil {
		notify.Call1(&t.listenerPanics, t.onRejected, n)
	}
	if onDone != nil {
		onDone()
	}
	return t.rej
}
