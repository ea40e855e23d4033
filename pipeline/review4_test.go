package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/watchdog"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// A retried call rejected on a later attempt ends Rejected by the policy
// that refused it, with that policy's hint: the rate limiter on the second
// attempt (its wait, fn run once), or the breaker that two failures opened
// (ConsecutiveFailures 2) on the third (the remaining open time).
func TestReview4RejectionOnLaterAttempt(t *testing.T) {
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
			tick := newCountingTicker()
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

// A bulkhead rejection on the second attempt carries no hint, even though
// the first attempt's error carried one (the rejection decides).
func TestReview4BulkheadRejectsSecondAttemptNoStaleHint(t *testing.T) {
	// In a bubble: the retry honours the 3 s hint with a sleep on the fake clock.
	synctest.Test(t, func(t *testing.T) {
		tick := newCountingTicker()
		bh := newBulkhead(t, 1, tick)
		rt := newRetry(t, tick, func(c *retry.Config) {
			c.OnRetry = func(int, time.Duration, error) { require.True(t, bh.TryEnter()) } // fills it between attempts
		})
		p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh})
		require.NoError(t, err)
		o := p.Try(context.Background(), func(context.Context) error { return hinted{3 * time.Second} })
		require.Equal(t, pipeline.Rejected, o.Code)
		require.Equal(t, pipeline.Bulkhead, o.Policy)
		require.EqualValues(t, 2, o.Attempts)
		require.Zero(t, o.RetryAfter)
		bh.Exit()
		require.Zero(t, bh.Stats().InFlight)
	})
}

// The retry budget's refusal keeps the failed attempt's Retry-After hint.
func TestReview4BudgetRefusalKeepsErrorHint(t *testing.T) {
	tick := newCountingTicker()
	budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 2, TokenRatio: 0.1})
	require.NoError(t, err)
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = budget; c.MaxAttempts = 10 })
	p, err := pipeline.New(pipeline.Config{Retry: rt})
	require.NoError(t, err)
	var o pipeline.Outcome
	for range 5 {
		o = p.Try(context.Background(), func(context.Context) error { return hinted{1500 * time.Millisecond} })
	}
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, pipeline.Retry, o.Policy)
	require.ErrorIs(t, o.Err, retry.ErrBudget)
	require.Equal(t, 1500*time.Millisecond, o.RetryAfter)
}

// A call cancelled while its second attempt waits for a bulkhead permit ends
// as one cancelled during the retry's sleep (or noticed right after it)
// does: the retry gives up (GiveUps, OnGiveUp) with an error that wraps
// fn's last error and the context's. Today the wait's error is returned
// alone: fn's error is lost and the retry never hears of the give-up.
func TestReview4CancelInBulkheadWaitAfterRetryGivesUp(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour, Ticker: tick})
	require.NoError(t, err)
	var giveUps int
	rt := newRetry(t, tick, func(c *retry.Config) {
		c.OnRetry = func(int, time.Duration, error) { require.True(t, bh.TryEnter()) }
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
	bh.Exit()
	require.Equal(t, pipeline.Canceled, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.ErrorIs(t, o.Err, errBoom, "fn's last error is lost")
	require.EqualValues(t, 1, rt.Stats().GiveUps)
	require.Equal(t, 1, giveUps)
}

// Cancelled during the retry's sleep: Canceled, the error wraps fn's and the
// context's, one attempt, no permit held.
func TestReview4CancelDuringRetrySleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		bh := newBulkhead(t, 1, tick)
		rt := newRetry(t, tick, func(c *retry.Config) { c.BaseDelay = time.Hour })
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
	})
}

// A soft timeout on a retried call: attempt 1 overruns (retried, since
// ShouldRetry says so), attempt 2 succeeds in time: OK, no policy. And the
// reverse: attempt 1 fails plainly, attempt 2 overruns and is the last:
// TimedOut by Timeout.
func TestReview4SoftTimeoutVerdictsOnRetries(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	rt := newRetry(t, tick, func(c *retry.Config) {
		c.MaxAttempts = 2
		c.ShouldRetry = func(error) bool { return true }
	})
	p, err := pipeline.New(pipeline.Config{Retry: rt, Timeout: to})
	require.NoError(t, err)

	n := 0
	o := p.Try(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			tick.Advance(2 * time.Second)
		}
		return nil
	})
	require.Equal(t, 2, n)
	require.Equal(t, pipeline.OK, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.NoError(t, o.Err)
	require.EqualValues(t, 2, o.Attempts)

	n = 0
	o = p.Try(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			return errBoom
		}
		tick.Advance(2 * time.Second)
		return nil
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.Equal(t, pipeline.Timeout, o.Policy)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.EqualValues(t, 2, o.Attempts)

	// Attempt 1 overruns, attempt 2 fails plainly: Failed, not TimedOut.
	n = 0
	o = p.Try(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			tick.Advance(2 * time.Second)
			return nil
		}
		return errBoom
	})
	require.Equal(t, pipeline.Failed, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.ErrorIs(t, o.Err, errBoom)
	require.False(t, errors.Is(o.Err, timeout.ErrTimeout))
}

// Deadline mode: the attempt whose deadline fired (the watchdog's verdict)
// is TimedOut even on a retry; a later attempt that returns in time is OK.
func TestReview4DeadlineTimeoutRetried(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	wd := watchdog.New(watchdog.Config{Clock: tick, Manual: true})
	t.Cleanup(func() { _ = wd.Close() })
	to, err := timeout.New(timeout.Config{Duration: time.Second, Watchdog: wd})
	require.NoError(t, err)
	rt := newRetry(t, tick, func(c *retry.Config) {
		c.MaxAttempts = 2
		c.ShouldRetry = func(error) bool { return true }
	})
	p, err := pipeline.New(pipeline.Config{Retry: rt, Timeout: to})
	require.NoError(t, err)
	overrun := func(ctx context.Context) error {
		tick.Advance(2 * time.Second)
		wd.Sweep()
		<-ctx.Done()
		return ctx.Err()
	}
	n := 0
	o := p.Try(context.Background(), func(ctx context.Context) error {
		n++
		if n == 1 {
			return overrun(ctx)
		}
		return nil
	})
	require.Equal(t, 2, n)
	require.Equal(t, pipeline.OK, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.EqualValues(t, 2, o.Attempts)

	o = p.Try(context.Background(), overrun)
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.Equal(t, pipeline.Timeout, o.Policy)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.EqualValues(t, 2, o.Attempts)
}

// Clock reads on a retried call through a breaker that times calls and a
// soft timeout: t0 and t1 per attempt, no third read for the decision.
func TestReview4ClockReadsRetriedTimedBreaker(t *testing.T) {
	tick := newCountingTicker()
	to, err := timeout.New(timeout.Config{Duration: time.Hour, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.SlowCallDuration = time.Second; c.ConsecutiveFailures = 10 })
	p, err := pipeline.New(pipeline.Config{Retry: newRetry(t, tick, nil), Breaker: cb, Timeout: to})
	require.NoError(t, err)
	tick.reads.Store(0)
	o := p.Try(context.Background(), fail)
	require.Equal(t, pipeline.Failed, o.Code)
	require.EqualValues(t, 3, o.Attempts)
	require.Equal(t, int64(6), tick.reads.Load())
}
