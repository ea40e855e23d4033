package observetest

import (
	"context"
	"fmt"
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

// AdmitCase is one policy's admission (and release, where it has one).
type AdmitCase struct {
	Name   string
	Run    func()
	Allocs float64 // the policy's own allocations per call, detached
}

// NewAdmitFixture returns instances of every kind configured to admit every
// call, on the default ticker: rate limits of a billion calls per second,
// a chaos injector that injects nothing.
func NewAdmitFixture() *Fixture {
	f := &Fixture{}
	f.Breaker = Must(circuitbreaker.New(circuitbreaker.Config{Name: "api"}))
	f.Limiter = Must(ratelimit.New(ratelimit.Config{Name: "login", Rate: 1e9, Burst: 1 << 20}))
	f.Sharded = Must(ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "ingest", Rate: 1e9, Burst: 1 << 20}, Shards: 2}))
	f.Keyed = Must(ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Name: "tenant", Rate: 1e9, Burst: 1 << 20}}))
	f.Bulkhead = Must(bulkhead.New(bulkhead.Config{Name: "db", Max: 1 << 20}))
	f.Adaptive = Must(adaptive.New(adaptive.Config{Name: "backend", InitialLimit: 1 << 10, MaxLimit: 1 << 10}))
	f.Throttler = Must(adaptive.NewThrottler(adaptive.ThrottlerConfig{Name: "client"}))
	f.Bucket = Must(retry.NewTokenBucket(retry.TokenBucketConfig{}))
	f.Ratio = Must(retry.NewRatioBudget(retry.RatioBudgetConfig{}))
	f.Retry = Must(retry.New(retry.Config{Name: "fetch", Budget: f.Bucket}))
	f.Timeout = Must(timeout.New(timeout.Config{Name: "slow", Duration: time.Second}))
	f.Hedger = Must(hedge.New(hedge.Config{Name: "read", Delay: time.Second}))
	f.Chaos = Must(chaos.New(chaos.Config{}))
	f.Gate = Must(bulkhead.New(bulkhead.Config{Name: "checkout", Max: 1 << 20}))
	f.Pipe = Must(pipeline.New(pipeline.Config{Name: "checkout", Bulkhead: f.Gate, CountStats: true}))
	seven := 7
	f.Fallback = Must(pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: f.Pipe, When: pipeline.Rejections, Value: &seven}))
	f.DoFall = Must(pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: f.Pipe, When: pipeline.Rejections,
		Func: func(context.Context, pipeline.Outcome) error { return nil }}))
	f.Shedder = Must(shed.New(shed.Config{Name: "cpu"}))
	return f
}

// AdmitCases returns the admit case of every kind of f (a Fixture of
// NewAdmitFixture).
func AdmitCases(f *Fixture) []AdmitCase {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	return []AdmitCase{
		{"CircuitBreaker", func() {
			p, err := f.Breaker.Acquire()
			if err == nil {
				f.Breaker.Release(p, rampart.Success)
			}
		}, 0},
		{"RateLimit", func() { f.Limiter.Allow() }, 0},
		{"RateLimitSharded", func() { f.Sharded.Allow() }, 0},
		{"RateLimitKeyed", func() { f.Keyed.Allow("a") }, 0},
		{"Bulkhead", func() {
			if f.Bulkhead.Acquire() == nil {
				f.Bulkhead.Release()
			}
		}, 0},
		{"Adaptive", func() {
			p, err := f.Adaptive.Acquire()
			if err == nil {
				f.Adaptive.Release(p, rampart.Success)
			}
		}, 0},
		{"Throttler", func() {
			if f.Throttler.Allow() {
				f.Throttler.Record(true)
			}
		}, 0},
		{"Retry", func() { _ = f.Retry.Do(ctx, ok) }, 0},
		{"Timeout", func() { _ = f.Timeout.Do(ctx, ok) }, 1}, // the deadline context Do hands fn (package timeout, Allocations)
		{"Hedge", func() { _ = f.Hedger.Do(ctx, ok) }, 0},
		{"Chaos", func() { _ = f.Chaos.Do(ctx, ok) }, 0},
		{"Pipeline", func() { _ = f.Pipe.Do(ctx, ok) }, 0},
		{"Fallback", func() { _, _ = f.Fallback.Call(ctx, func(context.Context) (int, error) { return 1, nil }) }, 0},
		{"DoFallback", func() { _ = f.DoFall.Do(ctx, ok) }, 0},
		{"Shed", func() {
			p, err := f.Shedder.Acquire()
			if err == nil {
				f.Shedder.Release(p, rampart.Success)
			}
		}, 0},
	}
}

// ManyInstances adds n named instances with add, a breaker, a rate
// limiter and a bulkhead in turn (their Stats are the costliest and the
// most common).
func ManyInstances(t testing.TB, n int, add func(name string, inst any) error) {
	t.Helper()
	for i := range n {
		f := NewAdmitFixture()
		var inst any
		switch i % 3 {
		case 0:
			inst = f.Breaker
		case 1:
			inst = f.Limiter
		default:
			inst = f.Bulkhead
		}
		if err := add(fmt.Sprintf("instance-%04d", i), inst); err != nil {
			t.Fatal(err)
		}
	}
}
