package pipeline_test

// Audit of the calls into user code (callbacks): reproductions of the bugs
// found (skipped with "BUG: ..." until fixed) and guards that pass.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
)

var errCB = errors.New("cb: attempt failed")

func cbGo(f func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		defer func() { _ = recover() }()
		f()
	})
	wg.Wait()
}

// TestCallbacksBreakerListenerGoexitRecordsTwice: the breaker's per-call
// listeners (OnFailure, OnSuccess) run deferred inside Record, after the
// outcome is applied. settle (and run's fast success) clears heldBreaker
// only after Record returns, so a listener that calls runtime.Goexit sends
// run's guard to abort, which records a second Failure on the same permit:
// one failed call counts as two consecutive failures, a success as a
// success and a failure.
func TestCallbacksBreakerListenerGoexitRecordsTwice(t *testing.T) {
	for _, name := range []string{"failure", "success"} {
		t.Run(name, func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			goexit := true
			cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
				c.ConsecutiveFailures = 2
				c.OnFailure = func(time.Duration) {
					if goexit {
						runtimeGoexit()
					}
				}
				c.OnSuccess = c.OnFailure
			})
			p, err := pipeline.New(pipeline.Config{Breaker: cb})
			require.NoError(t, err)
			cbGo(func() {
				_ = p.Do(context.Background(), func(context.Context) error {
					if name == "failure" {
						return errCB
					}
					return nil
				})
			})
			want := int64(0)
			if name == "failure" {
				want = 1
			}
			require.Equal(t, want, cb.Stats().ConsecutiveFailures, "one attempt, one outcome")
			require.Equal(t, circuitbreaker.Closed, cb.State())
		})
	}
}

// TestCallbacksRejectionListenerGoexitCountsBreakerFailure: a rate
// limiter's OnRejected (user code) runs inside TryAcquire while the
// breaker's permit is held (heldBreaker, so that a Goexit does not leak
// it). But abort then records that permit as a Failure, though fn never
// ran: a test helper that calls t.FailNow from the listener opens a
// breaker that saw no failure. The permit should be released as Ignored
// (as unwind does) when fn has not run.
func TestCallbacksRejectionListenerGoexitCountsBreakerFailure(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 1 })
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick,
		OnRejected: func(int, int64) { runtimeGoexit() }})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl})
	require.NoError(t, err)
	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
	cbGo(func() { _ = p.Do(context.Background(), ok) }) // rejected: the listener calls Goexit
	require.Equal(t, circuitbreaker.Closed, cb.State(), "a rejected attempt opened the breaker")
	require.Equal(t, int64(0), cb.Stats().ConsecutiveFailures)
}
