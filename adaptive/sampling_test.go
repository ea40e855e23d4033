package adaptive

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// sampledLimiter returns a limiter with a fixed limit of 1000, 1 ms windows
// of at least 10 samples (so a sample target T of 128 while few calls are in
// flight) on a manual ticker, a fixed sampling seed (deterministic picks),
// and the Samples its windows produced.
func sampledLimiter(t *testing.T, extra func(*Config)) (*Limiter, *rampart.ManualTicker, *[]Sample) {
	t.Helper()
	var got []Sample
	tk := rampart.NewManualTicker(0)
	c := Config{
		Algorithm:    algFunc(func(s Sample) float64 { got = append(got, s); return s.Limit }),
		InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000,
		Window: time.Millisecond, MinWindowSamples: 10, Ticker: tk,
	}
	if extra != nil {
		extra(&c)
	}
	l, err := New(c)
	require.NoError(t, err)
	l.seed = 0
	return l, tk, &got
}

// callsUntilClose runs sequential Acquire/Release calls of rtt each (the ticker
// moves by rtt during each call) until a window closes, and returns the
// number of calls and how many were sampled.
func callsUntilClose(t *testing.T, l *Limiter, tk *rampart.ManualTicker, rtt time.Duration) (calls, sampled int) {
	t.Helper()
	w := l.Stats().Windows
	for l.Stats().Windows == w {
		tok, ok := admitted(l.Acquire())
		require.True(t, ok)
		if tok.Sampled() {
			sampled++
		}
		tk.Advance(rtt)
		l.Release(tok, rampart.Success)
		calls++
		require.Less(t, calls, 10_000_000, "the window never closed")
	}
	return calls, sampled
}

func TestSamplingConfig(t *testing.T) {
	for _, v := range []int{-1, 3, 96, 2048} {
		_, err := New(Config{MaxSampleStride: v})
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, "MaxSampleStride %d", v)
	}
	for _, v := range []int{0, 1, 2, 64, 1024} {
		l, err := New(Config{MaxSampleStride: v})
		require.NoError(t, err, "MaxSampleStride %d", v)
		require.Equal(t, 1, l.Stats().Stride, "the first window starts timing every call")
	}
}

// TestSamplingStrideFollowsRate: at a high rate the stride grows within the
// first window (to the cap) and settles where each window carries T..2T
// samples; when the rate falls it shrinks, down to timing every call.
func TestSamplingStrideFollowsRate(t *testing.T) {
	l, tk, got := sampledLimiter(t, func(c *Config) { c.MaxSampleStride = 1024 })
	// 100,000 calls per 1 ms window.
	calls, sampled := callsUntilClose(t, l, tk, 10)
	require.GreaterOrEqual(t, calls, 100_000)
	require.Less(t, sampled, calls/20, "the stride grew within the first window")
	require.Equal(t, 512, l.Stats().Stride, "100,000 calls / T 128 → 781 → 512")
	for range 3 {
		callsUntilClose(t, l, tk, 10)
		s := (*got)[len(*got)-1]
		require.GreaterOrEqual(t, s.Samples, int64(128*8/10), "about T..2T samples per window")
		require.Less(t, s.Samples, int64(2*128*12/10))
		require.InDelta(t, 100_000, float64(s.Count), 100_000*0.2, "Count estimates every success")
		require.Equal(t, time.Duration(10), s.AvgRTT)
	}
	// 1,000 calls per window: 1000/128 → stride 4. (The window that
	// spans the change overruns its end by up to 512 calls, the wait for
	// its first sample past the end: 8 or 4 after it.)
	callsUntilClose(t, l, tk, 1000)
	require.Contains(t, []int{4, 8}, l.Stats().Stride)
	callsUntilClose(t, l, tk, 1000)
	require.Equal(t, 4, l.Stats().Stride)
	callsUntilClose(t, l, tk, 1000)
	require.Equal(t, 4, l.Stats().Stride)
	// 100 calls per window: every call timed.
	callsUntilClose(t, l, tk, 10_000)
	require.Equal(t, 1, l.Stats().Stride)
	calls, sampled = callsUntilClose(t, l, tk, 10_000)
	require.Equal(t, calls, sampled)
	s := (*got)[len(*got)-1]
	require.Equal(t, s.Count, s.Samples)
	require.Equal(t, time.Duration(10_000), s.AvgRTT)
	require.Equal(t, time.Duration(10_000), s.MinRTT)

	// The default cap is 64.
	l2, tk2, _ := sampledLimiter(t, nil)
	callsUntilClose(t, l2, tk2, 10)
	require.Equal(t, 64, l2.Stats().Stride)
}

// TestSamplingEveryCall: MaxSampleStride 1 times every call, at any rate.
func TestSamplingEveryCall(t *testing.T) {
	l, tk, got := sampledLimiter(t, func(c *Config) { c.MaxSampleStride = 1 })
	for range 3 {
		calls, sampled := callsUntilClose(t, l, tk, 10)
		require.Equal(t, calls, sampled)
		require.Equal(t, 1, l.Stats().Stride)
	}
	s := (*got)[len(*got)-1]
	require.Equal(t, s.Count, s.Samples)
}

// TestSamplingDropsAlwaysCounted: at stride 64 every Failure release counts,
// sampled or not, and a drop past the window's end closes it.
func TestSamplingDropsAlwaysCounted(t *testing.T) {
	l, tk, got := sampledLimiter(t, nil)
	callsUntilClose(t, l, tk, 10)
	require.Equal(t, 64, l.Stats().Stride)
	drops, unsampled := 0, 0
	for i := range 5000 {
		tok, _ := l.Acquire()
		tk.Advance(10)
		if i%10 == 0 {
			drops++
			if !tok.Sampled() {
				unsampled++
			}
			l.Release(tok, rampart.Failure)
		} else {
			l.Release(tok, rampart.Success)
		}
	}
	require.Greater(t, unsampled, drops/2, "most drops were not RTT samples")
	// The window (1 ms = 100,000 ns) is not over: no window closed yet.
	n := len(*got)
	require.Equal(t, n, int(l.Stats().Windows))
	// An unsampled drop past the end closes the window.
	tk.Advance(time.Millisecond)
	for {
		tok, _ := l.Acquire()
		if tok.Sampled() {
			l.Release(tok, rampart.Ignored)
			continue
		}
		drops++
		l.Release(tok, rampart.Failure)
		break
	}
	require.Len(t, *got, n+1, "the drop closed the window")
	require.Equal(t, int64(drops), (*got)[n].Drops)
	require.Equal(t, uint64(drops), l.Stats().Drops)
	require.Less(t, unsampled, drops, "some drops were RTT samples")
	require.Equal(t, time.Duration(10), (*got)[n].DropRTT, "the sampled drops' RTT (every call took 10 ns)")
}

// TestSamplingWindowClosesAfterRateFalls: a window at stride 64 that sees
// only a few calls before its end still closes soon after: the first
// sampled release past the end drops the stride to 1.
func TestSamplingWindowClosesAfterRateFalls(t *testing.T) {
	l, tk, _ := sampledLimiter(t, nil)
	callsUntilClose(t, l, tk, 10)
	require.Equal(t, 64, l.Stats().Stride)
	for range 50 { // a few calls: about one sample
		tok, _ := l.Acquire()
		tk.Advance(10)
		l.Release(tok, rampart.Success)
	}
	tk.Advance(time.Millisecond) // the window is due, without its 10 samples
	w := l.Stats().Windows
	calls, firstSampled := 0, -1
	for l.Stats().Windows == w {
		tok, _ := l.Acquire()
		if tok.Sampled() && firstSampled < 0 {
			firstSampled = calls
		}
		tk.Advance(10)
		l.Release(tok, rampart.Success)
		calls++
		if firstSampled >= 0 && calls == firstSampled+1 && l.Stats().Windows == w {
			require.Equal(t, 1, l.Stats().Stride, "short of samples past the end: every call timed")
		}
		require.Less(t, calls, 64*20, "the window never closed")
	}
	require.LessOrEqual(t, calls, firstSampled+1+10, "closed within MinWindowSamples calls of the first sample past the end")
}

// TestSamplingWeightedMean: the stride grows within the first window while
// latency climbs; weighting each sample by its stride keeps the window mean
// close to the mean of every call (unweighted, the early, fast calls that
// were all timed would drag it far down).
func TestSamplingWeightedMean(t *testing.T) {
	l, tk, got := sampledLimiter(t, nil)
	var sum, n float64
	for i := 0; l.Stats().Windows == 0; i++ {
		tok, _ := l.Acquire()
		rtt := time.Duration(1 + i/50)
		tk.Advance(rtt)
		sum += float64(rtt)
		n++
		l.Release(tok, rampart.Success)
	}
	s := (*got)[0]
	require.Less(t, s.Samples, int64(n)/4, "the stride grew within the window")
	require.InDelta(t, sum/n, float64(s.AvgRTT), 0.05*sum/n, "weighted mean %d vs true %.1f", s.AvgRTT, sum/n)
	require.InDelta(t, n, float64(s.Count), 0.1*n)
}

// TestSamplingNotAliased: a workload alternating two kinds of call on one
// goroutine has both kinds sampled alike (the pick hashes the sequence
// number instead of taking every 64th call).
func TestSamplingNotAliased(t *testing.T) {
	l, _, _ := sampledLimiter(t, nil)
	l.seed = 12345
	l.stride.Store(63)
	var kinds [2]int
	for i := range 64 * 1024 {
		tok, _ := l.Acquire()
		if tok.Sampled() {
			kinds[i%2]++
		}
		l.Release(tok, rampart.Ignored)
	}
	for k, n := range kinds {
		require.InDelta(t, 512, n, 150, "kind %d sampled %d times of 32768", k, n)
	}
}

// TestSamplingTokens: Acquire tokens released with ReleaseAt, AcquireAt tokens
// released with Release, AcquirePartition, and the slot word's wrapping sequence.
func TestSamplingTokens(t *testing.T) {
	l, tk, got := sampledLimiter(t, func(c *Config) { c.MinWindowSamples = 1 })
	l.stride.Store(1<<20 - 1) // effectively never sampled, until a window closes
	tok, ok := admitted(l.Acquire())
	require.True(t, ok)
	require.False(t, tok.Sampled())
	require.Zero(t, tok.start)
	l.ReleaseAt(tok, tk.Now()+5, rampart.Success) // unsampled: frees the slot, no RTT
	require.Equal(t, 0, l.InFlight())
	a, _ := l.AcquireAt(tk.Now())
	require.True(t, a.Sampled())
	tk.Advance(7)
	tk.Advance(time.Millisecond)
	l.Release(a, rampart.Success) // reads the clock: an RTT of 1 ms + 7 ns, closes the window
	require.Len(t, *got, 1)
	require.Equal(t, int64(1), (*got)[0].Samples)
	require.Equal(t, time.Duration(time.Millisecond+7), (*got)[0].AvgRTT)

	// AcquirePartition without partitions is Acquire; with them it counts the
	// partition, and Release frees it.
	p, ok := admitted(l.AcquirePartition(3))
	require.True(t, ok)
	l.Release(p, rampart.Success)
	lp, _, _ := sampledLimiter(t, func(c *Config) {
		c.InitialLimit, c.MinLimit, c.MaxLimit = 4, 4, 4
		c.Partitions = []Partition{{Share: 0.5}, {Share: 0.5}}
	})
	var toks []Permit
	for {
		tok, ok := admitted(lp.AcquirePartition(7)) // out of range: the last partition
		if !ok {
			break
		}
		toks = append(toks, tok)
	}
	require.Len(t, toks, 4)
	require.Equal(t, 4, lp.PartitionInFlight(1))
	for _, tok := range toks {
		lp.Release(tok, rampart.Success)
	}
	require.Equal(t, 0, lp.PartitionInFlight(1))
	require.Equal(t, 0, lp.InFlight())
	require.Equal(t, uint64(1), lp.Stats().Rejected)

	// The admission sequence wraps without touching the in-flight count.
	l.slots.Store(-1 << 32) // admissions 2^32−1: the next one wraps to 0
	x, _ := l.Acquire()
	y, _ := l.Acquire()
	require.Equal(t, 2, l.InFlight())
	require.Equal(t, uint32(1), seqOf(l.slots.Load()))
	l.Release(x, rampart.Ignored)
	l.Release(y, rampart.Ignored)
	require.Equal(t, 0, l.InFlight())
}

// TestSamplingDoCall: Do and Call read the clock only for sampled calls.
func TestSamplingDoCall(t *testing.T) {
	l, tk, got := sampledLimiter(t, nil)
	fn := func(context.Context) error { tk.Advance(10); return nil }
	for l.Stats().Windows < 2 {
		require.NoError(t, l.Do(context.Background(), fn))
		_, err := Call(context.Background(), l, func(context.Context) (int, error) { tk.Advance(10); return 1, nil })
		require.NoError(t, err)
	}
	require.Equal(t, 64, l.Stats().Stride)
	s := (*got)[1]
	require.Less(t, s.Samples, s.Count/16)
	require.Equal(t, time.Duration(10), s.AvgRTT)
	require.Equal(t, 0, l.InFlight())
}

// TestStressSampled: many goroutines Acquire/Release (and AcquirePartition) while
// windows move the limit and the stride; the calls admitted never exceed
// the highest limit published (partitions: plus the borrowed calls, see
// TestStress), every drop is counted, and no slot leaks.
func TestStressSampled(t *testing.T) {
	for _, parts := range []bool{false, true} {
		tk := rampart.NewManualTicker(0)
		var highest atomic.Int64
		highest.Store(4)
		c := Config{
			Algorithm: AIMD{}, InitialLimit: 4, MinLimit: 2, MaxLimit: 6,
			Window: 2000, MinWindowSamples: 1, Ticker: tk,
			OnLimitChange: func(_, n int) {
				for {
					h := highest.Load()
					if int64(n) <= h || highest.CompareAndSwap(h, int64(n)) {
						return
					}
				}
			},
		}
		bound := int64(1)
		if parts {
			c.Partitions = []Partition{{Share: 0.5}, {Share: 0.5}}
			bound = 2
		}
		l, err := New(c)
		require.NoError(t, err)
		var active, worst, drops, sampled, calls atomic.Int64
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 4000 {
					var tok Permit
					var ok bool
					if parts {
						tok, ok = admitted(l.AcquirePartition(g % 2))
					} else {
						tok, ok = admitted(l.Acquire())
					}
					if !ok {
						continue
					}
					calls.Add(1)
					if tok.Sampled() {
						sampled.Add(1)
					}
					if a := active.Add(1); a > bound*highest.Load() {
						worst.Store(a)
					}
					if (i+g)%5 == 0 {
						tk.Advance(10)
					}
					active.Add(-1)
					o := rampart.Success
					switch {
					case (i+g)%2003 == 0:
						o = rampart.Failure
						drops.Add(1)
					case (i+g)%13 == 0:
						o = rampart.Ignored
					}
					l.Release(tok, o)
				}
			})
		}
		wg.Wait()
		require.Zero(t, worst.Load(), "admitted beyond the highest limit (partitions %v)", parts)
		require.Equal(t, 0, l.InFlight())
		require.Equal(t, 0, l.PartitionInFlight(0)+l.PartitionInFlight(1))
		st := l.Stats()
		require.NotZero(t, st.Windows)
		require.Equal(t, drops.Load(), int64(st.Drops)+l.win.drops.Load()>>32, "every drop counted")
		require.Less(t, sampled.Load(), calls.Load(), "some calls were not timed")
		require.GreaterOrEqual(t, st.Stride, 1)
		require.LessOrEqual(t, st.Stride, 64)
		t.Logf("partitions %v: %d calls, %d timed, %d windows, stride %d, limit %d, highest %d", parts, calls.Load(), sampled.Load(), st.Windows, st.Stride, st.Limit, highest.Load())
	}
}

func TestAllocsAcquireRelease(t *testing.T) {
	l, tk, _ := sampledLimiter(t, func(c *Config) {
		c.Algorithm = Vegas{}
		c.Window = 1000
		c.Partitions = []Partition{{Share: 0.5}, {Share: 0.5}}
	})
	// 100 calls a run, so that the runs cover many sampling strides.
	testkit.WantAllocs(t, "Acquire + Release", 0, func() {
		for range 100 {
			tok, ok := admitted(l.Acquire())
			if !ok {
				t.Fatal("rejected")
			}
			tk.Advance(3)
			l.Release(tok, rampart.Success) // sampled or not; closes a window every 1000 ns
		}
	})
	require.NotZero(t, l.Stats().Windows)
	testkit.WantAllocs(t, "AcquirePartition + Release(Failure)", 0, func() {
		for range 10 {
			tok, ok := admitted(l.AcquirePartition(1))
			if !ok {
				t.Fatal("rejected")
			}
			tk.Advance(3)
			l.Release(tok, rampart.Failure)
		}
	})
	full, _ := fixed(t, 1, nil)
	tok, _ := full.Acquire()
	testkit.WantAllocs(t, "rejected Acquire", 0, func() {
		if _, err := full.Acquire(); err == nil {
			t.Fatal("admitted")
		}
	})
	full.Release(tok, rampart.Ignored)
	testkit.WantAllocs(t, "Call", 0, func() {
		_, err := Call(context.Background(), full, func(context.Context) (int, error) { return 1, nil })
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The sample target stays a positive power of two however large
// MinWindowSamples or the calls in flight are.
func TestSamplingHugeMinWindowSamples(t *testing.T) {
	require.Equal(t, uint32(1<<30), sampleTarget(math.MaxInt64, 0))
	require.Equal(t, uint32(1<<30), sampleTarget(10, math.MaxInt64))
	l, err := New(Config{MinWindowSamples: math.MaxInt, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	tok, ok := admitted(l.Acquire())
	require.True(t, ok)
	l.Release(tok, rampart.Success)
	require.Zero(t, l.InFlight())
}
