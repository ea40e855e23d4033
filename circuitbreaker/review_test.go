package circuitbreaker

import (
	"context"
	"errors"
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
