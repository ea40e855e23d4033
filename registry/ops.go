package registry

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/ratelimit"
)

// ForceOpenBreakers moves every circuit breaker of group to
// circuitbreaker.ForcedOpen (it rejects every call until the next manual
// transition) and returns how many changed state. Other kinds in the group
// are left alone.
func (r *Registry) ForceOpenBreakers(group string) int {
	return r.transitionBreakers(group, circuitbreaker.ForcedOpen)
}

// DisableBreakers moves every circuit breaker of group to
// circuitbreaker.Disabled (it admits every call and records nothing until
// the next manual transition) and returns how many changed state.
func (r *Registry) DisableBreakers(group string) int {
	return r.transitionBreakers(group, circuitbreaker.Disabled)
}

// CloseBreakers moves every circuit breaker of group to
// circuitbreaker.Closed with an empty window (ending a ForceOpenBreakers or
// DisableBreakers, or an open period) and returns how many changed state;
// a breaker already Closed keeps its window.
func (r *Registry) CloseBreakers(group string) int {
	return r.transitionBreakers(group, circuitbreaker.Closed)
}

// transitionBreakers is Breaker.TransitionTo(to) over group.
func (r *Registry) transitionBreakers(group string, to circuitbreaker.State) int {
	n := 0
	r.RangeGroup(group, func(_ string, v any) bool {
		if b, ok := v.(*circuitbreaker.Breaker); ok && b.TransitionTo(to) {
			n++
		}
		return true
	})
	return n
}

// baseline is what an instance had before the first Scale since the last
// Restore: a limiter's rate (admissions per second) or a bulkhead's Max.
type baseline struct {
	rate float64
	max  int
}

// Scale sets every rate limiter (*ratelimit.Limiter) of group to factor
// times its baseline rate, keeping its burst and the permits it holds, and
// every bulkhead (*bulkhead.Bulkhead) to factor times its baseline Max,
// rounded, at least 1 and at most math.MaxInt: the incident lever (0.5
// halves the admitted load). The baseline is an instance's value when the
// first Scale since the last [Registry.Restore] reached it, so successive
// Scales do not compound: Scale(g, 0.5) then Scale(g, 0.25) leaves a
// quarter. It belongs to the instance, not to the name: an instance
// registered under several names of group is scaled once, and a Restore
// through any of its names puts it back. A rate is clamped to
// ratelimit's range [1e-9, ratelimit.MaxRate]. It returns how many
// instances it set; an instance that refuses its new value keeps its old
// one and its error is joined into the one returned. A factor that is not
// positive and finite is a *rampart.ConfigError and changes nothing.
//
// Kinds without a live limit to scale are left alone: keyed limiters
// (every key shares the parameters fixed at NewKeyed), sharded limiters and
// adaptive limiters (their limit is the algorithm's).
func (r *Registry) Scale(group string, factor float64) (int, error) {
	if !(factor > 0) || math.IsInf(factor, 1) {
		return 0, rampart.NewConfigError("registry", "factor", "must be positive and finite, got %v", factor)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	var errs []error
	seen := map[any]bool{} // an instance under several names of group: scaled once
	for _, e := range r.groupLocked(group) {
		k, ok := scaleKey(e.instance)
		if !ok || seen[k] {
			continue
		}
		seen[k] = true
		b, had := r.scaled[k]
		var err error
		switch x := e.instance.(type) {
		case *ratelimit.Limiter:
			if !had {
				b.rate = x.Stats().Rate
			}
			err = x.SetRate(min(max(b.rate*factor, 1e-9), ratelimit.MaxRate))
		case *bulkhead.Bulkhead:
			if !had {
				b.max = x.Max()
			}
			err = x.SetMax(scaledMax(b.max, factor))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("registry: scaling %q: %w", e.name, err))
			continue
		}
		r.scaled[k] = b
		n++
	}
	return n, errors.Join(errs...)
}

// scaledMax is max·factor rounded, at least 1 and at most math.MaxInt,
// compared as a float before the conversion: float64(math.MaxInt) is 2⁶³,
// and converting a float at or above it to int is undefined.
func scaledMax(max int, factor float64) int {
	f := math.Round(float64(max) * factor)
	if f >= float64(math.MaxInt) {
		return math.MaxInt
	}
	return int(math.Max(f, 1))
}

// scaleKey is the key of the baseline of an instance Scale changes (the
// pointer itself), false for the kinds it leaves alone, which need not be
// comparable.
func scaleKey(v any) (any, bool) {
	switch v.(type) {
	case *ratelimit.Limiter, *bulkhead.Bulkhead:
		return v, true
	}
	return nil, false
}

// Restore puts back the baseline of every instance of group that Scale
// changed (overriding any change made to them since) and returns how many
// it restored. Errors are joined as in Scale; an instance that refuses its
// baseline keeps it recorded, so a later Restore tries again.
func (r *Registry) Restore(group string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	var errs []error
	for _, e := range r.groupLocked(group) {
		k, ok := scaleKey(e.instance)
		if !ok {
			continue
		}
		b, had := r.scaled[k]
		if !had {
			continue // not scaled, or restored through another of its names
		}
		var err error
		switch x := e.instance.(type) {
		case *ratelimit.Limiter:
			err = x.SetRate(b.rate)
		case *bulkhead.Bulkhead:
			err = x.SetMax(b.max)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("registry: restoring %q: %w", e.name, err))
			continue
		}
		delete(r.scaled, k)
		n++
	}
	return n, errors.Join(errs...)
}

// groupLocked returns the entries of group sorted by name (r.mu held).
func (r *Registry) groupLocked(group string) []*entry {
	var out []*entry
	for _, e := range r.entries {
		if e.inGroup(group) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.name, b.name) })
	return out
}
