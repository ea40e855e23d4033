package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

const ms = time.Millisecond

var errBoom = errors.New("boom")

func newTest(t *testing.T, cfg Config) (*Breaker, *rampart.ManualTicker) {
	t.Helper()
	tk := rampart.NewManualTicker(0)
	cfg.Ticker = tk
	b, err := New(cfg)
	require.NoError(t, err)
	return b, tk
}

// call acquires at the ticker's time, advances by d, and records err.
func call(t *testing.T, b *Breaker, tk *rampart.ManualTicker, d time.Duration, err error) error {
	t.Helper()
	p, aerr := b.AcquireAt(tk.Now())
	if aerr != nil {
		return aerr
	}
	tk.Advance(d)
	b.ReleaseAt(p, tk.Now(), b.Classify(err))
	return nil
}

// tripped returns a consecutive breaker with one probe (unless cfg sets
// HalfOpenProbes), tripped at 0 and whose open period (1 s) is over.
func tripped(t *testing.T, cfg Config) (*Breaker, *rampart.ManualTicker) {
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

func TestNewValidation(t *testing.T) {
	bad := []struct {
		field string
		cfg   Config
	}{
		{"Mode", Config{Mode: 7}},
		{"WindowSize", Config{WindowSize: -1}},
		{"WindowSize", Config{WindowSize: maxWindowSize + 1}},
		{"TimeWindow", Config{TimeWindow: -time.Second}},
		{"TimeWindow", Config{Mode: TimeWindow, TimeWindow: 5, Buckets: 10}},
		{"Buckets", Config{Buckets: -1}},
		{"Buckets", Config{Buckets: 2000}},
		{"ConsecutiveFailures", Config{ConsecutiveFailures: -1}},
		{"FailureRateThreshold", Config{FailureRateThreshold: 101}},
		{"FailureRateThreshold", Config{FailureRateThreshold: -1}},
		{"SlowCallRateThreshold", Config{SlowCallRateThreshold: 100.5}},
		{"SlowCallDuration", Config{SlowCallDuration: -1}},
		{"MinimumCalls", Config{MinimumCalls: -1}},
		{"MinimumCalls", Config{WindowSize: 5, MinimumCalls: 6}},
		{"OpenDuration", Config{OpenDuration: -1}},
		{"MaxOpenDuration", Config{MaxOpenDuration: -1}},
		{"MaxOpenDuration", Config{OpenDuration: time.Second, MaxOpenDuration: time.Millisecond}},
		{"OpenBackoffFactor", Config{OpenBackoffFactor: 0.5}},
		{"OpenBackoffFactor", Config{OpenBackoffFactor: -2}},
		{"OpenJitter", Config{OpenJitter: 1}},
		{"OpenJitter", Config{OpenJitter: -0.1}},
		{"HalfOpenProbes", Config{HalfOpenProbes: -1}},
		{"HalfOpenProbes", Config{HalfOpenProbes: 256}},
		{"HalfOpenMaxConcurrent", Config{HalfOpenProbes: 2, HalfOpenMaxConcurrent: 3}},
		{"HalfOpenSuccesses", Config{HalfOpenProbes: 2, HalfOpenSuccesses: 3}},
		{"HalfOpenSuccesses", Config{HalfOpenSuccesses: -1}},
		{"MaxHalfOpenDuration", Config{MaxHalfOpenDuration: -1}},
	}
	for i, c := range bad {
		_, err := New(c.cfg)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, "case %d: %+v", i, c.cfg)
		testkit.RequireConfigError(t, err, "circuitbreaker", c.field)
	}
	b, err := New(Config{})
	require.NoError(t, err)
	c := b.Config()
	require.Equal(t, 100, c.WindowSize)
	require.Equal(t, 10, c.MinimumCalls)
	require.Equal(t, 50.0, c.FailureRateThreshold)
	require.Equal(t, 5*time.Second, c.OpenDuration)
	require.Equal(t, 60*time.Second, c.MaxOpenDuration)
	require.Equal(t, 2.0, c.OpenBackoffFactor)
	require.Equal(t, 5, c.HalfOpenProbes)
	require.Equal(t, 5, c.HalfOpenMaxConcurrent)
	require.Zero(t, c.HalfOpenSuccesses, "0: the probes are judged by the thresholds")
	require.Equal(t, Closed, b.State())
	b, err = New(Config{WindowSize: 4})
	require.NoError(t, err)
	require.Equal(t, 4, b.Config().MinimumCalls)
}

func TestCountWindowTransitions(t *testing.T) {
	var changes []string
	b, tk := newTest(t, Config{
		Name: "db", WindowSize: 4, MinimumCalls: 4, OpenDuration: time.Second,
		HalfOpenProbes: 2, HalfOpenMaxConcurrent: 1, HalfOpenSuccesses: 2,
		OnStateChange: func(from, to State) { changes = append(changes, from.String()+">"+to.String()) },
	})
	require.NoError(t, call(t, b, tk, ms, nil))
	require.NoError(t, call(t, b, tk, ms, nil))
	require.NoError(t, call(t, b, tk, ms, errBoom)) // 3 calls < minimum
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, ms, errBoom)) // 2/4 = 50 % → open
	require.Equal(t, Open, b.State())
	tripAt := tk.Now()

	_, err := b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrOpen)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.NotErrorIs(t, err, ErrHalfOpenFull)
	require.Equal(t, `circuitbreaker "db": open`, err.Error())
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))

	tk.Set(tripAt + int64(time.Second) - 1)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrOpen)
	require.Equal(t, time.Duration(1), b.RemainingOpenAt(tk.Now()))

	tk.Set(tripAt + int64(time.Second))
	p1, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	_, err = b.AcquireAt(tk.Now()) // concurrency limit 1
	require.ErrorIs(t, err, ErrHalfOpenFull)
	require.ErrorIs(t, err, ErrOpen)
	require.ErrorIs(t, err, rampart.ErrRejected)
	b.ReleaseAt(p1, tk.Now(), b.Classify(nil))
	require.Equal(t, HalfOpen, b.State())
	p2, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	_, err = b.AcquireAt(tk.Now()) // both probes of the period used
	require.ErrorIs(t, err, ErrHalfOpenFull)
	b.ReleaseAt(p2, tk.Now(), b.Classify(nil))
	require.Equal(t, Closed, b.State())
	s := b.Stats()
	require.Zero(t, s.WindowCalls, "closing empties the window")
	require.Equal(t, uint64(4), s.Rejected)
	require.Equal(t, uint64(3), s.Transitions)
	require.Equal(t, uint64(1), s.Trips)
	require.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, changes)
}

func TestWarmingSuccessTrips(t *testing.T) {
	b, tk := newTest(t, Config{WindowSize: 10, MinimumCalls: 4})
	for range 3 {
		require.NoError(t, call(t, b, tk, ms, errBoom))
	}
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, ms, nil)) // 3/4 failed: the 4th call, a success, trips
	require.Equal(t, Open, b.State())
}

func TestWindowSlides(t *testing.T) {
	b, tk := newTest(t, Config{WindowSize: 4, MinimumCalls: 4, FailureRateThreshold: 75})
	for _, e := range []error{errBoom, errBoom, nil, nil, nil, errBoom, errBoom} {
		require.NoError(t, call(t, b, tk, ms, e))
		require.Equal(t, Closed, b.State())
	}
	// window: nil, nil(5th), F, F → 50 %; one more failure: nil, F, F, F = 75 %
	require.NoError(t, call(t, b, tk, ms, errBoom))
	require.Equal(t, Open, b.State())
}

func TestHalfOpenReopensWithBackoff(t *testing.T) {
	b, tk := newTest(t, Config{
		Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second,
		MaxOpenDuration: 4 * time.Second, HalfOpenProbes: 1,
	})
	require.NoError(t, call(t, b, tk, 0, errBoom))
	want := []time.Duration{2, 4, 4, 4}
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))
	for _, w := range want {
		tk.Advance(b.RemainingOpenAt(tk.Now()))
		require.NoError(t, call(t, b, tk, 0, errBoom)) // the probe fails
		require.Equal(t, Open, b.State())
		require.Equal(t, w*time.Second, b.RemainingOpenAt(tk.Now()))
	}
	tk.Advance(4 * time.Second)
	require.NoError(t, call(t, b, tk, 0, nil))
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()), "closing resets the backoff")
}

func TestOpenJitter(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, OpenJitter: 0.5})
	seen := map[time.Duration]bool{}
	for range 20 {
		b.Reset()
		require.NoError(t, call(t, b, tk, 0, errBoom))
		d := b.RemainingOpenAt(tk.Now())
		require.LessOrEqual(t, d, time.Second)
		require.Greater(t, d, time.Second/2)
		seen[d] = true
	}
	require.Greater(t, len(seen), 1)
}

// TestExtremeDurations: OpenDuration, MaxOpenDuration and the
// readings at the ends of int64 (legal values) neither panic nor produce a
// negative RemainingOpenAt, and the backoff saturates instead of wrapping.
func TestExtremeDurations(t *testing.T) {
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
			d := b.RemainingOpenAt(tk.Now())
			require.Greater(t, d, time.Duration(0))
			require.LessOrEqual(t, d, time.Second)
			tk.Advance(d)
			require.NoError(t, call(t, b, tk, 0, errBoom), "the probe")
			require.Equal(t, Open, b.State())
			// 1 s × 1e300 saturates at MaxOpenDuration (jitter halves it at most).
			d = b.RemainingOpenAt(tk.Now())
			require.GreaterOrEqual(t, d, time.Duration(0))
			if start <= 0 {
				require.Greater(t, d, time.Duration(math.MaxInt64/2-1))
			}
			_ = b.Stats()
			_, err = b.AcquireAt(tk.Now())
			require.ErrorIs(t, err, ErrOpen)
			b.TransitionTo(HalfOpen)
			_, err = b.AcquireAt(tk.Now())
			require.NoError(t, err)
			_, err = b.AcquireAt(tk.Now())
			require.ErrorIs(t, err, ErrHalfOpenFull, "MaxHalfOpenDuration MaxInt64 never expires")
		})
	}
	// A saturated open period (OpenDuration MaxInt64) rejects until the end of time.
	tk := rampart.NewManualTicker(math.MaxInt64 - 10)
	b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: math.MaxInt64})
	require.NoError(t, err)
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, time.Duration(10), b.RemainingOpenAt(tk.Now()))
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrOpen)
}

func TestStalePermitNeverDecidesProbe(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1})
	slow, err := b.AcquireAt(tk.Now()) // admitted while closed
	require.NoError(t, err)
	require.NoError(t, call(t, b, tk, 0, errBoom))
	tk.Advance(time.Second)
	probe, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	b.ReleaseAt(slow, tk.Now(), b.Classify(nil)) // the closed-era call ends now: stale
	require.Equal(t, HalfOpen, b.State())
	b.ReleaseAt(slow, tk.Now(), b.Classify(errBoom))
	require.Equal(t, HalfOpen, b.State())
	require.Equal(t, uint64(2), b.Stats().StaleResults)
	b.ReleaseAt(probe, tk.Now(), b.Classify(nil))
	require.Equal(t, Closed, b.State())
	b.ReleaseAt(Permit{}, tk.Now(), b.Classify(errBoom)) // the zero permit is never current
	require.Equal(t, Closed, b.State())
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
	b.ReleaseAt(Permit{}, tk.Now(), b.Classify(errBoom))
	require.Equal(t, Closed, b.State(), "a zero Permit must not trip the breaker")
	require.Equal(t, uint64(1), b.Stats().StaleResults)

	// The same through Open → HalfOpen, the transition AcquireAt makes.
	b.state.Store(genMask | uint64(Open))
	b.openUntil.Store(tk.Now())
	p, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	require.NotZero(t, p.word>>genShift)
}

func TestMaxHalfOpenDuration(t *testing.T) {
	b, tk := newTest(t, Config{
		Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second,
		HalfOpenProbes: 1, MaxHalfOpenDuration: 5 * time.Second,
	})
	require.NoError(t, call(t, b, tk, 0, errBoom))
	tk.Advance(time.Second)
	stuck, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	tk.Advance(5*time.Second - 1)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull)
	tk.Advance(1)
	fresh, err := b.AcquireAt(tk.Now())
	require.NoError(t, err, "a stuck probe no longer blocks recovery")
	b.ReleaseAt(stuck, tk.Now(), b.Classify(errBoom)) // from the older period: ignored
	require.Equal(t, HalfOpen, b.State())
	b.ReleaseAt(fresh, tk.Now(), b.Classify(nil))
	require.Equal(t, Closed, b.State())
}

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
	probe, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	require.Equal(t, HalfOpen, b.State())
	tk.Advance(time.Millisecond)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull, "the probe admitted 1 ms ago is not stuck")
	b.ReleaseAt(probe, tk.Now(), b.Classify(nil))
	require.Equal(t, Closed, b.State(), "the probe's success closes the breaker")
	require.Zero(t, b.Stats().StaleResults)
}

// TestMaxHalfOpenDurationSparesProgressingProbes: MaxHalfOpenDuration
// restarts a half-open period only when the newest probe in flight has been
// out for that long (no probe admitted since). With HalfOpenMaxConcurrent 1
// the probes run one at a time: a caller rejected by the concurrency limit
// more than MaxHalfOpenDuration after the period began, while a healthy
// probe admitted 200 ms ago is in flight, does not restart the period (which
// would throw away the probes recorded and make the one in flight stale).
func TestMaxHalfOpenDurationSparesProgressingProbes(t *testing.T) {
	b, tk := newTest(t, Config{HalfOpenProbes: 5, HalfOpenMaxConcurrent: 1, HalfOpenSuccesses: 5,
		MaxHalfOpenDuration: time.Second})
	require.True(t, b.TransitionTo(HalfOpen))
	probe := func(other bool) {
		p, err := b.AcquireAt(tk.Now())
		require.NoError(t, err)
		tk.Advance(200 * time.Millisecond)
		if other { // another caller while this probe is in flight
			_, err := b.AcquireAt(tk.Now())
			require.ErrorIs(t, err, ErrHalfOpenFull, "the concurrency limit rejects; the period goes on")
		}
		tk.Advance(200 * time.Millisecond)
		b.ReleaseAt(p, tk.Now(), rampart.Success)
	}
	probe(false)
	probe(false)
	probe(true) // at 1.0 s: 2 of 5 probes recorded, the third in flight, 2 not yet admitted
	probe(false)
	probe(false)
	require.Zero(t, b.Stats().StaleResults, "the healthy probe in flight went stale")
	require.Equal(t, Closed, b.State(), "5 healthy probes in a row close; stats %+v", b.Stats())

	// A probe that is stuck before every probe is admitted still gives way
	// once it has been out for MaxHalfOpenDuration.
	require.True(t, b.TransitionTo(HalfOpen))
	probe(false)
	stuck, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	tk.Advance(time.Second - 1)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull)
	tk.Advance(1)
	_, err = b.AcquireAt(tk.Now())
	require.NoError(t, err, "the stuck probe no longer blocks recovery")
	b.ReleaseAt(stuck, tk.Now(), rampart.Success)
	require.EqualValues(t, 1, b.Stats().StaleResults, "the stuck probe is from the older period")
}

func TestHalfOpenSuccessesAndFailures(t *testing.T) {
	// 4 probes, 2 successes close; a third failure makes closing impossible.
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 4, HalfOpenSuccesses: 2})
	trip := func() {
		require.NoError(t, call(t, b, tk, 0, errBoom))
		tk.Advance(b.RemainingOpenAt(tk.Now()))
	}
	trip()
	var ps []Permit
	for range 4 {
		p, err := b.AcquireAt(tk.Now())
		require.NoError(t, err)
		ps = append(ps, p)
	}
	_, err := b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull)
	b.ReleaseAt(ps[0], tk.Now(), b.Classify(errBoom))
	b.ReleaseAt(ps[1], tk.Now(), b.Classify(errBoom))
	require.Equal(t, HalfOpen, b.State())
	s := b.Stats()
	require.Equal(t, 4, s.HalfOpenAdmitted)
	require.Equal(t, 2, s.HalfOpenInFlight)
	require.Equal(t, 2, s.HalfOpenFailed)
	b.ReleaseAt(ps[2], tk.Now(), b.Classify(errBoom))
	require.Equal(t, Open, b.State())
	b.ReleaseAt(ps[3], tk.Now(), b.Classify(nil)) // stale now
	require.Equal(t, Open, b.State())

	// Ignored probes give their slot back.
	b.Reset()
	trip()
	b.TransitionTo(HalfOpen)
	for range 10 {
		p, err := b.AcquireAt(tk.Now())
		require.NoError(t, err)
		b.ReleaseAt(p, tk.Now(), b.Classify(context.Canceled))
	}
	require.Equal(t, HalfOpen, b.State())
	require.Equal(t, 0, b.Stats().HalfOpenAdmitted)
	require.NoError(t, call(t, b, tk, 0, nil))
	require.NoError(t, call(t, b, tk, 0, nil))
	require.Equal(t, Closed, b.State())
}

// TestIgnoredProbeReturnsSlot: an Ignored probe gives its slot back
// (admitted and in flight), so a half-open period with one probe is not
// consumed by a cancelled call, and the next probe decides it.
func TestIgnoredProbeReturnsSlot(t *testing.T) {
	b, tk := tripped(t, Config{})
	p, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrHalfOpenFull)
	b.ReleaseAt(p, tk.Now(), b.Classify(context.Canceled))
	s := b.Stats()
	require.Equal(t, HalfOpen, s.State)
	require.Zero(t, s.HalfOpenAdmitted)
	require.Zero(t, s.HalfOpenInFlight)
	require.NoError(t, call(t, b, tk, 0, nil))
	require.Equal(t, Closed, b.State())
}

func TestConsecutive(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 3})
	for _, e := range []error{errBoom, errBoom, nil, errBoom, errBoom} {
		require.NoError(t, call(t, b, tk, 0, e))
	}
	require.Equal(t, int64(2), b.Stats().ConsecutiveFailures)
	require.Equal(t, Closed, b.State())
	// No decay: a failure much later still counts.
	tk.Advance(time.Hour)
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, Open, b.State())
}

func TestTimeWindow(t *testing.T) {
	b, tk := newTest(t, Config{Mode: TimeWindow, TimeWindow: time.Second, Buckets: 10, MinimumCalls: 4})
	for range 4 {
		require.NoError(t, call(t, b, tk, 0, nil))
	}
	for range 2 {
		require.NoError(t, call(t, b, tk, 0, errBoom))
	}
	require.Equal(t, Closed, b.State()) // 2/6
	s := b.Stats()
	require.Equal(t, int64(6), s.WindowCalls)
	require.Equal(t, int64(2), s.WindowFailures)
	tk.Advance(900 * time.Millisecond)
	require.NoError(t, call(t, b, tk, 0, errBoom)) // 3/7
	require.Equal(t, Closed, b.State())
	tk.Advance(100 * time.Millisecond) // the first slice leaves the window
	require.Equal(t, int64(1), b.Stats().WindowCalls)
	for range 2 {
		require.NoError(t, call(t, b, tk, 0, nil)) // 1/3, under minimum
	}
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, 0, errBoom)) // 2/4 = 50 %
	require.Equal(t, Open, b.State())
}

func TestTimeWindowSlideTripsOnSuccess(t *testing.T) {
	// Successes leave the window; the failures that stay are 75 %: the next
	// call, even a success, trips.
	b, tk := newTest(t, Config{Mode: TimeWindow, TimeWindow: time.Second, Buckets: 10, MinimumCalls: 4, FailureRateThreshold: 60})
	for range 4 {
		require.NoError(t, call(t, b, tk, 0, nil))
	}
	tk.Advance(500 * time.Millisecond)
	for range 3 {
		require.NoError(t, call(t, b, tk, 0, errBoom)) // 3/7
	}
	require.Equal(t, Closed, b.State())
	tk.Advance(500 * time.Millisecond)
	require.NoError(t, call(t, b, tk, 0, nil)) // window: F F F S = 75 %
	require.Equal(t, Open, b.State())
}

// TestTimeWindowNegativeReadings: a Ticker reads from an arbitrary epoch
// (NewManualTicker takes any start), so readings may be negative. The time
// window's buckets are as wide below zero as above it (a tick truncated
// toward zero would make (-res, res) one bucket twice as wide): failures
// recorded at -0.9 s are out of a 10 s window 10.4 s later and do not trip
// the breaker.
func TestTimeWindowNegativeReadings(t *testing.T) {
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

func TestSlowCalls(t *testing.T) {
	b, tk := newTest(t, Config{WindowSize: 4, MinimumCalls: 4, SlowCallDuration: 100 * time.Millisecond, SlowCallRateThreshold: 50, FailureRateThreshold: 100})
	require.NoError(t, call(t, b, tk, 99*time.Millisecond, nil))
	require.NoError(t, call(t, b, tk, 100*time.Millisecond, nil))
	require.NoError(t, call(t, b, tk, 10*time.Millisecond, nil))
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, 200*time.Millisecond, errBoom)) // slow failure: 2/4 slow
	require.Equal(t, Open, b.State())
	s := b.Stats()
	require.Equal(t, uint64(2), s.SlowCalls)
	require.Equal(t, uint64(1), s.Failures)

	// Consecutive mode counts a slow call as a failure.
	b, tk = newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 2, SlowCallDuration: time.Second})
	require.NoError(t, call(t, b, tk, time.Second, nil))
	require.NoError(t, call(t, b, tk, 2*time.Second, nil))
	require.Equal(t, Open, b.State())
}

func TestClassification(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1})
	require.NoError(t, call(t, b, tk, 0, context.Canceled))
	require.NoError(t, call(t, b, tk, 0, fmt.Errorf("wrapped: %w", context.Canceled)))
	require.Equal(t, Closed, b.State())
	p, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	b.ReleaseAt(p, tk.Now(), rampart.Failure) // e.g. an HTTP 503 with a nil error
	require.Equal(t, Open, b.State())

	errBad := errors.New("bad request")
	b, tk = newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, Classify: func(err error) rampart.Result {
		switch {
		case err == nil:
			return rampart.Success
		case errors.Is(err, errBad):
			return rampart.Ignored
		}
		return rampart.Failure
	}})
	require.NoError(t, call(t, b, tk, 0, errBad))
	require.Equal(t, Closed, b.State())
	require.NoError(t, call(t, b, tk, 0, context.Canceled))
	require.Equal(t, Open, b.State())
	require.Equal(t, rampart.Success, DefaultClassify(nil))
	require.Equal(t, "ignored", rampart.Ignored.String())
}

// TestUnknownResultIsAFailure: a Result outside the three constants
// (from a faulty Classify) counts as a failure, not as a success.
func TestUnknownResultIsAFailure(t *testing.T) {
	b, err := New(Config{Ticker: rampart.NewManualTicker(1)})
	require.NoError(t, err)
	p, err := b.AcquireAt(1)
	require.NoError(t, err)
	b.ReleaseAt(p, 1, rampart.Result(7))
	require.EqualValues(t, 1, b.Stats().Failures)
}

func TestForcedStates(t *testing.T) {
	b, tk := newTest(t, Config{WindowSize: 4, MinimumCalls: 2, OpenDuration: time.Second})

	require.True(t, b.TransitionTo(Disabled))
	require.False(t, b.TransitionTo(Disabled))
	for range 10 {
		require.NoError(t, call(t, b, tk, 0, errBoom))
	}
	require.Equal(t, Disabled, b.State())
	require.Zero(t, b.Stats().Failures)

	require.True(t, b.TransitionTo(ForcedOpen))
	_, err := b.AcquireAt(tk.Now() + int64(time.Hour))
	require.ErrorIs(t, err, ErrOpen)
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))
	tk.Advance(time.Hour)
	_, err = b.AcquireAt(tk.Now())
	require.ErrorIs(t, err, ErrOpen)

	require.True(t, b.TransitionTo(MetricsOnly))
	for range 4 {
		require.NoError(t, call(t, b, tk, 0, errBoom))
	}
	require.Equal(t, MetricsOnly, b.State())
	s := b.Stats()
	require.Equal(t, 100.0, s.FailureRate)
	require.Equal(t, int64(4), s.WindowCalls)

	require.True(t, b.TransitionTo(Open))
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))
	require.True(t, b.TransitionTo(HalfOpen))
	require.True(t, b.TransitionTo(Closed))
	require.Zero(t, b.Stats().WindowCalls)
	require.False(t, b.TransitionTo(State(9)))
	require.Equal(t, "invalid", State(9).String())
	before := b.Stats().Generation
	b.Reset()
	require.Equal(t, before+1, b.Stats().Generation)
}

func TestListenersAndPanics(t *testing.T) {
	var succ, fail, rej int
	b, tk := newTest(t, Config{
		Mode: Consecutive, ConsecutiveFailures: 2,
		OnSuccess:     func(d time.Duration) { succ++; require.Equal(t, 5*time.Millisecond, d) },
		OnFailure:     func(time.Duration) { fail++ },
		OnRejected:    func(s State) { rej++; require.Equal(t, Open, s) },
		OnStateChange: func(State, State) { panic("listener bug") },
	})
	require.NoError(t, call(t, b, tk, 5*time.Millisecond, nil))
	require.NoError(t, call(t, b, tk, 5*time.Millisecond, errBoom))
	require.NoError(t, call(t, b, tk, 5*time.Millisecond, errBoom))
	require.ErrorIs(t, call(t, b, tk, 0, nil), ErrOpen)
	require.Equal(t, Open, b.State())
	require.Equal(t, [3]int{1, 2, 1}, [3]int{succ, fail, rej})
	require.Equal(t, uint64(1), b.Stats().ListenerPanics)
}

func TestDoAndCall(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1})
	ctx := context.Background()
	v, err := Call(ctx, b, func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, v)
	err = b.Do(ctx, func(context.Context) error { return errBoom })
	require.Same(t, errBoom, err, "the user's error comes back unchanged")
	v, err = Call(ctx, b, func(context.Context) (int, error) { return 7, nil })
	require.ErrorIs(t, err, ErrOpen)
	require.Zero(t, v)

	// A panic is recorded as a failure and re-raised.
	tk.Advance(time.Second)
	require.PanicsWithValue(t, "kaboom", func() {
		_ = b.Do(ctx, func(context.Context) error { panic("kaboom") })
	})
	require.Equal(t, Open, b.State())

	// runtime.Goexit releases the probe slot.
	tk.Advance(2 * time.Second)
	_, goexited := testkit.Run(func() {
		_, _ = Call(ctx, b, func(context.Context) (int, error) { testkit.Goexit(); return 0, nil })
	})
	require.True(t, goexited, "fn's Goexit ends the caller's goroutine")
	require.Equal(t, HalfOpen, b.State())
	require.Equal(t, 0, b.Stats().HalfOpenInFlight)
	require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	require.Equal(t, Closed, b.State())
}

// TestDoAndCallReturnUserErrorUnchanged: Do and Call return fn's error itself,
// whatever its classification (failure, ignored, success by Classify), and
// a classification of Ignored records nothing in a closed window.
func TestDoAndCallReturnUserErrorUnchanged(t *testing.T) {
	errOK := errors.New("fine")
	wrapped := fmt.Errorf("ctx: %w", context.Canceled)
	b, _ := newTest(t, Config{WindowSize: 4, MinimumCalls: 4, Classify: func(err error) rampart.Result {
		if err == errOK {
			return rampart.Success
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

// TestNoClockOnClosedSuccess checks the shorthands' lazy clock: a closed
// count-window breaker without a slow-call threshold reads no clock.
func TestNoClockOnClosedSuccess(t *testing.T) {
	for _, mode := range []Mode{CountWindow, Consecutive} {
		ct := &testkit.CountingTicker{}
		b, err := New(Config{Mode: mode, Ticker: ct})
		require.NoError(t, err)
		for range 100 {
			require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }))
		}
		require.Zero(t, ct.Reads(), "mode %d", mode)
	}
	ct := &testkit.CountingTicker{}
	b, err := New(Config{SlowCallDuration: time.Second, Ticker: ct})
	require.NoError(t, err)
	require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }))
	require.Equal(t, int64(2), ct.Reads())
}

// TestNoClockWhenDisabledOrUntimedMetricsOnly: Acquire, Release, Do and
// Call read the Ticker only when the decision or the call's duration needs
// it. A Disabled breaker decides and records nothing, and a MetricsOnly one
// that measures no calls (count window or Consecutive mode, no slow-call
// threshold, no per-call listener) only counts outcomes: neither reads the
// clock. A MetricsOnly breaker that measures calls still does.
func TestNoClockWhenDisabledOrUntimedMetricsOnly(t *testing.T) {
	ok := func(context.Context) error { return nil }
	okV := func(context.Context) (int, error) { return 1, nil }
	for _, c := range []struct {
		mode Mode
		to   State
	}{{CountWindow, Disabled}, {TimeWindow, Disabled}, {Consecutive, Disabled}, {CountWindow, MetricsOnly}, {Consecutive, MetricsOnly}} {
		ct := &testkit.CountingTicker{Base: rampart.NewManualTicker(1)}
		b, err := New(Config{Mode: c.mode, Ticker: ct})
		require.NoError(t, err)
		require.True(t, b.TransitionTo(c.to))
		before := ct.Reads()
		p, err := b.Acquire()
		require.NoError(t, err)
		b.Release(p, rampart.Success)
		p, err = b.Acquire()
		require.NoError(t, err)
		b.Release(p, rampart.Failure)
		require.NoError(t, b.Do(context.Background(), ok))
		require.ErrorIs(t, b.Do(context.Background(), func(context.Context) error { return errBoom }), errBoom)
		_, err = Call(context.Background(), b, okV)
		require.NoError(t, err)
		require.Equal(t, before, ct.Reads(), "mode %d, state %v: no decision nor duration needs the time", c.mode, c.to)
		require.Equal(t, c.to, b.State())
		s := b.Stats()
		if c.to == Disabled {
			require.Zero(t, s.Failures, "a Disabled breaker records nothing")
			require.Zero(t, s.WindowCalls)
		} else {
			require.EqualValues(t, 2, s.Failures, "MetricsOnly counts the outcomes")
		}
	}
	ct := &testkit.CountingTicker{Base: rampart.NewManualTicker(1)}
	b, err := New(Config{SlowCallDuration: time.Second, Ticker: ct})
	require.NoError(t, err)
	require.True(t, b.TransitionTo(MetricsOnly))
	before := ct.Reads()
	require.NoError(t, b.Do(context.Background(), ok))
	require.Equal(t, before+2, ct.Reads(), "a MetricsOnly breaker that judges durations reads the clock")
	require.EqualValues(t, 1, b.Stats().WindowCalls)
}

// TestOpenTimerHint runs a breaker on a real-time NanoTicker inside a
// synctest bubble: Do rejects an open breaker without reading the clock
// until the open timer fires, then probes.
func TestOpenTimerHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := New(Config{Ticker: rampart.NewNanoTicker(), Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1})
		require.NoError(t, err)
		ctx := context.Background()
		require.Same(t, errBoom, b.Do(ctx, func(context.Context) error { return errBoom }))
		require.ErrorIs(t, b.Do(ctx, func(context.Context) error { return nil }), ErrOpen)
		time.Sleep(999 * time.Millisecond)
		require.ErrorIs(t, b.Do(ctx, func(context.Context) error { return nil }), ErrOpen)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
		require.Equal(t, Closed, b.State())
		// A manual open arms the timer too.
		b.TransitionTo(Open)
		require.ErrorIs(t, b.Do(ctx, func(context.Context) error { return nil }), ErrOpen)
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, b.Do(ctx, func(context.Context) error { return nil }))
	})
}

func TestIsCanceled(t *testing.T) {
	require.True(t, isCanceled(context.Canceled))
	require.True(t, isCanceled(fmt.Errorf("a: %w", fmt.Errorf("b: %w", context.Canceled))))
	require.True(t, isCanceled(errors.Join(errBoom, context.Canceled)))
	require.False(t, isCanceled(errBoom))
	require.False(t, isCanceled(fmt.Errorf("a: %w", errBoom)))
	require.False(t, isCanceled(context.DeadlineExceeded))
}

// TestNoTimeArgument: the pipeline passes math.MinInt64 when it did not read
// the clock.
func TestNoTimeArgument(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second,
		HalfOpenProbes: 1, MaxHalfOpenDuration: time.Second, SlowCallDuration: time.Millisecond})
	p, err := b.AcquireAt(rampart.NotRead)
	require.NoError(t, err)
	tk.Advance(time.Hour)
	b.ReleaseAt(p, tk.Now(), b.Classify(nil)) // unknown start: not slow
	require.Equal(t, Closed, b.State())
	p, _ = b.AcquireAt(rampart.NotRead)
	b.ReleaseAt(p, rampart.NotRead, b.Classify(errBoom)) // the trip reads the ticker
	require.Equal(t, Open, b.State())
	require.Equal(t, time.Second, b.RemainingOpenAt(tk.Now()))
	_, err = b.AcquireAt(rampart.NotRead)
	require.ErrorIs(t, err, ErrOpen)
	tk.Advance(time.Second)
	_, err = b.AcquireAt(tk.Now())
	require.NoError(t, err)
	_, err = b.AcquireAt(rampart.NotRead) // probes taken; the unknown time must not restart half-open
	require.ErrorIs(t, err, ErrHalfOpenFull)
	require.Equal(t, uint64(2), b.Stats().Transitions)
}

// TestNoTimeNeverCountedOrTransitions: a call made without the time
// (math.MinInt64) never moves an Open breaker to HalfOpen, is not counted
// or notified when rejected, and a closed permit taken so is never judged
// slow even with a slow-call threshold.
func TestNoTimeNeverCountedOrTransitions(t *testing.T) {
	rejected := 0
	b, tk := tripped(t, Config{OnRejected: func(State) { rejected++ }})
	tk.Advance(time.Hour)
	_, err := b.AcquireAt(math.MinInt64)
	require.ErrorIs(t, err, ErrOpen)
	require.Equal(t, Open, b.State())
	require.Zero(t, b.Stats().Rejected)
	require.Zero(t, rejected)

	b2, tk2 := newTest(t, Config{WindowSize: 2, MinimumCalls: 2, SlowCallDuration: time.Nanosecond})
	for range 2 {
		p, err := b2.AcquireAt(math.MinInt64)
		require.NoError(t, err)
		tk2.Advance(time.Second)
		b2.ReleaseAt(p, tk2.Now(), b2.Classify(nil))
	}
	require.Equal(t, Closed, b2.State())
	require.Zero(t, b2.Stats().SlowCalls)
}

func TestMeasuresCalls(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want bool
	}{
		{Config{}, false},
		{Config{Mode: Consecutive, OnRejected: func(State) {}, OnStateChange: func(State, State) {}}, false},
		{Config{SlowCallDuration: time.Second}, true},
		{Config{Mode: TimeWindow}, true},
		{Config{OnSuccess: func(time.Duration) {}}, true},
		{Config{OnFailure: func(time.Duration) {}}, true},
	} {
		b, err := New(c.cfg)
		require.NoError(t, err)
		require.Equal(t, c.want, b.MeasuresCalls())
	}
}

// probeRound trips b (a fresh breaker with a 1 s open period and
// MinimumCalls 1), waits out the open period, then runs one probe per
// outcome (f fails, w succeeds slowly, s succeeds) until the breaker leaves
// HalfOpen, and returns the state it left to and the probes it took.
func probeRound(t *testing.T, b *Breaker, tk *rampart.ManualTicker, outcomes string) (State, int) {
	t.Helper()
	require.NoError(t, call(t, b, tk, 0, errBoom))
	require.Equal(t, Open, b.State())
	tk.Advance(b.RemainingOpenAt(tk.Now()))
	for i, o := range outcomes {
		p, err := b.AcquireAt(tk.Now())
		require.NoError(t, err, "probe %d", i)
		require.Equal(t, HalfOpen, b.State())
		d, e := time.Duration(0), error(nil)
		switch o {
		case 'f':
			e = errBoom
		case 'w':
			d = time.Second
		}
		tk.Advance(d)
		b.ReleaseAt(p, tk.Now(), b.Classify(e))
		if st := b.State(); st != HalfOpen {
			return st, i + 1
		}
	}
	return HalfOpen, len(outcomes)
}

// TestHalfOpenDefaultJudgesProbesByFailureRate: with the default rule
// (HalfOpenSuccesses 0) 5 probes are judged as a window of 5 calls at the
// 50 % threshold that trips the breaker: up to 2 failures close it, the
// third reopens it, each decided as soon as the remaining probes cannot
// change it.
func TestHalfOpenDefaultJudgesProbesByFailureRate(t *testing.T) {
	for _, c := range []struct {
		outcomes string
		want     State
		probes   int
	}{
		{"sss", Closed, 3},    // 3 successes: even 2 failures more stay under 50 %
		{"ffsss", Closed, 5},  // 2 of 5 failed: 40 %
		{"fsfss", Closed, 5},  //
		{"fff", Open, 3},      // 3 of 5 failed: 60 % whatever the last two do
		{"sfsff", Open, 5},    //
		{"ssfs", Closed, 4},   // 3 successes
		{"ffss", HalfOpen, 4}, // undecided: the fifth probe decides
		{"fsfsf", Open, 5},    // 3 of 5
		{"wwwww", Closed, 3},  // slow successes are successes (no slow-call threshold)
		{"sffsf", Open, 5},    //
		{"ssff", HalfOpen, 4}, //
		{"ssffs", Closed, 5},  //
		{"sssff", Closed, 3},  // decided after the third success
		{"fsfs", HalfOpen, 4}, //
		{"fsffs", Open, 4},    //
		{"ffsfs", Open, 4},    //
		{"sfsfs", Closed, 5},  //
		{"sfs", HalfOpen, 3},  //
		{"sfss", Closed, 4},   //
	} {
		b, tk := newTest(t, Config{MinimumCalls: 1, OpenDuration: time.Second})
		got, n := probeRound(t, b, tk, c.outcomes)
		require.Equal(t, c.want, got, "%s", c.outcomes)
		require.Equal(t, c.probes, n, "%s: probes taken", c.outcomes)
	}
}

// TestHalfOpenSlowProbeJudgedBySlowRate: a slow successful probe is a
// success that counts towards the slow-call rate, judged by
// SlowCallRateThreshold as in the closed window; it is not a failed probe.
func TestHalfOpenSlowProbeJudgedBySlowRate(t *testing.T) {
	for _, c := range []struct {
		slowRate float64
		outcomes string
		want     State
		probes   int
	}{
		{99, "wssss", Closed, 3},  // 1 slow of 5: the closed window tolerates 99 %
		{99, "wwwws", Closed, 5},  // 4 slow of 5: 80 %
		{99, "wwww", HalfOpen, 4}, // a fifth slow one would make 100 %
		{99, "wwwww", Open, 5},    // 100 % slow
		{50, "wss", HalfOpen, 3},  // 1 slow, 2 more could make 60 %
		{50, "wsss", Closed, 4},   // at most 2 slow of 5: 40 %
		{50, "wwsw", Open, 4},     // 3 slow of 5: 60 %
		{50, "wwfw", Open, 4},     // a slow failure would count in both rates
		{50, "fwff", Open, 4},     // 3 failures
	} {
		b, tk := newTest(t, Config{MinimumCalls: 1, OpenDuration: time.Second,
			SlowCallDuration: time.Second, SlowCallRateThreshold: c.slowRate})
		got, n := probeRound(t, b, tk, c.outcomes)
		require.Equal(t, c.want, got, "%v %s", c.slowRate, c.outcomes)
		require.Equal(t, c.probes, n, "%v %s: probes taken", c.slowRate, c.outcomes)
	}
	// Stats shows the slow probes; a slow success is a success.
	b, tk := newTest(t, Config{MinimumCalls: 1, OpenDuration: time.Second, SlowCallDuration: time.Second, SlowCallRateThreshold: 99})
	got, _ := probeRound(t, b, tk, "ww")
	require.Equal(t, HalfOpen, got)
	s := b.Stats()
	require.Equal(t, 2, s.HalfOpenSlowCalls)
	require.Equal(t, 2, s.HalfOpenSucceeded)
	require.Zero(t, s.HalfOpenFailed)

	// Consecutive mode counts a slow probe as a failure, as it counts a slow call.
	b, tk = newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: time.Second, SlowCallDuration: time.Second})
	got, n := probeRound(t, b, tk, "wssss")
	require.Equal(t, Open, got)
	require.Equal(t, 1, n)
}

// TestConsecutiveSlowCallIsRecordedAsFailure: in Consecutive mode a slow
// call is a failure, for the books as for the decision: a slow successful
// probe reopens the breaker, is passed to OnFailure (not OnSuccess) and is
// counted in Stats.Failures (and Stats.SlowCalls); so is a slow success
// while Closed.
func TestConsecutiveSlowCallIsRecordedAsFailure(t *testing.T) {
	var succ, fail int
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 2, HalfOpenProbes: 1,
		SlowCallDuration: time.Second, OpenDuration: time.Second,
		OnSuccess: func(time.Duration) { succ++ }, OnFailure: func(time.Duration) { fail++ }})
	require.NoError(t, call(t, b, tk, 2*time.Second, nil)) // a slow success while Closed
	require.Equal(t, Closed, b.State())
	require.Equal(t, 1, fail, "OnFailure for the slow call (OnSuccess called %d times)", succ)
	require.Zero(t, succ)
	st := b.Stats()
	require.EqualValues(t, 1, st.Failures)
	require.EqualValues(t, 1, st.SlowCalls)
	require.EqualValues(t, 1, st.ConsecutiveFailures)

	require.True(t, b.TransitionTo(HalfOpen))
	p, err := b.AcquireAt(tk.Now())
	require.NoError(t, err)
	tk.Advance(2 * time.Second)
	b.ReleaseAt(p, tk.Now(), rampart.Success) // a slow success: a failed probe in this mode
	require.Equal(t, Open, b.State(), "the slow probe counts as a failure")
	require.Equal(t, 2, fail, "OnFailure for the probe that reopened the breaker (OnSuccess called %d times)", succ)
	require.Zero(t, succ)
	st = b.Stats()
	require.EqualValues(t, 2, st.Failures)
	require.EqualValues(t, 2, st.SlowCalls)
}

// TestHalfOpenConsecutiveRule: in Consecutive mode the default rule reopens
// when min(ConsecutiveFailures, HalfOpenProbes) probes fail, in any order,
// and closes as soon as that has become impossible.
func TestHalfOpenConsecutiveRule(t *testing.T) {
	for _, c := range []struct {
		consecutive int
		outcomes    string
		want        State
		probes      int
	}{
		{1, "sssss", Closed, 5},  // 1: every probe must succeed
		{1, "sssf", Open, 4},     //
		{1, "ssf", Open, 3},      //
		{3, "fsfsf", Open, 5},    // 3 failures, not in a row
		{3, "ffss", HalfOpen, 4}, //
		{3, "ffsss", Closed, 5},  //
		{3, "sss", Closed, 3},    // 2 failures more cannot reach 3
		{5, "s", Closed, 1},      // 5 > 5 probes: only all 5 failing reopens
		{5, "ffff", HalfOpen, 4}, //
		{5, "fffff", Open, 5},    //
		{9, "fffff", Open, 5},    // capped at HalfOpenProbes
	} {
		b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: c.consecutive, OpenDuration: time.Second})
		for range c.consecutive - 1 { // the trip in probeRound is the last of a run
			require.NoError(t, call(t, b, tk, 0, errBoom))
		}
		got, n := probeRound(t, b, tk, c.outcomes)
		require.Equal(t, c.want, got, "%d %s", c.consecutive, c.outcomes)
		require.Equal(t, c.probes, n, "%d %s: probes taken", c.consecutive, c.outcomes)
	}
}

// TestHalfOpenSuccessesOverride: an explicit HalfOpenSuccesses is
// sony/gobreaker's rule (close after that many successes, reopen when that
// is impossible), a slow success counting as a success (a failure in
// Consecutive mode).
func TestHalfOpenSuccessesOverride(t *testing.T) {
	for _, c := range []struct {
		cfg      Config
		outcomes string
		want     State
		probes   int
	}{
		{Config{HalfOpenSuccesses: 5}, "ssssf", Open, 5}, // the old default: all 5
		{Config{HalfOpenSuccesses: 5}, "sssss", Closed, 5},
		{Config{HalfOpenSuccesses: 2}, "ffff", Open, 4},
		{Config{HalfOpenSuccesses: 2}, "fffs", HalfOpen, 4},
		{Config{HalfOpenSuccesses: 2}, "fss", Closed, 3},
		{Config{HalfOpenSuccesses: 2, SlowCallDuration: time.Second}, "ww", Closed, 2}, // slow successes are successes
		{Config{HalfOpenSuccesses: 2, SlowCallDuration: time.Second, SlowCallRateThreshold: 10}, "fww", Closed, 3},
		{Config{Mode: Consecutive, ConsecutiveFailures: 1, HalfOpenSuccesses: 2, SlowCallDuration: time.Second}, "wwww", Open, 4}, // Consecutive: slow is a failure
	} {
		c.cfg.MinimumCalls, c.cfg.OpenDuration = 1, time.Second
		b, tk := newTest(t, c.cfg)
		got, n := probeRound(t, b, tk, c.outcomes)
		require.Equal(t, c.want, got, "%+v %s", c.cfg, c.outcomes)
		require.Equal(t, c.probes, n, "%s: probes taken", c.outcomes)
	}
}

// binomialAtMost is P(X <= k) for X ~ Binomial(n, p).
func binomialAtMost(n, k int, p float64) float64 {
	sum, c := 0.0, 1.0 // c = C(n, i)
	for i := 0; i <= k; i++ {
		sum += c * math.Pow(p, float64(i)) * math.Pow(1-p, float64(n-i))
		c = c * float64(n-i) / float64(i+1)
	}
	return sum
}

// TestHalfOpenRoundCloseProbability: against a dependency whose calls fail
// independently with probability p, a default half-open period (5 probes,
// 50 %) closes with probability P(at most 2 of 5 fail), the figures of the
// package documentation; HalfOpenSuccesses 5 (the former default) needs all
// 5, (1-p)^5.
func TestHalfOpenRoundCloseProbability(t *testing.T) {
	if israce.Enabled {
		t.Skip("sequential and deterministic: -race only makes it slow (run without -race)")
	}
	const rounds = 20_000
	for _, p := range []float64{0.3, 0.35, 0.4, 0.6, 0.8} {
		for _, k := range []int{0, 5} {
			b, tk := newTest(t, Config{HalfOpenSuccesses: k})
			r := rand.New(rand.NewPCG(uint64(p*100), uint64(k)))
			closed := 0
			for range rounds {
				require.True(t, b.TransitionTo(HalfOpen))
				for b.State() == HalfOpen {
					pm, err := b.AcquireAt(tk.Now())
					require.NoError(t, err)
					var e error
					if r.Float64() < p {
						e = errBoom
					}
					b.ReleaseAt(pm, tk.Now(), b.Classify(e))
				}
				if b.State() == Closed {
					closed++
				}
				b.TransitionTo(Open)
			}
			want := binomialAtMost(5, 2, p)
			if k == 5 {
				want = math.Pow(1-p, 5)
			}
			got := float64(closed) / rounds
			t.Logf("p=%.2f HalfOpenSuccesses=%d: closed %.3f of rounds, exact %.3f", p, k, got, want)
			require.InDelta(t, want, got, 0.015, "p=%v HalfOpenSuccesses=%d", p, k)
		}
	}
}

// steadyFailureRun drives a breaker built from cfg (on a ManualTicker) with
// one call every interval, calls calls in a row, each failing independently
// with probability p (math/rand/v2, fixed PCG state), and returns the
// percentage of calls rejected and the half-open periods that closed and
// that reopened.
func steadyFailureRun(t *testing.T, cfg Config, p float64, interval time.Duration, calls int) (rejected float64, closed, reopened int) {
	t.Helper()
	cfg.OnStateChange = func(from, to State) {
		if from == HalfOpen && to == Closed {
			closed++
		} else if from == HalfOpen && to == Open {
			reopened++
		}
	}
	b, tk := newTest(t, cfg)
	r := rand.New(rand.NewPCG(uint64(p*1000), uint64(interval)))
	n := 0
	for range calls {
		tk.Advance(interval)
		pm, err := b.AcquireAt(tk.Now())
		if err != nil {
			n++
			continue
		}
		var e error
		if r.Float64() < p {
			e = errBoom
		}
		b.ReleaseAt(pm, tk.Now(), b.Classify(e))
	}
	return float64(n) * 100 / float64(calls), closed, reopened
}

// TestSteadyFailureRateRejections: a default breaker (100-call window, 50 %,
// 5 probes, open 5 s doubling to 60 s on repeated trips) in front of a
// dependency failing at a steady rate p, called at a fixed interval (one
// call a second, ten, a hundred; 10^6 calls each). Below the threshold it
// rejects under 5 % of the calls at p = 0.3 at every rate and at p = 0.35 up
// to ten calls a second, and at every p below the threshold no more than
// the former defaults (every probe must succeed, 60 s fixed open duration);
// above it (p = 0.6, 0.8) it rejects more than 70 % at every rate. The
// figures it logs are those of the package documentation.
//
// What remains below the threshold are trips of the closed window itself,
// by chance (see the package documentation): each costs an open duration of
// rejections, so the share grows with the call rate.
func TestSteadyFailureRateRejections(t *testing.T) {
	if israce.Enabled {
		t.Skip("sequential and deterministic: -race only makes it slow (run without -race)")
	}
	const calls = 1_000_000
	former := Config{HalfOpenSuccesses: 5, OpenDuration: time.Minute, MaxOpenDuration: time.Minute}
	for _, interval := range []time.Duration{time.Second, 100 * time.Millisecond, 10 * time.Millisecond} {
		for _, p := range []float64{0.3, 0.35, 0.4, 0.6, 0.8} {
			rej, closed, reopened := steadyFailureRun(t, Config{}, p, interval, calls)
			old, oclosed, oreopened := steadyFailureRun(t, former, p, interval, calls)
			t.Logf("every %v, p=%.2f: rejected %.2f %% (half-open closed %d, reopened %d); former defaults: %.2f %% (%d, %d)",
				interval, p, rej, closed, reopened, old, oclosed, oreopened)
			switch {
			case p < 0.5:
				require.LessOrEqual(t, rej, old, "every %v p=%v: the default rejects no more than the former defaults", interval, p)
				if p <= 0.3 || (p <= 0.35 && interval >= 100*time.Millisecond) {
					require.Less(t, rej, 5.0, "every %v p=%v", interval, p)
				}
			default:
				require.Greater(t, rej, 70.0, "every %v p=%v: mostly open", interval, p)
			}
		}
	}
}

// TestWindowSnapshotsStayPossible: the interleavings of racing records that
// leave a window's counters inconsistent for a moment, played step by step,
// never give a snapshot (nor Stats) more failures or slow calls than
// calls, a negative count, or a rate above 100 %.
func TestWindowSnapshotsStayPossible(t *testing.T) {
	possible := func(name string) func(total, fails, slows int64) {
		return func(total, fails, slows int64) {
			t.Helper()
			require.GreaterOrEqual(t, total, int64(0), name)
			require.GreaterOrEqual(t, fails, int64(0), name)
			require.GreaterOrEqual(t, slows, int64(0), name)
			require.LessOrEqual(t, fails, total, "%s: failures ≤ calls", name)
			require.LessOrEqual(t, slows, total, "%s: slow calls ≤ calls", name)
		}
	}

	// Time window: 12 records for tick 0 passed the epoch check and added
	// their call; the bucket is then recycled for tick 4 (one call); their
	// failure and slow adds land after the zeroing.
	tk := rampart.NewManualTicker(0)
	b, err := New(Config{Ticker: tk, Mode: TimeWindow, TimeWindow: 4, Buckets: 4})
	require.NoError(t, err)
	require.True(t, b.TransitionTo(MetricsOnly))
	old := b.tw.bucketFor(0)
	for range 12 {
		old.total.Add(1)
	}
	b.tw.add(4, false, false)
	for range 12 {
		old.fails.Add(1)
		old.slows.Add(1)
	}
	total, fails, slows := b.tw.snapshot(4)
	possible("time window")(total, fails, slows)
	require.Equal(t, int64(1), total)
	tk.Set(4)
	s := b.Stats()
	require.LessOrEqual(t, s.FailureRate, 100.0)
	require.LessOrEqual(t, s.SlowCallRate, 100.0)
	// A record's total add undone by a recycling racing it cannot make a
	// count negative either.
	old.total.Add(-5)
	possible("time window, negative")(b.tw.snapshot(4))

	// Count window of one slot holding a failure: record X swaps it to a
	// success, record Z swaps it back to a failure and applies +1, X's -1
	// is not applied yet: fails 2, total 1.
	var cw countWindow
	h := new(hotWords)
	cw.init(1)
	cw.add(h, codeFail)
	x := cw.swap(0, codeOK)
	cw.apply(h, cw.swap(0, codeFail), codeFail)
	possible("count window")(cw.snapshot(h))
	cw.apply(h, x, codeOK) // X lands: consistent again
	total, fails, _ = cw.snapshot(h)
	require.Equal(t, [2]int64{1, 1}, [2]int64{total, fails})
	// A reset's -1 on total applied before its -1 on fails, and the
	// counters of a record in flight running ahead of n.
	h.total.Add(-1)
	possible("count window, reset in flight")(cw.snapshot(h))
	h.total.Add(3)
	h.slows.Add(5)
	total, fails, slows = cw.snapshot(h)
	possible("count window, ahead")(total, fails, slows)
	require.LessOrEqual(t, total, int64(1), "at most n calls")
}

// TestAcquireRejectsOpenUntilTimerFires: on a real-time NanoTicker, Acquire
// rejects an Open breaker whose open timer has not fired without reading
// the clock, as Do does: the timer alone decides, even with an open
// period that (by the breaker's books) is already over.
func TestAcquireRejectsOpenUntilTimerFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := New(Config{Ticker: rampart.NewNanoTicker(), OpenDuration: time.Second})
		require.NoError(t, err)
		require.True(t, b.TransitionTo(Open))
		b.openUntil.Store(math.MinInt64) // a clock reading would find the period over
		_, err = b.Acquire()
		require.ErrorIs(t, err, ErrOpen, "the timer has not fired: rejected without reading the clock")
		require.Equal(t, Open, b.State())
		require.EqualValues(t, 1, b.Stats().Rejected)
		time.Sleep(time.Second)
		synctest.Wait()
		p, err := b.Acquire()
		require.NoError(t, err, "the timer fired: the clock decides, the first caller probes")
		require.Equal(t, HalfOpen, b.State())
		b.Release(p, rampart.Success)
	})
}

// TestRejectionsWriteOnlyTheirPCounter: a rejection writes one word of
// the breaker, its P's counter, and rejections on two Ps write two
// different cache lines, neither of them the line of the state word (so
// an open breaker's rejections from many goroutines write no shared word).
// Compact counts every rejection in one word of the hot line.
func TestRejectionsWriteOnlyTheirPCounter(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs 2 Ps")
	}
	for _, compact := range []bool{false, true} {
		b, _ := newTest(t, Config{Compact: compact, OpenDuration: time.Hour})
		require.True(t, b.TransitionTo(Open))
		size := unsafe.Sizeof(Breaker{})
		obj := unsafe.Slice((*byte)(unsafe.Pointer(b)), size)
		var lines []byte
		if l := b.perP(); len(l) > 0 {
			lines = unsafe.Slice((*byte)(unsafe.Pointer(&l[0])), uintptr(len(l))*unsafe.Sizeof(hotLine{}))
		}
		// written rejects once on the caller's P and returns the P and
		// the offsets (lines' after the Breaker's) of the bytes it changed.
		written := func() (p int, changed []uintptr) {
			before := append(append([]byte(nil), obj...), lines...)
			p = procPin() // nested in countRejection's own pin: one P throughout
			_, err := b.AcquireAt(0)
			after := append(append([]byte(nil), obj...), lines...)
			procUnpin()
			require.ErrorIs(t, err, ErrOpen)
			for i := range before {
				if before[i] != after[i] {
					changed = append(changed, uintptr(i))
				}
			}
			return p, changed
		}
		lineOf := map[int]uintptr{}
		n := 0
		for ; n < 10000 && len(lineOf) < 2; n++ {
			var p int
			var changed []uintptr
			ch := make(chan struct{})
			go func() { // a fresh goroutine: the scheduler may run it on another P
				defer close(ch)
				p, changed = written()
			}()
			<-ch
			require.NotEmpty(t, changed)
			first := changed[0] / pad.LineSize
			for _, c := range changed {
				require.Equal(t, first, c/pad.LineSize, "one rejection writes one line")
			}
			require.NotEqual(t, uintptr(0), first, "not the state word's line")
			if compact {
				require.Equal(t, unsafe.Offsetof(b.hot)/pad.LineSize, first, "Compact: the hot line")
			}
			lineOf[p] = first
		}
		require.EqualValues(t, n, b.Stats().Rejected, "compact %v", compact)
		if compact {
			continue
		}
		if len(lineOf) < 2 {
			t.Skip("the goroutines all ran on one P")
		}
		var got []uintptr
		for _, l := range lineOf {
			got = append(got, l)
		}
		require.NotEqual(t, got[0], got[1], "rejections on two Ps write two lines")
	}
}

// TestBreakerLayout: the hot line is the last cache lines of the Breaker,
// and the allocator places every Breaker (and every per-P counter) on a
// line boundary, so that the words records write share no line with the
// state word and the configuration that every call reads. The placement
// holds only where a Breaker gets no malloc header (alignedByAllocator):
// not on 32-bit platforms nor on s390x (256 B lines), where it is skipped.
func TestBreakerLayout(t *testing.T) {
	require.Zero(t, unsafe.Sizeof(Breaker{})%pad.LineSize)
	require.Zero(t, unsafe.Sizeof(hotLine{})%pad.LineSize)
	require.Equal(t, unsafe.Sizeof(Breaker{})-unsafe.Sizeof(hotLine{}), unsafe.Offsetof(Breaker{}.hot))
	if !alignedByAllocator {
		t.Skipf("a %d B Breaker gets a malloc header on %s: the allocator does not align it", unsafe.Sizeof(Breaker{}), runtime.GOARCH)
	}
	for range 100 {
		b, err := New(Config{})
		require.NoError(t, err)
		b.TransitionTo(ForcedOpen) // allocates the per-P counters
		require.Zero(t, uintptr(unsafe.Pointer(&b.hot))%pad.LineSize)
		for i := range b.perP() {
			require.Zero(t, uintptr(unsafe.Pointer(&b.perP()[i]))%pad.LineSize)
		}
	}
}

// TestTripOutsideABubbleAfterATripInsideIsNotFatal: a breaker on the
// default clock whose first trip happens inside a testing/synctest bubble
// trips again outside it without touching a timer of the bubble (the
// runtime kills the process on "reset of synctest timer from outside
// bubble"). The trips run in a child process, so that a fatal error fails
// this test instead of killing the test binary.
func TestTripOutsideABubbleAfterATripInsideIsNotFatal(t *testing.T) {
	const child = "CIRCUITBREAKER_TRIP_ACROSS_BUBBLE"
	if os.Getenv(child) == "1" {
		b, err := New(Config{})
		require.NoError(t, err)
		synctest.Test(t, func(t *testing.T) { b.TransitionTo(Open) })
		b.TransitionTo(Closed)
		b.TransitionTo(Open)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTripOutsideABubbleAfterATripInsideIsNotFatal$", "-test.count=1")
	cmd.Env = append(os.Environ(), child+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		i := max(strings.Index(string(out), "fatal error"), 0)
		t.Fatalf("the child died: %v\n%s", err, string(out)[i:min(i+300, len(out))])
	}
}

// TestShorthandsReadTheClockAfterATripInsideABubble: a breaker whose open
// timer was built by a trip outside a testing/synctest bubble, tripped
// again inside one, does not arm that real timer against the bubble's
// clock: the period counts as over for the shorthands, which read the
// clock and admit once the reading says so (here at once: the bubble's
// readings of a ticker made outside are decades behind), as AcquireAt does.
func TestShorthandsReadTheClockAfterATripInsideABubble(t *testing.T) {
	b, err := New(Config{OpenDuration: 10 * ms, MaxOpenDuration: 10 * ms})
	require.NoError(t, err)
	require.True(t, b.TransitionTo(Open)) // builds a real timer
	require.True(t, b.TransitionTo(Closed))
	synctest.Test(t, func(t *testing.T) { require.True(t, b.TransitionTo(Open)) })
	_, aerr := b.AcquireAt(b.Ticker().Now())
	require.NoError(t, aerr, "AcquireAt: the period is over by the clock")
	require.True(t, b.TransitionTo(Open))
	require.True(t, b.TransitionTo(Closed))
	synctest.Test(t, func(t *testing.T) { require.True(t, b.TransitionTo(Open)) })
	require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }),
		"Do: the period is over by the clock")
}

// TestStaleOpenTimerFireKeepsTheNewerExpiry: an open timer's fire for an
// older Open word W1, descheduled between its loads and its store (a fire
// runs on its own goroutine), that resumes after the breaker went W1 →
// HalfOpen → Open W3 and W3's timer fired, leaves W3 expired: a stale fire
// never puts back an older word (the shorthands would reject for good).
func TestStaleOpenTimerFireKeepsTheNewerExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := New(Config{Ticker: rampart.NewNanoTicker(), Mode: Consecutive, ConsecutiveFailures: 1,
			OpenDuration: ms, MaxOpenDuration: ms, HalfOpenProbes: 1})
		require.NoError(t, err)
		require.True(t, b.TransitionTo(Open)) // W1
		h := b.hint
		old, w1 := h.expired.Load(), h.word.Load() // the stale fire's loads
		time.Sleep(ms)
		synctest.Wait() // W1's timer fired
		p, err := b.AcquireAt(b.Ticker().Now())
		require.NoError(t, err) // W1 → HalfOpen
		b.ReleaseAt(p, b.Ticker().Now(), rampart.Failure)
		require.Equal(t, Open, b.State()) // W3, its timer armed
		w3 := b.state.Load()
		time.Sleep(ms)
		synctest.Wait() // W3's timer fired
		require.Equal(t, w3, h.expired.Load())
		h.store(old, w1) // the stale fire resumes
		require.Equal(t, w3, h.expired.Load(), "a stale fire put back an older word")
		require.NoError(t, b.Do(context.Background(), func(context.Context) error { return nil }))
	})
}

// TestRejectionsBeyondEightPsWriteNoSharedWord: with more Ps than per-P
// counters (16 Ps, 8 counters), the rejections of the Ps beyond are
// striped over spare words of the per-P lines, not added to one word
// that every such P writes, and every rejection is counted exactly.
func TestRejectionsBeyondEightPsWriteNoSharedWord(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(16))
	b, _ := newTest(t, Config{OpenDuration: time.Hour})
	require.True(t, b.TransitionTo(Open))
	require.Len(t, b.perP(), maxLines)
	const G, N = 32, 2000
	var beyond sync.Map // Ps >= 8 that rejected
	var wg sync.WaitGroup
	for range G {
		wg.Go(func() {
			for range N {
				p := procPin() // nested in countRejection's own pin: one P throughout
				_, err := b.AcquireAt(0)
				procUnpin()
				require.ErrorIs(t, err, ErrOpen)
				if p > maxLines {
					beyond.Store(p, true)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, G*N, b.Stats().Rejected)
	require.Zero(t, b.rejected.Load(), "the shared word")
	n := 0
	beyond.Range(func(any, any) bool { n++; return true })
	if n == 0 {
		t.Skip("the scheduler ran no goroutine on a P beyond the eighth")
	}
}

// TestCountStatsCountsEverySuccess: with CountStats, Stats.Successes counts
// every Success released, in each mode and layout: ReleaseAt's healthy
// fast path, Do's and Call's, a half-open probe, a metrics-only and a
// disabled breaker's, a stale permit's; failures and ignored results are
// not successes. Without CountStats it stays 0.
func TestCountStatsCountsEverySuccess(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	for _, mode := range []Mode{CountWindow, TimeWindow, Consecutive} {
		for _, compact := range []bool{false, true} {
			for _, counted := range []bool{false, true} {
				b, tk := newTest(t, Config{Mode: mode, Compact: compact, CountStats: counted, WindowSize: 4, MinimumCalls: 4,
					ConsecutiveFailures: 3, HalfOpenProbes: 2, OpenDuration: time.Second})
				succeed := func() {
					p, err := b.AcquireAt(tk.Now())
					require.NoError(t, err)
					b.ReleaseAt(p, tk.Now(), rampart.Success)
				}
				for range 6 { // past a full window: the fast path that writes nothing
					succeed()
				}
				require.NoError(t, b.Do(ctx, ok))
				_, err := Call(ctx, b, func(context.Context) (int, error) { return 1, nil })
				require.NoError(t, err)
				p, _ := b.Acquire()
				b.Release(p, rampart.Success)
				p, _ = b.Acquire()
				b.Release(p, rampart.Ignored) // not a success
				require.Error(t, b.Do(ctx, func(context.Context) error { return errBoom }))
				stale, _ := b.AcquireAt(tk.Now())
				b.TransitionTo(HalfOpen)
				b.ReleaseAt(stale, tk.Now(), rampart.Success) // stale: counted as a success and a stale result
				succeed()                                     // a probe
				b.TransitionTo(MetricsOnly)
				succeed()
				b.TransitionTo(Disabled)
				require.NoError(t, b.Do(ctx, ok))
				s := b.Stats()
				want := uint64(0)
				if counted {
					want = 13
				}
				require.Equal(t, want, s.Successes, "%v compact=%v CountStats=%v", mode, compact, counted)
				require.EqualValues(t, 1, s.StaleResults)
			}
		}
	}
}

// TestCountStatsCountsASlowConsecutiveSuccessOnce: in Consecutive mode a
// slow success is recorded as a failure, so CountStats counts it in
// Failures and not in Successes: one result, one count. A fast success,
// and a slow one whose permit is stale or released to a Disabled breaker
// (no failure recorded), is a success.
func TestCountStatsCountsASlowConsecutiveSuccessOnce(t *testing.T) {
	for _, compact := range []bool{false, true} {
		b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 5, SlowCallDuration: 10 * ms, CountStats: true, Compact: compact})
		require.NoError(t, call(t, b, tk, 20*ms, nil)) // slow: a failure
		require.NoError(t, call(t, b, tk, ms, nil))    // fast: a success
		s := b.Stats()
		require.Equal(t, [2]uint64{1, 1}, [2]uint64{s.Successes, s.Failures}, "compact=%v: Successes, Failures", compact)

		stale, _ := b.AcquireAt(tk.Now())
		b.TransitionTo(MetricsOnly)
		tk.Advance(20 * ms)
		b.ReleaseAt(stale, tk.Now(), rampart.Success) // stale: a success released, no failure recorded
		b.TransitionTo(Disabled)
		require.NoError(t, call(t, b, tk, 20*ms, nil)) // Disabled records no failure
		s = b.Stats()
		require.Equal(t, [3]uint64{3, 1, 1}, [3]uint64{s.Successes, s.Failures, s.StaleResults}, "compact=%v: Successes, Failures, StaleResults", compact)
	}
}

// TestCountStatsCountsStaleSuccessesNotStaleFailures: what the docs of
// Config.CountStats and Stats.Successes say: a stale Success is counted in
// Successes (and StaleResults), a stale Failure only in StaleResults.
func TestCountStatsCountsStaleSuccessesNotStaleFailures(t *testing.T) {
	b, tk := newTest(t, Config{Mode: Consecutive, ConsecutiveFailures: 1, CountStats: true})
	p1, _ := b.AcquireAt(tk.Now())
	p2, _ := b.AcquireAt(tk.Now())
	p3, _ := b.AcquireAt(tk.Now())
	b.ReleaseAt(p1, tk.Now(), rampart.Failure) // trips: p2, p3 are stale
	b.ReleaseAt(p2, tk.Now(), rampart.Success)
	b.ReleaseAt(p3, tk.Now(), rampart.Failure)
	s := b.Stats()
	require.Equal(t, [3]uint64{1, 1, 2}, [3]uint64{s.Successes, s.Failures, s.StaleResults}, "Successes, Failures, StaleResults")
}
