package adaptive

// Review 3 of package adaptive: reproductions of the bugs found (skipped
// with "BUG: ..." until fixed) and tests of behaviour not covered elsewhere.
// Internal, so that it can look at the queue's mutex; every name starts with
// r3 to stay clear of the other test files.

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// r3Ticker is a user Ticker that panics on read once armed.
type r3Ticker struct {
	armed atomic.Bool
	now   atomic.Int64
}

func (k *r3Ticker) Now() int64 {
	if k.armed.Load() {
		panic("r3Ticker")
	}
	return k.now.Load()
}

// TestReview3ClassifyPanicLeaksSlot: Do and Call set done = true before
// they call Config.Classify (l.End(t, l.classify(ctx, err))), so a Classify
// that panics or calls runtime.Goexit skips both the End and the deferred
// Ignored release: the slot is leaked for ever and the limiter shrinks by
// one call per occurrence.
func TestReview3ClassifyPanicLeaksSlot(t *testing.T) {
	errBoom := errors.New("boom")
	for _, kind := range []string{"panic", "goexit"} {
		t.Run(kind, func(t *testing.T) {
			l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
				Ticker: rampart.NewManualTicker(0),
				Classify: func(ctx context.Context, err error) Outcome {
					if err != nil {
						if kind == "panic" {
							panic("classify")
						}
						runtime.Goexit()
					}
					return Success
				}})
			require.NoError(t, err)
			run := func(f func()) {
				done := make(chan struct{})
				go func() {
					defer close(done)
					defer func() { _ = recover() }()
					f()
				}()
				<-done
			}
			run(func() { _ = l.Do(context.Background(), func(context.Context) error { return errBoom }) })
			require.Equal(t, 0, l.InFlight(), "Do leaked the slot")
			run(func() {
				_, _ = Call(context.Background(), l, func(context.Context) (int, error) { return 0, errBoom })
			})
			require.Equal(t, 0, l.InFlight(), "Call leaked the slot")
		})
	}
}

// TestReview3ControllerGoexitWedgesWindows: closeWindow's deferred handler
// restores windowEnd only when recover() returns non-nil. A Controller that
// calls runtime.Goexit (t.FailNow in a test Controller, say) leaves
// windowEnd == lockedWindow for ever: no window closes again and the limit
// never adapts. README: "a panicking user Controller propagates and leaves
// the limiter usable"; the Controller contract says nothing against Goexit.
func TestReview3ControllerGoexitWedgesWindows(t *testing.T) {
	var exit atomic.Bool
	exit.Store(true)
	updates := 0
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
		updates++
		if exit.Load() {
			runtime.Goexit()
		}
		return 7
	}), Window: 10, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	tok, ok := l.Acquire(0)
	require.True(t, ok)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Release(tok, 20, Success)
	}()
	<-done
	require.Equal(t, 1, updates)
	require.Equal(t, 0, l.InFlight())
	exit.Store(false)
	for i := range 5 {
		now := int64(100 * (i + 1))
		tok, ok := l.Acquire(now)
		require.True(t, ok)
		l.Release(tok, now+20, Success)
	}
	// Window is 10 ns: each of the five releases closes one window.
	require.Equal(t, 6, updates, "no window closed after the Goexit")
	require.Equal(t, 7, l.Limit())
}

// TestReview3WindowLockAtMaxInt64: the window lock is the sentinel
// windowEnd == math.MaxInt64, and a release compares now >= windowEnd. At a
// reading of math.MaxInt64 (a manual ticker at the end of its range; also
// where SatAdd(now, Window) saturates, so every window near the end of the
// range ends exactly on the sentinel) the check passes while another
// goroutine holds the lock, and CompareAndSwap(MaxInt64, MaxInt64) succeeds:
// two goroutines run Controller.Update at once, which the Controller
// contract rules out ("calls never overlap", so Vegas and Gradient2 keep
// unsynchronised state). Reproduced deterministically with a Controller
// that releases another call from inside Update.
func TestReview3WindowLockAtMaxInt64(t *testing.T) {
	tk := rampart.NewManualTicker(math.MaxInt64 - 10)
	var l *Limiter
	var depth, maxDepth int
	var other Token
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
		depth++
		maxDepth = max(maxDepth, depth)
		if depth == 1 && other.Valid() {
			tok := other
			other = Token{}
			l.Release(tok, math.MaxInt64, Dropped) // another goroutine's release, in effect
		}
		depth--
		return s.Limit
	}), Window: time.Second, Ticker: tk})
	require.NoError(t, err)
	a, ok := l.Acquire(tk.Now())
	require.True(t, ok)
	other, ok = l.Acquire(tk.Now())
	require.True(t, ok)
	tk.Set(math.MaxInt64)
	l.Release(a, math.MaxInt64, Dropped)
	require.Equal(t, 0, l.InFlight())
	require.Equal(t, 1, maxDepth, "Controller.Update ran inside another Update: the window lock did not hold")
}

// TestReview3QueueTickerPanicUnderLock: a waiter that gives up reads the
// limiter's Ticker while it holds the queue's mutex
// (q.removeAt(i, l.ticker.Now()) in AcquireWait). A Ticker that panics there
// leaves the mutex locked: every later waiter, and every Release made while
// someone waits (handoff), blocks for ever.
func TestReview3QueueTickerPanicUnderLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := &r3Ticker{}
		l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 1, MinLimit: 1, MaxLimit: 1,
			Queue: QueueConfig{MaxLength: 2}, Ticker: tk})
		require.NoError(t, err)
		hold, ok := l.Acquire(0)
		require.True(t, ok)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }()
			_, _ = l.AcquireWait(ctx, 0)
		}()
		synctest.Wait()
		require.Equal(t, 1, l.Stats().Queued)
		tk.armed.Store(true)
		cancel()
		<-done
		tk.armed.Store(false)
		require.True(t, l.queue.mu.TryLock(), "the queue's mutex was left locked by the panic")
		l.queue.mu.Unlock()
		require.Equal(t, 0, l.Stats().Queued, "the abandoned waiter is still queued")
		l.Release(hold, 1, Success)
		require.Equal(t, 0, l.InFlight(), "the freed slot went to the abandoned waiter and leaked")
	})
}

// TestReview3ControllerPanicSkipsHandoff: Release runs the queue handoff
// after closeWindow; when a user Controller panics, the slot is freed but
// never handed to the waiter, which then waits for its own timer (Interval)
// and is shed as a rejection although a slot was free the whole time. The
// README promises that a panicking Controller leaves the limiter usable.
func TestReview3ControllerPanicSkipsHandoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var boom atomic.Bool
		boom.Store(true)
		l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
			if boom.Load() {
				panic("controller")
			}
			return s.Limit
		}), InitialLimit: 1, MinLimit: 1, MaxLimit: 1, Window: time.Millisecond, MinWindowSamples: 1,
			Queue: QueueConfig{MaxLength: 1}, Ticker: rampart.NewNanoTicker()})
		require.NoError(t, err)
		hold, ok := l.Acquire(l.Ticker().Now())
		require.True(t, ok)
		type res struct {
			tok Token
			err error
		}
		got := make(chan res, 1)
		go func() {
			tok, err := l.AcquireWait(context.Background(), l.Ticker().Now())
			got <- res{tok, err}
		}()
		synctest.Wait()
		require.Equal(t, 1, l.Stats().Queued)
		time.Sleep(2 * time.Millisecond) // the window is due
		require.Panics(t, func() { l.Release(hold, l.Ticker().Now(), Success) })
		boom.Store(false)
		r := <-got
		require.NoError(t, r.err, "the waiter was shed although the slot was free")
		l.Release(r.tok, l.Ticker().Now(), Success)
		require.Equal(t, 0, l.InFlight())
	})
}

// TestReview3AlgorithmsExtremeSamples: the built-in controllers give a
// finite result (or NaN, which the limiter ignores) for extreme but legal
// samples, and the limiter keeps its limit within [MinLimit, MaxLimit].
func TestReview3AlgorithmsExtremeSamples(t *testing.T) {
	samples := []Sample{
		{Limit: 1, Count: 1, Samples: 1, AvgRTT: math.MaxInt64, MinRTT: math.MaxInt64, MaxInFlight: 1},
		{Limit: math.MaxInt32, Count: 1, Samples: 1, AvgRTT: 1, MinRTT: 1, MaxInFlight: math.MaxInt32},
		{Limit: math.MaxInt32, Count: math.MaxUint32, Samples: 1, AvgRTT: 0, MaxInFlight: math.MaxInt32},
		{Limit: 1, Drops: math.MaxInt64, MaxInFlight: 1},
		{Limit: 1, Count: 1, Samples: 1, AvgRTT: 0, MaxInFlight: 1},
		{Limit: 500, Count: 10, Samples: 10, AvgRTT: 1, MaxInFlight: 500},
		{Limit: 500, Count: 10, Samples: 10, AvgRTT: math.MaxInt64, MaxInFlight: 500, InFlight: math.MaxInt32},
	}
	for _, alg := range []Algorithm{Vegas{}, Gradient2{}, AIMD{}, AIMD{Timeout: 1}, Vegas{Smoothing: 0.5, ProbeInterval: 1}, Gradient2{LongWindow: math.MaxInt32, ProbeInterval: 1}} {
		c := alg.Start(20, 1, math.MaxInt32)
		for round := range 30 {
			for i, s := range samples {
				got := c.Update(s)
				require.False(t, math.IsInf(got, 0), "%T round %d sample %d: %v", alg, round, i, got)
			}
		}
	}
}

// TestReview3PartitionsWithQueue: a limiter with partitions and a queue.
// The queue's handoff ignores partitions (its tokens carry none), and a
// partition's in-flight count returns to zero once its calls are released.
func TestReview3PartitionsWithQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
			Partitions: []Partition{{Share: 0.5}, {Share: 0.5}},
			Queue:      QueueConfig{MaxLength: 4}, Ticker: rampart.NewNanoTicker()})
		require.NoError(t, err)
		a, ok := l.AcquirePriority(0, 0)
		require.True(t, ok)
		b, ok := l.AcquirePriority(0, 1)
		require.True(t, ok)
		_, ok = l.AcquirePriority(0, 1) // beyond its share, nothing to borrow
		require.False(t, ok)
		got := make(chan Token, 1)
		go func() {
			tok, err := l.AcquireWait(context.Background(), l.Ticker().Now())
			if err != nil {
				t.Error(err)
			}
			got <- tok
		}()
		synctest.Wait()
		l.Release(a, l.Ticker().Now(), Success)
		w := <-got
		require.Equal(t, 0, l.PartitionInFlight(0))
		require.Equal(t, 1, l.PartitionInFlight(1))
		l.End(w, Success)
		l.End(b, Dropped)
		require.Equal(t, 0, l.InFlight())
		require.Equal(t, 0, l.PartitionInFlight(1))
		require.Equal(t, uint64(1), l.Stats().Rejected)
	})
}

// TestReview3ThrottlerExtremeReadings: readings near both ends of the int64
// range and a window of one huge bucket neither panic nor give a
// probability outside [0, MaxProbability].
func TestReview3ThrottlerExtremeReadings(t *testing.T) {
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
				if th.Allow(now) {
					th.Record(now, false)
				}
			}
			p := th.Probability(now)
			require.True(t, p >= 0 && p <= 0.9, "p = %v", p)
		}
		tk.Set(math.MaxInt64)
		st := th.Stats()
		require.LessOrEqual(t, st.Accepts, st.Requests)
	}
}

// TestReview3ThrottlerOneNanoBucketAtMaxInt64: with buckets of 1 ns (legal:
// NewThrottler asks for at least one nanosecond per bucket) a reading of
// math.MaxInt64 gives the epoch math.MaxInt64, and advance's loop
// `for k := ...; k <= e; k++` never ends: k overflows to math.MinInt64 and
// t.buckets[k%n] indexes with a negative number, a runtime panic inside
// Allow (and Record, Probability, Stats).
func TestReview3ThrottlerOneNanoBucketAtMaxInt64(t *testing.T) {
	tk := rampart.NewManualTicker(math.MaxInt64 - 5)
	th, err := NewThrottler(ThrottlerConfig{Window: 1024, Buckets: 1024, Ticker: tk})
	require.NoError(t, err)
	require.True(t, th.Allow(tk.Now()))
	th.Record(tk.Now(), true)
	tk.Set(math.MaxInt64)
	require.NotPanics(t, func() {
		if th.Allow(math.MaxInt64) {
			th.Record(math.MaxInt64, true)
		}
	})
	require.NotPanics(t, func() { _ = th.Stats() })
}

// TestReview3HugeMinWindowSamples: the sample target stays a positive power
// of two however large MinWindowSamples or the calls in flight are.
func TestReview3HugeMinWindowSamples(t *testing.T) {
	require.Equal(t, uint32(1<<30), sampleTarget(math.MaxInt64, 0))
	require.Equal(t, uint32(1<<30), sampleTarget(10, math.MaxInt64))
	l, err := New(Config{MinWindowSamples: math.MaxInt, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	tok, ok := l.Begin()
	require.True(t, ok)
	l.End(tok, Success)
	require.Zero(t, l.InFlight())
}
