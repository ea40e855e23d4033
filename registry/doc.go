// Package registry keeps named instances of the policies (circuit
// breakers, rate limiters, bulkheads, adaptive limiters, retries, timeouts,
// hedgers, pipelines, fault injectors, and values of any other kind) so
// that operations code can find them by name, enumerate them and act on
// groups of them.
//
//	reg := registry.New()
//	b, err := registry.Breaker(reg, "payments", circuitbreaker.Config{}, "upstream")
//	...
//	reg.ForceOpenBreakers("upstream")          // an operator isolates a dependency
//	reg.Scale("edge", 0.5)                     // halve every rate limit and bulkhead of a group
//	reg.Restore("edge")                        // and put them back
//	reg.Range(func(name string, v any) bool {  // export metrics, build a status page
//		...
//		return true
//	})
//
// # Names, kinds and groups
//
// A name identifies one instance. [Registry.Add] registers any value; the
// typed create-or-get functions ([Breaker], [RateLimiter], [Bulkhead],
// [AdaptiveLimiter], [Retry], [Timeout], [Hedger], [Pipeline], [Injector],
// ...) return the instance already registered under a name or build and
// register it from a Config, as resilience4j's registries do
// (CircuitBreakerRegistry.circuitBreaker(name, config)): the first call
// wins and a later Config is not applied (use the instance's Update for
// that: a Config without a Name gets the registry name, which the Update
// of every kind that has one keeps when given an empty Name, so the
// Config given here, changed, is accepted). [GetOrCreate] does the same
// for any other kind, from a build function, which runs without the
// registry's lock (it may create or look up other names). A name registered with another kind is an error wrapping
// [ErrKindMismatch]. An instance belongs to the groups given when it is
// registered: a group is a label (a dependency, a tier, a tenant class)
// that the group operations and [Registry.RangeGroup] select on.
//
// # Group operations
//
// [Registry.ForceOpenBreakers], [Registry.DisableBreakers] and
// [Registry.CloseBreakers] move every breaker of a group by hand
// (circuitbreaker.Breaker.TransitionTo). [Registry.Scale] multiplies every
// rate limiter's rate and bulkhead's Max in a group by a factor, from a
// baseline it records per instance at the first Scale, and
// [Registry.Restore] puts the baselines back. Keyed and sharded rate limiters and adaptive limiters are
// not scaled (see Scale).
//
// # Concurrency and cost
//
// A registry is not on a call's hot path: look an instance up once and
// keep the pointer. Writes serialise on a mutex. [Registry.Get] takes the
// read side of a sync.RWMutex. [Registry.Range] works on an immutable
// snapshot sorted by name, built by the first enumeration after a write and
// shared by the enumerations until the next write, so it takes no lock, is
// safe to run concurrently with Add and Remove, and its callback may call
// back into the registry (it sees the registry as it was when Range
// started). A registry does not own its instances: Remove closes nothing.
package registry
