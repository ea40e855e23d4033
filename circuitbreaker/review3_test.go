package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// r3Goexit runs f on its own goroutine and waits for it to end (by
// runtime.Goexit in a listener, typically).
func r3Goexit(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// r3Tripped returns a consecutive breaker with one probe, tripped at 0 and
// whose open period (1 s) is over.
func r3Tripped(t *testing.T, cfg Config) (*Breaker, *rampart.ManualTicker) {
	t.Helper()
	cfg.Mode, cfg.ConsecutiveFailures, cfg.OpenDuration = Consecutive, 1, time.Second
	if cfg.HalfOpenProbes == 0 {
		cfg.HalfOpenProbes = 1
	}
	b, tk := newTest(t, cfg)
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, Open, b.State())
	tk.Advance(time.Second)
	return b, tk
}

// TestReview3GoexitInStateListenerOnProbeAdmission: the caller that moves an
// expired Open breaker to HalfOpen takes the first probe inside Acquire,
// then runs OnStateChange(Open, HalfOpen) before Acquire returns the permit.
// A listener that calls runtime.Goexit (a test's t.FailNow / require) ends
// the goroutine with the probe taken and nobody holding its permit: Do's
// deferred release is not installed yet (and a pipeline marks the permit
// held only after Acquire returns). With one probe and no
// MaxHalfOpenDuration the breaker then rejects in HalfOpen for ever.
func TestReview3GoexitInStateListenerOnProbeAdmission(t *testing.T) {
	exit := true
	b, _ := r3Tripped(t, Config{OnStateChange: func(_, to State) {
		if to == HalfOpen && exit {
			runtime.Goexit()
		}
	}})
	ran := false
	r3Goexit(func() {
		_ = b.Do(context.Background(), func(context.Context) error { ran = true; return nil })
	})
	require.False(t, ran)
	exit = false
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State)
	require.Zero(t, s.HalfOpenInFlight, "the probe taken for the goroutine that exited is released")
	require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }),
		"the next caller can probe")
	require.Equal(t, Closed, b.State())
}

// TestReview3GoexitInOutcomeListenerLeaksProbe: Record calls OnFailure
// (and OnSuccess) before it applies the probe's result to the state word.
// A listener that calls runtime.Goexit leaves the probe in flight for ever:
// the primitive caller cannot release it (Record did not return, and a
// second Record would be a double record).
func TestReview3GoexitInOutcomeListenerLeaksProbe(t *testing.T) {
	exit := false
	b, tk := r3Tripped(t, Config{OnFailure: func(time.Duration) {
		if exit {
			runtime.Goexit()
		}
	}})
	exit = true
	p, err := b.Acquire(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	r3Goexit(func() { b.Record(p, tk.Now(), errBoom) })
	exit = false
	require.Equal(t, Open, b.State(), "the failed probe reopens (the result is applied before the listener runs)")
	require.Zero(t, b.Stats().HalfOpenInFlight)
}

// TestReview3GoexitInOutcomeListenerLosesResultInDo: with Do, the same
// Goexit in OnSuccess is caught by Do's deferred release, which records the
// probe as Ignored: a success that was already known is lost (the breaker
// stays half-open instead of closing), and Stats().Failures has counted a
// failure that the window/probe never saw when it is OnFailure. A Goexit in
// OnStateChange after the result was applied makes Do record the permit a
// second time (as Ignored: a spurious StaleResults).
func TestReview3GoexitInOutcomeListenerLosesResultInDo(t *testing.T) {
	for _, name := range []string{"OnSuccess", "OnFailure", "OnStateChange"} {
		t.Run(name, func(t *testing.T) {
			exit := false
			l := func(time.Duration) {
				if exit {
					runtime.Goexit()
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
				// Goexit in the listener then makes Do record the permit a
				// second time (as Ignored, counted stale).
				cfg.OnStateChange = func(_, to State) {
					if to == Closed {
						l(0)
					}
				}
			}
			b, _ := r3Tripped(t, cfg)
			exit = true
			failures := b.Stats().Failures
			r3Goexit(func() {
				_ = b.Do(context.Background(), func(context.Context) error { return ret })
			})
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

// TestReview3TimeWindowNegativeReadings: a Ticker reads from an arbitrary
// epoch (NewManualTicker takes any start), so readings may be negative. The
// time window's tick is now/res, which truncates toward zero: readings in
// (-res, res) share tick 0, a bucket twice as wide, and a failure recorded
// at -0.9 s is still in the window 10.4 s later with a 10 s TimeWindow,
// where it trips the breaker.
func TestReview3TimeWindowNegativeReadings(t *testing.T) {
	tk := rampart.NewManualTicker(int64(-900 * time.Millisecond))
	b, err := New(Config{
		Ticker: tk, Mode: TimeWindow, TimeWindow: 10 * time.Second, Buckets: 10, MinimumCalls: 10,
	})
	require.NoError(t, err)
	for range 9 {
		require.NoError(t, call(t, b, tk, 0, errBoom))
	}
	require.Equal(t, Closed, b.State(), "9 calls: under MinimumCalls")
	tk.Advance(10*time.Second + 400*time.Millisecond) // 9.5 s: the failures are 10.4 s old
	require.NoError(t, call(t, b, tk, 0, nil))
	s := b.Stats()
	require.Equal(t, int64(1), s.WindowCalls, "only the last call is within 10 s")
	require.Equal(t, Closed, s.State)
}

// TestReview3PanickingListenersReleaseEverything: panics (unlike Goexit) in
// every listener are recovered and counted, and no probe is leaked or
// recorded twice: the Open→HalfOpen notification inside Acquire, OnSuccess
// and OnFailure on probes, OnRejected on the Do fast path.
func TestReview3PanickingListenersReleaseEverything(t *testing.T) {
	boom := func() { panic("listener bug") }
	b, tk := r3Tripped(t, Config{
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
	require.Equal(t, uint64(1), s.Rejections)
	// HalfOpen entry, OnSuccess, OnFailure, HalfOpen→Open, OnRejected.
	require.Equal(t, base+5, s.ListenerPanics)
	tk.Advance(2 * time.Second) // backoff: 2 s
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	require.Equal(t, Closed, b.State())
}

// TestReview3ExtremeDurations: OpenDuration, MaxOpenDuration and the
// readings at the ends of int64 (legal values) neither panic nor produce a
// negative RemainingOpen, and the backoff saturates instead of wrapping.
func TestReview3ExtremeDurations(t *testing.T) {
	for _, start := range []int64{0, math.MaxInt64 - int64(time.Hour), math.MinInt64 + 1} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			tk := rampart.NewManualTicker(start)
			b, err := New(Config{
				Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1, HalfOpenProbes: 1,
				OpenDuration: time.Second, MaxOpenDuration: math.MaxInt64, OpenBackoffFactor: 1e300, OpenJitter: 0.5,
				MaxHalfOpenDuration: math.MaxInt64,
			})
			require.NoError(t, err)
			require.NoError(t, call(t, b, tk, 0, errBoom))
			require.Equal(t, Open, b.State())
			d := b.RemainingOpen(tk.Now())
			require.Greater(t, d, time.Duration(0))
			require.LessOrEqual(t, d, time.Second)
			tk.Advance(d)
			require.NoError(t, call(t, b, tk, 0, errBoom), "the probe")
			require.Equal(t, Open, b.State())
			// 1 s × 1e300 saturates at MaxOpenDuration (jitter halves it at most).
			d = b.RemainingOpen(tk.Now())
			require.GreaterOrEqual(t, d, time.Duration(0))
			if start <= 0 {
				require.Greater(t, d, time.Duration(math.MaxInt64/2-1))
			}
			_ = b.Stats()
			_, err = b.Acquire(tk.Now())
			require.ErrorIs(t, err, ErrOpen)
			b.TransitionTo(HalfOpen)
			_, err = b.Acquire(tk.Now())
			require.NoError(t, err)
			_, err = b.Acquire(tk.Now())
			require.ErrorIs(t, err, ErrHalfOpenFull, "MaxHalfOpenDuration MaxInt64 never expires")
		})
	}
	// A saturated open period (OpenDuration MaxInt64) rejects until the end of time.
	tk := rampart.NewManualTicker(math.MaxInt64 - 10)
	b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: math.MaxInt64})
	require.NoError(t, err)
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, time.Duration(10), b.RemainingOpen(tk.Now()))
	_, err = b.Acquire(tk.Now())
	require.ErrorIs(t, err, ErrOpen)
}

// TestReview3NoTimeNeverCountedOrTransitions: a call made without the time
// (math.MinInt64) never moves an Open breaker to HalfOpen, is not counted
// or notified when rejected, and a closed permit taken so is never judged
// slow even with a slow-call threshold.
func TestReview3NoTimeNeverCountedOrTransitions(t *testing.T) {
	rejected := 0
	b, tk := r3Tripped(t, Config{OnRejected: func(State) { rejected++ }})
	tk.Advance(time.Hour)
	_, err := b.Acquire(math.MinInt64)
	require.ErrorIs(t, err, ErrOpen)
	require.Equal(t, Open, b.State())
	require.Zero(t, b.Stats().Rejections)
	require.Zero(t, rejected)

	b2, tk2 := newTest(t, Config{WindowSize: 2, MinimumCalls: 2, SlowCallDuration: time.Nanosecond})
	for range 2 {
		p, err := b2.Acquire(math.MinInt64)
		require.NoError(t, err)
		tk2.Advance(time.Second)
		b2.Record(p, tk2.Now(), nil)
	}
	require.Equal(t, Closed, b2.State())
	require.Zero(t, b2.Stats().SlowCalls)
}

// TestReview3UserErrorUnchanged: Do and Call return fn's error itself,
// whatever its classification (failure, ignored, success by Classify), and
// a classification of Ignored records nothing in a closed window.
func TestReview3UserErrorUnchanged(t *testing.T) {
	errOK := errors.New("fine")
	wrapped := fmt.Errorf("ctx: %w", context.Canceled)
	b, _ := newTest(t, Config{WindowSize: 4, MinimumCalls: 4, Classify: func(err error) Result {
		if err == errOK {
			return Success
		}
		return DefaultClassify(err)
	}})
	ctx := context.Background()
	for _, e := range []error{errOK, wrapped, context.Canceled, errBoom} {
		require.Same(t, e, b.Do(ctx, func(context.Context) error { return e }))
		v, err := Call(ctx, b, func(context.Context) (int, error) { return 3, e })
		require.Same(t, e, err)
		require.Equal(t, 3, v)
	}
	s := b.Stats()
	require.Equal(t, int64(4), s.WindowCalls, "2 successes and 2 failures; the 4 cancellations are ignored")
	require.Equal(t, int64(2), s.WindowFailures)
	require.Equal(t, Open, s.State)
}

// TestReview3IgnoredProbeReturnsSlot: an Ignored probe gives its slot back
// (admitted and in flight), so a half-open period with one probe is not
// consumed by a cancelled call, and the next probe decides it.
func TestReview3IgnoredProbeReturnsSlot(t *testing.T) {
	b, tk := r3Tripped(t, Config{})
	p, err := b.Acquire(tk.Now())
	require.NoError(t, err)
	_, err = b.Acquire(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull)
	b.Record(p, tk.Now(), context.Canceled)
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State)
	require.Zero(t, s.HalfOpenAdmitted)
	require.Zero(t, s.HalfOpenInFlight)
	require.NoError(t, call(t, b, tk, 0, nil))
	require.Equal(t, Closed, b.State())
}

// TestReview3UnknownResultIsAFailure: a Result outside the three constants
// (a Classify with a bug) counts as a failure, not as a success.
func TestReview3UnknownResultIsAFailure(t *testing.T) {
	b, err := New(Config{Ticker: rampart.NewManualTicker(1)})
	require.NoError(t, err)
	p, err := b.Acquire(1)
	require.NoError(t, err)
	b.RecordResult(p, 1, Result(7))
	require.EqualValues(t, 1, b.Stats().Failures)
}
