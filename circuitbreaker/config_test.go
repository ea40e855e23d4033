package circuitbreaker

import (
	"errors"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzConfig: New either refuses a configuration with a *rampart.ConfigError
// or returns a breaker whose filled-in configuration is consistent and that
// survives a few calls without panicking.
func FuzzConfig(f *testing.F) {
	f.Add(uint8(0), 0, int64(0), 0, 0, 0.0, 0.0, int64(0), 0, int64(0), int64(0), 0.0, 0.0, 0, 0, 0, int64(0))
	f.Add(uint8(1), 10, int64(time.Second), 10, 3, 50.0, 80.0, int64(time.Millisecond), 5, int64(time.Second), int64(time.Minute), 2.0, 0.1, 3, 2, 2, int64(time.Second))
	f.Add(uint8(2), -1, int64(-1), -1, -1, 101.0, -1.0, int64(-1), -1, int64(-1), int64(-1), 0.5, 1.0, 300, -1, -1, int64(-1))
	f.Add(uint8(0), 4, int64(5), 2000, 0, math.NaN(), math.Inf(1), int64(0), 5, int64(time.Second), int64(time.Millisecond), math.Inf(1), math.NaN(), 2, 3, 3, int64(0))
	f.Fuzz(func(t *testing.T, mode uint8, window int, span int64, buckets, consec int, failRate, slowRate float64,
		slowDur int64, minCalls int, open, maxOpen int64, factor, jitter float64, probes, conc, succ int, maxHalf int64) {
		tk := rampart.NewManualTicker(0)
		c := Config{
			Ticker: tk, Mode: Mode(mode % 4), WindowSize: window, TimeWindow: time.Duration(span), Buckets: buckets,
			ConsecutiveFailures: consec, FailureRateThreshold: failRate, SlowCallRateThreshold: slowRate,
			SlowCallDuration: time.Duration(slowDur), MinimumCalls: minCalls, OpenDuration: time.Duration(open),
			MaxOpenDuration: time.Duration(maxOpen), OpenBackoffFactor: factor, OpenJitter: jitter,
			HalfOpenProbes: probes, HalfOpenMaxConcurrent: conc, HalfOpenSuccesses: succ, MaxHalfOpenDuration: time.Duration(maxHalf),
		}
		if c.WindowSize > 4096 || c.Buckets > 64 {
			return // keep the allocation small; the bounds are tested in TestNewValidation
		}
		b, err := New(c)
		if err != nil {
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) || ce.Field == "" {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		g := b.Config()
		switch {
		case g.WindowSize < 1, g.Buckets < 1, g.ConsecutiveFailures < 1, g.MinimumCalls < 1,
			g.FailureRateThreshold <= 0, g.FailureRateThreshold > 100, g.SlowCallRateThreshold <= 0, g.SlowCallRateThreshold > 100,
			g.OpenDuration <= 0, g.MaxOpenDuration < g.OpenDuration, g.OpenBackoffFactor < 1, g.OpenJitter < 0, g.OpenJitter >= 1,
			g.HalfOpenProbes < 1, g.HalfOpenProbes > 255, g.HalfOpenMaxConcurrent < 1, g.HalfOpenMaxConcurrent > g.HalfOpenProbes,
			g.HalfOpenSuccesses < 0, g.HalfOpenSuccesses > g.HalfOpenProbes:
			t.Fatalf("inconsistent config accepted: %+v", g)
		}
		for i := range 200 {
			p, err := b.AcquireAt(tk.Now())
			if err == nil {
				tk.Advance(time.Duration(i%7) * time.Millisecond)
				b.ReleaseAt(p, tk.Now(), rampart.Result(i%3))
			} else {
				tk.Advance(b.RemainingOpenAt(tk.Now()))
			}
			if d := b.RemainingOpenAt(tk.Now()); d < 0 {
				t.Fatalf("negative RemainingOpen %v", d)
			}
		}
		_ = b.Stats()
	})
}
