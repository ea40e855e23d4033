package registry

import (
	"errors"
	"fmt"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/ratelimit"
)

// ErrNotRegistered: no instance is registered under the name.
var ErrNotRegistered = errors.New("registry: name not registered")

// SetGroups sets the groups of the instance registered under name
// (duplicates ignored, none for no group), in place: the entry, the
// instance and the baseline a [Registry.Scale] kept for it stay, which a
// [Registry.Remove] and [Registry.Add] would drop. It returns an error
// wrapping [ErrEmptyName] or [ErrNotRegistered], and changes nothing, when
// name is empty or not registered.
func (r *Registry) SetGroups(name string, groups ...string) error {
	if name == "" {
		return ErrEmptyName
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotRegistered, name)
	}
	r.insertLocked(name, e.instance, groups)
	return nil
}

// Rebase re-takes the baseline of the instance under name from its
// current value, when a [Registry.Scale] changed it and no
// [Registry.Restore] has put it back yet: after its owner set a new value
// (a configuration reload's Update of a bulkhead's Max or a limiter's
// rate), a Restore puts back that value, not the one the Scale found. It
// reports whether a baseline was re-taken (false for an absent name, a
// kind Scale leaves alone, or an instance not scaled). The new value is in
// force as it was set: Rebase does not scale it.
func (r *Registry) Rebase(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return false
	}
	k, ok := scaleKey(e.instance)
	if !ok {
		return false
	}
	b, had := r.scaled[k]
	if !had {
		return false
	}
	switch x := e.instance.(type) {
	case *ratelimit.Limiter:
		b.rate = x.Stats().Rate
	case *bulkhead.Bulkhead:
		b.max = x.Max()
	}
	r.scaled[k] = b
	return true
}
