package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fsfallback "github.com/failsafe-go/failsafe-go/fallback"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
)

// BenchmarkFallback measures a fallback stage around the four policies of
// Pipeline/SuccessNoTimeout (retry, circuit breaker, rate limiter,
// bulkhead) for a call returning a string: rampart's pipeline.Fallback
// against failsafe-go's fallback policy as the outermost of failsafe.With
// over the same policies.
//
//   - Success: every policy admits, the call returns a value. rampart: the
//     pipeline alone (pipeline.Call, no fallback), and Fallback.Call with
//     a Value (rampart-value), a Func (rampart-func) and the last good
//     value (rampart-stale: every success stores its value, a new reading
//     each time on the default ticker); the -cached rows share a
//     rampart.CachedTicker (rampart-cached-stale stores once per tick).
//     failsafe: With(fallback, retry, breaker, rate limiter, bulkhead).Get.
//   - Try: Success on the cached ticker through the outcome API
//     (pipeline.TryCall, Fallback.Try with a Value), which returns the
//     Outcome by value.
//   - Reject: the rate limiter's only permit is spent; the fallback answers
//     every call (rampart: the pipeline's rejection, and the Value, Func and
//     stale answers; failsafe: its fallback's result).
func BenchmarkFallback(b *testing.B) {
	for _, c := range []struct {
		name   string
		cached bool
		kind   fallbackKind
	}{
		{"rampart", false, fbNone}, {"rampart-value", false, fbValue}, {"rampart-func", false, fbFunc},
		{"rampart-stale", false, fbStale},
		{"rampart-cached", true, fbNone}, {"rampart-cached-value", true, fbValue}, {"rampart-cached-stale", true, fbStale},
	} {
		b.Run("Success/"+c.name, func(b *testing.B) { benchRampartFallback(b, c.cached, c.kind, false) })
	}
	b.Run("Success/failsafe", func(b *testing.B) { benchFailsafeFallback(b, false) })
	b.Run("Try/rampart-cached", func(b *testing.B) { benchRampartTry(b, false) })
	b.Run("Try/rampart-cached-value", func(b *testing.B) { benchRampartTry(b, true) })
	for _, c := range []struct {
		name string
		kind fallbackKind
	}{{"rampart", fbNone}, {"rampart-value", fbValue}, {"rampart-func", fbFunc}, {"rampart-stale", fbStale}} {
		b.Run("Reject/"+c.name, func(b *testing.B) { benchRampartFallback(b, false, c.kind, true) })
	}
	b.Run("Reject/failsafe", func(b *testing.B) { benchFailsafeFallback(b, true) })
}

// fallbackKind is the answer of a benchmarked rampart fallback.
type fallbackKind uint8

const (
	fbNone fallbackKind = iota // no fallback: pipeline.Call
	fbValue
	fbFunc
	fbStale
)

func fallbackOK(context.Context) (string, error) { return "fresh", nil }

func benchRampartFallback(b *testing.B, cached bool, kind fallbackKind, reject bool) {
	var tick rampart.Ticker
	if cached {
		tick = cachedTicker(b)
	}
	p, err := rampartPipeline(b, tick, noTimeout, reject && kind != fbStale)
	if err != nil {
		b.Fatal(err)
	}
	primeStale := reject && kind == fbStale
	if primeStale {
		// The rejecting rate limiter with a second permit, which the
		// success that stores the stale value spends.
		cfg := p.Config()
		if cfg.RateLimit, err = ratelimit.New(ratelimit.Config{Rate: 1e-6, Burst: 2, Ticker: tick}); err != nil {
			b.Fatal(err)
		}
		if !cfg.RateLimit.Allow() {
			b.Fatal("could not spend the first permit")
		}
		if p, err = pipeline.New(cfg); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	call := func() (string, error) { return pipeline.Call(ctx, p, fallbackOK) }
	if kind != fbNone {
		cfg := pipeline.FallbackConfig[string]{Pipeline: p}
		switch kind {
		case fbValue:
			cfg.Value = new("fallback")
		case fbFunc:
			cfg.Func = func(context.Context, pipeline.Outcome) (string, error) { return "fallback", nil }
		case fbStale:
			cfg.Stale, cfg.MaxAge = true, time.Hour
		}
		fb, err := pipeline.NewFallback(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if primeStale {
			if _, err := fb.Call(ctx, fallbackOK); err != nil {
				b.Fatal(err)
			}
		}
		call = func() (string, error) { return fb.Call(ctx, fallbackOK) }
	}
	want := "fresh"
	switch {
	case reject && kind == fbStale:
	case reject && kind != fbNone:
		want = "fallback"
	case reject:
		want = ""
	}
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		v, err := call()
		if v != want || (err != nil) != (reject && kind == fbNone) {
			b.Fatalf("got %q, %v", v, err)
		}
	}
}

// failsafeFallbackPipeline is failsafePipeline without the timeout, typed
// for a string, with a fallback outermost.
func failsafeFallbackPipeline(reject bool) failsafe.Executor[string] {
	rp := fsretry.NewBuilder[string]().
		HandleErrors(errPipelineBench).
		WithMaxAttempts(3).
		WithBackoff(10*time.Millisecond, time.Second).
		Build()
	cb := fscb.NewBuilder[string]().
		HandleErrors(errPipelineBench).
		WithFailureThresholdRatio(50, 100).
		WithDelay(time.Minute).
		Build()
	var rl fsratelimiter.RateLimiter[string]
	if reject {
		rl = fsratelimiter.NewBurstyBuilder[string](1, time.Hour).Build()
		rl.TryAcquirePermit() // spend the only permit
	} else {
		rl = fsratelimiter.NewBurstyBuilder[string](1<<30, time.Second).Build()
	}
	bh := fsbulkhead.New[string](1 << 20)
	fb := fsfallback.NewBuilderWithResult("fallback").
		HandleIf(func(_ string, err error) bool { return errors.Is(err, fsratelimiter.ErrExceeded) }).
		Build()
	return failsafe.With[string](fb, rp, cb, rl, bh)
}

func benchFailsafeFallback(b *testing.B, reject bool) {
	ex := failsafeFallbackPipeline(reject)
	fn := func() (string, error) { return "fresh", nil }
	want := "fresh"
	if reject {
		want = "fallback"
	}
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if v, err := ex.Get(fn); v != want || err != nil {
			b.Fatalf("got %q, %v", v, err)
		}
	}
}

// benchRampartTry is Success/rampart-cached through TryCall, or through a
// Value fallback's Try.
func benchRampartTry(b *testing.B, withFallback bool) {
	p, err := rampartPipeline(b, cachedTicker(b), noTimeout, false)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Value: new("fallback")})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	if withFallback {
		for b.Loop() {
			if v, o := fb.Try(ctx, fallbackOK); v != "fresh" || o.Code != pipeline.OK {
				b.Fatalf("got %q, %v", v, o.Err)
			}
		}
		return
	}
	for b.Loop() {
		if v, o := pipeline.TryCall(ctx, p, fallbackOK); v != "fresh" || o.Code != pipeline.OK {
			b.Fatalf("got %q, %v", v, o.Err)
		}
	}
}
