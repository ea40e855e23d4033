package circuitbreaker

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMaxHalfOpenDurationCountsFromHalfOpenEntry: the half-open period
// starts when the first caller after the open period moves the breaker to
// HalfOpen, not when the open period ended. A breaker left alone long after
// its open period must not treat its first, just-admitted probe as stuck.
func TestMaxHalfOpenDurationCountsFromHalfOpenEntry(t *testing.T) {
	b, tk := newTest(t, Config{
		Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second,
		HalfOpenProbes: 1, MaxHalfOpenDuration: 5 * time.Second,
	})
	require.NoError(t, call(t, b, tk, 0, errBoom))
	tk.Advance(time.Hour) // nobody calls for an hour after the open period
	probe, err := b.Acquire(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	tk.Advance(time.Millisecond)
	_, err = b.Acquire(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull, "the probe admitted 1 ms ago is not stuck")
	b.Record(probe, tk.Now(), nil)
	require.Equal(t, Closed, b.State(), "the probe's success closes the breaker")
	require.Zero(t, b.Stats().StaleResults)
}

// TestZeroPermitStaleAfterGenerationWrap: the generation wraps after 2^29
// transitions; the documented "the zero Permit is never current" must hold
// after the wrap too (generation 0 is skipped).
func TestZeroPermitStaleAfterGenerationWrap(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1})
	b.state.Store(genMask | uint64(Closed)) // the last generation before the wrap
	require.True(t, b.TransitionTo(Open))
	require.True(t, b.TransitionTo(Closed))
	require.NotZero(t, b.Stats().Generation)
	b.Record(Permit{}, tk.Now(), errBoom)
	require.Equal(t, Closed, b.State(), "a zero Permit must not trip the breaker")
	require.Equal(t, uint64(1), b.Stats().StaleResults)

	// The same through Open → HalfOpen, the transition Acquire makes.
	b.state.Store(genMask | uint64(Open))
	b.openUntil.Store(tk.Now())
	p, err := b.Acquire(tk.Now())
	require.NoError(t, err)
	require.NotZero(t, p.word>>genShift)
}

// TestDoReleasesProbeWhenClassifyPanics: a panicking Config.Classify must
// not leak the half-open probe slot (which would keep the breaker
// rejecting in HalfOpen for ever): Do records a failure and re-raises.
func TestDoReleasesProbeWhenClassifyPanics(t *testing.T) {
	errOdd := errors.New("odd")
	for _, name := range []string{"Do", "Call"} {
		t.Run(name, func(t *testing.T) {
			b, tk := newTest(t, Config{
				Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1,
				Classify: func(err error) Result {
					if err == errOdd {
						panic("classifier bug")
					}
					return DefaultClassify(err)
				},
			})
			require.NoError(t, call(t, b, tk, 0, errBoom))
			tk.Advance(time.Second)
			require.PanicsWithValue(t, "classifier bug", func() {
				if name == "Do" {
					_ = b.Do(context.Background(), func(context.Context) error { return errOdd })
				} else {
					_, _ = Call(context.Background(), b, func(context.Context) (int, error) { return 0, errOdd })
				}
			})
			s := b.Stats()
			require.Zero(t, s.HalfOpenInFlight, "the probe slot was released")
			require.Equal(t, Open, s.State, "recorded as a failure")
		})
	}
}

// TestTimeWindowSnapshotNeverCountsAnotherSlice: while one goroutine keeps
// recycling buckets, a snapshot must never count calls outside its window
// (a bucket read under a new tick but still holding the old slice's
// counts, or counts read after the bucket was recycled). Failures are
// recorded only in half of the slices, so a foreign slice shows up as too
// many failures.
func TestTimeWindowSnapshotNeverCountsAnotherSlice(t *testing.T) {
	w := newTimeWindow(4, 4) // 4 buckets of 1 ns
	const perTick = 3
	var tick atomic.Int64
	var done atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			tk := tick.Load()
			limit := int64(0)
			for x := max(tk-3, 0); x <= tk; x++ {
				if x%8 < 4 {
					limit += perTick
				}
			}
			if _, f, _ := w.snapshot(tk); f > limit {
				bad.Add(1)
			}
		}
	}()
	for tk := int64(0); tk < 300_000; tk++ {
		tick.Store(tk)
		for range perTick {
			w.add(tk, tk%8 < 4, false)
		}
		if tk%1024 == 0 {
			runtime.Gosched()
		}
	}
	done.Store(true)
	wg.Wait()
	require.Zero(t, bad.Load(), "snapshots that counted failures from outside their window")
}
