package pipeline_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

func newBreaker(t testing.TB, tick rampart.Ticker, mod func(*circuitbreaker.Config)) *circuitbreaker.Breaker {
	t.Helper()
	cfg := circuitbreaker.Config{
		Name: "cb", Ticker: tick, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 2, OpenDuration: 10 * time.Second, HalfOpenProbes: 1,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := circuitbreaker.New(cfg)
	require.NoError(t, err)
	return b
}

func newRetry(t testing.TB, tick rampart.Ticker, mod func(*retry.Config)) *retry.Policy {
	t.Helper()
	cfg := retry.Config{Name: "rt", Ticker: tick, MaxAttempts: 3, Backoff: retry.Constant, BaseDelay: time.Microsecond}
	if mod != nil {
		mod(&cfg)
	}
	r, err := retry.New(cfg)
	require.NoError(t, err)
	return r
}

func newAdaptive(t testing.TB, tick rampart.Ticker, limit int) *adaptive.Limiter {
	t.Helper()
	l, err := adaptive.New(adaptive.Config{Name: "al", Ticker: tick, InitialLimit: limit, MinLimit: limit, MaxLimit: limit})
	require.NoError(t, err)
	return l
}

// full builds retry + breaker + rate limiter + bulkhead + adaptive on tick.
type full struct {
	tick *countingTicker
	rt   *retry.Policy
	cb   *circuitbreaker.Breaker
	al   *adaptive.Limiter
	p    *pipeline.Pipeline
}

func newFull(t testing.TB) *full {
	f := &full{tick: newCountingTicker()}
	f.rt = newRetry(t, f.tick, nil)
	f.cb = newBreaker(t, f.tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 3 })
	f.al = newAdaptive(t, f.tick, 8)
	p, err := pipeline.New(pipeline.Config{
		Retry: f.rt, Breaker: f.cb, RateLimit: newRateLimit(t, 1e6, 1000, f.tick),
		Bulkhead: newBulkhead(t, 4, f.tick), Adaptive: f.al,
	})
	require.NoError(t, err)
	f.p = p
	return f
}

func TestClockReadsPerAttempt(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		build   func(tick rampart.Ticker) pipeline.Config
		success int64 // reads per successful call
	}{
		{"breaker+bulkhead", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Ticker: tk, Breaker: newBreaker(t, tk, nil), Bulkhead: newBulkhead(t, 2, tk)}
		}, 0},
		{"count-window breaker", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Breaker: newBreaker(t, tk, func(c *circuitbreaker.Config) { c.Mode = circuitbreaker.CountWindow })}
		}, 0},
		// A retry needs its start only for MaxDuration or a budget that
		// keeps time (retry.Policy.NeedsTime).
		{"retry", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Retry: newRetry(t, tk, nil)}
		}, 0},
		{"retry+token bucket", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Retry: newRetry(t, tk, func(c *retry.Config) { c.Budget = newTokenBucket(t) })}
		}, 0},
		{"retry+ratio budget", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Retry: newRetry(t, tk, func(c *retry.Config) { c.Budget = newRatioBudget(t) })}
		}, 1},
		{"retry with MaxDuration", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Retry: newRetry(t, tk, func(c *retry.Config) { c.MaxDuration = time.Minute })}
		}, 1},
		{"retry+breaker+ratelimit+bulkhead", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Retry: newRetry(t, tk, nil), Breaker: newBreaker(t, tk, nil),
				RateLimit: newRateLimit(t, 1e6, 100, tk), Bulkhead: newBulkhead(t, 2, tk)}
		}, 1},
		{"slow-call breaker", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Breaker: newBreaker(t, tk, func(c *circuitbreaker.Config) { c.SlowCallDuration = time.Second })}
		}, 2},
		{"time-window breaker", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Breaker: newBreaker(t, tk, func(c *circuitbreaker.Config) {
				c.Mode, c.TimeWindow = circuitbreaker.TimeWindow, 10*time.Second
			})}
		}, 2},
		{"breaker with a per-call listener", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Breaker: newBreaker(t, tk, func(c *circuitbreaker.Config) { c.OnSuccess = func(time.Duration) {} })}
		}, 2},
		{"adaptive", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{Adaptive: newAdaptive(t, tk, 4)}
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tick := newCountingTicker()
			p, err := pipeline.New(c.build(tick))
			require.NoError(t, err)
			tick.reads.Store(0) // constructors may read the clock
			for range 10 {
				require.NoError(t, p.Do(ctx, ok))
			}
			require.Equal(t, 10*c.success, tick.reads.Load())
		})
	}
}

func TestClockReadsOnRetries(t *testing.T) {
	tick := newCountingTicker()
	rt := newRetry(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Retry: rt, RateLimit: newRateLimit(t, 1e6, 100, tick)})
	require.NoError(t, err)
	tick.reads.Store(0) // constructors may read the clock
	var n int
	o := p.Try(context.Background(), func(context.Context) error {
		n++
		return errBoom
	})
	require.Equal(t, 3, n)
	require.Equal(t, pipeline.Failed, o.Code)
	require.ErrorIs(t, o.Err, errBoom)
	require.ErrorIs(t, o.Err, retry.ErrExhausted)
	require.EqualValues(t, 3, o.Attempts)
	// Each attempt: t0 for the rate limiter, and t1 for the decision.
	require.Equal(t, int64(6), tick.reads.Load())
}

func newTokenBucket(t testing.TB) *retry.TokenBucket {
	t.Helper()
	b, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	require.NoError(t, err)
	return b
}

func newRatioBudget(t testing.TB) *retry.RatioBudget {
	t.Helper()
	b, err := retry.NewRatioBudget(retry.RatioBudgetConfig{})
	require.NoError(t, err)
	return b
}

// A retry-only pipeline with a token bucket reads no start: the retries
// still work, each decision reads the clock once, and the bucket sees every
// outcome.
func TestRetryWithoutStartTime(t *testing.T) {
	tick := newCountingTicker()
	tb := newTokenBucket(t)
	full := tb.Tokens()
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = tb })
	p, err := pipeline.New(pipeline.Config{Retry: rt})
	require.NoError(t, err)
	tick.reads.Store(0)
	var n int
	o := p.Try(context.Background(), func(context.Context) error {
		if n++; n < 3 {
			return errBoom
		}
		return nil
	})
	require.Equal(t, pipeline.OK, o.Code, "%v", o.Err)
	require.EqualValues(t, 3, o.Attempts)
	require.Equal(t, int64(2), tick.reads.Load(), "one read per retry decision, none for the start")
	require.Equal(t, uint64(2), rt.Stats().Retries)
	require.Less(t, tb.Tokens(), full, "the bucket saw the failures")

	tick.reads.Store(0)
	require.NoError(t, p.Do(context.Background(), ok))
	require.Zero(t, tick.reads.Load())
}

func TestBreakerRejectsWithRemainingOpenTimeAndSpendsNoQuota(t *testing.T) {
	tick := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	rl := newRateLimit(t, 1, 1, tick) // a single permit per second
	p, err := pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl})
	require.NoError(t, err)
	ctx := context.Background()
	require.ErrorIs(t, p.Do(ctx, fail), errBoom)
	tick.Advance(time.Second)
	require.ErrorIs(t, p.Do(ctx, fail), errBoom) // second consecutive failure: open
	require.Equal(t, circuitbreaker.Open, cb.State())
	tick.Advance(time.Second)

	for range 3 {
		o := p.Try(ctx, ok)
		require.Equal(t, pipeline.Rejected, o.Code)
		require.Equal(t, pipeline.Breaker, o.Policy)
		require.ErrorIs(t, o.Err, circuitbreaker.ErrOpen)
		require.ErrorIs(t, o.Err, rampart.ErrRejected)
		require.Equal(t, 9*time.Second, o.RetryAfter)
	}
	tick.Advance(9 * time.Second)
	// The rate limiter's permit was not spent by the rejections: the probe
	// is admitted and closes the breaker.
	require.Equal(t, pipeline.OK, p.Try(ctx, ok).Code)
	require.Equal(t, circuitbreaker.Closed, cb.State())
}

func TestBreakerOpenWithoutT0ReadsTheClock(t *testing.T) {
	tick := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Breaker: cb})
	require.NoError(t, err)
	ctx := context.Background()
	_ = p.Do(ctx, fail)
	_ = p.Do(ctx, fail)
	require.Equal(t, circuitbreaker.Open, cb.State())
	o := p.Try(ctx, ok)
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, 10*time.Second, o.RetryAfter)
	tick.Advance(10 * time.Second)
	require.Equal(t, pipeline.OK, p.Try(ctx, ok).Code, "the open period ended: a probe goes through")
	require.Equal(t, circuitbreaker.Closed, cb.State())
}

func TestLaterRejectionFreesHalfOpenProbe(t *testing.T) {
	tick := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	require.NoError(t, err)
	ctx := context.Background()
	_ = p.Do(ctx, fail)
	_ = p.Do(ctx, fail)
	tick.Advance(10 * time.Second)
	// Hold the bulkhead's only permit so that the probe is rejected after
	// the breaker admitted it.
	require.True(t, bh.TryEnter())
	o := p.Try(ctx, ok)
	require.Equal(t, pipeline.Bulkhead, o.Policy)
	bh.Exit()
	require.Equal(t, circuitbreaker.HalfOpen, cb.State())
	require.Zero(t, cb.Stats().HalfOpenInFlight, "the probe slot was given back")
	require.Equal(t, pipeline.OK, p.Try(ctx, ok).Code)
	require.Equal(t, circuitbreaker.Closed, cb.State())
}

func TestRetryReadmitsEachAttemptAndDoesNotRetryRejections(t *testing.T) {
	tick := newCountingTicker()
	rt := newRetry(t, tick, func(c *retry.Config) { c.MaxAttempts = 5 })
	rl := newRateLimit(t, 1, 2, tick) // two permits, then rejection
	p, err := pipeline.New(pipeline.Config{Retry: rt, RateLimit: rl})
	require.NoError(t, err)
	var n int
	o := p.Try(context.Background(), func(context.Context) error { n++; return errBoom })
	require.Equal(t, 2, n, "the third attempt was rejected by the rate limiter")
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, pipeline.RateLimit, o.Policy)
	require.EqualValues(t, 3, o.Attempts)
	require.Equal(t, time.Second, o.RetryAfter)
}

func TestRetrySucceedsAfterFailures(t *testing.T) {
	f := newFull(t)
	var n int
	v, err := pipeline.Call(context.Background(), f.p, func(context.Context) (string, error) {
		n++
		if n < 3 {
			return "", errBoom
		}
		return "done", nil
	})
	require.NoError(t, err)
	require.Equal(t, "done", v)
	require.Equal(t, 3, n)
	require.Equal(t, 0, f.al.InFlight())
}

func TestNonRetryableAndPermanentErrors(t *testing.T) {
	tick := newCountingTicker()
	p, err := pipeline.New(pipeline.Config{Retry: newRetry(t, tick, nil)})
	require.NoError(t, err)
	var n int
	err = p.Do(context.Background(), func(context.Context) error { n++; return retry.Permanent(errBoom) })
	require.Equal(t, 1, n)
	require.Same(t, errBoom, err, "the Permanent marker is stripped, the error is the user's")
}

type hinted struct{ d time.Duration }

func (h hinted) Error() string             { return "busy" }
func (h hinted) RetryAfter() time.Duration { return h.d }

func TestRetryAfterHintFromError(t *testing.T) {
	p, err := pipeline.New(pipeline.Config{})
	require.NoError(t, err)
	o := p.Try(context.Background(), func(context.Context) error { return hinted{3 * time.Second} })
	require.Equal(t, pipeline.Failed, o.Code)
	require.Equal(t, 3*time.Second, o.RetryAfter)
}

func TestCanceledDuringRetrySleep(t *testing.T) {
	tick := newCountingTicker()
	rt := newRetry(t, tick, func(c *retry.Config) { c.BaseDelay = time.Hour; c.MaxDelay = time.Hour })
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := p.Try(ctx, func(context.Context) error {
		time.AfterFunc(time.Millisecond, cancel)
		return errBoom
	})
	require.Equal(t, pipeline.Canceled, o.Code)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.ErrorIs(t, o.Err, errBoom)
	require.Equal(t, int64(0), bh.Stats().InFlight)
}

func TestCallerCancellationIsNotABreakerFailure(t *testing.T) {
	tick := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Breaker: cb})
	require.NoError(t, err)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		o := p.Try(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() })
		require.Equal(t, pipeline.Canceled, o.Code)
		require.ErrorIs(t, o.Err, context.Canceled)
	}
	require.Equal(t, circuitbreaker.Closed, cb.State())
	require.Zero(t, cb.Stats().Failures)
}

func TestPanicRecordsFailureEverywhere(t *testing.T) {
	f := newFull(t)
	for range 3 {
		require.Panics(t, func() {
			_ = f.p.Do(context.Background(), func(context.Context) error { panic("boom") })
		})
	}
	require.Equal(t, circuitbreaker.Open, f.cb.State(), "three panics are three failures")
	require.Equal(t, 0, f.al.InFlight())
}

func TestGoexitReleasesEverything(t *testing.T) {
	f := newFull(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = pipeline.Call(context.Background(), f.p, func(context.Context) (int, error) {
			runtimeGoexit()
			return 0, nil
		})
	})
	wg.Wait()
	require.Equal(t, 0, f.al.InFlight())
	require.Equal(t, pipeline.OK, f.p.Try(context.Background(), ok).Code)
}

func TestStressReleaseExactlyOnce(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
		c.Mode = circuitbreaker.CountWindow
		c.WindowSize = 50
		c.MinimumCalls = 50
		c.FailureRateThreshold = 100
	})
	bh := newBulkhead(t, 3, tick)
	al := newAdaptive(t, tick, 5)
	var inside, peak atomic.Int64
	p, err := pipeline.New(pipeline.Config{Retry: newRetry(t, tick, nil), Breaker: cb,
		RateLimit: newRateLimit(t, 1e9, 1_000_000, tick), Bulkhead: bh, Adaptive: al})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var codes [5]atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				func() {
					defer func() { _ = recover() }()
					o := p.Try(context.Background(), func(context.Context) error {
						n := inside.Add(1)
						defer inside.Add(-1)
						for {
							pk := peak.Load()
							if n <= pk || peak.CompareAndSwap(pk, n) {
								break
							}
						}
						switch (g + i) % 7 {
						case 0:
							return errBoom
						case 1:
							panic("stress")
						}
						return nil
					})
					codes[o.Code].Add(1)
				}()
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Equal(t, 0, al.InFlight())
	require.LessOrEqual(t, peak.Load(), int64(3), "the bulkhead's limit held")
	require.Positive(t, codes[pipeline.OK].Load())
}

func TestAllocsSuccessAndRejections(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	ctx := context.Background()
	tick := rampart.NewManualTicker(1)
	rt := newRetry(t, tick, nil)
	cb := newBreaker(t, tick, nil)
	rl := newRateLimit(t, 1, 1, tick)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh})
	require.NoError(t, err)
	call := func(context.Context) (int, error) { return 1, nil }

	require.Zero(t, testing.AllocsPerRun(200, func() {
		tick.Advance(time.Second) // a fresh rate-limit permit
		if p.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	}), "success")
	require.Zero(t, testing.AllocsPerRun(200, func() {
		tick.Advance(time.Second)
		if _, err := pipeline.Call(ctx, p, call); err != nil {
			t.Fatal("not admitted")
		}
	}), "success, Call")
	// A closure that captures a variable stays on the caller's stack: fn
	// does not escape through Do or Call.
	calls := 0
	require.Zero(t, testing.AllocsPerRun(200, func() {
		tick.Advance(time.Second)
		if p.Do(ctx, func(context.Context) error { calls++; return nil }) != nil {
			t.Fatal("not admitted")
		}
		tick.Advance(time.Second)
		if _, err := pipeline.Call(ctx, p, func(context.Context) (int, error) { calls++; return calls, nil }); err != nil {
			t.Fatal("not admitted")
		}
	}), "success, capturing closures")
	require.Equal(t, 2*201, calls) // AllocsPerRun runs the function once more to warm up
	require.Zero(t, testing.AllocsPerRun(200, func() {
		if p.Try(ctx, ok).Policy != pipeline.RateLimit {
			t.Fatal("not rejected by the rate limiter")
		}
	}), "rate-limit rejection")
	tick.Advance(time.Second)
	require.True(t, bh.TryEnter())
	require.Zero(t, testing.AllocsPerRun(200, func() {
		tick.Advance(time.Second)
		if p.Try(ctx, ok).Policy != pipeline.Bulkhead {
			t.Fatal("not rejected by the bulkhead")
		}
	}), "bulkhead rejection")
	bh.Exit()
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	require.Zero(t, testing.AllocsPerRun(200, func() {
		if p.Try(ctx, ok).Policy != pipeline.Breaker {
			t.Fatal("not rejected by the breaker")
		}
	}), "breaker rejection")
}

func TestAllocsAdaptive(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	ctx := context.Background()
	tick := rampart.NewManualTicker(1)
	al := newAdaptive(t, tick, 1)
	p, err := pipeline.New(pipeline.Config{Adaptive: al})
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(200, func() { _ = p.Do(ctx, ok) }))
	var rejected pipeline.Outcome
	require.Zero(t, testing.AllocsPerRun(200, func() {
		// A capturing closure: Do must not make it escape.
		_ = p.Do(ctx, func(ctx context.Context) error {
			rejected = p.Try(ctx, ok)
			return nil
		})
	}))
	n := 0
	require.Zero(t, testing.AllocsPerRun(200, func() {
		_, _ = pipeline.Call(ctx, p, func(context.Context) (*int, error) { n++; return &n, nil })
	}), "Call with a capturing closure")
	require.Equal(t, pipeline.Adaptive, rejected.Policy)
	require.ErrorIs(t, rejected.Err, adaptive.ErrLimited)
}

func TestRetryBudgetRefusalIsARejectionByRetry(t *testing.T) {
	tick := newCountingTicker()
	budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 2, TokenRatio: 0.1})
	require.NoError(t, err)
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = budget; c.MaxAttempts = 10 })
	p, err := pipeline.New(pipeline.Config{Retry: rt})
	require.NoError(t, err)
	var o pipeline.Outcome
	for range 5 {
		o = p.Try(context.Background(), fail)
	}
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, pipeline.Retry, o.Policy)
	require.ErrorIs(t, o.Err, retry.ErrBudget)
	require.ErrorIs(t, o.Err, rampart.ErrRejected)
	require.ErrorIs(t, o.Err, errBoom)
}

func TestCancelWhileWaitingForBulkheadUnwindsBreaker(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, nil)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour, Ticker: tick})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	require.NoError(t, err)
	require.True(t, bh.TryEnter()) // full
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan pipeline.Outcome)
	go func() { done <- p.Try(ctx, ok) }()
	for bh.Stats().Waiting == 0 {
		runtime.Gosched()
	}
	cancel()
	o := <-done
	require.Equal(t, pipeline.Canceled, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.ErrorIs(t, o.Err, context.Canceled)
	bh.Exit()
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Zero(t, cb.Stats().Failures, "the unwound permit recorded nothing")
}
