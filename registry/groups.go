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
// force as it was set: Rebase does not scale it. A Scale may land between
// the owner's new value and Rebase, and is then taken as the baseline:
// [Registry.UpdateScaled] sets the value and re-takes the baseline at once.
func (r *Registry) Rebase(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return false
	}
	return r.rebaseLocked(e.instance)
}

// rebaseLocked re-takes the baseline of v from its current value when v
// is scaled; r.mu is held.
func (r *Registry) rebaseLocked(v any) bool {
	k, ok := scaleKey(v)
	if !ok {
		return false
	}
	b, had := r.scaled[k]
	if !had {
		return false
	}
	switch x := v.(type) {
	case *ratelimit.Limiter:
		b.rate = x.Stats().Rate
	case *bulkhead.Bulkhead:
		b.max = x.Max()
	}
	r.scaled[k] = b
	return true
}

// UpdateScaled runs set, which gives the instance under name, a
// *bulkhead.Bulkhead or a *ratelimit.Limiter (the kinds [Registry.Scale]
// changes), a new value (a configuration reload's Update), and re-takes
// its baseline when a Scale changed it (as [Registry.Rebase]), all under
// the lock Scale and [Registry.Restore] take: no Scale lands between the
// new value and the new baseline, and a later Restore puts back the value
// set. set runs under that lock: it must not call the Registry.
//
// undo rolls the change back for a caller whose later step failed: it
// runs unset (which sets the old value, the old Update) under the lock,
// and, when the instance was scaled before set and still is, puts back
// the scaled value and the baseline it had; when a Scale came after set,
// the baseline is re-taken from the old value.
//
// It returns an error, and runs nothing, when name is not registered
// (wrapping [ErrNotRegistered]) or holds another kind; set's error as it
// is, with no undo, when set fails.
func (r *Registry) UpdateScaled(name string, set func() error) (undo func(unset func()), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotRegistered, name)
	}
	k, ok := scaleKey(e.instance)
	if !ok {
		return nil, fmt.Errorf("registry: UpdateScaled of %q, a %T, which Scale leaves alone", name, e.instance)
	}
	var put func() // sets the live value the instance has now
	switch x := e.instance.(type) {
	case *ratelimit.Limiter:
		v := x.Stats().Rate
		put = func() { _ = x.SetRate(v) }
	case *bulkhead.Bulkhead:
		v := x.Max()
		put = func() { _ = x.SetMax(v) }
	}
	prev, had := r.scaled[k]
	if err := set(); err != nil {
		return nil, err
	}
	r.rebaseLocked(e.instance)
	return func(unset func()) {
		r.mu.Lock()
		defer r.mu.Unlock()
		unset()
		_, now := r.scaled[k]
		switch {
		case had && now:
			put()
			r.scaled[k] = prev
		case now: // scaled after set: the old value is the one to put back
			r.rebaseLocked(e.instance)
		}
	}, nil
}
