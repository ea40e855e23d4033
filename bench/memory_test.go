package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/eapache/go-resiliency/deadline"
	"github.com/eapache/go-resiliency/retrier"
	resiliency "github.com/eapache/go-resiliency/semaphore"
	"github.com/failsafe-go/failsafe-go"
	fsal "github.com/failsafe-go/failsafe-go/adaptivelimiter"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fshedge "github.com/failsafe-go/failsafe-go/hedgepolicy"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"
	"github.com/sony/gobreaker/v2"
	uberrl "go.uber.org/ratelimit"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// memInstances is how many instances one measurement of the Memory group
// builds and keeps alive.
const memInstances = 10_000

// instanceBytes returns the heap bytes one call of mk allocates, averaged
// over memInstances calls whose results are all kept alive until the end:
// what a program holding thousands of instances (per tenant, per route)
// pays, in the allocator's size classes, the garbage New leaves included.
// One call before the count warms up lazily built globals. (The core's
// internal/testkit.Bytes does the same for the packages' gates; the bench
// module imports nothing under the core's internal/, so it has its own.)
func instanceBytes(mk func() any) float64 {
	keep := make([]any, memInstances)
	keep[0] = mk()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk()
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64((after.TotalAlloc - before.TotalAlloc) / memInstances) // floored: a stray allocation elsewhere adds little
}

// memCase is one Memory case: each b.Loop iteration measures instanceBytes
// of mk, reported as B/instance (the time per iteration is that of 10k
// constructions and is not the point).
func memCase(b *testing.B, mk func() any) {
	var v float64
	for b.Loop() {
		v = instanceBytes(mk)
	}
	b.ReportMetric(v, "B/instance")
}

// must returns v, and panics on err: a configuration the case's New
// refuses is a bug of the benchmark.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// quickStart builds the README's quick start: a token-bucket retry budget,
// a retry, a breaker, a rate limiter, a bulkhead, a timeout and the
// pipeline over them, each with its default configuration, compact or not
// (the policies and the budget that have Compact).
func quickStart(compact bool) any {
	budget := must(retry.NewTokenBucket(retry.TokenBucketConfig{Compact: compact}))
	rt := must(retry.New(retry.Config{MaxAttempts: 3, Budget: budget}))
	cb := must(circuitbreaker.New(circuitbreaker.Config{Name: "db", Compact: compact}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100, Compact: compact}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 32, Compact: compact}))
	to := must(timeout.New(timeout.Config{Duration: 200 * time.Millisecond}))
	return must(pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh, Timeout: to}))
}

// BenchmarkMemory measures the bytes of one instance of each policy, built
// with its default configuration (the README's where it has one), beside
// the peers' like instances: Memory/<Policy>/rampart (the default, padded
// layout), rampart-compact (Config.Compact) and the peers. The Pipeline
// case is the README's quick start in full (five policies, the retry
// budget and the pipeline) against failsafe.With over its like policies.
func BenchmarkMemory(b *testing.B) {
	type libCase struct {
		lib string
		mk  func() any
	}
	cases := []struct {
		policy string
		libs   []libCase
	}{
		{"CircuitBreaker", []libCase{
			{"rampart", func() any {
				return must(circuitbreaker.New(circuitbreaker.Config{Name: "db"}))
			}},
			{"rampart-compact", func() any {
				return must(circuitbreaker.New(circuitbreaker.Config{Name: "db", Compact: true}))
			}},
			{"failsafe", func() any { return fscb.NewWithDefaults[any]() }},
			{"gobreaker", func() any { return gobreaker.NewCircuitBreaker[any](gobreaker.Settings{Name: "db"}) }},
			{"goresiliency", func() any { return breaker.New(5, 1, 5*time.Second) }},
		}},
		{"RateLimit", []libCase{
			{"rampart", func() any { return must(ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100})) }},
			{"rampart-compact", func() any {
				return must(ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100, Compact: true}))
			}},
			{"failsafe", func() any { return fsratelimiter.NewBursty[any](1000, time.Second) }},
			{"xtimerate", func() any { return rate.NewLimiter(1000, 100) }},
			{"uberratelimit", func() any { return uberrl.New(1000) }},
		}},
		{"Bulkhead", []libCase{
			{"rampart", func() any { return must(bulkhead.New(bulkhead.Config{Max: 32})) }},
			{"rampart-compact", func() any { return must(bulkhead.New(bulkhead.Config{Max: 32, Compact: true})) }},
			{"failsafe", func() any { return fsbulkhead.New[any](32) }},
			{"goresiliency", func() any { return resiliency.New(32, 0) }},
			{"xsync", func() any { return semaphore.NewWeighted(32) }},
			{"chan", func() any { return make(chan struct{}, 32) }},
		}},
		{"Adaptive", []libCase{
			{"rampart", func() any { return must(adaptive.New(adaptive.Config{})) }},
			{"rampart-compact", func() any { return must(adaptive.New(adaptive.Config{Compact: true})) }},
			{"failsafe", func() any { return fsal.NewBuilder[any]().Build() }},
		}},
		{"Timeout", []libCase{
			{"rampart", func() any { return must(timeout.New(timeout.Config{Duration: 200 * time.Millisecond})) }},
			{"failsafe", func() any { return fstimeout.New[any](200 * time.Millisecond) }},
			{"goresiliency", func() any { return deadline.New(200 * time.Millisecond) }},
		}},
		{"Retry", []libCase{
			{"rampart", func() any { return must(retry.New(retry.Config{MaxAttempts: 3})) }},
			{"failsafe", func() any { return fsretry.NewBuilder[any]().WithMaxAttempts(3).Build() }},
			{"goresiliency", func() any { return retrier.New(retrier.ExponentialBackoff(3, 100*time.Millisecond), nil) }},
		}},
		{"Hedge", []libCase{
			{"rampart", func() any { return must(hedge.New(hedge.Config{Delay: 10 * time.Millisecond})) }},
			{"failsafe", func() any { return fshedge.NewWithDelay[any](10 * time.Millisecond) }},
		}},
		{"Pipeline", []libCase{
			{"rampart", func() any { return quickStart(false) }},
			{"rampart-compact", func() any { return quickStart(true) }},
			{"failsafe", func() any {
				return failsafe.With[any](
					fsretry.NewBuilder[any]().WithMaxAttempts(3).Build(),
					fscb.NewWithDefaults[any](),
					fsratelimiter.NewBursty[any](1000, time.Second),
					fsbulkhead.New[any](32),
					fstimeout.New[any](200*time.Millisecond))
			}},
		}},
	}
	for _, c := range cases {
		for _, l := range c.libs {
			b.Run(c.policy+"/"+l.lib, func(b *testing.B) { memCase(b, l.mk) })
		}
	}
}

// TestMemoryQuickStartShares logs what each part of the README's quick
// start costs (go test -v -run MemoryQuickStart) and gates the pipeline's
// own share, 160 B with any policies (144 before Config.Shed added a
// pointer): it keeps pointers to them, not a copy of its Config. It gates
// exactly the shares of the retry budget (64 B, 32 Compact), the retry
// (192), the breaker named "db" (752 in both layouts) and the timeout
// (224), and the quick start in total at 2 KiB at most in the default
// layout (1888 B when these were measured, 1664 B Compact; 2528 and 2336
// before). The policies' own gates are in their packages.
func TestMemoryQuickStartShares(t *testing.T) {
	least := func(mk func() any) float64 { // a stray allocation elsewhere only adds
		return min(instanceBytes(mk), instanceBytes(mk), instanceBytes(mk))
	}
	budget := must(retry.NewTokenBucket(retry.TokenBucketConfig{}))
	rt := must(retry.New(retry.Config{MaxAttempts: 3, Budget: budget}))
	cb := must(circuitbreaker.New(circuitbreaker.Config{Name: "db"}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 32}))
	to := must(timeout.New(timeout.Config{Duration: 200 * time.Millisecond}))
	al := must(adaptive.New(adaptive.Config{}))
	own := least(func() any {
		return must(pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh, Timeout: to}))
	})
	withAdaptive := least(func() any {
		return must(pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh, Timeout: to, Adaptive: al}))
	})
	for _, compact := range []bool{false, true} {
		budgetBytes := 64.0
		if compact {
			budgetBytes = 32
		}
		parts := []struct {
			name string
			want float64 // the exact gate; 0: logged only (another package's share)
			mk   func() any
		}{ // the quick start's parts, then adaptive, which it does not build
			{"retry budget", budgetBytes, func() any {
				return must(retry.NewTokenBucket(retry.TokenBucketConfig{Compact: compact}))
			}},
			{"retry", 192, func() any { return must(retry.New(retry.Config{MaxAttempts: 3, Budget: budget})) }},
			{"circuit breaker", 752, func() any {
				return must(circuitbreaker.New(circuitbreaker.Config{Name: "db", Compact: compact}))
			}},
			{"rate limiter", 0, func() any {
				return must(ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100, Compact: compact}))
			}},
			{"bulkhead", 0, func() any { return must(bulkhead.New(bulkhead.Config{Max: 32, Compact: compact})) }},
			{"timeout", 224, func() any { return must(timeout.New(timeout.Config{Duration: 200 * time.Millisecond})) }},
			{"adaptive (not in the quick start)", 0, func() any { return must(adaptive.New(adaptive.Config{Compact: compact})) }},
		}
		total := own
		for _, p := range parts {
			v := least(p.mk)
			if p.name != parts[len(parts)-1].name {
				total += v
			}
			t.Logf("Compact %-5v %-34s %6.0f B", compact, p.name, v)
			if p.want != 0 && v != p.want && runtime.GOARCH == "amd64" {
				t.Errorf("Compact %v, %s: %v B, want %v", compact, p.name, v, p.want)
			}
		}
		t.Logf("Compact %-5v %-34s %6.0f B", compact, "pipeline's own share", own)
		t.Logf("Compact %-5v %-34s %6.0f B", compact, "quick start in total", total)
		if total > 2048 && runtime.GOARCH == "amd64" {
			t.Errorf("Compact %v: the quick start is %v B, want at most 2048", compact, total)
		}
	}
	if own != 160 || withAdaptive != 160 {
		t.Errorf("the pipeline's own share: %v B with five policies, %v B with six, want 160", own, withAdaptive)
	}
}
