package timeout_test

// Third review of package timeout: reproductions of the bugs found (skipped,
// "BUG: ...") and guards of behaviour the earlier tests did not cover.

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/timeout"
)

// r3New builds a Timeout with its own watchdog on a clock of the calling
// goroutine's bubble (or real time outside one).
func r3New(t *testing.T, cfg timeout.Config) *timeout.Timeout {
	t.Helper()
	if cfg.Ticker == nil {
		cfg.Ticker = rampart.NewNanoTicker()
	}
	if cfg.Tick == 0 && cfg.Watchdog == nil {
		cfg.Tick = time.Millisecond
	}
	to, err := timeout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return to
}

// r3Abandon starts, on its own goroutine, a DoAbandon call whose fn
// blocks until release is closed, and waits (synctest) until it has been
// abandoned at its deadline.
func r3Abandon(t *testing.T, to *timeout.Timeout, release <-chan struct{}) {
	t.Helper()
	before := to.Stats().AbandonedTotal
	go to.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
	time.Sleep(to.Duration() + 2*time.Millisecond)
	synctest.Wait()
	if to.Stats().AbandonedTotal != before+1 {
		t.Fatalf("the call was not abandoned: %+v", to.Stats())
	}
}

// A runtime.Goexit in OnRejected must not keep the rejected call from
// running onDone: onDone is where the caller's bulkhead permit goes back
// ("at once when the call is rejected").
func TestReview3RejectedListenerGoexitRunsOnDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := r3New(t, timeout.Config{Duration: time.Second, MaxAbandoned: 1,
			OnRejected: func(int64) { runtime.Goexit() }})
		release := make(chan struct{})
		r3Abandon(t, to, release)
		var released atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			to.DoAbandon(context.Background(), func(context.Context) error { return nil }, func() { released.Add(1) })
		}()
		<-done
		if n := released.Load(); n != 1 {
			t.Errorf("onDone ran %d times for a rejected call whose OnRejected called Goexit, want 1", n)
		}
		close(release)
		synctest.Wait()
		to.Close()
	})
}

// The same with a panicking OnRejected (recovered): onDone runs once, the
// panic is counted. A guard.
func TestReview3RejectedListenerPanicRunsOnDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := r3New(t, timeout.Config{Duration: time.Second, MaxAbandoned: 1,
			OnRejected: func(int64) { panic("listener") }})
		release := make(chan struct{})
		r3Abandon(t, to, release)
		var released atomic.Int32
		err := to.DoAbandon(context.Background(), func(context.Context) error { return nil }, func() { released.Add(1) })
		if !errors.Is(err, timeout.ErrTooManyAbandoned) || !errors.Is(err, rampart.ErrRejected) {
			t.Fatalf("err %v", err)
		}
		if n := released.Load(); n != 1 {
			t.Fatalf("onDone ran %d times, want 1", n)
		}
		if s := to.Stats(); s.ListenerPanics != 1 || s.Rejected != 1 {
			t.Fatalf("stats %+v", s)
		}
		close(release)
		synctest.Wait()
		to.Close()
	})
}

// A call that overran but could not abandon fn (MaxAbandoned reached: the
// bound is strict, it waits for fn) is classified in collect, by endFired,
// which runs OnTimeout (and reads the ticker for it) before the job is
// recycled and before onDone. A Goexit in OnTimeout (or a ticker that
// panics there) then loses onDone (the caller's permit) and the worker
// slot: its goroutine stays parked on its wake channel, on no stack, so
// Close never stops it.
func TestReview3TimeoutListenerGoexitInCollectRunsOnDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var timeouts atomic.Int32
		to := r3New(t, timeout.Config{Duration: time.Second, MaxAbandoned: 1,
			OnTimeout: func(time.Duration) {
				if timeouts.Add(1) == 2 {
					runtime.Goexit()
				}
			}})
		release := make(chan struct{})
		go to.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		time.Sleep(500 * time.Millisecond)
		// The second call's deadline comes after the first one was
		// abandoned: it cannot abandon and waits for its fn, which returns
		// as soon as its context is done.
		var released atomic.Int32
		done := make(chan struct{})
		go func() {
			defer close(done)
			to.DoAbandon(context.Background(), func(c context.Context) error { <-c.Done(); return c.Err() }, func() { released.Add(1) })
		}()
		<-done
		if n := released.Load(); n != 1 {
			t.Errorf("onDone ran %d times after a Goexit in OnTimeout, want 1", n)
		}
		if n := timeouts.Load(); n != 2 {
			t.Errorf("OnTimeout called %d times, want 2", n)
		}
		close(release)
		synctest.Wait()
		to.Close() // must stop every worker, or the bubble reports them blocked
		synctest.Wait()
		if n := to.Stats().Workers; n != 0 {
			t.Errorf("%d workers alive after Close", n)
		}
	})
}

// panicTicker is a rampart.Ticker whose Now panics while armed.
type panicTicker struct {
	src   rampart.Ticker
	armed atomic.Bool
}

func (p *panicTicker) Now() int64 {
	if p.armed.Load() {
		panic("ticker")
	}
	return p.src.Now()
}

// A ticker that panics at the start of DoAbandon (before fn starts) must
// not lose onDone: the doc promises it runs exactly once, and the caller
// took a permit for it.
func TestReview3TickerPanicAtDoAbandonStartRunsOnDone(t *testing.T) {
	tk := &panicTicker{src: rampart.NewManualTicker(0)}
	to, err := timeout.New(timeout.Config{Duration: time.Second, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer to.Close()
	var released atomic.Int32
	func() {
		defer func() {
			if r := recover(); r != "ticker" {
				t.Errorf("recovered %v, want the ticker's panic", r)
			}
		}()
		tk.armed.Store(true)
		defer tk.armed.Store(false)
		to.DoAbandon(context.Background(), func(context.Context) error { return nil }, func() { released.Add(1) })
	}()
	if n := released.Load(); n != 1 {
		t.Fatalf("onDone ran %d times after the ticker panicked, want 1", n)
	}
}

// A Goexit in OnAbandon must not lose the call's outcome: the call was
// abandoned at its deadline, so it is a timeout (Stats().Timeouts, and
// OnTimeout). DoAbandon runs OnAbandon before it counts the timeout.
func TestReview3AbandonListenerGoexitKeepsTimeoutCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var onTimeout atomic.Int32
		to := r3New(t, timeout.Config{Duration: time.Second,
			OnAbandon: func(int64) { runtime.Goexit() },
			OnTimeout: func(time.Duration) { onTimeout.Add(1) }})
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			to.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		}()
		<-done
		if s := to.Stats(); s.AbandonedTotal != 1 || s.Timeouts != 1 || onTimeout.Load() != 1 {
			t.Errorf("abandoned %d, timeouts %d, OnTimeout %d: want 1, 1, 1", s.AbandonedTotal, s.Timeouts, onTimeout.Load())
		}
		close(release)
		synctest.Wait()
		to.Close()
	})
}

// An abandoned fn's onDone runs on the worker; a Goexit there ends the
// worker goroutine before it parks or frees its slot, so the slot is lost
// for good (on neither stack): with Workers: 1 every later call starts a
// goroutine of its own.
func TestReview3AbandonedOnDoneGoexitKeepsWorkerSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := r3New(t, timeout.Config{Duration: time.Second, Workers: 1})
		release := make(chan struct{})
		go to.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, func() { runtime.Goexit() })
		time.Sleep(2 * time.Second)
		close(release)
		synctest.Wait()
		hold := make(chan struct{})
		var workers int64
		go to.DoAbandon(context.Background(), func(context.Context) error {
			workers = to.Stats().Workers
			<-hold
			return nil
		}, nil)
		synctest.Wait()
		if workers != 1 {
			t.Errorf("the next call ran on %d pool workers, want 1 (the slot was lost)", workers)
		}
		close(hold)
		synctest.Wait()
		to.Close()
	})
}

// funcTicker is a valid rampart.Ticker of an uncomparable type.
type funcTicker func() int64

func (f funcTicker) Now() int64 { return f() }

// New compares Config.Ticker with the Watchdog's clock with ==, which panics
// on an uncomparable dynamic type. A func-typed Ticker shared by the
// watchdog and the Timeout is a valid configuration: New must accept it, or
// refuse it with a ConfigError, never panic.
func TestReview3UncomparableTickerWithWatchdog(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	ft := funcTicker(tk.Now)
	wd := timeout.NewWatchdog(time.Millisecond, ft)
	defer wd.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("New panicked: %v", r)
		}
	}()
	to, err := timeout.New(timeout.Config{Duration: time.Second, Watchdog: wd, Ticker: ft})
	if err != nil {
		if !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Fatalf("err %v, want a ConfigError", err)
		}
		return
	}
	to.Close()
}

// An uncomparable Ticker without a Watchdog is fine (its dynamic type
// differs from the default ticker's, so == does not panic). A guard.
func TestReview3UncomparableTickerOwnWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := rampart.NewNanoTicker()
		to, err := timeout.New(timeout.Config{Duration: time.Second, Ticker: funcTicker(n.Now)})
		if err != nil {
			t.Fatal(err)
		}
		defer to.Close()
		err = to.Do(context.Background(), func(c context.Context) error { <-c.Done(); return nil })
		if !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("err %v", err)
		}
	})
}

// Extreme readings on a manual clock: a start near math.MaxInt64 and a
// Duration of math.MaxInt64 saturate the deadline instead of wrapping it
// into the past; the call is in time until the clock reaches it, and the
// context's Deadline is in the future. Soft mode, no watchdog.
func TestReview3ExtremeReadingsSoft(t *testing.T) {
	tk := rampart.NewManualTicker(math.MaxInt64 - 10)
	to, err := timeout.New(timeout.Config{Duration: math.MaxInt64, Mode: timeout.ModeSoft, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	_, h := to.Start(context.Background(), tk.Now())
	if h.Deadline() != math.MaxInt64 {
		t.Fatalf("deadline %d, want saturated", h.Deadline())
	}
	if err := to.Finish(h, math.MaxInt64-1, boom); err != boom {
		t.Fatalf("Finish before the deadline = %v, want the user's error unchanged", err)
	}
	if err := to.Finish(h, math.MaxInt64, nil); !errors.Is(err, timeout.ErrTimeout) {
		t.Fatalf("Finish at the deadline = %v", err)
	}
}

// The same in deadline mode on a shared watchdog clocked by the manual
// ticker: the deadline never fires before the clock reaches it, Finish
// returns the user's error unchanged, and the context's Deadline (converted
// to time.Time) is after now, not in the past.
func TestReview3ExtremeReadingsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewManualTicker(math.MaxInt64 - int64(time.Hour))
		wd := timeout.NewWatchdog(time.Millisecond, tk)
		defer wd.Close()
		to, err := timeout.New(timeout.Config{Duration: 2 * time.Hour, Watchdog: wd})
		if err != nil {
			t.Fatal(err)
		}
		defer to.Close()
		boom := errors.New("boom")
		c, h := to.Start(context.Background(), tk.Now())
		if h.Deadline() != math.MaxInt64 {
			t.Fatalf("deadline %d, want saturated", h.Deadline())
		}
		if d, ok := c.Deadline(); !ok || !d.After(time.Now()) {
			t.Fatalf("Deadline() = %v, %v: not in the future", d, ok)
		}
		time.Sleep(10 * time.Millisecond) // sweeps: nothing is due
		if c.Err() != nil {
			t.Fatalf("fired early: %v", c.Err())
		}
		tk.Advance(time.Hour - 1)
		time.Sleep(10 * time.Millisecond)
		if c.Err() != nil {
			t.Fatalf("fired 1 ns early: %v", c.Err())
		}
		if err := to.Finish(h, tk.Now(), boom); err != boom {
			t.Fatalf("Finish = %v, want the user's error", err)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("after Finish Err() = %v", c.Err())
		}
		// A call at the very end of the clock fires when it reaches MaxInt64.
		c, h = to.Start(context.Background(), tk.Now())
		tk.Set(math.MaxInt64)
		time.Sleep(2 * time.Millisecond)
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("at MaxInt64 Err() = %v", c.Err())
		}
		if err := to.Finish(h, tk.Now(), nil); !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("Finish = %v", err)
		}
	})
}

// Goexit in OnTimeout on the deadline path of Do: the watch and the
// context were settled before the listener ran, so nothing is left armed
// and the context stays done. A guard.
func TestReview3DoTimeoutListenerGoexitReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker()
		wd := timeout.NewWatchdog(time.Millisecond, tk)
		defer wd.Close()
		to, err := timeout.New(timeout.Config{Duration: 10 * time.Millisecond, Watchdog: wd,
			OnTimeout: func(time.Duration) { runtime.Goexit() }})
		if err != nil {
			t.Fatal(err)
		}
		var kept context.Context
		done := make(chan struct{})
		go func() {
			defer close(done)
			to.Do(context.Background(), func(c context.Context) error { kept = c; <-c.Done(); return nil })
			t.Error("Do returned after a Goexit in OnTimeout")
		}()
		<-done
		if n := wd.Stats().Armed; n != 0 {
			t.Fatalf("%d watches still armed", n)
		}
		if !errors.Is(kept.Err(), context.DeadlineExceeded) {
			t.Fatalf("kept context Err() = %v", kept.Err())
		}
		if to.Stats().Timeouts != 1 {
			t.Fatalf("stats %+v", to.Stats())
		}
	})
}

// Call in deadline mode: a user's error comes back unchanged with the value
// when in time; the parent's cancellation is the parent's error, not a
// timeout, and is not counted. A guard.
func TestReview3CallUserErrorAndParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to := r3New(t, timeout.Config{Duration: time.Second})
		defer to.Close()
		boom := errors.New("boom")
		v, err := timeout.Call(context.Background(), to, func(context.Context) (int, error) { return 7, boom })
		if v != 7 || err != boom {
			t.Fatalf("Call = %d, %v", v, err)
		}
		parent, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		v, err = timeout.Call(parent, to, func(c context.Context) (int, error) { <-c.Done(); return 3, c.Err() })
		if v != 3 || err != context.Canceled {
			t.Fatalf("Call after parent cancel = %d, %v", v, err)
		}
		if n := to.Stats().Timeouts; n != 0 {
			t.Fatalf("%d timeouts counted for a parent's cancellation", n)
		}
	})
}

// Concurrent DoAbandon calls against a hung dependency: never more than
// MaxAbandoned abandoned at once (seen from inside OnAbandon), onDone runs
// exactly once per call, and the counters agree at the end. A guard, for
// -race.
func TestReview3AbandonBoundUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxAb = 3
		var maxSeen atomic.Int64
		to := r3New(t, timeout.Config{Duration: 5 * time.Millisecond, MaxAbandoned: maxAb, Workers: 2,
			OnAbandon: func(n int64) {
				for {
					m := maxSeen.Load()
					if n <= m || maxSeen.CompareAndSwap(m, n) {
						break
					}
				}
			}})
		hang := make(chan struct{})
		var onDone, calls atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i%4) * time.Millisecond)
				calls.Add(1)
				err := to.DoAbandon(context.Background(), func(context.Context) error {
					if i%2 == 0 {
						<-hang
					}
					return nil
				}, func() { onDone.Add(1) })
				if err != nil && !errors.Is(err, timeout.ErrTimeout) && !errors.Is(err, timeout.ErrTooManyAbandoned) {
					t.Errorf("err %v", err)
				}
			}()
		}
		// The even calls that were not abandoned wait for their fn (strict
		// bound) until hang closes.
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if n := to.Stats().Abandoned; n > maxAb {
			t.Fatalf("%d abandoned > %d", n, maxAb)
		}
		close(hang)
		wg.Wait()
		synctest.Wait()
		s := to.Stats()
		if maxSeen.Load() > maxAb || s.Abandoned != 0 || onDone.Load() != calls.Load() {
			t.Fatalf("max abandoned seen %d, stats %+v, onDone %d of %d calls", maxSeen.Load(), s, onDone.Load(), calls.Load())
		}
		if s.Workers > 2 {
			t.Fatalf("%d pool workers > Workers", s.Workers)
		}
		to.Close()
	})
}
