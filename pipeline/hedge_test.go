package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
)

func newHedger(t testing.TB, tick rampart.Ticker, delay time.Duration) *hedge.Hedger {
	t.Helper()
	h, err := hedge.New(hedge.Config{Name: "hg", Delay: delay, Ticker: tick})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestHedgeRequiresIdempotent(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h := newHedger(t, tick, time.Millisecond)
	_, err := pipeline.New(pipeline.Config{Hedge: h})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	_, err = pipeline.New(pipeline.Config{Hedge: h, Idempotent: true})
	require.NoError(t, err)
	_, err = pipeline.New(pipeline.Config{Hedge: h, Idempotent: true, Ticker: rampart.NewManualTicker(1)})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig, "the hedger must share the pipeline's ticker")
}

func TestHedgedCallWinsAndReleasesOnce(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	h := newHedger(t, tick, time.Millisecond)
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
	h := newHedger(t, tick, time.Millisecond)
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
			tick := newCountingTicker()
			// A watchdog that never sweeps during the test, so that the
			// counting ticker counts the calls' reads only.
			h, err := hedge.New(hedge.Config{Name: "hg", Delay: time.Second, Ticker: tick, Tick: time.Hour})
			require.NoError(t, err)
			t.Cleanup(func() { _ = h.Close() })
			p, err := pipeline.New(c.build(tick, h))
			require.NoError(t, err)
			tick.reads.Store(0) // constructors may read the clock
			for range 10 {
				require.NoError(t, p.DoHedged(ctx, ok))
				_, err := pipeline.CallHedged(ctx, p, func(context.Context) (int, error) { return 1, nil })
				require.NoError(t, err)
			}
			require.Equal(t, 20*c.reads, tick.reads.Load())
			require.Zero(t, h.Stats().Hedges)
		})
	}
}
