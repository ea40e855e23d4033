package adaptive

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestThrottlerFormula: a backend that accepts 100 calls/s under an offered
// 1000 calls/s makes the throttler reject locally with the SRE probability
// (requests − 2·accepts)/(requests + 1) → 0.8; when the backend accepts
// everything again, the probability returns to 0 within a window.
func TestThrottlerFormula(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	th, err := NewThrottler(ThrottlerConfig{Window: 10 * time.Second, Ticker: tk})
	require.NoError(t, err)
	const offered = 1000 // per second, one every ms
	capacity := 100      // accepts per second
	var sent, local, acceptedThisSecond int
	run := func(d time.Duration) {
		sent, local = 0, 0
		for range int(d / time.Millisecond) {
			now := tk.Advance(time.Millisecond)
			if now%int64(time.Second) == 0 {
				acceptedThisSecond = 0
			}
			if !th.AllowAt(now) {
				local++
				continue
			}
			sent++
			ok := acceptedThisSecond < capacity
			if ok {
				acceptedThisSecond++
			}
			th.RecordAt(now, ok)
		}
	}
	run(20 * time.Second) // fill the window
	run(20 * time.Second)
	frac := float64(local) / float64(local+sent)
	want := (offered - 2.0*float64(capacity)) / offered
	t.Logf("backend at 10%% of the offered load: local rejections %.3f (formula %.3f), probability now %.3f", frac, want, th.ProbabilityAt(tk.Now()))
	require.InDelta(t, want, frac, 0.05)
	require.Equal(t, ThrottlerStats{}.Rejected, uint64(0)) // (type sanity)
	st := th.Stats()
	require.NotZero(t, st.Rejected)
	require.InDelta(t, want, st.Probability, 0.1)

	// Everything rejected: the probability reaches the cap (0.9).
	capacity = 0
	run(20 * time.Second)
	require.InDelta(t, 0.9, th.ProbabilityAt(tk.Now()), 1e-9)
	require.InDelta(t, 0.9, float64(local)/float64(local+sent), 0.03)

	// Recovery: measure how long until no call is rejected locally.
	capacity = math.MaxInt
	secs := 0
	for ; secs < 60; secs++ {
		run(time.Second)
		if local == 0 {
			break
		}
	}
	t.Logf("recovery after total refusal: no local rejection after %d s (window 10 s)", secs)
	require.Less(t, secs, 30)

	// Without a cap the formula alone: p tends to 1 − 1/(requests+1).
	th2, err := NewThrottler(ThrottlerConfig{MaxProbability: 1, Ticker: tk})
	require.NoError(t, err)
	for range 10000 {
		now := tk.Advance(time.Millisecond)
		if th2.AllowAt(now) {
			th2.RecordAt(now, false)
		}
	}
	require.Greater(t, th2.ProbabilityAt(tk.Now()), 0.99)
}

// TestThrottlerRateNotOneFailure: the throttler is drop-based by design, on
// a ratio: a backend that fails (times out, refuses) 0.05 %, 1 % or even
// 40 % of the calls is never throttled locally at the default K = 2 (the
// probability stays 0 while accepts exceed requests/K); only past 50 %
// failures does it start.
func TestThrottlerRateNotOneFailure(t *testing.T) {
	for _, c := range []struct {
		fail      float64 // fraction of the calls not accepted, spread evenly
		throttled bool
	}{{0, false}, {0.0005, false}, {0.01, false}, {0.4, false}, {0.7, true}} {
		tk := rampart.NewManualTicker(0)
		th, err := NewThrottler(ThrottlerConfig{Ticker: tk})
		require.NoError(t, err)
		var local int
		for i := range 30_000 { // 30 s at 1000 calls/s: three windows
			now := tk.Advance(time.Millisecond)
			if !th.AllowAt(now) {
				local++
				continue
			}
			failed := int(float64(i+1)*c.fail) != int(float64(i)*c.fail)
			th.RecordAt(now, !failed)
		}
		if c.throttled {
			require.NotZero(t, local, "failures %v", c.fail)
		} else {
			require.Zero(t, local, "failures %v", c.fail)
		}
	}
}

func TestThrottlerCapAndDo(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	th, err := NewThrottler(ThrottlerConfig{MaxProbability: 0.5, K: 1, Buckets: 4, Window: time.Second, Ticker: tk})
	require.NoError(t, err)
	boom := context.DeadlineExceeded
	for range 1000 {
		_ = th.Do(context.Background(), func(context.Context) error { return boom })
	}
	require.InDelta(t, 0.5, th.ProbabilityAt(tk.Now()), 1e-9)
	errUser := errors.New("user")
	rejected := 0
	for range 1000 {
		err := th.Do(context.Background(), func(context.Context) error { return errUser })
		if errors.Is(err, ErrThrottled) {
			require.ErrorIs(t, err, rampart.ErrRejected)
			rejected++
		} else {
			require.Same(t, errUser, err)
		}
	}
	require.Greater(t, rejected, 0)
	v, err := Throttle(context.Background(), th, func(context.Context) (int, error) { return 3, nil })
	if err == nil {
		require.Equal(t, 3, v)
	} else {
		require.Same(t, th.RejectedError(), err)
	}
}

func TestThrottlerConcurrent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	th, err := NewThrottler(ThrottlerConfig{Ticker: tk, Window: time.Second, Buckets: 10})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				now := tk.Now()
				if th.AllowAt(now) {
					th.RecordAt(now, true)
				}
				if g == 0 && i%100 == 0 {
					tk.Advance(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	st := th.Stats()
	require.Equal(t, st.Requests, st.Accepted) // nothing lost in bucket resets
	require.Zero(t, st.Rejected)
}

func TestAllocsThrottler(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	th, err := NewThrottler(ThrottlerConfig{Ticker: tk})
	require.NoError(t, err)
	testkit.WantAllocs(t, "AllowAt + RecordAt", 0, func() {
		now := tk.Advance(time.Millisecond)
		if th.AllowAt(now) {
			th.RecordAt(now, false)
		}
	})
}

func FuzzConfig(f *testing.F) {
	f.Add(20, 1, 1000, int64(time.Second), 10, 0.5, 3.0, 6.0, 1.5, 2.0, 10)
	f.Add(-1, 0, 0, int64(0), 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
	f.Fuzz(func(t *testing.T, initial, minL, maxL int, window int64, samples int, share, alpha, beta, tol, k float64, buckets int) {
		tk := rampart.NewManualTicker(0)
		for _, alg := range []Algorithm{AIMD{Backoff: share}, Vegas{Alpha: alpha, Beta: beta}, Gradient2{Tolerance: tol}} {
			l, err := New(Config{Algorithm: alg, InitialLimit: initial, MinLimit: minL, MaxLimit: maxL,
				Window: time.Duration(window), MinWindowSamples: samples, Partitions: []Partition{{Share: share}}, Ticker: tk})
			if err != nil {
				require.ErrorIs(t, err, rampart.ErrInvalidConfig)
				continue
			}
			for i := range 200 {
				now := int64(i) * 1000
				tok, ok := admitted(l.AcquirePartitionAt(now, i%2))
				if ok {
					l.ReleaseAt(tok, now+int64(i%7)*100, rampart.Result(i%3))
				}
				lim := l.Limit()
				require.GreaterOrEqual(t, lim, max(minL, 1))
				if maxL > 0 {
					require.LessOrEqual(t, lim, maxL)
				}
			}
			require.Zero(t, l.InFlight())
		}
		th, err := NewThrottler(ThrottlerConfig{K: k, Window: time.Duration(window), Buckets: buckets, MaxProbability: share, Ticker: tk})
		if err != nil {
			require.ErrorIs(t, err, rampart.ErrInvalidConfig)
			return
		}
		for i := range 100 {
			if th.AllowAt(int64(i)) {
				th.RecordAt(int64(i), i%3 == 0)
			}
			p := th.ProbabilityAt(int64(i))
			require.True(t, p >= 0 && p <= 1)
		}
	})
}

// Readings near both ends of the int64 range and a window of one huge
// bucket neither panic nor give a probability outside [0, MaxProbability].
func TestThrottlerExtremeReadings(t *testing.T) {
	for _, c := range []ThrottlerConfig{
		{Window: time.Duration(math.MaxInt64), Buckets: 1},
		{Window: time.Duration(math.MaxInt64), Buckets: 1024},
		{Window: 2048, Buckets: 1024, MinRequests: -1},
	} {
		tk := rampart.NewManualTicker(0)
		c.Ticker = tk
		th, err := NewThrottler(c)
		require.NoError(t, err)
		for _, now := range []int64{math.MinInt64, -1, 0, math.MaxInt64 / 2, math.MaxInt64 - 1, math.MaxInt64} {
			for range 20 {
				if th.AllowAt(now) {
					th.RecordAt(now, false)
				}
			}
			p := th.ProbabilityAt(now)
			require.True(t, p >= 0 && p <= 0.9, "p = %v", p)
		}
		tk.Set(math.MaxInt64)
		st := th.Stats()
		require.LessOrEqual(t, st.Accepted, st.Requests)
	}
}

// With buckets of 1 ns (legal: NewThrottler asks for at least one
// nanosecond per bucket) a reading of math.MaxInt64, the epoch
// math.MaxInt64, neither loops nor indexes a bucket out of range in AllowAt,
// RecordAt or Stats.
func TestThrottlerOneNanoBucketAtMaxInt64(t *testing.T) {
	tk := rampart.NewManualTicker(math.MaxInt64 - 5)
	th, err := NewThrottler(ThrottlerConfig{Window: 1024, Buckets: 1024, Ticker: tk})
	require.NoError(t, err)
	require.True(t, th.AllowAt(tk.Now()))
	th.RecordAt(tk.Now(), true)
	tk.Set(math.MaxInt64)
	require.NotPanics(t, func() {
		if th.AllowAt(math.MaxInt64) {
			th.RecordAt(math.MaxInt64, true)
		}
	})
	require.NotPanics(t, func() { _ = th.Stats() })
}
