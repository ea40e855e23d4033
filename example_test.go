package rampart_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
)

// A ManualTicker makes time-dependent tests deterministic: build it in the
// test, hand it to every policy's Config.Ticker and to the pipeline, and move
// time by hand instead of sleeping.
func ExampleManualTicker() {
	clock := rampart.NewManualTicker(0)

	// One call per second, no burst beyond one.
	limiter, err := ratelimit.New(ratelimit.Config{Rate: 1, Ticker: clock})
	if err != nil {
		panic(err)
	}
	p, err := pipeline.New(pipeline.Config{RateLimit: limiter, Ticker: clock})
	if err != nil {
		panic(err)
	}
	call := func(context.Context) error { return nil }
	ctx := context.Background()

	fmt.Println(p.Do(ctx, call))                // admitted
	o := p.Try(ctx, call)                       // the same instant: rejected
	fmt.Println(o.Code, o.Policy, o.RetryAfter) // and told when to come back
	clock.Advance(time.Second)                  // no sleeping: move the clock
	fmt.Println(p.Do(ctx, call))
	// Output:
	// <nil>
	// rejected ratelimit 1s
	// <nil>
}
