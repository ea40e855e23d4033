package bench

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/hedge"
)

// BenchmarkHedge measures the path every hedged call pays: the first attempt
// returns before the delay (1 h), so no hedge starts. rampart runs the first
// attempt on the caller's goroutine and arms the shared watchdog; failsafe-go
// runs every attempt, the first included, on a new goroutine. rampart-p95
// uses the live-percentile delay (one more clock read and a histogram add);
// rampart-async is the opt-in AsyncFirst mode (first attempt on its own
// goroutine, like failsafe); rampart-cached reads a rampart.CachedTicker
// instead of the clock. (The latency histogram's own cost is measured in
// its package: go test -bench Record ./internal/histogram/.)
func BenchmarkHedge(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	type lib struct {
		name string
		do   func(b *testing.B) func() bool
	}
	rampartLib := func(cfg hedge.Config) func(b *testing.B) func() bool {
		return func(b *testing.B) func() bool {
			h, err := hedge.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				if st := h.Stats(); st.Hedges != 0 {
					b.Fatalf("hedged %d times", st.Hedges)
				}
			})
			return func() bool { return h.Do(ctx, fn) == nil }
		}
	}
	libs := []lib{
		{"rampart", rampartLib(hedge.Config{Delay: time.Hour})},
		{"rampart-cached", func(b *testing.B) func() bool {
			// The fixed delay on a cached clock (an atomic load, refreshed
			// every millisecond): no clock read per call.
			tk := rampart.NewCachedTicker(time.Millisecond)
			b.Cleanup(func() { _ = tk.Close() })
			return rampartLib(hedge.Config{Delay: time.Hour, Ticker: tk})(b)
		}},
		{"rampart-p95", rampartLib(hedge.Config{Percentile: 0.95, Delay: time.Hour, MinDelay: time.Hour})},
		{"rampart-async", rampartLib(hedge.Config{Delay: time.Hour, AsyncFirst: true})},
		{"failsafe", func(b *testing.B) func() bool {
			// failsafe-go's hedge policy through its executor, as users call it.
			ex := failsafe.With[any](hedgepolicy.NewWithDelay[any](time.Hour))
			f := func() error { return nil }
			return func() bool { return ex.Run(f) == nil }
		}},
	}
	for _, l := range libs {
		b.Run("NoHedge/"+l.name, func(b *testing.B) {
			do := l.do(b)
			b.ReportAllocs()
			for b.Loop() {
				if !do() {
					b.Fatal("call failed")
				}
			}
		})
	}
	for _, l := range libs {
		b.Run("NoHedgeParallel/"+l.name, func(b *testing.B) {
			do := l.do(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !do() {
						b.Error("call failed")
						return
					}
				}
			})
		})
	}
}
