package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
)

func mustNew(t testing.TB, c Config) *Limiter {
	t.Helper()
	l, err := New(c)
	require.NoError(t, err)
	return l
}

func TestConfigValidation(t *testing.T) {
	ok := []Config{
		{Rate: 1},
		{Rate: 1e-9},
		{Rate: 1e9},
		{Rate: 0.1, Burst: 3},
		{Limit: 10},
		{Limit: 3, Period: time.Second},
		{Limit: 1e9, Period: time.Second},
		{Limit: 1, Period: 30 * 365 * 24 * time.Hour},
		{Capacity: 10, RefillRate: 2},
		{Capacity: 10, RefillRate: 2, Burst: 10},
	}
	for _, c := range ok {
		_, err := New(c)
		require.NoError(t, err, "%+v", c)
	}
	bad := []Config{
		{},                                // no form
		{Rate: 1, Limit: 1},               // two forms
		{Rate: -1},                        // negative
		{Rate: math.NaN()},                // NaN
		{Rate: math.Inf(1)},               // infinite
		{Rate: 2e9},                       // interval rounds to 0
		{Rate: 1e-12},                     // interval overflows
		{Rate: 1, Burst: -1},              // burst < 1
		{Limit: 0, Period: time.Second},   // limit < 1
		{Limit: -3},                       // limit < 1
		{Limit: 3, Period: -time.Second},  // negative period
		{Limit: 2e9, Period: time.Second}, // interval rounds to 0
		{Capacity: 0, RefillRate: 1},      // capacity < 1
		{Capacity: 5, RefillRate: 0.0},    // no refill... (Capacity alone: RefillRate must be positive)
		{Capacity: 5, RefillRate: 1, Burst: 3},
		{Rate: 1e9, Burst: math.MaxInt}, // tau overflows
	}
	for _, c := range bad {
		_, err := New(c)
		require.Error(t, err, "%+v", c)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, "%+v", c)
	}
}

func TestDefaults(t *testing.T) {
	require.Equal(t, 1, mustNew(t, Config{Rate: 5}).Stats().Burst)
	require.Equal(t, 7, mustNew(t, Config{Limit: 7}).Stats().Burst)
	st := mustNew(t, Config{Limit: 7}).Stats()
	require.InDelta(t, 7.0, st.Rate, 1e-9)
	require.Equal(t, time.Duration(142857143), st.Interval)
	require.Equal(t, 4, mustNew(t, Config{Capacity: 4, RefillRate: 1}).Stats().Burst)
	require.Equal(t, rampart.DefaultTicker(), mustNew(t, Config{Rate: 1}).Ticker())
}

// Step table at fixed times, as x/time/rate's tests do.
func TestSteps(t *testing.T) {
	ms := int64(time.Millisecond)
	l := mustNew(t, Config{Rate: 10, Burst: 2}) // one per 100 ms, two at once
	steps := []struct {
		at   int64
		n    int
		wait int64
	}{
		{0, 1, 0},
		{0, 1, 0},
		{0, 1, 100 * ms},
		{50 * ms, 1, 50 * ms},
		{100 * ms, 1, 0},
		{100 * ms, 1, 100 * ms},
		{100 * ms, 2, 200 * ms},
		{200 * ms, 1, 0},
		{250 * ms, 1, 50 * ms},
		{1000 * ms, 2, 0},
		{1000 * ms, 3, Never},
		{1000 * ms, 0, Never},
		{1000 * ms, -1, Never},
		{1100 * ms, 1, 0},
	}
	for i, s := range steps {
		require.Equal(t, s.wait, l.TryAcquire(s.at, s.n), "step %d: %+v", i, s)
	}
}

// The n-th slot of a saturated limiter (permits committed ahead, so that
// its TAT never restarts from a reading) comes exactly at n·period/limit
// rounded up to the ns, however large n is: the interval is not rounded.
// A caller that polls at its wait instead restarts the phase from each
// admitted reading, as exact GCRA does (TestExactGCRALimiter): with a
// burst of 1 its admissions are at least period/limit apart, never closer.
func TestExactNoDrift(t *testing.T) {
	// 3 per second: an interval of 333333333.33… ns.
	l := mustNew(t, Config{Limit: 3, Period: time.Second, Burst: 1})
	for k := int64(0); k < 30000; k++ {
		ideal := (k*int64(time.Second) + 2) / 3 // ceil(k·1e9/3)
		r, err := l.Reserve(0, 1, time.Duration(math.MaxInt64))
		require.NoError(t, err)
		require.Equal(t, ideal, r.TimeToAct(), "slot %d", k)
	}
	poll := mustNew(t, Config{Limit: 3, Period: time.Second, Burst: 1})
	var now, prev int64
	for k := range 30000 {
		require.Zero(t, poll.TryAcquire(now, 1))
		if k > 0 {
			require.GreaterOrEqual(t, 3*(now-prev), int64(time.Second), "admission %d only %d ns after the previous", k, now-prev)
		}
		prev = now
		now += poll.TryAcquire(now, 1)
	}
	// 1e9 admissions: a burst of 1e9 spent at 0 is back exactly at
	// 1e9·(1e9/3) ns = 333333333333333333.33… ns. A whole-ns interval would be
	// off by a third of a second.
	big := mustNew(t, Config{Limit: 3, Period: time.Second, Burst: 1e9})
	require.Zero(t, big.TryAcquire(0, 1e9))
	const back = 333333333333333334 // ceil(1e18/3)
	w := big.TryAcquire(0, 1e9)
	require.InDelta(t, float64(back), float64(w), 1, "wait %d", w)
	require.False(t, big.AllowN(back-2, 1e9))
	require.True(t, big.AllowN(back+1, 1e9))
}

// golang/go#71360: at 1000/s, four callers of which two pass a timestamp
// 5 ms old. x/time/rate v0.16.0 lets the stale callers move its clock back
// and admits several times the rate (about 4000 in a second in the issue; a
// comparison against it runs in bench/ratelimit_test.go). rampart stays
// within burst + rate·T + 1 over every window.
func TestStaleTimestamps(t *testing.T) {
	const (
		perSecond = 1000
		burst     = 10
		step      = int64(10 * time.Microsecond)
		stale     = int64(5 * time.Millisecond)
		horizon   = int64(time.Second)
	)
	l := mustNew(t, Config{Rate: perSecond, Burst: burst})
	var times []int64
	for now := stale; now < stale+horizon; now += step {
		for caller := range 4 {
			at := now
			if caller%2 == 1 {
				at -= stale
			}
			if l.AllowN(at, 1) {
				times = append(times, at)
			}
		}
	}
	require.LessOrEqual(t, len(times), burst+perSecond+1)
	require.GreaterOrEqual(t, len(times), perSecond)
	slices.Sort(times)
	checkWindows(t, times, burst, perSecond)
}

// checkWindows fails if any window [a, b] holds more than
// burst + rate·(b−a) + 1 of the sorted admission times.
func checkWindows(t testing.TB, times []int64, burst int, perSecond float64) {
	t.Helper()
	// count(i..j) = j−i+1 ≤ burst + rate·(tj−ti) + 1  ⇔
	// (j − rate·tj) − (i − rate·ti) ≤ burst.
	rate := perSecond / 1e9
	best := math.Inf(-1) // max over j ≥ i of j − rate·tj
	for i := len(times) - 1; i >= 0; i-- {
		best = max(best, float64(i)-rate*float64(times[i]))
		if excess := best - (float64(i) - rate*float64(times[i])); excess > float64(burst)+1e-6 {
			t.Fatalf("window from %d: %.3f admissions above burst+rate·T+1", times[i], excess-float64(burst))
		}
	}
}

// Bounds under fake time: never above burst + rate·T + 1 in any window, and
// at least 0.999 of the ideal when the offered load exceeds the rate.
func TestBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 40 {
		limit := 1 + rng.IntN(5000)
		period := time.Duration(1+rng.Int64N(int64(2*time.Second))) + time.Duration(limit)
		burst := 1 + rng.IntN(50)
		l := mustNew(t, Config{Limit: limit, Period: period, Burst: burst})
		perSecond := l.Stats().Rate
		interval := float64(period) / float64(limit)
		maxGap := 2.0
		if burst == 1 {
			maxGap = 2000
		}
		horizon := int64(interval * 40000 / maxGap)
		var times []int64
		var now int64
		for now < horizon {
			// About 4× the rate; with a burst of 1 every admission after
			// the slot loses the lateness (the bucket is full: a token
			// bucket's cap), so arrivals there are 1000× the rate.
			now += 1 + rng.Int64N(int64(interval/maxGap)+1)
			if l.AllowN(now, 1) {
				times = append(times, now)
			}
		}
		checkWindows(t, times, burst, perSecond)
		ideal := float64(burst) + math.Floor(float64(now)/interval) // a token bucket's count
		require.GreaterOrEqual(t, float64(len(times)), 0.999*ideal-1, "trial %d: %d admitted, ideal %.1f", trial, len(times), ideal)
		require.LessOrEqual(t, float64(len(times)), ideal+1)
	}
}

// Many goroutines, some with stale readings, on a clock moved by others:
// the window bound holds under -race.
func TestStressConcurrent(t *testing.T) {
	const perSecond, burst = 100_000, 20
	tk := rampart.NewManualTicker(int64(time.Millisecond))
	l := mustNew(t, Config{Rate: perSecond, Burst: burst, Ticker: tk, CountStats: true})
	const goroutines, calls = 16, 3000
	var wg sync.WaitGroup
	results := make([][]int64, goroutines)
	var attempts atomic.Int64
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range calls {
				if g%4 == 0 {
					tk.Advance(time.Duration(rng.Int64N(5000)))
				}
				now := tk.Now()
				if g%2 == 1 {
					now -= rng.Int64N(int64(time.Millisecond)) // stale
				}
				attempts.Add(1)
				switch g % 3 {
				case 0:
					if l.AllowN(now, 1) {
						results[g] = append(results[g], now)
					}
				case 1:
					if l.TryAcquire(now, 1) == 0 {
						results[g] = append(results[g], now)
					}
				default:
					if r, err := l.Reserve(now, 1, 0); err == nil {
						require.Zero(t, r.Delay())
						results[g] = append(results[g], now)
					}
				}
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(results...)
	slices.Sort(all)
	checkWindows(t, all, burst, perSecond)
	st := l.Stats()
	require.Equal(t, uint64(len(all)), st.Admitted)
	require.Equal(t, uint64(attempts.Load()), st.Admitted+st.Rejected)
}

// TestReserveCancelRestoresTheStateBeforeReserve: Cancel puts back the TAT
// that Reserve found, not max(TAT, the Reserve's reading): after an
// immediate reservation at 500 ms is cancelled, a caller whose reading is
// 300 ms (older, and still before the reservation's time) is admitted as
// it would have been had Reserve never run.
func TestReserveCancelRestoresTheStateBeforeReserve(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, c := range []Config{{Rate: 10, Burst: 1}, {Rate: 3, Burst: 1}} {
		l := mustNew(t, c)
		require.True(t, l.AllowN(0, 1))
		before := l.st.Load().tat.Load()
		r, err := l.Reserve(500*ms, 1, 0)
		require.NoError(t, err)
		require.Zero(t, r.Delay())
		require.True(t, r.Cancel(300*ms))
		require.Equal(t, before, l.st.Load().tat.Load(), "%+v", c)
		require.Equal(t, c.Rate == 10, l.AllowN(300*ms, 1), "%+v: as without the reservation", c)
	}
}

func TestReserveCancel(t *testing.T) {
	ms := int64(time.Millisecond)
	l := mustNew(t, Config{Rate: 10, Burst: 1}) // 100 ms
	r0, err := l.Reserve(0, 1, 0)
	require.NoError(t, err)
	require.Zero(t, r0.Delay())
	require.True(t, r0.OK())

	// Not within maxWait: read-only rejection.
	_, err = l.Reserve(0, 1, 50*time.Millisecond)
	require.ErrorIs(t, err, ErrLimited)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Same(t, l.RejectedError(), err)

	r1, err := l.Reserve(0, 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, r1.Delay())
	require.Equal(t, 100*ms, r1.TimeToAct())
	require.Equal(t, 60*time.Millisecond, r1.DelayFrom(40*ms))
	r2, err := l.Reserve(10*ms, 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, 190*time.Millisecond, r2.Delay())

	// r1 is not the latest: cancelling it gives nothing back.
	require.False(t, r1.Cancel(20*ms))
	require.False(t, r1.OK())
	// r2 is the latest and still ahead: it is given back exactly.
	require.True(t, r2.Cancel(20*ms))
	require.False(t, r2.Cancel(20*ms), "twice")
	require.Equal(t, 180*ms, l.TryAcquire(20*ms, 1)) // next slot right after r1's

	// A reservation whose time has come is not given back.
	r3, err := l.Reserve(100*ms, 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, 100*time.Millisecond, r3.Delay()) // r1 took 100 ms
	require.False(t, r3.Cancel(200*ms+1))

	_, err = l.Reserve(0, 2, time.Hour)
	require.ErrorIs(t, err, ErrInvalidN)
	// An immediate reservation can be given back at the same instant.
	r4, err := l.Reserve(500*ms, 1, 0)
	require.NoError(t, err)
	require.Zero(t, r4.Delay())
	require.True(t, r4.Cancel(500*ms))
	require.True(t, l.AllowN(500*ms, 1))

	var zero Reservation
	require.False(t, zero.Cancel(0))
	require.Equal(t, 1, r3.N())
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker() // inside the bubble: fake time
		l := mustNew(t, Config{Rate: 10, Burst: 1, Ticker: tk})
		ctx := context.Background()
		require.NoError(t, l.Wait(ctx, 1))
		start := time.Now()
		require.NoError(t, l.Wait(ctx, 1))
		require.Equal(t, 100*time.Millisecond, time.Since(start).Round(time.Microsecond))
		require.Equal(t, uint64(1), l.Stats().Waited)

		// The wait would pass the deadline: error at once, nothing taken.
		dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		start = time.Now()
		err := l.Wait(dctx, 1)
		cancel()
		require.ErrorIs(t, err, ErrLimited)
		require.Zero(t, time.Since(start))

		// Cancellation wakes the waiter and gives its slot back.
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- l.Wait(cctx, 1) }()
		time.Sleep(30 * time.Millisecond)
		synctest.Wait()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		require.InDelta(t, 0.3, l.Tokens(tk.Now()), 1e-6) // as before the reservation
		require.Equal(t, int64(70*time.Millisecond), l.TryAcquire(tk.Now(), 1))

		// Already cancelled, and an impossible n.
		require.ErrorIs(t, l.Wait(cctx, 1), context.Canceled)
		require.ErrorIs(t, l.Wait(ctx, 2), ErrInvalidN)
	})
}

func TestSetRateAndBurst(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 10, Burst: 10, Ticker: tk})
	require.True(t, l.AllowN(0, 4)) // 6 left
	require.NoError(t, l.SetBurst(3))
	// Lowering the burst caps the credit: only 3 now, not 6.
	require.True(t, l.AllowN(0, 3))
	require.False(t, l.AllowN(0, 1))
	require.Equal(t, 3, l.Stats().Burst)

	require.NoError(t, l.SetBurst(20))
	require.InDelta(t, 0.0, l.Tokens(0), 1e-9) // raising adds nothing at once
	tk.Set(int64(time.Second))
	require.InDelta(t, 10.0, l.Tokens(tk.Now()), 1e-6)

	require.NoError(t, l.SetRate(100))
	require.InDelta(t, 10.0, l.Tokens(tk.Now()), 1e-6) // permits kept
	tk.Advance(100 * time.Millisecond)
	require.InDelta(t, 20.0, l.Tokens(tk.Now()), 1e-6) // 10 more at 100/s, capped at 20
	require.InDelta(t, 100.0, l.Stats().Rate, 1e-9)

	require.NoError(t, l.SetLimit(1, time.Second))
	require.True(t, l.AllowN(tk.Now(), 20))
	require.Equal(t, int64(time.Second), l.TryAcquire(tk.Now(), 1))

	require.Error(t, l.SetRate(-1))
	require.Error(t, l.SetBurst(0))
	require.Error(t, l.SetLimit(0, time.Second))

	// A reservation made before a change cannot be cancelled after it.
	r, err := l.Reserve(tk.Now(), 1, time.Hour)
	require.NoError(t, err)
	require.NoError(t, l.SetBurst(20))
	require.False(t, r.Cancel(tk.Now()))
}

// Concurrent SetRate while others admit: no panic, no race, no burst above
// the largest burst configured.
func TestSetRateConcurrent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 1000, Burst: 5, Ticker: tk})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if g == 0 && i%100 == 0 {
					require.NoError(t, l.SetRate(float64(500+i)))
					require.NoError(t, l.SetBurst(1+i%5))
				}
				if l.Allow() {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// Time never moved: at most the initial burst of 5 went through.
	require.LessOrEqual(t, admitted.Load(), int64(5))
}

func TestListenerAndStats(t *testing.T) {
	var calls []int64
	l := mustNew(t, Config{Rate: 1, Burst: 1, CountStats: true, Name: "api", OnRejected: func(n int, wait int64) {
		calls = append(calls, int64(n), wait)
		if n == 1 {
			panic("listener bug")
		}
	}})
	require.True(t, l.AllowN(0, 1))
	require.False(t, l.AllowN(0, 1))
	require.Equal(t, int64(time.Second), l.TryAcquire(0, 1))
	require.Equal(t, Never, l.TryAcquire(0, 5))
	require.Equal(t, []int64{1, int64(time.Second), 1, int64(time.Second), 5, Never}, calls)
	st := l.Stats()
	require.Equal(t, uint64(1), st.Admitted)
	require.Equal(t, uint64(3), st.Rejected)
	require.Equal(t, uint64(2), st.ListenerPanics)
	require.Equal(t, `ratelimit "api": rate limited`, l.RejectedError().Error())
	require.Equal(t, l.RejectedError(), l.Acquire(0))
}

func TestDoAndCall(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 1, Ticker: tk})
	userErr := errors.New("boom")
	require.Same(t, userErr, l.Do(context.Background(), func(context.Context) error { return userErr }))
	require.ErrorIs(t, l.Do(context.Background(), func(context.Context) error { return nil }), ErrLimited)
	tk.Advance(time.Second)
	v, err := Call(context.Background(), l, func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	require.Equal(t, 42, v)
	v, err = Call(context.Background(), l, func(context.Context) (int, error) { return 42, nil })
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Zero(t, v)
	require.NoError(t, l.Acquire(tk.Advance(time.Second)))
}

func TestAllocsAdmit(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	l := mustNew(t, Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30})
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if !l.Allow() || l.TryAcquire(l.tk.Now(), 1) != 0 {
			panic("rejected")
		}
	}))
}

func TestAllocsReject(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	l := mustNew(t, Config{Rate: 1e-3, CountStats: true, OnRejected: func(int, int64) {}})
	require.True(t, l.Allow())
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if l.Allow() || l.TryAcquire(5, 1) == 0 || l.Acquire(5) == nil {
			panic("admitted")
		}
		if _, err := l.Reserve(5, 1, time.Second); err == nil {
			panic("reserved")
		}
	}))
}

func TestAllocsReserve(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	l := mustNew(t, Config{Rate: 10, Burst: 1})
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		r, err := l.Reserve(0, 1, time.Hour)
		if err != nil || !r.Cancel(0) && r.Delay() > 0 {
			panic("not given back")
		}
		_ = l.Stats()
	}))
}

func TestAllocsWaitNoDelay(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	l := mustNew(t, Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30})
	ctx := context.Background()
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if l.Wait(ctx, 1) != nil {
			panic("wait failed")
		}
	}))
}

// BenchmarkTryAcquire measures one admission decision at a reading handed
// in (no clock read), for a whole-ns interval (1 ns: readings are units)
// and for a fractional one (10/3 ns: readings are converted by
// multiplication), each admitted and rejected.
func BenchmarkTryAcquire(b *testing.B) {
	for _, bc := range []struct {
		name   string
		c      Config
		admit  bool
		stride int64
	}{
		{"Admit/WholeNs", Config{Limit: 1e9, Period: time.Second, Burst: 1 << 20}, true, 2},
		{"Admit/FractionalNs", Config{Limit: 3e8, Period: time.Second, Burst: 1 << 20}, true, 4},
		{"Reject/WholeNs", Config{Limit: 1, Period: 1000 * time.Second}, false, 0},
		{"Reject/FractionalNs", Config{Limit: 3, Period: 1000 * time.Second, Burst: 1}, false, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			l := mustNew(b, bc.c)
			now := int64(1)
			if !bc.admit && l.TryAcquire(now, 1) != 0 {
				b.Fatal("first permit refused")
			}
			for b.Loop() {
				now += bc.stride
				if (l.TryAcquire(now, 1) == 0) != bc.admit {
					b.Fatal("unexpected decision")
				}
			}
		})
	}
}

// capConfigs are intervals of every kind for the tests at the top of the
// TAT's domain: whole ns (1 s, 7 ns), and not (1e9/3, 10/3 ns).
var capConfigs = []Config{
	{Limit: 1, Period: time.Second}, {Rate: 1e9 / 7}, {Rate: 3}, {Limit: 3, Period: 10},
}

// capReadings are the readings around the cap of the reading range
// (maxUnits units) for params p, and the largest int64.
func capReadings(p *params) []int64 {
	c := p.earliest(maxUnits) // the first reading counted as the last unit
	return []int64{c - 2, c - 1, c, c + 1, math.MaxInt64}
}

// TestTATStaysBelowRetiredAtTheReadingCap: at readings up to and past the
// cap, a full burst then reservations as far ahead as allowed (maxReserve)
// leave every TAT below retired (which would read as a state being
// replaced), never wrap TimeToAct, and end in a rejection; n outside
// [1, burst], down to math.MinInt, is refused without touching the word.
func TestTATStaysBelowRetiredAtTheReadingCap(t *testing.T) {
	for _, c := range capConfigs {
		probe := mustNew(t, c)
		p := probe.st.Load().params
		c.Burst = int(maxTau / p.k / 4) // a reservation commits a quarter of maxReserve
		for _, now := range capReadings(&p) {
			c.Ticker = rampart.NewManualTicker(0)
			l := mustNew(t, c)
			s := l.st.Load()
			for _, n := range []int{math.MinInt, -1, 0, c.Burst + 1, math.MaxInt} {
				require.Equal(t, Never, l.TryAcquire(now, n), "n=%d", n)
				require.False(t, l.AllowN(now, n), "n=%d", n)
				_, err := l.Reserve(now, n, time.Duration(math.MaxInt64))
				require.ErrorIs(t, err, ErrInvalidN, "n=%d", n)
			}
			require.Equal(t, int64(math.MinInt64/2), s.tat.Load(), "invalid n touched the TAT")
			require.True(t, l.AllowN(now, c.Burst), "%+v at %d: a full burst", c, now)
			rejected := false
			for i := 0; i < 10 && !rejected; i++ {
				r, err := l.Reserve(now, c.Burst, time.Duration(math.MaxInt64))
				if err != nil {
					require.ErrorIs(t, err, ErrLimited)
					rejected = true
					continue
				}
				require.GreaterOrEqual(t, r.TimeToAct(), now, "TimeToAct wrapped")
				require.Less(t, s.tat.Load(), retired, "%+v at %d: TAT reached retired", c, now)
			}
			require.True(t, rejected, "%+v at %d: reservations without end", c, now)
			require.Less(t, s.tat.Load(), retired)
			require.False(t, l.AllowN(now, 1))
			require.NotZero(t, l.TryAcquire(now, 1))
		}
	}
}
