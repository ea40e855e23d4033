package timeout

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

func TestAbandonReturnsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var abandonedN []int64
		tm := newT(t, Config{Duration: 10 * time.Millisecond,
			OnAbandon: func(n int64) { abandonedN = append(abandonedN, n) }})
		release := make(chan struct{})
		var released atomic.Int32
		fnCtx := make(chan context.Context, 1)
		start := time.Now()
		err := tm.DoAbandon(t.Context(), func(c context.Context) error {
			fnCtx <- c
			<-release // ignores its context
			return nil
		}, func() { released.Add(1) })
		require.Same(t, tm.Err(), err)
		require.LessOrEqual(t, time.Since(start), 11*time.Millisecond)
		require.Equal(t, int32(0), released.Load(), "permit released while the work still runs")
		st := tm.Stats()
		require.Equal(t, int64(1), st.Abandoned)
		require.Equal(t, uint64(1), st.AbandonedTotal)
		require.Equal(t, uint64(1), st.Timeouts)
		require.Equal(t, []int64{1}, abandonedN)
		close(release)
		synctest.Wait()
		require.Equal(t, int32(1), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
		require.Equal(t, context.DeadlineExceeded, (<-fnCtx).Err(), "the abandoned work's context is done")
	})
}

func TestAbandonFastPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		boom := errors.New("boom")
		var released atomic.Int32
		onDone := func() { released.Add(1) }
		require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, onDone))
		require.Equal(t, int32(1), released.Load(), "onDone runs before returning when fn ended")
		require.Same(t, boom, tm.DoAbandon(t.Context(), func(context.Context) error { return boom }, nil))
		v, err := CallAbandon(t.Context(), tm, func(context.Context) (string, error) { return "x", nil }, nil)
		require.NoError(t, err)
		require.Equal(t, "x", v)
		// A callee that honours the context: not abandoned, but timed out.
		err = tm.DoAbandon(t.Context(), func(c context.Context) error { <-c.Done(); return c.Err() }, onDone)
		require.ErrorIs(t, err, ErrTimeout)
		synctest.Wait()
		require.Equal(t, int32(2), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
		// CallAbandon's value of an abandoned call is lost; its onDone
		// runs once the abandoned fn has ended.
		release := make(chan struct{})
		v, err = CallAbandon(t.Context(), tm, func(context.Context) (string, error) { <-release; return "late", nil }, onDone)
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, "", v)
		require.Equal(t, int32(2), released.Load(), "onDone ran while the abandoned fn still runs")
		close(release)
		synctest.Wait()
		require.Equal(t, int32(3), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
	})
}

func TestAbandonParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour})
		parent, cancel := context.WithCancel(t.Context())
		release := make(chan struct{})
		var released atomic.Int32
		fnCtx := make(chan context.Context, 1)
		go func() {
			time.Sleep(5 * time.Millisecond)
			cancel()
		}()
		err := tm.DoAbandon(parent, func(c context.Context) error {
			fnCtx <- c
			<-release
			return nil
		}, func() { released.Add(1) })
		require.Equal(t, context.Canceled, err)
		require.Equal(t, int64(1), tm.Stats().Abandoned)
		require.Equal(t, uint64(0), tm.Stats().Timeouts)
		require.Equal(t, context.Canceled, (<-fnCtx).Err())
		close(release)
		synctest.Wait()
		require.Equal(t, int32(1), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
	})
}

// TestAbandonBounded: a hung dependency cannot grow the abandoned
// goroutines beyond MaxAbandoned; further calls are rejected at once.
func TestAbandonBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rejectedN []int64
		tm := newT(t, Config{Duration: 10 * time.Millisecond, MaxAbandoned: 3, Name: "dep",
			OnRejected: func(n int64) { rejectedN = append(rejectedN, n) }})
		hang := make(chan struct{})
		var released atomic.Int32
		onDone := func() { released.Add(1) }
		require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, nil)) // starts the watchdog and a worker
		synctest.Wait()
		require.Equal(t, int64(1), tm.Stats().Workers, "the worker is parked for the next call")
		base := bubbleGoroutines() - 1 // without the idle worker
		for range 3 {
			require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-hang; return nil }, onDone), ErrTimeout)
		}
		require.Equal(t, base+3, bubbleGoroutines(), "the first abandoned call reused the idle worker")
		require.Equal(t, int64(3), tm.Stats().Workers)
		started := false
		err := tm.DoAbandon(t.Context(), func(context.Context) error { started = true; return nil }, onDone)
		require.ErrorIs(t, err, ErrTooManyAbandoned)
		require.ErrorIs(t, err, rampart.ErrRejected)
		require.Contains(t, err.Error(), `"dep"`)
		require.False(t, started)
		require.Equal(t, int32(1), released.Load(), "onDone runs for a rejected call")
		require.Equal(t, []int64{3}, rejectedN)
		require.Equal(t, uint64(1), tm.Stats().Rejected)
		require.Equal(t, base+3, bubbleGoroutines())
		close(hang)
		synctest.Wait()
		require.Equal(t, int32(4), released.Load())
		require.Equal(t, base+3, bubbleGoroutines(), "the workers of the ended calls are parked")
		require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, nil))
		synctest.Wait()
		require.Equal(t, base+3, bubbleGoroutines(), "and reused")
		// Idle workers exit after one to two idle periods.
		time.Sleep(2*workerIdle + time.Millisecond)
		synctest.Wait()
		require.Equal(t, int64(0), tm.Stats().Workers)
		require.Equal(t, base-1, bubbleGoroutines(), "the workers and the idle watchdog exited")
		require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, nil))
		require.Equal(t, int64(1), tm.Stats().Workers, "a call after the idle exit starts a worker again")
	})
}

// TestAbandonBoundStrict: calls in flight when the bound fills up wait for
// their function instead of abandoning it.
func TestAbandonBoundStrict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond, MaxAbandoned: 2})
		hang := make(chan struct{})
		var wg sync.WaitGroup
		var maxSeen atomic.Int64
		var returned atomic.Int32
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := tm.DoAbandon(context.Background(), func(context.Context) error { <-hang; return nil }, nil)
				require.ErrorIs(t, err, ErrTimeout)
				returned.Add(1)
			}()
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if n := tm.Stats().Abandoned; n > maxSeen.Load() {
			maxSeen.Store(n)
		}
		require.Equal(t, int64(2), maxSeen.Load())
		require.Equal(t, int32(2), returned.Load(), "only the abandoned callers returned")
		close(hang)
		wg.Wait()
		synctest.Wait()
		require.Equal(t, int64(0), tm.Stats().Abandoned)
	})
}

// TestAbandonSoftMode: DoAbandon works whatever the Timeout's Mode: a
// soft-mode Timeout (which has no watchdog of its own) runs an in-time call
// without panicking, and abandons a hung fn exactly at its deadline (a
// runtime timer stands in for the watchdog); the abandoned fn is counted
// out when it returns.
func TestAbandonSoftMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm, err := New(Config{Duration: time.Second, Mode: ModeSoft, Ticker: rampart.NewNanoTicker()})
		require.NoError(t, err)
		defer tm.Close() // before the bubble ends: the pool's idle worker
		ran := false
		require.NoError(t, tm.DoAbandon(context.Background(), func(context.Context) error { ran = true; return nil }, nil))
		require.True(t, ran)
		release := make(chan struct{})
		start := time.Now()
		err = tm.DoAbandon(context.Background(), func(ctx context.Context) error {
			<-release
			return ctx.Err()
		}, nil)
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, time.Second, time.Since(start), "abandoned at the deadline")
		close(release)
		synctest.Wait()
		require.Zero(t, tm.Stats().Abandoned, "still abandoned")
	})
}

// TestAbandonBoundUnderConcurrency: concurrent DoAbandon calls against a
// hung dependency: never more than MaxAbandoned abandoned at once (seen
// from inside OnAbandon), onDone runs exactly once per call, the pool
// never exceeds Workers, and the counters agree at the end. Run under
// -race.
func TestAbandonBoundUnderConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxAb = 3
		var maxSeen atomic.Int64
		tm := newT(t, Config{Duration: 5 * time.Millisecond, MaxAbandoned: maxAb, Workers: 2,
			OnAbandon: func(n int64) {
				for {
					m := maxSeen.Load()
					if n <= m || maxSeen.CompareAndSwap(m, n) {
						break
					}
				}
			}})
		hang := make(chan struct{})
		var onDone, calls atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				time.Sleep(time.Duration(i%4) * time.Millisecond)
				calls.Add(1)
				err := tm.DoAbandon(context.Background(), func(context.Context) error {
					if i%2 == 0 {
						<-hang
					}
					return nil
				}, func() { onDone.Add(1) })
				if err != nil && !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrTooManyAbandoned) {
					t.Errorf("err %v", err)
				}
			})
		}
		// The even calls that were not abandoned wait for their fn (strict
		// bound) until hang closes.
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		require.LessOrEqual(t, tm.Stats().Abandoned, int64(maxAb), "abandoned at once")
		close(hang)
		wg.Wait()
		synctest.Wait()
		s := tm.Stats()
		require.LessOrEqual(t, maxSeen.Load(), int64(maxAb), "most abandoned seen by OnAbandon")
		require.Zero(t, s.Abandoned, "stats %+v", s)
		require.Equal(t, calls.Load(), onDone.Load(), "onDone runs once per call")
		require.LessOrEqual(t, s.Workers, int64(2), "pool workers > Workers")
	})
}

// TestAbandonStress races deadlines, parent cancellations and returns.
func TestAbandonStress(t *testing.T) {
	wd := NewWatchdog(50*time.Microsecond, nil)
	defer wd.Close()
	// Few workers (calls beyond them start goroutines of their own) and a
	// short idle period, so that the reaper runs amid the calls.
	defer func(d time.Duration) { workerIdle = d }(workerIdle)
	workerIdle = 200 * time.Microsecond
	tm, err := New(Config{Duration: 100 * time.Microsecond, Watchdog: wd, MaxAbandoned: 16, Workers: 4})
	require.NoError(t, err)
	defer tm.Close()
	var started, ended atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				parent, cancel := context.WithCancel(context.Background())
				if i%5 == 0 {
					cancel()
				}
				err := tm.DoAbandon(parent, func(c context.Context) error {
					switch (g + i) % 3 {
					case 0:
						<-c.Done()
					case 1:
						time.Sleep(time.Duration(i%4) * 50 * time.Microsecond)
					}
					return nil
				}, func() { ended.Add(1) })
				started.Add(1)
				if err != nil && !errors.Is(err, ErrTimeout) && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrTooManyAbandoned) {
					t.Errorf("unexpected %v", err)
				}
				if n := tm.Stats().Abandoned; n > 16 {
					t.Errorf("abandoned %d > 16", n)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	for tm.Stats().Abandoned > 0 {
		runtime.Gosched()
	}
	// Every abandoned function has returned; its onDone runs just after the
	// count drops (the slot is freed first), so give the last ones their
	// turn, boundedly: a lost onDone fails here instead of hanging.
	for spins := 0; ended.Load() < started.Load() && spins < 1_000_000; spins++ {
		runtime.Gosched()
	}
	require.Equal(t, started.Load(), ended.Load(), "onDone ran exactly once per call")
	require.Equal(t, 0, wd.Stats().Armed)
	require.LessOrEqual(t, tm.Stats().Workers, int64(4))
}

func TestAllocsAbandon(t *testing.T) {
	tm := newT(t, Config{Duration: time.Hour})
	fn := func(context.Context) error { return nil }
	tm.DoAbandon(context.Background(), fn, nil)
	testkit.WantAllocs(t, "DoAbandon: the context (the worker and its job are reused)", 1, func() {
		tm.DoAbandon(context.Background(), fn, nil)
	})
	// A call that finds every worker busy starts a goroutine (its closure)
	// with a pooled job: two.
	t1 := newT(t, Config{Duration: time.Hour, Workers: 1})
	hang := make(chan struct{})
	done := make(chan struct{})
	go func() {
		t1.DoAbandon(context.Background(), func(context.Context) error { <-hang; return nil }, nil)
		close(done)
	}()
	defer func() { close(hang); <-done }()
	for t1.Stats().Workers != 1 {
		runtime.Gosched()
	}
	t1.DoAbandon(context.Background(), fn, nil)
	testkit.WantAllocs(t, "DoAbandon, every worker busy: the context and the goroutine's closure", 2, func() {
		t1.DoAbandon(context.Background(), fn, nil)
	})
}

// TestWorkersReused: sequential calls hand their function to the same
// parked worker; no goroutine is started per call.
func TestWorkersReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour})
		fn := func(context.Context) error { return nil }
		require.NoError(t, tm.DoAbandon(t.Context(), fn, nil))
		synctest.Wait()
		base := bubbleGoroutines()
		var gids []uint64
		for range 20 {
			require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { gids = append(gids, goid()); return nil }, nil))
			require.Equal(t, base, bubbleGoroutines())
		}
		for _, g := range gids {
			require.Equal(t, gids[0], g, "every call ran on the same worker")
		}
		require.Equal(t, int64(1), tm.Stats().Workers)
	})
}

// goid returns the calling goroutine's id (test only), from its stack
// header "goroutine N [...".
func goid() uint64 {
	var buf [32]byte
	b := buf[:runtime.Stack(buf[:], false)]
	var id uint64
	for _, c := range b[len("goroutine "):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}

// TestWorkersAbandonedSlotNotReused: a worker whose function was abandoned
// is handed no other call until that function returned and its onDone ran;
// meanwhile calls use another worker, or a goroutine of their own when
// every worker is busy.
func TestWorkersAbandonedSlotNotReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond, Workers: 1})
		hang := make(chan struct{})
		var order []string
		keptCh := make(chan context.Context, 1)
		abandonedGid := make(chan uint64, 1)
		err := tm.DoAbandon(t.Context(), func(c context.Context) error {
			keptCh <- c
			abandonedGid <- goid()
			<-hang
			order = append(order, "abandoned fn returns")
			return nil
		}, func() { order = append(order, "abandoned onDone") })
		require.ErrorIs(t, err, ErrTimeout)
		kept := <-keptCh
		require.Equal(t, int64(1), tm.Stats().Workers)
		// The only slot is busy: this call runs on a goroutine of its own.
		require.NoError(t, tm.DoAbandon(t.Context(), func(c context.Context) error {
			require.NotSame(t, kept, c)
			require.NoError(t, c.Err())
			return nil
		}, nil))
		synctest.Wait()
		require.Equal(t, int64(1), tm.Stats().Workers)
		require.Equal(t, context.DeadlineExceeded, kept.Err(), "the abandoned call's context stays done")
		close(hang)
		synctest.Wait()
		require.Equal(t, []string{"abandoned fn returns", "abandoned onDone"}, order)
		// Now the slot is idle and reused; the abandoned context is untouched.
		var reusedGid uint64
		require.NoError(t, tm.DoAbandon(t.Context(), func(c context.Context) error {
			reusedGid = goid()
			require.NoError(t, c.Err())
			return nil
		}, nil))
		require.Equal(t, <-abandonedGid, reusedGid, "the worker of the abandoned call, reused")
		require.Equal(t, context.DeadlineExceeded, kept.Err())
		require.Equal(t, int64(1), tm.Stats().Workers)
	})
}

// TestWorkersBound: the pool never holds more than Workers goroutines;
// calls beyond it start goroutines of their own, which exit with their
// call.
func TestWorkersBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour, Workers: 2})
		hang := make(chan struct{})
		var wg sync.WaitGroup
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-hang; return nil }, nil))
			}()
		}
		synctest.Wait()
		require.Equal(t, int64(2), tm.Stats().Workers)
		close(hang)
		wg.Wait()
		synctest.Wait()
		require.Equal(t, int64(2), tm.Stats().Workers)
	})
}

// TestWorkersClose: Close stops the idle workers at once and waits for
// them; a worker busy with an abandoned call exits when the call ends; calls
// after Close still work (a goroutine each).
func TestWorkersClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		fn := func(context.Context) error { return nil }
		var wg sync.WaitGroup
		for range 3 { // three idle workers
			wg.Add(1)
			go func() { defer wg.Done(); require.NoError(t, tm.DoAbandon(t.Context(), fn, nil)) }()
		}
		wg.Wait()
		synctest.Wait()
		hang := make(chan struct{})
		require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-hang; return nil }, nil), ErrTimeout)
		n := tm.Stats().Workers
		require.GreaterOrEqual(t, n, int64(1))
		synctest.Wait()                         // the count is exact once every goroutine is blocked
		base := bubbleGoroutines() - int(n) - 1 // without the workers and the watchdog
		require.NoError(t, tm.Close())          // stops its own watchdog too
		require.Equal(t, int64(1), tm.Stats().Workers, "only the busy worker is left")
		synctest.Wait() // the drained workers have confirmed; let their goroutines end
		require.Equal(t, base+1, bubbleGoroutines())
		require.NoError(t, tm.Close()) // idempotent
		close(hang)
		synctest.Wait()
		require.Equal(t, int64(0), tm.Stats().Workers, "the busy worker exits when its call ends")
		require.Equal(t, base, bubbleGoroutines())
		require.NoError(t, tm.DoAbandon(t.Context(), fn, nil))
		synctest.Wait()
		require.Equal(t, base, bubbleGoroutines(), "after Close a call's goroutine exits with it")
		require.Equal(t, int64(0), tm.Stats().Workers)

		// Close before any DoAbandon: calls still work, on goroutines of
		// their own.
		t2 := newT(t, Config{Duration: time.Hour})
		require.NoError(t, t2.Close())
		require.NoError(t, t2.DoAbandon(t.Context(), fn, nil))
		synctest.Wait()
		require.Equal(t, int64(0), t2.Stats().Workers)
	})
}

// TestWorkersCloseCountsOut: when Close returns, the idle workers it
// drained are no longer counted in Stats().Workers (each counts itself out
// before it confirms to Close).
func TestWorkersCloseCountsOut(t *testing.T) {
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			tm := newT(t, Config{Duration: time.Hour, Workers: 8})
			fn := func(context.Context) error { return nil }
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() { defer wg.Done(); require.NoError(t, tm.DoAbandon(t.Context(), fn, nil)) }()
			}
			wg.Wait()
			synctest.Wait()
			require.NoError(t, tm.Close())
			require.Equal(t, int64(0), tm.Stats().Workers)
		})
	}
}

// TestWorkersIdleExitRealTime: without synctest and without Close, idle
// workers exit by themselves (a dropped Timeout leaks no goroutine).
func TestWorkersIdleExitRealTime(t *testing.T) {
	defer func(d time.Duration) { workerIdle = d }(workerIdle)
	workerIdle = time.Millisecond
	tm, err := New(Config{Duration: time.Hour, Tick: time.Millisecond})
	require.NoError(t, err)
	defer tm.Close() // its own watchdog only
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tm.DoAbandon(context.Background(), func(context.Context) error { return nil }, nil)
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, tm.Stats().Workers, int64(1))
	require.Eventually(t, func() bool { return tm.Stats().Workers == 0 }, 5*time.Second, time.Millisecond)
}
