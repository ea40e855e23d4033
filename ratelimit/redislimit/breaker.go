package redislimit

import (
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
)

// breaker is the rampart circuit breaker in front of Redis: consecutive
// failures open it; while open, decisions go straight to the Failure mode
// without a network call or a timeout; after BreakerOpen one probe tests
// Redis again.
type breaker struct {
	cb *circuitbreaker.Breaker
}

// newBreaker builds the breaker of a Limiter or a Semaphore from its
// BreakerFailures and BreakerOpen.
func newBreaker(ticker rampart.Ticker, failures int, open time.Duration) (*breaker, error) {
	cb, err := circuitbreaker.New(circuitbreaker.Config{
		Name:                "redislimit",
		Ticker:              ticker,
		Mode:                circuitbreaker.Consecutive,
		ConsecutiveFailures: failures,
		OpenDuration:        open,
		MaxOpenDuration:     open, // fixed: BreakerOpen is the probe period
		HalfOpenProbes:      1,
	})
	if err != nil {
		return nil, err
	}
	return &breaker{cb: cb}, nil
}

// acquire asks the breaker for a permit to call Redis.
func (b *breaker) acquire(now int64) (circuitbreaker.Permit, bool) {
	p, err := b.cb.AcquireAt(now)
	return p, err == nil
}

// record reports the Redis call's outcome.
func (b *breaker) record(p circuitbreaker.Permit, now int64, ok bool) {
	r := rampart.Success
	if !ok {
		r = rampart.Failure
	}
	b.cb.ReleaseAt(p, now, r)
}

// remaining is how long the breaker stays open (0 when closed).
func (b *breaker) remaining(now int64) time.Duration { return b.cb.RemainingOpenAt(now) }

// open reports whether the breaker rejects calls now.
func (b *breaker) open() bool { return b.cb.State() != circuitbreaker.Closed }
