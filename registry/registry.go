package registry

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors of [Registry.Add] and of the typed create-or-get functions. Each
// error returned wraps one of them (match with errors.Is) and names the
// instance.
var (
	// ErrEmptyName: the name is "".
	ErrEmptyName = errors.New("registry: empty name")
	// ErrNilInstance: the instance is nil, or a nil pointer, map, slice,
	// func, channel or interface.
	ErrNilInstance = errors.New("registry: nil instance")
	// ErrNameTaken: another instance is registered under the name.
	ErrNameTaken = errors.New("registry: name taken")
	// ErrKindMismatch: a typed create-or-get found the name registered with
	// an instance of another kind.
	ErrKindMismatch = errors.New("registry: name registered with another kind")
	// ErrBuildAborted: a create-or-get waited for another caller's build of
	// the name, which panicked or called runtime.Goexit instead of
	// returning; nothing is registered and the name is free again.
	ErrBuildAborted = errors.New("registry: build of the instance did not return")
)

// Registry is a set of named instances, each in any number of groups.
// Create it with [New]; the zero value is not usable. All methods are safe
// for concurrent use.
//
// A registry is for configuration, operations and enumeration, not for a
// call's hot path: look an instance up once and keep the pointer. Writers
// (Add, Remove, the create-or-get functions, the group operations)
// serialise on a mutex. Get takes the read side of a sync.RWMutex; Range
// and RangeGroup take no lock at all once the sorted snapshot of the
// current contents is built (the first enumeration after a write builds it
// under the read lock), so an enumeration never waits for a write, nor
// blocks one, and f may call back into the registry.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*entry // under mu
	// snap is the sorted snapshot of entries, nil after a write until the
	// next enumeration builds it (an immutable slice: enumerations share it).
	snap atomic.Pointer[[]*entry]
	// scaled holds the baselines of the instances [Registry.Scale] changed,
	// by instance (the kinds Scale changes are pointers, comparable), until
	// [Registry.Restore] or the Remove of the instance's last name (under
	// mu): an instance under two names has one baseline.
	scaled map[any]baseline
	// building holds the names whose create-or-get build is running,
	// outside mu (under mu).
	building map[string]*pending
}

// pending is a create-or-get build under way: the create-or-gets of its
// name that race it wait for done, then read ok and v.
type pending struct {
	done chan struct{}
	ok   bool // build returned without error: v is registered
	// aborted: build panicked or called runtime.Goexit.
	aborted bool
	v       any
}

// entry is one registered instance. It is immutable once published.
type entry struct {
	name     string
	instance any
	groups   []string // sorted, without duplicates
}

// inGroup reports whether e belongs to group g.
func (e *entry) inGroup(g string) bool {
	_, ok := slices.BinarySearch(e.groups, g)
	return ok
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{entries: map[string]*entry{}, scaled: map[any]baseline{}, building: map[string]*pending{}}
}

// Add registers instance under name, in the given groups (duplicates
// ignored). It returns an error wrapping [ErrEmptyName], [ErrNilInstance]
// or [ErrNameTaken], and registers nothing, when name is empty, instance is
// nil (or a nil pointer) or name is taken, or being built by a
// create-or-get. The registry does not own the instance: Remove does not
// close it.
func (r *Registry) Add(name string, instance any, groups ...string) error {
	if err := check(name, instance); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[name]; ok {
		return fmt.Errorf("%w: %q", ErrNameTaken, name)
	}
	if _, ok := r.building[name]; ok {
		return fmt.Errorf("%w: %q (being built by a create-or-get)", ErrNameTaken, name)
	}
	r.insertLocked(name, instance, groups)
	return nil
}

// check validates a name and an instance for Add.
func check(name string, instance any) error {
	if name == "" {
		return ErrEmptyName
	}
	if isNil(instance) {
		return fmt.Errorf("%w: %q", ErrNilInstance, name)
	}
	return nil
}

// isNil reports whether v is nil or holds a nil pointer, map, slice, func,
// channel or interface (reflection: Add is not on a hot path).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// insertLocked adds an entry (r.mu held, name free).
func (r *Registry) insertLocked(name string, instance any, groups []string) {
	g := slices.Clone(groups)
	slices.Sort(g)
	g = slices.Compact(g)
	r.entries[name] = &entry{name: name, instance: instance, groups: g}
	r.snap.Store(nil)
}

// Remove unregisters the instance under name and reports whether there was
// one. It does not close the instance (a hedge.Hedger or timeout.Timeout
// still needs its Close), nor undo a [Registry.Scale] of it: the baseline
// Scale kept for it is dropped with its last name (an instance registered
// under another name too keeps it, for a Restore through that name).
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return false
	}
	delete(r.entries, name)
	if k, ok := scaleKey(e.instance); ok {
		if _, had := r.scaled[k]; had && !r.registeredLocked(k) {
			delete(r.scaled, k)
		}
	}
	r.snap.Store(nil)
	return true
}

// registeredLocked reports whether the scalable instance k is registered
// under some name (r.mu held). k is a pointer: comparing it with any
// instance, comparable or not, never panics.
func (r *Registry) registeredLocked(k any) bool {
	for _, e := range r.entries {
		if e.instance == k {
			return true
		}
	}
	return false
}

// Get returns the instance registered under name.
func (r *Registry) Get(name string) (any, bool) {
	r.mu.RLock()
	e, ok := r.entries[name]
	r.mu.RUnlock()
	if !ok {
		return nil, false
	}
	return e.instance, true
}

// Lookup returns the instance registered under name if it is a T: it is
// [Registry.Get] with the type assertion, false for a name that is absent
// or of another kind.
func Lookup[T any](r *Registry, name string) (T, bool) {
	v, ok := r.Get(name)
	t, isT := v.(T)
	return t, ok && isT
}

// Len returns the number of instances registered.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.entries)
}

// Groups returns the sorted groups of the instance under name (nil for an
// absent name or an instance in no group). The slice is the caller's.
func (r *Registry) Groups(name string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if e, ok := r.entries[name]; ok && len(e.groups) > 0 {
		return slices.Clone(e.groups)
	}
	return nil
}

// snapshot returns the entries sorted by name, building the snapshot if a
// write invalidated it.
func (r *Registry) snapshot() []*entry {
	if s := r.snap.Load(); s != nil {
		return *s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s := r.snap.Load(); s != nil { // another enumeration built it meanwhile
		return *s
	}
	s := make([]*entry, 0, len(r.entries))
	for _, e := range r.entries {
		s = append(s, e)
	}
	slices.SortFunc(s, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	// Under the read lock no write runs, so the snapshot is current; a
	// write that follows stores nil after this Store.
	r.snap.Store(&s)
	return s
}

// Range calls f for every instance in name order until f returns false. It
// works on a snapshot of the registry taken when it starts: instances added
// or removed meanwhile (by f too) are not seen, or still seen. It is safe to
// call concurrently with Add and Remove, and f may call any method of r.
func (r *Registry) Range(f func(name string, instance any) bool) {
	for _, e := range r.snapshot() {
		if !f(e.name, e.instance) {
			return
		}
	}
}

// RangeGroup is [Registry.Range] restricted to the instances of group.
func (r *Registry) RangeGroup(group string, f func(name string, instance any) bool) {
	for _, e := range r.snapshot() {
		if e.inGroup(group) && !f(e.name, e.instance) {
			return
		}
	}
}

// Names returns the sorted names of the instances of group.
func (r *Registry) Names(group string) []string {
	var out []string
	r.RangeGroup(group, func(name string, _ any) bool {
		out = append(out, name)
		return true
	})
	return out
}

// getOrCreate returns the T registered under name, or registers the one
// build returns. build runs without the lock, so that it may use the
// registry (create or look up other names); a placeholder of the name
// makes racing callers of the name wait for its result (one instance) and
// Add refuse the name meanwhile. An existing instance is returned as it
// is, its groups unchanged; one of another kind is an error wrapping
// ErrKindMismatch. A failed build registers nothing and its error goes to
// its caller only: a waiter then builds its own. A build that panics or
// calls runtime.Goexit frees the name and wakes the waiters with
// ErrBuildAborted. build must not create-or-get its own name: it would
// wait for itself.
func getOrCreate[T any](r *Registry, name, kind string, groups []string, build func() (T, error)) (T, error) {
	var zero T
	if name == "" {
		return zero, ErrEmptyName
	}
	if v, ok := r.Get(name); ok { // the common case: a read lock only
		return asKind[T](name, kind, v)
	}
	for {
		r.mu.Lock()
		if e, ok := r.entries[name]; ok {
			r.mu.Unlock()
			return asKind[T](name, kind, e.instance)
		}
		p, ok := r.building[name]
		if !ok {
			break // r.mu held: this caller builds
		}
		r.mu.Unlock()
		<-p.done // another caller builds it
		switch {
		case p.ok:
			return asKind[T](name, kind, p.v)
		case p.aborted:
			return zero, fmt.Errorf("%w: %q", ErrBuildAborted, name)
		}
		// Its build failed: build this caller's, unless another came first.
	}
	p := &pending{done: make(chan struct{}), aborted: true}
	r.building[name] = p
	r.mu.Unlock()
	defer func() { // also when build panics or calls runtime.Goexit (aborted still true)
		r.mu.Lock()
		delete(r.building, name)
		if p.ok {
			r.insertLocked(name, p.v, groups)
		}
		r.mu.Unlock()
		close(p.done)
	}()
	t, err := build()
	p.aborted = false
	if err != nil {
		return zero, err
	}
	p.ok, p.v = true, t
	return t, nil
}

// asKind returns v as a T, or an error naming both kinds.
func asKind[T any](name, kind string, v any) (T, error) {
	if t, ok := v.(T); ok {
		return t, nil
	}
	var zero T
	return zero, fmt.Errorf("%w: %q is a %T, not a %s", ErrKindMismatch, name, v, kind)
}
