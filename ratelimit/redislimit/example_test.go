package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit/redislimit"
)

// Every replica of a service builds the same Limiter on the same Redis: the
// limit of 3 per second, burst 3, then holds for client "alice" across all
// of them.
func Example() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}})
	defer client.Close()
	limiter, err := redislimit.New(redislimit.Config{
		Client:  client,
		Limit:   redislimit.Limit{Rate: 3, Period: time.Second, Burst: 3},
		Prefix:  "example:",
		Failure: redislimit.FailLocal, // if Redis is down: this replica's share, locally
	})
	if err != nil {
		panic(err)
	}
	for range 4 {
		r, err := limiter.Allow(context.Background(), "alice")
		if err != nil {
			panic(err)
		}
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter > 0)
	}
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
}

// A Semaphore of 2 permits shared by every replica: the third concurrent
// acquire, in this process or any other, is refused until one is released.
func ExampleSemaphore() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}})
	defer client.Close()
	sem, err := redislimit.NewSemaphore(redislimit.SemaphoreConfig{
		Client:  client,
		Name:    "example-db",
		Max:     2,
		Failure: redislimit.FailLocal, // if Redis is down: a local bulkhead of Max / replicas
	})
	if err != nil {
		panic(err)
	}
	defer sem.Close()
	ctx := context.Background()
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	_, err = sem.Acquire(ctx)
	fmt.Println(errors.Is(err, redislimit.ErrSemaphoreFull), errors.Is(err, rampart.ErrRejected))
	sem.Release(a)
	err = sem.Do(ctx, func(context.Context) error { return nil }) // a's permit, freed
	fmt.Println(err)
	sem.Release(b)
	// Output:
	// true true
	// <nil>
}

// The local cap first, then the shared one: a pipeline's Bulkhead caps
// this process, and the Semaphore, run inside each attempt, caps all of
// them. The breaker does not count the semaphore's refusals as failures of
// the dependency.
func ExampleSemaphore_pipeline() {
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}})
	defer client.Close()
	sem, err := redislimit.NewSemaphore(redislimit.SemaphoreConfig{Client: client, Name: "example-api", Max: 100})
	if err != nil {
		panic(err)
	}
	defer sem.Close()
	local, _ := bulkhead.New(bulkhead.Config{Name: "api", Max: 16})
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Name: "api", Classify: func(err error) rampart.Result {
		if errors.Is(err, rampart.ErrRejected) {
			return rampart.Ignored
		}
		return circuitbreaker.DefaultClassify(err)
	}})
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: local})
	if err != nil {
		panic(err)
	}
	err = p.Do(context.Background(), func(ctx context.Context) error {
		return sem.Do(ctx, func(ctx context.Context) error {
			fmt.Println("called")
			return nil
		})
	})
	fmt.Println(err)
	// Output:
	// called
	// <nil>
}
