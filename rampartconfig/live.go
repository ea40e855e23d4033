package rampartconfig

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/registry"
)

// Options are what a document cannot say: the clock and the code-level
// fields (listeners, classifiers, budgets) of the instances it builds.
type Options struct {
	// Registry receives the instances. Default: a new registry.
	Registry *registry.Registry
	// Ticker is every instance's and every pipeline's Config.Ticker (a
	// pipeline and its policies share one clock). Default
	// rampart.DefaultTicker().
	Ticker rampart.Ticker
	// Configure, when set, is called with every instance's name and a
	// pointer to its Config (*circuitbreaker.Config, *ratelimit.Config,
	// *ratelimit.ShardedConfig, *bulkhead.Config, *adaptive.Config,
	// *retry.Config, *timeout.Config, *hedge.Config, *shed.Config,
	// *pipeline.Config)
	// after the document's fields are set and before the Config is built
	// or applied, on every load and reload (more than once per reload:
	// validation builds throwaway twins too): set the listeners, Classify,
	// Budget and the like there. The fields a policy fixes at construction
	// (most listeners of bulkhead, ratelimit, adaptive and hedge) must get
	// the same func value every time (a package-level func, or a closure
	// kept in a variable), since Update refuses another one. It runs
	// while the Live applies, and must not call the Live's methods.
	Configure func(name string, cfg any)
	// Debounce is how long a [Watcher] waits after the last change to the
	// file before it reloads (editors write a file in several steps).
	// Default 100 ms.
	Debounce time.Duration
}

// apply sets the options' fields of cfg (nil-safe: Load validates with no
// options).
func (o *Options) apply(name string, cfg any) {
	if o == nil {
		return
	}
	if o.Ticker != nil {
		reflect.ValueOf(cfg).Elem().FieldByName("Ticker").Set(reflect.ValueOf(&o.Ticker).Elem())
	}
	if o.Configure != nil {
		o.Configure(name, cfg)
	}
}

// Live is a registry built from a document, and kept in step with the
// documents applied to it since. It knows the configuration each instance
// was built and last updated with, which a reload diffs against (some
// policies have no Config accessor). Its methods are safe for concurrent
// use; applies are serialised.
type Live struct {
	mu      sync.Mutex
	reg     *registry.Registry
	opts    Options
	doc     *Document
	version uint64
	applied map[string]*appliedInst // by registry name
	retired []*appliedInst          // removed or replaced instances to close at Close
	closed  bool
}

// appliedInst is one instance Live built and registered.
type appliedInst struct {
	plan *planned
	inst any
}

// Build validates doc and creates its instances in opts.Registry (a new
// registry by default): the named instances under their names, each
// pipeline under its name with its inline policies under
// "<pipeline>.<slot>" (db.breaker), each in its groups. A name already
// registered by someone else is an error; on any error nothing is
// registered.
func Build(doc *Document, opts Options) (*Live, error) {
	if opts.Registry == nil {
		opts.Registry = registry.New()
	}
	l := &Live{reg: opts.Registry, opts: opts, applied: map[string]*appliedInst{}}
	if err := l.Apply(doc); err != nil {
		return nil, err
	}
	return l, nil
}

// Registry returns the registry the instances are in.
func (l *Live) Registry() *registry.Registry { return l.reg }

// Document returns a copy of the document in force: the caller may change
// it (and apply it), which changes neither the Live's record nor the
// document that was applied.
func (l *Live) Document() *Document {
	l.mu.Lock()
	defer l.mu.Unlock()
	return cloneDoc(l.doc)
}

// cloneDoc returns a deep copy of d (nil for nil): a Live keeps and hands
// out documents that share no pointer with its callers'.
func cloneDoc(d *Document) *Document {
	if d == nil {
		return nil
	}
	return deepCopy(reflect.ValueOf(d)).Interface().(*Document)
}

// Version returns the number of documents applied (1 after Build).
func (l *Live) Version() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.version
}

// change is one step of an apply.
type change struct {
	p    *planned
	old  *appliedInst // nil for a new instance
	inst any          // the instance after the change
	// update: old.inst is updated in place to p.cfg; otherwise inst is
	// new (built) and replaces old (if any) in the registry.
	update  bool
	regroup bool // same instance, other groups
}

// Apply makes the registry match doc, all or nothing. It first validates
// every change without applying any: each instance whose spec changed is
// checked by its own Update on a throwaway twin built from the
// configuration in force, so a field fixed at construction that changed
// is an error naming its path (unless the instance is marked replace:
// true: then a new instance is built to replace it), and so are the
// pipelines, which have no Update (their changes need replace: true,
// except that a pipeline whose policy is replaced is rebuilt). Then it
// applies the changes: Update in place for the instances whose spec
// changed (the same pointers, their state kept), new instances for those
// added or replaced. Instances absent from doc are removed from the
// registry: calls in flight hold their own pointers, a removed Hedger or
// Timeout is closed by [Live.Close]. Instances whose spec is unchanged,
// or changed in its groups or replace only, are not updated (a
// registry.Scale of them stays; new groups are set in place). An Update of
// a scaled bulkhead or rate limiter sets the document's value and takes it
// as the baseline a later registry Restore puts back, under the registry's
// lock (registry.Registry.UpdateScaled). Should a step fail midway anyway
// (a registry name taken meanwhile), the steps applied are undone: every
// value and Scale baseline is put back as it was, scaled or not, and no
// instance is removed (the removals are the last step, after which nothing
// fails). Apply works on a deep copy of doc, which the caller may change
// and apply again. The error joins a *FieldError per invalid change.
func (l *Live) Apply(doc *Document) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("rampartconfig: Apply after Close")
	}
	if doc == nil {
		return errors.New("rampartconfig: Apply of a nil Document")
	}
	doc = cloneDoc(doc) // the plans share no slice with the caller's document
	plans, err := doc.plan(&l.opts)
	if err != nil {
		return err
	}
	changes, built, err := l.diff(plans)
	if err != nil {
		for _, b := range built {
			closeInst(b)
		}
		return err
	}
	if err := l.commit(plans, changes); err != nil {
		for _, b := range built {
			closeInst(b)
		}
		return err
	}
	l.doc = doc // a clone: the caller may write through its pointers after
	l.version++
	return nil
}

// needsClose reports whether a is of a kind Close must close (a Hedger, a
// Timeout): only those are kept once removed or replaced.
func needsClose(a *appliedInst) bool { return a.plan.kind != nil && a.plan.kind.close != nil }

// closeInst closes an instance of a kind that needs it.
func closeInst(a *appliedInst) {
	if a.plan.kind != nil && a.plan.kind.close != nil {
		a.plan.kind.close(a.inst)
	}
}

// diff validates plans against what is applied and returns the changes,
// with the instances it built for them (to close should the apply fail).
func (l *Live) diff(plans []*planned) ([]*change, []*appliedInst, error) {
	var errs []error
	var changes []*change
	var built []*appliedInst
	byName := map[string]any{} // the instance each name will have
	swapped := map[string]bool{}
	for _, p := range plans {
		old := l.applied[p.name]
		c := &change{p: p, old: old}
		if err := l.free(p.name, old); err != nil {
			errs = append(errs, &FieldError{Path: p.path, Err: err})
			continue
		}
		if p.kind == nil { // a pipeline: after its policies
			insts := map[string]any{}
			rebuild := old == nil || old.plan.kind != nil || !reflect.DeepEqual(old.plan.spec, p.spec)
			for slot, name := range p.slots {
				insts[slot] = byName[name]
				rebuild = rebuild || swapped[name]
			}
			if old != nil && old.plan.kind != nil && !p.replace {
				errs = append(errs, &FieldError{Path: p.path, Err: fmt.Errorf("was a %T: mark it replace: true to replace it", old.inst)})
				continue
			}
			if rebuild && old != nil && !p.replace && !anySwapped(p, swapped) {
				errs = append(errs, &FieldError{Path: p.path, Err: rampart.NewConfigError("pipeline", "", "is fixed at construction (its policies, idempotent, countStats): mark it replace: true to rebuild it")})
				continue
			}
			if !rebuild {
				c.inst = old.inst
				c.regroup = !sameGroups(old.plan.groups, p.groups)
				if c.regroup {
					changes = append(changes, c)
				}
				byName[p.name] = old.inst
				continue
			}
			pl, err := p.buildPipeline(insts, &l.opts)
			if err != nil {
				errs = append(errs, &FieldError{Path: p.path, Err: err})
				continue
			}
			c.inst = pl
			byName[p.name] = pl
			changes = append(changes, c)
			continue
		}
		switch {
		case old != nil && old.plan.kind == p.kind && samePolicy(old.plan.spec, p.spec):
			c.inst = old.inst
			c.regroup = !sameGroups(old.plan.groups, p.groups)
			byName[p.name] = old.inst
			if c.regroup {
				changes = append(changes, c)
			}
			continue
		case old != nil && old.plan.kind == p.kind:
			err := l.dryUpdate(old, p)
			if err == nil {
				c.inst, c.update, c.regroup = old.inst, true, !sameGroups(old.plan.groups, p.groups)
				byName[p.name] = old.inst
				changes = append(changes, c)
				continue
			}
			if !p.replace {
				errs = append(errs, fieldErr(p.path, err))
				continue
			}
		case old != nil && !p.replace:
			errs = append(errs, &FieldError{Path: p.path, Err: fmt.Errorf("was a %T: mark it replace: true to replace it", old.inst)})
			continue
		}
		inst, err := p.kind.build(p.cfg)
		if err != nil {
			errs = append(errs, fieldErr(p.path, err))
			continue
		}
		built = append(built, &appliedInst{plan: p, inst: inst})
		c.inst = inst
		byName[p.name] = inst
		swapped[p.name] = old != nil
		changes = append(changes, c)
	}
	if len(errs) > 0 {
		return nil, built, errors.Join(errs...)
	}
	return changes, built, nil
}

// samePolicy reports whether two merged specs of a kind set the same
// policy fields: Meta (groups, replace) is no Config's, and a change of it
// alone is a regroup, not an Update (which would undo a registry.Scale).
func samePolicy(a, b any) bool {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	ca, cb := reflect.New(va.Type()).Elem(), reflect.New(vb.Type()).Elem()
	ca.Set(va)
	cb.Set(vb)
	ca.FieldByName("Meta").SetZero()
	cb.FieldByName("Meta").SetZero()
	return reflect.DeepEqual(ca.Interface(), cb.Interface())
}

// anySwapped reports whether a policy of pipeline p is replaced.
func anySwapped(p *planned, swapped map[string]bool) bool {
	for _, n := range p.slots {
		if swapped[n] {
			return true
		}
	}
	return false
}

// free checks that name is free in the registry, or holds old's instance.
func (l *Live) free(name string, old *appliedInst) error {
	v, ok := l.reg.Get(name)
	if !ok || old != nil && v == old.inst {
		return nil
	}
	return fmt.Errorf("the registry name %q is taken by a %T the document did not build", name, v)
}

// dryUpdate checks that old's instance would accept p's Config: a twin
// built from old's configuration takes the Update, and is closed.
func (l *Live) dryUpdate(old *appliedInst, p *planned) error {
	oc := reflect.New(p.kind.config)
	oc.Elem().Set(reflect.ValueOf(old.plan.cfg).Elem())
	nc := reflect.New(p.kind.config)
	nc.Elem().Set(reflect.ValueOf(p.cfg).Elem())
	for i := range oc.Elem().NumField() {
		fo, fn := oc.Elem().Field(i), nc.Elem().Field(i)
		if fo.Kind() == reflect.Func && !fo.IsNil() && !fn.IsNil() && funcIdentity(fo) == funcIdentity(fn) {
			// The same listener on both sides: the twin has none, so
			// that its Update tells no one of a change the live
			// instance may never make (adaptive's OnLimitChange).
			fo.SetZero()
			fn.SetZero()
		}
	}
	if p.kind.update == nil {
		return changedField(p.kind, oc.Interface(), nc.Interface())
	}
	twin, err := p.kind.build(oc.Interface())
	if err != nil {
		return err
	}
	if p.kind.close != nil {
		defer p.kind.close(twin)
	}
	return p.kind.update(twin, nc.Interface())
}

// fieldErr wraps err at path, the ConfigError's field appended.
func fieldErr(path string, err error) error {
	if ce, ok := errors.AsType[*rampart.ConfigError](err); ok && ce.Field != "" {
		return &FieldError{Path: path + "." + docPath(ce.Field), Err: err, field: ce.Field}
	}
	return &FieldError{Path: path, Err: err}
}

// commit applies the validated changes, undoing them all on a failure.
func (l *Live) commit(plans []*planned, changes []*change) (err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	for _, c := range changes {
		if !c.update || c.p.kind.update == nil { // no Update: nothing changed (changedField)
			continue
		}
		c := c
		set := func() error { return c.p.kind.update(c.old.inst, c.p.cfg) }
		unset := func() { _ = c.p.kind.update(c.old.inst, c.old.plan.cfg) }
		if !scalable(c.old.inst) {
			// No Scale changes it: Update directly, with no registry
			// lock held while its listeners run (adaptive's
			// OnLimitChange).
			if err := set(); err != nil {
				return fieldErr(c.p.path, err)
			}
			undo = append(undo, unset)
			continue
		}
		// A bulkhead's max or a limiter's rate: Update and re-take a
		// Scale's baseline under the registry's lock (no Scale between
		// them: a later Restore puts back the document's value); the
		// undo puts back the value and the baseline it had, scaled or not.
		back, err := l.reg.UpdateScaled(c.p.name, set)
		if err != nil {
			return fieldErr(c.p.path, err)
		}
		undo = append(undo, func() { back(unset) })
	}
	keep := map[string]bool{}
	for _, p := range plans {
		keep[p.name] = true
	}
	var retired []*appliedInst
	// The new names first (an Add fails when the name was taken
	// meanwhile), then the replacements: a Remove drops a Scale's
	// baseline, which the undo's Add would not put back.
	ordered := make([]*change, 0, len(changes))
	for _, c := range changes {
		if c.old == nil || c.inst == c.old.inst {
			ordered = append(ordered, c)
		}
	}
	for _, c := range changes {
		if c.old != nil && c.inst != c.old.inst {
			ordered = append(ordered, c)
		}
	}
	for _, c := range ordered {
		if c.old != nil && c.inst == c.old.inst {
			if c.regroup { // the same instance in other groups: its entry (and a Scale's baseline) kept
				if err := l.reg.SetGroups(c.p.name, c.p.groups...); err != nil {
					return &FieldError{Path: c.p.path, Err: err}
				}
				old := c.old
				undo = append(undo, func() { _ = l.reg.SetGroups(old.plan.name, old.plan.groups...) })
			}
			continue
		}
		if c.old != nil { // replaced
			l.reg.Remove(c.p.name)
			old := c.old
			undo = append(undo, func() { _ = l.reg.Add(old.plan.name, old.inst, old.plan.groups...) })
			if c.inst != old.inst && needsClose(old) {
				retired = append(retired, old)
			}
		}
		if err := l.reg.Add(c.p.name, c.inst, c.p.groups...); err != nil {
			return &FieldError{Path: c.p.path, Err: err}
		}
		name := c.p.name
		undo = append(undo, func() { l.reg.Remove(name) })
	}
	// The removals last: nothing fails after them, so that none is undone
	// (a Remove drops a Scale's baseline, which an Add would not put back).
	for name, a := range l.applied {
		if keep[name] {
			continue
		}
		l.reg.Remove(name)
		if needsClose(a) {
			retired = append(retired, a)
		}
	}
	next := map[string]*appliedInst{}
	byName := map[string]*change{}
	for _, c := range changes {
		byName[c.p.name] = c
	}
	for _, p := range plans {
		if c, ok := byName[p.name]; ok {
			next[p.name] = &appliedInst{plan: p, inst: c.inst}
			continue
		}
		next[p.name] = &appliedInst{plan: p, inst: l.applied[p.name].inst}
	}
	l.applied = next
	l.retired = append(l.retired, retired...)
	return nil
}

// sameGroups reports whether two group lists are the same set.
func sameGroups(a, b []string) bool {
	set := map[string]bool{}
	for _, g := range a {
		set[g] = true
	}
	for _, g := range b {
		if !set[g] {
			return false
		}
	}
	set2 := map[string]bool{}
	for _, g := range b {
		set2[g] = true
	}
	return len(set) == len(set2)
}

// Close closes the Hedgers and Timeouts Live built, those removed or
// replaced by a reload included (their watchdogs), and refuses later
// applies. The registry keeps its instances. Close is idempotent.
func (l *Live) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	for _, a := range l.applied {
		closeInst(a)
	}
	for _, a := range l.retired {
		closeInst(a)
	}
	l.retired = nil
	return nil
}

// scalable reports whether registry.Scale changes inst (a bulkhead's max,
// a rate limiter's rate): its Update goes through
// registry.Registry.UpdateScaled.
func scalable(inst any) bool {
	switch inst.(type) {
	case *bulkhead.Bulkhead, *ratelimit.Limiter:
		return true
	}
	return false
}

// funcIdentity is the closure pointer of the func field v (addressable),
// as the policies' Update compares it (internal/sameptr.Func): reflect's
// Pointer is the code pointer, shared by every closure of one literal.
func funcIdentity(v reflect.Value) unsafe.Pointer {
	return *(*unsafe.Pointer)(v.Addr().UnsafePointer())
}

// sameField reports whether the fields a and b (addressable, of one type)
// hold the same value: a func by identity (funcIdentity); an interface
// whose dynamic type is not comparable (a shed.SourceFunc) by its data
// word, the same boxed value, as internal/sameptr.Value; anything else by
// reflect.DeepEqual, which finds two non-nil funcs always different.
func sameField(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Func:
		return funcIdentity(a) == funcIdentity(b)
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() && b.IsNil()
		}
		ea, eb := a.Elem(), b.Elem()
		if ea.Type() != eb.Type() {
			return false
		}
		if ea.Comparable() {
			return a.Interface() == b.Interface()
		}
		return (*[2]unsafe.Pointer)(a.Addr().UnsafePointer())[1] == (*[2]unsafe.Pointer)(b.Addr().UnsafePointer())[1]
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}
