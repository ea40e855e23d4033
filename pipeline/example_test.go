package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// Example builds the usual protection for one dependency: retries with a
// budget, a breaker, a rate limit, a concurrency limit and a per-attempt
// timeout, composed by a pipeline in its fixed order.
func Example() {
	budget, _ := retry.NewTokenBucket(retry.TokenBucketConfig{})
	rt, _ := retry.New(retry.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, Budget: budget})
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Name: "db"})
	rl, _ := ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 100})
	bh, _ := bulkhead.New(bulkhead.Config{Max: 32})
	to, _ := timeout.New(timeout.Config{Duration: 200 * time.Millisecond})
	p, err := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: bh, Timeout: to})
	if err != nil {
		fmt.Println(err)
		return
	}

	attempts := 0
	row, err := pipeline.Call(context.Background(), p, func(ctx context.Context) (string, error) {
		attempts++
		if attempts < 2 {
			return "", errors.New("connection reset") // retried
		}
		return "row 42", nil
	})
	fmt.Println(row, err, attempts)
	// Output: row 42 <nil> 2
}

// ExamplePipeline_Try shows the outcome API: a rejection is a code, the
// policy that rejected, and when to come back.
func ExamplePipeline_Try() {
	tick := rampart.NewManualTicker(0)
	rl, _ := ratelimit.New(ratelimit.Config{Rate: 2, Burst: 1, Ticker: tick}) // one call per 500 ms
	p, _ := pipeline.New(pipeline.Config{RateLimit: rl})
	work := func(context.Context) error { return nil }

	for range 2 {
		o := p.Try(context.Background(), work)
		fmt.Println(o.Code, o.Policy, o.RetryAfter, errors.Is(o.Err, rampart.ErrRejected))
	}
	// Output:
	// ok none 0s false
	// rejected ratelimit 500ms true
}

// ExampleFallback answers while the breaker is open with the last good
// value, no older than a minute on the pipeline's clock; the breaker still
// counts the rejection, and the Outcome says why the fallback answered.
func ExampleFallback() {
	tick := rampart.NewManualTicker(0)
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Name: "prices", Ticker: tick})
	p, _ := pipeline.New(pipeline.Config{Breaker: cb})
	prices, _ := pipeline.NewFallback(pipeline.FallbackConfig[string]{
		Pipeline: p,
		When:     pipeline.RejectionsBy(pipeline.Breaker),
		Stale:    true,
		MaxAge:   time.Minute,
	})
	fetch := func(context.Context) (string, error) { return "EUR 1.17", nil }

	v, o := prices.Try(context.Background(), fetch)
	fmt.Println(v, o.Code, o.FellBack)

	cb.TransitionTo(circuitbreaker.ForcedOpen)
	tick.Advance(30 * time.Second)
	v, o = prices.Try(context.Background(), fetch)
	fmt.Println(v, o.Code, o.Policy, o.FellBack, o.Stale, errors.Is(o.Cause, circuitbreaker.ErrOpen))

	tick.Advance(time.Minute) // too old now
	_, err := prices.Call(context.Background(), fetch)
	fmt.Println(err != nil, cb.Stats().Rejected)
	// Output:
	// EUR 1.17 ok false
	// EUR 1.17 rejected circuitbreaker true true true
	// true 2
}

// ExampleDoFallback answers a shed call to a best-effort dependency with
// nil: the caller goes on, and the rejection is still counted.
func ExampleDoFallback() {
	bh, _ := bulkhead.New(bulkhead.Config{Max: 1})
	p, _ := pipeline.New(pipeline.Config{Bulkhead: bh})
	audit, _ := pipeline.NewDoFallback(pipeline.DoFallbackConfig{
		Pipeline: p,
		Func: func(_ context.Context, o pipeline.Outcome) error {
			fmt.Println("audit record dropped:", o.Policy)
			return nil
		},
	})
	_ = bh.Acquire() // another call holds the only permit
	fmt.Println(audit.Do(context.Background(), func(context.Context) error { return nil }))
	bh.Release()
	// Output:
	// audit record dropped: bulkhead
	// <nil>
}
