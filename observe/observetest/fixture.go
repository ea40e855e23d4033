// Package observetest is the test fixture of the exporters of package
// observe's scheme (rampartotel, rampartprom): one instance of every type
// the scheme knows, all on one ManualTicker, driven through a known
// sequence of calls whose values Want lists; the admit cases of every
// policy, for allocation gates and benchmarks of attached against
// detached instances; and a set of many instances for collection
// benchmarks. It is for tests only.
package observetest

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

// Fixture is one instance of every type the scheme knows.
type Fixture struct {
	Ticker     *rampart.ManualTicker // the clock of every instance but the shedder
	Breaker    *circuitbreaker.Breaker
	Limiter    *ratelimit.Limiter
	Sharded    *ratelimit.Sharded
	Keyed      *ratelimit.Keyed
	Bulkhead   *bulkhead.Bulkhead
	Adaptive   *adaptive.Limiter
	Throttler  *adaptive.Throttler
	Retry      *retry.Policy
	Bucket     *retry.TokenBucket
	Ratio      *retry.RatioBudget
	Timeout    *timeout.Timeout
	Hedger     *hedge.Hedger
	Chaos      *chaos.Injector
	Pipe       *pipeline.Pipeline // CountStats, over Gate
	Gate       *bulkhead.Bulkhead // the pipeline's bulkhead of 1 (not added itself)
	Fallback   *pipeline.Fallback[int]
	DoFall     *pipeline.DoFallback
	Shedder    *shed.Shedder
	overload   bool                  // the shedder's Source reports a scheduling latency of 20 ms, else nothing
	ShedTicker *rampart.ManualTicker // the shedder's clock: its intervals leave the others' readings alone
}

// Must returns v, and panics (failing the test) on err: the Fixture's
// constructions cannot fail.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// NewFixture returns a Fixture of fresh instances, on ManualTickers.
func NewFixture(t testing.TB) *Fixture {
	tk := rampart.NewManualTicker(1e12)
	f := &Fixture{Ticker: tk}
	f.Breaker = Must(circuitbreaker.New(circuitbreaker.Config{Name: "api", Ticker: tk, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 2, OpenDuration: 10 * time.Second, CountStats: true}))
	f.Limiter = Must(ratelimit.New(ratelimit.Config{Name: "login", Ticker: tk, Rate: 1, Burst: 2, CountStats: true}))
	f.Sharded = Must(ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "ingest", Ticker: tk, Rate: 4, Burst: 4, CountStats: true}, Shards: 2}))
	f.Keyed = Must(ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Name: "tenant", Ticker: tk, Rate: 1, Burst: 1, CountStats: true}}))
	f.Bulkhead = Must(bulkhead.New(bulkhead.Config{Name: "db", Ticker: tk, Max: 1}))
	f.Adaptive = Must(adaptive.New(adaptive.Config{Name: "backend", Ticker: tk, InitialLimit: 1, MinLimit: 1, MaxLimit: 10}))
	f.Throttler = Must(adaptive.NewThrottler(adaptive.ThrottlerConfig{Name: "client", Ticker: tk}))
	f.Bucket = Must(retry.NewTokenBucket(retry.TokenBucketConfig{}))
	f.Ratio = Must(retry.NewRatioBudget(retry.RatioBudgetConfig{MinRetries: 1}))
	f.Retry = Must(retry.New(retry.Config{Name: "fetch", Ticker: tk, MaxAttempts: 3, Rand: func(int64) int64 { return 0 }}))
	f.Timeout = Must(timeout.New(timeout.Config{Name: "slow", Ticker: tk, Duration: time.Second}))
	f.Hedger = Must(hedge.New(hedge.Config{Name: "read", Ticker: tk, Delay: 250 * time.Millisecond}))
	f.Chaos = Must(chaos.New(chaos.Config{ErrorRate: 1, Error: errBoom}))
	f.Gate = Must(bulkhead.New(bulkhead.Config{Name: "checkout", Ticker: tk, Max: 1}))
	f.Pipe = Must(pipeline.New(pipeline.Config{Name: "checkout", Ticker: tk, Bulkhead: f.Gate, CountStats: true}))
	seven := 7
	f.Fallback = Must(pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: f.Pipe, When: pipeline.Rejections, Value: &seven}))
	f.DoFall = Must(pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: f.Pipe, When: pipeline.Failures,
		Failed: func(error) bool { return true }, Func: func(context.Context, pipeline.Outcome) error { return nil }}))
	f.ShedTicker = rampart.NewManualTicker(1e12)
	f.Shedder = Must(shed.New(shed.Config{Name: "cpu", Ticker: f.ShedTicker, SampleInterval: 100 * time.Millisecond,
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
			if f.overload {
				s.SchedLatency = 20 * time.Millisecond
			}
		})}))
	return f
}

// Instances returns the Fixture's instances by the names the tests add
// them under.
func (f *Fixture) Instances() map[string]any {
	return map[string]any{
		"api": f.Breaker, "login": f.Limiter, "ingest": f.Sharded, "tenant": f.Keyed, "db": f.Bulkhead,
		"backend": f.Adaptive, "client": f.Throttler, "fetch": f.Retry, "fetch-bucket": f.Bucket,
		"fetch-ratio": f.Ratio, "slow": f.Timeout, "read": f.Hedger, "faults": f.Chaos,
		"checkout": f.Pipe, "checkout-value": f.Fallback, "checkout-do": f.DoFall, "cpu": f.Shedder,
	}
}

// Drive runs the known sequence of calls whose effects Want lists.
func (f *Fixture) Drive(t testing.TB) {
	ctx := context.Background()
	// Breaker: a success (counted: CountStats), then two failures in a
	// row trip it; one call is then rejected; 4 s of its 10 s open period
	// pass.
	p := Must(f.Breaker.Acquire())
	f.Breaker.Release(p, rampart.Success)
	for range 2 {
		p := Must(f.Breaker.Acquire())
		f.Breaker.Release(p, rampart.Failure)
	}
	if _, err := f.Breaker.Acquire(); !errors.Is(err, circuitbreaker.ErrOpen) {
		t.Fatalf("breaker: %v, want ErrOpen", err)
	}
	f.Ticker.Advance(4 * time.Second)
	// Rate limits: a burst of 2 admits 2 of 3; the sharded one (2 shards
	// of burst 2) admits 4 of 5; the keyed one admits one call per key.
	for range 3 {
		f.Limiter.Allow()
	}
	for range 5 {
		f.Sharded.Allow()
	}
	f.Keyed.Allow("a")
	f.Keyed.Allow("a")
	f.Keyed.Allow("b")
	// Bulkhead of 1: one held, one refused.
	if err := f.Bulkhead.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := f.Bulkhead.Acquire(); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("bulkhead: %v, want ErrFull", err)
	}
	// Adaptive limit of 1: one held, one refused.
	Must(f.Adaptive.Acquire())
	if _, err := f.Adaptive.Acquire(); !errors.Is(err, rampart.ErrRejected) {
		t.Fatalf("adaptive: %v, want a rejection", err)
	}
	// Throttler: 3 requests, 1 accepted (too few for a rejection).
	for _, accepted := range []bool{true, false, false} {
		if !f.Throttler.Allow() {
			t.Fatal("throttler rejected a call below MinRequests")
		}
		f.Throttler.Record(accepted)
	}
	// Retry: 3 attempts that fail (2 retries, 1 give-up), no delay.
	if err := f.Retry.Do(ctx, func(context.Context) error { return errBoom }); !errors.Is(err, errBoom) {
		t.Fatalf("retry: %v", err)
	}
	// Budgets: two failures take 2 of the bucket's 10 tokens; 3 requests
	// and 1 retry in the ratio budget's window.
	f.Bucket.OnFailure(f.Ticker.Now())
	f.Bucket.OnFailure(f.Ticker.Now())
	for range 3 {
		f.Ratio.OnRequest(f.Ticker.Now())
	}
	f.Ratio.AllowRetry(f.Ticker.Now())
	// Timeout: one call that ends in time.
	if err := f.Timeout.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Hedge: one call that ends before its 250 ms delay.
	if err := f.Hedger.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// Chaos: two calls, both given the injected error.
	for range 2 {
		if err := f.Chaos.Do(ctx, func(context.Context) error { return nil }); !errors.Is(err, errBoom) {
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
func (f *Fixture) drivePipeline(t testing.TB) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	if err := f.Pipe.Do(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if err := f.Pipe.Do(ctx, fail); !errors.Is(err, errBoom) {
		t.Fatalf("pipeline: %v", err)
	}
	if err := f.Gate.Acquire(); err != nil {
		t.Fatal(err)
	}
	if err := f.Pipe.Do(ctx, ok); !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("pipeline: %v, want ErrFull", err)
	}
	if v, err := f.Fallback.Call(ctx, func(context.Context) (int, error) { return 1, nil }); v != 7 || err != nil {
		t.Fatalf("fallback: %v, %v", v, err)
	}
	f.Gate.Release()
	if err := f.DoFall.Do(ctx, fail); err != nil {
		t.Fatalf("DoFallback: %v", err)
	}
}

// driveShedder: a first call samples (nothing completed); 200 calls of
// 8 ms complete and the next interval's first call samples them (2,000/s),
// 100 of 2 ms complete, the Source reports 20 ms of scheduling latency (the
// threshold is 10 ms), and the next interval's first call engages the
// shedder at a cap of 4 (2,000/s × 2 ms), a limit of 5 (the cap and one
// call more, package shed): it and 4 more are held, a sixth call is shed.
func (f *Fixture) driveShedder(t testing.TB) {
	sample := func() {
		f.ShedTicker.Advance(100 * time.Millisecond)
		p, err := f.Shedder.AcquireAt(f.ShedTicker.Now())
		if err != nil {
			t.Fatal(err)
		}
		f.Shedder.ReleaseAt(p, f.ShedTicker.Now(), rampart.Ignored)
	}
	complete := func(n int, rt time.Duration) {
		now := f.ShedTicker.Now()
		for range n {
			p := Must(f.Shedder.AcquireAt(now))
			f.Shedder.ReleaseAt(p, now+int64(rt), rampart.Success)
		}
	}
	sample()
	complete(200, 8*time.Millisecond)
	sample()
	complete(100, 2*time.Millisecond)
	f.overload = true
	f.ShedTicker.Advance(100 * time.Millisecond)
	for range 5 {
		Must(f.Shedder.AcquireAt(f.ShedTicker.Now()))
	}
	if _, err := f.Shedder.AcquireAt(f.ShedTicker.Now()); !errors.Is(err, shed.ErrOverloaded) {
		t.Fatalf("shedder: %v, want ErrOverloaded", err)
	}
}

// Want is the value of every series after drive, keyed by metric name and
// instance name (and the value of its other attribute: the breaker's
// state, a pipeline call's code, ...). A series of
// the scheme missing here is expected to be 0.
var Want = map[string]float64{
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

	"rampart.shed.admitted|cpu":              307,
	"rampart.shed.rejected|cpu":              1,
	"rampart.shed.in_flight|cpu":             5,
	"rampart.shed.overloaded|cpu":            1,
	"rampart.shed.overloads|cpu":             1,
	"rampart.shed.cap|cpu":                   4,
	"rampart.shed.limit|cpu":                 5,
	"rampart.shed.max_pass|cpu":              2000,
	"rampart.shed.min_rt|cpu":                0.002,
	"rampart.shed.signals.sched_latency|cpu": 0.02,
	"rampart.shed.signals.cpu|cpu":           -1,
	"rampart.shed.signals.runnable|cpu":      -1,
	"rampart.shed.samples|cpu":               3,
	"rampart.shed.stride|cpu":                2, // the last bucket's 100 completions: 3 timed in 32, to the power of two below
	"rampart.shed.trigger|cpu|sched_latency": 1,
}

// SeriesKey is the key of Want for a series: state is the value of its
// attribute besides rampart.name, if any.
func SeriesKey(metric, name, state string) string {
	k := metric + "|" + name
	if state != "" {
		k += "|" + state
	}
	return k
}
