package timeout

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/lazyctx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// job is the state of one DoAbandon call. Most jobs live in a worker
// slot of the Timeout's pool (see workerPool) and are reused by the next
// call that takes the slot; a call that finds no slot uses a job from
// the pool's jobs (a sync.Pool) and a goroutine of its own. The job's channels are
// reused, its context never is (a fresh ctx per call).
//
// Ownership protocol. state starts running; exactly one CAS moves it out:
//
//	running --worker returns (CAS)--> done:   the caller owns the job again
//	running --caller leaves  (CAS)--> left:   the worker owns it (recycles it
//	                                          and runs onDone when fn returns)
//
// Whoever owns the job when the call is over recycles it: it clears the
// fields that reference user state, then parks the worker slot on the idle
// stack (or puts the job back in the pool's jobs). A job handed to the next call is
// therefore never one that an abandoned fn is still running: the slot is
// recycled only after fn returned.
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
	s        *settings // the configuration the call started under
	fn       func(context.Context) error
	c        *ctx
	wh       watchdog.Handle
	tm       *time.Timer // the fallback timer, when the watchdog refused or there is none
	onDone   func()
	state    atomic.Uint32
	err      error
	panicVal any
	outcome  uint8      // outNormal / outPanic / outGoexit, written by the worker
	sig      chan uint8 // tokFinished / tokWake; capacity 2
	w        *worker    // the slot this job lives in; nil for a job of the pool's jobs
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

// getJob takes a job from p's jobs, for a call that found no worker slot.
// The jobs are per Timeout (not package-wide) so that a Timeout created
// inside a testing/synctest bubble never receives channels made in another
// bubble.
func (p *workerPool) getJob() *job {
	if j, ok := p.jobs.Get().(*job); ok {
		return j
	}
	return &job{sig: make(chan uint8, 2)}
}

// Fire is the watchdog's callback for a DoAbandon call: end the
// callee's context and wake the caller.
func (j *job) Fire(uint64) {
	j.c.end(lazyctx.Fired)
	j.sig <- tokWake
}

// runAlone is the goroutine of a call that found no worker slot: one job,
// then exit.
func (j *job) runAlone() { j.run() }

// run calls fn and reports its end (see end). A panic in fn is recovered
// here and reported (the caller re-raises it); so is runtime.Goexit, which
// then goes on ending the goroutine.
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
// After sending tokFinished, end touches nothing of j: the caller owns it.
func (j *job) end(err error, out uint8, pv any) {
	j.err, j.outcome, j.panicVal = err, out, pv
	if j.state.CompareAndSwap(jobRunning, jobDone) {
		j.sig <- tokFinished
		return
	}
	// Abandoned, and fn has truly ended: the job is ours.
	p, onDone, w := j.t.workers.Load(), j.onDone, j.w // p: set before the job was handed out
	j.clear()
	p.abandoned.Add(-1)
	if w == nil {
		p.jobs.Put(j)
	} else if out == outGoexit {
		w.p.toFree(w) // this goroutine is ending; the slot has none now
	}
	if onDone != nil {
		if w != nil && out == outNormal {
			// The slot would be parked below; if onDone does not
			// return (a panic crashes the program, a Goexit ends this
			// goroutine), free it instead, or the pool shrinks for good.
			returned := false
			defer func() {
				if !returned {
					w.p.toFree(w)
				}
			}()
			onDone()
			returned = true
		} else {
			onDone()
		}
	}
	if out == outPanic {
		panic(pv)
	}
	if w != nil && out == outNormal {
		// Parked only now, after onDone: the slot is handed to another
		// call only once this call's permit is back.
		w.p.park(w)
	}
}

// clear drops the references to user state and readies j for the next
// call. The caller owns j.
func (j *job) clear() {
	j.t, j.s, j.fn, j.c, j.onDone, j.err, j.panicVal, j.outcome = nil, nil, nil, nil, nil, nil, nil, outNormal
	j.wh, j.tm = watchdog.Handle{}, nil
	j.state.Store(jobRunning)
}

// DoAbandon calls fn on another goroutine with a deadline context and
// returns when fn returns, at the deadline (within one watchdog tick), or
// when ctx is done, whichever comes first, whatever t's Mode: it is the
// entry point for a callee that may ignore its context (Do and Call never
// abandon). When it
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
// fn runs on a worker goroutine that the Timeout keeps parked between
// calls (see Config.Workers): a call hands its job to an idle worker and
// wakes it, instead of starting a goroutine. A worker that ran an
// abandoned fn is reused only after fn returned and onDone ran. fn must not
// leave its goroutine in a state that the next call would inherit
// (runtime.LockOSThread without UnlockOSThread, pprof goroutine labels).
// When every worker slot is busy, or after Close, the call starts a
// goroutine of its own.
//
// The deadline is the same in both modes. A soft-mode Timeout has no
// watchdog (its Do and StartAt cancel nothing), so DoAbandon times each of
// its calls with a runtime timer instead (counted in Stats.Fallbacks:
// three allocations more, the timer, its callback and the context's slow
// state); build the Timeout in deadline mode for calls that are mostly
// DoAbandon.
//
// Costs, on a deadline-mode Timeout with an idle worker: the context (the
// only allocation of its own; fn runs on another goroutine and may outlive
// the call, so a closure that captures variables is allocated too: two in
// all), a pop and a push on the idle stack (a CAS each), a watchdog slot,
// one channel send to wake the worker and one to wake the caller back. See
// the package documentation, Allocations, for the counts of each mode.
func (t *Timeout) DoAbandon(parent context.Context, fn func(context.Context) error, onDone func()) error {
	// fn escapes to the heap here (Go's escape analysis gives a parameter
	// one verdict per function), which is why DoAbandon is a separate
	// method and Do, which keeps fn on the caller's stack, never abandons.
	p := t.workers.Load()
	if p == nil {
		p = t.initWorkers() // the first call builds the machinery
	}
	s := t.cur.Load() // one load: the call keeps this configuration to its end
	if n := p.abandoned.Load(); n >= s.maxAband {
		return t.reject(p, s, n, onDone)
	}
	now := t.now(onDone)
	deadline := atomicx.SatAdd(now, s.d()) // a huge Duration must not wrap into the past
	w, running := p.get()
	var j *job
	if w != nil {
		j = &w.job
	} else {
		j = p.getJob()
	}
	c := newCtx(parent, s, deadline)
	j.t, j.s, j.fn, j.c, j.onDone = t, s, fn, c, onDone
	var wh watchdog.Handle
	var tm *time.Timer
	if t.wd != nil {
		wh, tm = t.watch(j, deadline, now)
	} else {
		tm = t.watchSlow(j, deadline, now) // soft mode has no watchdog: a runtime timer
	}
	j.wh, j.tm = wh, tm
	switch {
	case running:
		w.ch <- wakeRun // an idle worker: wake it (never blocks: capacity 1)
	case w != nil:
		p.spawn(w) // a free slot: its first goroutine
	default:
		go j.runAlone()
	}

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
	if !woke && !t.unwatch(wh, tm) {
		for !woke {
			recv()
		}
	}
	if finished {
		return t.collect(p, j)
	}
	// The deadline fired or the parent is done: try to leave.
	if !atomicx.AddBelow(&p.abandoned, 1, s.maxAband) {
		// No abandon slot: wait for fn (its context is done or will be).
		c.end(lazyctx.ParentDone) // no-op when the deadline fired
		for !finished {
			recv()
		}
		return t.collect(p, j)
	}
	if !j.state.CompareAndSwap(jobRunning, jobLeft) {
		// fn returned just now: it is ours again.
		p.abandoned.Add(-1)
		for !finished {
			recv()
		}
		return t.collect(p, j)
	}
	// Abandoned: from here on the worker owns j. The outcome is settled
	// and counted before the listener runs (it may call runtime.Goexit).
	p.abandonedTotal.Add(1)
	n := p.abandoned.Load()
	var err error
	if woke {
		err = t.timedOut(s, t.tk.Now()-(deadline-s.d()))
	} else {
		c.end(lazyctx.ParentDone)
		err = c.Err()
	}
	if s.onAbandon != nil {
		notify.Call1(&t.listenerPanics, s.onAbandon, n)
	}
	return err
}

// now is DoAbandon's start reading. The Ticker may be user code: if it
// panics (or calls runtime.Goexit), onDone still runs, as for any call that
// does not start fn, and the panic goes on.
func (t *Timeout) now(onDone func()) int64 {
	if onDone == nil {
		return t.tk.Now()
	}
	read := false
	defer func() {
		if !read {
			onDone()
		}
	}()
	now := t.tk.Now()
	read = true
	return now
}

// collect finishes a call whose worker returned while the caller waited
// (the watch is settled): classify, recycle the job (park its worker), run
// onDone, re-raise a panic or Goexit.
func (t *Timeout) collect(p *workerPool, j *job) error {
	c, s := j.c, j.s
	// The verdict first, its listener (and the clock read it needs) only
	// after the job is recycled and onDone ran: user code that calls
	// runtime.Goexit there must not lose the permit or the worker slot.
	timedOut := !c.end(lazyctx.Finished) && c.code() == lazyctx.Fired
	if timedOut {
		t.timeouts.Add(1) // counted now, also when fn panicked or called Goexit
	}
	deadline, err := c.deadline, j.err
	out, pv, onDone, w := j.outcome, j.panicVal, j.onDone, j.w
	j.clear()
	switch {
	case w == nil:
		p.jobs.Put(j)
	case out == outGoexit:
		w.p.toFree(w) // its goroutine is ending
	default:
		w.p.park(w)
	}
	if onDone != nil {
		onDone()
	}
	switch out {
	case outPanic:
		panic(pv)
	case outGoexit:
		runtime.Goexit()
	}
	if timedOut {
		if s.onTimeout != nil {
			elapsed := t.tk.Now() - (deadline - s.d()) // only a listener needs the clock
			notify.Call1(&t.listenerPanics, s.onTimeout, time.Duration(elapsed))
		}
		return &s.err
	}
	return err
}

// reject is the slow path of DoAbandon when MaxAbandoned is reached.
func (t *Timeout) reject(p *workerPool, s *settings, n int64, onDone func()) error {
	p.rejected.Add(1)
	if onDone != nil {
		onDone() // before the listener: one that calls runtime.Goexit must not keep the permit
	}
	if s.onRejected != nil {
		notify.Call1(&t.listenerPanics, s.onRejected, n)
	}
	return p.rej
}
