package pipeline_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/israce"
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
	tick := newCountingTicker()
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
	tick.reads.Store(0)

	o := p.Try(context.Background(), func(ctx context.Context) error {
		before := tick.reads.Load()
		_, hasDeadline := ctx.Deadline() // reads the ticker to convert to wall time
		require.True(t, hasDeadline, "fn sees the timeout's deadline")
		tick.Advance(2 * time.Second) // the call overran
		wd.Sweep()                    // the watchdog fires its deadline
		tick.reads.Store(before)
		return nil // it still returns success
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.Equal(t, pipeline.Timeout, o.Policy)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.ErrorIs(t, o.Err, context.DeadlineExceeded)
	require.Equal(t, int64(1), tick.reads.Load(), "one read: t0 (the verdict is the watchdog's)")
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures, "the breaker saw a failure")
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Equal(t, uint64(1), to.Stats().Timeouts)

	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
	require.Equal(t, int64(2), tick.reads.Load())

	// An overrun the watchdog has not seen yet (it fires within one tick of
	// the deadline) is in time, as in timeout.Do.
	o = p.Try(context.Background(), func(ctx context.Context) error {
		tick.Advance(2 * time.Second)
		return nil
	})
	require.Equal(t, pipeline.OK, o.Code)
	require.Equal(t, uint64(1), to.Stats().Timeouts)
	require.Equal(t, 0, wd.Stats().Armed)
}

// TestSoftTimeoutOverrunReadsTheEnd: soft mode has no watchdog; the
// pipeline reads t1 and classifies exactly.
func TestSoftTimeoutOverrunReadsTheEnd(t *testing.T) {
	tick := newCountingTicker()
	cb := newBreaker(t, tick, nil)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Timeout: to})
	require.NoError(t, err)
	tick.reads.Store(0)
	o := p.Try(context.Background(), func(ctx context.Context) error {
		tick.Advance(time.Second) // ends at the deadline: late
		return nil
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.ErrorIs(t, o.Err, timeout.ErrTimeout)
	require.Equal(t, int64(2), tick.reads.Load(), "one pair of reads: t0 and t1")
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures)
}

func TestTimeoutFiresTheContext(t *testing.T) {
	tick := newCountingTicker()
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

func TestTimeoutRetriedWithFreshDeadlineWhenShouldRetrySaysSo(t *testing.T) {
	tick := newCountingTicker()
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	rt := newRetry(t, tick, func(c *retry.Config) {
		c.ShouldRetry = func(err error) bool { return true }
	})
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
	tick := newCountingTicker()
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
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
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
	require.Equal(t, 1.0, testing.AllocsPerRun(500, func() {
		if deadline.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	}))
	require.Zero(t, testing.AllocsPerRun(500, func() {
		if soft.Do(ctx, ok) != nil {
			t.Fatal("not admitted")
		}
	}))
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

		require.True(t, bh.TryEnter()) // another caller holds the only permit for 500 ms
		go func() {
			time.Sleep(500 * time.Millisecond)
			bh.Exit()
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
