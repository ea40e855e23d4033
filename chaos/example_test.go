package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

// Example injects connection errors into a third of a dependency's calls,
// innermost in a pipeline, and counts what the retries did not absorb. The
// seed makes the run the same every time.
func Example() {
	inj, err := chaos.New(chaos.Config{ErrorRate: 0.3, Error: io.ErrUnexpectedEOF, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	rt, _ := retry.New(retry.Config{MaxAttempts: 4, BaseDelay: time.Microsecond})
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Name: "db"})
	p, _ := pipeline.New(pipeline.Config{Retry: rt, Breaker: cb})

	query := func(context.Context) error { return nil } // the real dependency
	failed := 0
	for range 100 {
		err := p.Do(context.Background(), func(ctx context.Context) error {
			return inj.Do(ctx, query)
		})
		if errors.Is(err, io.ErrUnexpectedEOF) {
			failed++
		}
	}
	s := inj.Stats()
	fmt.Printf("calls %d, injected errors %d, failed after retries %d\n", s.Calls, s.Errored, failed)
	// Output: calls 145, injected errors 46, failed after retries 1
}

// ExampleCall substitutes a stale cached value for a share of the calls.
func ExampleCall() {
	inj, _ := chaos.New(chaos.Config{ResultRate: 1})
	stale := chaos.Substitute[string]{Value: "stale"}
	v, err := chaos.Call(context.Background(), inj, func(context.Context) (string, error) {
		return "fresh", nil
	}, stale)
	fmt.Println(v, err)
	// Output: stale <nil>
}
