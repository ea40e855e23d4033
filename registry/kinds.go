package registry

import (
	"reflect"

	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// The typed create-or-get functions below share one contract. If name is
// registered with an instance of the function's kind, they return it and
// apply nothing of c (neither its values nor groups: call the instance's
// Update to change it). If name is registered with another kind, they return
// an error wrapping [ErrKindMismatch]. Otherwise they build the instance
// with the kind's New, register it in groups and return it; New's error (a
// *rampart.ConfigError) comes back unchanged and registers nothing. A c with
// an empty Name gets name as its Name, so that the instance's rejection
// errors carry it. The Update of every kind that has one keeps that name
// when given an empty Name (and refuses another), so the Config given
// here, changed, is accepted, as is the instance's own Config, changed.
// Racing calls for one name build one instance: the build runs without the
// registry's lock, the racing calls wait for it, and Add refuses the name
// meanwhile (Get does not find it until the build has returned).

// Breaker returns the circuit breaker named name, creating it from c.
func Breaker(r *Registry, name string, c circuitbreaker.Config, groups ...string) (*circuitbreaker.Breaker, error) {
	return getOrCreate(r, name, "*circuitbreaker.Breaker", groups, func() (*circuitbreaker.Breaker, error) {
		if c.Name == "" {
			c.Name = name
		}
		return circuitbreaker.New(c)
	})
}

// RateLimiter returns the rate limiter named name, creating it from c.
func RateLimiter(r *Registry, name string, c ratelimit.Config, groups ...string) (*ratelimit.Limiter, error) {
	return getOrCreate(r, name, "*ratelimit.Limiter", groups, func() (*ratelimit.Limiter, error) {
		if c.Name == "" {
			c.Name = name
		}
		return ratelimit.New(c)
	})
}

// KeyedRateLimiter returns the keyed rate limiter named name, creating it
// from c.
func KeyedRateLimiter(r *Registry, name string, c ratelimit.KeyedConfig, groups ...string) (*ratelimit.Keyed, error) {
	return getOrCreate(r, name, "*ratelimit.Keyed", groups, func() (*ratelimit.Keyed, error) {
		if c.Name == "" {
			c.Name = name
		}
		return ratelimit.NewKeyed(c)
	})
}

// ShardedRateLimiter returns the sharded rate limiter named name, creating
// it from c.
func ShardedRateLimiter(r *Registry, name string, c ratelimit.ShardedConfig, groups ...string) (*ratelimit.Sharded, error) {
	return getOrCreate(r, name, "*ratelimit.Sharded", groups, func() (*ratelimit.Sharded, error) {
		if c.Name == "" {
			c.Name = name
		}
		return ratelimit.NewSharded(c)
	})
}

// Bulkhead returns the bulkhead named name, creating it from c.
func Bulkhead(r *Registry, name string, c bulkhead.Config, groups ...string) (*bulkhead.Bulkhead, error) {
	return getOrCreate(r, name, "*bulkhead.Bulkhead", groups, func() (*bulkhead.Bulkhead, error) {
		if c.Name == "" {
			c.Name = name
		}
		return bulkhead.New(c)
	})
}

// AdaptiveLimiter returns the adaptive concurrency limiter named name,
// creating it from c.
func AdaptiveLimiter(r *Registry, name string, c adaptive.Config, groups ...string) (*adaptive.Limiter, error) {
	return getOrCreate(r, name, "*adaptive.Limiter", groups, func() (*adaptive.Limiter, error) {
		if c.Name == "" {
			c.Name = name
		}
		return adaptive.New(c)
	})
}

// Throttler returns the adaptive client-side throttler named name, creating
// it from c.
func Throttler(r *Registry, name string, c adaptive.ThrottlerConfig, groups ...string) (*adaptive.Throttler, error) {
	return getOrCreate(r, name, "*adaptive.Throttler", groups, func() (*adaptive.Throttler, error) {
		if c.Name == "" {
			c.Name = name
		}
		return adaptive.NewThrottler(c)
	})
}

// Retry returns the retry policy named name, creating it from c.
func Retry(r *Registry, name string, c retry.Config, groups ...string) (*retry.Policy, error) {
	return getOrCreate(r, name, "*retry.Policy", groups, func() (*retry.Policy, error) {
		if c.Name == "" {
			c.Name = name
		}
		return retry.New(c)
	})
}

// Timeout returns the timeout named name, creating it from c.
func Timeout(r *Registry, name string, c timeout.Config, groups ...string) (*timeout.Timeout, error) {
	return getOrCreate(r, name, "*timeout.Timeout", groups, func() (*timeout.Timeout, error) {
		if c.Name == "" {
			c.Name = name
		}
		return timeout.New(c)
	})
}

// Hedger returns the hedger named name, creating it from c.
func Hedger(r *Registry, name string, c hedge.Config, groups ...string) (*hedge.Hedger, error) {
	return getOrCreate(r, name, "*hedge.Hedger", groups, func() (*hedge.Hedger, error) {
		if c.Name == "" {
			c.Name = name
		}
		return hedge.New(c)
	})
}

// Pipeline returns the pipeline named name, creating it from c. The
// policies in c are not registered: register those you want to operate on
// by name (a group operation reaches only registered instances).
func Pipeline(r *Registry, name string, c pipeline.Config, groups ...string) (*pipeline.Pipeline, error) {
	return getOrCreate(r, name, "*pipeline.Pipeline", groups, func() (*pipeline.Pipeline, error) {
		if c.Name == "" {
			c.Name = name
		}
		return pipeline.New(c)
	})
}

// Injector returns the fault injector named name, creating it from c (a
// chaos.Config has no Name).
func Injector(r *Registry, name string, c chaos.Config, groups ...string) (*chaos.Injector, error) {
	return getOrCreate(r, name, "*chaos.Injector", groups, func() (*chaos.Injector, error) {
		return chaos.New(c)
	})
}

// Shedder returns the overload shedder named name, creating it from c.
func Shedder(r *Registry, name string, c shed.Config, groups ...string) (*shed.Shedder, error) {
	return getOrCreate(r, name, "*shed.Shedder", groups, func() (*shed.Shedder, error) {
		if c.Name == "" {
			c.Name = name
		}
		return shed.New(c)
	})
}

// GetOrCreate is the create-or-get of any other kind (a
// pipeline.Fallback, a value of your own): it returns the T registered
// under name, or registers and returns the one build returns, with the
// contract of the typed functions above (build's error comes back
// unchanged and registers nothing; a nil T is refused with
// [ErrNilInstance]; the name is not applied to what build makes).
//
// build runs without the registry's lock: it may create or look up other
// names of the registry (a composite built from registered parts), but not
// its own name, which it would wait for forever. A racing create-or-get of
// the name waits for build: it gets the instance build returns, or, when
// build fails, builds its own; when build panics (the panic goes on to
// GetOrCreate's caller) or calls runtime.Goexit, nothing is registered and
// the waiters get an error wrapping [ErrBuildAborted].
func GetOrCreate[T any](r *Registry, name string, build func() (T, error), groups ...string) (T, error) {
	return getOrCreate(r, name, reflect.TypeFor[T]().String(), groups, func() (T, error) {
		t, err := build()
		if err == nil && isNil(t) {
			var zero T
			return zero, ErrNilInstance
		}
		return t, err
	})
}
