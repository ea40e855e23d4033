package registry_test

import (
	"fmt"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/registry"
)

func Example() {
	reg := registry.New()
	// Build (or find) the instances by name, in groups.
	payments, _ := registry.Breaker(reg, "payments", circuitbreaker.Config{}, "upstream")
	_, _ = registry.Breaker(reg, "search", circuitbreaker.Config{}, "upstream")
	edge, _ := registry.RateLimiter(reg, "edge", ratelimit.Config{Rate: 1000, Burst: 100}, "ingress")
	pool, _ := registry.Bulkhead(reg, "pool", bulkhead.Config{Max: 64}, "ingress")

	// An incident: isolate the upstreams and halve the ingress.
	fmt.Println("forced open:", reg.ForceOpenBreakers("upstream"), payments.State())
	n, _ := reg.Scale("ingress", 0.5)
	fmt.Println("scaled:", n, edge.Stats().Rate, pool.Max())

	// Over: put everything back.
	reg.CloseBreakers("upstream")
	_, _ = reg.Restore("ingress")
	fmt.Println("restored:", payments.State(), edge.Stats().Rate, pool.Max())

	reg.Range(func(name string, v any) bool {
		fmt.Printf("%s %T\n", name, v)
		return true
	})
	// Output:
	// forced open: 2 forced-open
	// scaled: 2 500 32
	// restored: closed 1000 64
	// edge *ratelimit.Limiter
	// payments *circuitbreaker.Breaker
	// pool *bulkhead.Bulkhead
	// search *circuitbreaker.Breaker
}
