package circuitbreaker

// The paths on which a callback (fn, Classify, a listener) panics or ends
// its goroutine with runtime.Goexit (a test's t.FailNow / require inside a
// listener): the probe slot is never leaked, the outcome already known is
// kept, and nothing is recorded twice.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestGoexitInStateListenerOnProbeAdmissionReleasesProbe: the caller that
// moves an expired Open breaker to HalfOpen takes the first probe inside
// AcquireAt, then runs OnStateChange(Open, HalfOpen) before AcquireAt returns
// the permit. A listener that calls runtime.Goexit ends the goroutine
// before Do's deferred release is installed (and before a pipeline marks
// the permit held); the probe taken for it is released all the same, so a
// breaker with one probe and no MaxHalfOpenDuration can still probe.
func TestGoexitInStateListenerOnProbeAdmissionReleasesProbe(t *testing.T) {
	exit := true
	b, _ := tripped(t, Config{OnStateChange: func(_, to State) {
		if to == HalfOpen && exit {
			testkit.Goexit()
		}
	}})
	ran := false
	_, goexited := testkit.Run(func() {
		_ = b.Do(context.Background(), func(context.Context) error { ran = true; return nil })
	})
	require.True(t, goexited, "the listener's Goexit ends the caller's goroutine")
	require.False(t, ran)
	exit = false
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State)
	require.Zero(t, s.HalfOpenInFlight, "the probe taken for the goroutine that exited is released")
	require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }),
		"the next caller can probe")
	require.Equal(t, Closed, b.State())
}

// TestGoexitInOutcomeListenerAppliesProbeResult: ReleaseAt applies the probe's
// result to the state word before it calls OnFailure (or OnSuccess), so a
// listener that calls runtime.Goexit cannot leave the probe in flight (the
// primitive caller could not release it: ReleaseAt did not return, and a
// second ReleaseAt would be a double record).
func TestGoexitInOutcomeListenerAppliesProbeResult(t *testing.T) {
	exit := false
	b, tk := tripped(t, Config{OnFailure: func(time.Duration) {
		if exit {
			testkit.Goexit()
		}
	}})
	exit = true
	p, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	_, goexited := testkit.Run(func() { b.ReleaseAt(p, tk.Now(), b.Classify(errBoom)) })
	require.True(t, goexited, "the listener's Goexit ends the recording goroutine")
	exit = false
	require.Equal(t, Open, b.State(), "the failed probe reopens (the result is applied before the listener runs)")
	require.Zero(t, b.Stats().HalfOpenInFlight)
}

// TestDoGoexitInListenerKeepsProbeOutcome: with Do, a Goexit in OnSuccess
// or OnFailure does not lose the probe's known outcome (the breaker closes
// on a success, reopens on a failure, and Stats().Failures counts the
// failure the probe saw), and a Goexit in OnStateChange after the result
// was applied does not make Do record the permit a second time (no
// StaleResults).
func TestDoGoexitInListenerKeepsProbeOutcome(t *testing.T) {
	for _, name := range []string{"OnSuccess", "OnFailure", "OnStateChange"} {
		t.Run(name, func(t *testing.T) {
			exit := false
			l := func(time.Duration) {
				if exit {
					testkit.Goexit()
				}
			}
			cfg := Config{}
			var ret error
			want := Closed
			switch name {
			case "OnSuccess":
				cfg.OnSuccess = l
			case "OnFailure":
				cfg.OnFailure = l
				ret, want = errBoom, Open
			default:
				// The probe's success is applied and closes the breaker;
				// the listener then ends the goroutine inside Do.
				cfg.OnStateChange = func(_, to State) {
					if to == Closed {
						l(0)
					}
				}
			}
			b, _ := tripped(t, cfg)
			exit = true
			failures := b.Stats().Failures
			_, goexited := testkit.Run(func() {
				_ = b.Do(context.Background(), func(context.Context) error { return ret })
			})
			require.True(t, goexited, "the listener's Goexit ends the caller's goroutine")
			exit = false
			s := b.Stats()
			require.Equal(t, want, s.State, "the probe's known outcome decides the half-open period")
			require.Zero(t, s.StaleResults, "recorded once")
			if ret != nil {
				require.Equal(t, failures+1, s.Failures)
			}
		})
	}
}

// TestPanickingListenersReleaseEverything: panics (unlike Goexit) in every
// listener are recovered and counted, and no probe is leaked or recorded
// twice: the Open→HalfOpen notification inside AcquireAt, OnSuccess and
// OnFailure on probes, OnRejected on the Do fast path.
func TestPanickingListenersReleaseEverything(t *testing.T) {
	boom := func() { panic("listener bug") }
	b, tk := tripped(t, Config{
		HalfOpenProbes: 2, HalfOpenSuccesses: 2,
		OnStateChange: func(State, State) { boom() },
		OnSuccess:     func(time.Duration) { boom() },
		OnFailure:     func(time.Duration) { boom() },
		OnRejected:    func(State) { boom() },
	})
	base := b.Stats().ListenerPanics // the trip's OnFailure and OnStateChange
	ctx := context.Background()
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State)
	require.Equal(t, 1, s.HalfOpenSucceeded)
	require.Zero(t, s.HalfOpenInFlight)
	require.Same(t, errBoom, b.Do(ctx, func(context.Context) error { return errBoom }))
	require.Equal(t, Open, b.State())
	require.ErrorIs(t, b.Do(ctx, func(context.Context) error { return nil }), ErrOpen)
	s = b.Stats()
	require.Zero(t, s.StaleResults)
	require.Equal(t, uint64(1), s.Rejected)
	// HalfOpen entry, OnSuccess, OnFailure, HalfOpen→Open, OnRejected.
	require.Equal(t, base+5, s.ListenerPanics)
	tk.Advance(2 * time.Second) // backoff: 2 s
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	require.Equal(t, Closed, b.State())
}

// TestDoReleasesProbeWhenClassifyPanics: a panicking Config.Classify does
// not leak the half-open probe slot (which would keep the breaker
// rejecting in HalfOpen for ever): Do and Call record a failure and
// re-raise.
func TestDoReleasesProbeWhenClassifyPanics(t *testing.T) {
	errOdd := errors.New("odd")
	for _, name := range []string{"Do", "Call"} {
		t.Run(name, func(t *testing.T) {
			b, tk := newTest(t, Config{
				Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1,
				Classify: func(err error) rampart.Result {
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
