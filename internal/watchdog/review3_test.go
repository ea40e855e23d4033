package watchdog_test

// Third review of internal/watchdog: reproductions of the bugs found
// (skipped, "BUG: ...") and guards of behaviour the earlier tests did not
// cover.

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// r3Count is a Target that counts its fires.
type r3Count struct{ n atomic.Int64 }

func (c *r3Count) Fire(uint64) { c.n.Add(1) }

// r3Goexit is a Target whose Fire calls runtime.Goexit.
type r3Goexit struct{}

func (r3Goexit) Fire(uint64) { runtime.Goexit() }

// A Fire that panics is recovered and the watchdog goes on; one that calls
// runtime.Goexit ends the watchdog goroutine while run stays runRunning
// (and its slot stays stFiring): no Schedule restarts it, so no deadline
// of this Watchdog fires again. Timeout contexts run user code in Fire
// (AfterFunc callbacks, a custom parent's stop func), and for Default() the
// whole process's deadlines would stop.
func TestReview3FireGoexitKeepsFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := watchdog.New(watchdog.Config{Clock: clk, Tick: time.Millisecond})
		defer w.Close()
		if _, ok := w.Schedule(clk.Now()+int64(time.Millisecond), r3Goexit{}, 0); !ok {
			t.Fatal("refused")
		}
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		var c r3Count
		if _, ok := w.Schedule(clk.Now()+int64(time.Millisecond), &c, 0); !ok {
			t.Fatal("refused")
		}
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		if c.n.Load() != 1 {
			t.Fatalf("a deadline after a Fire that called Goexit fired %d times, want 1 (running %v)", c.n.Load(), w.Running())
		}
	})
}

// CloseHandOff arms a runtime timer for deadline-now, computed without
// saturation: a far deadline (math.MaxInt64) against a clock that reads
// below zero wraps to a negative duration, clamped to 0, and the target
// fires at once instead of never.
func TestReview3CloseHandOffFarDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewManual(-10)
		w := watchdog.New(watchdog.Config{Clock: clk, Tick: time.Millisecond})
		var c r3Count
		if _, ok := w.Schedule(math.MaxInt64, &c, 0); !ok {
			t.Fatal("refused")
		}
		if err := w.CloseHandOff(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := c.n.Load(); n != 0 {
			t.Fatalf("a target due at math.MaxInt64 fired %d times an hour after CloseHandOff", n)
		}
	})
}

// Guards below.

// Deadlines at the ends of the int64 range on a manual watchdog: MinInt64
// fires on the next sweep, MaxInt64 only when the clock reaches it; a
// handle is cancellable once, never after its fire, and the zero Handle
// cancels nothing.
func TestReview3ExtremeDeadlinesManual(t *testing.T) {
	clk := ticker.NewManual(math.MaxInt64 - 5)
	w := watchdog.New(watchdog.Config{Clock: clk, Manual: true})
	defer w.Close()
	var early, late, gone r3Count
	he, _ := w.Schedule(math.MinInt64, &early, 0)
	hl, _ := w.Schedule(math.MaxInt64, &late, 0)
	hg, _ := w.Schedule(math.MaxInt64, &gone, 0)
	if !w.Cancel(hg) || w.Cancel(hg) || w.Cancel(watchdog.Handle{}) {
		t.Fatal("Cancel: once true, then false; zero handle false")
	}
	if n := w.Sweep(); n != 1 || early.n.Load() != 1 {
		t.Fatalf("first sweep fired %d", n)
	}
	if w.Cancel(he) {
		t.Fatal("Cancel after the fire returned true")
	}
	clk.Set(math.MaxInt64 - 1)
	if n := w.Sweep(); n != 0 {
		t.Fatalf("fired %d before MaxInt64", n)
	}
	clk.Set(math.MaxInt64)
	if n := w.Sweep(); n != 1 || late.n.Load() != 1 || gone.n.Load() != 0 {
		t.Fatalf("fired %d at MaxInt64 (late %d, cancelled %d)", n, late.n.Load(), gone.n.Load())
	}
	if w.Cancel(hl) {
		t.Fatal("Cancel after the fire returned true")
	}
	if st := w.Stats(); st.Armed != 0 || st.Fired != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// A Close racing with Schedules from many goroutines: every Schedule that
// reported true either fires (hand-off timers) or is cancelled by its
// owner; none fires twice, none is lost. Run under -race.
func TestReview3CloseHandOffRacesSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := watchdog.New(watchdog.Config{Clock: clk, Tick: time.Millisecond})
		const G, N = 8, 50
		targets := make([]r3Count, G*N)
		var accepted, cancelled atomic.Int64
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				for i := range N {
					c := &targets[g*N+i]
					h, ok := w.Schedule(clk.Now()+int64(time.Duration(i%5)*time.Millisecond), c, 0)
					if !ok {
						continue
					}
					accepted.Add(1)
					if i%3 == 0 && w.Cancel(h) {
						cancelled.Add(1)
						c.n.Add(-1000) // marks a cancelled target; a later fire would show
					}
					if i == N/2 && g == 0 {
						w.CloseHandOff()
					}
					runtime.Gosched()
				}
			})
		}
		wg.Wait()
		w.CloseHandOff()
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		var fired int64
		for i := range targets {
			switch n := targets[i].n.Load(); n {
			case 0, -1000:
			case 1:
				fired++
			default:
				t.Fatalf("target %d: %d", i, n)
			}
		}
		if fired+cancelled.Load() != accepted.Load() {
			t.Fatalf("accepted %d = fired %d + cancelled %d?", accepted.Load(), fired, cancelled.Load())
		}
	})
}

// StopIdle refuses while something is armed, and the goroutine restarts on
// the next Schedule after an idle exit; nothing is lost across the
// restart. A guard.
func TestReview3IdleExitRestartKeepsDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := watchdog.New(watchdog.Config{Clock: clk, Tick: time.Millisecond, IdleTicks: 2})
		defer w.Close()
		for round := range 5 {
			var c r3Count
			if _, ok := w.Schedule(clk.Now()+int64(3*time.Millisecond), &c, 0); !ok {
				t.Fatal("refused")
			}
			if w.StopIdle() {
				t.Fatal("StopIdle stopped with a target armed")
			}
			time.Sleep(10 * time.Millisecond) // fires, then idles out
			synctest.Wait()
			if c.n.Load() != 1 || w.Running() {
				t.Fatalf("round %d: fired %d, running %v", round, c.n.Load(), w.Running())
			}
		}
	})
}
