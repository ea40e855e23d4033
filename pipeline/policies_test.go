package pipeline_test

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
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
	tick *rampart.ManualTicker
	rt   *retry.Policy
	cb   *circuitbreaker.Breaker
	al   *adaptive.Limiter
	p    *pipeline.Pipeline
}

func newFull(t testing.TB) *full {
	f := &full{tick: rampart.NewManualTicker(1_000_000)}
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
			tick, _ := newCountingTicker()
			p, err := pipeline.New(c.build(tick))
			require.NoError(t, err)
			reads := readsSince(tick)
			for range 10 {
				require.NoError(t, p.Do(ctx, ok))
			}
			require.Equal(t, 10*c.success, reads())
		})
	}
}

// TestBreakerUpdateKeepsWhatThePipelineReadAtNew: a pipeline reads once,
// at its New, whether its breaker measures calls (MeasuresCalls: a
// slow-call threshold, a time window or a per-call listener) and whether it
// has a Classify; the breaker's Update refuses the changes that would flip
// either (a pipeline that passed NotRead would never judge a call slow,
// nor call a Classify set later on a success). The changes it accepts hold
// through the pipeline from the next call: a new slow-call threshold judges
// the calls the pipeline times, a new Classify classifies its successes.
func TestBreakerUpdateKeepsWhatThePipelineReadAtNew(t *testing.T) {
	ctx := context.Background()
	tk := rampart.NewManualTicker(1)
	plain := newBreaker(t, tk, func(c *circuitbreaker.Config) { c.Mode = circuitbreaker.CountWindow })
	_, err := pipeline.New(pipeline.Config{Breaker: plain})
	require.NoError(t, err)
	for field, mod := range map[string]func(*circuitbreaker.Config){
		"SlowCallDuration": func(c *circuitbreaker.Config) { c.SlowCallDuration = time.Millisecond },
		"OnSuccess":        func(c *circuitbreaker.Config) { c.OnSuccess = func(time.Duration) {} },
		"OnFailure":        func(c *circuitbreaker.Config) { c.OnFailure = func(time.Duration) {} },
		"Classify":         func(c *circuitbreaker.Config) { c.Classify = circuitbreaker.DefaultClassify },
	} {
		c := plain.Config()
		mod(&c)
		var ce *rampart.ConfigError
		require.ErrorAs(t, plain.Update(c), &ce, field)
		require.Equal(t, field, ce.Field)
		require.Contains(t, ce.Reason, "a pipeline reads it once, at its New")
	}
	require.False(t, plain.MeasuresCalls())

	// Built timing calls and with a Classify: both change through Update.
	b := newBreaker(t, tk, func(c *circuitbreaker.Config) {
		c.Mode, c.MinimumCalls, c.WindowSize = circuitbreaker.CountWindow, 100, 100
		c.SlowCallDuration, c.Classify = time.Hour, circuitbreaker.DefaultClassify
	})
	p, err := pipeline.New(pipeline.Config{Breaker: b})
	require.NoError(t, err)
	slow := func(context.Context) error { tk.Advance(20 * time.Millisecond); return nil }
	require.NoError(t, p.Do(ctx, slow))
	require.Zero(t, b.Stats().WindowSlowCalls, "20 ms is not slow under an hour's threshold")

	c := b.Config()
	c.SlowCallDuration = 10 * time.Millisecond
	c.Classify = func(err error) rampart.Result { return rampart.Failure }
	require.NoError(t, b.Update(c))
	require.NoError(t, p.Do(ctx, slow))
	s := b.Stats()
	require.EqualValues(t, 1, s.WindowSlowCalls, "the new threshold judges the pipeline's 20 ms call slow")
	require.EqualValues(t, 1, s.WindowFailures, "the new Classify makes the pipeline's success a failure")
	require.EqualValues(t, 2, s.WindowCalls)
}

// TestClockReadsOnRetries: a call retried to exhaustion reads the clock
// twice per attempt, t0 and t1, whatever needs them: with a rate limiter, t0
// for it and t1 for the retry's decision; with a breaker that times calls
// and a soft timeout, the same pair serves them all, and the decision reads
// nothing more.
func TestClockReadsOnRetries(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(tick rampart.Ticker) pipeline.Config
	}{
		{"ratelimit", func(tk rampart.Ticker) pipeline.Config {
			return pipeline.Config{RateLimit: newRateLimit(t, 1e6, 100, tk)}
		}},
		{"timed breaker+soft timeout", func(tk rampart.Ticker) pipeline.Config {
			to, err := timeout.New(timeout.Config{Duration: time.Hour, Mode: timeout.ModeSoft, Ticker: tk})
			require.NoError(t, err)
			return pipeline.Config{Timeout: to, Breaker: newBreaker(t, tk, func(c *circuitbreaker.Config) {
				c.SlowCallDuration = time.Second
				c.ConsecutiveFailures = 10
			})}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tick, _ := newCountingTicker()
			cfg := c.build(tick)
			cfg.Retry = newRetry(t, tick, nil)
			p, err := pipeline.New(cfg)
			require.NoError(t, err)
			reads := readsSince(tick)
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
			require.Equal(t, int64(6), reads())
		})
	}
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
	tick, _ := newCountingTicker()
	tb := newTokenBucket(t)
	full := tb.Tokens()
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = tb })
	p, err := pipeline.New(pipeline.Config{Retry: rt})
	require.NoError(t, err)
	reads := readsSince(tick)
	var n int
	o := p.Try(context.Background(), func(context.Context) error {
		if n++; n < 3 {
			return errBoom
		}
		return nil
	})
	require.Equal(t, pipeline.OK, o.Code, "%v", o.Err)
	require.EqualValues(t, 3, o.Attempts)
	require.Equal(t, int64(2), reads(), "one read per retry decision, none for the start")
	require.Equal(t, uint64(2), rt.Stats().Retries)
	require.Less(t, tb.Tokens(), full, "the bucket saw the failures")

	reads = readsSince(tick)
	require.NoError(t, p.Do(context.Background(), ok))
	require.Zero(t, reads())
}

func TestBreakerRejectsWithRemainingOpenTimeAndSpendsNoQuota(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
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
	tick := rampart.NewManualTicker(1_000_000)
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
	tick := rampart.NewManualTicker(1_000_000)
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
	require.NoError(t, bh.Acquire())
	o := p.Try(ctx, ok)
	require.Equal(t, pipeline.Bulkhead, o.Policy)
	bh.Release()
	require.Equal(t, circuitbreaker.HalfOpen, cb.State())
	require.Zero(t, cb.Stats().HalfOpenInFlight, "the probe slot was given back")
	require.Equal(t, pipeline.OK, p.Try(ctx, ok).Code)
	require.Equal(t, circuitbreaker.Closed, cb.State())
}

func TestRetryReadmitsEachAttemptAndDoesNotRetryRejections(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
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

// TestRejectionOnLaterAttemptNamesThePolicy: a retried call rejected on a
// later attempt ends Rejected by the policy that refused it, with that
// policy's hint: the rate limiter on the second attempt (its wait, fn run
// once), or the breaker that two failures opened (ConsecutiveFailures 2)
// on the third (the remaining open time).
func TestRejectionOnLaterAttemptNamesThePolicy(t *testing.T) {
	for _, c := range []struct {
		name       string
		cfg        func(rampart.Ticker) (pipeline.Config, *circuitbreaker.Breaker)
		runs       int
		policy     pipeline.Kind
		attempts   int32
		is         error
		retryAfter time.Duration
	}{
		{"ratelimit", func(tick rampart.Ticker) (pipeline.Config, *circuitbreaker.Breaker) {
			return pipeline.Config{RateLimit: newRateLimit(t, 10, 1, tick)}, nil // one permit per 100 ms
		}, 1, pipeline.RateLimit, 2, rampart.ErrRejected, 100 * time.Millisecond},
		{"breaker", func(tick rampart.Ticker) (pipeline.Config, *circuitbreaker.Breaker) {
			cb := newBreaker(t, tick, nil)
			return pipeline.Config{Breaker: cb}, cb
		}, 2, pipeline.Breaker, 3, circuitbreaker.ErrOpen, 10 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			tick := rampart.NewManualTicker(1_000_000)
			cfg, cb := c.cfg(tick)
			cfg.Retry = newRetry(t, tick, nil)
			p, err := pipeline.New(cfg)
			require.NoError(t, err)
			var n int
			o := p.Try(context.Background(), func(context.Context) error { n++; return errBoom })
			require.Equal(t, c.runs, n)
			require.Equal(t, pipeline.Rejected, o.Code)
			require.Equal(t, c.policy, o.Policy)
			require.EqualValues(t, c.attempts, o.Attempts)
			require.ErrorIs(t, o.Err, c.is)
			require.Equal(t, c.retryAfter, o.RetryAfter)
			if cb != nil {
				require.Equal(t, circuitbreaker.Open, cb.State())
			}
		})
	}
}

// TestBulkheadRejectionOnRetryCarriesNoStaleHint: a bulkhead rejection on
// the second attempt carries no hint, even though the first attempt's error
// carried one (the rejection decides).
func TestBulkheadRejectionOnRetryCarriesNoStaleHint(t *testing.T) {
	// In a bubble: the retry honours the 3 s hint with a sleep on the fake clock.
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1_000_000)
		bh := newBulkhead(t, 1, tick)
		rt := newRetry(t, tick, func(c *retry.Config) {
			c.OnRetry = func(int, time.Duration, error) { require.NoError(t, bh.Acquire()) } // fills it between attempts
		})
		p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh})
		require.NoError(t, err)
		o := p.Try(context.Background(), func(context.Context) error { return hinted{3 * time.Second} })
		require.Equal(t, pipeline.Rejected, o.Code)
		require.Equal(t, pipeline.Bulkhead, o.Policy)
		require.EqualValues(t, 2, o.Attempts)
		require.Zero(t, o.RetryAfter)
		bh.Release()
		require.Zero(t, bh.Stats().InFlight)
	})
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
	tick := rampart.NewManualTicker(1_000_000)
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

// TestCanceledDuringRetrySleep: a caller sleeping before its retry holds no
// permit; cancelled there, the call ends Canceled after one attempt, with
// no policy and no hint, and its error wraps fn's and the context's.
func TestCanceledDuringRetrySleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		bh := newBulkhead(t, 1, tick)
		rt := newRetry(t, tick, func(c *retry.Config) { c.BaseDelay = time.Hour; c.MaxDelay = time.Hour })
		p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan pipeline.Outcome)
		go func() { done <- p.Try(ctx, fail) }()
		synctest.Wait()
		require.Zero(t, bh.Stats().InFlight, "a sleeping caller holds no permit")
		cancel()
		o := <-done
		require.Equal(t, pipeline.Canceled, o.Code)
		require.Equal(t, pipeline.None, o.Policy)
		require.EqualValues(t, 1, o.Attempts)
		require.ErrorIs(t, o.Err, errBoom)
		require.ErrorIs(t, o.Err, context.Canceled)
		require.Zero(t, o.RetryAfter)
		require.Zero(t, bh.Stats().InFlight)
	})
}

// TestCanceledAttemptGrantsNoRetry: an attempt that fails with a retryable
// error after the caller's context was cancelled ends the call without
// granting a retry, as retry.Do does: the budget counts no retry, OnRetry
// is not called, Stats.Retries stays 0.
func TestCanceledAttemptGrantsNoRetry(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	budget, err := retry.NewRatioBudget(retry.RatioBudgetConfig{MinRetries: 10})
	require.NoError(t, err)
	var onRetry int
	rt, err := retry.New(retry.Config{Ticker: tk, Budget: budget, BaseDelay: time.Millisecond,
		OnRetry: func(int, time.Duration, error) { onRetry++ }})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Ticker: tk, Retry: rt})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	o := p.Try(ctx, func(context.Context) error {
		cancel()
		return errBoom
	})
	require.Equal(t, pipeline.Canceled, o.Code)
	require.ErrorIs(t, o.Err, errBoom)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.EqualValues(t, 1, o.Attempts)
	_, retries := budget.Counts(tk.Now())
	require.Zero(t, retries, "budget counted a retry that was never made")
	require.Zero(t, onRetry)
	require.Zero(t, rt.Stats().Retries)

	// retry.Do, for comparison, grants nothing either.
	ctx, cancel = context.WithCancel(context.Background())
	err = rt.Do(ctx, func(context.Context) error { cancel(); return errBoom })
	require.ErrorIs(t, err, context.Canceled)
	_, retries = budget.Counts(tk.Now())
	require.Zero(t, retries)
}

func TestCallerCancellationIsNotABreakerFailure(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
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
				testkit.Run(func() { // the calls whose fn panics panic here
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
				})
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
	ctx := context.Background()
	tick := rampart.NewManualTicker(1)
	rt := newRetry(t, tick, nil)
	cb := newBreaker(t, tick, nil)
	rl := newRateLimit(t, 1, 1, tick)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh})
	require.NoError(t, err)
	call := func(context.Context) (int, error) { return 1, nil }

	testkit.WantAllocs(t, "success", 0, func() {
		tick.Advance(time.Second) // a fresh rate-limit permit
		if p.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	})
	testkit.WantAllocs(t, "success, Call", 0, func() {
		tick.Advance(time.Second)
		if _, err := pipeline.Call(ctx, p, call); err != nil {
			t.Fatal("not admitted")
		}
	})
	// A closure that captures a variable stays on the caller's stack: fn
	// does not escape through Do or Call.
	calls := 0
	testkit.WantAllocs(t, "success, capturing closures", 0, func() {
		tick.Advance(time.Second)
		if p.Do(ctx, func(context.Context) error { calls++; return nil }) != nil {
			t.Fatal("not admitted")
		}
		tick.Advance(time.Second)
		if _, err := pipeline.Call(ctx, p, func(context.Context) (int, error) { calls++; return calls, nil }); err != nil {
			t.Fatal("not admitted")
		}
	})
	require.Equal(t, 2*(testkit.AllocRuns+1), calls) // AllocsPerRun runs the function once more to warm up
	testkit.WantAllocs(t, "rate-limit rejection", 0, func() {
		if p.Try(ctx, ok).Policy != pipeline.RateLimit {
			t.Fatal("not rejected by the rate limiter")
		}
	})
	tick.Advance(time.Second)
	require.NoError(t, bh.Acquire())
	testkit.WantAllocs(t, "bulkhead rejection", 0, func() {
		tick.Advance(time.Second)
		if p.Try(ctx, ok).Policy != pipeline.Bulkhead {
			t.Fatal("not rejected by the bulkhead")
		}
	})
	bh.Release()
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	testkit.WantAllocs(t, "breaker rejection", 0, func() {
		if p.Try(ctx, ok).Policy != pipeline.Breaker {
			t.Fatal("not rejected by the breaker")
		}
	})
}

func TestAllocsAdaptive(t *testing.T) {
	ctx := context.Background()
	tick := rampart.NewManualTicker(1)
	al := newAdaptive(t, tick, 1)
	p, err := pipeline.New(pipeline.Config{Adaptive: al})
	require.NoError(t, err)
	testkit.WantAllocs(t, "Do", 0, func() { _ = p.Do(ctx, ok) })
	var rejected pipeline.Outcome
	testkit.WantAllocs(t, "Do with a capturing closure, a nested call rejected", 0, func() {
		// A capturing closure: Do must not make it escape.
		_ = p.Do(ctx, func(ctx context.Context) error {
			rejected = p.Try(ctx, ok)
			return nil
		})
	})
	n := 0
	testkit.WantAllocs(t, "Call with a capturing closure", 0, func() {
		_, _ = pipeline.Call(ctx, p, func(context.Context) (*int, error) { n++; return &n, nil })
	})
	require.Equal(t, pipeline.Adaptive, rejected.Policy)
	require.ErrorIs(t, rejected.Err, adaptive.ErrLimited)
}

// TestRetryBudgetRefusalIsARejectionByRetry: a retry the budget refuses
// ends the call Rejected by Retry, with an error that is retry.ErrBudget
// and rampart.ErrRejected and wraps fn's last error, and with that error's
// Retry-After hint, if it has one.
func TestRetryBudgetRefusalIsARejectionByRetry(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		retryAfter time.Duration
	}{
		{"plain error", errBoom, 0},
		{"hinted error", hinted{1500 * time.Millisecond}, 1500 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			tick := rampart.NewManualTicker(1_000_000)
			budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 2, TokenRatio: 0.1})
			require.NoError(t, err)
			rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = budget; c.MaxAttempts = 10 })
			p, err := pipeline.New(pipeline.Config{Retry: rt})
			require.NoError(t, err)
			var o pipeline.Outcome
			for range 5 {
				o = p.Try(context.Background(), func(context.Context) error { return c.err })
			}
			require.Equal(t, pipeline.Rejected, o.Code)
			require.Equal(t, pipeline.Retry, o.Policy)
			require.ErrorIs(t, o.Err, retry.ErrBudget)
			require.ErrorIs(t, o.Err, rampart.ErrRejected)
			require.ErrorIs(t, o.Err, c.err)
			require.Equal(t, c.retryAfter, o.RetryAfter)
		})
	}
}

func TestCancelWhileWaitingForBulkheadUnwindsBreaker(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, nil)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour, Ticker: tick})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	require.NoError(t, err)
	require.NoError(t, bh.Acquire()) // full
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
	bh.Release()
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Zero(t, cb.Stats().Failures, "the unwound permit recorded nothing")
}

// TestCancelInBulkheadWaitAfterRetryGivesUp: a call cancelled while its
// second attempt waits for a bulkhead permit ends as one cancelled during
// the retry's sleep does: the retry gives up (Stats.GiveUps, OnGiveUp) with
// an error that wraps fn's last error and the context's.
func TestCancelInBulkheadWaitAfterRetryGivesUp(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour, Ticker: tick})
	require.NoError(t, err)
	var giveUps int
	rt := newRetry(t, tick, func(c *retry.Config) {
		c.OnRetry = func(int, time.Duration, error) { require.NoError(t, bh.Acquire()) }
		c.OnGiveUp = func(int, retry.Stop, error) { giveUps++ }
	})
	p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan pipeline.Outcome)
	go func() { done <- p.Try(ctx, fail) }()
	for bh.Stats().Waiting == 0 {
		runtime.Gosched()
	}
	cancel()
	o := <-done
	bh.Release()
	require.Equal(t, pipeline.Canceled, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.ErrorIs(t, o.Err, errBoom, "fn's last error is kept")
	require.EqualValues(t, 1, rt.Stats().GiveUps)
	require.Equal(t, 1, giveUps)
}

// shedRig is a shedder on a manual clock whose one signal is a scheduling
// latency that the test turns hot or cold.
type shedRig struct {
	tick *rampart.ManualTicker
	hot  atomic.Bool
	sh   *shed.Shedder
}

const shedInterval = 100 * time.Millisecond

func newShed(t testing.TB, tick *rampart.ManualTicker, mod func(*shed.Config)) *shedRig {
	t.Helper()
	r := &shedRig{tick: tick}
	cfg := shed.Config{Name: "sh", Ticker: tick, SampleInterval: shedInterval, CoolOff: shedInterval,
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
			s.SchedLatency = 0
			if r.hot.Load() {
				s.SchedLatency = time.Second
			}
		})}
	if mod != nil {
		mod(&cfg)
	}
	sh, err := shed.New(cfg)
	require.NoError(t, err)
	r.sh = sh
	return r
}

// engage completes one call of no duration (a cap of 1: its bandwidth-delay
// product rounds to nothing) and takes a hot sample. The limit it then
// admits is the one Stats publishes (the cap and one call more, or a
// probe's): tests read it, as [shedRig.fill] does, and never assume it.
func (r *shedRig) engage(t testing.TB) {
	t.Helper()
	pm, err := r.sh.AcquireAt(r.tick.Now())
	require.NoError(t, err)
	r.sh.ReleaseAt(pm, r.tick.Now(), rampart.Success)
	r.hot.Store(true)
	r.sample(t)
	require.True(t, r.sh.Overloaded())
	require.Positive(t, r.sh.Stats().Limit)
}

// fill takes every slot left free below the engaged shedder's published
// limit at priority 0 (Stats.Limit less the calls in flight), so that the
// next call at any priority is shed; drain gives them back. The clock does
// not move between them, so no sample changes the limit meanwhile.
func (r *shedRig) fill(t testing.TB) []shed.Permit {
	t.Helper()
	return r.hold(t, r.sh.Stats().Limit-r.sh.InFlight())
}

// hold takes n slots at priority 0, each admitted (the first may take a
// due sample).
func (r *shedRig) hold(t testing.TB, n int) []shed.Permit {
	t.Helper()
	pms := make([]shed.Permit, 0, n)
	for i := range n {
		pm, err := r.sh.AcquireAt(r.tick.Now())
		require.NoError(t, err, "slot %d of %d within the limit %d", i+1, n, r.sh.Stats().Limit)
		pms = append(pms, pm)
	}
	require.True(t, r.sh.Overloaded())
	return pms
}

// drain releases the slots fill or hold took, as Ignored: they say nothing
// of the capacity.
func (r *shedRig) drain(pms []shed.Permit) {
	for _, pm := range pms {
		r.sh.ReleaseAt(pm, r.tick.Now(), rampart.Ignored)
	}
}

// release takes a cold sample past the cool-off.
func (r *shedRig) release(t testing.TB) {
	t.Helper()
	r.hot.Store(false)
	r.sample(t)
	require.False(t, r.sh.Overloaded())
}

// sample moves the clock to the next sample and takes it.
func (r *shedRig) sample(t testing.TB) {
	t.Helper()
	r.tick.Advance(shedInterval)
	pm, err := r.sh.AcquireAt(r.tick.Now())
	require.NoError(t, err)
	r.sh.ReleaseAt(pm, r.tick.Now(), rampart.Ignored)
}

// TestShedEveryEndingFreesItsSlot: with a shedder in the pipeline, every
// ending of an attempt (success, failure, timeout, cancellation, panic,
// Goexit) gives its slot back, through the fast first attempt (Try) and the
// general loop (TryHedged without a Hedge); a rejection by a policy before
// the shedder never takes a slot; a rejection by the shedder releases the
// permits taken before it and nothing of its own.
func TestShedEveryEndingFreesItsSlot(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	r := newShed(t, tick, nil)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 100 })
	bh := newBulkhead(t, 2, tick)
	al := newAdaptive(t, tick, 4)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Adaptive: al, Shed: r.sh, Timeout: to, Idempotent: true})
	require.NoError(t, err)
	entries := map[string]func(context.Context, func(context.Context) error) pipeline.Outcome{
		"fast": p.Try, "general": p.TryHedged,
	}
	held := func(what string) {
		t.Helper()
		require.Zero(t, r.sh.InFlight(), "%s: shedder", what)
		require.Zero(t, bh.Stats().InFlight, "%s: bulkhead", what)
		require.Zero(t, al.InFlight(), "%s: adaptive", what)
		require.Zero(t, cb.Stats().HalfOpenInFlight, "%s: half-open probes", what)
	}
	for name, try := range entries {
		ctx := context.Background()
		inFn := -1
		o := try(ctx, func(context.Context) error { inFn = r.sh.InFlight(); return nil })
		require.Equal(t, pipeline.OK, o.Code, name)
		require.Equal(t, 1, inFn, "%s: the attempt holds one slot while fn runs", name)
		held(name + " success")
		require.Equal(t, pipeline.Failed, try(ctx, fail).Code)
		held(name + " failure")
		require.Equal(t, pipeline.TimedOut, try(ctx, func(context.Context) error { tick.Advance(2 * time.Second); return nil }).Code)
		held(name + " timeout")
		cctx, cancel := context.WithCancel(ctx)
		require.Equal(t, pipeline.Canceled, try(cctx, func(ctx context.Context) error { cancel(); return ctx.Err() }).Code)
		held(name + " canceled")
		panicked, _ := testkit.Run(func() { try(ctx, func(context.Context) error { panic("boom") }) })
		require.Equal(t, "boom", panicked)
		held(name + " panic")
		_, goexited := testkit.Run(func() { try(ctx, func(context.Context) error { testkit.Goexit(); return nil }) })
		require.True(t, goexited)
		held(name + " goexit")

		// A rejection before the shedder: it admits nothing.
		admitted := r.sh.Stats().Admitted
		require.NoError(t, bh.Acquire())
		require.NoError(t, bh.Acquire())
		o = try(ctx, ok)
		require.Equal(t, pipeline.Bulkhead, o.Policy, name)
		bh.Release()
		bh.Release()
		require.True(t, cb.TransitionTo(circuitbreaker.Open))
		require.Equal(t, pipeline.Breaker, try(ctx, ok).Policy, name)
		require.True(t, cb.TransitionTo(circuitbreaker.HalfOpen))
		require.Equal(t, admitted, r.sh.Stats().Admitted, "%s: a call refused before the shedder is not admitted by it", name)
		held(name + " earlier rejections")

		// The shedder's rejection, a half-open probe held before it.
		r.engage(t)
		pms := r.fill(t) // every slot of the published limit
		ran := false
		o = try(ctx, func(context.Context) error { ran = true; return nil })
		require.False(t, ran)
		require.Equal(t, pipeline.Rejected, o.Code, name)
		require.Equal(t, pipeline.Shed, o.Policy, name)
		require.Len(t, pms, r.sh.InFlight(), "%s: the shed rejection holds no slot", name)
		r.drain(pms)
		held(name + " shed rejection")
		require.Equal(t, circuitbreaker.HalfOpen, cb.State(), "%s: the probe was given back unrecorded", name)
		require.True(t, cb.TransitionTo(circuitbreaker.Closed))
		tick.Advance(time.Second) // past the cool-off
		r.release(t)
	}
}

// TestShedRejectionOutcome: a shed rejection is Code Rejected by Policy
// Shed, with the shedder's preallocated error (matching shed.ErrOverloaded
// and rampart.ErrRejected), no retry-after hint (the shedder gives none), and
// is not retried; Do returns the same error; once the shedder releases,
// calls are admitted again.
func TestShedRejectionOutcome(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	r := newShed(t, tick, nil)
	rt := newRetry(t, tick, func(c *retry.Config) { c.ShouldRetry = func(error) bool { return true } })
	p, err := pipeline.New(pipeline.Config{Retry: rt, Shed: r.sh})
	require.NoError(t, err)
	ctx := context.Background()
	r.engage(t)
	require.Equal(t, pipeline.OK, p.Try(ctx, ok).Code, "alone within the limit")
	pms := r.fill(t)
	o := p.Try(ctx, ok)
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, pipeline.Shed, o.Policy)
	require.Equal(t, "shed", o.Policy.String())
	require.Same(t, r.sh.RejectedError(), o.Err)
	require.ErrorIs(t, o.Err, shed.ErrOverloaded)
	require.ErrorIs(t, o.Err, rampart.ErrRejected)
	require.Zero(t, o.RetryAfter)
	require.EqualValues(t, 1, o.Attempts, "a rejection is not retried")
	require.Same(t, r.sh.RejectedError(), p.Do(ctx, ok))
	require.EqualValues(t, 2, r.sh.Stats().Rejected)
	r.drain(pms)
	tick.Advance(time.Second)
	r.release(t)
	require.NoError(t, p.Do(ctx, ok))
}

// TestShedLearnsTheAttemptsOwnLatency: the shedder's latency sample is the
// attempt's, from the pipeline's admission reading to fn's return, and an
// attempt is released with the shedder's Classify: a plain error completed
// (a Success for the shedder's DefaultClassify), a timeout did not.
func TestShedLearnsTheAttemptsOwnLatency(t *testing.T) {
	for _, wait := range []bool{false, true} {
		tick := rampart.NewManualTicker(1_000_000)
		r := newShed(t, tick, nil)
		bh := newBulkhead(t, 4, tick)
		if wait { // a queue that may wait: t0 is read again at admission
			var err error
			bh, err = bulkhead.New(bulkhead.Config{Max: 4, MaxWait: time.Second, Ticker: tick})
			require.NoError(t, err)
		}
		to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Shed: r.sh, Timeout: to})
		require.NoError(t, err)
		ctx := context.Background()
		require.ErrorIs(t, p.Do(ctx, func(context.Context) error { tick.Advance(30 * time.Millisecond); return errBoom }), errBoom)
		require.ErrorIs(t, p.Do(ctx, func(context.Context) error { tick.Advance(40 * time.Millisecond); return nil }), nil)
		require.ErrorIs(t, p.Do(ctx, func(context.Context) error { tick.Advance(2 * time.Second); return nil }), timeout.ErrTimeout)
		r.sample(t)
		st := r.sh.Stats()
		require.Equal(t, 35*time.Millisecond, st.MinRT, "wait=%v: the mean of the two completed attempts", wait)
		require.Zero(t, st.InFlight)
	}
}

type shedPriorityKey struct{}

// TestShedPriorityFromTheCallersContext: Config.ShedPriority gives each
// attempt's priority from the caller's context, and the shedder admits by
// it: with a cap of 2 and a reserve of one slot per level, the less
// important level is shed with its share of the published limit in flight
// (Stats.Limit less ⌈Cap·PriorityReserve⌉), the more important one admitted.
func TestShedPriorityFromTheCallersContext(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	const reserve = 0.5
	r := newShed(t, tick, func(c *shed.Config) {
		c.SampleInterval, c.Priorities, c.PriorityReserve = 50*time.Millisecond, 2, reserve
	})
	var asked atomic.Int32
	p, err := pipeline.New(pipeline.Config{Shed: r.sh, ShedPriority: func(ctx context.Context) int {
		asked.Add(1)
		v, _ := ctx.Value(shedPriorityKey{}).(int)
		return v
	}})
	require.NoError(t, err)
	// Two calls of 50 ms side by side in a 50 ms bucket: a cap of 2.
	t0 := tick.Now()
	a, err := r.sh.AcquireAt(t0)
	require.NoError(t, err)
	b, err := r.sh.AcquireAt(t0)
	require.NoError(t, err)
	tick.Advance(50 * time.Millisecond)
	r.sh.ReleaseAt(a, tick.Now(), rampart.Success)
	r.sh.ReleaseAt(b, tick.Now(), rampart.Success)
	r.hot.Store(true)
	first := r.hold(t, 1) // samples: engaged at a cap of 2; one slot taken
	st := r.sh.Stats()
	require.Equal(t, 2, st.Cap)
	step := int(math.Ceil(float64(st.Cap) * reserve)) // priority 1's reserve: ⌈Cap·PriorityReserve⌉, of the cap
	lowLimit := st.Limit - step
	require.Positive(t, lowLimit, "limit %d, step %d: priority 1 has a share", st.Limit, step)
	held := append(first, r.hold(t, lowLimit-r.sh.InFlight())...) // priority 1's share, all in flight
	low := context.WithValue(context.Background(), shedPriorityKey{}, 1)
	o := p.Try(low, ok)
	require.Equal(t, pipeline.Shed, o.Policy, "priority 1 is shed with its share of the limit (%d of %d) in flight", lowLimit, st.Limit)
	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code, "priority 0 has the whole limit")
	require.EqualValues(t, 2, asked.Load(), "asked once per attempt")
	r.drain(held)
	require.Zero(t, r.sh.InFlight())

	_, err = pipeline.New(pipeline.Config{ShedPriority: func(context.Context) int { return 0 }})
	testkit.RequireConfigError(t, err, "pipeline", "ShedPriority")
}

// TestAllocsShed: a pipeline with a shedder allocates nothing for an
// admitted call nor for a shed rejection.
func TestAllocsShed(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	r := newShed(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Breaker: newBreaker(t, tick, nil), Bulkhead: newBulkhead(t, 4, tick), Shed: r.sh})
	require.NoError(t, err)
	ctx := context.Background()
	testkit.WantAllocs(t, "success", 0, func() {
		if p.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	})
	r.engage(t)
	pms := r.fill(t)
	testkit.WantAllocs(t, "shed rejection", 0, func() {
		if p.Try(ctx, ok).Policy != pipeline.Shed {
			t.Fatal("not shed")
		}
	})
	r.drain(pms)
}

// TestShedPriorityPanicIsCounted: a ShedPriority that panics or calls
// runtime.Goexit ends the call with no Outcome, counted in Stats.Panicked
// even when no earlier policy holds a permit (a shedder alone).
func TestShedPriorityPanicIsCounted(t *testing.T) {
	for _, exit := range []string{"panic", "goexit"} {
		r := newShed(t, rampart.NewManualTicker(1), nil)
		p, err := pipeline.New(pipeline.Config{Shed: r.sh, CountStats: true,
			ShedPriority: func(context.Context) int {
				if exit == "panic" {
					panic("prio")
				}
				runtime.Goexit()
				return 0
			}})
		require.NoError(t, err)
		for _, hedged := range []bool{false, true} {
			var wg sync.WaitGroup
			wg.Go(func() {
				defer func() { _ = recover() }()
				if hedged {
					_ = p.DoHedged(context.Background(), ok)
				} else {
					_ = p.Do(context.Background(), ok)
				}
			})
			wg.Wait()
		}
		require.Equal(t, pipeline.Stats{Panicked: 2}, p.Stats(), exit)
		require.Zero(t, r.sh.InFlight(), exit)
	}
}

// TestShedUserCodeExitsLeakNothing: a panic or runtime.Goexit in
// ShedPriority or in the shedder's Classify, on the fast path, the general
// path (a bulkhead queue) and the hedged path, leaks no permit and is
// counted in Stats.Panicked; the next call is admitted.
func TestShedUserCodeExitsLeakNothing(t *testing.T) {
	for _, wait := range []bool{false, true} {
		for _, exit := range []string{"panic", "goexit"} {
			for _, where := range []string{"prio", "classify"} {
				for _, hedged := range []bool{false, true} {
					name := map[bool]string{false: "fast", true: "queue"}[wait] + "/" + exit + "/" + where + "/" + map[bool]string{false: "Try", true: "TryHedged"}[hedged]
					tick := rampart.NewManualTicker(1)
					die := false
					kill := func() {
						if !die {
							return
						}
						if exit == "panic" {
							panic("x")
						}
						runtime.Goexit()
					}
					sh, err := shed.New(shed.Config{Ticker: tick, Source: shed.SourceFunc(func(int64, *shed.Signals) {}),
						Classify: func(context.Context, error) rampart.Result {
							if where == "classify" {
								kill()
							}
							return rampart.Failure
						}})
					require.NoError(t, err)
					bc := bulkhead.Config{Max: 1, Ticker: tick}
					if wait {
						bc.MaxWait = time.Second
					}
					bh, err := bulkhead.New(bc)
					require.NoError(t, err)
					al, err := adaptive.New(adaptive.Config{Ticker: tick, InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
					require.NoError(t, err)
					p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Adaptive: al, Shed: sh, CountStats: true,
						ShedPriority: func(context.Context) int {
							if where == "prio" {
								kill()
							}
							return 0
						}})
					require.NoError(t, err)
					die = true
					var wg sync.WaitGroup
					wg.Go(func() {
						defer func() { _ = recover() }()
						if hedged {
							p.TryHedged(context.Background(), fail)
						} else {
							p.Try(context.Background(), fail)
						}
					})
					wg.Wait()
					die = false
					require.Zero(t, sh.InFlight(), name)
					require.Zero(t, al.InFlight(), name)
					require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code, name)
					require.EqualValues(t, 1, p.Stats().Panicked, name)
				}
			}
		}
	}
}
