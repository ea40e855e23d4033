package shed

import (
	"context"
	"errors"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
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

const interval = 100 * time.Millisecond

// fakeSource reports the signals a test sets. The atomic fields let the
// stress test change them while callers sample.
type fakeSource struct {
	sched atomic.Int64  // Signals.SchedLatency
	cpu   atomic.Uint64 // math.Float64bits of Signals.CPU
	run   atomic.Uint64 // math.Float64bits of Signals.Runnable
	reads atomic.Int64
	panic atomic.Bool
}

func newFakeSource() *fakeSource {
	f := &fakeSource{}
	f.set(-1, -1, -1)
	return f
}

func (f *fakeSource) set(sched time.Duration, cpu, run float64) {
	f.sched.Store(int64(sched))
	f.cpu.Store(math.Float64bits(cpu))
	f.run.Store(math.Float64bits(run))
}

func (f *fakeSource) Read(_ int64, s *Signals) {
	f.reads.Add(1)
	if f.panic.Load() {
		panic("source")
	}
	s.SchedLatency = time.Duration(f.sched.Load())
	s.CPU = math.Float64frombits(f.cpu.Load())
	s.Runnable = math.Float64frombits(f.run.Load())
}

// rig is a shedder on a manual clock with a fake source, and its listener's
// calls.
type rig struct {
	t   *testing.T
	s   *Shedder
	tk  *rampart.ManualTicker
	src *fakeSource
	ons []bool
}

func newRig(t *testing.T, c Config) *rig {
	t.Helper()
	r := &rig{t: t, tk: rampart.NewManualTicker(0), src: newFakeSource()}
	c.Ticker = r.tk
	c.Source = r.src
	c.OnOverload = func(on bool) { r.ons = append(r.ons, on) }
	s, err := New(c)
	require.NoError(t, err)
	r.s = s
	return r
}

// complete runs n calls that each take rt and succeed, all within the
// current bucket (their releases carry now + rt; the clock does not move).
func (r *rig) complete(n int, rt time.Duration) {
	now := r.tk.Now()
	for range n {
		p, err := r.s.AcquireAt(now)
		require.NoError(r.t, err)
		r.s.ReleaseAt(p, now+int64(rt), rampart.Success)
	}
}

// sample moves the clock one interval on and takes the sample with one call
// (released as Ignored: it counts nowhere).
func (r *rig) sample() {
	r.tk.Advance(interval)
	p, err := r.s.AcquireAt(r.tk.Now())
	if err == nil {
		r.s.ReleaseAt(p, r.tk.Now(), rampart.Ignored)
	}
}

func TestZeroConfigIsValid(t *testing.T) {
	s, err := New(Config{})
	require.NoError(t, err)
	require.NoError(t, s.Do(context.Background(), func(context.Context) error { return nil }))
	st := s.Stats()
	require.Equal(t, uint64(1), st.Admitted)
	require.False(t, st.Overloaded)
	require.Equal(t, 0, st.InFlight)
}

func TestConfigErrors(t *testing.T) {
	var nilTicker *rampart.ManualTicker
	var nilSource *RuntimeSource
	for _, tc := range []struct {
		field string
		c     Config
	}{
		{"SampleInterval", Config{SampleInterval: -1}},
		{"SampleInterval", Config{SampleInterval: time.Microsecond}},
		{"Window", Config{Window: -1}},
		{"Window", Config{SampleInterval: time.Second, Window: 500 * time.Millisecond}},
		{"Window", Config{SampleInterval: time.Millisecond, Window: 2 * time.Second}},
		{"CoolOff", Config{CoolOff: -time.Second}},
		{"Hysteresis", Config{Hysteresis: -0.1}},
		{"Hysteresis", Config{Hysteresis: 1}},
		{"Hysteresis", Config{Hysteresis: math.NaN()}},
		{"SchedLatencyThreshold", Config{SchedLatencyThreshold: -1}},
		{"SchedLatencyThreshold", Config{SchedLatencyThreshold: time.Nanosecond}},
		{"CPUThreshold", Config{CPUThreshold: 1.5}},
		{"CPUThreshold", Config{CPUThreshold: -0.5}},
		{"CPUThreshold", Config{CPUThreshold: math.NaN()}},
		{"RunnableThreshold", Config{RunnableThreshold: -1}},
		{"RunnableThreshold", Config{RunnableThreshold: math.Inf(1)}},
		{"InFlightThreshold", Config{InFlightThreshold: -1}},
		{"LatencyThreshold", Config{LatencyThreshold: -1}},
		{"Ignore", Config{Ignore: 1 << 7}},
		{"Priorities", Config{Priorities: -1}},
		{"Priorities", Config{Priorities: 65}},
		{"PriorityReserve", Config{PriorityReserve: -0.1}},
		{"PriorityReserve", Config{PriorityReserve: 1}},
		{"PriorityReserve", Config{Priorities: 5, PriorityReserve: 0.25}},
		{"PriorityReserve", Config{Priorities: 12}}, // the default 0.1 times 11 levels
		{"Ticker", Config{Ticker: nilTicker}},
		{"Source", Config{Source: nilSource}},
		{"Source", Config{Source: SourceFunc(nil)}},
	} {
		_, err := New(tc.c)
		testkit.RequireConfigError(t, err, "shed", tc.field)
	}
	_, err := New(Config{Priorities: 11}) // 10 levels below the first × 0.1 reaches 1
	testkit.RequireConfigError(t, err, "shed", "PriorityReserve")
	_, err = New(Config{Priorities: 10})
	require.NoError(t, err)
}

func TestNotEngagedAdmitsEveryCall(t *testing.T) {
	r := newRig(t, Config{})
	r.src.set(time.Millisecond, 0.5, 1)
	r.complete(100, time.Millisecond)
	r.sample()
	now := r.tk.Now()
	for range 1000 {
		_, err := r.s.AcquireAt(now)
		require.NoError(t, err)
	}
	st := r.s.Stats()
	require.False(t, st.Overloaded)
	require.Equal(t, 1000, st.InFlight)
	require.Zero(t, st.Rejected)
	require.Empty(t, r.ons)
}

func TestEngagesAtTheThreshold(t *testing.T) {
	for _, tc := range []struct {
		name       string
		c          Config
		below, at  func(r *rig)
		wantSignal Signal
	}{
		{"SchedLatency", Config{},
			func(r *rig) { r.src.set(10*time.Millisecond-1, -1, -1) },
			func(r *rig) { r.src.set(10*time.Millisecond, -1, -1) }, SchedLatency},
		{"CPU", Config{},
			func(r *rig) { r.src.set(-1, 0.89, -1) },
			func(r *rig) { r.src.set(-1, 0.9, -1) }, CPU},
		{"Runnable", Config{RunnableThreshold: 2},
			func(r *rig) { r.src.set(-1, -1, 1.99) },
			func(r *rig) { r.src.set(-1, -1, 2) }, Runnable},
		{"InFlight", Config{InFlightThreshold: 3},
			func(r *rig) { r.hold(2) },
			func(r *rig) { r.hold(1) }, InFlight},
		{"Latency", Config{LatencyThreshold: 20 * time.Millisecond},
			func(r *rig) { r.complete(10, 20*time.Millisecond-1) },
			func(r *rig) { r.complete(10, 20*time.Millisecond) }, Latency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.c)
			tc.below(r)
			r.sample()
			require.False(t, r.s.Overloaded(), "below the threshold")
			tc.at(r)
			r.sample()
			require.True(t, r.s.Overloaded(), "at the threshold")
			require.Equal(t, []bool{true}, r.ons)
			st := r.s.Stats()
			require.Equal(t, tc.wantSignal, st.Trigger)
			require.Equal(t, uint64(1), st.Overloads)
		})
	}
}

// hold admits n calls and keeps them in flight.
func (r *rig) hold(n int) []Permit {
	ps := make([]Permit, n)
	for i := range ps {
		p, err := r.s.AcquireAt(r.tk.Now())
		require.NoError(r.t, err)
		ps[i] = p
	}
	return ps
}

func TestIgnoredSignalsNeverEngage(t *testing.T) {
	r := newRig(t, Config{Ignore: SchedLatency | CPU})
	r.src.set(time.Hour, 1, -1)
	for range 10 {
		r.sample()
	}
	require.False(t, r.s.Overloaded())
	r.src.set(time.Hour, 1, 100)
	r.sample()
	require.True(t, r.s.Overloaded())
	require.Equal(t, Runnable, r.s.Stats().Trigger)
}

func TestCapIsMaxPassTimesMinRT(t *testing.T) {
	r := newRig(t, Config{})
	r.complete(200, 8*time.Millisecond) // 2000 calls/s at 8 ms
	r.sample()
	r.complete(100, 2*time.Millisecond) // 1000 calls/s at 2 ms
	r.src.set(20*time.Millisecond, -1, -1)
	r.sample()
	st := r.s.Stats()
	require.True(t, st.Overloaded)
	require.InDelta(t, 2000, st.MaxPass, 1e-9)
	require.Equal(t, 2*time.Millisecond, st.MinRT)
	require.Equal(t, 4, st.Cap, "2000/s × 2 ms")
	require.Equal(t, 5, st.Limit, "the cap and the call that waits for a core")

	now := r.tk.Now()
	held := r.hold(5)
	_, err := r.s.AcquireAt(now)
	require.ErrorIs(t, err, ErrOverloaded)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Same(t, r.s.RejectedError(), err)
	r.s.ReleaseAt(held[0], now, rampart.Ignored)
	p, err := r.s.AcquireAt(now)
	require.NoError(t, err, "a slot under the cap is free again")
	require.True(t, p.Valid())
	st = r.s.Stats()
	require.Equal(t, uint64(1), st.Rejected)
	require.Equal(t, 5, st.InFlight)
}

func TestCapRoundsTheBandwidthDelayProduct(t *testing.T) {
	for _, tc := range []struct {
		n    int
		rt   time.Duration
		want int
	}{
		{198, time.Millisecond, 2}, // 1.98
		{202, time.Millisecond, 2}, // 2.02
		{250, time.Millisecond, 3}, // 2.5
		{10, time.Microsecond, 1},  // 0.0001: at least one
	} {
		r := newRig(t, Config{})
		r.complete(tc.n, tc.rt)
		r.src.set(time.Second, -1, -1)
		r.sample()
		require.Equal(t, tc.want, r.s.Stats().Cap, "%d calls in 100 ms at %v", tc.n, tc.rt)
	}
}

func TestWindowForgetsOldBuckets(t *testing.T) {
	r := newRig(t, Config{Window: 300 * time.Millisecond})
	r.complete(1000, time.Millisecond) // 10000/s
	r.sample()
	r.src.set(time.Second, -1, -1)
	for range 2 {
		r.complete(100, 10*time.Millisecond) // 1000/s at 10 ms
		r.sample()
	}
	require.Equal(t, 10, r.s.Stats().Cap, "10000/s × 1 ms, the first bucket still in the window")
	r.complete(100, 10*time.Millisecond)
	r.sample()
	require.Equal(t, 10, r.s.Stats().Cap, "1000/s × 10 ms once the first bucket left the window")
	require.Equal(t, 10*time.Millisecond, r.s.Stats().MinRT)
	require.InDelta(t, 1000, r.s.Stats().MaxPass, 1e-9)
}

func TestNoCapBeforeAnyCompletion(t *testing.T) {
	r := newRig(t, Config{})
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.True(t, r.s.Overloaded())
	require.Zero(t, r.s.Stats().Cap)
	r.hold(10000)
	require.Zero(t, r.s.Stats().Rejected)
}

func TestFailureAndIgnoredReleasesAreNoEvidence(t *testing.T) {
	r := newRig(t, Config{})
	now := r.tk.Now()
	for _, res := range []rampart.Result{rampart.Failure, rampart.Ignored, rampart.Result(9)} {
		p, err := r.s.AcquireAt(now)
		require.NoError(t, err)
		r.s.ReleaseAt(p, now+int64(time.Millisecond), res)
	}
	r.sample()
	st := r.s.Stats()
	require.Zero(t, st.MaxPass)
	require.Zero(t, st.MinRT)
	require.Equal(t, 0, st.InFlight)
	require.Equal(t, uint64(4), st.Admitted)
}

// engaged returns a rig engaged with a cap of 2 (100 calls of 2 ms in a
// bucket: 1000/s × 2 ms) and the signals at 20 ms, above the threshold.
func engaged(t *testing.T, c Config) *rig {
	r := newRig(t, c)
	r.complete(100, 2*time.Millisecond)
	r.src.set(20*time.Millisecond, -1, -1)
	r.sample()
	require.True(t, r.s.Overloaded())
	require.Equal(t, 2, r.s.Stats().Cap)
	return r
}

func TestReleasesAfterTheCoolOff(t *testing.T) {
	r := engaged(t, Config{})
	held := r.hold(3)
	_, err := r.s.AcquireAt(r.tk.Now())
	require.ErrorIs(t, err, ErrOverloaded)
	dropAt := r.tk.Now()
	for _, p := range held {
		r.s.ReleaseAt(p, dropAt, rampart.Success)
	}
	r.src.set(time.Millisecond, -1, -1) // far below the release level
	for r.tk.Now()+int64(interval) < dropAt+int64(time.Second) {
		r.sample()
		require.True(t, r.s.Overloaded(), "within the cool-off after the last rejection, at %v", time.Duration(r.tk.Now()-dropAt))
	}
	r.sample() // the first sample a whole cool-off after the drop
	require.False(t, r.s.Overloaded())
	require.Equal(t, []bool{true, false}, r.ons)
	_, err = r.s.AcquireAt(r.tk.Now())
	require.NoError(t, err)
}

func TestStaysEngagedWhileItSheds(t *testing.T) {
	r := engaged(t, Config{})
	r.src.set(time.Millisecond, -1, -1) // shedding holds the signals down
	for range 50 {
		now := r.tk.Now()
		held := r.hold(r.s.Stats().Limit) // the cap, or its probe
		_, err := r.s.AcquireAt(now)      // the offered load is still above the cap
		require.ErrorIs(t, err, ErrOverloaded)
		for _, p := range held {
			r.s.ReleaseAt(p, now+int64(2*time.Millisecond), rampart.Success)
		}
		r.complete(100-len(held), 2*time.Millisecond)
		r.sample()
		require.True(t, r.s.Overloaded())
	}
	require.Equal(t, []bool{true}, r.ons, "one engagement, no flapping")
}

func TestSignalAtTheThresholdDoesNotOscillate(t *testing.T) {
	r := newRig(t, Config{})
	const th = 10 * time.Millisecond
	// Off: a signal that hovers just under the threshold never engages.
	for i := range 50 {
		r.src.set(th-time.Duration(i%3+1)*100*time.Microsecond, -1, -1)
		r.sample()
	}
	require.False(t, r.s.Overloaded())
	// At the threshold, then hovering around it inside the band (above
	// threshold·0.8): engaged once, and it stays engaged with no rejection.
	r.src.set(th, -1, -1)
	r.sample()
	for i := range 50 {
		r.src.set(th+time.Duration(i%5-2)*time.Millisecond, -1, -1) // 8–12 ms
		r.sample()
		require.True(t, r.s.Overloaded(), "sample %d inside the hysteresis band", i)
	}
	// Below the release level with no rejection for a cool-off: released
	// once, and hovering below the threshold again does not re-engage.
	r.src.set(th*8/10-1, -1, -1)
	r.sample()
	require.False(t, r.s.Overloaded())
	for i := range 50 {
		r.src.set(th-time.Duration(i%3+1)*time.Millisecond, -1, -1)
		r.sample()
	}
	require.Equal(t, []bool{true, false}, r.ons)
	require.Equal(t, uint64(1), r.s.Stats().Overloads)
}

func TestUnknownSignalsNeitherEngageNorHold(t *testing.T) {
	r := engaged(t, Config{})
	r.src.set(-1, -1, -1)
	r.sample()
	require.False(t, r.s.Overloaded(), "no rejection and no known signal: released")
}

func TestShedsTheLeastImportantFirst(t *testing.T) {
	r := newRig(t, Config{Priorities: 3})
	r.complete(100, 10*time.Millisecond) // 1000/s × 10 ms: a cap of 10
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.Equal(t, 10, r.s.Stats().Cap)
	now := r.tk.Now()
	admit := func(p int) error {
		_, err := r.s.AcquirePriorityAt(now, p)
		return err
	}
	for range 9 {
		require.NoError(t, admit(2))
	}
	// Levels admitted up to 11, 10 and 9 in flight: the limit of 11 (the
	// cap and the call that waits for a core) less a step of ⌈11·0.1⌉.
	require.ErrorIs(t, admit(2), ErrOverloaded, "the least important is shed at 9")
	require.ErrorIs(t, admit(7), ErrOverloaded, "an out-of-range level is the least important")
	require.ErrorIs(t, admit(-1), ErrOverloaded, "a negative level is the least important")
	require.NoError(t, admit(1))
	require.ErrorIs(t, admit(1), ErrOverloaded, "the middle level is shed at 10")
	require.NoError(t, admit(0))
	require.ErrorIs(t, admit(0), ErrOverloaded, "the most important has the whole limit")
	require.Equal(t, 11, r.s.InFlight())
}

func TestPriorityLimitsFloorAtOne(t *testing.T) {
	r := newRig(t, Config{Priorities: 4, PriorityReserve: 0.3})
	r.complete(10, 10*time.Millisecond) // 100/s × 10 ms: a cap of 1
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.Equal(t, 1, r.s.Stats().Cap)
	p, err := r.s.AcquirePriorityAt(r.tk.Now(), 3)
	require.NoError(t, err, "every level may run one call")
	_, err = r.s.AcquirePriorityAt(r.tk.Now(), 3)
	require.ErrorIs(t, err, ErrOverloaded, "the least important level, one call")
	p0, err := r.s.AcquirePriorityAt(r.tk.Now(), 0)
	require.NoError(t, err, "the most important has the limit of 2: the cap and the call that waits for a core")
	_, err = r.s.AcquirePriorityAt(r.tk.Now(), 0)
	require.ErrorIs(t, err, ErrOverloaded)
	r.s.ReleaseAt(p, r.tk.Now(), rampart.Ignored)
	r.s.ReleaseAt(p0, r.tk.Now(), rampart.Ignored)
}

func TestSampleOncePerInterval(t *testing.T) {
	r := newRig(t, Config{})
	for range 100 {
		r.hold(1)
	}
	require.Zero(t, r.src.reads.Load(), "not due")
	r.tk.Advance(interval - 1)
	r.hold(1)
	require.Zero(t, r.src.reads.Load(), "not due yet")
	r.tk.Advance(1)
	r.hold(3)
	require.Equal(t, int64(1), r.src.reads.Load())
	r.tk.Advance(5 * interval) // a long gap: one sample, the next due an interval later
	r.hold(3)
	require.Equal(t, int64(2), r.src.reads.Load())
	require.Equal(t, uint64(2), r.s.Stats().Samples)
}

func TestSourcePanicIsRecovered(t *testing.T) {
	r := engaged(t, Config{})
	r.src.panic.Store(true)
	r.sample()
	r.sample()
	require.Equal(t, uint64(2), r.s.Stats().ListenerPanics)
	require.True(t, r.s.Overloaded(), "the state holds")
	r.src.panic.Store(false)
	r.src.set(-1, -1, -1)
	r.sample()
	require.False(t, r.s.Overloaded(), "sampling goes on")
}

func TestSourceGoexitKeepsTheShedderAlive(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	exit := atomic.Bool{}
	s, err := New(Config{Ticker: tk, Source: SourceFunc(func(int64, *Signals) {
		if exit.Load() {
			testkit.Goexit()
		}
	})})
	require.NoError(t, err)
	exit.Store(true)
	tk.Advance(interval)
	_, goexited := testkit.Run(func() { _, _ = s.Acquire() })
	require.True(t, goexited)
	exit.Store(false)
	tk.Advance(interval)
	p, err := s.Acquire()
	require.NoError(t, err)
	s.Release(p, rampart.Success)
	require.Equal(t, uint64(1), s.Stats().Samples, "the sample lock was given back")
}

func TestListenerPanicIsRecovered(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	src := newFakeSource()
	s, err := New(Config{Ticker: tk, Source: src, OnOverload: func(bool) { panic("listener") }})
	require.NoError(t, err)
	src.set(time.Second, -1, -1)
	tk.Advance(interval)
	_, err = s.Acquire()
	require.NoError(t, err)
	require.True(t, s.Overloaded())
	require.Equal(t, uint64(1), s.Stats().ListenerPanics)
}

func TestDoReturnsTheUserErrorUnchanged(t *testing.T) {
	r := newRig(t, Config{})
	mine := errors.New("mine")
	require.Same(t, mine, r.s.Do(context.Background(), func(context.Context) error { return mine }))
	v, err := Call(context.Background(), r.s, func(context.Context) (int, error) { return 7, mine })
	require.Equal(t, 7, v)
	require.Same(t, mine, err)
	require.Equal(t, 0, r.s.InFlight())
}

func TestDoRejectsWhileOverloadedAtTheCap(t *testing.T) {
	r := engaged(t, Config{})
	r.hold(3) // the cap of 2 and the call that waits for a core
	ran := false
	err := r.s.Do(context.Background(), func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, ErrOverloaded)
	require.False(t, ran)
	v, err := Call(context.Background(), r.s, func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Zero(t, v)
	err = r.s.DoPriority(context.Background(), 0, func(context.Context) error { return nil })
	require.ErrorIs(t, err, ErrOverloaded)
}

func TestDoReleasesWhenFnPanics(t *testing.T) {
	r := newRig(t, Config{})
	panicked, _ := testkit.Run(func() {
		_ = r.s.Do(context.Background(), func(context.Context) error { panic("fn") })
	})
	require.Equal(t, "fn", panicked)
	_, goexited := testkit.Run(func() {
		_, _ = Call(context.Background(), r.s, func(context.Context) (int, error) { testkit.Goexit(); return 0, nil })
	})
	require.True(t, goexited)
	require.Equal(t, 0, r.s.InFlight())
	r.sample()
	require.Zero(t, r.s.Stats().MaxPass, "released as Ignored: no completion counted")
}

func TestDefaultClassify(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Equal(t, rampart.Success, DefaultClassify(context.Background(), nil))
	require.Equal(t, rampart.Success, DefaultClassify(context.Background(), errors.New("app")))
	require.Equal(t, rampart.Ignored, DefaultClassify(ctx, context.Canceled))
	require.Equal(t, rampart.Failure, DefaultClassify(context.Background(), context.DeadlineExceeded))
	require.Equal(t, rampart.Failure, DefaultClassify(context.Background(), unnamedRejection))
}

func TestRejectedErrorNamesTheInstance(t *testing.T) {
	s, err := New(Config{Name: "api"})
	require.NoError(t, err)
	require.EqualError(t, s.RejectedError(), `shed "api": overloaded`)
	u, err := New(Config{})
	require.NoError(t, err)
	require.Same(t, unnamedRejection, u.RejectedError(), "unnamed shedders share their rejection")
}

func TestSignalString(t *testing.T) {
	require.Equal(t, "sched-latency", SchedLatency.String())
	require.Equal(t, "latency", Latency.String())
	require.Equal(t, "none", Signal(0).String())
	require.Equal(t, "signals", (CPU | Runnable).String())
}

func TestStatsCountAdmissionsAcrossTheWrap(t *testing.T) {
	r := newRig(t, Config{})
	// Put the slot word's admission count near its wrap, as 2^32 calls would.
	wrap := uint64(math.MaxUint32-2) << 32
	r.s.slots.Store(int64(wrap))
	r.s.admitted.Store(math.MaxUint32 - 2)
	r.hold(5)
	require.Equal(t, uint64(math.MaxUint32+3), r.s.Stats().Admitted)
	r.sample()
	r.hold(1)
	require.Equal(t, uint64(math.MaxUint32+5), r.s.Stats().Admitted) // the sample's own call and this one
}

// TestStressInFlightReturnsToZero: goroutines admit and release, half with
// the primitives and half with the shorthands (sampled or not), through the
// overload's engagement and release, the clock moving under them and the
// source flipping; in the end nothing is in flight and every call was
// either admitted or rejected.
func TestStressInFlightReturnsToZero(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	src := newFakeSource()
	s, err := New(Config{Ticker: tk, Source: src, SampleInterval: time.Millisecond, Window: 10 * time.Millisecond,
		CoolOff: 5 * time.Millisecond, Priorities: 3, OnOverload: func(bool) {}})
	require.NoError(t, err)
	const workers, calls = 8, 2000
	var wg sync.WaitGroup
	var attempts, admitted, rejected atomic.Uint64
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				if i%50 == 0 {
					tk.Advance(time.Millisecond)
				}
				if w == 0 && i%100 == 0 {
					if i%200 == 0 {
						src.set(time.Second, -1, -1)
					} else {
						src.set(-1, -1, -1)
					}
				}
				attempts.Add(1)
				var p Permit
				var err error
				if w%2 == 0 {
					p, err = s.AcquirePriorityAt(tk.Now(), i%3)
				} else {
					p, err = s.AcquirePriority(i % 3) // the shorthand: sampled or not
				}
				if err != nil {
					require.ErrorIs(t, err, ErrOverloaded)
					rejected.Add(1)
					continue
				}
				admitted.Add(1)
				if i%7 == 0 {
					runtime.Gosched() // hold it across others' calls
				}
				if w%2 == 0 {
					s.ReleaseAt(p, tk.Now(), rampart.Result(i%4))
				} else {
					s.Release(p, rampart.Result(i%4))
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	require.Equal(t, 0, st.InFlight)
	require.Equal(t, attempts.Load(), st.Admitted+st.Rejected)
	require.Equal(t, admitted.Load(), st.Admitted)
	require.Equal(t, rejected.Load(), st.Rejected)
	require.Equal(t, uint64(workers*calls), attempts.Load())
	require.NotZero(t, st.Overloads)
}

func TestAdmitAndReleaseAllocs(t *testing.T) {
	r := engaged(t, Config{})
	now := r.tk.Now()
	testkit.WantAllocs(t, "AcquireAt+ReleaseAt", 0, func() {
		p, _ := r.s.AcquireAt(now)
		r.s.ReleaseAt(p, now, rampart.Success)
	})
	testkit.WantAllocs(t, "Acquire+Release", 0, func() {
		p, _ := r.s.AcquirePriority(1)
		r.s.Release(p, rampart.Success)
	})
	held := r.hold(2)
	testkit.WantAllocs(t, "rejection", 0, func() { _, _ = r.s.AcquirePriorityAt(now, 1) })
	for _, p := range held {
		r.s.ReleaseAt(p, now, rampart.Success)
	}
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	testkit.WantAllocs(t, "Do", 0, func() { _ = r.s.Do(ctx, fn) })
	testkit.WantAllocs(t, "Call", 0, func() {
		_, _ = Call(ctx, r.s, func(context.Context) (int, error) { return 1, nil })
	})
	testkit.WantAllocs(t, "Stats", 0, func() { _ = r.s.Stats() })
}

func TestSampleAllocs(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	s, err := New(Config{Ticker: tk}) // the runtime source
	require.NoError(t, err)
	testkit.WantAllocs(t, "a sample with the RuntimeSource", 0, func() {
		tk.Advance(interval)
		p, _ := s.AcquireAt(tk.Now())
		s.ReleaseAt(p, tk.Now(), rampart.Success)
	})
}

// TestShedderBytes: the bytes a Shedder costs, both layouts, with the
// default window (10 buckets) and with a Source of the caller's (the
// RuntimeSource's own bytes besides).
func TestShedderBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 || pad.LineSize != 64 {
		t.Skip("the sizes are for 64-bit platforms with 64 B lines")
	}
	src := SourceFunc(func(int64, *Signals) {})
	mk := func(c Config) func() any {
		return func() any {
			c.Source = src
			s, err := New(c)
			if err != nil {
				panic(err)
			}
			return s
		}
	}
	require.Equal(t, uintptr(16), unsafe.Sizeof(Permit{}), "a Permit is two words")
	require.Equal(t, uintptr(384), unsafe.Sizeof(Shedder{}))
	require.Equal(t, uintptr(448), unsafe.Sizeof(paddedShedder{}))
	const buckets = 10 * 32
	// Both are size classes, multiples of 64 B: an instance starts a line,
	// and so does the padded layout's hot group (48 B, one line).
	testkit.WantBytes(t, "default", 448+buckets, mk(Config{}))
	testkit.WantBytes(t, "Compact", 384+buckets, mk(Config{Compact: true}))
	testkit.WantBytes(t, "RuntimeSource", runtimeSourceBytes(), func() any { return NewRuntimeSource() })
	if runtime.Version() >= "go1.26" && runtime.Version() < "go1.27" {
		require.Equal(t, int64(3120), runtimeSourceBytes(), "the figure RuntimeSource's doc gives")
	}
}

// runtimeSourceBytes is what NewRuntimeSource allocates: the struct (in
// its size class), the previous counts, and the histogram metrics.Read
// fills (its header and its counts; the buckets are the runtime's).
func runtimeSourceBytes() int64 {
	n := len(NewRuntimeSource().prev)
	counts := sizeClass(int64(8 * n))
	return sizeClass(int64(unsafe.Sizeof(RuntimeSource{}))) + counts + sizeClass(int64(unsafe.Sizeof(metrics.Float64Histogram{}))) + counts
}

// sizeClass rounds n up to the allocator's size class, for the sizes
// above (as runtime/sizeclasses.go lists them).
func sizeClass(n int64) int64 {
	for _, c := range []int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048} {
		if n <= c {
			return c
		}
	}
	return n
}

// TestLayoutSeparatesWrittenWords: the hot words (written by every call)
// and the read-mostly words (read by every call) are at least a line minus
// a word apart, so no cache line holds both (a heap object is 8-byte
// aligned); the padded layout puts a line before the hot words, and the
// read-mostly words are a line minus a word from the Shedder's end.
// The constants fail to build (a constant overflow) on a platform where
// the distances are short of a line minus a word, so that a vet or a test
// build for arm64, ppc64 or s390x (128 and 256 B lines) checks them there.
func TestLayoutSeparatesWrittenWords(t *testing.T) {
	var s Shedder
	const (
		_ = unsafe.Offsetof(s.next) - (unsafe.Offsetof(s.lastDrop) + 8) - (pad.LineSize - 8)
		_ = unsafe.Sizeof(s) - (unsafe.Offsetof(s.stride) + 4) - (pad.LineSize - 8)
	)
	hotEnd := unsafe.Offsetof(s.lastDrop) + 8
	mostlyStart := unsafe.Offsetof(s.next)
	mostlyEnd := unsafe.Offsetof(s.stride) + 4
	require.GreaterOrEqual(t, mostlyStart-hotEnd, pad.LineSize-8, "hot and read-mostly words")
	require.GreaterOrEqual(t, unsafe.Sizeof(s)-mostlyEnd, pad.LineSize-8, "read-mostly words and the Shedder's end")
	var p paddedShedder
	require.Equal(t, pad.LineSize, unsafe.Offsetof(p.s))
}

func TestRuntimeSourceReadsTheRuntime(t *testing.T) {
	r := NewRuntimeSource()
	var wg sync.WaitGroup
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for range 100 {
				runtime.Gosched()
			}
		})
	}
	wg.Wait()
	runtime.GC() // the CPU classes move at the end of a GC cycle
	s := Signals{SchedLatency: -1, CPU: -1, Runnable: -1}
	r.Read(0, &s)
	require.GreaterOrEqual(t, s.SchedLatency, time.Duration(0), "thousands of scheduling events")
	require.Less(t, s.SchedLatency, time.Minute)
	require.GreaterOrEqual(t, s.CPU, 0.0)
	require.LessOrEqual(t, s.CPU, 1.0)
	require.GreaterOrEqual(t, s.Runnable, 0.0)
	s = Signals{SchedLatency: -1, CPU: -1, Runnable: -1}
	r.Read(0, &s)
	require.Equal(t, -1.0, s.CPU, "no GC since the previous reading: unknown")
}

// TestSchedLatencyIsTheChangeBetweenReadings: the percentile is of the
// events since the previous reading, not of the cumulative histogram.
func TestSchedLatencyIsTheChangeBetweenReadings(t *testing.T) {
	h := &metrics.Float64Histogram{
		Buckets: []float64{0, 1e-6, 1e-3, 1e-2, 1e-1, math.Inf(1)},
		Counts:  []uint64{1000, 1000, 0, 0, 5},
	}
	prev := []uint64{0, 0, 0, 0, 0}
	require.Equal(t, 1e-6, quantileOf(h, prev, 2005, 0.99), "cumulative: the p99 is in [1µs, 1ms)")
	prev = []uint64{1000, 1000, 0, 0, 0}
	h.Counts = []uint64{1000, 1001, 0, 0, 5}
	require.Equal(t, 1e-1, quantileOf(h, prev, 6, 0.99), "since the previous reading: five of six events took 100 ms or more")
	h.Counts = []uint64{1000, 1000, 0, 0, 105}
	require.Equal(t, 1e-1, quantileOf(h, prev, 105, 0.99), "the unbounded bucket gives its lower bound")
	h.Buckets[0] = math.Inf(-1) // the runtime's first bucket: (−Inf, 0)
	h.Counts = []uint64{1100, 1000, 0, 0, 0}
	require.Equal(t, 0.0, quantileOf(h, prev, 100, 0.99), "the first bucket's lower bound is 0")
}

// TestStatsCountAnAdmissionBeingUndone: a sample that reads the slot word
// between a rejected admission's add and its undo counts one admission
// too many, which the next reading takes back (it never wraps to 2^32).
func TestStatsCountAnAdmissionBeingUndone(t *testing.T) {
	r := newRig(t, Config{})
	r.hold(3)
	r.s.slots.Add(admitOne) // an admission attempt in progress
	r.tk.Advance(interval)
	r.s.sampleAt(r.tk.Now())
	r.s.slots.Add(-admitOne) // its undo: rejected
	st := r.s.Stats()
	require.Equal(t, uint64(3), st.Admitted)
	require.Equal(t, 3, st.InFlight)
}

// serveModel runs one sample interval of a model server with procs cores
// and calls of work w each, at the cap: the offered load exceeds the cap,
// so the calls in flight are the most important level's limit n; with n
// at or below procs each call takes w, beyond it the cores are shared and
// each takes w·n/procs (processor sharing). One arrival beyond the cap is
// rejected in each interval, as under a real overload. It returns n.
func (r *rig) serveModel(procs int, w time.Duration) int {
	n := int(r.s.limitOf(r.s.capw.Load(), 0))
	require.NotZero(r.t, r.s.capw.Load(), "engaged")
	lat := w
	if n > procs {
		lat = w * time.Duration(n) / time.Duration(procs)
	}
	done := int(int64(interval) * int64(min(n, procs)) / int64(w))
	now := r.tk.Now()
	held := r.hold(n)
	_, err := r.s.AcquireAt(now)
	require.ErrorIs(r.t, err, ErrOverloaded, "the cap binds at %d", n)
	for _, p := range held {
		r.s.ReleaseAt(p, now+int64(lat), rampart.Success)
	}
	r.complete(done-n, lat)
	r.sample()
	return n
}

// TestCapProbesUpFromAnEstimateTooLow: by Little's law a bucket's
// completions per second times its mean latency is its mean calls in
// flight, so maxPass × minRT never exceeds the most calls in flight of the
// window: a cap below the cores (measured while the cores were taken by
// something else) would hold itself there for as long as the overload
// lasts, each core-starved window confirming the last. The cap probes up
// one sample in eight, as BBR's gain cycle does, and climbs to the cores.
func TestCapProbesUpFromAnEstimateTooLow(t *testing.T) {
	const procs, w = 4, 2 * time.Millisecond
	r := newRig(t, Config{})
	r.complete(50, w) // 500/s × 2 ms: a cap of 1, as when three of the four cores were busy elsewhere
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.Equal(t, 1, r.s.Stats().Cap)
	for range 24 { // a call more each gain cycle of 8 samples
		r.serveModel(procs, w)
	}
	st := r.s.Stats()
	require.Equal(t, procs, st.Cap, "the cap reached the cores")
	require.True(t, st.Overloaded)
	for range 40 {
		n := r.serveModel(procs, w)
		require.InDelta(t, procs, n, 1, "within one of the cores")
	}
}

// TestCapFollowsTheCoresDown: a cap measured while the process had more
// cores comes down to them within a window once they are gone, and the
// probes do not ratchet it up past them: a probe that finds no idle core
// finds a longer latency, which minRT ignores, and no more completions.
func TestCapFollowsTheCoresDown(t *testing.T) {
	const procs, w = 2, 2 * time.Millisecond
	r := newRig(t, Config{})
	r.complete(400, w) // 4000/s × 2 ms: a cap of 8, from eight cores
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.Equal(t, 8, r.s.Stats().Cap)
	for range 32 { // a quarter less each gain cycle of 8 samples
		r.serveModel(procs, w)
	}
	require.Equal(t, procs, r.s.Stats().Cap, "the cap came down to the cores")
	for range 40 {
		n := r.serveModel(procs, w)
		require.InDelta(t, procs, n, 1, "within one of the cores")
		require.Equal(t, procs, r.s.Stats().Cap)
	}
}

// TestCapHoldsWhenNoCallCompletes: a window in which no call completed
// (the calls in flight take longer than the window) keeps the last cap
// measured instead of lifting it, when it matters most.
func TestCapHoldsWhenNoCallCompletes(t *testing.T) {
	r := engaged(t, Config{})
	held := r.hold(2)
	for range 15 { // a window and a half of nothing completing
		for range 10 { // arrivals: the limit (the cap, or its probe) binds
			if p, err := r.s.AcquireAt(r.tk.Now()); err == nil {
				held = append(held, p)
			}
		}
		r.sample()
		require.Equal(t, 2, r.s.Stats().Cap)
	}
	st := r.s.Stats()
	require.True(t, st.Overloaded)
	require.LessOrEqual(t, st.InFlight, 3, "at most the probe's extra call")
	require.Zero(t, st.MaxPass, "nothing completed in the window")
	for _, p := range held {
		r.s.ReleaseAt(p, r.tk.Now(), rampart.Ignored)
	}
}

func TestZeroShedderAdmitsEveryCall(t *testing.T) {
	var s Shedder
	for i := range 3 {
		p, err := s.AcquireAt(int64(i) * int64(time.Hour))
		require.NoError(t, err)
		s.ReleaseAt(p, 0, rampart.Success)
	}
	require.Equal(t, uint64(3), s.Stats().Admitted)
	require.False(t, s.Overloaded())
}

// countingRig is a rig whose ticker counts its reads.
func countingRig(t *testing.T, c Config) (*rig, *testkit.CountingTicker) {
	r := &rig{t: t, tk: rampart.NewManualTicker(0), src: newFakeSource()}
	ct := &testkit.CountingTicker{Base: r.tk}
	c.Ticker = ct
	c.Source = r.src
	s, err := New(c)
	require.NoError(t, err)
	r.s = s
	return r, ct
}

// TestAcquireTimesASampleOfTheCalls: at a high rate Acquire and Release
// read the clock for about one call in the stride (64 at 64,000 calls a
// second), and at a low rate for every call.
func TestAcquireTimesASampleOfTheCalls(t *testing.T) {
	r, ct := countingRig(t, Config{})
	require.Equal(t, 1, r.s.Stats().Stride, "no rate known: every call timed")
	for range 100 {
		p, err := r.s.Acquire()
		require.NoError(t, err)
		require.True(t, p.Sampled())
		r.s.Release(p, rampart.Success)
	}
	require.Equal(t, int64(200), ct.Reads()-1, "two reads a call (and New's)")

	r.complete(6400, time.Millisecond) // 64,000 calls/s
	r.sample()
	require.Equal(t, 64, r.s.Stats().Stride)
	before := ct.Reads()
	const calls = 64000
	timed := 0
	for range calls {
		p, err := r.s.Acquire()
		require.NoError(t, err)
		if p.Sampled() {
			timed++
		}
		r.s.Release(p, rampart.Success)
	}
	reads := ct.Reads() - before
	require.Equal(t, int64(2*timed), reads, "two reads per sampled call, none for the others")
	require.InDelta(t, calls/64, timed, 6*math.Sqrt(calls/64), "about one call in 64")
}

func TestStrideFollowsTheRate(t *testing.T) {
	for _, tc := range []struct {
		passes    int64
		dur       time.Duration
		maxStride int
		want      int
	}{
		{0, interval, 0, 1},
		{63, interval, 0, 1},            // under 64 completions: every call
		{100, interval, 0, 2},           // 100/32
		{6400, interval, 0, 64},         // the default bound
		{1 << 20, interval, 1024, 1024}, // the configured bound
		{1 << 20, interval, 1, 1},
		{3200, 10 * time.Second, 0, 2}, // 320 calls/s: a timed call every 10 ms bounds it
	} {
		r := newRig(t, Config{MaxSampleStride: tc.maxStride})
		r.s.setStride(&bucket{passes: tc.passes, dur: int64(tc.dur)})
		require.Equal(t, tc.want, r.s.Stats().Stride, "%d calls in %v", tc.passes, tc.dur)
	}
}

// TestUnsampledRejectionsReadNoClock: a flood of rejections at a high
// stride reads the clock only for its samples, which keep the cool-off
// from the last rejection going.
func TestUnsampledRejectionsReadNoClock(t *testing.T) {
	r, ct := countingRig(t, Config{})
	r.complete(6400, 100*time.Microsecond) // 64,000/s × 0.1 ms: a cap of 6
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.True(t, r.s.Overloaded())
	require.Equal(t, 64, r.s.Stats().Stride)
	r.hold(r.s.Stats().Limit)
	before := ct.Reads()
	for range 6400 {
		_, err := r.s.Acquire()
		require.ErrorIs(t, err, ErrOverloaded)
	}
	require.InDelta(t, 100, ct.Reads()-before, 60, "one read per sampled rejection")
	require.Equal(t, r.tk.Now(), r.s.lastDrop.Load(), "the sampled rejections moved the cool-off")
}

// TestProbeStaysWithinTheCapWord: the up-probe of a cap at the largest
// value stays at most maxCap (a count of calls in flight, an int32), with
// the priority step within its bounds above it.
func TestProbeStaysWithinTheCapWord(t *testing.T) {
	r := newRig(t, Config{Priorities: 2})
	r.s.on = true
	r.s.lastCap = maxCap - 1
	for range probeCycle {
		r.s.publish() // no completion in the window: the last cap, probed
		c := r.s.capw.Load()
		require.LessOrEqual(t, c&0xffffffff, int64(maxCap))
		require.LessOrEqual(t, c>>32, int64(math.Ceil((maxCap-1)*0.1)), "the step")
	}
}

// TestLatencyMeanWeighsEachSampleByItsStride: a timed call stands for the
// stride of calls it was picked from, so a bucket whose timed calls were
// picked at different strides (the stride fell from 64 to 1 while long
// calls were in flight, as when the completions fall) still has the mean
// latency of its completions, not that of the calls picked at stride 1.
func TestLatencyMeanWeighsEachSampleByItsStride(t *testing.T) {
	r := newRig(t, Config{Ignore: SchedLatency | CPU | Runnable})
	r.complete(5000, 75*time.Millisecond) // 50,000 completions/s: stride 64 from the next bucket
	r.sample()
	require.Equal(t, 64, r.s.Stats().Stride)
	// About 62 of 4000 long calls are timed at stride 64, and fewer than
	// 21 (the bound below) only once in 10⁷ runs.
	const n = 4000
	long := make([]Permit, 0, n)
	for range n { // long calls, acquired at stride 64
		p, err := r.s.Acquire()
		require.NoError(t, err)
		long = append(long, p)
	}
	r.sample() // no completion in that bucket: stride 1
	require.Equal(t, 1, r.s.Stats().Stride)
	r.tk.Advance(50 * time.Millisecond) // the long calls end 150 ms after they began
	for _, p := range long {
		r.s.Release(p, rampart.Success)
	}
	short := make([]Permit, 0, n)
	for range n { // as many short calls (1 ms), all timed at stride 1
		p, err := r.s.Acquire()
		require.NoError(t, err)
		short = append(short, p)
	}
	r.tk.Advance(time.Millisecond)
	for _, p := range short {
		r.s.Release(p, rampart.Success)
	}
	r.tk.Advance(49 * time.Millisecond)
	r.s.sampleAt(r.tk.Now()) // closes the bucket
	b := r.s.ring[(r.s.head+len(r.s.ring)-1)%len(r.s.ring)]
	const trueMean = (150 + 1) * time.Millisecond / 2
	require.Equal(t, int64(2*n), b.passes)
	require.GreaterOrEqual(t, time.Duration(b.meanRT), trueMean/2, "the bucket's mean latency against its completions' (%v)", trueMean)
}

// TestEngagedShedderSamplesWhenTrafficFalls: while engaged every admitted
// call is timed, so the first call after the traffic fell takes the due
// sample (and releases the shedder once the signals are cold) however high
// the stride was set by the traffic before.
func TestEngagedShedderSamplesWhenTrafficFalls(t *testing.T) {
	// Without the timing, each rig's call is a sample one time in 64: all
	// four take it once in 1.7·10⁷ runs.
	for range 4 {
		r, ct := func() (*rig, *testkit.CountingTicker) {
			r := engaged(t, Config{})
			ct := &testkit.CountingTicker{Base: r.tk}
			r.s.ticker = ct
			return r, ct
		}()
		r.complete(5000, time.Millisecond) // 50,000 completions/s
		r.sample()                         // stride 64
		st := r.s.Stats()
		require.Equal(t, 64, st.Stride)
		require.True(t, st.Overloaded)
		r.src.set(0, -1, -1) // cold, and nothing was rejected: the next sample releases
		r.tk.Advance(time.Second)
		before, reads := st.Samples, ct.Reads()
		p, err := r.s.Acquire() // one call after a second without any
		require.NoError(t, err)
		require.True(t, p.Sampled(), "engaged, an admitted call is timed")
		r.s.Release(p, rampart.Success)
		st = r.s.Stats()
		require.Equal(t, before+1, st.Samples, "the call took the due sample")
		require.False(t, st.Overloaded)
		require.Equal(t, []bool{true, false}, r.ons)
		require.Equal(t, int64(2), ct.Reads()-reads, "its admission and its release")
	}
}

// TestOnOverloadCallsNeverOverlap: the listener runs under the sample
// lock, so a slow listener's call ends before the next sample can call
// it, and the calls come in the order of the state changes.
func TestOnOverloadCallsNeverOverlap(t *testing.T) {
	src := newFakeSource()
	tk := rampart.NewManualTicker(0)
	var mu sync.Mutex
	var state []bool // what the listener recorded, in the order its calls finished
	var inside atomic.Int32
	var overlapped atomic.Bool
	entered := make(chan struct{})
	unblock := make(chan struct{})
	s, err := New(Config{Ticker: tk, Source: src, OnOverload: func(on bool) {
		if inside.Add(1) > 1 {
			overlapped.Store(true)
		}
		defer inside.Add(-1)
		if on {
			close(entered)
			<-unblock // a slow listener (a log write, a metrics push)
		}
		mu.Lock()
		state = append(state, on)
		mu.Unlock()
	}})
	require.NoError(t, err)
	src.set(time.Second, -1, -1) // hot
	var wg sync.WaitGroup
	wg.Go(func() {
		p, err := s.AcquireAt(int64(interval)) // engages; calls OnOverload(true)
		if err == nil {
			s.ReleaseAt(p, int64(interval), rampart.Ignored)
		}
	})
	<-entered
	src.set(0, -1, -1) // cold; no rejection, so no cool-off holds it
	p, err := s.AcquireAt(int64(2 * interval))
	require.NoError(t, err, "engaged at an unlimited cap")
	s.ReleaseAt(p, int64(2*interval), rampart.Ignored)
	require.Equal(t, uint64(1), s.Stats().Samples, "no sample while the listener runs")
	close(unblock)
	wg.Wait()
	p, err = s.AcquireAt(int64(3 * interval)) // releases; calls OnOverload(false)
	require.NoError(t, err)
	s.ReleaseAt(p, int64(3*interval), rampart.Ignored)
	require.False(t, overlapped.Load(), "OnOverload calls overlapped")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []bool{true, false}, state)
	require.False(t, s.Overloaded())
}

// TestListenerGoexitKeepsSampling: a listener that calls runtime.Goexit
// still gives the sample lock back.
func TestListenerGoexitKeepsSampling(t *testing.T) {
	src := newFakeSource()
	s, err := New(Config{Ticker: rampart.NewManualTicker(0), Source: src, OnOverload: func(on bool) {
		if on {
			testkit.Goexit()
		}
	}})
	require.NoError(t, err)
	src.set(time.Second, -1, -1)
	_, goexited := testkit.Run(func() { _, _ = s.AcquireAt(int64(interval)) })
	require.True(t, goexited)
	src.set(0, -1, -1)
	p, err := s.AcquireAt(int64(2 * interval))
	require.NoError(t, err)
	s.ReleaseAt(p, int64(2*interval), rampart.Ignored)
	st := s.Stats()
	require.Equal(t, uint64(2), st.Samples, "the sample lock was given back")
	require.False(t, st.Overloaded)
}

// panicTicker panics in Now once armed.
type panicTicker struct {
	now   atomic.Int64
	armed atomic.Bool
}

func (p *panicTicker) Now() int64 {
	if p.armed.Load() {
		panic("ticker")
	}
	return p.now.Load()
}

// TestDoReleasesTheSlotWhenTheTickerPanics: a Ticker that panics in the
// release's clock reading of a timed Success leaves no call in flight:
// Do and Call release the slot as Ignored and the panic goes on.
func TestDoReleasesTheSlotWhenTheTickerPanics(t *testing.T) {
	for _, run := range []struct {
		name string
		do   func(s *Shedder, tk *panicTicker)
	}{
		{"Do", func(s *Shedder, tk *panicTicker) {
			_ = s.Do(context.Background(), func(context.Context) error {
				tk.armed.Store(true) // the clock fails while the call runs (stride 1: the permit is timed)
				return nil
			})
		}},
		{"Call", func(s *Shedder, tk *panicTicker) {
			_, _ = Call(context.Background(), s, func(context.Context) (int, error) {
				tk.armed.Store(true)
				return 1, nil
			})
		}},
	} {
		t.Run(run.name, func(t *testing.T) {
			tk := &panicTicker{}
			s, err := New(Config{Ticker: tk, Source: newFakeSource()})
			require.NoError(t, err)
			panicked, _ := testkit.Run(func() { run.do(s, tk) })
			require.Equal(t, "ticker", panicked)
			require.Equal(t, 0, s.InFlight(), "the slot was released")
		})
	}
}

// TestSchedLatencyIsTheBucketsLowerBound: the p99 is its histogram
// bucket's lower bound, so that reaching a threshold means the p99 did:
// with the runtime's buckets, every latency of 8.5 ms reads under 10 ms
// (its bucket's upper bound is 10.49 ms).
func TestSchedLatencyIsTheBucketsLowerBound(t *testing.T) {
	r := NewRuntimeSource()
	if r.samples[0].Value.Kind() != metrics.KindFloat64Histogram {
		t.Skip("no scheduling histogram")
	}
	h := r.samples[0].Value.Float64Histogram()
	prev := make([]uint64, len(h.Counts))
	for _, x := range []float64{8.5e-3, 10e-3, 10.4e-3, 1e-6} {
		counts := make([]uint64, len(h.Counts))
		i := 0
		for h.Buckets[i+1] <= x {
			i++
		}
		counts[i] = 1000
		got := quantileOf(&metrics.Float64Histogram{Counts: counts, Buckets: h.Buckets}, prev, 1000, 0.99)
		require.Equal(t, h.Buckets[i], got, "every event took %v", x)
		require.LessOrEqual(t, got, x)
	}
}

// openLoopModel simulates a server of procs cores (processor sharing) and
// calls of work w each, offered open-loop every gap, under the shedder
// engaged for the whole run, on the manual clock in steps of dt. Each
// arrival is admitted or rejected at once; an admitted call is released
// as a Success once its work is done. It returns the completions per
// second and the 99th percentile latency of the completions after the
// first warm samples.
func (r *rig) openLoopModel(procs int, w, gap time.Duration, samples, warm int) (goodput float64, p99 time.Duration) {
	const dt = 10 * time.Microsecond
	type call struct {
		p    Permit
		left time.Duration // work left
		at   int64         // arrival
	}
	var active []call
	var lats []time.Duration
	start := r.tk.Now()
	measureFrom := start + int64(warm)*int64(interval)
	end := start + int64(samples)*int64(interval)
	nextArrival := start
	for now := start; now < end; now += int64(dt) {
		r.tk.Set(now)
		for now >= nextArrival {
			if p, err := r.s.AcquireAt(now); err == nil {
				active = append(active, call{p: p, left: w, at: now})
			}
			nextArrival += int64(gap)
		}
		share := dt
		if len(active) > procs {
			share = dt * time.Duration(procs) / time.Duration(len(active))
		}
		kept := active[:0]
		for _, c := range active {
			c.left -= share
			if c.left > 0 {
				kept = append(kept, c)
				continue
			}
			r.s.ReleaseAt(c.p, now+int64(dt), rampart.Success)
			if c.at >= measureFrom {
				lats = append(lats, time.Duration(now+int64(dt)-c.at))
			}
		}
		active = kept
	}
	slices.Sort(lats)
	return float64(len(lats)) * 1e9 / float64(end-measureFrom), lats[len(lats)*99/100]
}

// TestCapLeavesNoCoreIdleBetweenArrivals: a shedder rejects instead of
// queueing, so a slot freed by a completion stays idle until the next
// arrival; a limit of exactly the bandwidth-delay product (one call on
// one core) leaves the core idle that long after every call, and each
// bucket's maxPass × minRT, the mean calls in flight, then measures less
// than the cap: the cap of 1 confirms itself and the goodput stays far
// below the capacity. The limit admits one call more than the cap, which
// waits for a core (as Kratos's BBR admits while the calls in flight
// before the new one are at most its estimate), and the down-probe runs
// without it, so the window keeps the latency of an unqueued bucket.
func TestCapLeavesNoCoreIdleBetweenArrivals(t *testing.T) {
	const procs, w, gap = 1, 2 * time.Millisecond, 900 * time.Microsecond // 2.2× the capacity of 500/s
	r := newRig(t, Config{})
	r.complete(50, w) // 500/s × 2 ms: a cap of 1, the core's
	r.src.set(time.Second, -1, -1)
	r.sample()
	require.Equal(t, 1, r.s.Stats().Cap)
	goodput, p99 := r.openLoopModel(procs, w, gap, 80, 16)
	t.Logf("goodput %.1f/s (%.1f %% of 500/s), p99 %v", goodput, goodput/5, p99)
	st := r.s.Stats()
	require.True(t, st.Overloaded)
	require.Equal(t, 1, st.Cap, "the core's bandwidth-delay product")
	require.GreaterOrEqual(t, goodput, 0.85*500, "goodput of a 500/s capacity (cap %d, limit %d)", st.Cap, st.Limit)
	require.LessOrEqual(t, p99, 2*w+20*time.Microsecond, "p99 within twice the unloaded latency")
}
