package adaptive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
)

// QueueConfig configures a [Limiter]'s optional waiting queue: calls that
// find the limit reached wait for a slot instead of failing at once, under
// the discipline Facebook describes in "Fail at Scale" (CoDel and adaptive
// LIFO):
//
//   - The queue is overloaded when it has not been empty during the last
//     Interval. Then a waiter may wait at most Target; otherwise at most
//     Interval. A waiter past its bound is shed (rejected) when a slot frees
//     up or when its own timer fires, whichever comes first.
//   - While overloaded, a freed slot goes to the newest waiter (LIFO): the
//     oldest ones are the likeliest to have been abandoned by their own
//     callers, and serving the newest keeps the latency of the calls that are
//     served low. Otherwise waiters are served first come, first served.
//   - A call that finds MaxLength waiters is rejected at once.
//
// The waiting path takes a mutex and allocates a waiter and a timer; the admission and
// release paths only read one atomic counter of waiters while the queue is
// empty.
type QueueConfig struct {
	// MaxLength is the most calls that may wait. Zero disables the queue.
	MaxLength int
	// Target is the longest wait while the queue is overloaded (CoDel's
	// target). Default 5 ms.
	Target time.Duration
	// Interval is the time the queue must have been non-empty to count as
	// overloaded, and the longest wait otherwise (CoDel's interval).
	// Default 100 ms; must be at least Target.
	Interval time.Duration
	// FIFO disables adaptive LIFO: waiters are always served oldest first.
	FIFO bool
}

type waiter struct {
	enq int64
	ch  chan Permit // buffered 1: the handoff never blocks
}

type queue struct {
	waiting atomic.Int32  // waiters in items; read by every release
	shed    atomic.Uint64 // waiters shed and arrivals refused by a full queue

	// The CoDel parameters, guarded by mu (Update changes them).
	maxLen           int
	target, interval int64
	lifo             bool

	mu        sync.Mutex
	items     []*waiter // oldest first
	lastEmpty int64     // the last time items was empty
}

func newQueue(c QueueConfig) (*queue, error) {
	const policy = "adaptive"
	if c.MaxLength < 0 {
		return nil, rampart.NewConfigError(policy, "Queue.MaxLength", "must not be negative, got %d", c.MaxLength)
	}
	if c.Target < 0 {
		return nil, rampart.NewConfigError(policy, "Queue.Target", "must not be negative, got %v", c.Target)
	}
	if c.Interval < 0 {
		return nil, rampart.NewConfigError(policy, "Queue.Interval", "must not be negative, got %v", c.Interval)
	}
	target, interval := durationOr(c.Target, 5*time.Millisecond), durationOr(c.Interval, 100*time.Millisecond)
	if interval < target {
		return nil, rampart.NewConfigError(policy, "Queue.Interval", "(%v) must be at least Target (%v)", time.Duration(interval), time.Duration(target))
	}
	if c.MaxLength == 0 {
		return nil, nil // no queue: nothing allocated
	}
	return &queue{maxLen: c.MaxLength, target: target, interval: interval, lifo: !c.FIFO}, nil
}

// overloaded reports whether the queue has been non-empty for more than the
// interval. Call with mu held.
func (q *queue) overloaded(now int64) bool {
	return len(q.items) > 0 && now-q.lastEmpty > q.interval
}

// removeAt deletes items[i]. Call with mu held.
func (q *queue) removeAt(i int, now int64) {
	copy(q.items[i:], q.items[i+1:])
	q.items[len(q.items)-1] = nil
	q.items = q.items[:len(q.items)-1]
	q.waiting.Add(-1)
	if len(q.items) == 0 {
		q.lastEmpty = now
	}
}

// handoff sheds waiters past their bound and gives the free slots, if any,
// to the next waiters. Slow path: runs in ReleaseAt only while someone waits.
func (q *queue) handoff(l *Limiter, now int64) {
	q.mu.Lock()
	bound := q.interval
	over := q.overloaded(now)
	if over {
		bound = q.target
	}
	for len(q.items) > 0 && now-q.items[0].enq > bound { // CoDel: shed the stale
		w := q.items[0]
		q.removeAt(0, now)
		q.shed.Add(1)
		l.rejected.Add(1)
		w.ch <- Permit{}
	}
	// Give out every free slot, not just the one this release freed: a
	// window closed by the release may have raised the limit.
	for len(q.items) > 0 {
		i := 0
		if over && q.lifo {
			i = len(q.items) - 1
		}
		t, ok := l.tryAcquire(now)
		if !ok {
			break
		}
		w := q.items[i]
		q.removeAt(i, now)
		w.ch <- t
	}
	q.mu.Unlock()
}

// AcquireWaitAt admits a call like AcquireAt, but when the limit is reached and
// Config.Queue is set it waits for a slot, under the queue's CoDel and
// adaptive-LIFO discipline (see [QueueConfig]), until ctx is done. It
// returns the Permit, or the limiter's rejection (the queue was full or shed
// the call), or ctx.Err(). Without a queue it is AcquireAt returning an error.
// now is the current time; the RTT of a call that waited starts when it got
// its slot.
//
// The waiting path allocates (a waiter and a timer) and takes a mutex; the immediate
// admission does neither.
func (l *Limiter) AcquireWaitAt(ctx context.Context, now int64) (Permit, error) {
	if t, ok := l.tryAcquire(now); ok {
		return t, nil
	}
	q := l.queue
	if q == nil {
		l.rejected.Add(1)
		l.unstallAt(now)
		return Permit{}, l.rejErr
	}
	if err := ctx.Err(); err != nil {
		return Permit{}, err
	}
	q.mu.Lock()
	if len(q.items) >= q.maxLen {
		q.mu.Unlock()
		q.shed.Add(1)
		l.rejected.Add(1)
		l.unstallAt(now)
		return Permit{}, l.rejErr
	}
	if len(q.items) == 0 {
		q.lastEmpty = now
	}
	w := &waiter{enq: now, ch: make(chan Permit, 1)} // waiting path: allocates
	q.items = append(q.items, w)
	q.waiting.Add(1)
	// A release between the failed tryAcquire and the enqueue saw no
	// waiter and handed its slot to nobody: try again now that we are
	// visible.
	if t, ok := l.tryAcquire(now); ok {
		q.removeAt(len(q.items)-1, now)
		q.mu.Unlock()
		return t, nil
	}
	interval := q.interval // under mu: Update changes it
	q.mu.Unlock()

	timer := time.NewTimer(time.Duration(interval))
	defer timer.Stop()
	var cause error
	select {
	case t := <-w.ch:
		if !t.Valid() {
			return Permit{}, l.rejErr
		}
		return t, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-timer.C:
		cause = l.rejErr
	}
	now = l.waitEnd(q, w) // before the lock: a user Ticker that panics must not leave q.mu held
	q.mu.Lock()
	for i, x := range q.items {
		if x == w {
			q.removeAt(i, now)
			q.mu.Unlock()
			if cause == l.rejErr {
				q.shed.Add(1)
				l.rejected.Add(1)
				l.unstallAt(now)
			}
			return Permit{}, cause
		}
	}
	q.mu.Unlock()
	// Handed a result just as we gave up: it is in the channel.
	t := <-w.ch
	if !t.Valid() {
		return Permit{}, l.rejErr
	}
	if cause != l.rejErr { // the caller is gone: give the slot back
		l.ReleaseAt(t, now, rampart.Ignored)
		return Permit{}, cause
	}
	return t, nil
}

// AcquireWait is [Limiter.AcquireWaitAt] at a reading of the limiter's
// Ticker.
func (l *Limiter) AcquireWait(ctx context.Context) (Permit, error) {
	return l.AcquireWaitAt(ctx, l.ticker.Now())
}

// waitEnd is the clock read of a waiter that gave up. The Ticker may be user
// code: if it panics or calls runtime.Goexit, the waiter is taken out of the
// queue all the same (or the slot it was handed just then is given back),
// so that no release hands a slot to nobody; the panic goes on.
func (l *Limiter) waitEnd(q *queue, w *waiter) int64 {
	read := false
	defer func() {
		if read {
			return
		}
		q.mu.Lock()
		for i, x := range q.items {
			if x == w {
				q.removeAt(i, w.enq)
				q.mu.Unlock()
				return
			}
		}
		q.mu.Unlock()
		if t := <-w.ch; t.Valid() { // handed a slot just as it gave up
			l.ReleaseAt(t, w.enq, rampart.Ignored)
		}
	}()
	now := l.ticker.Now()
	read = true
	return now
}
