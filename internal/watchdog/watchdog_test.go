package watchdog

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart/internal/bubble"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/internal/ticker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counter is a Target that counts fires per arg.
type counter struct {
	n    atomic.Int64
	args sync.Map
	at   atomic.Int64
	clk  Clock
}

func (c *counter) Fire(arg uint64) {
	c.n.Add(1)
	if c.clk != nil {
		c.at.Store(c.clk.Now())
	}
	if v, loaded := c.args.LoadOrStore(arg, new(atomic.Int64)); loaded {
		v.(*atomic.Int64).Add(1)
	}
}

func TestManualScheduleCancel(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	h1, ok := w.Schedule(100, &c, 1)
	if !ok || !h1.Valid() {
		t.Fatal("schedule failed")
	}
	h2, _ := w.Schedule(200, &c, 2)
	h3, _ := w.Schedule(300, &c, 3)
	if n := w.Sweep(); n != 0 {
		t.Fatalf("fired %d before any deadline", n)
	}
	clk.Set(99)
	if n := w.Sweep(); n != 0 {
		t.Fatalf("fired %d one ns early", n)
	}
	clk.Set(100)
	if n := w.Sweep(); n != 1 || c.n.Load() != 1 {
		t.Fatalf("fired %d (total %d) at the deadline, want 1", n, c.n.Load())
	}
	if w.Cancel(h1) {
		t.Fatal("Cancel of a fired handle reported true")
	}
	if !w.Cancel(h2) {
		t.Fatal("Cancel of an armed handle reported false")
	}
	if w.Cancel(h2) {
		t.Fatal("second Cancel reported true")
	}
	clk.Set(1000)
	if n := w.Sweep(); n != 1 {
		t.Fatalf("fired %d, want 1 (h3 only)", n)
	}
	if w.Cancel(h3) || w.Cancel(Handle{}) {
		t.Fatal("Cancel after fire / of zero handle reported true")
	}
	if st := w.Stats(); st.Armed != 0 || st.Fired != 2 || st.Slots != SegmentSize {
		t.Fatalf("stats %+v", st)
	}
}

// TestManualExtremeDeadlines: deadlines at the ends of the int64 range on
// a manual watchdog: MinInt64 fires on the next sweep, MaxInt64 only when
// the clock reaches it; a handle is cancellable once, never after its
// fire, and the zero Handle cancels nothing.
func TestManualExtremeDeadlines(t *testing.T) {
	clk := ticker.NewManual(math.MaxInt64 - 5)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var early, late, gone counter
	he, _ := w.Schedule(math.MinInt64, &early, 0)
	hl, _ := w.Schedule(math.MaxInt64, &late, 0)
	hg, _ := w.Schedule(math.MaxInt64, &gone, 0)
	if !w.Cancel(hg) || w.Cancel(hg) || w.Cancel(Handle{}) {
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

func TestStaleHandleDoesNotCancelReuse(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	h1, _ := w.Schedule(10, &c, 1)
	if !w.Cancel(h1) {
		t.Fatal("cancel")
	}
	h2, _ := w.Schedule(10, &c, 2) // LIFO: reuses h1's slot with a new generation
	if h2.idx != h1.idx || h2.gen == h1.gen {
		t.Fatalf("expected slot reuse with a new generation: %v %v", h1, h2)
	}
	if w.Cancel(h1) {
		t.Fatal("stale handle cancelled a reused slot")
	}
	clk.Set(10)
	if w.Sweep() != 1 {
		t.Fatal("reused slot did not fire")
	}
}

func TestGrowsBeyondOneSegment(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	const n = 3*SegmentSize + 7
	hs := make([]Handle, n)
	seen := map[uint32]bool{}
	for i := range hs {
		h, ok := w.Schedule(int64(i), &c, uint64(i))
		if !ok || seen[h.idx] {
			t.Fatalf("schedule %d: ok=%v dup=%v", i, ok, seen[h.idx])
		}
		seen[h.idx] = true
		hs[i] = h
	}
	if st := w.Stats(); st.Slots != 4*SegmentSize || st.Armed != n {
		t.Fatalf("stats %+v", st)
	}
	// Cancel the odd ones, fire the even ones.
	for i := 1; i < n; i += 2 {
		if !w.Cancel(hs[i]) {
			t.Fatalf("cancel %d", i)
		}
	}
	clk.Set(n)
	if f := w.Sweep(); f != (n+1)/2 {
		t.Fatalf("fired %d, want %d", f, (n+1)/2)
	}
	if st := w.Stats(); st.Armed != 0 {
		t.Fatalf("armed %d after sweep", st.Armed)
	}
}

func TestClosedRefusesSchedule(t *testing.T) {
	w := New(Config{Manual: true})
	w.Close()
	w.Close() // idempotent
	var c counter
	if _, ok := w.Schedule(0, &c, 0); ok {
		t.Fatal("closed watchdog accepted a schedule")
	}
	if w.Stats().Armed != 0 {
		t.Fatal("refused schedule left a slot armed")
	}
}

// panicky panics when fired.
type panicky struct{}

func (panicky) Fire(uint64) { panic("boom") }

func TestFirePanicRecovered(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	w.Schedule(0, panicky{}, 0)
	w.Schedule(0, &c, 0)
	if n := w.Sweep(); n != 2 {
		t.Fatalf("fired %d", n)
	}
	if st := w.Stats(); st.FirePanics != 1 || st.Armed != 0 || c.n.Load() != 1 {
		t.Fatalf("stats %+v fires %d", st, c.n.Load())
	}
}

// goexiter is a Target whose Fire calls runtime.Goexit.
type goexiter struct{}

func (goexiter) Fire(uint64) { testkit.Goexit() }

// TestFireGoexitKeepsFiring: a Fire that calls runtime.Goexit ends the
// watchdog goroutine, and the watchdog goes on: the next deadline still
// fires once. Timeout contexts run user code in Fire (AfterFunc callbacks,
// a custom parent's stop func), and for Default() every deadline of the
// process depends on it.
func TestFireGoexitKeepsFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := New(Config{Clock: clk, Tick: time.Millisecond})
		defer w.Close()
		if _, ok := w.Schedule(clk.Now()+int64(time.Millisecond), goexiter{}, 0); !ok {
			t.Fatal("refused")
		}
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		var c counter
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

// TestPrecisionSynctest checks that the goroutine fires a target no earlier
// than its deadline and no later than one tick after it, in fake time.
func TestPrecisionSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		const tick = 5 * time.Millisecond
		w := New(Config{Clock: clk, Tick: tick})
		defer w.Close()
		for _, d := range []time.Duration{0, time.Millisecond, 7 * time.Millisecond, 50 * time.Millisecond, 123456 * time.Microsecond} {
			c := &counter{clk: clk}
			deadline := clk.Now() + int64(d)
			if _, ok := w.Schedule(deadline, c, 0); !ok {
				t.Fatal("schedule")
			}
			time.Sleep(d + tick)
			synctest.Wait()
			if c.n.Load() != 1 {
				t.Fatalf("d=%v: fired %d times", d, c.n.Load())
			}
			if at := c.at.Load(); at < deadline || at > deadline+int64(tick) {
				t.Fatalf("d=%v: fired at %d, deadline %d, tick %d", d, at, deadline, tick)
			}
		}
	})
}

// TestIdleExitAndRestart: the goroutine exits when idle and the next
// Schedule restarts it, round after round; StopIdle refuses while a target
// is armed, and no deadline is lost across the restarts: each fires within
// one tick of its deadline.
func TestIdleExitAndRestart(t *testing.T) {
	for _, tc := range []struct {
		idleTicks int
		idleBy    time.Duration // after the Schedule, the goroutine has exited
	}{{2, 10 * time.Millisecond}, {10, 50 * time.Millisecond}} {
		t.Run(fmt.Sprintf("IdleTicks=%d", tc.idleTicks), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				clk := ticker.NewNano()
				w := New(Config{Clock: clk, Tick: time.Millisecond, IdleTicks: tc.idleTicks})
				defer w.Close()
				base := bubble.Goroutines()
				c := &counter{}
				for round := range 5 {
					if _, ok := w.Schedule(clk.Now()+int64(time.Millisecond), c, 0); !ok {
						t.Fatal("refused")
					}
					synctest.Wait() // the goroutine is counted once it has started
					if !w.Running() || bubble.Goroutines() != base+1 {
						t.Fatalf("round %d: goroutine not started by Schedule (running %v)", round, w.Running())
					}
					if w.StopIdle() {
						t.Fatalf("round %d: StopIdle stopped with a target armed", round)
					}
					time.Sleep(2 * time.Millisecond) // the deadline and one tick
					synctest.Wait()
					if c.n.Load() != int64(round+1) {
						t.Fatalf("round %d: fired %d in all, want %d", round, c.n.Load(), round+1)
					}
					time.Sleep(tc.idleBy - 2*time.Millisecond)
					synctest.Wait()
					if w.Running() || bubble.Goroutines() != base {
						t.Fatalf("round %d: goroutine still running after idling (running=%v)", round, w.Running())
					}
				}
			})
		})
	}
}

// TestCloseStopsGoroutine: targets armed at Close never fire.
func TestCloseStopsGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := New(Config{Clock: clk})
		c := &counter{}
		w.Schedule(clk.Now()+int64(time.Hour), c, 0)
		w.Close()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if c.n.Load() != 0 {
			t.Fatal("fired after Close")
		}
	})
}

// TestStressFireOrCancelOnce: under contention each Schedule ends in exactly
// one of "Cancel returned true" and "fired once".
func TestStressFireOrCancelOnce(t *testing.T) {
	clk := ticker.NewNano()
	w := New(Config{Clock: clk, Tick: 50 * time.Microsecond})
	defer w.Close()
	const workers, per = 8, 2000
	var fires [workers]counter
	var cancelled [workers]atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				// Deadlines around now so that fire and cancel race.
				h, ok := w.Schedule(clk.Now()+int64(i%5)*20_000, &fires[g], uint64(i))
				if !ok {
					t.Error("schedule refused")
					return
				}
				if i%3 == 0 {
					runtime.Gosched()
				}
				if w.Cancel(h) {
					cancelled[g].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Let every remaining armed target fire.
	for w.Stats().Armed > 0 {
		w.Sweep()
	}
	for g := range workers {
		if got := fires[g].n.Load() + cancelled[g].Load(); got != per {
			t.Fatalf("worker %d: fired %d + cancelled %d != %d", g, fires[g].n.Load(), cancelled[g].Load(), per)
		}
		fires[g].args.Range(func(k, v any) bool {
			if n := v.(*atomic.Int64).Load(); n != 0 {
				t.Errorf("arg %v fired %d extra times", k, n)
			}
			return true
		})
	}
}

func TestAllocsScheduleCancel(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	h, _ := w.Schedule(1, &c, 0) // grow the table first
	w.Cancel(h)
	testkit.WantAllocs(t, "Schedule+Cancel", 0, func() {
		h, _ := w.Schedule(1, &c, 0)
		w.Cancel(h)
	})
	var nop nopTarget
	testkit.WantAllocs(t, "Schedule+fire", 0, func() {
		w.Schedule(0, nop, 0)
		w.Sweep()
	})
}

type nopTarget struct{}

func (nopTarget) Fire(uint64) {}

func BenchmarkScheduleCancel(b *testing.B) {
	w := New(Config{})
	defer w.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := new(counter) // allocated by this goroutine's P, like a per-call context
		for pb.Next() {
			h, _ := w.Schedule(1<<62, c, 0)
			w.Cancel(h)
		}
	})
}

// TestStopIdle: StopIdle refuses while something is armed, stops an idle
// goroutine, and a later Schedule restarts it.
func TestStopIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := New(Config{Clock: clk})
		defer w.Close()
		if !w.StopIdle() {
			t.Fatal("StopIdle on a never-started watchdog")
		}
		c := &counter{}
		h, _ := w.Schedule(clk.Now()+int64(time.Second), c, 0)
		if w.StopIdle() || !w.Running() {
			t.Fatal("StopIdle stopped a watchdog with an armed target")
		}
		w.Cancel(h)
		synctest.Wait() // the goroutine is counted once it has started
		base := bubble.Goroutines()
		if !w.StopIdle() || w.Running() || bubble.Goroutines() != base-1 {
			t.Fatal("StopIdle did not stop an idle watchdog")
		}
		w.Schedule(clk.Now()+int64(time.Millisecond), c, 0)
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if c.n.Load() != 1 {
			t.Fatal("not fired after restart")
		}
	})
}

// FuzzOps drives a manual watchdog with a byte-coded sequence of Schedule,
// Cancel, Advance and Sweep against a model: every schedule ends exactly
// once (cancelled or fired), never fires early, and fires by the first
// sweep at or after its deadline.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 5, 0, 9, 1, 0, 2, 7, 3, 2, 20, 3})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 3, 1, 1, 1, 2, 1, 3})
	f.Add([]byte{0, 255, 2, 255, 3, 0, 0, 1, 0, 2, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clk := ticker.NewManual(0)
		w := New(Config{Clock: clk, Manual: true})
		defer w.Close()
		type entry struct {
			h        Handle
			deadline int64
			ended    bool
		}
		var es []*entry
		fired := map[uint64]int{}
		var rec recorder
		rec.fired = fired
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, int64(ops[i+1])
			switch op {
			case 0: // schedule at now+arg
				e := &entry{deadline: clk.Now() + arg}
				h, ok := w.Schedule(e.deadline, &rec, uint64(len(es)))
				if !ok {
					t.Fatal("refused")
				}
				e.h = h
				es = append(es, e)
			case 1: // cancel entry arg
				if len(es) == 0 {
					continue
				}
				k := int(arg) % len(es)
				e := es[k]
				got := w.Cancel(e.h)
				if got == e.ended {
					t.Fatalf("cancel of entry %d returned %v, ended %v", k, got, e.ended)
				}
				e.ended = true
			case 2: // advance
				clk.Advance(time.Duration(arg))
			case 3: // sweep
				w.Sweep()
				now := clk.Now()
				for k, e := range es {
					n := fired[uint64(k)]
					if n > 1 {
						t.Fatalf("entry %d fired %d times", k, n)
					}
					if n == 1 && !e.ended {
						if e.deadline > now {
							t.Fatalf("entry %d fired early", k)
						}
						e.ended = true
					}
					if !e.ended && e.deadline <= now {
						t.Fatalf("entry %d not fired at its deadline", k)
					}
				}
			}
		}
		armed := 0
		for _, e := range es {
			if !e.ended {
				armed++
			}
		}
		if st := w.Stats(); st.Armed != armed {
			t.Fatalf("armed %d, model %d", st.Armed, armed)
		}
	})
}

type recorder struct{ fired map[uint64]int }

func (r *recorder) Fire(arg uint64) { r.fired[arg]++ }

// freeCount walks every shard's free stack and counts its cached slot
// (test only: not concurrent-safe).
func (w *Watchdog) freeCount() int {
	n := 0
	for sh := range w.shards {
		if c := w.shards[sh].cache.Load(); c != 0 {
			if (c-1)%nShards != uint32(sh) {
				panic("cached slot on a foreign shard")
			}
			n++
		}
		for top := uint32(w.shards[sh].head.Load()); top != 0; top = w.slotAt(top - 1).next.Load() {
			if (top-1)%nShards != uint32(sh) {
				panic("slot on a foreign shard")
			}
			n++
		}
	}
	return n
}

// TestShardsAndStealing schedules targets spread over many addresses (so
// over every shard) and from one address (one shard, which must steal and
// then grow), and checks that every slot ends on its own shard's stack.
func TestShardsAndStealing(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var hs []Handle
	targets := make([]*counter, 3000)
	for i := range targets {
		targets[i] = new(counter)
		_ = make([]byte, 4096) // spread the addresses over spans
		h, ok := w.Schedule(int64(i%7), targets[i], uint64(i))
		require.True(t, ok)
		hs = append(hs, h)
	}
	var one counter
	for i := range 600 {
		h, ok := w.Schedule(1000, &one, uint64(i))
		require.True(t, ok)
		hs = append(hs, h)
	}
	st := w.Stats()
	require.Equal(t, 3600, st.Armed)
	require.Equal(t, st.Slots-3600, w.freeCount())
	for i, h := range hs {
		if i%2 == 0 {
			w.Cancel(h)
		}
	}
	clk.Set(1000)
	require.Equal(t, 1800, w.Sweep())
	require.Equal(t, 0, w.Stats().Armed)
	require.Equal(t, w.Stats().Slots, w.freeCount())
}

// CloseHandOff: a target armed at Close fires at its deadline on a runtime
// timer; one cancelled after Close reports true and never fires.
func TestCloseHandOffKeepsArmedTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := New(Config{Clock: clk})
		fired, cancelled := &counter{clk: clk}, &counter{}
		start := clk.Now()
		_, ok1 := w.Schedule(start+int64(time.Hour), fired, 0)
		h2, ok2 := w.Schedule(start+int64(time.Hour), cancelled, 0)
		require.True(t, ok1 && ok2)
		require.NoError(t, w.CloseHandOff())
		require.NoError(t, w.CloseHandOff()) // idempotent
		require.True(t, w.Cancel(h2))
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		require.EqualValues(t, 1, fired.n.Load())
		require.Equal(t, start+int64(time.Hour), fired.at.Load())
		require.Zero(t, cancelled.n.Load())
		_, ok := w.Schedule(clk.Now(), fired, 0)
		require.False(t, ok)
	})
}

// TestCloseHandOffFarDeadlineNeverFires: CloseHandOff arms a runtime timer
// for deadline-now, saturated: a far deadline (math.MaxInt64) against a
// clock that reads below zero stays far and never fires, instead of
// wrapping to a negative duration and firing at once.
func TestCloseHandOffFarDeadlineNeverFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewManual(-10)
		w := New(Config{Clock: clk, Tick: time.Millisecond})
		var c counter
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

// TestCloseHandOffRacesSchedule: a CloseHandOff racing with Schedules from
// many goroutines: every Schedule that reported true either fires (on a
// hand-off timer or the goroutine) or is cancelled by its owner; none fires
// twice, none is lost. Run under -race.
func TestCloseHandOffRacesSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := ticker.NewNano()
		w := New(Config{Clock: clk, Tick: time.Millisecond})
		const G, N = 8, 50
		targets := make([]counter, G*N)
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

// BenchmarkScheduleCancelSeq is one goroutine arming and disarming, with a
// fresh target per call like a timeout's context.
func BenchmarkScheduleCancelSeq(b *testing.B) {
	w := New(Config{})
	defer w.Close()
	b.ReportAllocs()
	ts := make([]counter, 64)
	i := 0
	for b.Loop() {
		h, _ := w.Schedule(1<<62, &ts[i%len(ts)], 0)
		w.Cancel(h)
		i++
	}
}

// TestCacheReusesSlot: a goroutine that arms and disarms in turn reuses one
// slot through its shard's cache, with a new generation each time; a slot
// that fires goes back on the stack, not in the cache.
func TestCacheReusesSlot(t *testing.T) {
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	var c counter
	h0, _ := w.Schedule(10, &c, 0)
	require.True(t, w.Cancel(h0))
	prev := h0
	for i := range 100 {
		h, ok := w.Schedule(10, &c, uint64(i))
		require.True(t, ok)
		require.Equal(t, h0.idx, h.idx, "the cached slot")
		require.NotEqual(t, prev.gen, h.gen)
		require.False(t, w.Cancel(prev), "a stale handle")
		require.True(t, w.Cancel(h))
		require.False(t, w.Cancel(h), "twice")
		prev = h
	}
	require.Equal(t, w.Stats().Slots, w.freeCount())
	h, _ := w.Schedule(10, &c, 0)
	clk.Set(10)
	require.Equal(t, 1, w.Sweep())
	require.False(t, w.Cancel(h))
	require.Equal(t, w.Stats().Slots, w.freeCount())
	require.Zero(t, w.shards[(h.idx-1)%nShards].cache.Load(), "a fired slot is pushed, not cached")
}

// TestFullTakesCachedSlots: the table reports full only when every slot is
// armed, the last ones taken from other shards' caches.
func TestFullTakesCachedSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("arms every slot of a full table")
	}
	clk := ticker.NewManual(0)
	w := New(Config{Clock: clk, Manual: true})
	defer w.Close()
	a := new(counter)
	var b *counter
	for b == nil || shardOf(b) == shardOf(a) {
		b = new(counter)
		_ = make([]byte, 8192)
	}
	h, _ := w.Schedule(1, a, 0)
	require.True(t, w.Cancel(h)) // parked in a's shard cache
	n := 0
	for {
		if _, ok := w.Schedule(1, b, 0); !ok {
			break
		}
		n++
	}
	require.Equal(t, MaxSegments*SegmentSize, n)
	require.Equal(t, uint64(1), w.Stats().Full)
	require.Equal(t, 0, w.freeCount())
}
