package circuitbreaker

import (
	"context"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestAllocs: in every mode, admitting, recording (fast, slow, failed),
// Do, Call, rejecting (open, half-open full) and Stats allocate nothing.
func TestAllocs(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	gate := func(name string, f func()) {
		t.Helper()
		testkit.WantAllocs(t, name, 0, f)
	}
	for _, mode := range []Mode{CountWindow, TimeWindow, Consecutive} {
		tk := rampart.NewManualTicker(0)
		b, err := New(Config{Mode: mode, Ticker: tk, WindowSize: 8, MinimumCalls: 8, FailureRateThreshold: 100,
			ConsecutiveFailures: 1 << 30, SlowCallDuration: time.Millisecond, SlowCallRateThreshold: 100,
			OnSuccess: func(time.Duration) {}, OnFailure: func(time.Duration) {}})
		if err != nil {
			t.Fatal(err)
		}
		gate(mode.String()+"/success", func() {
			p, err := b.AcquireAt(tk.Now())
			if err != nil {
				t.Fatal(err)
			}
			b.ReleaseAt(p, tk.Now(), b.Classify(nil))
		})
		gate(mode.String()+"/slow-success", func() {
			p, _ := b.AcquireAt(tk.Now())
			b.ReleaseAt(p, tk.Advance(2*time.Millisecond), b.Classify(nil))
		})
		gate(mode.String()+"/failure", func() {
			p, _ := b.AcquireAt(tk.Now())
			b.ReleaseAt(p, tk.Now(), b.Classify(errBoom))
		})
		gate(mode.String()+"/do-success", func() { _ = b.Do(ctx, ok) })
		gate(mode.String()+"/do-failure", func() { _ = b.Do(ctx, fail) })
		gate(mode.String()+"/call", func() { _, _ = Call(ctx, b, func(context.Context) (int, error) { return 1, nil }) })
		b.TransitionTo(Open)
		gate(mode.String()+"/open-rejection", func() {
			if _, err := b.AcquireAt(tk.Now()); err == nil {
				t.Fatal("admitted")
			}
		})
		gate(mode.String()+"/do-rejection", func() {
			if b.Do(ctx, ok) == nil {
				t.Fatal("admitted")
			}
		})
		b.TransitionTo(HalfOpen)
		var ps []Permit
		for range 5 {
			p, err := b.AcquireAt(tk.Now())
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		gate(mode.String()+"/half-open-rejection", func() {
			if _, err := b.AcquireAt(tk.Now()); err == nil {
				t.Fatal("admitted")
			}
		})
		gate(mode.String()+"/stats", func() { _ = b.Stats() })
		_ = ps
	}
	// The default config, the benchmark's.
	b, _ := New(Config{})
	gate("default/do-success", func() { _ = b.Do(ctx, ok) })
}
