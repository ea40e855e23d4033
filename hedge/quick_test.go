package hedge

import (
	"context"
	"testing"
	"time"

	"github.com/rampart-go/rampart/internal/israce"
)

func TestAllocsNoHedge(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, pct := range []float64{0, 0.95} {
		h, err := New(Config{Delay: time.Second, Percentile: pct})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		fn := func(context.Context) error { return nil }
		fnT := func(context.Context) (int, error) { return 1, nil }
		for range 1000 { // warm the pool and the watchdog table
			_ = h.Do(ctx, fn)
		}
		if n := testing.AllocsPerRun(10000, func() { _ = h.Do(ctx, fn) }); n != 0 {
			t.Fatalf("Do (p=%v): %v allocs", pct, n)
		}
		if n := testing.AllocsPerRun(10000, func() { _, _ = Call(ctx, h, fnT) }); n != 0 {
			t.Fatalf("Call (p=%v): %v allocs", pct, n)
		}
	}
}
