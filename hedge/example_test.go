package hedge_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rampart-go/rampart/hedge"
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
