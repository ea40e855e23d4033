package bulkhead_test

// Review 3 of package bulkhead: reproductions of the bugs found (skipped
// with "BUG: ..." until fixed) and tests of behaviour not covered elsewhere.

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestReview3WaitAdmitListenerGoexitLeaksPermit: a call that queued and was
// granted a permit calls OnWaitAdmit before Enter returns. A listener that
// ends its goroutine with runtime.Goexit (t.FailNow in a listener, say) is
// not stopped by notify's recover, so Enter never returns, Do never reaches
// its deferred Exit, and the permit is held forever. The same happens when
// the user's Ticker panics on the read that measures the wait (after the
// grant). Do documents that the permit is released on every path, Goexit
// included.
func TestReview3WaitAdmitListenerGoexitLeaksPermit(t *testing.T) {
	for _, tc := range []string{"goexit-listener", "panicking-ticker"} {
		t.Run(tc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tk := &testkit.PanicTicker{}
				cfg := bulkhead.Config{Max: 1, MaxWait: time.Second, Ticker: tk}
				if tc == "goexit-listener" {
					cfg.Ticker = rampart.NewNanoTicker()
					cfg.OnWaitAdmit = func(int64) { testkit.Goexit() }
				}
				b, err := bulkhead.New(cfg)
				require.NoError(t, err)
				require.True(t, b.TryEnter())
				ran := false
				type ending struct {
					panicked any
					goexited bool
				}
				done := make(chan ending, 1)
				go func() {
					p, g := testkit.Run(func() {
						_ = b.Do(context.Background(), func(context.Context) error { ran = true; return nil })
					})
					done <- ending{p, g}
				}()
				synctest.Wait()
				require.Equal(t, int64(1), b.Stats().Waiting)
				tk.Arm() // only the read after the grant remains
				b.Exit() // hands the permit to the waiter
				end := <-done
				if tc == "goexit-listener" {
					require.True(t, end.goexited, "the listener's Goexit did not end the caller's goroutine")
				} else {
					require.Equal(t, testkit.PanicTickerValue, end.panicked, "the ticker's panic did not reach the caller")
				}
				require.False(t, ran)
				require.Equal(t, int64(0), b.Stats().InFlight, "the granted permit was never given back")
				require.True(t, b.TryEnter(), "the bulkhead stays full for ever")
				b.Exit()
			})
		})
	}
}

// TestReview3HugeMaxWait: a MaxWait just below "forever" (which arms a
// real timer) and exactly math.MaxInt64 (no timer) both wait until the
// context ends and account for it as a cancellation.
func TestReview3HugeMaxWait(t *testing.T) {
	for _, mw := range []time.Duration{math.MaxInt64 - 1, math.MaxInt64} {
		synctest.Test(t, func(t *testing.T) {
			b, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: mw})
			require.NoError(t, err)
			require.True(t, b.TryEnter())
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			err = b.Enter(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			st := b.Stats()
			require.Equal(t, uint64(1), st.Canceled)
			require.Equal(t, uint64(0), st.TimedOut)
			require.Equal(t, uint64(1), st.Rejected)
			require.Equal(t, int64(0), st.Waiting)
			require.Equal(t, int64(1), st.InFlight)
			b.Exit()
		})
	}
}

// TestReview3EnterDoneContextBehindQueue: a caller with a context already
// done that finds others queued is refused with ctx.Err() and counted as
// canceled, without queueing; one that finds a free permit and nobody
// queued is admitted (documented).
func TestReview3EnterDoneContextBehindQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Second})
		require.NoError(t, err)
		done, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, b.Enter(done)) // free permit, empty queue: admitted
		errc := make(chan error, 1)
		go func() { errc <- b.Enter(context.Background()) }()
		synctest.Wait()
		require.ErrorIs(t, b.Enter(done), context.Canceled)
		st := b.Stats()
		require.Equal(t, uint64(1), st.Canceled)
		require.Equal(t, int64(1), st.Waiting)
		b.Exit()
		require.NoError(t, <-errc)
		b.Exit()
		require.Equal(t, int64(0), b.Stats().InFlight)
	})
}

// TestReview3StressSetMaxWhileWaiting: limits that move while callers
// queue, give up and run. The real concurrency never exceeds the largest
// Max ever set, every waiter ends admitted or refused with the right error,
// and nothing is left in flight or queued.
func TestReview3StressSetMaxWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Max: 2, MaxWait: 3 * time.Millisecond})
		require.NoError(t, err)
		const maxEver = 5
		var running, peak atomic.Int64
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 200 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g+i)%4)*time.Millisecond)
					err := b.Do(ctx, func(context.Context) error {
						n := running.Add(1)
						for {
							p := peak.Load()
							if n <= p || peak.CompareAndSwap(p, n) {
								break
							}
						}
						time.Sleep(time.Duration(1+(g*7+i)%3) * time.Millisecond)
						running.Add(-1)
						return nil
					})
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
		wg.Go(func() {
			for i := range 400 {
				if err := b.SetMax(1 + i%maxEver); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		st := b.Stats()
		require.LessOrEqual(t, peak.Load(), int64(maxEver))
		require.LessOrEqual(t, st.PeakInFlight, int64(maxEver))
		require.Equal(t, int64(16*200), admitted.Load()+refused.Load())
		require.Equal(t, uint64(refused.Load()), st.Rejected)
		require.Equal(t, st.Rejected, st.TimedOut+st.Canceled)
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.Waiting)
		require.Positive(t, admitted.Load())
		require.Positive(t, refused.Load())
	})
}
