package retry_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart/retry"
)

var errUnavailable = errors.New("503 unavailable")

func Example() {
	// One budget per dependency, shared by every policy that calls it.
	budget, _ := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 10, TokenRatio: 0.1})
	p, err := retry.New(retry.Config{
		Name:        "inventory",
		MaxAttempts: 4,
		Backoff:     retry.Exponential,
		BaseDelay:   time.Millisecond,
		MaxDelay:    10 * time.Millisecond,
		Budget:      budget,
		OnRetry: func(attempt int, delay time.Duration, err error) {
			fmt.Printf("attempt %d failed (%v), retrying in %v\n", attempt, err, delay)
		},
	})
	if err != nil {
		panic(err)
	}

	calls := 0
	stock, err := retry.Call(context.Background(), p, func(ctx context.Context) (int, error) {
		if calls++; calls < 3 {
			return 0, errUnavailable
		}
		return 42, nil
	})
	fmt.Println(stock, err, budget.Tokens())

	// A permanent error comes back unchanged after one attempt.
	notFound := errors.New("404 not found")
	err = p.Do(context.Background(), func(ctx context.Context) error { return retry.Permanent(notFound) })
	fmt.Println(err == notFound)

	// Giving up keeps the last error reachable.
	err = p.Do(context.Background(), func(ctx context.Context) error { return errUnavailable })
	fmt.Println(errors.Is(err, retry.ErrExhausted), errors.Is(err, errUnavailable))
	// Output:
	// attempt 1 failed (503 unavailable), retrying in 1ms
	// attempt 2 failed (503 unavailable), retrying in 2ms
	// 42 <nil> 8.1
	// true
	// attempt 1 failed (503 unavailable), retrying in 1ms
	// attempt 2 failed (503 unavailable), retrying in 2ms
	// attempt 3 failed (503 unavailable), retrying in 4ms
	// true true
}

// ExamplePolicy_Decide shows the primitive loop package pipeline runs: all
// per-call state in locals, the policy only decides.
func ExamplePolicy_Decide() {
	p, _ := retry.New(retry.Config{Backoff: retry.Constant, BaseDelay: time.Millisecond, MaxAttempts: 3})
	ctx := context.Background()
	tk := p.Ticker()
	start := tk.Now()
	deadline := p.Deadline(ctx, start)
	var prev time.Duration
	for attempt := 1; ; attempt++ {
		err := errUnavailable // the attempt
		delay, stop := p.Decide(attempt, err, start, tk.Now(), deadline, prev)
		if stop != retry.Continue {
			err = p.GiveUp(stop, attempt, err, nil)
			fmt.Println(stop, err)
			return
		}
		if cerr := p.Sleep(ctx, delay); cerr != nil {
			fmt.Println(p.GiveUp(retry.Canceled, attempt, err, cerr))
			return
		}
		prev = delay
	}
	// Output:
	// max attempts retry: gave up after 3 attempts (max attempts): 503 unavailable
}
