package adaptive

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fixed(t testing.TB, n int, extra func(*Config)) (*Limiter, *rampart.ManualTicker) {
	t.Helper()
	tk := rampart.NewManualTicker(0)
	c := Config{Algorithm: AIMD{}, InitialLimit: n, MinLimit: n, MaxLimit: n, Ticker: tk}
	if extra != nil {
		extra(&c)
	}
	l, err := New(c)
	require.NoError(t, err)
	return l, tk
}

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{MinLimit: -1},
		{MaxLimit: -1},
		{InitialLimit: -1},
		{MinLimit: 10, MaxLimit: 5},
		{Window: -1},
		{MinWindowSamples: -1},
		{Algorithm: AIMD{Backoff: 1.5}},
		{Algorithm: AIMD{Increase: -1}},
		{Algorithm: AIMD{Timeout: -1}},
		{Algorithm: Vegas{Alpha: 5, Beta: 4}},
		{Algorithm: Vegas{Beta: math.Inf(1)}},
		{Algorithm: Vegas{Alpha: math.NaN()}},
		{Algorithm: AIMD{Increase: math.Inf(1)}},
		{Algorithm: AIMD{Increase: math.NaN()}},
		{Algorithm: Vegas{Smoothing: 2}},
		{Algorithm: Vegas{ProbeLimit: -1}},
		{Algorithm: Gradient2{Tolerance: 0.5}},
		{Algorithm: Gradient2{Smoothing: -0.1}},
		{Algorithm: Gradient2{QueueSize: math.NaN()}},
		{Algorithm: Gradient2{LongWindow: -1}},
		{Algorithm: Vegas{DropThreshold: math.NaN()}},
		{Algorithm: Vegas{DropThreshold: -0.01}},
		{Algorithm: Vegas{DropThreshold: 1.5}},
		{Algorithm: AIMD{DropThreshold: math.NaN()}},
		{Algorithm: AIMD{DropThreshold: -0.01}},
		{Algorithm: AIMD{DropThreshold: math.Inf(1)}},
		{Partitions: []Partition{{Share: 0.7}, {Share: 0.7}}},
		{Partitions: []Partition{{Share: -0.1}}},
		{Queue: QueueConfig{MaxLength: -1}},
		{Queue: QueueConfig{MaxLength: 1, Target: time.Second, Interval: time.Millisecond}},
		{Queue: QueueConfig{Target: -1}},
	}
	if math.MaxInt > math.MaxInt32 { // a limit above the in-flight count's 32 bits (no such int on 32-bit)
		above := int64(math.MaxInt32) + 1
		bad = append(bad, Config{MaxLimit: int(above)})
	}
	for i, c := range bad {
		_, err := New(c)
		require.Error(t, err, "case %d", i)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, "case %d", i)
	}
	l, err := New(Config{})
	require.NoError(t, err)
	require.Equal(t, 20, l.Limit())
	for _, alg := range []Algorithm{Vegas{DropThreshold: 1}, Vegas{DropThreshold: 1e-9}, AIMD{DropThreshold: 1}, AIMD{DropThreshold: 0.2}} {
		_, err := New(Config{Algorithm: alg})
		require.NoError(t, err, "%+v", alg)
	}

	badT := []ThrottlerConfig{{K: 0.5}, {Window: -1}, {Buckets: -1}, {Buckets: 2000}, {MaxProbability: 1.5}, {Window: 5, Buckets: 10}}
	for i, c := range badT {
		_, err := NewThrottler(c)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, "case %d", i)
	}
}

func TestAcquireRelease(t *testing.T) {
	l, _ := fixed(t, 2, nil)
	a, ok := admitted(l.AcquireAt(1))
	require.True(t, ok)
	require.True(t, a.Valid())
	require.Equal(t, int64(1), a.start)
	b, ok := admitted(l.AcquireAt(2))
	require.True(t, ok)
	_, ok = admitted(l.AcquireAt(3))
	require.False(t, ok)
	require.Equal(t, 2, l.InFlight())
	l.ReleaseAt(a, 10, rampart.Success)
	l.ReleaseAt(b, 10, rampart.Ignored)
	require.Equal(t, 0, l.InFlight())
	st := l.Stats()
	require.Equal(t, uint64(1), st.Rejected)
	require.Equal(t, 2, st.PeakInFlight)
	err := l.RejectedError()
	require.ErrorIs(t, err, ErrLimited)
	require.ErrorIs(t, err, rampart.ErrRejected)
}

// TestOutcomes: Success feeds RTTs, Failure is a loss, Ignored is nothing.
func TestOutcomes(t *testing.T) {
	var got []Sample
	alg := algFunc(func(s Sample) float64 { got = append(got, s); return s.Limit })
	l, err := New(Config{Algorithm: alg, InitialLimit: 10, Window: time.Second, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	for i, o := range []rampart.Result{rampart.Success, rampart.Success, rampart.Failure, rampart.Ignored, rampart.Ignored} {
		tok, ok := admitted(l.AcquireAt(int64(i)))
		require.True(t, ok)
		l.ReleaseAt(tok, int64(i)+int64(10*(i+1)), o)
	}
	tok, _ := l.AcquireAt(int64(time.Second))
	l.ReleaseAt(tok, int64(time.Second)+30, rampart.Ignored) // closes the window
	require.Len(t, got, 1)
	s := got[0]
	require.Equal(t, int64(2), s.Count)
	require.Equal(t, int64(1), s.Drops)
	require.Equal(t, time.Duration(15), s.AvgRTT)
	require.Equal(t, time.Duration(10), s.MinRTT)
	require.Equal(t, time.Duration(30), s.DropRTT, "the dropped call's RTT, apart from the successes'")
	require.InDelta(t, 1.0/3, s.DropRate(), 1e-12)
	st := l.Stats()
	require.Equal(t, uint64(2), st.Samples)
	require.Equal(t, uint64(1), st.Drops)
	require.Equal(t, uint64(1), st.Windows)
	require.Equal(t, "success failure ignored invalid", rampart.Success.String()+" "+rampart.Failure.String()+" "+rampart.Ignored.String()+" "+rampart.Result(9).String())
}

// TestDropRateNotOneDrop: Vegas and AIMD lower the limit when a window's
// drop rate exceeds DropThreshold (default 5 %), not for one drop among
// thousands of calls; a threshold below one drop per window restores the
// reaction to any drop, and 1 ignores drops. Gradient2 has no drop rule:
// drops move it only through their RTT (Sample.DropRTT).
func TestDropRateNotOneDrop(t *testing.T) {
	const rtt = 10 * time.Millisecond
	healthy := func(drops, count int64) Sample {
		return Sample{Limit: 100, Count: count, Samples: count, Drops: drops, AvgRTT: rtt, MinRTT: rtt, MaxInFlight: 100, InFlight: 50}
	}
	require.Zero(t, healthy(0, 0).DropRate())
	require.InDelta(t, 0.0005, healthy(1, 1999).DropRate(), 1e-12)
	require.Equal(t, 1.0, healthy(10, 0).DropRate())
	for _, a := range []struct {
		name       string
		alg        Algorithm
		oneDrop    bool // a window with one drop in 2000 calls lowers the limit
		tenPercent bool // a window with 10 % drops lowers it
	}{
		{"Vegas", Vegas{ProbeInterval: -1}, false, true},
		{"Vegas/any", Vegas{ProbeInterval: -1, DropThreshold: 1e-9}, true, true},
		{"Vegas/ignore", Vegas{ProbeInterval: -1, DropThreshold: 1}, false, false},
		{"AIMD", AIMD{}, false, true},
		{"AIMD/any", AIMD{DropThreshold: 1e-9}, true, true},
		{"AIMD/ignore", AIMD{DropThreshold: 1}, false, false},
		{"Gradient2", Gradient2{ProbeInterval: -1}, false, false},
	} {
		t.Run(a.name, func(t *testing.T) {
			for _, c := range []struct {
				s     Sample
				lower bool
			}{
				{healthy(1, 1999), a.oneDrop},
				{healthy(3, 97), a.oneDrop}, // 3 %: under the default
				{healthy(200, 1800), a.tenPercent},
			} {
				ctrl := a.alg.Start(100, 1, 1000)
				ctrl.Update(healthy(0, 2000)) // a baseline (Vegas) and a long-term RTT (Gradient2)
				got := ctrl.Update(c.s)
				if c.lower {
					require.Less(t, got, c.s.Limit, "drop rate %v", c.s.DropRate())
				} else {
					require.GreaterOrEqual(t, got, c.s.Limit, "drop rate %v", c.s.DropRate())
				}
			}
		})
	}
	// Gradient2 counts timed drops by their RTT: calls that time out at
	// 5× the long-term RTT are overload; the same few lost calls are not.
	ctrl := Gradient2{ProbeInterval: -1}.Start(100, 1, 1000)
	ctrl.Update(healthy(0, 2000))
	s := healthy(1, 1999)
	s.DropRTT = 5 * rtt
	require.GreaterOrEqual(t, ctrl.Update(s), s.Limit, "one slow drop in 2000 moves the mean by 0.2 %")
	s = healthy(500, 1500)
	s.DropRTT = 5 * rtt
	require.Less(t, ctrl.Update(s), s.Limit, "a quarter of the calls timing out at 5× the RTT")
}

type algFunc func(Sample) float64

func (f algFunc) Start(_, _, _ float64) Controller { return f }
func (f algFunc) Update(s Sample) float64          { return f(s) }

// TestLimitClampAndListener: the algorithm's result is clamped, a NaN keeps
// the limit, and the listener sees changes (a panicking one is counted).
func TestLimitClampAndListener(t *testing.T) {
	next := 1e9
	var changes [][2]int
	l, err := New(Config{
		Algorithm: algFunc(func(Sample) float64 { return next }), InitialLimit: 10, MinLimit: 2, MaxLimit: 50,
		Window: 10, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0),
		OnLimitChange: func(o, n int) {
			changes = append(changes, [2]int{o, n})
			if n == 2 {
				panic("boom")
			}
		},
	})
	require.NoError(t, err)
	step := func(now int64) {
		tok, ok := admitted(l.AcquireAt(now))
		require.True(t, ok)
		l.ReleaseAt(tok, now+20, rampart.Success)
	}
	step(0)
	require.Equal(t, 50, l.Limit())
	next = -5
	step(100)
	require.Equal(t, 2, l.Limit())
	next = math.NaN()
	step(200)
	require.Equal(t, 2, l.Limit())
	require.Equal(t, [][2]int{{10, 50}, {50, 2}}, changes)
	require.Equal(t, uint64(1), l.Stats().ListenerPanics)
}

// TestControllerPanicKeepsLimiterAlive: a panicking user Controller
// propagates but leaves the window usable.
func TestControllerPanicKeepsLimiterAlive(t *testing.T) {
	boom := true
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
		if boom {
			panic("controller")
		}
		return 7
	}), Window: 10, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	tok, _ := l.AcquireAt(0)
	require.Panics(t, func() { l.ReleaseAt(tok, 20, rampart.Success) })
	boom = false
	tok, _ = l.AcquireAt(100)
	l.ReleaseAt(tok, 120, rampart.Success)
	require.Equal(t, 7, l.Limit())
}

func TestMinSamplesDelaysWindow(t *testing.T) {
	n := 0
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 { n++; return s.Limit }), Window: 10, MinWindowSamples: 3, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	for i := range 2 {
		tok, _ := l.AcquireAt(int64(100 * i))
		l.ReleaseAt(tok, int64(100*i+50), rampart.Success)
	}
	require.Equal(t, 0, n)
	tok, _ := l.AcquireAt(300)
	l.ReleaseAt(tok, 350, rampart.Success)
	require.Equal(t, 1, n)
}

func TestDoAndCall(t *testing.T) {
	l, tk := fixed(t, 1, func(c *Config) { c.MinWindowSamples = 1 })
	errUser := errors.New("user")
	require.ErrorIs(t, l.Do(context.Background(), func(context.Context) error { return errUser }), errUser)
	v, err := Call(context.Background(), l, func(context.Context) (int, error) { tk.Advance(time.Millisecond); return 42, nil })
	require.NoError(t, err)
	require.Equal(t, 42, v)
	// Rejected while full.
	tok, _ := l.AcquireAt(0)
	require.ErrorIs(t, l.Do(context.Background(), func(context.Context) error { return nil }), ErrLimited)
	_, err = Call(context.Background(), l, func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, rampart.ErrRejected)
	l.ReleaseAt(tok, 0, rampart.Ignored)
	// A panic releases the slot and propagates.
	require.Panics(t, func() { _ = l.Do(context.Background(), func(context.Context) error { panic("x") }) })
	require.Panics(t, func() { _, _ = Call(context.Background(), l, func(context.Context) (int, error) { panic("x") }) })
	require.Equal(t, 0, l.InFlight())
	// Goexit releases too.
	_, goexited := testkit.Run(func() {
		_ = l.Do(context.Background(), func(context.Context) error { testkit.Goexit(); return nil })
	})
	require.True(t, goexited)
	require.Equal(t, 0, l.InFlight())
}

func TestDefaultClassify(t *testing.T) {
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	require.Equal(t, rampart.Success, DefaultClassify(bg, nil))
	require.Equal(t, rampart.Success, DefaultClassify(bg, errors.New("app")))
	require.Equal(t, rampart.Ignored, DefaultClassify(cancelled, context.Canceled))
	require.Equal(t, rampart.Success, DefaultClassify(bg, context.Canceled)) // the callee's own cancellation
	require.Equal(t, rampart.Failure, DefaultClassify(bg, context.DeadlineExceeded))
	require.Equal(t, rampart.Failure, DefaultClassify(bg, rampart.NewRejectedError("x", "", errors.New("y"))))
	l, err := New(Config{Classify: func(context.Context, error) rampart.Result { return rampart.Failure }})
	require.NoError(t, err)
	require.Equal(t, rampart.Failure, l.Classify(bg, nil))
}

func TestPartitions(t *testing.T) {
	l, _ := fixed(t, 10, func(c *Config) {
		c.Partitions = []Partition{{Name: "critical", Share: 0.6}, {Name: "batch", Share: 0.4}}
	})
	// Batch borrows the idle critical share: all 10.
	var batch []Permit
	for {
		tok, ok := admitted(l.AcquirePartitionAt(0, 1))
		if !ok {
			break
		}
		batch = append(batch, tok)
	}
	require.Len(t, batch, 10)
	// Critical still gets its guaranteed share (the total transiently
	// exceeds the limit by the borrowed calls), and nothing beyond it.
	var crit []Permit
	for range 6 {
		tok, ok := admitted(l.AcquirePartitionAt(0, 0))
		require.True(t, ok)
		crit = append(crit, tok)
	}
	_, ok := admitted(l.AcquirePartitionAt(0, 0))
	require.False(t, ok)
	require.Equal(t, 16, l.InFlight())
	require.Equal(t, 6, l.PartitionInFlight(0))
	require.Equal(t, 0, l.PartitionInFlight(7))
	_, ok = admitted(l.AcquirePartitionAt(0, 5)) // out of range: the last partition, over its share, no room
	require.False(t, ok)
	for _, tok := range batch {
		l.ReleaseAt(tok, 1, rampart.Success)
	}
	// Now critical may borrow batch's idle share.
	for range 4 {
		tok, ok := admitted(l.AcquirePartitionAt(0, 0))
		require.True(t, ok)
		crit = append(crit, tok)
	}
	_, ok = admitted(l.AcquirePartitionAt(0, 0))
	require.False(t, ok)
	for _, tok := range crit {
		l.ReleaseAt(tok, 1, rampart.Success)
	}
	require.Equal(t, 0, l.InFlight())
	require.Equal(t, 0, l.PartitionInFlight(0))

	// Without partitions AcquirePartitionAt is AcquireAt.
	l2, _ := fixed(t, 1, nil)
	tok, ok := admitted(l2.AcquirePartitionAt(0, 3))
	require.True(t, ok)
	l2.ReleaseAt(tok, 1, rampart.Success)
}

// TestStress: many goroutines admit and release under short windows that
// an algorithm keeps moving; the calls in flight never exceed the highest
// limit published, and every slot comes back.
func TestStress(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	var highest atomic.Int64
	highest.Store(20)
	l, err := New(Config{
		Algorithm: Vegas{ProbeInterval: 5}, InitialLimit: 20, MaxLimit: 64,
		Window: 1000, MinWindowSamples: 1, Ticker: tk,
		OnLimitChange: func(_, n int) {
			for {
				h := highest.Load()
				if int64(n) <= h || highest.CompareAndSwap(h, int64(n)) {
					return
				}
			}
		},
		Partitions: []Partition{{Share: 0.5}, {Share: 0.5}},
	})
	require.NoError(t, err)
	var active, violations atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				now := tk.Now()
				var tok Permit
				var ok bool
				if g%2 == 0 {
					tok, ok = admitted(l.AcquireAt(now))
				} else {
					tok, ok = admitted(l.AcquirePartitionAt(now, g%4/2))
				}
				if !ok {
					continue
				}
				if a := active.Add(1); a > 2*highest.Load() { // partitions: limit + borrowed
					violations.Add(1)
				}
				if i%7 == 0 {
					tk.Advance(time.Duration(100 + i%50))
				}
				active.Add(-1)
				l.ReleaseAt(tok, tk.Now(), rampart.Result(i%3))
			}
		}()
	}
	wg.Wait()
	require.Zero(t, violations.Load())
	require.Equal(t, 0, l.InFlight())
	require.Equal(t, 0, l.PartitionInFlight(0)+l.PartitionInFlight(1))
	st := l.Stats()
	require.LessOrEqual(t, st.Limit, 64)
	require.GreaterOrEqual(t, st.Limit, 1)
	require.NotZero(t, st.Windows)
}

func TestAllocsAdmit(t *testing.T) {
	l, err := New(Config{Algorithm: Vegas{}, Window: 1000, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0),
		Partitions: []Partition{{Share: 0.5}, {Share: 0.5}}})
	require.NoError(t, err)
	now := int64(0)
	testkit.WantAllocs(t, "admit + release", 0, func() {
		now += 100
		tok, ok := admitted(l.AcquireAt(now))
		if !ok {
			t.Fatal("rejected")
		}
		l.ReleaseAt(tok, now+50, rampart.Success) // closes a window every 10 calls
	})
	testkit.WantAllocs(t, "priority", 0, func() {
		tok, ok := admitted(l.AcquirePartitionAt(now, 1))
		if !ok {
			t.Fatal("rejected")
		}
		l.ReleaseAt(tok, now, rampart.Failure)
	})
	full, _ := fixed(t, 1, nil)
	tok, _ := full.AcquireAt(0)
	testkit.WantAllocs(t, "reject", 0, func() {
		if _, err := full.AcquireAt(0); err == nil {
			t.Fatal("admitted")
		}
		if err := full.Do(context.Background(), func(context.Context) error { return nil }); err == nil {
			t.Fatal("admitted")
		}
	})
	full.ReleaseAt(tok, 1, rampart.Ignored)
	fn := func(context.Context) error { return nil }
	testkit.WantAllocs(t, "Do", 0, func() {
		if err := full.Do(context.Background(), fn); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStressStrict: without partitions, the calls admitted and not yet
// released never exceed the highest limit published so far (a lowered limit
// lets calls already in flight finish, so the highest is the bound), and
// Stats().PeakInFlight agrees.
func TestStressStrict(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	var highest atomic.Int64
	highest.Store(4)
	l, err := New(Config{
		Algorithm: AIMD{}, InitialLimit: 4, MinLimit: 2, MaxLimit: 6,
		Window: 500, MinWindowSamples: 1, Ticker: tk,
		OnLimitChange: func(_, n int) {
			for {
				h := highest.Load()
				if int64(n) <= h || highest.CompareAndSwap(h, int64(n)) {
					return
				}
			}
		},
	})
	require.NoError(t, err)
	var active, worst atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4000 {
				tok, ok := admitted(l.AcquireAt(tk.Now()))
				if !ok {
					continue
				}
				a := active.Add(1)
				if a > highest.Load() {
					worst.Store(a)
				}
				if (i+g)%5 == 0 {
					tk.Advance(100)
				}
				active.Add(-1)
				o := rampart.Success
				if (i+g)%97 == 0 {
					o = rampart.Failure
				}
				l.ReleaseAt(tok, tk.Now(), o)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, worst.Load(), "admitted beyond the highest limit")
	require.Equal(t, 0, l.InFlight())
	st := l.Stats()
	require.LessOrEqual(t, int64(st.PeakInFlight), highest.Load())
	require.NotZero(t, st.Windows)
}

// The window lock is the sentinel windowEnd == math.MaxInt64, and it holds
// at a reading of math.MaxInt64 too (a manual ticker at the end of its
// range; also where SatAdd(now, Window) saturates, so every window near the
// end of the range ends exactly on the sentinel): two Controller.Update
// calls never overlap, as the Controller contract promises ("calls never
// overlap", so Vegas and Gradient2 keep unsynchronised state). Checked
// deterministically with a Controller that releases another call from
// inside Update.
func TestWindowLockHoldsAtMaxInt64(t *testing.T) {
	tk := rampart.NewManualTicker(math.MaxInt64 - 10)
	var l *Limiter
	var depth, maxDepth int
	var other Permit
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
		depth++
		maxDepth = max(maxDepth, depth)
		if depth == 1 && other.Valid() {
			tok := other
			other = Permit{}
			l.ReleaseAt(tok, math.MaxInt64, rampart.Failure) // another goroutine's release, in effect
		}
		depth--
		return s.Limit
	}), Window: time.Second, Ticker: tk})
	require.NoError(t, err)
	a, ok := admitted(l.AcquireAt(tk.Now()))
	require.True(t, ok)
	other, ok = admitted(l.AcquireAt(tk.Now()))
	require.True(t, ok)
	tk.Set(math.MaxInt64)
	l.ReleaseAt(a, math.MaxInt64, rampart.Failure)
	require.Equal(t, 0, l.InFlight())
	require.Equal(t, 1, maxDepth, "Controller.Update ran inside another Update: the window lock did not hold")
}

// The built-in controllers give a finite result (or NaN, which the limiter
// ignores) for extreme but legal samples.
func TestAlgorithmsExtremeSamplesStayFinite(t *testing.T) {
	samples := []Sample{
		{Limit: 1, Count: 1, Samples: 1, AvgRTT: math.MaxInt64, MinRTT: math.MaxInt64, MaxInFlight: 1},
		{Limit: math.MaxInt32, Count: 1, Samples: 1, AvgRTT: 1, MinRTT: 1, MaxInFlight: math.MaxInt32},
		{Limit: math.MaxInt32, Count: math.MaxUint32, Samples: 1, AvgRTT: 0, MaxInFlight: math.MaxInt32},
		{Limit: 1, Drops: math.MaxInt64, MaxInFlight: 1},
		{Limit: 1, Count: 1, Samples: 1, AvgRTT: 0, MaxInFlight: 1},
		{Limit: 500, Count: 10, Samples: 10, AvgRTT: 1, MaxInFlight: 500},
		{Limit: 500, Count: 10, Samples: 10, AvgRTT: math.MaxInt64, MaxInFlight: 500, InFlight: math.MaxInt32},
	}
	for _, alg := range []Algorithm{Vegas{}, Gradient2{}, AIMD{}, AIMD{Timeout: 1}, Vegas{Smoothing: 0.5, ProbeInterval: 1}, Gradient2{LongWindow: math.MaxInt32, ProbeInterval: 1}} {
		c := alg.Start(20, 1, math.MaxInt32)
		for round := range 30 {
			for i, s := range samples {
				got := c.Update(s)
				require.False(t, math.IsInf(got, 0), "%T round %d sample %d: %v", alg, round, i, got)
			}
		}
	}
}

// admitted turns the (Permit, error) of an AcquireAt into the (Permit, bool)
// that the tests assert on: true when admitted.
func admitted(p Permit, err error) (Permit, bool) { return p, err == nil }

// TestUnknownResultIsAFailure: a Result other than the three constants (a
// faulty Classify's Result(7)) counts as a Failure, as rampart.Result
// documents, through ReleaseAt, Release and Do alike: the window that closes
// next holds one drop.
func TestUnknownResultIsAFailure(t *testing.T) {
	for _, form := range []string{"ReleaseAt", "Release", "Do"} {
		t.Run(form, func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 10, MinLimit: 1, MaxLimit: 10,
				Window: time.Second, MinWindowSamples: 1, Ticker: tk,
				Classify: func(context.Context, error) rampart.Result { return rampart.Result(7) }})
			require.NoError(t, err)
			switch form {
			case "ReleaseAt":
				p, err := l.AcquireAt(0)
				require.NoError(t, err)
				l.ReleaseAt(p, 10, rampart.Result(7))
			case "Release":
				p, err := l.Acquire()
				require.NoError(t, err)
				l.Release(p, rampart.Result(7))
			case "Do":
				_ = l.Do(context.Background(), func(context.Context) error { return errors.New("x") })
			}
			// Close the window with one success.
			tk.Advance(2 * time.Second)
			p, err := l.AcquireAt(tk.Now())
			require.NoError(t, err)
			l.ReleaseAt(p, tk.Now(), rampart.Success)
			require.EqualValues(t, 1, l.Stats().Windows)
			require.EqualValues(t, 1, l.Stats().Drops, "an unknown Result must count as Failure (rampart.Result doc)")
		})
	}
}

// TestGradient2OneLongTimeoutKeepsLimit: with 10 ms calls, one call in 2000
// per window timing out after 30 s (a client timeout; DefaultClassify makes
// DeadlineExceeded a Failure) counts as one call whose RTT is bounded at
// twice the long-term average, not as 3000 calls: the short-term RTT stays
// near 10 ms and the limit does not collapse (unbounded, the window mean was
// 25 ms, the gradient clamped to 0.5 and the limit fell from 116 to 12.6).
func TestGradient2OneLongTimeoutKeepsLimit(t *testing.T) {
	const rtt = 10 * time.Millisecond
	ctrl := Gradient2{ProbeInterval: -1}.Start(100, 1, 1000)
	l := 100.0
	win := func(drops int64, dropRTT time.Duration) {
		l = ctrl.Update(Sample{Limit: l, Count: 2000 - drops, Samples: 2000 - drops, Drops: drops,
			AvgRTT: rtt, DropRTT: dropRTT, MinRTT: rtt, MaxInFlight: int64(l), InFlight: int64(l) / 2})
		l = min(max(l, 1), 1000)
	}
	for range 20 {
		win(0, 0) // healthy: the long-term RTT is 10 ms
	}
	healthy := l
	for range 30 {
		win(1, 30*time.Second) // one call in 2000 hits the 30 s timeout, whatever the load
	}
	t.Logf("limit: healthy %.1f, after 30 windows with one 30 s timeout each: %.1f", healthy, l)
	require.Greater(t, l, healthy/2, "0.05 % of calls timing out, load-independent, must not collapse the limit")
	// A window mostly dropped still halves it: the bound is the gradient's floor.
	before := l
	win(1900, 30*time.Second)
	require.Less(t, l, before*0.95, "a window of 95 % timeouts must shrink the limit")
}

// TestZeroLimiterRefuses: a zero Limiter refuses every call with a zero
// Permit and a non-nil error (a nil *rampart.RejectedError in the error
// interface, as the Limiter doc says), never a nil error a caller would
// take for an admission.
func TestZeroLimiterRefuses(t *testing.T) {
	var l Limiter
	p, err := l.AcquireWaitAt(context.Background(), 0)
	require.False(t, p.Valid())
	require.True(t, err != nil, "a zero Limiter must not return a nil error")
	require.ErrorIs(t, err, rampart.ErrRejected)
	p, err = l.AcquireAt(0)
	require.False(t, p.Valid())
	require.True(t, err != nil)
}

// TestProbeEndsWhileLongCallHoldsItsSlot: a baseline probe holds the limit
// at 1; when the one call it admits hangs (a 30 s timeout), no release
// comes to close a window. The rejected calls close the overdue windows
// instead, so the probe moves on and restores the limit within a few
// windows rather than rejecting everything until the call ends.
func TestProbeEndsWhileLongCallHoldsItsSlot(t *testing.T) {
	for _, sampled := range []bool{false, true} {
		t.Run(map[bool]string{false: "At", true: "sampled"}[sampled], func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			l, err := New(Config{Algorithm: Vegas{}, InitialLimit: 20, Window: time.Second, MinWindowSamples: 1, Ticker: tk})
			require.NoError(t, err)
			acquire := func() (Permit, error) {
				if sampled {
					return l.Acquire()
				}
				return l.AcquireAt(tk.Now())
			}
			// Busy windows (not app-limited) until the first probe, due
			// after 10 windows, drops the limit to 1.
			var saved int
			for w := 0; l.Limit() > 1; w++ {
				require.Less(t, w, 30, "no probe started")
				saved = l.Limit()
				toks := make([]Permit, 0, saved)
				for range saved {
					p, err := acquire()
					require.NoError(t, err)
					toks = append(toks, p)
				}
				tk.Advance(time.Second)
				for _, p := range toks {
					l.ReleaseAt(p, tk.Now(), rampart.Success)
				}
			}
			hung, err := acquire() // the probe's one slot, held for 30 s
			require.NoError(t, err)
			closed := l.Stats().Windows
			restoredAt := time.Duration(-1)
			for i := 1; i <= 300 && restoredAt < 0; i++ { // 30 s in 100 ms steps
				tk.Advance(100 * time.Millisecond)
				for range 64 { // the sampled path checks on one rejection in 64
					if p, err := acquire(); err == nil {
						l.ReleaseAt(p, tk.Now(), rampart.Ignored)
					}
				}
				if l.Limit() > 1 {
					restoredAt = time.Duration(i) * 100 * time.Millisecond
				}
			}
			l.ReleaseAt(hung, tk.Now(), rampart.Failure)
			t.Logf("limit %d before the probe; restored to %d after %v; %d windows closed by rejections", saved, l.Limit(), restoredAt, l.Stats().Windows-closed)
			require.GreaterOrEqual(t, restoredAt, time.Duration(0), "the probe held the limit at 1 for the whole 30 s call")
			require.LessOrEqual(t, restoredAt, 8*time.Second, "the probe took too many windows to end")
		})
	}
}

// TestProbeCountsStuckCalls: when draining to the probe's limit stalls (a
// window sees less than a quarter of the excess finish), the calls still in
// flight are counted as stuck and the probe's limit rises by their number,
// so that it still admits its fresh calls; it then settles, measures and
// restores the limit it saved.
func TestProbeCountsStuckCalls(t *testing.T) {
	p := prober{every: 100, limit: 1}
	busy := Sample{Limit: 100, MaxInFlight: 100, InFlight: 100, Count: 1000, AvgRTT: time.Millisecond}
	for range 9 {
		_, handled, _ := p.step(busy)
		require.False(t, handled)
	}
	lim, handled, _ := p.step(busy) // the 10th window: the first probe
	require.True(t, handled)
	require.Equal(t, 1.0, lim)
	lim, _, _ = p.step(Sample{Limit: 1, InFlight: 60}) // 40 of the excess 99 finished: still draining
	require.Equal(t, 1.0, lim)
	require.Equal(t, 1, p.phase)
	lim, _, _ = p.step(Sample{Limit: 1, InFlight: 58}) // 2 of 59: stalled
	require.Equal(t, 59.0, lim, "the probe's 1 on top of the 58 stuck calls")
	require.Equal(t, 2, p.phase)
	lim, _, _ = p.step(Sample{Limit: 59, InFlight: 58})
	require.Equal(t, 59.0, lim)
	lim, handled, measured := p.step(Sample{Limit: 59, InFlight: 57, Count: 10, AvgRTT: time.Millisecond})
	require.True(t, handled)
	require.True(t, measured)
	require.Equal(t, 100.0, lim, "the limit from before the probe")
	// A drain that reaches the probe's limit counts nothing as stuck.
	p = prober{every: 1, limit: 1, probes: 1}
	_, _, _ = p.step(busy)
	lim, _, _ = p.step(Sample{Limit: 1, InFlight: 1})
	require.Equal(t, 1.0, lim)
	require.Equal(t, 2, p.phase)
}

// TestAIMDHoldsOnEmptyWindow: a window with no completed call and no drop
// (closed by rejections while every call in flight stalled) is no evidence:
// AIMD keeps its limit instead of growing it.
func TestAIMDHoldsOnEmptyWindow(t *testing.T) {
	c := AIMD{}.Start(10, 1, 100)
	require.Equal(t, 10.0, c.Update(Sample{Limit: 10, MaxInFlight: 10, InFlight: 10}))
	require.Equal(t, 11.0, c.Update(Sample{Limit: 10, MaxInFlight: 10, InFlight: 10, Count: 50}))
}

// TestProbeStartsWithNothingStuck: a probe whose drain stalled counts the
// calls in flight as stuck for that probe only; the next probe drains to
// its own limit.
func TestProbeStartsWithNothingStuck(t *testing.T) {
	c := Vegas{ProbeInterval: 20}.Start(100, 1, 1000)
	busy := Sample{Limit: 100, MaxInFlight: 100, InFlight: 100, Count: 1000, AvgRTT: time.Millisecond}
	for range 10 {
		c.Update(busy) // the 10th window starts the first probe
	}
	require.Equal(t, 91.0, c.Update(Sample{Limit: 1, InFlight: 90})) // stalled: 90 stuck
	c.Update(Sample{Limit: 91, InFlight: 90})
	require.Equal(t, 100.0, c.Update(Sample{Limit: 91, InFlight: 50, Count: 10, AvgRTT: time.Millisecond}))
	for range 20 {
		c.Update(busy) // the second probe starts
	}
	require.Equal(t, 1.0, c.Update(Sample{Limit: 1, InFlight: 40}), "60 of the 99 in excess finished: draining at the probe's own limit")
}

// TestWindowClosedByRejectionServesTheQueue: when a rejection closes a
// stalled window and the limit rises, the freed slots go to the queued
// waiters at once, as after a release.
func TestWindowClosedByRejectionServesTheQueue(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 { return 5 }), InitialLimit: 1,
		Window: 10 * time.Millisecond, Ticker: tk,
		Queue: QueueConfig{MaxLength: 1, Target: 10 * time.Second, Interval: 10 * time.Second}})
	require.NoError(t, err)
	hung, err := l.AcquireAt(tk.Now())
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		p, err := l.AcquireWaitAt(context.Background(), tk.Now())
		if err == nil {
			l.ReleaseAt(p, tk.Now(), rampart.Ignored)
		}
		got <- err
	}()
	for l.Stats().Queued != 1 {
		runtime.Gosched() // the waiter is queued (no clock involved)
	}
	tk.Advance(25 * time.Millisecond)
	_, err = l.AcquireWaitAt(context.Background(), tk.Now()) // the queue is full: rejected, and the overdue window closes
	require.Error(t, err)
	require.Equal(t, 5, l.Limit())
	require.NoError(t, <-got, "the waiter must get one of the freed slots")
	l.ReleaseAt(hung, tk.Now(), rampart.Ignored)
}

// TestRejectionKeepsMinWindowSamples: a rejection closes an overdue window
// only when it holds no success or enough of them; a window short of
// MinWindowSamples waits for releases.
func TestRejectionKeepsMinWindowSamples(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	var seen []int64
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 { seen = append(seen, s.Samples); return s.Limit }),
		InitialLimit: 20, MinWindowSamples: 10, Window: time.Second, Ticker: tk})
	require.NoError(t, err)
	toks := make([]Permit, 0, 20)
	for range 20 {
		p, err := l.AcquireAt(tk.Now())
		require.NoError(t, err)
		toks = append(toks, p)
	}
	for range 3 {
		tk.Advance(time.Second)
		l.ReleaseAt(toks[0], tk.Now(), rampart.Success)
		p, err := l.AcquireAt(tk.Now())
		require.NoError(t, err)
		toks[0] = p
		_, err = l.AcquireAt(tk.Now())
		require.Error(t, err)
	}
	for _, n := range seen {
		require.GreaterOrEqual(t, n, int64(10), "a window closed with %d samples", n)
	}
	for _, p := range toks {
		l.ReleaseAt(p, tk.Now(), rampart.Ignored)
	}
}

// TestZeroLimiterRefusesWithoutReadingAClock: the zero Limiter has no
// Ticker; its clockless rejections never read one.
func TestZeroLimiterRefusesWithoutReadingAClock(t *testing.T) {
	var l Limiter
	for range 200 {
		p, err := l.Acquire()
		require.False(t, p.Valid())
		require.Error(t, err)
		p, err = l.AcquirePartition(0)
		require.False(t, p.Valid())
		require.Error(t, err)
	}
}

// TestProbeEndsAtALowRateOfClocklessCalls: at ten calls a second through
// Acquire, which reads no clock on a rejection, a probe held by a hung call
// still ends within a few windows.
func TestProbeEndsAtALowRateOfClocklessCalls(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l, err := New(Config{Algorithm: Vegas{}, InitialLimit: 20, Window: time.Second, MinWindowSamples: 1, Ticker: tk})
	require.NoError(t, err)
	for w := 0; l.Limit() > 1; w++ {
		require.Less(t, w, 30, "no probe started")
		toks := make([]Permit, 0, l.Limit())
		for range l.Limit() {
			p, err := l.Acquire()
			require.NoError(t, err)
			toks = append(toks, p)
		}
		tk.Advance(time.Second)
		for _, p := range toks {
			l.ReleaseAt(p, tk.Now(), rampart.Success)
		}
	}
	hung, err := l.Acquire()
	require.NoError(t, err)
	restoredAt := time.Duration(-1)
	for i := 1; i <= 300 && restoredAt < 0; i++ { // ten arrivals a second
		tk.Advance(100 * time.Millisecond)
		if p, err := l.Acquire(); err == nil {
			l.ReleaseAt(p, tk.Now(), rampart.Ignored)
		}
		if l.Limit() > 1 {
			restoredAt = time.Duration(i) * 100 * time.Millisecond
		}
	}
	l.ReleaseAt(hung, tk.Now(), rampart.Failure)
	t.Logf("restored after %v", restoredAt)
	require.GreaterOrEqual(t, restoredAt, time.Duration(0))
	require.LessOrEqual(t, restoredAt, 12*time.Second)
}

// TestLimiterBytes gates the heap bytes of one live Limiter with the
// default Vegas, both layouts: the 288 B Limiter (a size class) with a
// line of padding before it by default (352 B), or not with Compact;
// Vegas's state adds 112 B (a Config.Queue with MaxLength 0 allocates no
// queue). A Name adds its rejection error; unnamed limiters share one.
func TestLimiterBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	const algo, queueCheck = 112, 0
	padded := map[uintptr]int64{64: 352, 128: 576}[pad.LineSize] // 64 + 288 B; 128 + 416 B
	compact := map[uintptr]int64{64: 288, 128: 416}[pad.LineSize]
	mk := func(c Config) func() any {
		return func() any {
			l, err := New(c)
			require.NoError(t, err)
			return l
		}
	}
	testkit.WantBytes(t, "default", padded+algo+queueCheck, mk(Config{}))
	testkit.WantBytes(t, "Compact", compact+algo+queueCheck, mk(Config{Compact: true}))
	a, b := mk(Config{})().(*Limiter), mk(Config{Compact: true})().(*Limiter)
	require.Same(t, a.RejectedError(), b.RejectedError(), "unnamed limiters share their rejection error")
}

// TestLimiterLayoutSeparatesWrittenWords: the words every call writes (the
// slot word and rejected, with the words every call reads on their line)
// and the window's words (written by sampled and failed releases) are at
// least a line minus a word apart, so that no cache line holds both (a
// heap object is 8-byte aligned), and so are the window and the end of
// the Limiter; the padded layout puts a line before the slot word.
func TestLimiterLayoutSeparatesWrittenWords(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is laid out for 64-bit words")
	}
	var l Limiter
	gap := pad.LineSize - 8
	readByCalls := unsafe.Offsetof(l.seed) + unsafe.Sizeof(l.seed) // the end of the slot word's group
	require.Zero(t, unsafe.Offsetof(l.slots))
	require.GreaterOrEqual(t, unsafe.Offsetof(l.win)-readByCalls, gap)
	require.GreaterOrEqual(t, unsafe.Sizeof(l)-(unsafe.Offsetof(l.win)+unsafe.Sizeof(l.win)), gap)
	var p paddedLimiter
	require.Equal(t, pad.LineSize, unsafe.Offsetof(p.l))
	require.Equal(t, uintptr(288+2*pad.Tail64), unsafe.Sizeof(l))
}

// countingAlg is an Algorithm whose controllers count their windows and
// return next (NaN: keep the limit); a pointer, so that Update compares
// it by identity.
type countingAlg struct {
	starts  int
	initial float64 // the initial limit of the last Start
	windows int
	next    float64
}

func (a *countingAlg) Start(initial, _, _ float64) Controller {
	a.starts++
	a.initial = initial
	return cbCtrl(func(s Sample) float64 { a.windows++; return a.next })
}

// TestUpdateClampsTheLimitAndKeepsTheController: Update keeps the current
// limit clamped to the new bounds (telling OnLimitChange when that moves
// it), keeps the running Controller when given the Algorithm in force and
// starts another at the kept limit when given another one; the new
// bounds hold from the next window, and InitialLimit is not applied.
func TestUpdateClampsTheLimitAndKeepsTheController(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	alg := &countingAlg{next: math.NaN()}
	var changes [][2]int
	onChange := func(o, n int) { changes = append(changes, [2]int{o, n}) }
	c := Config{Algorithm: alg, InitialLimit: 40, MaxLimit: 100, Window: 10, MinWindowSamples: 1, Ticker: tk, OnLimitChange: onChange}
	l, err := New(c)
	require.NoError(t, err)
	step := func() {
		p, err := l.AcquireAt(tk.Now())
		require.NoError(t, err)
		tk.Advance(20)
		l.ReleaseAt(p, tk.Now(), rampart.Success)
	}

	c.MaxLimit = 30
	require.NoError(t, l.Update(c))
	require.Equal(t, 30, l.Limit())
	require.Equal(t, [][2]int{{40, 30}}, changes)
	require.Equal(t, 1, alg.starts, "the same Algorithm keeps its controller")

	alg.next = 1e6 // the algorithm asks for more than MaxLimit
	step()
	require.Equal(t, 1, alg.windows)
	require.Equal(t, 30, l.Limit(), "the new MaxLimit holds at the next window")

	c.MinLimit, c.MaxLimit, c.InitialLimit = 50, 60, 7 // InitialLimit: validated, not applied
	require.NoError(t, l.Update(c))
	require.Equal(t, 50, l.Limit())
	require.Equal(t, 50, l.Config().MinLimit)

	other := &countingAlg{next: math.NaN()}
	c.Algorithm = other
	require.NoError(t, l.Update(c))
	require.Equal(t, 1, other.starts)
	require.Equal(t, 50.0, other.initial, "another Algorithm starts at the kept limit")
	step()
	require.Equal(t, 1, other.windows)
	require.Equal(t, 1, alg.windows, "the replaced controller runs no more")
	require.Equal(t, 50, l.Limit())
	require.Equal(t, [][2]int{{40, 30}, {30, 50}}, changes)

	// A window longer from the next window on: the current one keeps its end.
	c.Window = 1000
	require.NoError(t, l.Update(c))
	step() // closes the current window (due at its old end)
	require.Equal(t, 2, other.windows)
	step() // 20 ns later: inside the new 1000 ns window
	require.Equal(t, 2, other.windows)
	tk.Advance(1000)
	step()
	require.Equal(t, 3, other.windows)
	require.Zero(t, l.InFlight())
}

// TestUpdateKeepsPermitsInFlight: a lowered MaxLimit evicts no call; the
// permits above it are released normally and no call is admitted until
// the count is below it.
func TestUpdateKeepsPermitsInFlight(t *testing.T) {
	l, tk := fixed(t, 6, func(c *Config) { c.MinLimit = 1 })
	var held []Permit
	for range 6 {
		p, err := l.AcquireAt(tk.Now())
		require.NoError(t, err)
		held = append(held, p)
	}
	c := l.Config()
	c.MaxLimit = 2
	require.NoError(t, l.Update(c))
	require.Equal(t, 2, l.Limit())
	require.Equal(t, 6, l.InFlight())
	for range 4 {
		_, err := l.AcquireAt(tk.Now())
		require.ErrorIs(t, err, ErrLimited)
		l.ReleaseAt(held[0], tk.Now(), rampart.Success)
		held = held[1:]
	}
	_, err := l.AcquireAt(tk.Now()) // 2 in flight, limit 2
	require.ErrorIs(t, err, ErrLimited)
	l.ReleaseAt(held[0], tk.Now(), rampart.Success)
	p, err := l.AcquireAt(tk.Now())
	require.NoError(t, err)
	l.ReleaseAt(p, tk.Now(), rampart.Success)
	l.ReleaseAt(held[1], tk.Now(), rampart.Success)
	require.Zero(t, l.InFlight())
	require.Equal(t, uint64(5), l.Stats().Rejected)
}

// TestUpdateRefusesFixedFields: Update validates as New does, and a change
// to a field fixed at construction is a ConfigError naming it; a refused
// Update changes nothing, not even the valid bound beside the refused
// field.
func TestUpdateRefusesFixedFields(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	classify := func(context.Context, error) rampart.Result { return rampart.Success }
	onChange := func(int, int) {}
	base := Config{Name: "api", InitialLimit: 10, MaxLimit: 100, Ticker: tk, Classify: classify, OnLimitChange: onChange,
		Partitions: []Partition{{Share: 0.5}, {Share: 0.5}}, Queue: QueueConfig{MaxLength: 4}}
	for _, tc := range []struct {
		field  string
		change func(*Config)
	}{
		{"Name", func(c *Config) { c.Name = "other" }},
		{"Ticker", func(c *Config) { c.Ticker = nil }},
		{"Ticker", func(c *Config) { c.Ticker = testkit.FuncTicker(func() int64 { return 0 }) }},
		{"Ticker", func(c *Config) { c.Ticker = (*rampart.ManualTicker)(nil) }},
		{"Compact", func(c *Config) { c.Compact = true }},
		{"Classify", func(c *Config) { c.Classify = nil }},
		{"Classify", func(c *Config) { c.Classify = DefaultClassify }},
		{"OnLimitChange", func(c *Config) { c.OnLimitChange = nil }},
		{"Partitions", func(c *Config) { c.Partitions = c.Partitions[:1] }},
		{"Partitions", func(c *Config) { c.Partitions = []Partition{{Share: 0.7}, {Share: 0.7}} }},
		{"Queue.MaxLength", func(c *Config) { c.Queue.MaxLength = 0 }},
		{"Queue.Interval", func(c *Config) { c.Queue.Target, c.Queue.Interval = time.Second, time.Millisecond }},
		{"MaxLimit", func(c *Config) { c.MinLimit, c.MaxLimit = 10, 5 }},
		{"MinLimit", func(c *Config) { c.MinLimit = -1 }},
		{"InitialLimit", func(c *Config) { c.InitialLimit = -1 }},
		{"Window", func(c *Config) { c.Window = -1 }},
		{"MinWindowSamples", func(c *Config) { c.MinWindowSamples = -1 }},
		{"MaxSampleStride", func(c *Config) { c.MaxSampleStride = 3 }},
		{"Algorithm", func(c *Config) { c.Algorithm = Vegas{Smoothing: 2} }},
		{"Algorithm", func(c *Config) { c.Algorithm = cbAlg{} }}, // Start returns a nil Controller
	} {
		l, err := New(base)
		require.NoError(t, err)
		c := base
		c.MaxLimit = 5 // a valid change that must not be applied beside the refused one
		tc.change(&c)
		err = l.Update(c)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, tc.field)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		require.Equal(t, tc.field, ce.Field, err.Error())
		require.Equal(t, 10, l.Limit(), "a refused Update applied something: %v", err)
		require.Equal(t, 100, l.Config().MaxLimit)
		p, err := l.AcquireAt(tk.Now()) // the window lock was given back
		require.NoError(t, err)
		l.ReleaseAt(p, tk.Now(), rampart.Ignored)
	}
	// What Config returns is accepted as it is, the defaults filled in.
	l, err := New(Config{})
	require.NoError(t, err)
	c := l.Config()
	require.Equal(t, Vegas{}, c.Algorithm)
	c.MaxLimit = 500
	require.NoError(t, l.Update(c))
	require.NoError(t, l.Update(Config{MaxLimit: 10}), "nil fields are the defaults New filled in")
	require.Equal(t, 10, l.Limit())
}

// TestUpdateWithoutNameKeepsTheName: an empty Name in Update keeps the
// name New was given (a registry names the limiters it builds), and the
// rejection error still carries it.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l, err := New(Config{Name: "api", InitialLimit: 1, MaxLimit: 10, Ticker: tk})
	require.NoError(t, err)
	require.NoError(t, l.Update(Config{MaxLimit: 20, Ticker: tk}))
	require.Equal(t, 20, l.Config().MaxLimit)
	require.Equal(t, "api", l.Config().Name)
	p, err := l.AcquireAt(tk.Now())
	require.NoError(t, err)
	_, err = l.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrLimited)
	require.Equal(t, "api", err.(*rampart.RejectedError).Name())
	l.ReleaseAt(p, tk.Now(), rampart.Ignored)
}

// TestUpdateWhoseAlgorithmPanicsChangesNothing: an Algorithm.Start that
// panics under the window lock gives the lock back and changes nothing.
func TestUpdateWhoseAlgorithmPanicsChangesNothing(t *testing.T) {
	l, tk := fixed(t, 4, nil)
	c := l.Config()
	c.MaxLimit = 8
	c.Algorithm = cbAlgPanics{}
	require.Panics(t, func() { _ = l.Update(c) })
	require.Equal(t, 4, l.Limit())
	require.Equal(t, 4, l.Config().MaxLimit)
	c.Algorithm = AIMD{}
	require.NoError(t, l.Update(c), "the window lock was given back")
	p, err := l.AcquireAt(tk.Now())
	require.NoError(t, err)
	l.ReleaseAt(p, tk.Now(), rampart.Success)
}

type cbAlgPanics struct{}

func (cbAlgPanics) Start(_, _, _ float64) Controller { panic("start") }

// TestUpdateRaisingTheLimitServesTheQueue: an Update whose MinLimit raises
// the limit hands the freed slots to the queued calls at once, and a new
// Queue.MaxLength holds for the next arrival.
func TestUpdateRaisingTheLimitServesTheQueue(t *testing.T) {
	l, tk := fixed(t, 1, func(c *Config) { c.Queue = QueueConfig{MaxLength: 1, Target: time.Hour, Interval: time.Hour} })
	hung, err := l.AcquireAt(tk.Now())
	require.NoError(t, err)
	got := make(chan error, 2)
	wait := func() {
		p, err := l.AcquireWaitAt(context.Background(), tk.Now())
		if err == nil {
			l.ReleaseAt(p, tk.Now(), rampart.Ignored)
		}
		got <- err
	}
	go wait()
	for l.Stats().Queued != 1 {
		runtime.Gosched() // the waiter is queued (no clock involved)
	}
	_, err = l.AcquireWaitAt(context.Background(), tk.Now())
	require.ErrorIs(t, err, ErrLimited, "the queue of 1 is full")
	c := l.Config()
	c.Queue.MaxLength = 2
	require.NoError(t, l.Update(c))
	go wait()
	for l.Stats().Queued != 2 {
		runtime.Gosched()
	}
	c.MinLimit, c.MaxLimit = 3, 3
	require.NoError(t, l.Update(c))
	require.NoError(t, <-got)
	require.NoError(t, <-got)
	require.Equal(t, 3, l.Limit())
	l.ReleaseAt(hung, tk.Now(), rampart.Ignored)
	require.Zero(t, l.InFlight())
}

// TestStressUpdateRacingCalls: goroutines admit and release (plain and
// partitioned, every outcome) on a moving clock while one goroutine
// Updates the bounds, the window and the stride cap. After each Update
// returns, the limit lies within its bounds until the next; afterwards
// nothing is in flight, in a partition or lost, and the last bounds hold
// from the next admission.
func TestStressUpdateRacingCalls(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	c := Config{Algorithm: Vegas{ProbeInterval: 5}, InitialLimit: 20, MaxLimit: 64, Window: 1000, MinWindowSamples: 1, Ticker: tk,
		Partitions: []Partition{{Share: 0.5}, {Share: 0.5}}}
	l, err := New(c)
	require.NoError(t, err)
	var stop atomic.Bool
	var admittedN, releasedN atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := 0; !stop.Load() || i < 2000; i++ {
				var p Permit
				var err error
				switch g % 3 {
				case 0:
					p, err = l.AcquireAt(tk.Now())
				case 1:
					p, err = l.Acquire()
				default:
					p, err = l.AcquirePartitionAt(tk.Now(), i%2)
				}
				if err != nil {
					continue
				}
				admittedN.Add(1)
				if i%7 == 0 {
					tk.Advance(time.Duration(100 + i%50))
				}
				if g%3 == 1 {
					l.Release(p, rampart.Result(i%3))
				} else {
					l.ReleaseAt(p, tk.Now(), rampart.Result(i%3))
				}
				releasedN.Add(1)
				if i%64 == 0 {
					runtime.Gosched() // let the updater run on a busy machine
				}
			}
		})
	}
	wg.Go(func() { // a reader of the configuration, racing the updater
		for !stop.Load() {
			if got := l.Config(); got.MinLimit > got.MaxLimit || len(got.Partitions) != 2 {
				t.Errorf("Config mixes two Updates: %+v", got)
				return
			}
			runtime.Gosched()
		}
	})
	wg.Go(func() {
		defer stop.Store(true)
		for i := range 300 {
			u := c
			u.MinLimit = 1 + i%5
			u.MaxLimit = u.MinLimit + i%40
			u.Window = time.Duration(500 + i%3*500)
			u.MaxSampleStride = 1 << (i % 7)
			u.Partitions = []Partition{{Share: float64(i%5) / 10}, {Share: 0.5}}
			if err := l.Update(u); err != nil {
				t.Error(err)
				return
			}
			if lim := l.Limit(); lim < u.MinLimit || lim > u.MaxLimit {
				t.Errorf("after Update [%d, %d]: limit %d", u.MinLimit, u.MaxLimit, lim)
				return
			}
		}
	})
	wg.Wait()
	require.Equal(t, admittedN.Load(), releasedN.Load())
	require.Zero(t, l.InFlight())
	require.Zero(t, l.PartitionInFlight(0)+l.PartitionInFlight(1))
	c.MinLimit, c.MaxLimit = 3, 3
	require.NoError(t, l.Update(c))
	var held []Permit
	for range 5 {
		if p, err := l.AcquireAt(tk.Now()); err == nil {
			held = append(held, p)
		}
	}
	require.Len(t, held, 3, "the last bounds hold from the next admission")
	for _, p := range held {
		l.ReleaseAt(p, tk.Now(), rampart.Ignored)
	}
	require.Zero(t, l.InFlight())
}

// FuzzUpdate drives a limiter through admissions (plain, clock-free and
// partitioned), releases of every outcome, clock moves, valid Updates (the
// bounds, the window, the samples, the stride cap, the shares, the
// algorithm, among them the one in force) and invalid ones. After every
// step: the limit lies within the bounds in force, an Update moved it to
// the old limit clamped to the new bounds, a refused Update changed
// nothing, and the in-flight counts (total and per partition) are the
// permits held; once they are released, nothing is in flight.
func FuzzUpdate(f *testing.F) {
	f.Add([]byte{0, 0, 4, 3, 9, 1, 2, 0, 1, 2, 3, 0, 2, 1, 5, 0, 4, 30, 1, 0, 0, 0})
	f.Add([]byte{4, 0, 0, 9, 9, 9, 9, 9, 0, 0, 0, 1, 1, 3, 200, 2, 2, 2, 5, 3, 6, 1})
	f.Add([]byte{1, 1, 1, 0, 3, 255, 2, 0, 2, 1, 4, 19, 49, 0, 4, 10, 3, 5, 4, 7})
	algs := []Algorithm{nil, AIMD{}, Vegas{ProbeInterval: 3}, Gradient2{ProbeInterval: 4}}
	f.Fuzz(func(t *testing.T, ops []byte) {
		tk := rampart.NewManualTicker(0)
		c := Config{Algorithm: AIMD{}, InitialLimit: 8, MinLimit: 1, MaxLimit: 40, Window: 100, MinWindowSamples: 1, Ticker: tk,
			Partitions: []Partition{{Share: 0.5}, {Share: 0.25}}}
		l, err := New(c)
		require.NoError(t, err)
		type held struct {
			p       Permit
			part    int // -1: none
			clocked bool
		}
		var permits []held
		byte_ := func(i *int) int {
			*i++
			if *i < len(ops) {
				return int(ops[*i])
			}
			return 0
		}
		check := func(what string) {
			lim := l.Limit()
			if lim < max(c.MinLimit, 1) || lim > c.MaxLimit {
				t.Fatalf("%s: limit %d outside [%d, %d]", what, lim, c.MinLimit, c.MaxLimit)
			}
			require.Equal(t, len(permits), l.InFlight(), what)
			var parts [2]int
			for _, h := range permits {
				if h.part >= 0 {
					parts[h.part]++
				}
			}
			require.Equal(t, parts[0], l.PartitionInFlight(0), what)
			require.Equal(t, parts[1], l.PartitionInFlight(1), what)
			require.Equal(t, lim, l.Stats().Limit, what)
		}
		for i := 0; i < len(ops); i++ {
			switch op := ops[i] % 8; op {
			case 0, 1, 6: // admit
				h := held{part: -1, clocked: op != 6}
				var p Permit
				var err error
				switch op {
				case 0:
					p, err = l.AcquireAt(tk.Now())
				case 1:
					h.part = byte_(&i) % 2
					p, err = l.AcquirePartitionAt(tk.Now(), h.part)
				default:
					p, err = l.Acquire()
				}
				if err == nil {
					h.p = p
					permits = append(permits, h)
				}
				check("admit")
			case 2: // release the oldest
				if len(permits) == 0 {
					continue
				}
				h := permits[0]
				permits = permits[1:]
				o := rampart.Result(byte_(&i) % 3)
				if h.clocked {
					l.ReleaseAt(h.p, tk.Now(), o)
				} else {
					l.Release(h.p, o)
				}
				check("release")
			case 3: // the clock moves
				tk.Advance(time.Duration(byte_(&i)) * 3)
			case 4, 7: // a valid Update
				u := c
				u.MinLimit = 1 + byte_(&i)%20
				u.MaxLimit = u.MinLimit + byte_(&i)%50
				u.Window = time.Duration(1 + byte_(&i)*10)
				u.MinWindowSamples = byte_(&i) % 5
				u.MaxSampleStride = 1 << (byte_(&i) % 11)
				u.Partitions = []Partition{{Share: float64(byte_(&i)%11) / 20}, {Share: 0.25}}
				if a := byte_(&i) % (len(algs) + 1); a < len(algs) {
					u.Algorithm = algs[a]
				} // else: the Algorithm in force, whose controller is kept
				old := l.Limit()
				require.NoError(t, l.Update(u))
				c = u
				require.Equal(t, min(max(old, c.MinLimit), c.MaxLimit), l.Limit(), "the kept limit, clamped")
				check("update")
			case 5: // an invalid or refused Update changes nothing
				u := c
				u.MaxLimit = 1000
				switch byte_(&i) % 5 {
				case 0:
					u.MinLimit = -1
				case 1:
					u.MaxSampleStride = 3
				case 2:
					u.Partitions = u.Partitions[:1]
				case 3:
					u.Name = "other"
				default:
					u.Partitions = []Partition{{Share: 0.9}, {Share: 0.9}}
				}
				before := l.Limit()
				var ce *rampart.ConfigError
				require.ErrorAs(t, l.Update(u), &ce)
				require.Equal(t, before, l.Limit())
				require.Equal(t, c.MaxLimit, l.Config().MaxLimit)
				check("refused update")
			}
		}
		for _, h := range permits {
			l.ReleaseAt(h.p, tk.Now(), rampart.Ignored)
		}
		permits = nil
		check("drained")
	})
}
