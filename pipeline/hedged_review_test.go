package pipeline_test

import (
	"context"
	"runtime"
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
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// hrBudget counts the budget protocol (a token bucket underneath).
type hrBudget struct {
	tb                      *retry.TokenBucket
	req, okN, fail, allowed atomic.Int32
}

func (b *hrBudget) OnRequest(now int64) { b.req.Add(1); b.tb.OnRequest(now) }
func (b *hrBudget) OnSuccess(now int64) { b.okN.Add(1); b.tb.OnSuccess(now) }
func (b *hrBudget) OnFailure(now int64) { b.fail.Add(1); b.tb.OnFailure(now) }
func (b *hrBudget) AllowRetry(now int64) bool {
	ok := b.tb.AllowRetry(now)
	if ok {
		b.allowed.Add(1)
	}
	return ok
}

func newHRBudget(t *testing.T) *hrBudget {
	tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	require.NoError(t, err)
	return &hrBudget{tb: tb}
}

// hrHedger is a hedger on tick with its own watchdog (created inside the
// synctest bubble, so its sweep runs on fake time).
func hrHedger(t *testing.T, tick rampart.Ticker, mod func(*hedge.Config)) *hedge.Hedger {
	cfg := hedge.Config{Name: "hg", Delay: time.Millisecond, Ticker: tick, Tick: time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, err := hedge.New(cfg)
	require.NoError(t, err)
	return h
}

// The pipeline's doc and README say the concurrency permit is released
// "only when the call has really returned: ... never an abandoned goroutine
// that would still hold the dependency while its permit is reused" (seed
// 003), and Config.Hedge says the hedges share the attempt's bulkhead slot.
// But runHedged releases the slot as soon as hedge.DoAt/CallAt returns, and
// the hedger does not wait for its losers: a losing hedge that honours the
// cancellation but takes a moment to unwind is still running fn when the
// slot is handed to the next call. With Max 1, two fn run at once.
func TestHedgedReviewLoserOutlivesBulkheadPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, nil)
		defer h.Close()
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

// The same with AsyncFirst, the mode meant for callees that ignore
// cancellation: the first attempt itself is abandoned when a hedge wins, and
// its permit is reused while it still runs.
func TestHedgedReviewAsyncFirstLoserOutlivesBulkheadPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, func(c *hedge.Config) { c.AsyncFirst = true })
		defer h.Close()
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
			"the abandoned first attempt still runs fn while its bulkhead slot is free")
	})
}

// Config.Hedge and the README tell the user to give the hedger the retry's
// budget, admitting only that "both then count the call's request". But a
// successful attempt is also counted twice: the pipeline's settle calls
// OnSuccess, and so does the hedger (hedge.done / race.report). With the
// A6 token bucket every success refills 2×TokenRatio. And the hedger calls
// OnRequest once per attempt (DoAt per attempt), not once per call: a call
// retried twice counts 4 requests.
func TestHedgedReviewSharedBudgetCountsOutcomesOnce(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bud := newHRBudget(t)
	rt := newRetry(t, tick, func(c *retry.Config) { c.Budget = bud; c.BaseDelay = time.Nanosecond })
	h, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour, Budget: bud})
	require.NoError(t, err)
	defer h.Close()
	p, err := pipeline.New(pipeline.Config{Retry: rt, Hedge: h, Idempotent: true})
	require.NoError(t, err)

	require.NoError(t, p.DoHedged(context.Background(), ok))
	assert.EqualValues(t, 1, bud.okN.Load(), "one successful attempt, OnSuccess called %d times", bud.okN.Load())

	// A call that fails twice, then succeeds: 3 attempts of one call.
	bud.req.Store(0)
	var n atomic.Int32
	require.NoError(t, p.DoHedged(context.Background(), func(context.Context) error {
		if n.Add(1) < 3 {
			return errBoom
		}
		return nil
	}))
	assert.LessOrEqual(t, bud.req.Load(), int32(2), "one logical call counted %d requests", bud.req.Load())

	// With a Fatal that lets retryable errors be non-fatal (so that a
	// hedge may still win), a failed attempt's OnFailure is counted by the
	// hedger and again by the retry's Decide: the A6 bucket drains twice
	// as fast.
	h2, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour, Budget: bud,
		Fatal: func(error) bool { return false }})
	require.NoError(t, err)
	defer h2.Close()
	p2, err := pipeline.New(pipeline.Config{Retry: rt, Hedge: h2, Idempotent: true})
	require.NoError(t, err)
	bud.fail.Store(0)
	n.Store(0)
	require.NoError(t, p2.DoHedged(context.Background(), func(context.Context) error {
		if n.Add(1) < 2 {
			return errBoom
		}
		return nil
	}))
	assert.EqualValues(t, 1, bud.fail.Load(), "one failed attempt, OnFailure called %d times", bud.fail.Load())
}

// --- guards that pass ---

// One admission per attempt shared by its hedges: the breaker, the rate
// limiter, the bulkhead and the adaptive limit each see one acquire and one
// release per attempt however many hedges ran; the outcome is recorded once.
func TestHedgedReviewOneAdmissionPerAttempt(t *testing.T) {
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

// A panic in a hedge that decides the race is re-raised on the caller's
// goroutine with the same value, after the pipeline released every permit
// once and recorded a breaker failure; the budget records one failure.
func TestHedgedReviewHedgePanicReleasesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, nil)
		defer h.Close()
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

// runtime.Goexit in a hedge that is the last attempt running: the call ends
// with an error (Goexit cannot cross goroutines), every permit released once.
func TestHedgedReviewHedgeGoexitReleasesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, func(c *hedge.Config) { c.Fatal = func(error) bool { return false } })
		defer h.Close()
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
			runtime.Goexit()
			return nil
		})
		require.ErrorIs(t, err, errBoom)
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	})
}

// The caller's context cancelled mid-race: every attempt's context ends,
// the call ends Canceled with the context's error, nothing stays held and no
// goroutine is left (synctest fails on a leaked goroutine).
func TestHedgedReviewCallerCancelMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, func(c *hedge.Config) { c.MaxHedges = 2 })
		defer h.Close()
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

// A deadline-mode timeout firing mid-race: every attempt's context ends
// with the deadline, the attempt is TimedOut, recorded once as a failure.
func TestHedgedReviewTimeoutMidRace(t *testing.T) {
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

// A bulkhead with MaxWait: the hedged attempt queues, is admitted when the
// slot frees, and releases it once.
func TestHedgedReviewWaitingBulkhead(t *testing.T) {
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

// A panic in the first attempt while a hedge runs: the hedge's context is
// cancelled, the panic goes on, the permits are released once.
func TestHedgedReviewFirstPanicCancelsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, nil)
		defer h.Close()
		bh := newBulkhead(t, 1, tick)
		cb := newBreaker(t, tick, nil)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		started := make(chan struct{})
		hedgeCtxDone := make(chan struct{})
		var n atomic.Int32
		require.PanicsWithValue(t, "first", func() {
			_ = p.DoHedged(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					tick.Advance(2 * time.Millisecond)
					<-started
					panic("first")
				}
				close(started)
				<-ctx.Done()
				close(hedgeCtxDone)
				return ctx.Err()
			})
		})
		<-hedgeCtxDone
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	})
}

// A half-open breaker admits one probe; its hedges share it (no second
// probe permit), and the probe's success closes the breaker once.
func TestHedgedReviewHalfOpenProbeShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, nil)
		defer h.Close()
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

func hrAllocPipeline(t *testing.T) *pipeline.Pipeline {
	tick := rampart.NewManualTicker(1)
	h, err := hedge.New(hedge.Config{Delay: time.Hour, Ticker: tick, Tick: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	to := newTimeout(t, tick, time.Hour, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Breaker: newBreaker(t, tick, nil), RateLimit: newRateLimit(t, 1e9, 1_000_000, tick),
		Bulkhead: newBulkhead(t, 10, tick), Timeout: to, Hedge: h, Idempotent: true})
	require.NoError(t, err)
	return p
}

// CallHedged allocates nothing on the no-hedge path with a func value that
// captures nothing, every fail-fast policy and a soft-mode timeout (the
// hedger's context slab is 1/128 of an allocation per call).
func TestHedgedReviewCallHedgedNoHedgePathAllocs(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	p := hrAllocPipeline(t)
	ctx := context.Background()
	fnT := func(context.Context) (int, error) { return 1, nil }
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		_, _ = pipeline.CallHedged(ctx, p, fnT)
		_, _ = pipeline.TryCallHedged(ctx, p, fnT)
	}))
}

// DoHedged and TryHedged, inlined into a caller in another package, make the
// Outcome in their frame escape (the call to the generic runHedged loses the
// escape information, the reason Do and Try are //go:noinline): one heap
// allocation per call even with a func value that captures nothing, which
// the doc does not admit ("one allocation per call for a closure that
// captures variables").
func TestHedgedReviewDoHedgedNoHedgePathAllocs(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under the race detector")
	}
	p := hrAllocPipeline(t)
	ctx := context.Background()
	require.Zero(t, testing.AllocsPerRun(1000, func() { _ = p.DoHedged(ctx, ok) }), "DoHedged")
	require.Zero(t, testing.AllocsPerRun(1000, func() { _ = p.TryHedged(ctx, ok) }), "TryHedged")
}

// runtime.Goexit in the first attempt while a hedge runs: the hedge's
// context is cancelled, the caller's goroutine exits, the permits are
// released once and the breaker records a failure.
func TestHedgedReviewFirstGoexitCancelsHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		h := hrHedger(t, tick, nil)
		defer h.Close()
		bh := newBulkhead(t, 1, tick)
		cb := newBreaker(t, tick, nil)
		p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Hedge: h, Idempotent: true})
		require.NoError(t, err)
		started := make(chan struct{})
		hedgeCtxDone := make(chan struct{})
		exited := make(chan struct{})
		var n atomic.Int32
		go func() {
			defer close(exited)
			_ = p.DoHedged(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					tick.Advance(2 * time.Millisecond)
					<-started
					runtime.Goexit()
				}
				close(started)
				<-ctx.Done()
				close(hedgeCtxDone)
				return ctx.Err()
			})
			t.Error("DoHedged returned after runtime.Goexit")
		}()
		<-exited
		<-hedgeCtxDone
		synctest.Wait()
		require.EqualValues(t, 0, bh.Stats().InFlight)
		require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	})
}
