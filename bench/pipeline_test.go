package bench

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	fsretry "github.com/failsafe-go/failsafe-go/retrypolicy"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// errPipelineBench is the only error the benchmarks' retries would retry;
// the measured calls never return it, so no case sleeps.
var errPipelineBench = errors.New("bench: retryable")

// BenchmarkPipeline measures the composition of five policies (retry,
// circuit breaker, rate limiter, bulkhead, timeout) around a call that does
// nothing: rampart's pipeline (default ticker, and a cached ticker shared by
// every policy) against failsafe.With over the same five policies.
//
//   - Success: every policy admits; the call returns nil.
//   - SuccessParallel: the same from GOMAXPROCS goroutines.
//   - Success/rampart-counted, SuccessParallel/rampart-counted: the rampart
//     row with Config.CountStats (per-P outcome counters): its on-cost.
//   - Success/rampart-shed, SuccessParallel/rampart-shed: the rampart row
//     with a shed.Shedder in the pipeline (never engaged: a Source that
//     knows no signal), the cost of an overload shedder that admits; it
//     makes the pipeline read the end time too.
//   - Reject: the rate limiter's only permit is spent; every call is refused
//     there (after the breaker admitted it).
//   - SuccessNoTimeout: Success without the timeout (rampart: zero
//     allocations; the timeout's context is its one allocation).
//   - SuccessSoftTimeout: Success with rampart's timeout in soft mode (the
//     call keeps the caller's context and is only classified as timed out
//     when it returns late: zero allocations). failsafe has no such mode;
//     its row is its (cancelling) timeout, as in Success.
//   - SuccessSoftTimeout/rampart-primitives: the same policies on the cached
//     ticker called by hand through their primitives, in the pipeline's
//     order (no retry loop, no outcome, no panic guard): what the policies
//     themselves cost, and so the pipeline's own share by difference.
//   - CalleeReadsDone: Success (deadline-mode timeout), but the callee reads
//     its context's Done and Err (calleeReadsDone), as real callees do.
//   - CancellableParent: CalleeReadsDone under a parent from
//     context.WithCancel (made once, as one request's context serving many
//     calls): the timeout's context registers with it.
//   - TimeNow/direct: one time.Now(), the yardstick of the cached ticker.
//
// Besides ns/op, each case reports cpu-ns/op, the process's CPU time per
// operation, which the waits of an oversubscribed machine do not inflate.
func BenchmarkPipeline(b *testing.B) {
	b.Run("Success/rampart", func(b *testing.B) { benchRampartPipeline(b, nil, deadlineTimeout, false, false) })
	b.Run("Success/rampart-cached", func(b *testing.B) { benchRampartPipeline(b, cachedTicker(b), deadlineTimeout, false, false) })
	b.Run("Success/failsafe", func(b *testing.B) { benchFailsafePipeline(b, true, false, false) })
	b.Run("Success/rampart-counted", func(b *testing.B) { benchRampartPipelineWith(b, counted, false) })
	b.Run("Success/rampart-shed", func(b *testing.B) { benchRampartPipelineWith(b, withShed, false) })
	b.Run("SuccessParallel/rampart", func(b *testing.B) { benchRampartPipeline(b, nil, deadlineTimeout, true, false) })
	b.Run("SuccessParallel/rampart-counted", func(b *testing.B) { benchRampartPipelineWith(b, counted, true) })
	b.Run("SuccessParallel/rampart-shed", func(b *testing.B) { benchRampartPipelineWith(b, withShed, true) })
	b.Run("SuccessParallel/rampart-cached", func(b *testing.B) { benchRampartPipeline(b, cachedTicker(b), deadlineTimeout, true, false) })
	b.Run("SuccessParallel/failsafe", func(b *testing.B) { benchFailsafePipeline(b, true, true, false) })
	b.Run("Reject/rampart", func(b *testing.B) { benchRampartPipeline(b, nil, deadlineTimeout, false, true) })
	b.Run("Reject/rampart-cached", func(b *testing.B) { benchRampartPipeline(b, cachedTicker(b), deadlineTimeout, false, true) })
	b.Run("Reject/failsafe", func(b *testing.B) { benchFailsafePipeline(b, true, false, true) })
	b.Run("SuccessNoTimeout/rampart", func(b *testing.B) { benchRampartPipeline(b, nil, noTimeout, false, false) })
	b.Run("SuccessNoTimeout/rampart-cached", func(b *testing.B) { benchRampartPipeline(b, cachedTicker(b), noTimeout, false, false) })
	b.Run("SuccessNoTimeout/failsafe", func(b *testing.B) { benchFailsafePipeline(b, false, false, false) })
	b.Run("SuccessSoftTimeout/rampart", func(b *testing.B) { benchRampartPipeline(b, nil, softTimeout, false, false) })
	b.Run("SuccessSoftTimeout/rampart-cached", func(b *testing.B) {
		benchRampartPipeline(b, cachedTicker(b), softTimeout, false, false)
	})
	b.Run("SuccessSoftTimeout/failsafe", func(b *testing.B) { benchFailsafePipeline(b, true, false, false) })
	b.Run("SuccessSoftTimeout/rampart-primitives", func(b *testing.B) { benchRampartPrimitives(b, cachedTicker(b)) })
	b.Run("CalleeReadsDone/rampart", func(b *testing.B) { benchRampartPipelineRealistic(b, false) })
	b.Run("CalleeReadsDone/failsafe", func(b *testing.B) { benchFailsafePipelineRealistic(b, false) })
	b.Run("CancellableParent/rampart", func(b *testing.B) { benchRampartPipelineRealistic(b, true) })
	b.Run("CancellableParent/failsafe", func(b *testing.B) { benchFailsafePipelineRealistic(b, true) })
	// The reference of the cached-ticker target: one time.Now(), measured
	// the same way (wall and CPU time per operation) in the same run.
	b.Run("TimeNow/direct", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, cpuTime())
		var last time.Time
		for b.Loop() {
			last = time.Now()
		}
		sink.Add(int64(last.Nanosecond()))
	})
}

// cachedTicker returns a cached ticker closed at the end of the benchmark.
func cachedTicker(b *testing.B) rampart.Ticker {
	t := rampart.NewCachedTicker(time.Millisecond)
	b.Cleanup(func() { _ = t.Close() })
	return t
}

func pipelineOK(context.Context) error { return nil }

// cpuTime returns the CPU time (user + system) the process has used. The
// pipeline benchmarks report it per operation as cpu-ns/op next to ns/op:
// on a shared, oversubscribed machine the wall time per operation also
// counts the time the benchmark's threads waited for a core, the CPU time
// does not (it includes the GC and the background goroutines, which are
// real costs).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

// rampartPipeline builds the five policies on tick (nil: the default
// ticker), or four without the timeout. reject spends the rate limiter's
// only permit so that every call is rejected there.
func rampartPipeline(b *testing.B, tick rampart.Ticker, to timeoutKind, reject bool) (*pipeline.Pipeline, error) {
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	rt, err := retry.New(retry.Config{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second,
		ShouldRetry: func(err error) bool { return err == errPipelineBench }, Ticker: tick})
	must(err)
	cb, err := circuitbreaker.New(circuitbreaker.Config{WindowSize: 100, FailureRateThreshold: 50, OpenDuration: time.Minute, Ticker: tick})
	must(err)
	rlCfg := ratelimit.Config{Rate: 1e9, Burst: 1 << 30, Ticker: tick}
	if reject {
		rlCfg = ratelimit.Config{Rate: 1e-6, Burst: 1, Ticker: tick}
	}
	rl, err := ratelimit.New(rlCfg)
	must(err)
	if reject && !rl.Allow() {
		b.Fatal("could not spend the permit")
	}
	bh, err := bulkhead.New(bulkhead.Config{Max: 1 << 20})
	must(err)
	cfg := pipeline.Config{Ticker: tick, Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh}
	if to != noTimeout {
		mode := timeout.ModeDeadline
		if to == softTimeout {
			mode = timeout.ModeSoft
		}
		t, err := timeout.New(timeout.Config{Duration: time.Minute, Mode: mode, Ticker: tick})
		must(err)
		b.Cleanup(func() { _ = t.Close() })
		cfg.Timeout = t
	}
	p, err := pipeline.New(cfg)
	return p, err
}

// timeoutKind selects the timeout of a benchmarked rampart pipeline.
type timeoutKind uint8

const (
	noTimeout       timeoutKind = iota
	deadlineTimeout             // timeout.ModeDeadline (the default)
	softTimeout                 // timeout.ModeSoft
)

// pipelineVariant adds a setting to the Success pipeline (default ticker,
// deadline-mode timeout).
type pipelineVariant uint8

const (
	counted  pipelineVariant = iota // Config.CountStats
	withShed                        // Config.Shed: a shedder on the runtime's signals
)

// benchRampartPipelineWith is Success (or SuccessParallel) with variant v.
func benchRampartPipelineWith(b *testing.B, v pipelineVariant, parallel bool) {
	p, err := rampartPipeline(b, nil, deadlineTimeout, false)
	if err != nil {
		b.Fatal(err)
	}
	cfg := p.Config()
	switch v {
	case counted:
		cfg.CountStats = true
	case withShed:
		// A Source that knows no signal: the shedder never engages (on
		// this shared machine the runtime's own signals do engage it under
		// SuccessParallel), so the row is the admission and release that
		// every call pays while the process is not overloaded.
		sh, err := shed.New(shed.Config{Ticker: cfg.Ticker, Source: shed.SourceFunc(func(int64, *shed.Signals) {})})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Shed = sh
	}
	if p, err = pipeline.New(cfg); err != nil {
		b.Fatal(err)
	}
	runRampartPipeline(b, p, parallel, false)
	if v == counted && p.Stats().Succeeded == 0 {
		b.Fatal("nothing counted")
	}
}

func benchRampartPipeline(b *testing.B, tick rampart.Ticker, to timeoutKind, parallel, reject bool) {
	p, err := rampartPipeline(b, tick, to, reject)
	if err != nil {
		b.Fatal(err)
	}
	runRampartPipeline(b, p, parallel, reject)
}

// runRampartPipeline runs p's Do in b's loop: a success (from GOMAXPROCS
// goroutines when parallel) or the rate limiter's rejection.
func runRampartPipeline(b *testing.B, p *pipeline.Pipeline, parallel, reject bool) {
	ctx := context.Background()
	rejected := p.Config().RateLimit.RejectedError()
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	switch {
	case reject:
		for b.Loop() {
			if err := p.Do(ctx, pipelineOK); err != rejected {
				b.Fatalf("not rejected by the rate limiter: %v", err)
			}
		}
	case parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Do(ctx, pipelineOK); err != nil {
					b.Fatal(err)
				}
			}
		})
	default:
		for b.Loop() {
			if err := p.Do(ctx, pipelineOK); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// realisticParent is the parent context of the realistic cases: Background,
// or a cancellable context made once (cancelled at the end of b).
func realisticParent(b *testing.B, cancellable bool) context.Context {
	if !cancellable {
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

// benchRampartPipelineRealistic is Success (default ticker, deadline-mode
// timeout) with a callee that reads Done and Err, under a cancellable
// parent or Background.
func benchRampartPipelineRealistic(b *testing.B, cancellable bool) {
	p, err := rampartPipeline(b, nil, deadlineTimeout, false)
	if err != nil {
		b.Fatal(err)
	}
	ctx := realisticParent(b, cancellable)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if err := p.Do(ctx, calleeReadsDone); err != nil {
			b.Fatal(err)
		}
	}
}

// benchFailsafePipelineRealistic is benchRampartPipelineRealistic through
// failsafe's five policies: the callee reads the execution's context.
func benchFailsafePipelineRealistic(b *testing.B, cancellable bool) {
	ex := failsafePipeline(true, false).WithContext(realisticParent(b, cancellable))
	fn := func(e failsafe.Execution[any]) error { return calleeReadsDone(e.Context()) }
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if err := ex.RunWithExecution(fn); err != nil {
			b.Fatal(err)
		}
	}
}

// failsafePipeline composes the same policies with failsafe.With,
// outermost first: retry, breaker, rate limiter, bulkhead, timeout.
func failsafePipeline(withTimeout, reject bool) failsafe.Executor[any] {
	rp := fsretry.NewBuilder[any]().
		HandleErrors(errPipelineBench).
		WithMaxAttempts(3).
		WithBackoff(10*time.Millisecond, time.Second).
		Build()
	cb := fscb.NewBuilder[any]().
		HandleErrors(errPipelineBench).
		WithFailureThresholdRatio(50, 100).
		WithDelay(time.Minute).
		Build()
	var rl fsratelimiter.RateLimiter[any]
	if reject {
		rl = fsratelimiter.NewBurstyBuilder[any](1, time.Hour).Build()
		rl.TryAcquirePermit() // spend the only permit
	} else {
		rl = fsratelimiter.NewBurstyBuilder[any](1<<30, time.Second).Build()
	}
	bh := fsbulkhead.New[any](1 << 20)
	if withTimeout {
		return failsafe.With[any](rp, cb, rl, bh, fstimeout.New[any](time.Minute))
	}
	return failsafe.With[any](rp, cb, rl, bh)
}

func failsafeOK() error { return nil }

func benchFailsafePipeline(b *testing.B, withTimeout, parallel, reject bool) {
	ex := failsafePipeline(withTimeout, reject)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	switch {
	case reject:
		for b.Loop() {
			if err := ex.Run(failsafeOK); !errors.Is(err, fsratelimiter.ErrExceeded) {
				b.Fatalf("not rejected by the rate limiter: %v", err)
			}
		}
	case parallel:
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := ex.Run(failsafeOK); err != nil {
					b.Fatal(err)
				}
			}
		})
	default:
		for b.Loop() {
			if err := ex.Run(failsafeOK); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchRampartPrimitives calls the breaker, rate limiter, bulkhead and a
// soft-mode timeout of the benchmark's pipeline directly, with two readings
// of tick per call, as the pipeline does for this configuration.
func benchRampartPrimitives(b *testing.B, tick rampart.Ticker) {
	p, err := rampartPipeline(b, tick, softTimeout, false)
	if err != nil {
		b.Fatal(err)
	}
	c := p.Config()
	cb, rl, bh, to := c.Breaker, c.RateLimit, c.Bulkhead, c.Timeout
	ctx := context.Background()
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		if ctx.Err() != nil {
			b.Fatal("context done")
		}
		t0 := tick.Now()
		permit, err := cb.AcquireAt(t0)
		if err != nil {
			b.Fatal(err)
		}
		if rl.AdmitN(t0, 1) != 0 {
			b.Fatal("rate limited")
		}
		if bh.Acquire() != nil {
			b.Fatal("bulkhead full")
		}
		fctx, h := to.StartAt(ctx, t0)
		err = pipelineOK(fctx)
		t1 := tick.Now()
		err = to.FinishAt(h, t1, err)
		bh.Release()
		cb.ReleaseAt(permit, t1, cb.Classify(err))
		if err != nil {
			b.Fatal(err)
		}
	}
}
