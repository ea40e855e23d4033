package hedge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/retry"
)

func Example() {
	h, err := hedge.New(hedge.Config{
		Name:  "profile-service",
		Delay: 20 * time.Millisecond, // or Percentile: 0.95 with MinDelay/MaxDelay
	})
	if err != nil {
		panic(err)
	}
	calls := 0
	// Calling Call is the promise that the function is idempotent.
	name, err := hedge.Call(context.Background(), h, func(ctx context.Context) (string, error) {
		calls++
		return "gopher", nil // fast: returns before the delay, so no hedge
	})
	fmt.Println(name, err, calls, h.Stats().Hedges)
	// Output: gopher <nil> 1 0
}

// A live p95 delay, clamped, with hedges charged to the retry budget that
// the dependency's retry policy uses too.
func ExampleCall() {
	budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	if err != nil {
		panic(err)
	}
	h, err := hedge.New(hedge.Config{
		Name:       "profile-service",
		Percentile: 0.95,                  // hedge calls slower than the live p95...
		Delay:      20 * time.Millisecond, // ...and at 20 ms until WarmUp samples exist
		MinDelay:   time.Millisecond,
		MaxDelay:   100 * time.Millisecond,
		Budget:     budget,
	})
	if err != nil {
		panic(err)
	}
	getProfile := func(ctx context.Context) (string, error) {
		// A real callee must honour ctx: a losing first attempt is
		// cancelled through it.
		return "profile", ctx.Err()
	}
	p, err := hedge.Call(context.Background(), h, getProfile)
	fmt.Println(p, err, h.Stats().Delay)
	// Output: profile <nil> 20ms
}
