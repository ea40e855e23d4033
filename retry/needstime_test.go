package retry

import (
	"context"
	"testing"
	"time"

	"github.com/rampart-go/rampart/internal/testkit"
)

// TestNeedsTime: a policy needs the clock on a first-try success only for
// MaxDuration or a budget that reads it (a RatioBudget, or a custom one,
// which the policy cannot know), and Do reads it then, once.
func TestNeedsTime(t *testing.T) {
	tb, err := NewTokenBucket(TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := NewRatioBudget(RatioBudgetConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  Config
		want bool
	}{
		{"zero", Config{}, false},
		{"token bucket", Config{Budget: tb}, false},
		{"max duration", Config{MaxDuration: time.Second}, true},
		{"token bucket and max duration", Config{Budget: tb, MaxDuration: time.Second}, true},
		{"ratio budget", Config{Budget: rb}, true},
		{"custom budget", Config{Budget: &testkit.Budget{}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Increasing readings, as a clock gives.
			tick := &testkit.CountingTicker{}
			tick.Base = testkit.FuncTicker(tick.Reads)
			c.cfg.Ticker = tick
			p, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.NeedsTime(); got != c.want {
				t.Fatalf("NeedsTime() = %v, want %v", got, c.want)
			}
			// Do agrees: a first-try success reads the clock only when
			// the policy needs the time.
			before := tick.Reads()
			if err := p.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{false: 0, true: 1}[c.want]; tick.Reads()-before != want {
				t.Fatalf("a first-try success read the clock %d times, want %d", tick.Reads()-before, want)
			}
		})
	}
}
