package pipeline_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// newHedger is a hedger on tick with a 1 ms delay and its own watchdog
// sweeping every 1 ms (created inside a synctest bubble, on fake time),
// closed when the test ends; mod, when set, changes the Config first.
func newHedger(t testing.TB, tick rampart.Ticker, mod func(*hedge.Config)) *hedge.Hedger {
	t.Helper()
	cfg := hedge.Config{Name: "hg", Delay: time.Millisecond, Ticker: tick, Tick: time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, err := hedge.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestHedgeRequiresIdempotent(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h := newHedger(t, tick, nil)
	_, err := pipeline.New(pipeline.Config{Hedge: h})
	testkit.RequireConfigError(t, err, "pipeline", "Idempotent")
	_, err = pipeline.New(pipeline.Config{Hedge: h, Idempotent: true})
	require.NoError(t, err)
	_, err = pipeline.New(pipeline.Config{Hedge: h, Idempotent: true, Ticker: rampart.NewManualTicker(1)})
	testkit.RequireConfigError(t, err, "pipeline", "Hedge") // the hedger must share the pipeline's ticker
}

func TestHedgedCallWinsAndReleasesOnce(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h := newHedger(t, tick, nil)
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 1, tick)
	to := newTimeout(t, tick, time.Hour, 0)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Timeout: to, Hedge: h, Idempotent: true})
	require.NoError(t, err)

	var n atomic.Int32
	v, o := pipeline.TryCallHedged(context.Background(), p, func(ctx context.Context) (string, error) {
		if n.Add(1) == 1 {
			tick.Advance(2 * time.Millisecond) // past the hedge delay
			<-ctx.Done()                       // cancelled when the hedge wins
			return "", ctx.Err()
		}
		return "hedge", nil
	})
	require.Equal(t, pipeline.OK, o.Code, "%v", o.Err)
	require.Equal(t, "hedge", v)
	require.EqualValues(t, 1, o.Attempts, "hedges are not retries: one admission")
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Zero(t, cb.Stats().ConsecutiveFailures)
	require.Equal(t, uint64(1), h.Stats().HedgesWon)
}

func TestUnhedgedEntryPointsIgnoreTheHedger(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h := newHedger(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Hedge: h, Idempotent: true})
	require.NoError(t, err)
	var n atomic.Int32
	require.NoError(t, p.Do(context.Background(), func(ctx context.Context) error {
		n.Add(1)
		tick.Advance(time.Second)
		return nil
	}))
	require.EqualValues(t, 1, n.Load())
	require.Zero(t, h.Stats().Hedges)
	require.NoError(t, p.DoHedged(context.Background(), ok))
}

func TestHedgedClockReads(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		build func(tk rampart.Ticker, h *hedge.Hedger) pipeline.Config
		reads int64 // per successful hedged call that decides alone
	}{
		// No policy reads t0: the pipeline reads the start for the hedger.
		{"hedge", func(tk rampart.Ticker, h *hedge.Hedger) pipeline.Config {
			return pipeline.Config{Hedge: h, Idempotent: true}
		}, 1},
		// The rate limiter's t0 is the hedger's start: one read in all.
		{"ratelimit+hedge", func(tk rampart.Ticker, h *hedge.Hedger) pipeline.Config {
			return pipeline.Config{RateLimit: newRateLimit(t, 1e6, 100, tk), Hedge: h, Idempotent: true}
		}, 1},
		// A fail-fast bulkhead cannot make the attempt wait: t0 still serves.
		{"ratelimit+bulkhead+hedge", func(tk rampart.Ticker, h *hedge.Hedger) pipeline.Config {
			return pipeline.Config{RateLimit: newRateLimit(t, 1e6, 100, tk), Bulkhead: newBulkhead(t, 2, tk), Hedge: h, Idempotent: true}
		}, 1},
		// A waiting bulkhead may: t0 is read again at admission.
		{"ratelimit+waitingbulkhead+hedge", func(tk rampart.Ticker, h *hedge.Hedger) pipeline.Config {
			b, err := bulkhead.New(bulkhead.Config{Max: 2, MaxWait: time.Second, Name: "bh", Ticker: tk})
			require.NoError(t, err)
			return pipeline.Config{RateLimit: newRateLimit(t, 1e6, 100, tk), Bulkhead: b, Hedge: h, Idempotent: true}
		}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tick, _ := newCountingTicker()
			// A watchdog that never sweeps during the test, so that the
			// counting ticker counts the calls' reads only.
			h, err := hedge.New(hedge.Config{Name: "hg", Delay: time.Second, Ticker: tick, Tick: time.Hour})
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close() })
			p, err := pipeline.New(c.build(tick, h))
			require.NoError(t, err)
			reads := readsSince(tick)
			for range 10 {
				require.NoError(t, p.DoHedged(ctx, ok))
				_, err := pipeline.CallHedged(ctx, p, func(context.Context) (int, error) { return 1, nil })
				require.NoError(t, err)
			}
			require.Equal(t, 20*c.reads, reads())
			require.Zero(t, h.Stats().Hedges)
		})
	}
}

// TestHedgedCallHoldsBulkheadPermitUntilLosersReturn: a hedged attempt's
// bulkhead slot (shared by its hedges) is released only when every one of
// its attempts has returned: a losing hedge that honours the cancellation
// but takes a moment to unwind still holds it, so that with Max 1 the next
// call never runs fn next to it.
func TestHedgedCallHoldsBulkheadPermitUntilLosersReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, nil)
		bh := newBulkhead(t, 1, tick)
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)

		var running, peak atomic.Int32
		enter := func() {
			if n := running.Add(1); n > peak.Load() {
				peak.Store(n)
			}
		}
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		err = p.DoHedged(context.Background(), func(ctx context.Context) error {
			enter()
			defer running.Add(-1)
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond) // past the delay
				<-hedgeStarted                     // the hedge runs
				return nil                         // the first attempt wins
			}
			close(hedgeStarted)
			<-ctx.Done()                 // honours the cancellation...
			time.Sleep(time.Millisecond) // ...but takes a moment to unwind (closing a connection)
			return ctx.Err()
		})
		require.NoError(t, err)
		require.EqualValues(t, 0, running.Load(), "DoHedged returned while the losing hedge still ran fn")
		require.EqualValues(t, 0, bh.Stats().InFlight)

		// The next call is admitted only now: it never overlaps the first
		// call's attempts (which overlap each other by design).
		peak.Store(0)
		o := p.TryHedged(context.Background(), func(context.Context) error { enter(); running.Add(-1); return nil })
		synctest.Wait()
		require.EqualValues(t, 1, peak.Load(), "fn ran %d at once under a bulkhead of 1 (outcome %v)", peak.Load(), o.Code)
	})
}

// TestHedgedAsyncFirstHoldsBulkheadPermitUntilFirstAttemptReturns: the
// same with AsyncFirst, the mode meant for callees that ignore
// cancellation: under a pipeline the call still waits for its first
// attempt when a hedge wins, so that attempt's slot is not free while it
// runs.
func TestHedgedAsyncFirstHoldsBulkheadPermitUntilFirstAttemptReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, func(c *hedge.Config) { c.AsyncFirst = true })
		bh := newBulkhead(t, 1, tick)
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		var running atomic.Int32
		var n atomic.Int32
		err = p.DoHedged(context.Background(), func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				time.Sleep(10 * time.Millisecond) // ignores cancellation, ends later
				return nil
			}
			return nil // the hedge wins
		})
		require.NoError(t, err)
		stillRunning := running.Load()
		inFlight := bh.Stats().InFlight
		synctest.Wait()
		require.False(t, stillRunning == 1 && inFlight == 0,
			"the first attempt still runs fn while its bulkhead slot is free")
	})
}

// TestHedgedSharedBudgetCountsEachOutcomeOnce: a hedger given the retry's
// budget (as Config.Hedge advises) leaves the request and each attempt's
// outcome to the pipeline, which counts them once: a successful attempt is
// one OnSuccess (with the gRPC A6 token bucket every success refills
// TokenRatio once), a call of three attempts at most two OnRequest, and a
// failed attempt that a Fatal lets a hedge still win is one OnFailure.
func TestHedgedSharedBudgetCountsEachOutcomeOnce(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bud := &testkit.Budget{Base: newTokenBucket(t)}
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = bud; c.BaseDelay = time.Nanosecond })
	h, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour, Budget: bud})
	require.NoError(t, err)
	defer h.Close()
	p, err := pipeline.New(pipeline.Config{Retry: rt, Hedge: h, Idempotent: true})
	require.NoError(t, err)

	require.NoError(t, p.DoHedged(context.Background(), ok))
	assert.EqualValues(t, 1, bud.Successes(), "one successful attempt, OnSuccess called %d times", bud.Successes())

	// A call that fails twice, then succeeds: 3 attempts of one call.
	req0 := bud.Requests()
	var n atomic.Int32
	require.NoError(t, p.DoHedged(context.Background(), func(context.Context) error {
		if n.Add(1) < 3 {
			return errBoom
		}
		return nil
	}))
	assert.LessOrEqual(t, bud.Requests()-req0, int64(2), "one logical call counted %d requests", bud.Requests()-req0)

	// With a Fatal that lets retryable errors be non-fatal (so that a
	// hedge may still win), a failed attempt's OnFailure is counted once,
	// by the pipeline, not again by the hedger.
	h2, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour, Budget: bud,
		Fatal: func(error) bool { return false }})
	require.NoError(t, err)
	defer h2.Close()
	p2, err := pipeline.New(pipeline.Config{Retry: rt, Hedge: h2, Idempotent: true})
	require.NoError(t, err)
	fail0 := bud.Failures()
	n.Store(0)
	require.NoError(t, p2.DoHedged(context.Background(), func(context.Context) error {
		if n.Add(1) < 2 {
			return errBoom
		}
		return nil
	}))
	assert.EqualValues(t, 1, bud.Failures()-fail0, "one failed attempt, OnFailure called %d times", bud.Failures()-fail0)
}

// TestHedgedAttemptAdmittedOnce: one admission per attempt shared by its
// hedges: the breaker, the rate limiter, the bulkhead and the adaptive
// limit each see one acquire and one release per attempt however many
// hedges ran; the outcome is recorded once.
func TestHedgedAttemptAdmittedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // fake time in the bubble: the hedges fire one delay apart
		h, err := hedge.New(hedge.Config{Delay: time.Millisecond, MaxHedges: 3, Ticker: tick, Tick: time.Millisecond})
		require.NoError(t, err)
		defer h.Close()
		cb := newBreaker(t, tick, nil)
		rl := newRateLimit(t, 1, 1, tick) // one permit: a second admission would be refused
		bh := newBulkhead(t, 1, tick)
		al := newAdaptive(t, tick, 1)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh, Adaptive: al, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		var attempts atomic.Int32
		v, o := pipeline.TryCallHedged(context.Background(), p, func(ctx context.Context) (int, error) {
			if attempts.Add(1) < 4 {
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 7, nil
		})
		require.Equal(t, pipeline.OK, o.Code, "%v", o.Err)
		require.Equal(t, 7, v)
		require.EqualValues(t, 1, o.Attempts)
		synctest.Wait()
		require.EqualValues(t, 4, attempts.Load(), "the first attempt and three hedges")
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 0, al.Stats().InFlight)
		require.Zero(t, cb.Stats().ConsecutiveFailures)
		require.Equal(t, uint64(1), h.Stats().HedgesWon)
	})
}

// TestHedgePanicReleasesOnceAndReraises: a panic in a hedge that decides
// the race is re-raised on the caller's goroutine with the same value,
// after the pipeline released every permit once and recorded a breaker
// failure.
func TestHedgePanicReleasesOnceAndReraises(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, nil)
		cb := newBreaker(t, tick, nil)
		bh := newBulkhead(t, 1, tick)
		to := newTimeout(t, tick, time.Hour, 0)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Timeout: to, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		var n atomic.Int32
		require.PanicsWithValue(t, "hedge bug", func() {
			_ = p.DoHedged(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					tick.Advance(2 * time.Millisecond)
					<-ctx.Done() // cancelled when the hedge's panic decides
					return ctx.Err()
				}
				panic("hedge bug")
			})
		})
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
		// The pipeline is usable again.
		require.NoError(t, p.DoHedged(context.Background(), ok))
		require.EqualValues(t, 0, bh.Stats().InFlight)
	})
}

// TestHedgeGoexitReleasesOnce: runtime.Goexit in a hedge while the first
// attempt is the last one running: the call ends with the first attempt's
// error (Goexit cannot cross goroutines: the caller's goroutine goes on),
// every permit released once.
func TestHedgeGoexitReleasesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, func(c *hedge.Config) { c.Fatal = func(error) bool { return false } })
		bh := newBulkhead(t, 1, tick)
		cb := newBreaker(t, tick, nil)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		hedgeDone := make(chan struct{})
		var n atomic.Int32
		err = p.DoHedged(context.Background(), func(ctx context.Context) error {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-hedgeDone
				return errBoom // non-fatal, but the last attempt: decides
			}
			defer close(hedgeDone)
			testkit.Goexit()
			return nil
		})
		require.ErrorIs(t, err, errBoom)
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	})
}

// TestHedgedCallerCancelMidRace: the caller's context cancelled mid-race:
// every attempt's context ends, the call ends Canceled with the context's
// error, nothing stays held and no goroutine is left (synctest fails on a
// leaked goroutine).
func TestHedgedCallerCancelMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, func(c *hedge.Config) { c.MaxHedges = 2 })
		bh := newBulkhead(t, 1, tick)
		cb := newBreaker(t, tick, nil)
		rt, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 3})
		require.NoError(t, err)
		p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int32
		hedged := make(chan struct{})
		var once sync.Once
		o := p.TryHedged(ctx, func(actx context.Context) error {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-hedged
				cancel()
			} else {
				once.Do(func() { close(hedged) })
			}
			<-actx.Done()
			return actx.Err()
		})
		require.Equal(t, pipeline.Canceled, o.Code)
		require.ErrorIs(t, o.Err, context.Canceled)
		require.EqualValues(t, 1, o.Attempts)
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
	})
}

// TestHedgedTimeoutMidRace: a deadline-mode timeout firing mid-race: every
// attempt's context ends with the deadline, the attempt is TimedOut,
// recorded once as a failure.
func TestHedgedTimeoutMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // fake time in the bubble
		h, err := hedge.New(hedge.Config{Delay: 10 * time.Millisecond, Ticker: tick, Tick: time.Millisecond})
		require.NoError(t, err)
		defer h.Close()
		to := newTimeoutTick(t, tick, 50*time.Millisecond, timeout.ModeDeadline, time.Millisecond)
		cb := newBreaker(t, tick, nil)
		bh := newBulkhead(t, 1, tick)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Timeout: to, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		var n atomic.Int32
		o := p.TryHedged(context.Background(), func(ctx context.Context) error {
			n.Add(1)
			<-ctx.Done()
			return ctx.Err()
		})
		require.Equal(t, pipeline.TimedOut, o.Code, "%v", o.Err)
		require.ErrorIs(t, o.Err, timeout.ErrTimeout)
		require.EqualValues(t, 2, n.Load(), "the first attempt and one hedge ran")
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	})
}

// TestHedgedWaitingBulkhead: a bulkhead with MaxWait: the hedged attempt
// queues, is admitted when the slot frees, and releases it once.
func TestHedgedWaitingBulkhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker()
		h, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Millisecond})
		require.NoError(t, err)
		defer h.Close()
		bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Second, Ticker: tick})
		require.NoError(t, err)
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		hold := make(chan struct{})
		go func() { _ = p.DoHedged(context.Background(), func(context.Context) error { <-hold; return nil }) }()
		synctest.Wait()
		done := make(chan error)
		go func() { done <- p.DoHedged(context.Background(), ok) }()
		synctest.Wait()
		close(hold)
		require.NoError(t, <-done)
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
	})
}

// TestHedgedFirstAttemptPanicOrGoexitCancelsHedges: a panic or a
// runtime.Goexit in the first attempt while a hedge runs: the hedge's
// context is cancelled, the panic goes on to the caller (a Goexit ends the
// caller's goroutine), the permits are released once and the breaker
// records a failure.
func TestHedgedFirstAttemptPanicOrGoexitCancelsHedges(t *testing.T) {
	for _, c := range []struct {
		name     string
		end      func() // how the first attempt ends
		panicked any
		goexited bool
	}{
		{"panic", func() { panic("first") }, "first", false},
		{"goexit", testkit.Goexit, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tick := rampart.NewManualTicker(1)
				h := newHedger(t, tick, nil)
				bh := newBulkhead(t, 1, tick)
				cb := newBreaker(t, tick, nil)
				p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Hedge: h, Idempotent: true})
				require.NoError(t, err)
				started := make(chan struct{})
				hedgeCtxDone := make(chan struct{})
				var n atomic.Int32
				panicked, goexited := testkit.Run(func() {
					_ = p.DoHedged(context.Background(), func(ctx context.Context) error {
						if n.Add(1) == 1 {
							tick.Advance(2 * time.Millisecond)
							<-started
							c.end()
						}
						close(started)
						<-ctx.Done()
						close(hedgeCtxDone)
						return ctx.Err()
					})
				})
				require.Equal(t, c.panicked, panicked)
				require.Equal(t, c.goexited, goexited, "DoHedged returned after runtime.Goexit")
				<-hedgeCtxDone
				synctest.Wait()
				require.EqualValues(t, 0, bh.Stats().InFlight)
				require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
			})
		})
	}
}

// TestHedgesShareTheHalfOpenProbe: a half-open breaker admits one probe;
// its hedges share it (no second probe permit), and the probe's success
// closes the breaker once.
func TestHedgesShareTheHalfOpenProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := newHedger(t, tick, nil)
		cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 1; c.OpenDuration = time.Second })
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		require.Error(t, p.DoHedged(context.Background(), fail))
		require.Equal(t, circuitbreaker.Open, cb.State())
		tick.Advance(2 * time.Second)
		var n atomic.Int32
		require.NoError(t, p.DoHedged(context.Background(), func(ctx context.Context) error {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
		synctest.Wait()
		require.Equal(t, circuitbreaker.Closed, cb.State())
	})
}

// TestAllocsHedgedNoHedgePath: the hedged entry points allocate nothing on
// the no-hedge path with a func value that captures nothing, every
// fail-fast policy and a soft-mode timeout (the hedger's context slab is
// 1/128 of an allocation per call); DoHedged and TryHedged included, which
// a caller in another package inlines.
func TestAllocsHedgedNoHedgePath(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	to := newTimeout(t, tick, time.Hour, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Breaker: newBreaker(t, tick, nil), RateLimit: newRateLimit(t, 1e9, 1_000_000, tick),
		Bulkhead: newBulkhead(t, 10, tick), Timeout: to, Hedge: h, Idempotent: true})
	require.NoError(t, err)
	ctx := context.Background()
	fnT := func(context.Context) (int, error) { return 1, nil }
	testkit.WantAllocs(t, "CallHedged", 0, func() { _, _ = pipeline.CallHedged(ctx, p, fnT) })
	testkit.WantAllocs(t, "TryCallHedged", 0, func() { _, _ = pipeline.TryCallHedged(ctx, p, fnT) })
	testkit.WantAllocs(t, "DoHedged", 0, func() { _ = p.DoHedged(ctx, ok) })
	testkit.WantAllocs(t, "TryHedged", 0, func() { _ = p.TryHedged(ctx, ok) })
}
