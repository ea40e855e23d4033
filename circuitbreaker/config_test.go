package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzConfig: New either refuses a configuration with a *rampart.ConfigError
// or returns a breaker whose filled-in configuration is consistent and that
// survives a few calls without panicking.
func FuzzConfig(f *testing.F) {
	f.Add(uint8(0), 0, int64(0), 0, 0, 0.0, 0.0, int64(0), 0, int64(0), int64(0), 0.0, 0.0, 0, 0, 0, int64(0))
	f.Add(uint8(1), 10, int64(time.Second), 10, 3, 50.0, 80.0, int64(time.Millisecond), 5, int64(time.Second), int64(time.Minute), 2.0, 0.1, 3, 2, 2, int64(time.Second))
	f.Add(uint8(2), -1, int64(-1), -1, -1, 101.0, -1.0, int64(-1), -1, int64(-1), int64(-1), 0.5, 1.0, 300, -1, -1, int64(-1))
	f.Add(uint8(0), 4, int64(5), 2000, 0, math.NaN(), math.Inf(1), int64(0), 5, int64(time.Second), int64(time.Millisecond), math.Inf(1), math.NaN(), 2, 3, 3, int64(0))
	f.Fuzz(func(t *testing.T, mode uint8, window int, span int64, buckets, consec int, failRate, slowRate float64,
		slowDur int64, minCalls int, open, maxOpen int64, factor, jitter float64, probes, conc, succ int, maxHalf int64) {
		tk := rampart.NewManualTicker(0)
		c := Config{
			Ticker: tk, Mode: Mode(mode % 4), WindowSize: window, TimeWindow: time.Duration(span), Buckets: buckets,
			ConsecutiveFailures: consec, FailureRateThreshold: failRate, SlowCallRateThreshold: slowRate,
			SlowCallDuration: time.Duration(slowDur), MinimumCalls: minCalls, OpenDuration: time.Duration(open),
			MaxOpenDuration: time.Duration(maxOpen), OpenBackoffFactor: factor, OpenJitter: jitter,
			HalfOpenProbes: probes, HalfOpenMaxConcurrent: conc, HalfOpenSuccesses: succ, MaxHalfOpenDuration: time.Duration(maxHalf),
		}
		if c.WindowSize > 4096 || c.Buckets > 64 {
			return // keep the allocation small; the bounds are tested in TestNewValidation
		}
		b, err := New(c)
		// Update validates as New does: a breaker built with c's fixed
		// fields accepts c, and then reports New's configuration, or
		// refuses it with New's error.
		fixed := Config{Ticker: tk, Mode: c.Mode, WindowSize: c.WindowSize, TimeWindow: c.TimeWindow, Buckets: c.Buckets}
		if fixed.Mode == CountWindow {
			fixed.MinimumCalls = 1 // New refuses the default 10 over a smaller window; any valid value will do
		}
		if c.SlowCallDuration > 0 {
			// Whether the breaker measures calls is fixed too; any
			// positive threshold keeps it.
			fixed.SlowCallDuration = time.Nanosecond
		}
		if u, uerr := New(fixed); uerr == nil {
			switch err := u.Update(c); {
			case err == nil && b == nil:
				t.Fatalf("Update accepted %+v, New refused it", c)
			case err != nil && b != nil:
				t.Fatalf("Update refused %+v (%v), New accepted it", c, err)
			case err != nil && err.Error() != func() string { _, e := New(c); return e.Error() }():
				t.Fatalf("Update's error %v is not New's", err)
			case err == nil && !reflect.DeepEqual(u.Config(), b.Config()):
				t.Fatalf("after Update: %+v, New's: %+v", u.Config(), b.Config())
			}
		}
		if err != nil {
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) || ce.Field == "" {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		g := b.Config()
		switch {
		case g.WindowSize < 1, g.Buckets < 1, g.ConsecutiveFailures < 1, g.MinimumCalls < 1,
			g.FailureRateThreshold <= 0, g.FailureRateThreshold > 100, g.SlowCallRateThreshold <= 0, g.SlowCallRateThreshold > 100,
			g.OpenDuration <= 0, g.MaxOpenDuration < g.OpenDuration, g.OpenBackoffFactor < 1, g.OpenJitter < 0, g.OpenJitter >= 1,
			g.HalfOpenProbes < 1, g.HalfOpenProbes > 255, g.HalfOpenMaxConcurrent < 1, g.HalfOpenMaxConcurrent > g.HalfOpenProbes,
			g.HalfOpenSuccesses < 0, g.HalfOpenSuccesses > g.HalfOpenProbes:
			t.Fatalf("inconsistent config accepted: %+v", g)
		}
		for i := range 200 {
			p, err := b.AcquireAt(tk.Now())
			if err == nil {
				tk.Advance(time.Duration(i%7) * time.Millisecond)
				b.ReleaseAt(p, tk.Now(), rampart.Result(i%3))
			} else {
				tk.Advance(b.RemainingOpenAt(tk.Now()))
			}
			if d := b.RemainingOpenAt(tk.Now()); d < 0 {
				t.Fatalf("negative RemainingOpen %v", d)
			}
		}
		_ = b.Stats()
	})
}

// funcTicker is a Ticker of an uncomparable type (== on two of them
// panics), for the fixed-Ticker check.
type funcTicker func() int64

func (f funcTicker) Now() int64 { return f() }

// TestUpdateRefusals: Update refuses, with a *rampart.ConfigError naming
// the field, a change to each field fixed at construction and each value
// New refuses, and then changes nothing.
func TestUpdateRefusals(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	base := Config{Name: "db", Ticker: tk, FailureRateThreshold: 30}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	for _, c := range []struct {
		field string
		cfg   Config
		fixed bool
		from  func(*Config) // the breaker's Config at New; nil: base
	}{
		{"Name", with(func(c *Config) { c.Name = "other" }), true, nil},
		{"Ticker", with(func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }), true, nil},
		{"Ticker", with(func(c *Config) { c.Ticker = nil }), true, nil}, // the default clock, not tk
		{"Compact", with(func(c *Config) { c.Compact = true }), true, nil},
		{"CountStats", with(func(c *Config) { c.CountStats = true }), true, nil},
		{"Mode", with(func(c *Config) { c.Mode = Consecutive }), true, nil},
		{"WindowSize", with(func(c *Config) { c.WindowSize = 50 }), true, nil},
		{"TimeWindow", with(func(c *Config) { c.TimeWindow = time.Second }), true, nil},
		{"Buckets", with(func(c *Config) { c.Buckets = 5 }), true, nil},
		{"FailureRateThreshold", with(func(c *Config) { c.FailureRateThreshold = 101 }), false, nil},
		{"MinimumCalls", with(func(c *Config) { c.MinimumCalls = 101 }), false, nil},
		{"HalfOpenMaxConcurrent", with(func(c *Config) { c.HalfOpenProbes, c.HalfOpenMaxConcurrent = 3, 4 }), false, nil},
		{"MaxOpenDuration", with(func(c *Config) { c.OpenDuration, c.MaxOpenDuration = time.Minute, time.Second }), false, nil},
		{"OpenJitter", with(func(c *Config) { c.OpenJitter = 1 }), false, nil},
		{"Ticker", with(func(c *Config) { c.Ticker = (*rampart.ManualTicker)(nil) }), false, nil},
		// What a pipeline reads once, at its New: whether the breaker
		// measures calls, and whether it has a Classify.
		{"SlowCallDuration", with(func(c *Config) { c.SlowCallDuration = time.Second }), true, nil},
		{"SlowCallDuration", base, true, func(c *Config) { c.SlowCallDuration = time.Second }},
		{"OnSuccess", with(func(c *Config) { c.OnSuccess = func(time.Duration) {} }), true, nil},
		{"OnSuccess", base, true, func(c *Config) { c.OnSuccess = func(time.Duration) {} }},
		{"OnFailure", with(func(c *Config) { c.OnFailure = func(time.Duration) {} }), true, nil},
		{"OnFailure", base, true, func(c *Config) { c.OnFailure = func(time.Duration) {} }},
		{"Classify", with(func(c *Config) { c.Classify = DefaultClassify }), true, nil},
		{"Classify", base, true, func(c *Config) { c.Classify = DefaultClassify }},
	} {
		from := base
		if c.from != nil {
			c.from(&from)
		}
		b, err := New(from)
		require.NoError(t, err)
		err = b.Update(c.cfg)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, "%s", c.field)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		require.Equal(t, c.field, ce.Field, "%v", err)
		require.Equal(t, c.fixed, strings.Contains(ce.Reason, "fixed at construction"), "%v", err)
		switch c.field {
		case "SlowCallDuration", "OnSuccess", "OnFailure", "Classify":
			require.Contains(t, ce.Reason, "a pipeline reads it once, at its New", "%v", err)
		}
		if !c.fixed {
			_, nerr := New(c.cfg)
			require.EqualError(t, err, nerr.Error(), "Update validates as New does")
		}
		require.Equal(t, 30.0, b.Config().FailureRateThreshold, "%s: a refused Update changes nothing", c.field)
	}

	// A Ticker of an uncomparable type is the same clock only as the same
	// value.
	f := funcTicker(func() int64 { return 0 })
	b, err := New(Config{Ticker: f})
	require.NoError(t, err)
	require.NoError(t, b.Update(Config{Ticker: f, MinimumCalls: 3}))
	require.Equal(t, 3, b.Config().MinimumCalls)
	var ce *rampart.ConfigError
	require.ErrorAs(t, b.Update(Config{Ticker: funcTicker(func() int64 { return 0 })}), &ce)
	require.Equal(t, "Ticker", ce.Field)
}

// TestUpdateKeepsTheStateAndJudgesByTheNewThresholds: an Update keeps the
// window, the state and the counters; its zero fields mean New's
// defaults; Config returns it; and the window already recorded is judged
// by the new thresholds at once: a breaker whose window reaches the new
// failure rate trips at the Update, as its next failure would have.
func TestUpdateKeepsTheStateAndJudgesByTheNewThresholds(t *testing.T) {
	b, tk := newTest(t, Config{OpenDuration: time.Minute})
	for i := range 10 {
		var err error
		if i < 4 {
			err = errBoom
		}
		require.NoError(t, call(t, b, tk, 0, err))
	}
	before := b.Stats()
	require.Equal(t, Closed, before.State)
	require.EqualValues(t, 10, before.WindowCalls)

	require.NoError(t, b.Update(Config{Ticker: tk, FailureRateThreshold: 60}))
	s := b.Stats()
	require.Equal(t, before, s, "a threshold raised: nothing moves")
	c := b.Config()
	require.Equal(t, 60.0, c.FailureRateThreshold)
	require.Equal(t, 5*time.Second, c.OpenDuration, "a zero field is the default, not the old value")
	require.Equal(t, 10, c.MinimumCalls)

	require.NoError(t, b.Update(Config{Ticker: tk, FailureRateThreshold: 40, OpenDuration: time.Second}))
	s = b.Stats()
	require.Equal(t, Open, s.State, "40 %% of the window failed: the new threshold trips it at once")
	require.EqualValues(t, 1, s.Trips)
	require.EqualValues(t, 10, s.WindowCalls, "the window is kept")
	require.Equal(t, time.Second, s.RemainingOpen, "the open period is the new OpenDuration")
	require.Equal(t, before.Failures, s.Failures)

	// An open period in progress keeps its end.
	require.NoError(t, b.Update(Config{Ticker: tk, FailureRateThreshold: 40, OpenDuration: time.Hour}))
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))

	// Consecutive: the failures in a row are judged by the new count.
	c2, tk2 := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 5})
	for range 3 {
		require.NoError(t, call(t, c2, tk2, 0, errBoom))
	}
	require.NoError(t, c2.Update(Config{Ticker: tk2, Mode: Consecutive, ConsecutiveFailures: 4}))
	require.Equal(t, Closed, c2.State())
	require.NoError(t, c2.Update(Config{Ticker: tk2, Mode: Consecutive, ConsecutiveFailures: 3}))
	require.Equal(t, Open, c2.State())
}

// TestUpdateKeepsTheHalfOpenProbes: a half-open period keeps its probes
// across an Update: those admitted stay admitted and are judged (all of
// them, when HalfOpenProbes is lowered below their number), no more are
// admitted than the new HalfOpenProbes, and a period that the new
// settings decide with the probes already recorded closes at the Update.
func TestUpdateKeepsTheHalfOpenProbes(t *testing.T) {
	b, tk := newTest(t, Config{HalfOpenProbes: 5})
	require.True(t, b.TransitionTo(HalfOpen))
	var ps []Permit
	for range 3 {
		p, err := b.AcquireAt(tk.Now())
		require.NoError(t, err)
		ps = append(ps, p)
	}
	b.ReleaseAt(ps[0], tk.Now(), rampart.Success)
	gen := b.Stats().Generation

	require.NoError(t, b.Update(Config{Ticker: tk, HalfOpenProbes: 2}))
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State, "undecided: two probes in flight")
	require.Equal(t, gen, s.Generation, "the same period")
	require.Equal(t, [3]int{3, 2, 1}, [3]int{s.HalfOpenAdmitted, s.HalfOpenInFlight, s.HalfOpenSucceeded})
	_, err := b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull, "no probe beyond the new HalfOpenProbes")
	b.ReleaseAt(ps[1], tk.Now(), rampart.Success)
	require.Equal(t, Closed, b.State(), "2 successes of the 3 probes: the third cannot bring the failure rate to 50 %")
	b.ReleaseAt(ps[2], tk.Now(), rampart.Failure)
	s = b.Stats()
	require.Equal(t, Closed, s.State)
	require.EqualValues(t, 1, s.StaleResults, "the third probe's result is of the closed period's predecessor")

	// Lowered to the probes already recorded: decided at the Update.
	b2, tk2 := newTest(t, Config{HalfOpenProbes: 5})
	require.True(t, b2.TransitionTo(HalfOpen))
	for range 2 {
		p, err := b2.AcquireAt(tk2.Now())
		require.NoError(t, err)
		b2.ReleaseAt(p, tk2.Now(), rampart.Success)
	}
	require.Equal(t, HalfOpen, b2.State(), "2 successes of 5: undecided")
	require.NoError(t, b2.Update(Config{Ticker: tk2, HalfOpenProbes: 2}))
	require.Equal(t, Closed, b2.State(), "2 successes of 2: closed by the Update")
}

// TestUpdateReplacesTheListenersClassifyAndSlowCalls: the listeners,
// Classify and the slow-call threshold of an Update are the ones the next
// calls use.
func TestUpdateReplacesTheListenersClassifyAndSlowCalls(t *testing.T) {
	var oldCalls, newCalls int
	b, tk := newTest(t, Config{MinimumCalls: 1, OnStateChange: func(_, _ State) { oldCalls++ },
		Classify: DefaultClassify, SlowCallDuration: time.Hour})
	require.True(t, b.MeasuresCalls())
	require.NoError(t, b.Update(Config{Ticker: tk, MinimumCalls: 1,
		OnStateChange: func(_, _ State) { newCalls++ },
		Classify: func(err error) rampart.Result {
			if err != nil {
				return rampart.Ignored
			}
			return rampart.Success
		},
		SlowCallDuration: 10 * time.Millisecond,
	}))
	require.True(t, b.MeasuresCalls())
	require.ErrorIs(t, b.Do(context.Background(), func(context.Context) error { return errBoom }), errBoom)
	require.Equal(t, Closed, b.State(), "the new Classify ignores the failure")
	require.NoError(t, call(t, b, tk, 20*time.Millisecond, nil))
	s := b.Stats()
	require.EqualValues(t, 1, s.SlowCalls, "the new threshold judges a 20 ms call slow")
	require.Equal(t, Open, s.State, "one slow call in a window of one: the slow rate trips it")
	require.Equal(t, [2]int{0, 1}, [2]int{oldCalls, newCalls}, "the new OnStateChange is called")
}

// TestUpdateAcceptsWhatKeepsMeasuresCallsAndClassify: the slow-call
// threshold and the per-call listeners change freely while another setting
// keeps the breaker measuring calls (MeasuresCalls unchanged), and Classify
// from one func to another: what a pipeline read at its New still holds.
func TestUpdateAcceptsWhatKeepsMeasuresCallsAndClassify(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	listener := func(time.Duration) {}
	for _, c := range []struct {
		name     string
		from, to Config
	}{
		{"a time window measures calls", Config{Mode: TimeWindow}, Config{Mode: TimeWindow, SlowCallDuration: time.Second}},
		{"a time window without its threshold", Config{Mode: TimeWindow, SlowCallDuration: time.Second}, Config{Mode: TimeWindow}},
		{"a threshold to another", Config{SlowCallDuration: time.Second}, Config{SlowCallDuration: time.Minute}},
		{"a listener for the threshold", Config{SlowCallDuration: time.Second}, Config{OnFailure: listener}},
		{"the threshold beside a listener", Config{OnSuccess: listener}, Config{OnSuccess: listener, SlowCallDuration: time.Second}},
		{"a Classify for another", Config{Classify: DefaultClassify}, Config{Classify: func(error) rampart.Result { return rampart.Ignored }}},
	} {
		c.from.Ticker, c.to.Ticker = tk, tk
		b, err := New(c.from)
		require.NoError(t, err)
		measures := b.MeasuresCalls()
		require.NoError(t, b.Update(c.to), c.name)
		require.Equal(t, measures, b.MeasuresCalls(), c.name)
		require.Equal(t, c.to.SlowCallDuration, b.Config().SlowCallDuration, c.name)
	}
}

// TestUpdateWithoutNameKeepsTheName: an empty Name in Update keeps the
// name New was given (a registry's create-or-get sets it on the caller's
// behalf, and the caller's own Config, changed, must be accepted back):
// Config and the rejection errors still carry it.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	b, tk := newTest(t, Config{Name: "db", Mode: Consecutive, ConsecutiveFailures: 1})
	require.NoError(t, b.Update(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 2}))
	require.Equal(t, "db", b.Config().Name)
	require.Equal(t, 2, b.Config().ConsecutiveFailures)
	b.TransitionTo(ForcedOpen)
	_, err := b.Acquire()
	var re *rampart.RejectedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "db", re.Name())
}

// TestUpdateOfConfigRoundTrips: Update(Config()) is accepted and changes
// nothing, with every field set and with the defaults New filled in.
func TestUpdateOfConfigRoundTrips(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Name: "db", Mode: TimeWindow, CountStats: true, Compact: true, SlowCallDuration: time.Second,
			OnStateChange: func(State, State) {}, OnSuccess: func(time.Duration) {}, Classify: DefaultClassify},
	} {
		b, err := New(cfg)
		require.NoError(t, err)
		before := b.Config()
		require.NoError(t, b.Update(before))
		after := b.Config()
		require.Equal(t, before.Name, after.Name)
		require.Equal(t, fmt.Sprint(before), fmt.Sprint(after), "Update(Config()) changes nothing")
	}
}

// gateTicker is a manual clock whose next Now, once armed, blocks until
// released: it holds an Update between its publication and its judgement.
type gateTicker struct {
	now     atomic.Int64
	entered chan struct{}
	release chan struct{}
	armed   atomic.Bool
}

func (g *gateTicker) Now() int64 {
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.now.Load()
}

// TestConcurrentUpdatesJudgeByThePublishedConfig: of two Updates racing,
// the one published last is the breaker's configuration, and the other's
// judgement, running late, cannot trip the breaker by thresholds no call
// will use again: A publishes a 10 % threshold and is held in its
// judgement's clock read, B publishes 90 % and judges the 50 % window
// under it (no trip); A's judgement then finds its configuration no longer
// published and changes nothing.
func TestConcurrentUpdatesJudgeByThePublishedConfig(t *testing.T) {
	g := &gateTicker{entered: make(chan struct{}), release: make(chan struct{})}
	b, err := New(Config{Mode: TimeWindow, TimeWindow: 10 * time.Second, Buckets: 10, MinimumCalls: 1, FailureRateThreshold: 100, Ticker: g})
	require.NoError(t, err)
	for _, r := range []rampart.Result{rampart.Success, rampart.Failure} {
		p, err := b.AcquireAt(g.Now())
		require.NoError(t, err)
		b.ReleaseAt(p, g.Now(), r)
	}
	require.Equal(t, Closed, b.State())
	low, high := b.Config(), b.Config()
	low.FailureRateThreshold, high.FailureRateThreshold = 10, 90
	g.armed.Store(true)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); assert(t, b.Update(low)) }() // A: publishes low, held in its judgement's Now
	<-g.entered
	require.NoError(t, b.Update(high)) // B: publishes high, 50 % < 90 %: no trip
	close(g.release)
	wg.Wait()
	require.Equal(t, 90.0, b.Config().FailureRateThreshold)
	require.Equal(t, Closed, b.State(), "the 50 % window is under the published 90 % threshold (judged by A's 10 %)")
	require.Zero(t, b.Stats().Trips)
}

// assert reports a non-nil err from a goroutine other than the test's.
func assert(t *testing.T, err error) {
	if err != nil {
		t.Error(err)
	}
}

// seqGateTicker holds the first len(gates) readings, in order, each until
// its gate is closed, and says on entered which one is held.
type seqGateTicker struct {
	now     atomic.Int64
	mu      sync.Mutex
	gates   []chan struct{}
	entered chan int
	n       int
}

func (g *seqGateTicker) Now() int64 {
	g.mu.Lock()
	if len(g.gates) > 0 {
		c, i := g.gates[0], g.n
		g.gates, g.n = g.gates[1:], g.n+1
		g.mu.Unlock()
		g.entered <- i
		<-c
	} else {
		g.mu.Unlock()
	}
	return g.now.Load()
}

func (g *seqGateTicker) arm(n int) []chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	cs := make([]chan struct{}, n)
	for i := range cs {
		cs[i] = make(chan struct{})
	}
	g.gates = append(g.gates, cs...)
	return cs
}

// TestRVLostTripTwoEqualUpdates: a record R under the old 100 % threshold
// adds a failure that brings the window to 50 %; two Updates A and B both
// publish 50 %. B judges before R's failure lands (33 %, no trip); A
// judges after it (50 % >= 50 %: trip) but its transition is refused
// because B published an equal-valued *settings since. Nobody trips: the
// breaker stays Closed over a window at the published threshold. With
// only A (no B) the same interleaving trips.
// TestAJudgementRefusedByANewerUpdateIsMadeAgain: an Update's judgement
// refused because another Update published an equal configuration since
// (whose own judgement ran before an older record's failure reached the
// window) is made again by the configuration in force, so the window at
// the published threshold trips the breaker, as with one Update alone.
func TestAJudgementRefusedByANewerUpdateIsMadeAgain(t *testing.T) {
	for _, second := range []bool{false, true} {
		g := &seqGateTicker{entered: make(chan int, 4)}
		g.now.Store(1)
		b, err := New(Config{Mode: TimeWindow, TimeWindow: 10 * time.Second, Buckets: 10, MinimumCalls: 4, FailureRateThreshold: 100, Ticker: g})
		require.NoError(t, err)
		for _, r := range []rampart.Result{rampart.Success, rampart.Success, rampart.Failure} {
			p, err := b.AcquireAt(g.now.Load())
			require.NoError(t, err)
			b.ReleaseAt(p, g.now.Load(), r)
		}
		pR, err := b.AcquireAt(g.now.Load())
		require.NoError(t, err)
		low := b.Config()
		low.FailureRateThreshold = 50

		gates := g.arm(2)
		var wg sync.WaitGroup
		wg.Go(func() { b.ReleaseAt(pR, rampart.NotRead, rampart.Failure) }) // R: loaded the 100 % config, held in recordSlow's Now
		<-g.entered
		wg.Go(func() { assert(t, b.Update(low)) }) // A: publishes 50 %, held in judge's Now
		<-g.entered
		if second {
			require.NoError(t, b.Update(low)) // B: publishes an equal 50 %, judges 1/3: no trip
		}
		close(gates[0]) // R adds its failure (2/4) and judges by 100 %: no trip
		// Let R finish before A: R is done when the window holds 4 calls.
		require.Eventually(t, func() bool { return b.Stats().WindowCalls == 4 }, time.Second, time.Millisecond)
		close(gates[1]) // A judges 2/4 = 50 % by its 50 %
		wg.Wait()
		s := b.Stats()
		require.Equal(t, int64(4), s.WindowCalls)
		require.EqualValues(t, 2, s.WindowFailures)
		require.Equal(t, 50.0, b.Config().FailureRateThreshold)
		require.Equal(t, Open, b.State(), "second Update=%v: window at 50 %% failures with a published 50 %% threshold, but the breaker is %v", second, b.State())
	}
}
