package bulkhead

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// waitingBulkhead builds a waiting bulkhead whose ticker lives in the
// current synctest bubble.
func waitingBulkhead(t *testing.T, max int, maxWait time.Duration) *Bulkhead {
	return mustNew(t, Config{Max: max, MaxWait: maxWait, Ticker: rampart.NewNanoTicker()})
}

func TestWaitFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := waitingBulkhead(t, 1, time.Hour)
		require.NoError(t, b.Acquire())
		order := make(chan int, 10)
		for i := range 10 {
			go func() {
				if err := b.AcquireWait(t.Context()); err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				order <- i
				time.Sleep(time.Millisecond)
				b.Release()
			}()
			synctest.Wait() // waiter i is queued before waiter i+1 starts
		}
		require.Equal(t, int64(10), b.Stats().Waiting)
		// A new AcquireWait goes behind the queue even though Release frees a permit.
		b.Release()
		synctest.Wait()
		for i := range 10 {
			require.Equal(t, i, <-order)
			time.Sleep(time.Millisecond)
			synctest.Wait()
		}
		s := b.Stats()
		require.Zero(t, s.InFlight)
		require.Zero(t, s.Waiting)
		require.Equal(t, uint64(10), s.Waited)
		// Waiter i waited i ms: 1 ms for each waiter ahead of it.
		require.Equal(t, 45*time.Millisecond, s.WaitTime)
		require.Zero(t, s.Rejected)
	})
}

// TestWaitMaxWaitExpires: a waiter is refused with the bulkhead's error
// exactly when MaxWait has passed, not before, and counted as timed out.
func TestWaitMaxWaitExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waited []int64
		b := mustNew(t, Config{Max: 1, MaxWait: 50 * time.Millisecond, Ticker: rampart.NewNanoTicker(),
			OnRejected: func(_ int64, w time.Duration) { waited = append(waited, int64(w)) }})
		require.NoError(t, b.Acquire())
		start := time.Now()
		err := b.AcquireWait(t.Context())
		require.Same(t, b.RejectedError(), err)
		require.ErrorIs(t, err, ErrFull)
		require.Equal(t, 50*time.Millisecond, time.Since(start), "refused exactly when MaxWait has passed")
		s := b.Stats()
		require.Equal(t, uint64(1), s.Rejected)
		require.Equal(t, uint64(1), s.TimedOut)
		require.Zero(t, s.Waiting)
		require.Equal(t, 50*time.Millisecond, s.WaitTime)
		require.Equal(t, []int64{int64(50 * time.Millisecond)}, waited)
		b.Release()
		require.Zero(t, b.Stats().InFlight)
	})
}

// TestWaitFIFOSkipsCanceledWaiter: waiters are granted in the order they
// queued, one per Release, and a waiter in the middle whose context ends is
// skipped and counted as canceled.
func TestWaitFIFOSkipsCanceledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Max: 1, MaxWait: time.Hour})
		require.NoError(t, b.Acquire())
		const N = 6
		order := make(chan int, N)
		ctxs := make([]context.CancelFunc, N)
		var wg sync.WaitGroup
		for i := range N {
			ctx, cancel := context.WithCancel(context.Background())
			ctxs[i] = cancel
			wg.Go(func() {
				if err := b.AcquireWait(ctx); err != nil {
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
			b.Release()
			synctest.Wait()
			got = append(got, <-order)
		}
		b.Release()
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

func TestWaitContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := waitingBulkhead(t, 1, time.Duration(math.MaxInt64))
		require.NoError(t, b.Acquire())
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		err := b.AcquireWait(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		// Already done before queueing: refused at once.
		ctx2, cancel2 := context.WithCancel(t.Context())
		cancel2()
		require.ErrorIs(t, b.AcquireWait(ctx2), context.Canceled)

		// Canceled while queued, between two other waiters: they keep their order.
		ctx3, cancel3 := context.WithCancel(t.Context())
		got := make(chan string, 3)
		for _, w := range []struct {
			name string
			ctx  context.Context
		}{{"a", t.Context()}, {"b", ctx3}, {"c", t.Context()}} {
			go func() {
				if err := b.AcquireWait(w.ctx); err != nil {
					got <- w.name + ":" + err.Error()
					return
				}
				got <- w.name
				b.Release()
			}()
			synctest.Wait()
		}
		cancel3()
		synctest.Wait()
		require.Equal(t, "b:context canceled", <-got)
		b.Release()
		synctest.Wait()
		require.Equal(t, "a", <-got)
		require.Equal(t, "c", <-got)
		s := b.Stats()
		require.Equal(t, uint64(3), s.Canceled)
		require.Equal(t, uint64(3), s.Rejected)
		require.Zero(t, s.InFlight)
		require.Zero(t, s.Waiting)
	})
}

// TestWaitGrantCancelRace: the permit is freed at the very instant the
// waiter's deadline passes. Whichever wins, nothing leaks: the permit is
// either used or given back, and the next waiter gets it.
func TestWaitGrantCancelRace(t *testing.T) {
	admitted, refused := 0, 0
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			b := waitingBulkhead(t, 1, time.Hour)
			require.NoError(t, b.Acquire())
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			go func() {
				time.Sleep(10 * time.Millisecond)
				b.Release()
			}()
			// A second waiter queued behind: it must get the permit either way.
			second := make(chan error, 1)
			go func() {
				time.Sleep(time.Millisecond)
				second <- b.AcquireWait(t.Context())
			}()
			err := b.AcquireWait(ctx)
			if err == nil {
				admitted++
				b.Release()
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				refused++
			}
			require.NoError(t, <-second)
			require.Equal(t, int64(1), b.Stats().InFlight)
			b.Release()
			s := b.Stats()
			require.Zero(t, s.InFlight)
			require.Zero(t, s.Waiting)
		})
	}
	t.Logf("admitted %d, refused %d", admitted, refused)
}

func TestWaitResize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := waitingBulkhead(t, 1, time.Hour)
		require.NoError(t, b.Acquire())
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if err := b.AcquireWait(t.Context()); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		require.Equal(t, int64(3), b.Stats().Waiting)
		require.NoError(t, b.SetMax(3)) // grow: two waiters enter at once
		synctest.Wait()
		s := b.Stats()
		require.Equal(t, int64(3), s.InFlight)
		require.Equal(t, int64(1), s.Waiting)
		require.NoError(t, b.SetMax(1)) // shrink: nobody evicted, the waiter stays queued
		b.Release()
		b.Release()
		synctest.Wait()
		require.Equal(t, int64(1), b.Stats().Waiting)
		b.Release() // now 0 in flight: the last waiter enters
		wg.Wait()
		s = b.Stats()
		require.Equal(t, int64(1), s.InFlight)
		require.Zero(t, s.Waiting)
		require.Equal(t, uint64(3), s.Waited)
		b.Release()
	})
}

// TestUpdateGrowsForQueuedAndTimesNewWaits: an Update that grows Max
// grants permits to queued callers at once, and its MaxWait is the wait of
// the calls that queue after it (those already queued keep theirs).
func TestUpdateGrowsForQueuedAndTimesNewWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := waitingBulkhead(t, 1, time.Second)
		require.NoError(t, b.Acquire())
		var wg sync.WaitGroup
		start := time.Now()
		var early, late time.Duration
		wg.Go(func() { // queued before the Update: its wait stays 1 s
			require.ErrorIs(t, b.AcquireWait(t.Context()), ErrFull)
			early = time.Since(start)
		})
		synctest.Wait()
		c := b.Config()
		c.MaxWait = 5 * time.Second
		require.NoError(t, b.Update(c))
		wg.Go(func() { // queued after it: 5 s
			require.ErrorIs(t, b.AcquireWait(t.Context()), ErrFull)
			late = time.Since(start)
		})
		wg.Wait()
		require.Equal(t, time.Second, early)
		require.Equal(t, 5*time.Second, late)

		for range 2 {
			wg.Go(func() {
				if err := b.AcquireWait(t.Context()); err != nil {
					t.Error(err)
				}
			})
		}
		synctest.Wait()
		require.Equal(t, int64(2), b.Stats().Waiting)
		c.Max = 3
		require.NoError(t, b.Update(c)) // both waiters enter at once
		wg.Wait()
		s := b.Stats()
		require.Equal(t, int64(3), s.InFlight)
		require.Zero(t, s.Waiting)
		for range 3 {
			b.Release()
		}
	})
}

// TestWaitDoReleases: Do in waiting mode releases on panic and hands the
// permit to the next waiter.
func TestWaitDoReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var admitted []int64
		b := mustNew(t, Config{Max: 1, MaxWait: time.Second, Ticker: rampart.NewNanoTicker(),
			OnWaitAdmit: func(w time.Duration) { admitted = append(admitted, int64(w)) }})
		boom := errors.New("boom")
		done := make(chan error, 1)
		go testkit.Run(func() {
			_ = b.Do(t.Context(), func(context.Context) error {
				time.Sleep(20 * time.Millisecond)
				panic(boom)
			})
		})
		synctest.Wait()
		go func() {
			done <- b.Do(t.Context(), func(context.Context) error { return boom })
		}()
		require.Same(t, boom, <-done)
		require.Equal(t, []int64{int64(20 * time.Millisecond)}, admitted)
		require.Zero(t, b.Stats().InFlight)
	})
}

// TestWaitHugeMaxWaitEndsWithContext: a MaxWait just below "forever" (which
// arms a real timer) and exactly math.MaxInt64 (no timer) both wait until
// the context ends and account for it as a cancellation.
func TestWaitHugeMaxWaitEndsWithContext(t *testing.T) {
	for _, mw := range []time.Duration{math.MaxInt64 - 1, math.MaxInt64} {
		synctest.Test(t, func(t *testing.T) {
			b := mustNew(t, Config{Max: 1, MaxWait: mw})
			require.NoError(t, b.Acquire())
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			err := b.AcquireWait(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			st := b.Stats()
			require.Equal(t, uint64(1), st.Canceled)
			require.Equal(t, uint64(0), st.TimedOut)
			require.Equal(t, uint64(1), st.Rejected)
			require.Equal(t, int64(0), st.Waiting)
			require.Equal(t, int64(1), st.InFlight)
			b.Release()
		})
	}
}

// TestWaitDoneContextRefusedBehindQueue: a caller with a context already
// done that finds others queued is refused with ctx.Err() and counted as
// canceled, without queueing; one that finds a free permit and nobody
// queued is admitted (documented).
func TestWaitDoneContextRefusedBehindQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Max: 1, MaxWait: time.Second})
		done, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, b.AcquireWait(done)) // free permit, empty queue: admitted
		errc := make(chan error, 1)
		go func() { errc <- b.AcquireWait(context.Background()) }()
		synctest.Wait()
		require.ErrorIs(t, b.AcquireWait(done), context.Canceled)
		st := b.Stats()
		require.Equal(t, uint64(1), st.Canceled)
		require.Equal(t, int64(1), st.Waiting)
		b.Release()
		require.NoError(t, <-errc)
		b.Release()
		require.Equal(t, int64(0), b.Stats().InFlight)
	})
}

// TestWaitAdmitListenerGoexitReleasesPermit: a call that queued and was
// granted a permit calls OnWaitAdmit before AcquireWait returns, then reads the
// Ticker to measure the wait. A listener that ends its goroutine with
// runtime.Goexit (t.FailNow in a listener, say), or a Ticker that panics on
// that read, ends the caller's call without running fn, and the granted
// permit is given back: Do releases it on every path, Goexit included.
func TestWaitAdmitListenerGoexitReleasesPermit(t *testing.T) {
	for _, tc := range []string{"goexit-listener", "panicking-ticker"} {
		t.Run(tc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tk := &testkit.PanicTicker{}
				cfg := Config{Max: 1, MaxWait: time.Second, Ticker: tk}
				if tc == "goexit-listener" {
					cfg.Ticker = rampart.NewNanoTicker()
					cfg.OnWaitAdmit = func(time.Duration) { testkit.Goexit() }
				}
				b := mustNew(t, cfg)
				require.NoError(t, b.Acquire())
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
				tk.Arm()    // only the read after the grant remains
				b.Release() // hands the permit to the waiter
				end := <-done
				if tc == "goexit-listener" {
					require.True(t, end.goexited, "the listener's Goexit did not end the caller's goroutine")
				} else {
					require.Equal(t, testkit.PanicTickerValue, end.panicked, "the ticker's panic did not reach the caller")
				}
				require.False(t, ran)
				require.Equal(t, int64(0), b.Stats().InFlight, "the granted permit was never given back")
				require.NoError(t, b.Acquire(), "the bulkhead stays full for ever")
				b.Release()
			})
		})
	}
}
