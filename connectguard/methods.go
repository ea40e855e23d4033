package connectguard

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
)

// maxCachedMethods bounds the routes a guard keeps: procedure names come
// from requests, and must not grow the cache without bound. Beyond it a method's route is built on
// every call (the slow path, still correct).
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

// cache maps a key (a method, a target) to its route, built once. A read
// is one atomic load and one map lookup, without a lock and without an
// allocation (the key is looked up as the string it is); the first call
// of a key takes the mutex, builds the route and publishes a copy of the
// map with it (copy on write: keys are few and read on every call).
type cache[R any] struct {
	m     atomic.Pointer[map[string]*R]
	mu    sync.Mutex
	build func(key string) (*R, error)
}

// get returns key's route.
func (c *cache[R]) get(key string) (*R, error) {
	if m := c.m.Load(); m != nil {
		if r, ok := (*m)[key]; ok {
			return r, nil
		}
	}
	return c.slow(key)
}

// slow builds key's route and caches it. A build error is not cached: the
// next call tries again (and fails again, with the same *ConfigError).
func (c *cache[R]) slow(key string) (*R, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if r, ok := (*old)[key]; ok {
			return r, nil
		}
	}
	r, err := c.build(key)
	if err != nil {
		return nil, err
	}
	c.put(old, key, r)
	return r, nil
}

// put publishes old with key added, unless the cache is full. Called with
// mu held.
func (c *cache[R]) put(old *map[string]*R, key string, r *R) {
	n := 0
	if old != nil {
		n = len(*old)
	}
	if n >= maxCachedMethods {
		return
	}
	m := make(map[string]*R, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[key] = r
	c.m.Store(&m)
}

// preload builds and caches the route of each key at New, so that a
// configuration error in one of them is reported by New.
func (c *cache[R]) preload(keys []string) error {
	for _, k := range keys {
		if _, err := c.get(k); err != nil {
			return err
		}
	}
	return nil
}
