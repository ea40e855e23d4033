package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/internal/watchdog"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

func newTimeout(t testing.TB, tick rampart.Ticker, d time.Duration, mode timeout.Mode) *timeout.Timeout {
	return newTimeoutTick(t, tick, d, mode, 0)
}

// newTimeoutTick sets the sweep period of the timeout's own watchdog (whose
// goroutine reads the ticker too).
func newTimeoutTick(t testing.TB, tick rampart.Ticker, d time.Duration, mode timeout.Mode, sweep time.Duration) *timeout.Timeout {
	t.Helper()
	to, err := timeout.New(timeout.Config{Name: "to", Duration: d, Mode: mode, Ticker: tick, Tick: sweep})
	require.NoError(t, err)
	t.Cleanup(func() { _ = to.Close() })
	return to
}

// TestTimeoutOverrunIsTimedOutAndRecorded: in deadline mode the pipeline
// reads the clock once (t0) and takes the watchdog's verdict at the end: an
// attempt is timed out when its deadline fired before fn returned, whatever
// fn returned.
func TestTimeoutOverrunIsTimedOutAndRecorded(t *testing.T) {
	tick, clock := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 1, tick)
	// A manual watchdog: it fires only when the test sweeps it, and does
	// not read the counting ticker by itself.
	wd := watchdog.New(watchdog.Config{Clock: tick, Manual: true})
	t.Cleanup(func() { _ = wd.Close() })
	to, err := timeout.New(timeout.Config{Name: "to", Duration: time.Second, Watchdog: wd})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Timeout: to})
	require.NoError(t, err)
	reads := readsSince(tick)

	var inFn int64 // the reads made inside fn, by the test
	o := p.Try(context.Background(), func(ctx context.Context) error {
		before := tick.Reads()
		_, hasDeadline := ctx.Deadline() // reads the ticker to convert to wall time
		require.True(t, hasDeadline, "fn sees the timeout's deadline")
		clock.Advance(2 * time.Second) // the call overran
		wd.Sweep()                     // the watchdog fires its deadline
		inFn = tick.Reads() - before
		return nil // it still returns success
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.Equal(t, pipeline.Timeout, o.Policy)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.ErrorIs(t, o.Err, context.DeadlineExceeded)
	require.Equal(t, int64(1), reads()-inFn, "one read: t0 (the verdict is the watchdog's)")
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures, "the breaker saw a failure")
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Equal(t, uint64(1), to.Stats().Timeouts)

	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
	require.Equal(t, int64(2), reads()-inFn)

	// An overrun the watchdog has not seen yet (it fires within one tick of
	// the deadline) is in time, as in timeout.Do.
	o = p.Try(context.Background(), func(ctx context.Context) error {
		clock.Advance(2 * time.Second)
		return nil
	})
	require.Equal(t, pipeline.OK, o.Code)
	require.Equal(t, uint64(1), to.Stats().Timeouts)
	require.Equal(t, 0, wd.Stats().Armed)
}

// TestSoftTimeoutOverrunReadsTheEnd: soft mode has no watchdog; the
// pipeline reads t1 and classifies exactly.
func TestSoftTimeoutOverrunReadsTheEnd(t *testing.T) {
	tick, clock := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Timeout: to})
	require.NoError(t, err)
	reads := readsSince(tick)
	o := p.Try(context.Background(), func(ctx context.Context) error {
		clock.Advance(time.Second) // ends at the deadline: late
		return nil
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.Equal(t, int64(2), reads(), "one pair of reads: t0 and t1")
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures)
}

func TestTimeoutFiresTheContext(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to := newTimeout(t, tick, time.Second, timeout.ModeDeadline)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Timeout: to})
	require.NoError(t, err)
	o := p.Try(context.Background(), func(ctx context.Context) error {
		tick.Advance(time.Second)
		<-ctx.Done() // the watchdog fires the deadline
		return ctx.Err()
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.Equal(t, int64(0), bh.Stats().InFlight)
}

// TestTimeoutRetriedWithFreshDeadlineByDefault: the default classifier
// retries a soft-mode timeout (the caller's context is live).
func TestTimeoutRetriedWithFreshDeadlineByDefault(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	rt := newRetry(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Retry: rt, Timeout: to})
	require.NoError(t, err)
	n := 0
	require.NoError(t, p.Do(context.Background(), func(context.Context) error {
		n++
		if n == 1 {
			tick.Advance(2 * time.Second)
		}
		return nil
	}))
	require.Equal(t, 2, n)
}

// retryTwiceOnAnyError makes a retry make two attempts whatever the first
// one's error (a timeout included).
func retryTwiceOnAnyError(c *retry.Config) {
	c.MaxAttempts = 2
	c.ShouldRetry = func(error) bool { return true }
}

// TestSoftTimeoutVerdictsOnRetries: a soft timeout on a retried call:
// attempt 1 overruns (retried, since ShouldRetry says so), attempt 2
// succeeds in time: OK, no policy. And the reverse: attempt 1 fails
// plainly, attempt 2 overruns and is the last: TimedOut by Timeout. And
// attempt 1 overruns, attempt 2 fails plainly and the retry gives up:
// Failed by Retry, not TimedOut.
func TestSoftTimeoutVerdictsOnRetries(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	rt := newRetry(t, tick, retryTwiceOnAnyError)
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
	require.Equal(t, pipeline.Retry, o.Policy)
	require.ErrorIs(t, o.Err, errBoom)
	require.False(t, errors.Is(o.Err, timeout.ErrTimeout))
}

// TestDeadlineTimeoutVerdictsOnRetries: in deadline mode the attempt whose
// deadline fired (the watchdog's verdict) is TimedOut even on a retry; a
// later attempt that returns in time is OK.
func TestDeadlineTimeoutVerdictsOnRetries(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	wd := watchdog.New(watchdog.Config{Clock: tick, Manual: true})
	t.Cleanup(func() { _ = wd.Close() })
	to, err := timeout.New(timeout.Config{Duration: time.Second, Watchdog: wd})
	require.NoError(t, err)
	rt := newRetry(t, tick, retryTwiceOnAnyError)
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

// TestDeadlineTimeoutRetriedByDefault: with the default classifier, an
// attempt whose deadline-mode timeout fired is retried with a fresh
// deadline (each timeout recorded by the breaker as a failure), while the
// caller's own context ending stops the retries at once with its error,
// returned as it is.
func TestDeadlineTimeoutRetriedByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // inside the bubble: follows its fake clock
		to, err := timeout.New(timeout.Config{Name: "to", Duration: 100 * time.Millisecond, Ticker: tick, Tick: time.Millisecond})
		require.NoError(t, err)
		defer to.Close()
		cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
			c.Mode, c.WindowSize, c.MinimumCalls = circuitbreaker.CountWindow, 10, 10
		})
		rt := newRetry(t, tick, func(c *retry.Config) { c.BaseDelay = time.Millisecond })
		p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, Timeout: to})
		require.NoError(t, err)

		var lefts []time.Duration
		n := 0
		start := time.Now()
		o := p.Try(context.Background(), func(ctx context.Context) error {
			n++
			d, _ := ctx.Deadline()
			lefts = append(lefts, time.Until(d))
			if n < 3 {
				<-ctx.Done() // the attempt's deadline fires
				return ctx.Err()
			}
			return nil
		})
		require.Equal(t, pipeline.Outcome{Attempts: 3}, o)
		require.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, lefts,
			"each retry gets a fresh deadline")
		require.Equal(t, 202*time.Millisecond, time.Since(start))
		st := cb.Stats()
		require.Equal(t, uint64(2), st.Failures, "the breaker counts the timeouts as failures")
		require.Equal(t, uint64(3), st.Calls)
		require.Equal(t, uint64(2), to.Stats().Timeouts)

		// The caller's deadline (150 ms) ends the second attempt: no
		// retry, its error as it is.
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		n = 0
		start = time.Now()
		o = p.Try(ctx, func(ctx context.Context) error { n++; <-ctx.Done(); return ctx.Err() })
		require.Equal(t, pipeline.Outcome{Code: pipeline.Canceled, Attempts: 2, Err: context.DeadlineExceeded}, o)
		require.Equal(t, 2, n)
		require.Equal(t, 150*time.Millisecond, time.Since(start), "ended with the caller's context")

		// Canceled by the caller during the first attempt: the same.
		ctx, cancel = context.WithCancel(context.Background())
		o = p.Try(ctx, func(ctx context.Context) error { cancel(); return ctx.Err() })
		require.Equal(t, pipeline.Outcome{Code: pipeline.Canceled, Attempts: 1, Err: context.Canceled}, o)
	})
}

// TestTimeoutNeverAbandons: a pipeline's timeout never abandons, even one
// configured for abandoning use (MaxAbandoned, Workers, OnAbandon set, for
// its DoAbandon callers): an attempt whose fn ignores its context runs on
// the caller's goroutine until fn returns, holding its bulkhead permit,
// and then is a timeout; nothing is abandoned or handed to a worker.
func TestTimeoutNeverAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // inside the bubble: follows its fake clock
		bh, err := bulkhead.New(bulkhead.Config{Max: 1, Name: "bh", Ticker: tick})
		require.NoError(t, err)
		var onAbandon int
		to, err := timeout.New(timeout.Config{Name: "to", Duration: 100 * time.Millisecond, Ticker: tick, Tick: time.Millisecond,
			MaxAbandoned: 10, Workers: 2, OnAbandon: func(int64) { onAbandon++ }})
		require.NoError(t, err)
		defer to.Close()
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Timeout: to})
		require.NoError(t, err)

		start := time.Now()
		var inFlight int64
		err = p.Do(context.Background(), func(context.Context) error {
			time.Sleep(300 * time.Millisecond) // ignores its context
			inFlight = bh.Stats().InFlight
			return nil
		})
		require.ErrorIs(t, err, timeout.ErrTimeout)
		require.Equal(t, 300*time.Millisecond, time.Since(start), "the attempt ended when fn did")
		require.Equal(t, int64(1), inFlight, "the permit was held until fn returned")
		require.Equal(t, int64(0), bh.Stats().InFlight)
		st := to.Stats()
		require.Equal(t, uint64(1), st.Timeouts)
		require.Zero(t, st.AbandonedTotal)
		require.Zero(t, st.Workers, "no worker was started")
		require.Zero(t, onAbandon)
	})
}

func TestTimeoutPanicReleases(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to := newTimeout(t, tick, time.Second, timeout.ModeDeadline)
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Timeout: to})
	require.NoError(t, err)
	var seen context.Context
	require.Panics(t, func() {
		_ = p.Do(context.Background(), func(ctx context.Context) error { seen = ctx; panic("x") })
	})
	require.ErrorIs(t, seen.Err(), context.Canceled, "the attempt's context was ended")
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures)
}

func TestAllocsWithTimeout(t *testing.T) {
	ctx := context.Background()
	tick := rampart.NewManualTicker(1)
	build := func(mode timeout.Mode) *pipeline.Pipeline {
		p, err := pipeline.New(pipeline.Config{
			Retry: newRetry(t, tick, nil), Breaker: newBreaker(t, tick, func(c *circuitbreaker.Config) { c.Mode = circuitbreaker.CountWindow }),
			RateLimit: newRateLimit(t, 1e9, 1_000_000, tick), Bulkhead: newBulkhead(t, 4, tick),
			Timeout: newTimeout(t, tick, time.Second, mode),
		})
		require.NoError(t, err)
		return p
	}
	deadline, soft := build(timeout.ModeDeadline), build(timeout.ModeSoft)
	// The timeout's documented count: one allocation (the context) in
	// deadline mode, none in soft mode.
	testkit.WantAllocs(t, "deadline mode", 1, func() {
		if deadline.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	})
	testkit.WantAllocs(t, "soft mode", 0, func() {
		if soft.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	})
}

// TestDeadlineCountsFromAdmission: with a waiting bulkhead, an attempt that
// queued for a permit still gets the whole timeout for fn.
func TestDeadlineCountsFromAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // inside the bubble: follows its fake clock
		bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Second, Name: "bh", Ticker: tick})
		require.NoError(t, err)
		to, err := timeout.New(timeout.Config{Name: "to", Duration: 100 * time.Millisecond, Ticker: tick, Tick: time.Millisecond})
		require.NoError(t, err)
		defer to.Close()
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Timeout: to})
		require.NoError(t, err)

		require.NoError(t, bh.Acquire()) // another caller holds the only permit for 500 ms
		go func() {
			time.Sleep(500 * time.Millisecond)
			bh.Release()
		}()
		var left time.Duration
		err = p.Do(context.Background(), func(ctx context.Context) error {
			d, ok := ctx.Deadline()
			require.True(t, ok)
			left = time.Until(d)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, 100*time.Millisecond, left, "the 500 ms spent queueing came out of the deadline")
	})
}

// TestTimeoutVerdictAfterUpdate: after Timeout.Update (which gives the calls
// started after it a new preallocated error), an attempt that overran is
// still TimedOut by Timeout, through the fast first attempt and the general
// loop; a timeout error of another timeout that fn returns is fn's failure.
func TestTimeoutVerdictAfterUpdate(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Timeout: to, Idempotent: true})
	require.NoError(t, err)
	require.NoError(t, to.Update(timeout.Config{Name: "to", Duration: 2 * time.Second, Mode: timeout.ModeSoft, Ticker: tick}))
	overrun := func(context.Context) error { tick.Advance(3 * time.Second); return nil }
	for name, try := range map[string]func(context.Context, func(context.Context) error) pipeline.Outcome{"fast": p.Try, "general": p.TryHedged} {
		o := try(context.Background(), overrun)
		require.Equal(t, pipeline.TimedOut, o.Code, name)
		require.Equal(t, pipeline.Timeout, o.Policy, name)
		require.Same(t, to.Err(), o.Err, name)
	}
	other := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	o := p.Try(context.Background(), func(context.Context) error { return other.Err() })
	require.Equal(t, pipeline.Failed, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
}

// TestCanceledCallerDuringAnOverrunIsCanceled: the caller's context ends
// during an attempt that then overruns the (soft) timeout: the call is
// Canceled, not TimedOut, with a retry and without one alike.
func TestCanceledCallerDuringAnOverrunIsCanceled(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	for _, name := range []string{"no retry", "retry"} {
		cfg := pipeline.Config{Timeout: to}
		if name == "retry" {
			cfg.Retry, err = retry.New(retry.Config{MaxAttempts: 3, Ticker: tick})
			require.NoError(t, err)
		}
		p, err := pipeline.New(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		o := p.Try(ctx, func(ctx context.Context) error {
			cancel()                      // the caller leaves
			tick.Advance(2 * time.Second) // the attempt overruns
			return ctx.Err()
		})
		require.Equal(t, pipeline.Canceled, o.Code, "%s: %+v", name, o)
		require.Equal(t, pipeline.None, o.Policy, name)
		require.EqualValues(t, 1, o.Attempts, name)
		require.Error(t, o.Err, name)
	}
}
