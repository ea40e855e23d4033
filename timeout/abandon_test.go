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
	"github.com/rampart-go/rampart/internal/israce"
)

func TestAbandonReturnsAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var abandonedN []int64
		tm := newT(t, Config{Duration: 10 * time.Millisecond, Mode: ModeAbandon,
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
		tm := newT(t, Config{Duration: 10 * time.Millisecond, Mode: ModeAbandon})
		boom := errors.New("boom")
		var released atomic.Int32
		onDone := func() { released.Add(1) }
		require.NoError(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, onDone))
		require.Equal(t, int32(1), released.Load(), "onDone runs before returning when fn ended")
		require.Same(t, boom, tm.Do(t.Context(), func(context.Context) error { return boom }))
		v, err := Call(t.Context(), tm, func(context.Context) (string, error) { return "x", nil })
		require.NoError(t, err)
		require.Equal(t, "x", v)
		// A callee that honours the context: not abandoned, but timed out.
		err = tm.DoAbandon(t.Context(), func(c context.Context) error { <-c.Done(); return c.Err() }, onDone)
		require.ErrorIs(t, err, ErrTimeout)
		synctest.Wait()
		require.Equal(t, int32(2), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
		// Call's value of an abandoned call is lost.
		release := make(chan struct{})
		v, err = Call(t.Context(), tm, func(context.Context) (string, error) { <-release; return "late", nil })
		require.ErrorIs(t, err, ErrTimeout)
		require.Equal(t, "", v)
		close(release)
		synctest.Wait()
	})
}

func TestAbandonParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour, Mode: ModeAbandon})
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
		tm := newT(t, Config{Duration: 10 * time.Millisecond, Mode: ModeAbandon, MaxAbandoned: 3, Name: "dep",
			OnRejected: func(n int64) { rejectedN = append(rejectedN, n) }})
		hang := make(chan struct{})
		var released atomic.Int32
		onDone := func() { released.Add(1) }
		require.NoError(t, tm.Do(t.Context(), func(context.Context) error { return nil })) // starts the watchdog
		synctest.Wait()
		base := bubbleGoroutines()
		for range 3 {
			require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-hang; return nil }, onDone), ErrTimeout)
		}
		require.Equal(t, base+3, bubbleGoroutines())
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
		require.Equal(t, base, bubbleGoroutines())
		require.NoError(t, tm.Do(t.Context(), func(context.Context) error { return nil }))
	})
}

// TestAbandonBoundStrict: calls in flight when the bound fills up wait for
// their function instead of abandoning it.
func TestAbandonBoundStrict(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond, Mode: ModeAbandon, MaxAbandoned: 2})
		hang := make(chan struct{})
		var wg sync.WaitGroup
		var maxSeen atomic.Int64
		var returned atomic.Int32
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := tm.Do(context.Background(), func(context.Context) error { <-hang; return nil })
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

func TestAbandonPanicAndGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour, Mode: ModeAbandon})
		var released atomic.Int32
		require.PanicsWithValue(t, "boom", func() {
			tm.DoAbandon(t.Context(), func(context.Context) error { panic("boom") }, func() { released.Add(1) })
		})
		require.Equal(t, int32(1), released.Load())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tm.DoAbandon(t.Context(), func(context.Context) error { runtime.Goexit(); return nil }, func() { released.Add(1) })
			t.Error("the caller survived the callee's Goexit")
		}()
		<-done
		require.Equal(t, int32(2), released.Load())
		require.Equal(t, int64(0), tm.Stats().Abandoned)
	})
}

// TestAbandonStress races deadlines, parent cancellations and returns.
func TestAbandonStress(t *testing.T) {
	wd := NewWatchdog(50*time.Microsecond, nil)
	defer wd.Close()
	tm, err := New(Config{Duration: 100 * time.Microsecond, Mode: ModeAbandon, Watchdog: wd, MaxAbandoned: 16})
	require.NoError(t, err)
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
	require.Equal(t, started.Load(), ended.Load(), "onDone ran exactly once per call")
	require.Equal(t, 0, wd.Stats().Armed)
}

func TestAllocsAbandon(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	tm := newT(t, Config{Duration: time.Hour, Mode: ModeAbandon})
	fn := func(context.Context) error { return nil }
	tm.Do(context.Background(), fn)
	n := testing.AllocsPerRun(1000, func() { tm.Do(context.Background(), fn) })
	require.Equal(t, 2.0, n, "abandon mode: the context and the goroutine's closure")
}
