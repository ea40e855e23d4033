package rampartslog

import (
	"time"

	"github.com/rampart-go/rampart/circuitbreaker"
)

// Listeners returns funcs for the policies' rejection listener fields
// that call [Summary.Poll]: a flush then happens on the first rejection
// after the interval (see the package doc). Each costs one clock read and
// one atomic load per rejection when no flush is due.
type Listeners struct {
	// Breaker is for circuitbreaker.Config.OnRejected.
	Breaker func(s circuitbreaker.State)
	// RateLimit is for ratelimit.Config.OnRejected (Keyed and Sharded
	// included).
	RateLimit func(n int, wait time.Duration)
	// Bulkhead is for bulkhead.Config.OnRejected.
	Bulkhead func(inFlight int64, waited time.Duration)
	// Timeout is for timeout.Config.OnTimeout.
	Timeout func(elapsed time.Duration)
	// RetryBudgetRefused is for retry.Config.OnBudgetRefused.
	RetryBudgetRefused func(attempt int, err error)
	// HedgeBudgetRefused is for hedge.Config.OnBudgetRefused.
	HedgeBudgetRefused func(attempt int)
}

// OnRejected returns the listener funcs that poll s.
func (s *Summary) OnRejected() Listeners {
	return Listeners{
		Breaker:            func(circuitbreaker.State) { s.Poll() },
		RateLimit:          func(int, time.Duration) { s.Poll() },
		Bulkhead:           func(int64, time.Duration) { s.Poll() },
		Timeout:            func(time.Duration) { s.Poll() },
		RetryBudgetRefused: func(int, error) { s.Poll() },
		HedgeBudgetRefused: func(int) { s.Poll() },
	}
}
