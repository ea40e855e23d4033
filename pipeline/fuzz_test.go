package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// FuzzReleaseExactlyOnce drives a full pipeline (retry, breaker, rate
// limiter, bulkhead, adaptive limit, soft timeout) with a sequence of
// attempt behaviours and clock moves read from the input, and checks after
// every call that the outcome is consistent and that no permit is held.
// With queue set the bulkhead may wait (MaxWait), which sends every attempt
// through the pipeline's general loop instead of its fast first attempt.
func FuzzReleaseExactlyOnce(f *testing.F) {
	for _, queue := range []bool{false, true} {
		f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, queue)
		f.Add([]byte{1, 1, 1, 1, 7, 7, 7, 0, 0}, queue)
		f.Add([]byte{2, 2, 2, 5, 5, 6, 0, 3, 3, 1}, queue)
	}
	f.Fuzz(func(t *testing.T, ops []byte, queue bool) {
		tick := rampart.NewManualTicker(1)
		rt := newRetry(t, tick, func(c *retry.Config) {
			c.MaxAttempts = 2
			c.BaseDelay = time.Nanosecond
			c.ShouldRetry = func(err error) bool { return errors.Is(err, errBoom) }
		})
		cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.HalfOpenProbes = 2 })
		rl := newRateLimit(t, 100, 3, tick)
		bh := newBulkhead(t, 2, tick)
		if queue {
			// Never full here (a call and one nested call at most), so
			// nothing waits; MaxWait only makes the pipeline take its
			// general loop.
			var err error
			bh, err = bulkhead.New(bulkhead.Config{Max: 2, MaxWait: time.Second, Ticker: tick})
			if err != nil {
				t.Fatal(err)
			}
		}
		al := newAdaptive(t, tick, 2)
		to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
		p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh, Adaptive: al, Timeout: to})
		if err != nil {
			t.Fatal(err)
		}
		for i, op := range ops {
			var o pipeline.Outcome
			r, _ := testkit.Run(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				o = p.Try(ctx, func(ctx context.Context) error {
					switch op % 8 {
					case 1:
						return errBoom
					case 2:
						panic("fuzz")
					case 3:
						cancel()
						return ctx.Err()
					case 4:
						tick.Advance(2 * time.Second) // overrun the timeout
					case 5:
						// A nested call while this one holds its permits.
						_ = p.Try(ctx, ok)
					}
					return nil
				})
			})
			panicked := r != nil
			switch op % 8 {
			case 6:
				tick.Advance(10 * time.Millisecond)
			case 7:
				tick.Advance(11 * time.Second) // past the breaker's open period
			}
			if bh.Stats().InFlight != 0 || al.InFlight() != 0 {
				t.Fatalf("op %d (%d): permits held after the call: bulkhead %d, adaptive %d", i, op, bh.Stats().InFlight, al.InFlight())
			}
			if s := cb.Stats(); s.HalfOpenInFlight != 0 {
				t.Fatalf("op %d: half-open probe still in flight", i)
			}
			if panicked {
				continue
			}
			switch o.Code {
			case pipeline.OK:
				if o.Err != nil || o.Policy != pipeline.None {
					t.Fatalf("op %d: ok outcome %+v", i, o)
				}
			case pipeline.Rejected:
				if o.Policy == pipeline.None || !errors.Is(o.Err, rampart.ErrRejected) {
					t.Fatalf("op %d: rejected outcome %+v", i, o)
				}
			case pipeline.TimedOut:
				if o.Policy != pipeline.Timeout || !errors.Is(o.Err, timeout.ErrTimeout) {
					t.Fatalf("op %d: timed-out outcome %+v", i, o)
				}
			default:
				if o.Err == nil {
					t.Fatalf("op %d: %v without an error", i, o.Code)
				}
			}
			if o.Attempts < 1 || o.Attempts > 2 {
				t.Fatalf("op %d: %d attempts", i, o.Attempts)
			}
		}
	})
}
