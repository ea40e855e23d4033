package rampartotel

// This file is the test fixture shared word for word by rampartotel and
// rampartprom (each module holds a copy): one instance of every kind, all on
// one ManualTicker, driven through a known sequence of calls.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

var errBoom = errors.New("boom")

// fixture is one instance of every kind the adapters collect.
type fixture struct {
	tk        *rampart.ManualTicker
	breaker   *circuitbreaker.Breaker
	limiter   *ratelimit.Limiter
	sharded   *ratelimit.Sharded
	keyed     *ratelimit.Keyed
	bulkhead  *bulkhead.Bulkhead
	adaptive  *adaptive.Limiter
	throttler *adaptive.Throttler
	retry     *retry.Policy
	bucket    *retry.TokenBucket
	ratio     *retry.RatioBudget
	timeout   *timeout.Timeout
	hedger    *hedge.Hedger
	chaos     *chaos.Injector
	pipe      *pipeline.Pipeline // CountStats, over gate
	gate      *bulkhead.Bulkhead // the pipeline's bulkhead of 1 (not added itself)
	fallback  *pipeline.Fallback[int]
	doFall    *pipeline.DoFallback
	shedder   *shed.Shedder
	overload  bool                  // the shedder's Source reports a scheduling latency of 20 ms, else nothing
	shedTk    *rampart.ManualTicker // the shedder's clock: its intervals leave the others' readings alone
}

// must returns v, and panics (failing the test) on err: the fixture's
// constructions cannot fail.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func newFixture(t testing.TB) *fixture {
	tk := rampart.NewManualTicker(1e12)
	f := &fixture{tk: tk}
	f.breaker = must(circuitbreaker.New(circuitbreaker.Config{Name: "api", Ticker: tk, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 2, OpenDuration: 10 * time.Second, CountStats: true}))
	f.limiter = must(ratelimit.New(ratelimit.Config{Name: "login", Ticker: tk, Rate: 1, Burst: 2, CountStats: true}))
	f.sharded = must(ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "ingest", Ticker: tk, Rate: 4, Burst: 4, CountStats: true}, Shards: 2}))
	f.keyed = must(ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Name: "tenant", Ticker: tk, Rate: 1, Burst: 1, CountStats: true}}))
	f.bulkhead = must(bulkhead.New(bulkhead.Config{Name: "db", Ticker: tk, Max: 1}))
	f.adaptive = must(adaptive.New(adaptive.Config{Name: "backend", Ticker: tk, InitialLimit: 1, MinLimit: 1, MaxLimit: 10}))
	f.throttler = must(adaptive.NewThrottler(adaptive.ThrottlerConfig{Name: "client", Ticker: tk}))
	f.bucket = must(retry.NewTokenBucket(retry.TokenBucketConfig{}))
	f.ratio = must(retry.NewRatioBudget(retry.RatioBudgetConfig{MinRetries: 1}))
	f.retry = must(retry.New(retry.Config{Name: "fetch", Ticker: tk, MaxAttempts: 3, Rand: func(int64) int64 { return 0 }}))
	f.timeout = must(timeout.New(timeout.Config{Name: "slow", Ticker: tk, Duration: time.Second}))
	f.hedger = must(hedge.New(hedge.Config{Name: "read", Ticker: tk, Delay: 250 * time.Millisecond}))
	f.chaos = must(chaos.New(chaos.Config{ErrorRate: 1, Error: errBoom}))
	f.gate = must(bulkhead.New(bulkhead.Config{Name: "checkout", Ticker: tk, Max: 1}))
	f.pipe = must(pipeline.New(pipeline.Config{Name: "checkout", Ticker: tk, Bulkhead: f.gate, CountStats: true}))
	seven := 7
	f.fallback = must(pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: f.pipe, When: pipeline.Rejections, Value: &seven}))
	f.doFall = must(pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: f.pipe, When: pipeline.Failures,
		Failed: func(error) bool { return true }, Func: func(context.Context, pipeline.Outcome) error { return nil }}))
	f.shedTk = rampart.NewManualTicker(1e12)
	f.shedder = must(shed.New(shed.Config{Name: "cpu", Ticker: f.shedTk, SampleInterval: 100 * time.Millisecond,
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
			if f.overload {
				s.SchedLatency = 20 * time.Millisecond
			}
		})}))
	return f
}

// instances returns the fixture's instances by the names the tests add
// them under.
func (f *fixture) instances() map[string]any {
	return map[string]any{
		"api": f.breaker, "login": f.limiter, "ingest": f.sharded, "tenant": f.keyed, "db": f.bulkhead,
		"backend": f.adaptive, "client": f.throttler, "fetch": f.retry, "fetch-bucket": f.bucket,
		"fetch-ratio": f.ratio, "slow": f.timeout, "read": f.hedger, "faults": f.chaos,
		"checkout": f.pipe, "checkout-value": f.fallback, "checkout-do": f.doFall, "cpu": f.shedder,
	}
}

// drive runs the known sequence of calls whose effects want lists.
func (f *fixture) drive(t testing.TB) {
	ctx := context.Background()
	// Breaker: a success (counted: CountStats), then two failures in a
	// row trip it; one call is then rejected; 4 s of its 10 s open period
	// pass.
	p := must(f.breaker.Acquire())
	f.breaker.Release(p, rampart.Success)
	for range 2 {
		p := must(f.breaker.Acquire())
		f.breaker.Release(p, rampart.Failure)
	}
	if _, err := f.breaker.Acquire(); !errors.Is(err, circuitbreaker.ErrOpen) {
		t.Fatalf("breaker: %v, want ErrOpen", err)
	}
	f.tk.Advance(4 * time.Second)
	// Rate limits: a burst of 2 admits 2 of 3; the sharded one (2 shards
	// of burst 2) admits 4 of 5; the keyed one admits one call per key.
	for range 3 {
		f.limiter.Allow()
	}
	for range 5 {
		f.sharded.Allow()
	}
	f.keyed.Allow("a")
	f.keyed.Allow("a")
	f.keyed.Allow("b")
	// Bulkhead of 1: one held, one refused.
	if err := f.bulkhead.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := f.bulkhead.Acquire(); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("bulkhead: %v, want ErrFull", err)
	}
	// Adaptive limit of 1: one held, one refused.
	must(f.adaptive.Acquire())
	if _, err := f.adaptive.Acquire(); !errors.Is(err, rampart.ErrRejected) {
		t.Fatalf("adaptive: %v, want a rejection", err)
	}
	// Throttler: 3 requests, 1 accepted (too few for a rejection).
	for _, accepted := range []bool{true, false, false} {
		if !f.throttler.Allow() {
			t.Fatal("throttler rejected a call below MinRequests")
		}
		f.throttler.Record(accepted)
	}
	// Retry: 3 attempts that fail (2 retries, 1 give-up), no delay.
	if err := f.retry.Do(ctx, func(context.Context) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("retry: %v", err)
	}
	// Budgets: two failures take 2 of the bucket's 10 tokens; 3 requests
	// and 1 retry in the ratio budget's window.
	f.bucket.OnFailure(f.tk.Now())
	f.bucket.OnFailure(f.tk.Now())
	for range 3 {
		f.ratio.OnRequest(f.tk.Now())
	}
	f.ratio.AllowRetry(f.tk.Now())
	// Timeout: one call that ends in time.
	if err := f.timeout.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Hedge: one call that ends before its 250 ms delay.
	if err := f.hedger.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Chaos: two calls, both given the injected error.
	for range 2 {
		if err := f.chaos.Do(ctx, func(context.Context) error { return nil }); !errors.Is(err, errBoom) {
			t.Fatalf("chaos: %v", err)
		}
	}
	f.drivePipeline(t)
	f.driveShedder(t)
}

// drivePipeline: through the counting pipeline (a bulkhead of 1), a call
// succeeds and one fails; with the bulkhead's permit held elsewhere, a
// call is rejected and the fallback answers a second rejection with its
// Value; the permit back, the DoFallback answers a failure.
func (f *fixture) drivePipeline(t testing.TB) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	if err := f.pipe.Do(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if err := f.pipe.Do(ctx, fail); !errors.Is(err, errBoom) {
		t.Fatalf("pipeline: %v", err)
	}
	if err := f.gate.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := f.pipe.Do(ctx, ok); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("pipeline: %v, want ErrFull", err)
	}
	if v, err := f.fallback.Call(ctx, func(context.Context) (int, error) { return 1, nil }); v != 7 || err != nil {
		t.Fatalf("fallback: %v, %v", v, err)
	}
	f.gate.Release()
	if err := f.doFall.Do(ctx, fail); err != nil {
		t.Fatalf("DoFallback: %v", err)
	}
}

// driveShedder: a first call samples (nothing completed); 200 calls of
// 8 ms complete and the next interval's first call samples them (2,000/s),
// 100 of 2 ms complete, the Source reports 20 ms of scheduling latency (the
// threshold is 10 ms), and the next interval's first call engages the
// shedder at a cap of 4 (2,000/s × 2 ms): it and 3 more are held, a fifth
// call is shed.
func (f *fixture) driveShedder(t testing.TB) {
	sample := func() {
		f.shedTk.Advance(100 * time.Millisecond)
		p, err := f.shedder.AcquireAt(f.shedTk.Now())
		if err != nil {
			t.Fatal(err)
		}
		f.shedder.ReleaseAt(p, f.shedTk.Now(), rampart.Ignored)
	}
	complete := func(n int, rt time.Duration) {
		now := f.shedTk.Now()
		for range n {
			p := must(f.shedder.AcquireAt(now))
			f.shedder.ReleaseAt(p, now+int64(rt), rampart.Success)
		}
	}
	sample()
	complete(200, 8*time.Millisecond)
	sample()
	complete(100, 2*time.Millisecond)
	f.overload = true
	f.shedTk.Advance(100 * time.Millisecond)
	for range 4 {
		must(f.shedder.AcquireAt(f.shedTk.Now()))
	}
	if _, err := f.shedder.AcquireAt(f.shedTk.Now()); !errors.Is(err, shed.ErrOverloaded) {
		t.Fatalf("shedder: %v, want ErrOverloaded", err)
	}
}

// want is the value of every series after drive, keyed by metric name and
// instance name (and the value of its other attribute: the breaker's
// state, a pipeline call's code, ...). A series of
// the scheme missing here is expected to be 0.
var want = map[string]float64{
	"rampart.circuitbreaker.state|api|open":           1,
	"rampart.circuitbreaker.failures|api":             2,
	"rampart.circuitbreaker.consecutive_failures|api": 2,
	"rampart.circuitbreaker.rejected|api":             1,
	"rampart.circuitbreaker.transitions|api":          1,
	"rampart.circuitbreaker.trips|api":                1,
	"rampart.circuitbreaker.remaining_open|api":       6,
	"rampart.circuitbreaker.successes|api":            1,

	"rampart.ratelimit.admitted|login": 2,
	"rampart.ratelimit.rejected|login": 1,
	"rampart.ratelimit.rate|login":     1,
	"rampart.ratelimit.burst|login":    2,

	"rampart.ratelimit.admitted|ingest": 4,
	"rampart.ratelimit.rejected|ingest": 1,
	"rampart.ratelimit.rate|ingest":     4,
	"rampart.ratelimit.burst|ingest":    4,

	"rampart.ratelimit.admitted|tenant": 2,
	"rampart.ratelimit.rejected|tenant": 1,
	"rampart.ratelimit.keys|tenant":     2,

	"rampart.bulkhead.max|db":            1,
	"rampart.bulkhead.in_flight|db":      1,
	"rampart.bulkhead.peak_in_flight|db": 1,
	"rampart.bulkhead.rejected|db":       1,

	"rampart.adaptive.limit|backend":     1,
	"rampart.adaptive.in_flight|backend": 1,
	"rampart.adaptive.stride|backend":    1,
	"rampart.adaptive.rejected|backend":  1,
	"rampart.adaptive.windows|backend":   1, // the 4 s advance closed the first window

	"rampart.adaptive.throttler.window.requests|client": 3,
	"rampart.adaptive.throttler.window.accepted|client": 1,

	"rampart.retry.retries|fetch":  2,
	"rampart.retry.give_ups|fetch": 1,

	"rampart.retry.budget.tokens|fetch-bucket":         8,
	"rampart.retry.budget.window.requests|fetch-ratio": 3,
	"rampart.retry.budget.window.retries|fetch-ratio":  1,

	"rampart.hedge.delay|read": 0.25,

	"rampart.chaos.calls|faults":   2,
	"rampart.chaos.errored|faults": 2,

	"rampart.pipeline.calls|checkout|ok":                         1,
	"rampart.pipeline.calls|checkout|failed":                     2,
	"rampart.pipeline.calls|checkout|rejected":                   2,
	"rampart.pipeline.rejected|checkout|bulkhead":                2,
	"rampart.pipeline.attempts|checkout":                         5,
	"rampart.fallback.answers|checkout-value|rejected":           1,
	"rampart.fallback.answered_rejected|checkout-value|bulkhead": 1,
	"rampart.fallback.answers|checkout-do|failed":                1,

	"rampart.shed.admitted|cpu":              306,
	"rampart.shed.rejected|cpu":              1,
	"rampart.shed.in_flight|cpu":             4,
	"rampart.shed.overloaded|cpu":            1,
	"rampart.shed.overloads|cpu":             1,
	"rampart.shed.cap|cpu":                   4,
	"rampart.shed.limit|cpu":                 4,
	"rampart.shed.max_pass|cpu":              2000,
	"rampart.shed.min_rt|cpu":                0.002,
	"rampart.shed.signals.sched_latency|cpu": 0.02,
	"rampart.shed.signals.cpu|cpu":           -1,
	"rampart.shed.signals.runnable|cpu":      -1,
	"rampart.shed.samples|cpu":               3,
	"rampart.shed.stride|cpu":                2, // the last bucket's 100 completions: 3 timed in 32, to the power of two below
	"rampart.shed.trigger|cpu|sched_latency": 1,
}

// seriesKeyOf is the key of want for a series: state is the value of its
// attribute besides rampart.name, if any.
func seriesKeyOf(metric, name, state string) string {
	k := metric + "|" + name
	if state != "" {
		k += "|" + state
	}
	return k
}
