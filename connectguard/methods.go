package connectguard

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
)

// maxCachedMethods bounds the routes a guard keeps: procedure names come
// from requests, and must not grow the cache without bound. Beyond it a
// procedure's pipeline is asked of PipelineFor on every call, and its
// route is the one already built for that pipeline (see cache).
const maxCachedMethods = 4096

// methods is the per-method resolution shared by the server and the
// client: Config.Methods (copied at New), Config.PipelineFor, or the
// default Config.Pipeline.
type methods struct {
	def   *pipeline.Pipeline
	fixed map[string]*pipeline.Pipeline
	fn    func(fullMethod string) *pipeline.Pipeline
}

// newMethods validates the per-method part of a configuration.
func newMethods(p *pipeline.Pipeline, m map[string]*pipeline.Pipeline, fn func(string) *pipeline.Pipeline) (methods, error) {
	if p == nil && m == nil && fn == nil {
		return methods{}, rampart.NewConfigError("connectguard", "Pipeline", "must not be nil (or set Methods or PipelineFor)")
	}
	if m != nil && fn != nil {
		return methods{}, rampart.NewConfigError("connectguard", "Methods", "and PipelineFor are both set: set one of them")
	}
	if m != nil && len(m) == 0 {
		return methods{}, rampart.NewConfigError("connectguard", "Methods", "names no method: leave it nil for none")
	}
	fixed := make(map[string]*pipeline.Pipeline, len(m))
	for k, v := range m {
		if err := checkMethodName("Methods", k); err != nil {
			return methods{}, err
		}
		if v == nil {
			return methods{}, rampart.NewConfigError("connectguard", "Methods", "[%q] is nil", k)
		}
		fixed[k] = v
	}
	return methods{def: p, fixed: fixed, fn: fn}, nil
}

// checkMethodName refuses a name that is not a full procedure name,
// "/package.Service/Method" (connect.Spec.Procedure).
func checkMethodName(field, name string) error {
	if name == "" {
		return rampart.NewConfigError("connectguard", field, "has an empty method name")
	}
	if name[0] != '/' || strings.Count(name, "/") != 2 || strings.HasSuffix(name, "/") || strings.HasPrefix(name, "//") {
		return rampart.NewConfigError("connectguard", field, "has %q, which is not a full procedure name (/package.Service/Method)", name)
	}
	return nil
}

// pipelineFor returns the pipeline of fullMethod, nil for none. Slow path:
// a method's first call.
func (m *methods) pipelineFor(fullMethod string) *pipeline.Pipeline {
	if p, ok := m.fixed[fullMethod]; ok {
		return p
	}
	if m.fn != nil {
		if p := m.fn(fullMethod); p != nil {
			return p
		}
	}
	return m.def
}

// cache maps a key (a method, a target, a pipeline) to its route, built
// once. A read is one atomic load and one map lookup, without a lock and
// without an allocation (a string key is looked up as the string it is).
//
// The first call of a key takes the mutex and builds the route into young,
// a map under the mutex; young is merged into a new copy of the published
// map (copy on write) once the lookups under the mutex since the last
// merge reach the keys published, so that filling n keys copies O(n)
// entries in all, not O(n²) (the published map doubles), and a key found
// in young is soon read without the lock.
//
// Past maxCachedMethods keys the cache is full: everything is published,
// and a key not held is built on each of its calls, without the mutex and
// without being kept (build must then be safe for concurrent use). The
// caches by method name build their routes through a cache by pipeline,
// whose keys are bounded by the configuration, so that a method past the
// bound costs its PipelineFor call and no build.
type cache[K comparable, R any] struct {
	m     atomic.Pointer[map[K]*R] // published: read without a lock
	full  atomic.Bool              // maxCachedMethods keys are published: build past them
	mu    sync.Mutex
	young map[K]*R // built since the last merge; under mu
	slows int      // lookups under mu since the last merge; under mu
	build func(key K) (*R, error)
}

// get returns key's route.
func (c *cache[K, R]) get(key K) (*R, error) {
	if m := c.m.Load(); m != nil {
		if r, ok := (*m)[key]; ok {
			return r, nil
		}
	}
	if c.full.Load() {
		return c.build(key) // past the bound: not kept
	}
	return c.slow(key)
}

// slow finds key's route in young, or builds and keeps it. A build error
// is not kept: the next call tries again (and fails again, with the same
// *ConfigError).
func (c *cache[K, R]) slow(key K) (*R, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if r, ok := (*old)[key]; ok {
			return r, nil
		}
	}
	pub := 0
	if old != nil {
		pub = len(*old)
	}
	n := pub + len(c.young)
	c.slows++
	r, ok := c.young[key]
	if !ok {
		if n >= maxCachedMethods {
			c.merge(old)
			c.full.Store(true)
			return c.build(key)
		}
		var err error
		if r, err = c.build(key); err != nil {
			return nil, err
		}
		if c.young == nil {
			c.young = map[K]*R{}
		}
		c.young[key] = r
		n++
	}
	// A merge copies n ≤ 2·slows entries (young's keys were each a slow
	// lookup): O(1) per lookup under the mutex.
	if c.slows >= pub || n >= maxCachedMethods {
		c.merge(old)
		c.full.Store(n >= maxCachedMethods)
	}
	return r, nil
}

// merge publishes old with young added, and empties young. Called with mu
// held.
func (c *cache[K, R]) merge(old *map[K]*R) {
	if len(c.young) == 0 {
		c.slows = 0
		return
	}
	n := len(c.young)
	if old != nil {
		n += len(*old)
	}
	m := make(map[K]*R, n)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	for k, v := range c.young {
		m[k] = v
	}
	c.m.Store(&m)
	c.young, c.slows = nil, 0
}

// preload builds and caches the route of each key at New, so that a
// configuration error in one of them is reported by New.
func (c *cache[K, R]) preload(keys []K) error {
	for _, k := range keys {
		if _, err := c.get(k); err != nil {
			return err
		}
	}
	return nil
}
