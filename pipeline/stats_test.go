package pipeline_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/percpu"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// statsRig is a pipeline with every admission policy and CountStats, on
// a manual clock, with the means to make each policy reject.
type statsRig struct {
	tick *rampart.ManualTicker
	bud  *testkit.Budget
	shed *shedRig
	p    *pipeline.Pipeline
	cfg  pipeline.Config
}

func newStatsRig(t *testing.T, count bool) *statsRig {
	t.Helper()
	r := &statsRig{tick: rampart.NewManualTicker(1_000_000)}
	r.bud = &testkit.Budget{} // allows until SetAllow(false)
	r.shed = newShed(t, r.tick, nil)
	r.cfg = pipeline.Config{
		Retry: newRetry(t, r.tick, func(c *retry.Config) {
			c.MaxAttempts, c.Budget = 2, r.bud
			c.ShouldRetry = func(err error) bool { return errors.Is(err, errBoom) }
		}),
		Breaker:    newBreaker(t, r.tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 100 }),
		RateLimit:  newRateLimit(t, 1e9, 1000, r.tick),
		Bulkhead:   newBulkhead(t, 1, r.tick),
		Adaptive:   newAdaptive(t, r.tick, 1),
		Shed:       r.shed.sh,
		Timeout:    newTimeout(t, r.tick, time.Second, timeout.ModeSoft),
		CountStats: count,
	}
	var err error
	r.p, err = pipeline.New(r.cfg)
	require.NoError(t, err)
	return r
}

var errOther = errors.New("not retried")

// run makes one call of every ending, each policy's rejection included, and
// returns the Stats they should give.
func (r *statsRig) run(t *testing.T) pipeline.Stats {
	t.Helper()
	ctx := context.Background()
	var want pipeline.Stats
	end := func(o pipeline.Outcome, code pipeline.Code, kind pipeline.Kind) {
		t.Helper()
		require.Equal(t, code, o.Code, "%+v", o)
		require.Equal(t, kind, o.Policy, "%+v", o)
		want.Calls++
		want.Attempts += uint64(o.Attempts)
		switch code {
		case pipeline.OK:
			want.Succeeded++
		case pipeline.Failed:
			want.Failed++
		case pipeline.TimedOut:
			want.TimedOut++
		case pipeline.Canceled:
			want.Canceled++
		case pipeline.Rejected:
			want.Rejected++
			want.RejectedBy[kind]++
		}
	}
	end(r.p.Try(ctx, ok), pipeline.OK, pipeline.None)
	_, err := pipeline.Call(ctx, r.p, func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	end(pipeline.Outcome{Attempts: 1}, pipeline.OK, pipeline.None)
	end(r.p.Try(ctx, func(context.Context) error { return errOther }), pipeline.Failed, pipeline.None)
	end(r.p.Try(ctx, fail), pipeline.Failed, pipeline.Retry) // retried once, then given up: 2 attempts (the retry decided the ending)
	end(r.p.Try(ctx, func(context.Context) error { r.tick.Advance(2 * time.Second); return nil }), pipeline.TimedOut, pipeline.Timeout)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	end(r.p.Try(cctx, ok), pipeline.Canceled, pipeline.None)
	panicked, _ := testkit.Run(func() { r.p.Try(ctx, func(context.Context) error { panic("boom") }) })
	require.NotNil(t, panicked)
	want.Panicked++

	r.bud.SetAllow(false)
	end(r.p.Try(ctx, fail), pipeline.Rejected, pipeline.Retry)
	r.bud.SetAllow(true)
	require.True(t, r.cfg.Breaker.TransitionTo(circuitbreaker.Open))
	end(r.p.Try(ctx, ok), pipeline.Rejected, pipeline.Breaker)
	require.True(t, r.cfg.Breaker.TransitionTo(circuitbreaker.Closed))
	tokens := r.cfg.RateLimit.TokensAt(r.tick.Now())
	require.True(t, r.cfg.RateLimit.AllowN(r.tick.Now(), int(tokens)))
	end(r.p.Try(ctx, ok), pipeline.Rejected, pipeline.RateLimit)
	r.tick.Advance(time.Second)
	require.NoError(t, r.cfg.Bulkhead.Acquire())
	end(r.p.Try(ctx, ok), pipeline.Rejected, pipeline.Bulkhead)
	r.cfg.Bulkhead.Release()
	ap, err := r.cfg.Adaptive.Acquire()
	require.NoError(t, err)
	end(r.p.Try(ctx, ok), pipeline.Rejected, pipeline.Adaptive)
	r.cfg.Adaptive.Release(ap, rampart.Ignored)
	r.shed.engage(t)
	sp := r.shed.fill(t)
	end(r.p.Try(ctx, ok), pipeline.Rejected, pipeline.Shed)
	r.shed.drain(sp)
	r.tick.Advance(time.Second)
	r.shed.release(t)
	return want
}

// TestStatsCountEveryEnding: with CountStats, Stats counts each call by
// its Code and, for a rejection, by the rejecting policy's Kind (every kind
// that rejects), with its attempts and the calls that panicked, through
// every entry point; without it, Stats stays zero.
func TestStatsCountEveryEnding(t *testing.T) {
	r := newStatsRig(t, true)
	want := r.run(t)
	require.Equal(t, want, r.p.Stats())
	require.EqualValues(t, 12, want.Calls)
	require.EqualValues(t, 6, want.Rejected)
	require.True(t, r.p.Config().CountStats)

	off := newStatsRig(t, false)
	off.run(t)
	require.Equal(t, pipeline.Stats{}, off.p.Stats())
	require.False(t, off.p.Config().CountStats)
}

// TestStatsFallbackAnswers: a fallback on a counting pipeline counts its
// answers by the ending it answered, its stale answers and the endings it
// met with an expired value; the pipeline counts the same calls by how they
// ended before the answer. On a pipeline that does not count, both stay
// zero.
func TestStatsFallbackAnswers(t *testing.T) {
	for _, count := range []bool{true, false} {
		r := newStatsRig(t, count)
		fb, err := pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: r.p, Value: new(7), Stale: true, MaxAge: time.Minute,
			When: pipeline.DefaultEndings | pipeline.Failures, Failed: func(err error) bool { return errors.Is(err, errOther) }})
		require.NoError(t, err)
		dfb, err := pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: r.p,
			Func: func(context.Context, pipeline.Outcome) error { return nil }})
		require.NoError(t, err)
		ctx := context.Background()
		okT := func(context.Context) (int, error) { return 1, nil }
		failT := func(context.Context) (int, error) { return 0, errOther }

		_, o := fb.Try(ctx, failT) // no good value yet: the Value
		require.True(t, o.FellBack && !o.Stale)
		_, err = fb.Call(ctx, okT)
		require.NoError(t, err)
		_, o = fb.Try(ctx, failT) // the stale value
		require.True(t, o.Stale)
		require.NoError(t, r.cfg.Bulkhead.Acquire())
		_, o = fb.Try(ctx, okT) // a bulkhead rejection, stale
		require.True(t, o.Stale)
		require.NoError(t, dfb.Do(ctx, ok)) // a rejection answered by the DoFallback
		r.cfg.Bulkhead.Release()
		r.tick.Advance(2 * time.Minute)
		_, o = fb.Try(ctx, func(context.Context) (int, error) { r.tick.Advance(2 * time.Second); return 0, nil }) // a timeout, expired value
		require.True(t, o.FellBack && !o.Stale)
		require.Equal(t, pipeline.TimedOut, o.Code)

		want, dwant := pipeline.FallbackStats{}, pipeline.FallbackStats{}
		if count {
			want = pipeline.FallbackStats{Answered: 4, AnsweredFailed: 2, AnsweredTimedOut: 1, StaleServed: 2, StaleExpired: 1}
			want.AnsweredRejected[pipeline.Bulkhead] = 1
			dwant.Answered = 1
			dwant.AnsweredRejected[pipeline.Bulkhead] = 1
		}
		require.Equal(t, want, fb.Stats(), "count=%v", count)
		require.Equal(t, dwant, dfb.Stats(), "count=%v", count)
		ps := r.p.Stats()
		if count {
			require.EqualValues(t, 6, ps.Calls)
			require.EqualValues(t, 2, ps.RejectedBy[pipeline.Bulkhead])
			require.EqualValues(t, 2, ps.Failed)
			require.EqualValues(t, 1, ps.TimedOut)
		} else {
			require.Equal(t, pipeline.Stats{}, ps)
		}
	}
}

// TestStressStatsSumExactly: calls from many goroutines, each P adding to
// its own stripe, sum exactly.
func TestStressStatsSumExactly(t *testing.T) {
	p, err := pipeline.New(pipeline.Config{Bulkhead: newBulkhead(t, 1000, rampart.NewManualTicker(1)), CountStats: true})
	require.NoError(t, err)
	const goroutines, calls = 8, 2000
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				if (g+i)%3 == 0 {
					_ = p.Do(ctx, fail)
				} else {
					_ = p.Do(ctx, ok)
				}
			}
		})
	}
	stop := make(chan struct{})
	var reads sync.WaitGroup
	reads.Go(func() { // Stats while the calls run: no race, no tear
		for {
			select {
			case <-stop:
				return
			default:
				s := p.Stats()
				if s.Calls > goroutines*calls {
					t.Errorf("Calls %d above the calls made", s.Calls)
				}
			}
		}
	})
	wg.Wait()
	close(stop)
	reads.Wait()
	var failed uint64
	for g := range goroutines {
		for i := range calls {
			if (g+i)%3 == 0 {
				failed++
			}
		}
	}
	s := p.Stats()
	require.EqualValues(t, goroutines*calls, s.Calls)
	require.EqualValues(t, goroutines*calls, s.Attempts)
	require.Equal(t, failed, s.Failed)
	require.Equal(t, goroutines*calls-failed, s.Succeeded)
}

// TestAllocsCountStats: counting allocates nothing per call, on and off,
// for a success and a rejection.
func TestAllocsCountStats(t *testing.T) {
	for _, count := range []bool{false, true} {
		tick := rampart.NewManualTicker(1)
		bh := newBulkhead(t, 1, tick)
		p, err := pipeline.New(pipeline.Config{Breaker: newBreaker(t, tick, nil), Bulkhead: bh, CountStats: count})
		require.NoError(t, err)
		ctx := context.Background()
		testkit.WantAllocs(t, "success", 0, func() {
			if p.Do(ctx, ok) != nil {
				t.Fatal("not admitted")
			}
		})
		testkit.WantAllocs(t, "success, TryCall", 0, func() {
			if _, o := pipeline.TryCall(ctx, p, func(context.Context) (int, error) { return 1, nil }); o.Code != pipeline.OK {
				t.Fatal("not admitted")
			}
		})
		require.NoError(t, bh.Acquire())
		testkit.WantAllocs(t, "rejection", 0, func() {
			if p.Try(ctx, ok).Policy != pipeline.Bulkhead {
				t.Fatal("not rejected")
			}
		})
		bh.Release()
		testkit.WantAllocs(t, "Stats", 0, func() { _ = p.Stats() })
	}
}

// TestCountStatsBytes: a Pipeline is 160 B (its size class) with
// CountStats off; on, New adds the per-P counters and nothing else.
func TestCountStatsBytes(t *testing.T) {
	if ptrSize := 32 << (^uintptr(0) >> 63); ptrSize != 64 {
		t.Skip("sizes are for 64-bit")
	}
	bh := newBulkhead(t, 1, rampart.NewManualTicker(1))
	mk := func(count bool) func() any {
		return func() any {
			p, err := pipeline.New(pipeline.Config{Bulkhead: bh, CountStats: count})
			if err != nil {
				panic(err)
			}
			return p
		}
	}
	testkit.WantBytes(t, "off", 160, mk(false))
	counters := testkit.Bytes(t, func() any { return percpu.New() })
	testkit.WantBytes(t, "on", 160+counters, mk(true))
	n := max(runtime.GOMAXPROCS(0), runtime.NumCPU())
	t.Logf("CountStats adds %d B on %d Ps", counters, n)
	if n == 2 && pad.LineSize == 64 {
		// The figure the docs give: two stripes and the overflow stripe
		// of 128 B, a line for the alignment (448 B, a size class), the
		// 32-byte Counters.
		require.EqualValues(t, 480, counters)
	}
}

// TestStatsSharedWithDerivedPipelines: a pipeline built from another's
// Config with CountStats still set counts into the other's counters (an
// adapter's derived pipelines add to the application's Stats); one built
// from a fresh Config counts alone, and one derived with CountStats
// cleared counts nothing.
func TestStatsSharedWithDerivedPipelines(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	p, err := pipeline.New(pipeline.Config{Retry: newRetry(t, tick, nil), Bulkhead: newBulkhead(t, 2, tick), CountStats: true})
	require.NoError(t, err)
	cfg := p.Config()
	cfg.Retry = nil
	d, err := pipeline.New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, p.Do(ctx, ok))
	require.ErrorIs(t, d.Do(ctx, fail), errBoom)
	want := pipeline.Stats{Calls: 2, Succeeded: 1, Failed: 1, Attempts: 2}
	require.Equal(t, want, p.Stats())
	require.Equal(t, want, d.Stats())

	fresh, err := pipeline.New(pipeline.Config{Bulkhead: cfg.Bulkhead, CountStats: true})
	require.NoError(t, err)
	require.NoError(t, fresh.Do(ctx, ok))
	require.EqualValues(t, 1, fresh.Stats().Calls)
	require.Equal(t, want, p.Stats())

	cfg.CountStats = false
	off, err := pipeline.New(cfg)
	require.NoError(t, err)
	require.NoError(t, off.Do(ctx, ok))
	require.Equal(t, pipeline.Stats{}, off.Stats())
	require.Equal(t, want, p.Stats())
}

// TestStatsCountEveryCallPastTheStripes: a counting pipeline built before
// GOMAXPROCS is raised past max(GOMAXPROCS, NumCPU) (its per-P stripes)
// still counts every call exactly: the Ps past the stripes add into their
// own overflow stripe, never into another P's.
func TestStatsCountEveryCallPastTheStripes(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	p, err := pipeline.New(pipeline.Config{CountStats: true})
	require.NoError(t, err)
	runtime.GOMAXPROCS(4 * max(prev, runtime.NumCPU()))
	const goroutines = 32
	calls, rounds := 50000, 5
	if israce.Enabled {
		calls, rounds = 2000, 2 // every add is atomic there: the sums check the overflow stripe is read
	}
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range calls {
					_ = p.Do(context.Background(), ok)
				}
			})
		}
		wg.Wait()
		want := uint64(round * goroutines * calls)
		s := p.Stats()
		require.Equal(t, pipeline.Stats{Calls: want, Succeeded: want, Attempts: want}, s, "round %d", round)
	}
}
