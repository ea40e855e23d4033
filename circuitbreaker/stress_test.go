package circuitbreaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// TestStressHalfOpenExactlyK: 1000 goroutines arrive together at a breaker
// whose open period is over; exactly K become probes.
func TestStressHalfOpenExactlyK(t *testing.T) {
	const K, G = 7, 1000
	for round := range 3 {
		tk := rampart.NewManualTicker(0)
		b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: K})
		require.NoError(t, err)
		if round == 2 {
			b.TransitionTo(HalfOpen) // arrive in half-open rather than at the end of open
		} else {
			p, _ := b.AcquireAt(tk.Now())
			b.ReleaseAt(p, tk.Now(), b.Classify(errBoom))
			tk.Advance(time.Second)
		}
		var admitted, rejected atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range G {
			wg.Go(func() {
				<-start
				if _, err := b.AcquireAt(tk.Now()); err == nil {
					admitted.Add(1)
				} else {
					require.ErrorIs(t, err, ErrOpen)
					rejected.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, int64(K), admitted.Load(), "round %d", round)
		require.Equal(t, int64(G-K), rejected.Load())
		require.Equal(t, uint64(G-K), b.Stats().Rejected)
		require.Equal(t, HalfOpen, b.State())
	}
}

// TestStressMixed runs goroutines with random outcomes and durations while
// the clock moves and transitions happen (automatic and manual), and checks
// afterwards: probes in flight never exceeded the limit in any half-open
// period, calls + rejections add up, and the window's counters equal the
// histogram of its slots.
func TestStressMixed(t *testing.T) {
	const G, N = 8, 3000
	for _, mode := range []Mode{CountWindow, TimeWindow, Consecutive} {
		tk := rampart.NewManualTicker(0)
		b, err := New(Config{
			Ticker: tk, Mode: mode, WindowSize: 16, MinimumCalls: 8, TimeWindow: 100 * time.Millisecond,
			ConsecutiveFailures: 4, SlowCallDuration: 3 * time.Millisecond, OpenDuration: 5 * time.Millisecond,
			MaxOpenDuration: 20 * time.Millisecond, OpenJitter: 0.3,
			HalfOpenProbes: 6, HalfOpenMaxConcurrent: 3, HalfOpenSuccesses: 4, MaxHalfOpenDuration: 30 * time.Millisecond,
		})
		require.NoError(t, err)
		var mu sync.Mutex
		inflight := map[uint64]int{} // half-open generation → probes in flight
		var admitted, rejected, overLimit atomic.Int64
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for i := range N {
					if r.IntN(50) == 0 {
						tk.Advance(time.Duration(r.IntN(3)) * time.Millisecond)
					}
					if g == 0 && i%500 == 499 {
						b.TransitionTo(State(r.IntN(6)))
						if r.IntN(2) == 0 {
							b.Reset()
						}
					}
					p, err := b.AcquireAt(tk.Now())
					if err != nil {
						rejected.Add(1)
						continue
					}
					admitted.Add(1)
					probe := State(p.word&stateMask) == HalfOpen
					gen := p.word >> genShift
					if probe {
						mu.Lock()
						inflight[gen]++
						if inflight[gen] > 3 {
							overLimit.Add(1)
						}
						mu.Unlock()
					}
					var res rampart.Result
					switch x := r.IntN(10); {
					case x < 2:
						res = rampart.Failure
					case x < 3:
						res = rampart.Ignored
					}
					now := tk.Now() + int64(r.IntN(5))*int64(time.Millisecond)
					if probe {
						mu.Lock()
						inflight[gen]--
						mu.Unlock()
					}
					b.ReleaseAt(p, now, res)
				}
			})
		}
		wg.Wait()
		require.Zero(t, overLimit.Load(), "%v: more probes in flight than the limit", mode)
		require.Equal(t, int64(G*N), admitted.Load()+rejected.Load())
		s := b.Stats()
		require.Equal(t, uint64(rejected.Load()), s.Rejected, "%v", mode)
		require.Greater(t, s.Transitions, uint64(3), "%v: the stress should move the state", mode)
		if mode == CountWindow {
			var total, fails, slows int64
			for i := range uint64(b.count.n) {
				c := b.count.slot(i)
				total += int64(c & codeFilled)
				fails += int64(c & codeFailBit >> 1)
				slows += int64(c & codeSlowBit >> 2)
			}
			require.Equal(t, total, b.hot.total.Load())
			require.Equal(t, fails, b.hot.fails.Load())
			require.Equal(t, slows, b.hot.slows.Load())
		}
		t.Logf("%v: %+v", mode, s)
	}
}

// TestStressStaleNeverCounted: results of permits from the closed era,
// recorded concurrently with the probes, never decide the half-open period.
func TestStressStaleNeverCounted(t *testing.T) {
	const stale, K = 200, 5
	for range 5 {
		tk := rampart.NewManualTicker(0)
		b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: K})
		require.NoError(t, err)
		old := make([]Permit, stale)
		for i := range old {
			old[i], _ = b.AcquireAt(tk.Now())
		}
		p, _ := b.AcquireAt(tk.Now())
		b.ReleaseAt(p, tk.Now(), b.Classify(errBoom)) // trip
		tk.Advance(time.Second)
		probes := make([]Permit, K)
		for i := range probes {
			probes[i], err = b.AcquireAt(tk.Now())
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		for i := range old {
			wg.Go(func() { b.ReleaseAt(old[i], tk.Now(), b.Classify(errBoom)) })
		}
		for i := range probes {
			wg.Go(func() { b.ReleaseAt(probes[i], tk.Now(), b.Classify(nil)) })
		}
		wg.Wait()
		require.Equal(t, Closed, b.State())
		require.Equal(t, uint64(stale), b.Stats().StaleResults)
		require.Zero(t, b.Stats().ConsecutiveFailures)
	}
}

// TestStressProbeAccounting: goroutines acquire and record with
// random outcomes while the clock moves past MaxHalfOpenDuration (restarting
// stuck half-open periods) and another goroutine calls TransitionTo and
// Reset. Per half-open generation, the probes running at once never exceed
// HalfOpenMaxConcurrent and the probes admitted never exceed
// HalfOpenProbes (a probe recorded as Ignored gives its slot back, so it
// leaves the count before it is recorded, as it leaves running); afterwards,
// with nothing running, a half-open breaker counts no probe in flight (none
// leaked) and every result is accounted.
func TestStressProbeAccounting(t *testing.T) {
	const K, M, G, N = 4, 2, 8, 2000
	tk := rampart.NewManualTicker(0)
	b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1,
		OpenDuration: 10 * time.Nanosecond, HalfOpenProbes: K, HalfOpenMaxConcurrent: M,
		HalfOpenSuccesses: 2, MaxHalfOpenDuration: 50 * time.Nanosecond})
	require.NoError(t, err)
	var mu sync.Mutex
	running := map[uint64]int{} // half-open generation -> probes running now
	admitted := map[uint64]int{}
	var violations atomic.Int64
	var acquired, recorded atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 50 {
			case 0:
				b.Reset()
			case 17:
				b.TransitionTo(HalfOpen)
			case 33:
				b.TransitionTo(Open)
			}
			tk.Advance(time.Nanosecond)
		}
	})
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				p, err := b.AcquireAt(tk.Now())
				if err != nil {
					continue
				}
				acquired.Add(1)
				gen := p.word >> genShift
				half := p.word&stateMask == uint64(HalfOpen)
				if half {
					mu.Lock()
					running[gen]++
					admitted[gen]++
					if running[gen] > M || admitted[gen] > K {
						violations.Add(1)
					}
					mu.Unlock()
				}
				var rerr error
				if (g+i)%3 == 0 {
					rerr = errBoom
				}
				ignored := (g*31+i)%97 == 0
				if half {
					mu.Lock()
					running[gen]--
					if ignored {
						// Before the record: once recorded, the slot can
						// be taken again at once.
						admitted[gen]--
					}
					mu.Unlock()
				}
				if ignored {
					b.ReleaseAt(p, tk.Now(), rampart.Ignored)
				} else {
					b.ReleaseAt(p, tk.Now(), b.Classify(rerr))
				}
				recorded.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	require.Zero(t, violations.Load(), "probe limits exceeded")
	require.Equal(t, acquired.Load(), recorded.Load())
	st := b.Stats()
	if st.State == HalfOpen {
		require.Zero(t, st.HalfOpenInFlight, "probe leaked")
		require.LessOrEqual(t, st.HalfOpenAdmitted, K)
	}
	// A fresh half-open period admits exactly M at once and K in all.
	b.TransitionTo(Closed)
	require.True(t, b.TransitionTo(HalfOpen))
	var ps []Permit
	for range M + 1 {
		if p, err := b.AcquireAt(tk.Now()); err == nil {
			ps = append(ps, p)
		} else {
			require.ErrorIs(t, err, ErrHalfOpenFull)
		}
	}
	require.Len(t, ps, M)
	require.Equal(t, M, b.Stats().HalfOpenInFlight)
}

// TestStressTimeWindowRecyclingConsistent: records racing across slice
// boundaries in MetricsOnly (no trips) never make the window count more
// calls than were recorded (plus those in flight), nor a negative count,
// nor more failures than calls (see TestWindowSnapshotsStayPossible for the
// interleavings that could, played one by one); a bucket recycled while
// being read is never counted under the new slice.
func TestStressTimeWindowRecyclingConsistent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	b, err := New(Config{Ticker: tk, Mode: TimeWindow, TimeWindow: 40 * time.Nanosecond, Buckets: 4})
	require.NoError(t, err)
	require.True(t, b.TransitionTo(MetricsOnly))
	const G, N = 6, 3000
	var total atomic.Int64
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				p, err := b.AcquireAt(tk.Now())
				require.NoError(t, err)
				var rerr error
				if i%2 == 0 {
					rerr = errBoom
				}
				b.ReleaseAt(p, tk.Now(), b.Classify(rerr))
				total.Add(1)
				if g == 0 && i%10 == 0 {
					tk.Advance(3 * time.Nanosecond)
				}
				st := b.Stats()
				if st.WindowCalls < 0 || st.WindowFailures > st.WindowCalls || st.WindowCalls > total.Load()+G { // G records may be between ReleaseAt and total.Add
					t.Errorf("window inconsistent: %+v (recorded %d)", st, total.Load())
					return
				}
			}
		})
	}
	wg.Wait()
	tk.Advance(time.Second)
	st := b.Stats()
	require.Zero(t, st.WindowCalls, "the window emptied once the clock moved past it")
}

// TestTimeWindowSnapshotNeverCountsAnotherSlice: while one goroutine keeps
// recycling buckets, a snapshot must never count calls outside its window
// (a bucket read under a new tick but still holding the old slice's
// counts, or counts read after the bucket was recycled). Failures are
// recorded only in half of the slices, so a foreign slice shows up as too
// many failures.
func TestTimeWindowSnapshotNeverCountsAnotherSlice(t *testing.T) {
	w := newTimeWindow(4, 4) // 4 buckets of 1 ns
	const perTick = 3
	var tick atomic.Int64
	var done atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			tk := tick.Load()
			limit := int64(0)
			for x := max(tk-3, 0); x <= tk; x++ {
				if x%8 < 4 {
					limit += perTick
				}
			}
			if _, f, _ := w.snapshot(tk); f > limit {
				bad.Add(1)
			}
		}
	}()
	for tk := int64(0); tk < 300_000; tk++ {
		tick.Store(tk)
		for range perTick {
			w.add(tk, tk%8 < 4, false)
		}
		if tk%1024 == 0 {
			runtime.Gosched()
		}
	}
	done.Store(true)
	wg.Wait()
	require.Zero(t, bad.Load(), "snapshots that counted failures from outside their window")
}

// TestStressRejectedCountsExactly: rejections from many goroutines at once,
// through Do, Call, Acquire and AcquireAt, in both layouts and with more Ps
// than the breaker has counters for (GOMAXPROCS raised after the first
// trip, which allocates them; at 1 P it allocates none, and every P but P 0
// counts on the shared word), are all counted: Stats().Rejected, read while
// they land too, ends at their number.
func TestStressRejectedCountsExactly(t *testing.T) {
	const goroutines, each = 8, 2000
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name    string
		compact bool
		nano    bool
		procsAt int // GOMAXPROCS at New and the first trip; raised to 4 after
	}{{"default", false, false, 1}, {"default/nano", false, true, 2}, {"compact", true, false, 2}, {"default/more Ps", false, false, 2}} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(c.procsAt)
			var tk rampart.Ticker = rampart.NewManualTicker(0)
			if c.nano {
				tk = rampart.NewNanoTicker()
			}
			b, err := New(Config{Ticker: tk, Compact: c.compact, OpenDuration: time.Hour})
			require.NoError(t, err)
			require.True(t, b.TransitionTo(Open))
			runtime.GOMAXPROCS(max(procs, 4))
			defer runtime.GOMAXPROCS(procs)
			var wg sync.WaitGroup
			var done atomic.Bool
			var reader sync.WaitGroup
			reader.Go(func() { // the sum, read while rejections land, never exceeds them
				for !done.Load() {
					if n := b.Stats().Rejected; n > goroutines*each {
						t.Errorf("Rejected %d > %d", n, goroutines*each)
						return
					}
				}
			})
			ctx := context.Background()
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						var err error
						switch (g + i) % 4 {
						case 0:
							err = b.Do(ctx, func(context.Context) error { return nil })
						case 1:
							_, err = Call(ctx, b, func(context.Context) (int, error) { return 1, nil })
						case 2:
							_, err = b.Acquire()
						default:
							_, err = b.AcquireAt(tk.Now())
						}
						if !errors.Is(err, ErrOpen) {
							t.Errorf("admitted: %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			done.Store(true)
			reader.Wait()
			require.EqualValues(t, goroutines*each, b.Stats().Rejected)
		})
	}
}

// TestStressPackedSlotsMirrorTheirCounters: goroutines record random
// outcomes at once into count windows whose slots share words (16 a word),
// sizes that fill part of a word, one word, several, with and without a
// stride: no CAS on a word loses a neighbour's outcome, so at the end the
// counters equal the histogram of the slots, every slot holds a code a
// record wrote, and a reset empties the window and the counters together.
func TestStressPackedSlotsMirrorTheirCounters(t *testing.T) {
	codes := []uint32{codeOK, codeFail, codeSlowOK, codeSlowFail}
	for _, n := range []int{1, 5, 16, 17, 37, 64, 100} {
		var w countWindow
		h := new(hotWords)
		w.init(n)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), uint64(n)))
				for range 2000 {
					w.add(h, codes[r.IntN(len(codes))])
				}
			})
		}
		wg.Wait()
		var total, fails, slows int64
		for i := range uint64(n) {
			c := w.slot(i)
			require.Contains(t, codes, c, "n %d: slot %d", n, i)
			total += int64(c & codeFilled)
			fails += int64(c & codeFailBit >> 1)
			slows += int64(c & codeSlowBit >> 2)
		}
		require.Equal(t, int64(n), total, "n %d: every slot written", n)
		require.Equal(t, [3]int64{total, fails, slows}, [3]int64{h.total.Load(), h.fails.Load(), h.slows.Load()}, "n %d", n)
		last := w.slots()[len(w.slots())-1].Load()
		require.Zero(t, last>>(uint64(n-1)%slotsPerWord*slotBits)>>slotBits, "n %d: no code beyond slot n-1", n)
		w.reset(h)
		require.Equal(t, [3]int64{0, 0, 0}, [3]int64{h.total.Load(), h.fails.Load(), h.slows.Load()}, "n %d: reset", n)
		for i := range uint64(n) {
			require.Equal(t, uint32(codeEmpty), w.slot(i))
		}
	}
}

// TestStressUpdatesRacingCalls: goroutines make calls with random outcomes
// and durations while another keeps replacing the configuration
// (thresholds, probes, the concurrency limit, the slow-call threshold,
// between an hour that no call reaches and 2 ms, as Update keeps it
// positive once set, HalfOpenSuccesses), in every mode. No permit is lost or released twice:
// every admission is a call or a rejection, Stats counts every rejection,
// every probe admitted is recorded (none is in flight at the end), probes
// in flight never exceeded the largest limit of any configuration, and a
// count window's counters equal the histogram of its slots.
func TestStressUpdatesRacingCalls(t *testing.T) {
	const G, N = 6, 2000
	for _, mode := range []Mode{CountWindow, TimeWindow, Consecutive} {
		tk := rampart.NewManualTicker(0)
		cfgs := []Config{
			{FailureRateThreshold: 20, MinimumCalls: 4, HalfOpenProbes: 6, HalfOpenMaxConcurrent: 3, ConsecutiveFailures: 2, SlowCallDuration: time.Hour},
			{FailureRateThreshold: 80, MinimumCalls: 8, HalfOpenProbes: 2, HalfOpenMaxConcurrent: 1, SlowCallDuration: 2 * time.Millisecond},
			{FailureRateThreshold: 50, MinimumCalls: 1, HalfOpenProbes: 4, HalfOpenSuccesses: 3, ConsecutiveFailures: 6, MaxHalfOpenDuration: 10 * time.Millisecond, SlowCallDuration: time.Hour},
		}
		const maxConcurrent = 4 // the largest HalfOpenMaxConcurrent above (HalfOpenProbes when unset)
		for i := range cfgs {
			cfgs[i].Ticker, cfgs[i].Mode, cfgs[i].WindowSize, cfgs[i].TimeWindow = tk, mode, 16, 100*time.Millisecond
			cfgs[i].OpenDuration = 3 * time.Millisecond
		}
		b, err := New(cfgs[0])
		require.NoError(t, err)
		var mu sync.Mutex
		inflight := map[uint64]int{} // half-open generation → probes in flight
		var admitted, rejected, overLimit atomic.Int64
		var done atomic.Bool
		var upd sync.WaitGroup
		upd.Go(func() {
			for i := 0; !done.Load(); i++ {
				require.NoError(t, b.Update(cfgs[i%len(cfgs)]))
				runtime.Gosched()
			}
		})
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 2))
				for range N {
					if r.IntN(40) == 0 {
						tk.Advance(time.Duration(r.IntN(3)) * time.Millisecond)
					}
					p, err := b.AcquireAt(tk.Now())
					if err != nil {
						rejected.Add(1)
						continue
					}
					admitted.Add(1)
					probe := State(p.word&stateMask) == HalfOpen
					gen := p.word >> genShift
					if probe {
						mu.Lock()
						if inflight[gen]++; inflight[gen] > maxConcurrent {
							overLimit.Add(1)
						}
						mu.Unlock()
					}
					res := rampart.Success
					if x := r.IntN(10); x < 3 {
						res = rampart.Failure
					} else if x < 4 {
						res = rampart.Ignored
					}
					now := tk.Now() + int64(r.IntN(4))*int64(time.Millisecond)
					if probe {
						mu.Lock()
						inflight[gen]--
						mu.Unlock()
					}
					b.ReleaseAt(p, now, res)
				}
			})
		}
		wg.Wait()
		done.Store(true)
		upd.Wait()
		require.Zero(t, overLimit.Load(), "%v: more probes in flight than any limit", mode)
		require.Equal(t, int64(G*N), admitted.Load()+rejected.Load())
		s := b.Stats()
		require.Equal(t, uint64(rejected.Load()), s.Rejected, "%v", mode)
		require.Zero(t, s.HalfOpenInFlight, "%v: every probe admitted was recorded", mode)
		require.Greater(t, s.Transitions, uint64(3), "%v: the stress should move the state", mode)
		if mode == CountWindow {
			var total, fails, slows int64
			for i := range uint64(b.count.n) {
				c := b.count.slot(i)
				total += int64(c & codeFilled)
				fails += int64(c & codeFailBit >> 1)
				slows += int64(c & codeSlowBit >> 2)
			}
			require.Equal(t, [3]int64{total, fails, slows}, [3]int64{b.hot.total.Load(), b.hot.fails.Load(), b.hot.slows.Load()})
		}
		t.Logf("%v: %+v", mode, s)
	}
}

// TestStressSuccessesCountExactly: with CountStats, goroutines on every P
// release successes (Do, Call, Release, ReleaseAt) and failures at once, a
// reader summing Stats meanwhile: Successes is exactly the successes, and
// Rejected the rejections of a trip in the middle, whatever GOMAXPROCS was
// at New (1: no rejection line, 2, then raised to 4: Ps past the lines),
// in both layouts.
func TestStressSuccessesCountExactly(t *testing.T) {
	const goroutines, each = 8, 2000
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct {
		name    string
		compact bool
		procsAt int // GOMAXPROCS at New; raised to 4 after
	}{{"default/1 P", false, 1}, {"default/2 Ps", false, 2}, {"compact", true, 2}} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(c.procsAt)
			tk := rampart.NewManualTicker(0)
			b, err := New(Config{Ticker: tk, Compact: c.compact, CountStats: true, Mode: Consecutive, ConsecutiveFailures: 1 << 30})
			require.NoError(t, err)
			runtime.GOMAXPROCS(max(procs, 4))
			defer runtime.GOMAXPROCS(procs)
			var done atomic.Bool
			var reader sync.WaitGroup
			reader.Go(func() { // the sum, read while successes land, never exceeds them
				for !done.Load() {
					if n := b.Stats().Successes; n > goroutines*each {
						t.Errorf("Successes %d > %d", n, goroutines*each)
						return
					}
				}
			})
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						var err error
						switch (g + i) % 4 {
						case 0:
							err = b.Do(ctx, func(context.Context) error { return nil })
						case 1:
							_, err = Call(ctx, b, func(context.Context) (int, error) { return 1, nil })
						case 2:
							var p Permit
							if p, err = b.Acquire(); err == nil {
								b.Release(p, rampart.Success)
							}
						default:
							var p Permit
							if p, err = b.AcquireAt(tk.Now()); err == nil {
								b.ReleaseAt(p, tk.Now(), rampart.Success)
							}
						}
						require.NoError(t, err)
						p, err := b.AcquireAt(tk.Now()) // a failure between: not a success
						require.NoError(t, err)
						b.ReleaseAt(p, tk.Now(), rampart.Failure)
					}
				})
			}
			wg.Wait()
			done.Store(true)
			reader.Wait()
			s := b.Stats()
			require.EqualValues(t, goroutines*each, s.Successes)
			require.EqualValues(t, goroutines*each, s.Failures)
			require.True(t, b.TransitionTo(Open))
			for range 10 {
				_, err := b.AcquireAt(tk.Now())
				require.ErrorIs(t, err, ErrOpen)
			}
			s = b.Stats()
			require.EqualValues(t, 10, s.Rejected, "the success counters' lines keep the rejections exact")
			require.EqualValues(t, goroutines*each, s.Successes)
		})
	}
}
