package pipeline_test

// User code the pipeline calls back (the policies' listeners) that ends its
// goroutine with runtime.Goexit (t.FailNow in a test's listener): the
// outcome is recorded once, and a permit whose attempt never ran fn is
// released without an outcome.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
)

var errCB = errors.New("cb: attempt failed")

// TestBreakerListenerGoexitRecordsTheOutcomeOnce: the breaker's per-call
// listeners (OnFailure, OnSuccess) run deferred inside Record, after the
// outcome is applied. A listener that calls runtime.Goexit ends the
// caller's goroutine, and the pipeline's guard, which runs then, records
// nothing more on that permit: a failed call counts as one failure, a
// success as one success.
func TestBreakerListenerGoexitRecordsTheOutcomeOnce(t *testing.T) {
	for _, name := range []string{"failure", "success"} {
		t.Run(name, func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
				c.ConsecutiveFailures = 2
				c.OnFailure = func(time.Duration) { testkit.Goexit() }
				c.OnSuccess = c.OnFailure
			})
			p, err := pipeline.New(pipeline.Config{Breaker: cb})
			require.NoError(t, err)
			_, goexited := testkit.Run(func() {
				_ = p.Do(context.Background(), func(context.Context) error {
					if name == "failure" {
						return errCB
					}
					return nil
				})
			})
			require.True(t, goexited, "Do returned after the listener's runtime.Goexit")
			want := int64(0)
			if name == "failure" {
				want = 1
			}
			require.Equal(t, want, cb.Stats().ConsecutiveFailures, "one attempt, one outcome")
			require.Equal(t, circuitbreaker.Closed, cb.State())
		})
	}
}

// TestRejectionListenerGoexitRecordsNoBreakerFailure: a rate limiter's
// OnRejected (user code) runs inside AdmitN while the breaker's permit
// is held. A listener that calls runtime.Goexit ends the caller's
// goroutine; the permit is then released as Ignored, since fn never ran: a
// rejected attempt does not open the breaker.
func TestRejectionListenerGoexitRecordsNoBreakerFailure(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 1 })
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick,
		OnRejected: func(int, time.Duration) { testkit.Goexit() }})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl})
	require.NoError(t, err)
	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
	_, goexited := testkit.Run(func() { _ = p.Do(context.Background(), ok) }) // rejected: the listener calls Goexit
	require.True(t, goexited, "Do returned after the listener's runtime.Goexit")
	require.Equal(t, circuitbreaker.Closed, cb.State(), "a rejected attempt opened the breaker")
	require.Equal(t, int64(0), cb.Stats().ConsecutiveFailures)
}

// TestBreakerListenerGoexitDuringAbortReleasesTheRest: fn calls
// runtime.Goexit, and while the guard releases the attempt the breaker's
// OnFailure listener calls runtime.Goexit too. The releases after the
// breaker's (the adaptive slot) are still given back.
func TestBreakerListenerGoexitDuringAbortReleasesTheRest(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
		c.ConsecutiveFailures = 5
		c.OnFailure = func(time.Duration) { testkit.Goexit() }
	})
	al := newAdaptive(t, tick, 1)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Adaptive: al})
	require.NoError(t, err)
	_, goexited := testkit.Run(func() {
		_ = p.Do(context.Background(), func(context.Context) error { testkit.Goexit(); return nil })
	})
	require.True(t, goexited)
	require.Zero(t, al.InFlight(), "adaptive slot leaked")
	require.Zero(t, bh.Stats().InFlight, "bulkhead permit leaked")
	require.Equal(t, int64(1), cb.Stats().ConsecutiveFailures, "the aborted attempt is one failure")
}

// TestPanickingBudgetRecordsOnceAndReleasesEverything: a user retry Budget
// whose OnSuccess and OnFailure panic. The panic goes on, every permit is
// given back, and the attempt is recorded in the budget once (the success
// that panicked), never again as a failure by the guard.
func TestPanickingBudgetRecordsOnceAndReleasesEverything(t *testing.T) {
	for _, queue := range []bool{false, true} {
		t.Run(map[bool]string{false: "fast", true: "general"}[queue], func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			bud := &testkit.Budget{Base: newTokenBucket(t)}
			bud.PanicIn(testkit.CallOnSuccess | testkit.CallOnFailure)
			rt := newRetry(t, tick, func(c *retry.Config) { c.MaxAttempts = 2; c.Budget = bud })
			al := newAdaptive(t, tick, 1)
			bh := newBulkhead(t, 1, tick)
			if queue {
				var err error
				bh, err = bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Second, Ticker: tick})
				require.NoError(t, err)
			}
			p, err := pipeline.New(pipeline.Config{Retry: rt, Bulkhead: bh, Adaptive: al})
			require.NoError(t, err)
			r, _ := testkit.Run(func() { _ = p.Do(context.Background(), ok) })
			require.NotNil(t, r, "the Budget's panic goes on")
			require.Zero(t, al.InFlight(), "adaptive slot leaked")
			require.Zero(t, bh.Stats().InFlight, "bulkhead permit leaked")
			require.Equal(t, int64(1), bud.Successes(), "OnSuccess called once")
			require.Equal(t, int64(0), bud.Failures(), "the guard recorded the panicking success again as a failure")
		})
	}
}
