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
