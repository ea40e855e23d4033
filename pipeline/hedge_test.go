package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
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
