package retry

import (
	"context"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// timeBudget is a custom budget: the policy cannot know how it uses now.
type timeBudget struct{}

func (timeBudget) OnRequest(int64)       {}
func (timeBudget) OnSuccess(int64)       {}
func (timeBudget) OnFailure(int64)       {}
func (timeBudget) AllowRetry(int64) bool { return true }

// countTicker counts its reads.
type countTicker struct{ n int }

func (c *countTicker) Now() int64 { c.n++; return int64(c.n) }

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
		{"custom budget", Config{Budget: timeBudget{}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tick := &countTicker{}
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
			tick.n = 0
			if err := p.Do(t.Context(), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{false: 0, true: 1}[c.want]; tick.n != want {
				t.Fatalf("a first-try success read the clock %d times, want %d", tick.n, want)
			}
		})
	}
	var _ rampart.Ticker = (*countTicker)(nil)
}
