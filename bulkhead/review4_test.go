package bulkhead_test

// Review 4 of package bulkhead: the waiting queue (FIFO, MaxWait,
// cancellation racing a grant). No bug found; these guard the behaviour.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart/bulkhead"
)

// TestReview4FIFOGrantOrder: waiters are granted in the order they queued,
// one per Exit, and a timed-out waiter in the middle is skipped.
func TestReview4FIFOGrantOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour})
		require.NoError(t, err)
		require.True(t, b.TryEnter())
		const N = 6
		order := make(chan int, N)
		ctxs := make([]context.CancelFunc, N)
		var wg sync.WaitGroup
		for i := range N {
			ctx, cancel := context.WithCancel(context.Background())
			ctxs[i] = cancel
			wg.Go(func() {
				if err := b.Enter(ctx); err != nil {
					require.ErrorIs(t, err, context.Canceled)
					return
				}
				order <- i
			})
			synctest.Wait() // queued in this order
		}
		require.Equal(t, int64(N), b.Stats().Waiting)
		ctxs[2]() // the third gives up
		synctest.Wait()
		require.Equal(t, int64(N-1), b.Stats().Waiting)
		var got []int
		for range N - 1 {
			b.Exit()
			synctest.Wait()
			got = append(got, <-order)
		}
		b.Exit()
		wg.Wait()
		require.Equal(t, []int{0, 1, 3, 4, 5}, got)
		st := b.Stats()
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.Waiting)
		require.Equal(t, uint64(N-1), st.Waited)
		require.Equal(t, uint64(1), st.Canceled)
		require.Equal(t, uint64(1), st.Rejected)
		for _, c := range ctxs {
			c()
		}
	})
}

// TestReview4MaxWaitExpiresOnTime: a waiter is refused with the bulkhead's
// error exactly when MaxWait has passed, not before.
func TestReview4MaxWaitExpiresOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: 10 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, b.TryEnter())
		start := time.Now()
		err = b.Enter(context.Background())
		require.ErrorIs(t, err, bulkhead.ErrFull)
		require.Equal(t, 10*time.Millisecond, time.Since(start))
		st := b.Stats()
		require.Equal(t, uint64(1), st.TimedOut)
		require.Equal(t, int64(0), st.Waiting)
		b.Exit()
		require.Equal(t, int64(0), b.Stats().InFlight)
	})
}

// TestReview4CancelRacingGrantStress: many waiters whose contexts end at
// the very instants permits are freed (same synctest instant), with
// fail-fast TryEnter callers mixed in. Afterwards: nothing in flight or
// queued, the real concurrency never exceeded Max, every attempt is either
// admitted or refused exactly once, and the counters add up.
func TestReview4CancelRacingGrantStress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const Max, G, N = 3, 12, 150
		b, err := bulkhead.New(bulkhead.Config{Max: Max, MaxWait: 2 * time.Millisecond})
		require.NoError(t, err)
		var running, peak, admitted, refused, tryAdmitted, tryRefused atomic.Int64
		body := func() {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
		}
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				for i := range N {
					if (g+i)%5 == 0 {
						if b.TryEnter() {
							tryAdmitted.Add(1)
							body()
							b.Exit()
						} else {
							tryRefused.Add(1)
						}
						continue
					}
					// Deadlines at 1 ms: the instant the running calls exit.
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%2)*time.Millisecond)
					err := b.Do(ctx, func(context.Context) error { body(); return nil })
					cancel()
					switch {
					case err == nil:
						admitted.Add(1)
					case errors.Is(err, bulkhead.ErrFull), errors.Is(err, context.DeadlineExceeded):
						refused.Add(1)
					default:
						t.Errorf("unexpected error %v", err)
					}
				}
			})
		}
		wg.Wait()
		st := b.Stats()
		require.LessOrEqual(t, peak.Load(), int64(Max))
		require.LessOrEqual(t, st.PeakInFlight, int64(Max))
		require.Equal(t, int64(G*N), admitted.Load()+refused.Load()+tryAdmitted.Load()+tryRefused.Load())
		require.Equal(t, uint64(refused.Load()+tryRefused.Load()), st.Rejected)
		require.Equal(t, uint64(refused.Load()), st.TimedOut+st.Canceled)
		require.LessOrEqual(t, st.Waited, uint64(admitted.Load()))
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.Waiting)
		require.True(t, b.TryEnter(), "a permit leaked")
		b.Exit()
	})
}
