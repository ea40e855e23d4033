package redislimit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

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
