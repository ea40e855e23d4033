package timeout

// The panic and runtime.Goexit paths of Do, Call and DoAbandon: in fn, in
// onDone, in the listeners, in the ticker. Whichever way a call ends, its
// watch is disarmed, its context is done, onDone runs exactly once (the
// caller's bulkhead permit goes back there), its outcome is counted and
// its worker slot is kept.

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// abandonHung starts, on its own goroutine, a DoAbandon call whose fn
// blocks until release is closed, and waits (synctest) until it has been
// abandoned at its deadline.
func abandonHung(t *testing.T, tm *Timeout, release <-chan struct{}) {
	t.Helper()
	before := tm.Stats().AbandonedTotal
	go tm.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
	time.Sleep(tm.Duration() + 2*time.Millisecond)
	synctest.Wait()
	if tm.Stats().AbandonedTotal != before+1 {
		t.Fatalf("the call was not abandoned: %+v", tm.Stats())
	}
}

// TestPanicAndGoexitRelease: a panic in fn reaches Do's and Call's caller,
// a Goexit in fn ends Do's caller; either way the watch is disarmed and the
// context fn kept is cancelled.
func TestPanicAndGoexitRelease(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	wd := watchdog.New(watchdog.Config{Clock: tk, Manual: true})
	defer wd.Close()
	tm, err := New(Config{Duration: 100, Watchdog: wd})
	require.NoError(t, err)
	var kept context.Context
	require.PanicsWithValue(t, "boom", func() {
		tm.Do(context.Background(), func(c context.Context) error { kept = c; panic("boom") })
	})
	require.Equal(t, 0, wd.Stats().Armed)
	require.Equal(t, context.Canceled, kept.Err())
	require.PanicsWithValue(t, "boom2", func() {
		Call(context.Background(), tm, func(c context.Context) (int, error) { panic("boom2") })
	})
	require.Equal(t, 0, wd.Stats().Armed)
	_, goexited := testkit.Run(func() {
		tm.Do(context.Background(), func(c context.Context) error { kept = c; testkit.Goexit(); return nil })
	})
	require.True(t, goexited, "Do returned after its fn called runtime.Goexit")
	require.Equal(t, 0, wd.Stats().Armed)
	require.Equal(t, context.Canceled, kept.Err())
}

// TestDoTimeoutListenerGoexitReleases: a Goexit in OnTimeout on the
// deadline path of Do ends the caller; the watch and the context were
// settled before the listener ran, so nothing is left armed, the context
// stays done and the timeout is counted.
func TestDoTimeoutListenerGoexitReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker()
		wd := NewWatchdog(time.Millisecond, tk)
		defer wd.Close()
		tm, err := New(Config{Duration: 10 * time.Millisecond, Watchdog: wd,
			OnTimeout: func(time.Duration) { testkit.Goexit() }})
		require.NoError(t, err)
		var kept context.Context
		_, goexited := testkit.Run(func() {
			tm.Do(context.Background(), func(c context.Context) error { kept = c; <-c.Done(); return nil })
		})
		require.True(t, goexited, "Do returned after a Goexit in OnTimeout")
		require.Zero(t, wd.Stats().Armed, "watches still armed")
		require.ErrorIs(t, kept.Err(), context.DeadlineExceeded)
		require.Equal(t, uint64(1), tm.Stats().Timeouts)
	})
}

// TestAbandonPanicAndGoexit: a panic in DoAbandon's fn reaches the caller
// and a Goexit there ends the caller; either way onDone runs once and
// nothing stays abandoned.
func TestAbandonPanicAndGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour})
		var released atomic.Int32
		require.PanicsWithValue(t, "boom", func() {
			tm.DoAbandon(t.Context(), func(context.Context) error { panic("boom") }, func() { released.Add(1) })
		})
		require.Equal(t, int32(1), released.Load())
		_, goexited := testkit.Run(func() {
			tm.DoAbandon(t.Context(), func(context.Context) error { testkit.Goexit(); return nil }, func() { released.Add(1) })
		})
		require.True(t, goexited, "the caller survived the callee's Goexit")
		require.Equal(t, int32(2), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
	})
}

// TestWorkersPanicAndGoexit: a worker survives a panic in fn (re-raised on
// the waiting caller) and is reused; a Goexit ends its goroutine, and the
// slot gets a new one.
func TestWorkersPanicAndGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour, Workers: 1})
		fn := func(context.Context) error { return nil }
		require.NoError(t, tm.DoAbandon(t.Context(), fn, nil))
		synctest.Wait()
		base := bubbleGoroutines()
		require.PanicsWithValue(t, "boom", func() {
			tm.DoAbandon(t.Context(), func(context.Context) error { panic("boom") }, nil)
		})
		synctest.Wait()
		require.Equal(t, base, bubbleGoroutines(), "the worker survived the panic")
		require.NoError(t, tm.DoAbandon(t.Context(), fn, nil))
		require.Equal(t, int64(1), tm.Stats().Workers)
		_, goexited := testkit.Run(func() {
			tm.DoAbandon(t.Context(), func(context.Context) error { testkit.Goexit(); return nil }, nil)
		})
		require.True(t, goexited, "the caller survived the callee's Goexit")
		synctest.Wait()
		require.Equal(t, base-1, bubbleGoroutines(), "the worker ended with its Goexit")
		require.Equal(t, int64(0), tm.Stats().Workers)
		require.NoError(t, tm.DoAbandon(t.Context(), fn, nil))
		synctest.Wait()
		require.Equal(t, base, bubbleGoroutines(), "the slot got a new goroutine")
		require.Equal(t, int64(1), tm.Stats().Workers)
	})
}

// TestRejectedListenerGoexitOrPanicRunsOnDone: a call rejected because
// MaxAbandoned calls are abandoned runs onDone exactly once (the caller's
// bulkhead permit goes back "at once when the call is rejected"), whether
// OnRejected calls runtime.Goexit (which then ends the caller) or panics
// (recovered and counted: the caller gets the rejection).
func TestRejectedListenerGoexitOrPanicRunsOnDone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		listener func(int64)
	}{
		{"goexit", func(int64) { testkit.Goexit() }},
		{"panic", func(int64) { panic("listener") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := newT(t, Config{Duration: time.Second, MaxAbandoned: 1, OnRejected: tc.listener})
				release := make(chan struct{})
				abandonHung(t, tm, release)
				var released atomic.Int32
				var err error
				p, goexited := testkit.Run(func() {
					err = tm.DoAbandon(context.Background(), func(context.Context) error { return nil }, func() { released.Add(1) })
				})
				require.Nil(t, p, "the listener's panic reached the caller")
				require.Equal(t, int32(1), released.Load(), "onDone runs once for a rejected call")
				if tc.name == "goexit" {
					require.True(t, goexited, "DoAbandon returned after a Goexit in OnRejected")
				} else {
					require.False(t, goexited)
					require.ErrorIs(t, err, ErrTooManyAbandoned)
					require.ErrorIs(t, err, rampart.ErrRejected)
					s := tm.Stats()
					require.Equal(t, uint64(1), s.ListenerPanics, "stats %+v", s)
					require.Equal(t, uint64(1), s.Rejected, "stats %+v", s)
				}
				close(release)
				synctest.Wait()
			})
		})
	}
}

// TestTimeoutListenerGoexitInCollectRunsOnDone: a call that overran but
// could not abandon fn (MaxAbandoned reached: the bound is strict, it
// waits for fn) is classified when its fn has been collected, where
// OnTimeout runs before the job is recycled and before onDone. A Goexit in
// OnTimeout there still runs onDone (the caller's permit) once, and keeps
// the worker slot: Close stops every worker.
func TestTimeoutListenerGoexitInCollectRunsOnDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var timeouts atomic.Int32
		tm := newT(t, Config{Duration: time.Second, MaxAbandoned: 1,
			OnTimeout: func(time.Duration) {
				if timeouts.Add(1) == 2 {
					testkit.Goexit()
				}
			}})
		release := make(chan struct{})
		go tm.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		time.Sleep(500 * time.Millisecond)
		// The second call's deadline comes after the first one was
		// abandoned: it cannot abandon and waits for its fn, which returns
		// as soon as its context is done.
		var released atomic.Int32
		_, goexited := testkit.Run(func() {
			tm.DoAbandon(context.Background(), func(c context.Context) error { <-c.Done(); return c.Err() }, func() { released.Add(1) })
		})
		require.True(t, goexited, "DoAbandon returned after a Goexit in OnTimeout")
		require.Equal(t, int32(1), released.Load(), "onDone runs once after a Goexit in OnTimeout")
		require.Equal(t, int32(2), timeouts.Load(), "OnTimeout calls")
		close(release)
		synctest.Wait()
		tm.Close() // must stop every worker, or the bubble reports them blocked
		synctest.Wait()
		require.Zero(t, tm.Stats().Workers, "workers alive after Close")
	})
}

// TestTickerPanicAtDoAbandonStartRunsOnDone: a ticker that panics at the
// start of DoAbandon (before fn starts) panics through to the caller, and
// onDone still runs exactly once: the doc promises it, and the caller took
// a permit for it.
func TestTickerPanicAtDoAbandonStartRunsOnDone(t *testing.T) {
	tk := &testkit.PanicTicker{Base: rampart.NewManualTicker(0)}
	tm, err := New(Config{Duration: time.Second, Ticker: tk})
	require.NoError(t, err)
	defer tm.Close()
	var released atomic.Int32
	p, _ := testkit.Run(func() {
		tk.Arm()
		defer tk.Disarm()
		tm.DoAbandon(context.Background(), func(context.Context) error { return nil }, func() { released.Add(1) })
	})
	require.Equal(t, testkit.PanicTickerValue, p, "the ticker's panic reaches the caller")
	require.Equal(t, int32(1), released.Load(), "onDone runs once after the ticker panicked")
}

// TestAbandonListenerGoexitKeepsTimeoutCount: a Goexit in OnAbandon ends
// the caller but keeps the call's outcome: the call was abandoned at its
// deadline, so it is a timeout (Stats().Timeouts, and OnTimeout).
func TestAbandonListenerGoexitKeepsTimeoutCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var onTimeout atomic.Int32
		tm := newT(t, Config{Duration: time.Second,
			OnAbandon: func(int64) { testkit.Goexit() },
			OnTimeout: func(time.Duration) { onTimeout.Add(1) }})
		release := make(chan struct{})
		_, goexited := testkit.Run(func() {
			tm.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		})
		require.True(t, goexited, "DoAbandon returned after a Goexit in OnAbandon")
		s := tm.Stats()
		require.Equal(t, uint64(1), s.AbandonedTotal, "abandoned")
		require.Equal(t, uint64(1), s.Timeouts, "timeouts")
		require.Equal(t, int32(1), onTimeout.Load(), "OnTimeout calls")
		close(release)
		synctest.Wait()
	})
}

// TestAbandonedOnDoneGoexitKeepsWorkerSlot: an abandoned fn's onDone runs
// on the worker; a Goexit there ends the worker goroutine, and its slot
// stays in the pool: with Workers: 1 the next call still runs on a pool
// worker, not on a goroutine of its own.
func TestAbandonedOnDoneGoexitKeepsWorkerSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Second, Workers: 1})
		release := make(chan struct{})
		go tm.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, func() { testkit.Goexit() })
		time.Sleep(2 * time.Second)
		close(release)
		synctest.Wait()
		hold := make(chan struct{})
		var workers int64
		go tm.DoAbandon(context.Background(), func(context.Context) error {
			workers = tm.Stats().Workers
			<-hold
			return nil
		}, nil)
		synctest.Wait()
		require.Equal(t, int64(1), workers, "the next call's pool workers (0: the slot was lost)")
		close(hold)
		synctest.Wait()
	})
}
