package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
)

func mustNew(t testing.TB, cfg chaos.Config) *chaos.Injector {
	t.Helper()
	inj, err := chaos.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return inj
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   chaos.Config
		field string
	}{
		{"negative rate", chaos.Config{ErrorRate: -0.1}, "ErrorRate"},
		{"rate above 1", chaos.Config{PanicRate: 1.5}, "PanicRate"},
		{"NaN rate", chaos.Config{LatencyRate: math.NaN(), Latency: time.Second}, "LatencyRate"},
		{"NaN result rate", chaos.Config{ResultRate: math.NaN()}, "ResultRate"},
		{"infinite rate", chaos.Config{ResultRate: math.Inf(1)}, "ResultRate"},
		{"terminal rates above 1", chaos.Config{PanicRate: 0.5, ErrorRate: 0.4, ResultRate: 0.2}, "ResultRate"},
		{"negative latency", chaos.Config{Latency: -time.Millisecond}, "Latency"},
		{"negative latency max", chaos.Config{LatencyMax: -time.Millisecond}, "LatencyMax"},
		{"latency range min above max", chaos.Config{LatencyRate: 1, Latency: 2 * time.Second, LatencyMax: time.Second}, "LatencyMax"},
		{"latency rate without latency", chaos.Config{LatencyRate: 0.5}, "Latency"},
		{"status below 200", chaos.Config{Status: 99}, "Status"},
		{"status above 599", chaos.Config{Status: 600}, "Status"},
		{"negative retry-after", chaos.Config{RetryAfter: -time.Second}, "RetryAfter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj, err := chaos.New(tc.cfg)
			if inj != nil {
				t.Errorf("got an injector with the error")
			}
			testkit.RequireConfigError(t, err, "chaos", tc.field)
			if !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Errorf("%v does not match rampart.ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewAcceptsBoundaryConfig(t *testing.T) {
	for _, cfg := range []chaos.Config{
		{},
		{LatencyRate: 1, Latency: time.Second},
		{LatencyRate: 1, LatencyMax: time.Second}, // [0, 1s]
		{LatencyRate: 1, Latency: time.Second, LatencyMax: time.Second},
		{PanicRate: 0.1, ErrorRate: 0.2, ResultRate: 0.7}, // sums to 1.0000000000000002 in float64
		{ErrorRate: 1},
		{Status: 200}, {Status: 599},
	} {
		if _, err := chaos.New(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestConfigFillsInDefaults(t *testing.T) {
	inj := mustNew(t, chaos.Config{})
	c := inj.Config()
	if c.Seed == 0 || c.Error != chaos.ErrInjected || c.PanicValue != chaos.ErrInjectedPanic || c.Status != 503 {
		t.Errorf("defaults not filled in: %+v", c)
	}
	if !inj.Enabled() {
		t.Errorf("zero Config starts disabled")
	}
	if mustNew(t, chaos.Config{Seed: 42}).Config().Seed != 42 {
		t.Errorf("explicit seed replaced")
	}
	if mustNew(t, chaos.Config{Disabled: true}).Enabled() {
		t.Errorf("Disabled starts enabled")
	}
}

// observed is what one call through an injector got.
type observed struct {
	latency time.Duration // 0: none
	fault   chaos.Fault   // FaultPanic, FaultError, FaultResult; 0: the function ran
}

// callOnce runs one Call with a substitute and reports what was injected.
func callOnce(inj *chaos.Injector, lat *time.Duration) (o observed) {
	*lat = 0
	defer func() {
		o.latency = *lat
		if r := recover(); r != nil {
			if r != chaos.ErrInjectedPanic {
				panic(r)
			}
			o.fault = chaos.FaultPanic
		}
	}()
	v, err := chaos.Call(context.Background(), inj, func(context.Context) (int, error) { return 1, nil },
		chaos.Substitute[int]{Value: 2})
	switch {
	case errors.Is(err, chaos.ErrInjected):
		o.fault = chaos.FaultError
	case err != nil:
		panic(err)
	case v == 2:
		o.fault = chaos.FaultResult
	}
	return o
}

// withinBinomial fails t unless got is within 5 standard deviations of the
// mean of a binomial(n, p).
func withinBinomial(t *testing.T, what string, got, n uint64, p float64) {
	t.Helper()
	mean := float64(n) * p
	sigma := math.Sqrt(float64(n) * p * (1 - p))
	if d := math.Abs(float64(got) - mean); d > 5*sigma {
		t.Errorf("%s: %d of %d, want %.0f ± %.0f (5 σ)", what, got, n, mean, 5*sigma)
	}
}

// TestObservedRatesWithinBinomialBound runs 100k seeded calls for each of
// several seeds and checks each kind's count against its configured rate,
// and the stats against what the calls saw.
func TestObservedRatesWithinBinomialBound(t *testing.T) {
	const n = 100_000
	for _, seed := range []uint64{1, 2, 0xdeadbeef} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			var lat time.Duration
			cfg := chaos.Config{
				LatencyRate: 0.1, Latency: time.Millisecond, LatencyMax: 3 * time.Millisecond,
				PanicRate: 0.02, ErrorRate: 0.2, ResultRate: 0.3,
				Seed: seed, Sleep: chaos.ManualSleep(tk),
				OnInject: func(f chaos.Fault, d time.Duration) {
					if f == chaos.FaultLatency {
						lat = d
					}
				},
			}
			inj := mustNew(t, cfg)
			var counts [5]uint64
			var delayed, delayedAndFaulted uint64
			var total time.Duration
			for range n {
				o := callOnce(inj, &lat)
				counts[o.fault]++
				if o.latency != 0 {
					delayed++
					total += o.latency
					if o.latency < cfg.Latency || o.latency > cfg.LatencyMax {
						t.Fatalf("latency %v outside [%v, %v]", o.latency, cfg.Latency, cfg.LatencyMax)
					}
					if o.fault != 0 {
						delayedAndFaulted++
					}
				}
			}
			withinBinomial(t, "latency", delayed, n, cfg.LatencyRate)
			withinBinomial(t, "panic", counts[chaos.FaultPanic], n, cfg.PanicRate)
			withinBinomial(t, "error", counts[chaos.FaultError], n, cfg.ErrorRate)
			withinBinomial(t, "result", counts[chaos.FaultResult], n, cfg.ResultRate)
			// Latency is drawn independently of the other faults.
			withinBinomial(t, "latency and another fault", delayedAndFaulted, n, cfg.LatencyRate*(cfg.PanicRate+cfg.ErrorRate+cfg.ResultRate))
			// Uniform in [1ms, 3ms]: mean 2 ms, σ of the mean (2ms/√12)/√delayed.
			mean := float64(total) / float64(delayed)
			if d := math.Abs(mean - 2e6); d > 5*2e6/math.Sqrt(12)/math.Sqrt(float64(delayed)) {
				t.Errorf("mean latency %v, want 2ms", time.Duration(mean))
			}
			want := chaos.Stats{
				Calls: n, Delayed: delayed, DelayTime: total,
				Panicked: counts[chaos.FaultPanic], Errored: counts[chaos.FaultError], Substituted: counts[chaos.FaultResult],
			}
			if got := inj.Stats(); got != want {
				t.Errorf("stats %+v, want %+v", got, want)
			}
			if got := time.Duration(tk.Now()); got != total {
				t.Errorf("ManualSleep moved the ticker by %v, want %v", got, total)
			}
		})
	}
}

// TestRateOneAndZero: a rate of 1 injects into every call, a rate of 0
// into none.
func TestRateOneAndZero(t *testing.T) {
	var lat time.Duration
	for _, tc := range []struct {
		cfg  chaos.Config
		want chaos.Fault
	}{
		{chaos.Config{ErrorRate: 1}, chaos.FaultError},
		{chaos.Config{PanicRate: 1}, chaos.FaultPanic},
		{chaos.Config{ResultRate: 1}, chaos.FaultResult},
		{chaos.Config{ErrorRate: 0, PanicRate: 0, ResultRate: 0}, 0},
	} {
		inj := mustNew(t, tc.cfg)
		for range 1000 {
			if o := callOnce(inj, &lat); o.fault != tc.want {
				t.Fatalf("%+v: got %v, want %v", tc.cfg, o.fault, tc.want)
			}
		}
	}
}

// sequence records the faults of n calls on one goroutine.
func sequence(t *testing.T, cfg chaos.Config, n int) []observed {
	var lat time.Duration
	cfg.Sleep = func(context.Context, time.Duration) error { return nil }
	cfg.OnInject = func(f chaos.Fault, d time.Duration) {
		if f == chaos.FaultLatency {
			lat = d
		}
	}
	inj := mustNew(t, cfg)
	out := make([]observed, n)
	for i := range out {
		out[i] = callOnce(inj, &lat)
	}
	return out
}

func TestSameSeedSameSequence(t *testing.T) {
	cfg := chaos.Config{LatencyRate: 0.3, Latency: time.Millisecond, LatencyMax: time.Second, PanicRate: 0.1, ErrorRate: 0.2, ResultRate: 0.2, Seed: 7}
	a, b := sequence(t, cfg, 10_000), sequence(t, cfg, 10_000)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("call %d: %+v, then %+v with the same seed", i, a[i], b[i])
		}
	}
	cfg.Seed = 8
	c := sequence(t, cfg, 10_000)
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same > 9_000 {
		t.Errorf("seeds 7 and 8 agree on %d of 10000 calls", same)
	}
	// A replay from the seed Config reports.
	cfg.Seed = 0
	inj := mustNew(t, cfg)
	cfg.Seed = inj.Config().Seed
	d, e := sequence(t, cfg, 1000), sequence(t, cfg, 1000)
	for i := range d {
		if d[i] != e[i] {
			t.Fatalf("replay of a drawn seed: call %d differs", i)
		}
	}
}

// TestConcurrentCallsSameTotals: calls on many goroutines are race-free and
// inject the same faults in all as the same number of calls on one: each
// call's draws depend on the seed and its index only.
func TestConcurrentCallsSameTotals(t *testing.T) {
	const goroutines, each = 8, 2000
	cfg := chaos.Config{LatencyRate: 0.2, Latency: time.Millisecond, LatencyMax: 9 * time.Millisecond, ErrorRate: 0.3, ResultRate: 0.1, Seed: 99,
		Sleep: func(context.Context, time.Duration) error { return nil }}
	one := mustNew(t, cfg)
	for range goroutines * each {
		_, _ = chaos.Call(context.Background(), one, func(context.Context) (int, error) { return 1, nil }, chaos.Substitute[int]{})
	}
	many := mustNew(t, cfg)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				_, _ = chaos.Call(context.Background(), many, func(context.Context) (int, error) { return 1, nil }, chaos.Substitute[int]{})
			}
		})
	}
	wg.Wait()
	if a, b := one.Stats(), many.Stats(); a != b {
		t.Errorf("one goroutine %+v, %d goroutines %+v", a, goroutines, b)
	}
}

// TestLatencyHonoursContext: under synctest's fake clock, an injected
// latency takes exactly its time, and a context that ends during it ends
// the call at that moment with the context's error, without running fn.
func TestLatencyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inj := mustNew(t, chaos.Config{LatencyRate: 1, Latency: time.Second})
		ran := 0
		fn := func(context.Context) error { ran++; return nil }

		start := time.Now()
		if err := inj.Do(context.Background(), fn); err != nil || ran != 1 || time.Since(start) != time.Second {
			t.Fatalf("background: err %v, ran %d, took %v; want nil, 1, 1s", err, ran, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start = time.Now()
		err := inj.Do(ctx, fn)
		if !errors.Is(err, context.DeadlineExceeded) || ran != 1 || time.Since(start) != 10*time.Millisecond {
			t.Fatalf("deadline: err %v, ran %d, took %v; want DeadlineExceeded, 1, 10ms", err, ran, time.Since(start))
		}

		ctx, cancel = context.WithCancel(context.Background())
		go func() { time.Sleep(300 * time.Millisecond); cancel() }()
		start = time.Now()
		if _, err := chaos.Call(ctx, inj, func(context.Context) (int, error) { ran++; return 1, nil }); err != context.Canceled || ran != 1 || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("cancel: err %v, ran %d, took %v; want Canceled, 1, 300ms", err, ran, time.Since(start))
		}

		start = time.Now()
		if err := inj.Do(ctx, fn); err != context.Canceled || ran != 1 || time.Since(start) != 0 {
			t.Fatalf("done context: err %v, ran %d, took %v; want Canceled at once", err, ran, time.Since(start))
		}

		want := chaos.Stats{Calls: 4, Delayed: 4, DelayTime: 4 * time.Second, Interrupted: 3}
		if got := inj.Stats(); got != want {
			t.Errorf("stats %+v, want %+v", got, want)
		}
	})
}

// TestManualSleepAdvancesTicker: with ManualSleep, a policy on the same
// ManualTicker sees the injected latency: a breaker with a slow-call
// threshold counts the call as slow, with no wall-clock wait.
func TestManualSleepAdvancesTicker(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	inj := mustNew(t, chaos.Config{LatencyRate: 1, Latency: 2 * time.Second, Sleep: chaos.ManualSleep(tk)})
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tk, SlowCallDuration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(pipeline.Config{Breaker: cb})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Do(context.Background(), func(ctx context.Context) error {
		return inj.Do(ctx, func(context.Context) error { return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if tk.Now() != int64(2*time.Second) {
		t.Errorf("ticker at %v, want 2s", time.Duration(tk.Now()))
	}
	if s := cb.Stats(); s.SlowCalls != 1 {
		t.Errorf("breaker saw %d slow calls, want 1", s.SlowCalls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := inj.Do(ctx, func(context.Context) error { return nil }); err != context.Canceled || tk.Now() != int64(2*time.Second) {
		t.Errorf("done context: err %v, ticker %v; want Canceled, unmoved", err, time.Duration(tk.Now()))
	}
}

// TestInjectedPanicThroughPipelineLeaksNoPermit: an injected panic, innermost
// in a pipeline with a bulkhead and a breaker, comes out of the pipeline
// unchanged; the bulkhead gets its permit back and the breaker records a
// failure per panic, as for a real panic in the dependency.
func TestInjectedPanicThroughPipelineLeaksNoPermit(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	inj := mustNew(t, chaos.Config{PanicRate: 1})
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	cb, err := circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	call := func() error {
		return p.Do(context.Background(), func(ctx context.Context) error {
			return inj.Do(ctx, func(context.Context) error { ran++; return nil })
		})
	}
	const n = 10
	for i := range n {
		panicked, goexited := testkit.Run(func() { _ = call() })
		if panicked != chaos.ErrInjectedPanic || goexited {
			t.Fatalf("call %d: panicked with %v (goexit %v), want ErrInjectedPanic", i, panicked, goexited)
		}
		if s := bh.Stats(); s.InFlight != 0 || s.Rejected != 0 {
			t.Fatalf("after panic %d: bulkhead in flight %d, rejected %d", i, s.InFlight, s.Rejected)
		}
	}
	if s := cb.Stats(); s.Failures != n || s.State != circuitbreaker.Closed {
		t.Errorf("breaker: %d failures (state %v), want %d, closed", s.Failures, s.State, n)
	}
	inj.SetEnabled(false)
	if err := call(); err != nil || ran != 1 {
		t.Errorf("disabled: err %v, ran %d; want nil, 1", err, ran)
	}
	if s := inj.Stats(); s.Panicked != n || s.Calls != n {
		t.Errorf("injector stats %+v, want %d calls, %d panicked", s, n, n)
	}
}

// TestInjectedErrorThroughPipeline: an injected error reaches the caller
// unchanged through a pipeline and counts as the breaker's failure.
func TestInjectedErrorThroughPipeline(t *testing.T) {
	dbErr := errors.New("connection reset")
	inj := mustNew(t, chaos.Config{ErrorRate: 1, Error: dbErr})
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 3})
	bh, _ := bulkhead.New(bulkhead.Config{Max: 1})
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.Do(context.Background(), func(ctx context.Context) error {
			return inj.Do(ctx, func(context.Context) error { return nil })
		}); err != dbErr {
			t.Fatalf("got %v, want the configured error unchanged", err)
		}
	}
	if s := cb.Stats(); s.State != circuitbreaker.Open {
		t.Errorf("breaker %v after 3 injected failures, want open", s.State)
	}
	if bh.Stats().InFlight != 0 {
		t.Errorf("bulkhead permit leaked")
	}
}

func TestFunctionErrorAndPanicUnchanged(t *testing.T) {
	inj := mustNew(t, chaos.Config{LatencyRate: 0.5, Latency: time.Nanosecond, ResultRate: 0.5, Sleep: func(context.Context, time.Duration) error { return nil }})
	mine := errors.New("mine")
	for range 100 {
		if err := inj.Do(context.Background(), func(context.Context) error { return mine }); err != mine {
			t.Fatalf("Do: got %v, want fn's error", err)
		}
	}
	for range 100 {
		v, err := chaos.Call(context.Background(), inj, func(context.Context) (string, error) { return "x", mine })
		if v != "x" || err != mine {
			t.Fatalf("Call without substitute: got %q, %v", v, err)
		}
	}
	panicked, _ := testkit.Run(func() { _ = inj.Do(context.Background(), func(context.Context) error { panic("fn's own") }) })
	if panicked != "fn's own" {
		t.Errorf("fn's panic came out as %v", panicked)
	}
}

func TestCustomFaults(t *testing.T) {
	type custom struct{ code int }
	inj := mustNew(t, chaos.Config{PanicRate: 1, PanicValue: custom{7}})
	if p, _ := testkit.Run(func() { _ = inj.Do(context.Background(), func(context.Context) error { return nil }) }); p != (custom{7}) {
		t.Errorf("panicked with %v, want the configured value", p)
	}
	inj = mustNew(t, chaos.Config{ResultRate: 1})
	v, err := chaos.Call(context.Background(), inj, func(context.Context) (string, error) { return "real", nil },
		chaos.Substitute[string]{Value: "stale", Err: context.DeadlineExceeded})
	if v != "stale" || err != context.DeadlineExceeded {
		t.Errorf("substitute: got %q, %v", v, err)
	}
	if err := inj.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Errorf("Do with ResultRate 1: %v, want fn's nil", err)
	}
	if s := inj.Stats(); s.Substituted != 1 || s.Calls != 2 {
		t.Errorf("stats %+v, want 2 calls, 1 substituted", s)
	}
}

func TestSetEnabledAtRunTime(t *testing.T) {
	inj := mustNew(t, chaos.Config{ErrorRate: 1, Disabled: true})
	fn := func(context.Context) error { return nil }
	if err := inj.Do(context.Background(), fn); err != nil {
		t.Fatalf("disabled: %v", err)
	}
	inj.SetEnabled(true)
	if err := inj.Do(context.Background(), fn); err != chaos.ErrInjected {
		t.Fatalf("enabled: %v", err)
	}
	inj.SetEnabled(false)
	if _, err := chaos.Call(context.Background(), inj, func(context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatalf("disabled again: %v", err)
	}
	if s := inj.Stats(); s.Calls != 1 || s.Errored != 1 {
		t.Errorf("stats %+v: want the enabled call only", s)
	}
}

func TestListenerPanicRecovered(t *testing.T) {
	var got []chaos.Fault
	inj := mustNew(t, chaos.Config{LatencyRate: 1, Latency: time.Millisecond, ErrorRate: 1,
		Sleep: func(context.Context, time.Duration) error { return nil },
		OnInject: func(f chaos.Fault, d time.Duration) {
			got = append(got, f)
			if f == chaos.FaultLatency && d != time.Millisecond {
				t.Errorf("latency %v, want 1ms", d)
			}
			panic("listener")
		}})
	if err := inj.Do(context.Background(), func(context.Context) error { return nil }); err != chaos.ErrInjected {
		t.Fatalf("got %v, want the fault injected despite the listener", err)
	}
	if len(got) != 2 || got[0] != chaos.FaultLatency || got[1] != chaos.FaultError {
		t.Errorf("listener saw %v", got)
	}
	if s := inj.Stats(); s.ListenerPanics != 2 || s.Delayed != 1 || s.Errored != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestFaultString(t *testing.T) {
	for f, want := range map[chaos.Fault]string{chaos.FaultLatency: "latency", chaos.FaultPanic: "panic", chaos.FaultError: "error", chaos.FaultResult: "result", 9: "Fault(9)"} {
		if f.String() != want {
			t.Errorf("%d: %q, want %q", f, f.String(), want)
		}
	}
}

// TestHotPathAllocs: disabled, enabled with nothing to inject, and an
// injected error or substitute allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	fnT := func(context.Context) (int, error) { return 1, nil }
	off := mustNew(t, chaos.Config{ErrorRate: 1, Disabled: true})
	testkit.WantAllocs(t, "disabled Do", 0, func() { _ = off.Do(ctx, fn) })
	testkit.WantAllocs(t, "disabled Call", 0, func() { _, _ = chaos.Call(ctx, off, fnT, chaos.Substitute[int]{Value: 2}) })
	none := mustNew(t, chaos.Config{})
	testkit.WantAllocs(t, "no-fault Do", 0, func() { _ = none.Do(ctx, fn) })
	testkit.WantAllocs(t, "no-fault Call", 0, func() { _, _ = chaos.Call(ctx, none, fnT) })
	drawn := mustNew(t, chaos.Config{ErrorRate: 0.5, ResultRate: 0.5})
	testkit.WantAllocs(t, "injected error or substitute", 0, func() { _, _ = chaos.Call(ctx, drawn, fnT, chaos.Substitute[int]{Value: 2}) })
}

// TestInstanceBytesAllocs pins both layouts: the Injector and its counters,
// padded to their own cache lines by default, packed with Compact.
func TestInstanceBytesAllocs(t *testing.T) {
	const line = 64
	if unsafe.Sizeof(uintptr(0)) != 8 || pad.LineSize != line {
		t.Skip("sizes pinned for 64-bit platforms with a 64-byte cache line (amd64)")
	}
	inj := unsafe.Sizeof(chaos.Injector{})
	if inj != 280 {
		t.Errorf("unsafe.Sizeof(Injector) = %d, want 280", inj)
	}
	// New allocates the Injector (in the 288-byte size class) and its
	// counters: one line packed, three padded (a line each side).
	wantBytes(t, "padded", 288+3*line, func() any { inj, _ := chaos.New(chaos.Config{Seed: 1}); return inj })
	wantBytes(t, "compact", 288+line, func() any { inj, _ := chaos.New(chaos.Config{Seed: 1, Compact: true}); return inj })
}

// wantBytes is testkit.WantBytes on the least of up to three measurements:
// now and then the runtime allocates some 5 KB during one (7 objects, on
// no goroutine of the test's), a few bytes per instance; that only adds,
// so the least measurement is the instance's.
func wantBytes(t *testing.T, name string, want int64, mk func() any) {
	t.Helper()
	for range 2 {
		if testkit.Bytes(t, mk) == want {
			return
		}
	}
	testkit.WantBytes(t, name, want, mk)
}

// TestDelayTimeSaturates: a latency of the largest Duration ("hang until
// the context ends") counted twice does not wrap the total negative.
func TestDelayTimeSaturates(t *testing.T) {
	inj, err := chaos.New(chaos.Config{LatencyRate: 1, Latency: math.MaxInt64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 2 {
		_ = inj.Do(ctx, func(context.Context) error { return nil })
	}
	if s := inj.Stats(); s.DelayTime != math.MaxInt64 || s.Delayed != 2 {
		t.Fatalf("DelayTime %v after %d delayed calls, want the largest Duration", s.DelayTime, s.Delayed)
	}
}

// TestRateSumErrorNamesAFieldThatIsSet: a sum of rates above 1 is blamed on
// a field the configuration sets.
func TestRateSumErrorNamesAFieldThatIsSet(t *testing.T) {
	for _, c := range []struct {
		cfg   chaos.Config
		field string
	}{
		{chaos.Config{PanicRate: 0.7, ErrorRate: 0.7}, "ErrorRate"},
		{chaos.Config{ErrorRate: 0.7, ResultRate: 0.7}, "ResultRate"},
	} {
		_, err := chaos.New(c.cfg)
		var ce *rampart.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Fatalf("%+v: got %v, want a ConfigError on %s", c.cfg, err, c.field)
		}
	}
}
