package circuitbreaker

// Review 4 of package circuitbreaker: half-open probe accounting under
// concurrency with MaxHalfOpenDuration restarts and manual transitions
// racing admissions. No bug found; these guard the invariants.

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// TestReview4ProbeAccountingStress: goroutines acquire and record with
// random outcomes while the clock moves past MaxHalfOpenDuration (restarting
// stuck half-open periods) and another goroutine calls TransitionTo and
// Reset. Per half-open generation, the probes running at once never exceed
// HalfOpenMaxConcurrent and the probes admitted never exceed
// HalfOpenProbes; afterwards, with nothing running, a half-open breaker
// counts no probe in flight (none leaked) and every result is accounted.
func TestReview4ProbeAccountingStress(t *testing.T) {
	const K, M, G, N = 4, 2, 8, 2000
	tk := rampart.NewManualTicker(0)
	b, err := New(Config{Ticker: tk, Mode: Consecutive, ConsecutiveFailures: 1,
		OpenDuration: 10 * time.Nanosecond, HalfOpenProbes: K, HalfOpenMaxConcurrent: M,
		HalfOpenSuccesses: 2, MaxHalfOpenDuration: 50 * time.Nanosecond})
	require.NoError(t, err)
	var mu sync.Mutex
	running := map[uint64]int{} // half-open generation -> probes running now
	admitted := map[uint64]int{}
	var violations atomic.Int64
	var acquired, recorded atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 50 {
			case 0:
				b.Reset()
			case 17:
				b.TransitionTo(HalfOpen)
			case 33:
				b.TransitionTo(Open)
			}
			tk.Advance(time.Nanosecond)
		}
	})
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				p, err := b.Acquire(tk.Now())
				if err != nil {
					continue
				}
				acquired.Add(1)
				gen := p.word >> genShift
				half := p.word&stateMask == uint64(HalfOpen)
				if half {
					mu.Lock()
					running[gen]++
					admitted[gen]++
					if running[gen] > M || admitted[gen] > K {
						violations.Add(1)
					}
					mu.Unlock()
				}
				var rerr error
				if (g+i)%3 == 0 {
					rerr = errBoom
				}
				if half {
					mu.Lock()
					running[gen]--
					mu.Unlock()
				}
				if (g*31+i)%97 == 0 {
					b.RecordResult(p, tk.Now(), Ignored)
				} else {
					b.Record(p, tk.Now(), rerr)
				}
				recorded.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	require.Zero(t, violations.Load(), "probe limits exceeded")
	require.Equal(t, acquired.Load(), recorded.Load())
	st := b.Stats()
	if st.State == HalfOpen {
		require.Zero(t, st.HalfOpenInFlight, "probe leaked")
		require.LessOrEqual(t, st.HalfOpenAdmitted, K)
	}
	// A fresh half-open period admits exactly M at once and K in all.
	b.TransitionTo(Closed)
	require.True(t, b.TransitionTo(HalfOpen))
	var ps []Permit
	for range M + 1 {
		if p, err := b.Acquire(tk.Now()); err == nil {
			ps = append(ps, p)
		} else {
			require.ErrorIs(t, err, ErrHalfOpenFull)
		}
	}
	require.Len(t, ps, M)
	require.Equal(t, M, b.Stats().HalfOpenInFlight)
}

// TestReview4TimeWindowRecyclingConsistent: records racing across slice
// boundaries in MetricsOnly (no trips) never make the window count more
// calls than were recorded (plus those in flight), nor a negative count; a bucket
// recycled while being read is never counted under the new slice.
func TestReview4TimeWindowRecyclingConsistent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	b, err := New(Config{Ticker: tk, Mode: TimeWindow, TimeWindow: 40 * time.Nanosecond, Buckets: 4})
	require.NoError(t, err)
	require.True(t, b.TransitionTo(MetricsOnly))
	const G, N = 6, 3000
	var total atomic.Int64
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			for i := range N {
				p, err := b.Acquire(tk.Now())
				require.NoError(t, err)
				var rerr error
				if i%2 == 0 {
					rerr = errBoom
				}
				b.Record(p, tk.Now(), rerr)
				total.Add(1)
				if g == 0 && i%10 == 0 {
					tk.Advance(3 * time.Nanosecond)
				}
				st := b.Stats()
				if st.WindowCalls < 0 || st.WindowFailures > st.WindowCalls || st.WindowCalls > total.Load()+G { // G records may be between Record and total.Add
					t.Errorf("window inconsistent: %+v (recorded %d)", st, total.Load())
					return
				}
			}
		})
	}
	wg.Wait()
	tk.Advance(time.Second)
	st := b.Stats()
	require.Zero(t, st.WindowCalls, "the window emptied once the clock moved past it")
}
