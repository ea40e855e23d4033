package rampartotel

import (
	"context"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/observe"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Source is a set of named instances read at every collection, such as a
// *registry.Registry (see observe.Source: unknown types and panics are
// skipped and counted as rampart.skipped_instances, a name that is not
// valid UTF-8 is repaired).
type Source = observe.Source

// ErrUnsupported is returned by Add for an instance whose type the scheme
// does not know (see the package doc for the types it does).
var ErrUnsupported = observe.ErrUnsupported

// ErrDuplicateName is returned by Add for a name already added for an
// instance of the same kind family.
var ErrDuplicateName = observe.ErrDuplicateName

// Attribute names of the metrics, shared with the trace events.
const (
	attrName   = observe.AttrName
	attrState  = observe.AttrState
	attrPolicy = observe.AttrPolicy
)

// Config configures [New]. The zero value is valid.
type Config struct {
	// Ticker is the clock read once per collection for the stats that are
	// read at a clock reading (the window of a *retry.RatioBudget): give
	// the ticker the budget's policies use. Zero means
	// rampart.DefaultTicker.
	Ticker rampart.Ticker
}

// Metrics reports the Stats of rampart instances as OpenTelemetry
// observable instruments. It reads each instance's Stats once per
// collection, in one callback registered on the Meter; between
// collections it does nothing, and the instances' calls never touch it.
//
// Create it with [New], then give it instances with [Metrics.Add] or
// [Metrics.AddSource]. Its methods are safe for concurrent use, and with a
// collection.
type Metrics struct {
	set  *observe.Set
	inst map[*observe.Type][]metric.Float64Observable
	skip metric.Float64ObservableGauge
	reg  metric.Registration

	// Used by collections only, under set.mu.
	attrs map[string]*nameAttrs
	gen   uint64
}

// nameAttrs is the attribute sets of one instance name, built once and
// kept while a collection sees the name.
type nameAttrs struct {
	name   attribute.Set
	states [len(observe.BreakerStates)]attribute.Set
	extra  map[*observe.Metric]attribute.Set // the series of a metric with an attribute of its own (ms.attr), built at its first collection
	gen    uint64
}

// New creates every instrument of the scheme on meter (see the package
// doc) and registers the callback that reads the instances. It returns a
// *rampart.ConfigError for a nil meter, and the meter's error if an
// instrument or the callback cannot be created.
func New(meter metric.Meter, cfg Config) (*Metrics, error) {
	if meter == nil {
		return nil, rampart.NewConfigError("rampartotel", "meter", "must not be nil")
	}
	m := &Metrics{set: observe.NewSet(cfg.Ticker), inst: map[*observe.Type][]metric.Float64Observable{}, attrs: map[string]*nameAttrs{}}
	byName := map[string]metric.Float64Observable{}
	var all []metric.Observable
	for _, k := range observe.Types() {
		obs := make([]metric.Float64Observable, len(k.Metrics))
		for i := range k.Metrics {
			ms := &k.Metrics[i]
			if o, ok := byName[ms.Name]; ok {
				obs[i] = o
				continue
			}
			o, err := instrument(meter, ms)
			if err != nil {
				return nil, err
			}
			byName[ms.Name], obs[i] = o, o
			all = append(all, o)
		}
		m.inst[k] = obs
	}
	sk := &observe.SkippedMetric
	skip, err := meter.Float64ObservableGauge(sk.Name, metric.WithUnit(sk.Unit), metric.WithDescription(sk.Description))
	if err != nil {
		return nil, err
	}
	m.skip = skip
	all = append(all, skip)
	m.reg, err = meter.RegisterCallback(m.callback, all...)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func instrument(meter metric.Meter, ms *observe.Metric) (metric.Float64Observable, error) {
	if ms.Kind == observe.Counter {
		return meter.Float64ObservableCounter(ms.Name, metric.WithUnit(ms.Unit), metric.WithDescription(ms.Description))
	}
	return meter.Float64ObservableGauge(ms.Name, metric.WithUnit(ms.Unit), metric.WithDescription(ms.Description))
}

// Add collects inst under name from the next collection on. It returns an
// error wrapping [ErrUnsupported] for a type the package does not collect
// (a *pipeline.Pipeline built without Config.CountStats included: it
// counts nothing; add its policies), and
// one wrapping [ErrDuplicateName] if name is already added for an instance
// of the same family (the ratelimit types form one family, as they share
// metric names).
func (m *Metrics) Add(name string, inst any) error { return m.set.Add(name, inst) }

// Remove stops collecting the instances added under name.
func (m *Metrics) Remove(name string) { m.set.Remove(name) }

// AddSource collects every instance src holds, at every collection. An
// instance added by name wins over a Source's of the same family and name.
func (m *Metrics) AddSource(src Source) { m.set.AddSource(src) }

// Close unregisters the callback: the instruments report nothing more.
func (m *Metrics) Close() error { return m.reg.Unregister() }

func (m *Metrics) callback(_ context.Context, o metric.Observer) error {
	m.set.Collect(&observation{m: m, o: o})
	return nil
}

// observation is one collection's observe.Emitter.
type observation struct {
	m   *Metrics
	o   metric.Observer
	gen uint64
}

// Begin numbers the collection (m.gen is read and written under the
// set's lock only: readers may collect concurrently).
func (ob *observation) Begin() {
	ob.m.gen++
	ob.gen = ob.m.gen
}

func (ob *observation) attrsOf(name string) *nameAttrs {
	a := ob.m.attrs[name]
	if a == nil {
		a = &nameAttrs{name: attribute.NewSet(attribute.String(attrName, name)), extra: map[*observe.Metric]attribute.Set{}}
		for i, st := range observe.BreakerStates {
			a.states[i] = attribute.NewSet(attribute.String(attrName, name), attribute.String(attrState, st.String()))
		}
		ob.m.attrs[name] = a
	}
	a.gen = ob.gen
	return a
}

// Instance observes the values of one instance.
func (ob *observation) Instance(name string, spec *observe.Type, v []float64) {
	a := ob.attrsOf(name)
	obs := ob.m.inst[spec]
	for i := range spec.Metrics {
		ms := &spec.Metrics[i]
		if ms.Attr != "" {
			set, ok := a.extra[ms]
			if !ok {
				set = attribute.NewSet(attribute.String(attrName, name), attribute.String(ms.Attr, ms.Value))
				a.extra[ms] = set
			}
			ob.o.ObserveFloat64(obs[i], v[i], metric.WithAttributeSet(set))
			continue
		}
		if ms.States {
			for st := range observe.BreakerStates {
				x := 0.0
				if int(v[i]) == st {
					x = 1
				}
				ob.o.ObserveFloat64(obs[i], x, metric.WithAttributeSet(a.states[st]))
			}
			continue
		}
		ob.o.ObserveFloat64(obs[i], v[i], metric.WithAttributeSet(a.name))
	}
}

var reasonSets = func() (s [observe.NumSkipReasons]attribute.Set) {
	for i, r := range observe.SkipReasons {
		s[i] = attribute.NewSet(attribute.String(observe.AttrReason, r))
	}
	return s
}()

// Skipped observes rampart.skipped_instances and forgets the names this
// collection did not see.
func (ob *observation) Skipped(counts *[observe.NumSkipReasons]int) {
	for i, n := range counts {
		ob.o.ObserveFloat64(ob.m.skip, float64(n), metric.WithAttributeSet(reasonSets[i]))
	}
	// Forget the names this collection did not see.
	for name, a := range ob.m.attrs {
		if a.gen != ob.gen {
			delete(ob.m.attrs, name)
		}
	}
}
