package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
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

// A database allows maxConnections in total. Every replica of the service
// draws its calls' connections from one shared budget, a Semaphore of
// Max = maxConnections - workers - reserve - the idle connections the
// replicas' pools keep outside any permit, however many replicas run: a
// rolling deploy's surge or a terminating replica's grace period moves
// the count, not the budget. Each replica caps itself first with a local
// bulkhead (its pool's size, db.SetMaxOpenConns), then takes a lease of
// the budget. If Redis is unreachable, FailLocal admits through a share of
// Max divided by the live replicas that Replicas counted.
//
// Two replicas run here in one process, each with its own client, as two
// processes would: a takes up to its local cap, b what is left of the
// budget, and the leases in Redis never exceed Max. Then Redis becomes
// unreachable from b (a hook on b's client fails every command), and b
// admits up to its share, Max / 2 live replicas.
func ExampleSemaphore_databasePool() {
	const (
		maxConnections = 20 // PostgreSQL's max_connections
		workers        = 4  // the background workers' pool, outside the semaphore
		reserve        = 4  // admin, migrations, superuser_reserved_connections
		peakReplicas   = 2  // alive at once at the peak, surge and grace included
		idle           = 1  // db.SetMaxIdleConns: idle connections hold no permit
		localCap       = 6  // db.SetMaxOpenConns: the most one replica takes
	)
	// The calls' budget, shared by however many replicas run: 10.
	const budget = maxConnections - workers - reserve - peakReplicas*idle
	type replica struct {
		client *redis.Client
		live   *redislimit.Replicas
		local  *bulkhead.Bulkhead
		sem    *redislimit.Semaphore
	}
	ctx := context.Background()
	start := func(id string, hooks ...redis.Hook) replica {
		client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
		for _, h := range hooks {
			client.AddHook(h)
		}
		live, err := redislimit.NewReplicas(redislimit.ReplicasConfig{
			Client: client, Name: "example-orders", ID: id, // in production: the default random ID, or the pod's name
		})
		if err != nil {
			panic(err)
		}
		if err := live.Start(ctx); err != nil {
			panic(err)
		}
		local, err := bulkhead.New(bulkhead.Config{Name: "orders-db", Max: localCap})
		if err != nil {
			panic(err)
		}
		sem, err := redislimit.NewSemaphore(redislimit.SemaphoreConfig{
			Client:       client,
			Name:         "example-orders-db", // the same Name and Max on every replica
			Max:          budget,
			Failure:      redislimit.FailLocal, // Redis unreachable: budget / live replicas
			LiveReplicas: live,
			Replicas:     peakReplicas, // the divisor until the live count has answered
		})
		if err != nil {
			panic(err)
		}
		return replica{client, live, local, sem}
	}
	stop := func(r replica) {
		r.sem.Close()
		r.live.Close()
		r.client.Close()
	}
	// query takes one connection's permits, the local cap first (no round
	// trip), then a lease of the shared budget; it returns the release to
	// call when the query is done.
	query := func(r replica) (release func(), err error) {
		if err := r.local.Acquire(); err != nil {
			return nil, err
		}
		p, err := r.sem.Acquire(ctx)
		if err != nil {
			r.local.Release()
			return nil, err
		}
		return func() { r.sem.Release(p); r.local.Release() }, nil
	}
	// run starts n concurrent queries on r, reports what was admitted and
	// why the others were refused, and returns their releases.
	run := func(name string, r replica, n int) (releases []func()) {
		var byLocal, byBudget int
		for range n {
			release, err := query(r)
			switch {
			case err == nil:
				releases = append(releases, release)
			case errors.Is(err, bulkhead.ErrFull):
				byLocal++ // this replica's own cap: no round trip made
			case errors.Is(err, redislimit.ErrSemaphoreFull):
				byBudget++ // Max leases held across the replicas (or, without Redis, the share)
			default:
				panic(err)
			}
		}
		fmt.Printf("%s: %d admitted", name, len(releases))
		if byLocal > 0 {
			fmt.Printf(", %d refused by its local cap", byLocal)
		}
		if byBudget > 0 {
			fmt.Printf(", %d refused by the shared budget", byBudget)
		}
		fmt.Println()
		return releases
	}
	releaseAll := func(releases []func()) {
		for _, release := range releases {
			release()
		}
	}

	a := start("a")
	defer stop(a)
	cut := &unreachable{}
	b := start("b", cut) // started second: its first heartbeat counts both
	defer stop(b)
	fmt.Printf("budget %d of %d connections, %d live replicas\n", budget, maxConnections, b.live.Count())

	heldA := run("a", a, localCap+1)
	heldB := run("b", b, localCap)
	leases, _ := a.client.ZCard(ctx, a.sem.Key()).Result()
	fmt.Printf("leases in redis: %d (a %d + b %d)\n", leases, a.sem.Stats().InFlight, b.sem.Stats().InFlight)
	releaseAll(heldA)
	releaseAll(heldB)

	cut.on.Store(true) // Redis unreachable from b
	heldB = run("b without redis", b, localCap)
	fmt.Printf("b's fallbacks: %d, its live count kept: %d\n", b.sem.Stats().Fallbacks, b.live.Count())
	releaseAll(heldB) // fallback permits: no round trip
	cut.on.Store(false)
	// Output:
	// budget 10 of 20 connections, 2 live replicas
	// a: 6 admitted, 1 refused by its local cap
	// b: 4 admitted, 2 refused by the shared budget
	// leases in redis: 10 (a 6 + b 4)
	// b without redis: 5 admitted, 1 refused by the shared budget
	// b's fallbacks: 6, its live count kept: 2
}

// unreachable fails every command of the client it is added to while on,
// as a partition between one replica and Redis would, at once rather than
// at the Timeout.
type unreachable struct{ on atomic.Bool }

var errUnreachable = errors.New("dial tcp: connect: network is unreachable")

func (u *unreachable) DialHook(next redis.DialHook) redis.DialHook { return next }

func (u *unreachable) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if u.on.Load() {
			cmd.SetErr(errUnreachable)
			return errUnreachable
		}
		return next(ctx, cmd)
	}
}

func (u *unreachable) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
