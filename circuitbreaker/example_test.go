package circuitbreaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
)

func Example() {
	clock := rampart.NewManualTicker(0) // a real program leaves Ticker nil
	b, err := circuitbreaker.New(circuitbreaker.Config{
		Name:         "payments",
		Ticker:       clock,
		WindowSize:   20, // judge the last 20 calls
		MinimumCalls: 5,  // once 5 were seen
		OpenDuration: 30 * time.Second,
		OnStateChange: func(from, to circuitbreaker.State) {
			fmt.Println("breaker:", from, "->", to)
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	down := errors.New("connection refused")
	for range 5 {
		_ = b.Do(ctx, func(context.Context) error { return down })
	}
	err = b.Do(ctx, func(context.Context) error { return nil })
	fmt.Println(errors.Is(err, circuitbreaker.ErrOpen), errors.Is(err, rampart.ErrRejected))
	fmt.Println("retry after", b.RemainingOpenAt(clock.Now()))

	clock.Advance(30 * time.Second)
	for range 5 { // the default 5 probes, all successful
		_ = b.Do(ctx, func(context.Context) error { return nil })
	}
	fmt.Println(b.State())
	// Output:
	// breaker: closed -> open
	// true true
	// retry after 30s
	// breaker: open -> half-open
	// breaker: half-open -> closed
	// closed
}

// The primitive API, as a pipeline or an HTTP middleware uses it: read the
// clock once before and once after, classify the outcome yourself.
func ExampleBreaker_AcquireAt() {
	b, _ := circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1})
	tk := b.Ticker()
	p, err := b.AcquireAt(tk.Now())
	if err != nil {
		fmt.Println("rejected; retry after", b.RemainingOpenAt(tk.Now()))
		return
	}
	status := 503 // the response came back with a nil error
	r := rampart.Success
	if status >= 500 {
		r = rampart.Failure
	}
	b.ReleaseAt(p, tk.Now(), r)
	fmt.Println(b.State())
	// Output:
	// open
}
