package timeout

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
)

// The worker pool of DoAbandon (and CallAbandon).
//
// A Timeout that runs DoAbandon gets, on the first call, a fixed table of
// Workers slots. A slot is a worker goroutine's home: its job (the call
// state, reused) and its wake channel. Every slot is on exactly one of two
// lock-free stacks, or owned by one party:
//
//	free: no goroutine (at first, after an idle exit, after a Goexit)
//	idle: a goroutine parked on (or about to receive from) its wake channel
//	owned: popped by a caller (or the reaper, or Close), which then does
//	       one thing with it: hand it a call, or tell its goroutine to exit
//
// A call pops an idle slot (one CAS), fills its job and sends wakeRun (the
// channel has room for one token, so the send never blocks, even when the
// worker has not reached its receive yet); failing that it pops a free slot
// and starts its goroutine; failing that (every slot busy) it starts a
// goroutine of its own with a job from the pool's jobs.
// When the call is over, whoever owns the job (the caller when fn returned
// in time, the worker when fn was abandoned, only once fn returned and
// onDone ran) pushes the slot back on the idle stack. So the goroutines of
// the pool are bounded by Workers, abandoned ones included, and a slot is
// never handed to a call while an abandoned fn still runs in it.
//
// Idle exit. A reaper (one runtime timer per pool, armed only while the idle
// stack is not empty) runs every workerIdle: it takes the whole idle stack,
// tells the workers parked since before its previous run to exit (they push
// their slot on the free stack and return), and pushes the others back. A
// worker thus exits after one to two workerIdle periods without a call, and
// a dropped Timeout's pool holds no goroutine and no armed timer after
// that. Close does the same to every idle worker at once and waits for them
// to exit; a worker busy at Close exits when its call is over (park sees
// closed and drains the idle stack again).
//
// The stacks are Treiber stacks of slot indices whose head packs a 32-bit
// ABA tag (incremented by every pop and push), as in internal/watchdog.

// DefaultWorkers is the size of a Timeout's worker pool when Config.Workers
// is zero.
const DefaultWorkers = 128

// maxWorkers bounds Config.Workers (slot indices are 32-bit).
const maxWorkers = 1 << 20

// workerIdle is the idle period after which a parked worker exits (it exits
// after between one and two of them). A variable only so that tests can
// shorten it; a pool copies it when it is created.
var workerIdle = time.Second

// Wake tokens, on worker.ch.
const (
	wakeRun     = 1 // run the job in the slot
	wakeExit    = 2 // exit (reaper, or a drain after Close)
	wakeConfirm = 3 // exit and confirm on pool.bye (Close waits)
)

// worker is a worker slot (the pool's table pads it: paddedWorker).
type worker struct {
	job
	p     *workerPool
	ch    chan uint8    // wake tokens; capacity 1; made with the slot's first goroutine
	next  atomic.Uint32 // the next slot on the stack (index+1; 0 = end)
	idx   uint32
	epoch uint64 // pool.epoch when parked (written by the owner before the push)
}

// paddedWorker is one slot of the pool's table. The trailing line of
// padding keeps the last words of a slot and the first words of the next
// one (each written by the call that owns its slot) on different cache
// lines.
type paddedWorker struct {
	worker
	_ pad.Line
}

// workerPool is a Timeout's pool of DoAbandon workers, and the rest of
// DoAbandon's machinery: a Timeout builds it on the first DoAbandon (or
// Close), so one that never abandons pays one nil pointer for it.
type workerPool struct {
	idle  pad.Uint64 // stack head: tag<<32 | (index+1); popped and pushed by every call
	free  pad.Uint64 // stack head of the slots without goroutine
	slots []paddedWorker

	jobs sync.Pool              // *job, DoAbandon calls that found no worker
	rej  *rampart.RejectedError // the rejection at MaxAbandoned: built here for a named Timeout, shared by unnamed ones

	// abandoned is written when a call is abandoned and when an abandoned
	// function returns, read by every DoAbandon call; the other two count
	// rare events.
	abandoned      atomic.Int64
	abandonedTotal atomic.Uint64
	rejected       atomic.Uint64

	epoch  atomic.Uint64 // reaper runs
	armed  atomic.Bool   // the reaper's timer is armed
	closed atomic.Bool
	live   atomic.Int64  // goroutines of the pool
	timer  *time.Timer   // the reaper; nil in the closed placeholder
	reapMu sync.Mutex    // held by a reap and by close: close waits out a reap in progress
	period time.Duration // workerIdle when created
	bye    chan struct{}
}

// closedWorkers is what a Timeout closed before any DoAbandon has instead
// of a pool: no slot, so every call starts a goroutine of its own.
func (t *Timeout) closedWorkers() *workerPool {
	p := &workerPool{rej: rejection(t.cur.Load().err.name)}
	p.closed.Store(true)
	return p
}

// initWorkers creates t's pool on the first DoAbandon call (a Timeout
// that never abandons never pays for it), or returns the one a concurrent
// call created (or the closed placeholder).
func (t *Timeout) initWorkers() *workerPool {
	n := int(t.nWorkers)
	p := &workerPool{slots: make([]paddedWorker, n), bye: make(chan struct{}), period: workerIdle, rej: rejection(t.cur.Load().err.name)}
	for i := range p.slots {
		w := &p.slots[i].worker
		w.p, w.idx, w.w = p, uint32(i), w
		if i+1 < n {
			w.next.Store(uint32(i + 2))
		}
	}
	if n > 0 {
		p.free.Store(1)
	}
	// Created disarmed (before p is published: park resets it); armed by
	// the first park.
	p.timer = time.AfterFunc(time.Hour, p.reap)
	p.timer.Stop()
	if !t.workers.CompareAndSwap(nil, p) {
		return t.workers.Load()
	}
	return p
}

// get takes a slot for a call: an idle one (running true: its goroutine
// waits for wakeRun), else a free one (its goroutine must be started), else
// nil (the call starts a goroutine of its own).
func (p *workerPool) get() (w *worker, running bool) {
	if i, ok := p.pop(&p.idle.Uint64); ok {
		return &p.slots[i].worker, true
	}
	return p.getFree(), false
}

// getFree is the slow path of get: a slot without goroutine, unless closed.
func (p *workerPool) getFree() *worker {
	if p.closed.Load() {
		return nil
	}
	if i, ok := p.pop(&p.free.Uint64); ok {
		w := &p.slots[i].worker
		if w.ch == nil {
			// Before the call arms its watch: Fire sends on sig.
			w.ch = make(chan uint8, 1)
			w.sig = make(chan uint8, 2)
		}
		return w
	}
	return nil
}

// spawn starts the goroutine of free slot w, whose job is filled in.
func (p *workerPool) spawn(w *worker) {
	p.live.Add(1)
	go w.loop()
}

// loop is a pool goroutine: run the job in the slot, then wait for the
// next token. A Goexit in fn ends it from inside run (the slot goes back to
// the free stack there or in collect).
func (w *worker) loop() {
	p := w.p
	counted := true
	defer func() {
		if counted { // a Goexit in fn, or wakeExit
			p.live.Add(-1)
		}
	}()
	for {
		w.job.run()
		switch <-w.ch {
		case wakeRun:
		case wakeExit:
			p.toFree(w)
			return
		default: // wakeConfirm
			p.toFree(w)
			// Counted out before the confirmation, so that Stats().Workers
			// no longer includes this worker when Close returns.
			counted = false
			p.live.Add(-1)
			p.bye <- struct{}{}
			return
		}
	}
}

// park puts w, whose job is cleared and whose goroutine is alive, on the
// idle stack. Costs: a load of the epoch, a CAS to push, a load of armed and
// of closed (the timer is reset only when the reaper is not armed).
func (p *workerPool) park(w *worker) {
	w.epoch = p.epoch.Load()
	p.push(&p.idle.Uint64, w.idx)
	// Both loads come after the push; the reaper and Close store before they
	// look at the stack (Dekker): at least one side sees the other.
	if !p.armed.Load() && p.armed.CompareAndSwap(false, true) {
		p.timer.Reset(p.period)
	}
	if p.closed.Load() {
		p.drain(wakeExit)
	}
}

// toFree puts w, whose goroutine is ending (or has not started), on the free
// stack.
func (p *workerPool) toFree(w *worker) { p.push(&p.free.Uint64, w.idx) }

// reap is the reaper's timer function: the workers parked before its
// previous run exit, the others go back on the idle stack. It re-arms
// itself while the idle stack is not empty.
func (p *workerPool) reap() {
	// Close takes reapMu after setting closed: a reap it races with
	// finishes first (and may hold part of the idle stack meanwhile), so
	// Close then finds every idle worker on the stack.
	p.reapMu.Lock()
	defer p.reapMu.Unlock()
	if p.closed.Load() {
		return
	}
	e := p.epoch.Add(1)
	top := p.popAll(&p.idle.Uint64)
	for top != 0 {
		w := &p.slots[top-1].worker
		top = w.next.Load()
		if w.epoch+1 < e {
			w.ch <- wakeExit
		} else {
			p.push(&p.idle.Uint64, w.idx)
		}
	}
	p.armed.Store(false)
	if uint32(p.idle.Load()) != 0 && p.armed.CompareAndSwap(false, true) {
		p.timer.Reset(p.period)
	}
	// A Close that started meanwhile waits for reapMu, then drains what we
	// pushed back (with confirmation).
}

// drain tells every idle worker to exit with token tok; it returns how many.
func (p *workerPool) drain(tok uint8) int {
	n := 0
	for top := p.popAll(&p.idle.Uint64); top != 0; n++ {
		w := &p.slots[top-1].worker
		top = w.next.Load()
		w.ch <- tok
	}
	return n
}

// close stops the reaper and makes every idle worker exit, and waits for
// them. Workers busy now exit when their call is over. Idempotent.
func (p *workerPool) close() {
	if p.closed.Swap(true) {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	p.reapMu.Lock() // wait out a reap in progress (it may hold idle workers)
	defer p.reapMu.Unlock()
	for n := p.drain(wakeConfirm); n > 0; n-- {
		<-p.bye
	}
}

// pop takes the top slot of stack head; false when it is empty.
func (p *workerPool) pop(head *atomic.Uint64) (uint32, bool) {
	for {
		old := head.Load()
		top := uint32(old)
		if top == 0 {
			return 0, false
		}
		next := p.slots[top-1].next.Load()
		if head.CompareAndSwap(old, (old>>32+1)<<32|uint64(next)) {
			return top - 1, true
		}
	}
}

// push puts slot i on stack head.
func (p *workerPool) push(head *atomic.Uint64, i uint32) {
	w := &p.slots[i].worker
	for {
		old := head.Load()
		w.next.Store(uint32(old))
		if head.CompareAndSwap(old, (old>>32+1)<<32|uint64(i+1)) {
			return
		}
	}
}

// popAll empties stack head and returns its former top (index+1; 0 when it
// was empty): the caller owns the chain, linked by next.
func (p *workerPool) popAll(head *atomic.Uint64) uint32 {
	for {
		old := head.Load()
		if uint32(old) == 0 {
			return 0
		}
		if head.CompareAndSwap(old, (old>>32+1)<<32) {
			return uint32(old)
		}
	}
}
