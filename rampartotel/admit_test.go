package rampartotel

// This file is shared word for word by rampartotel and rampartprom (each
// module holds a copy): every policy's admit case, for the allocation gate
// and the benchmarks of attached against detached instances.

import (
	"context"
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

// admitCase is one policy's admission (and release, where it has one).
type admitCase struct {
	name   string
	run    func()
	allocs float64 // the policy's own allocations per call, detached
}

// newAdmitFixture returns instances of every kind configured to admit every
// call, on the default ticker: rate limits of a billion calls per second,
// a chaos injector that injects nothing.
func newAdmitFixture() *fixture {
	f := &fixture{}
	f.breaker = must(circuitbreaker.New(circuitbreaker.Config{Name: "api"}))
	f.limiter = must(ratelimit.New(ratelimit.Config{Name: "login", Rate: 1e9, Burst: 1 << 20}))
	f.sharded = must(ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "ingest", Rate: 1e9, Burst: 1 << 20}, Shards: 2}))
	f.keyed = must(ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Name: "tenant", Rate: 1e9, Burst: 1 << 20}}))
	f.bulkhead = must(bulkhead.New(bulkhead.Config{Name: "db", Max: 1 << 20}))
	f.adaptive = must(adaptive.New(adaptive.Config{Name: "backend", InitialLimit: 1 << 10, MaxLimit: 1 << 10}))
	f.throttler = must(adaptive.NewThrottler(adaptive.ThrottlerConfig{Name: "client"}))
	f.bucket = must(retry.NewTokenBucket(retry.TokenBucketConfig{}))
	f.ratio = must(retry.NewRatioBudget(retry.RatioBudgetConfig{}))
	f.retry = must(retry.New(retry.Config{Name: "fetch", Budget: f.bucket}))
	f.timeout = must(timeout.New(timeout.Config{Name: "slow", Duration: time.Second}))
	f.hedger = must(hedge.New(hedge.Config{Name: "read", Delay: time.Second}))
	f.chaos = must(chaos.New(chaos.Config{}))
	f.gate = must(bulkhead.New(bulkhead.Config{Name: "checkout", Max: 1 << 20}))
	f.pipe = must(pipeline.New(pipeline.Config{Name: "checkout", Bulkhead: f.gate, CountStats: true}))
	seven := 7
	f.fallback = must(pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: f.pipe, When: pipeline.Rejections, Value: &seven}))
	f.doFall = must(pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: f.pipe, When: pipeline.Rejections,
		Func: func(context.Context, pipeline.Outcome) error { return nil }}))
	f.shedder = must(shed.New(shed.Config{Name: "cpu"}))
	return f
}

// admitCases returns the admit case of every kind of f (a fixture of
// newAdmitFixture).
func admitCases(f *fixture) []admitCase {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	return []admitCase{
		{"CircuitBreaker", func() {
			p, err := f.breaker.Acquire()
			if err == nil {
				f.breaker.Release(p, rampart.Success)
			}
		}, 0},
		{"RateLimit", func() { f.limiter.Allow() }, 0},
		{"RateLimitSharded", func() { f.sharded.Allow() }, 0},
		{"RateLimitKeyed", func() { f.keyed.Allow("a") }, 0},
		{"Bulkhead", func() {
			if f.bulkhead.Acquire() == nil {
				f.bulkhead.Release()
			}
		}, 0},
		{"Adaptive", func() {
			p, err := f.adaptive.Acquire()
			if err == nil {
				f.adaptive.Release(p, rampart.Success)
			}
		}, 0},
		{"Throttler", func() {
			if f.throttler.Allow() {
				f.throttler.Record(true)
			}
		}, 0},
		{"Retry", func() { _ = f.retry.Do(ctx, ok) }, 0},
		{"Timeout", func() { _ = f.timeout.Do(ctx, ok) }, 1}, // the deadline context Do hands fn (package timeout, Allocations)
		{"Hedge", func() { _ = f.hedger.Do(ctx, ok) }, 0},
		{"Chaos", func() { _ = f.chaos.Do(ctx, ok) }, 0},
		{"Pipeline", func() { _ = f.pipe.Do(ctx, ok) }, 0},
		{"Fallback", func() { _, _ = f.fallback.Call(ctx, func(context.Context) (int, error) { return 1, nil }) }, 0},
		{"DoFallback", func() { _ = f.doFall.Do(ctx, ok) }, 0},
		{"Shed", func() {
			p, err := f.shedder.Acquire()
			if err == nil {
				f.shedder.Release(p, rampart.Success)
			}
		}, 0},
	}
}
