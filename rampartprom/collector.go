package rampartprom

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/observe"
)

// Source is a set of named instances read at every scrape, such as a
// *registry.Registry (see observe.Source: unknown types and panics are
// skipped and counted as rampart_skipped_instances, a name that is not
// valid UTF-8 is repaired).
type Source = observe.Source

// ErrUnsupported is returned by Add for an instance whose type the scheme
// does not know (see the package doc for the types it does).
var ErrUnsupported = observe.ErrUnsupported

// ErrDuplicateName is returned by Add for a name already added for an
// instance of the same kind family.
var ErrDuplicateName = observe.ErrDuplicateName

// Config configures [NewCollector]. The zero value is valid.
type Config struct {
	// Ticker is the clock read once per collection for the stats that are
	// read at a clock reading (the window of a *retry.RatioBudget): give
	// the ticker the budget's policies use. Zero means
	// rampart.DefaultTicker.
	Ticker rampart.Ticker
}

// Collector is a prometheus.Collector of the Stats of rampart instances.
// It reads each instance's Stats once per Collect (once per scrape);
// between scrapes it does nothing, and the instances' calls never touch
// it.
//
// Create it with [NewCollector], register it (prometheus.MustRegister),
// then give it instances with [Collector.Add] or [Collector.AddSource]. Its
// methods are safe for concurrent use, and with a scrape.
type Collector struct {
	set   *observe.Set
	descs map[*observe.Type][]*prometheus.Desc
	all   []*prometheus.Desc
	skip  *prometheus.Desc

	// Used by collections only, under set.mu.
	labels map[string]*nameLabels
	gen    uint64
}

// nameLabels is the label pairs of one instance name, built once and kept
// while a scrape sees the name. The registry only reads them (as it reads
// a const metric's, which it shares the same way), so every scrape reuses
// them.
type nameLabels struct {
	name   []*dto.LabelPair
	states [len(observe.BreakerStates)][]*dto.LabelPair
	extra  map[*observe.Metric][]*dto.LabelPair // the series of a metric with an attribute of its own (ms.attr), built at its first scrape
	gen    uint64
}

// Label names: the OpenTelemetry attribute names, dots as underscores.
var (
	labelName   = observe.PromLabel(observe.AttrName)
	labelState  = observe.PromLabel(observe.AttrState)
	labelReason = observe.PromLabel(observe.AttrReason)
)

// NewCollector returns a collector of no instance yet.
func NewCollector(cfg Config) *Collector {
	c := &Collector{set: observe.NewSet(cfg.Ticker), descs: map[*observe.Type][]*prometheus.Desc{}, labels: map[string]*nameLabels{}}
	byName := map[string]*prometheus.Desc{}
	for _, k := range observe.Types() {
		ds := make([]*prometheus.Desc, len(k.Metrics))
		for i := range k.Metrics {
			ms := &k.Metrics[i]
			d, ok := byName[ms.Name]
			if !ok {
				labels := []string{labelName}
				if ms.States {
					labels = append(labels, labelState)
				}
				if ms.Attr != "" {
					labels = append(labels, observe.PromLabel(ms.Attr))
				}
				d = prometheus.NewDesc(observe.PromName(ms), ms.Description, labels, nil)
				byName[ms.Name] = d
				c.all = append(c.all, d)
			}
			ds[i] = d
		}
		c.descs[k] = ds
	}
	c.skip = prometheus.NewDesc(observe.PromName(&observe.SkippedMetric), observe.SkippedMetric.Description, []string{labelReason}, nil)
	c.all = append(c.all, c.skip)
	return c
}

// Add collects inst under name from the next scrape on. It returns an
// error wrapping [ErrUnsupported] for a type the package does not collect
// (a *pipeline.Pipeline built without Config.CountStats included: it
// counts nothing; add its policies), and
// one wrapping [ErrDuplicateName] if name is already added for an instance
// of the same family (the ratelimit types form one family, as they share
// metric names).
func (c *Collector) Add(name string, inst any) error { return c.set.Add(name, inst) }

// Remove stops collecting the instances added under name.
func (c *Collector) Remove(name string) { c.set.Remove(name) }

// AddSource collects every instance src holds, at every scrape. An
// instance added by name wins over a Source's of the same family and name.
func (c *Collector) AddSource(src Source) { c.set.AddSource(src) }

// Describe sends the descriptor of every metric of the scheme.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.all {
		ch <- d
	}
}

// Collect reads every instance's Stats and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.set.Collect(&scrape{c: c, ch: ch})
}

// scrape is one Collect's observe.Emitter.
type scrape struct {
	c   *Collector
	ch  chan<- prometheus.Metric
	gen uint64
}

// sample is one series of a scrape, in one allocation: its descriptor,
// its (shared) label pairs, and its value with the dto wrapper that Write
// hands the registry.
type sample struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	counter bool
	value   float64
	gauge   dto.Gauge
	count   dto.Counter
}

// Desc returns the sample's descriptor.
func (s *sample) Desc() *prometheus.Desc { return s.desc }

// Write writes the sample's labels and value into out.
func (s *sample) Write(out *dto.Metric) error {
	out.Label = s.labels
	if s.counter {
		out.Counter = &s.count
	} else {
		out.Gauge = &s.gauge
	}
	return nil
}

// newSample returns a sample whose dto wrappers point at its value.
func newSample(desc *prometheus.Desc, labels []*dto.LabelPair, counter bool, value float64) *sample {
	s := &sample{desc: desc, labels: labels, counter: counter, value: value}
	s.gauge.Value, s.count.Value = &s.value, &s.value
	return s
}

func pair(name, value string) *dto.LabelPair { return &dto.LabelPair{Name: &name, Value: &value} }

// Begin numbers the scrape (c.gen is read and written under the set's
// lock only: scrapes may run concurrently).
func (s *scrape) Begin() {
	s.c.gen++
	s.gen = s.c.gen
}

func (s *scrape) labelsOf(name string) *nameLabels {
	l := s.c.labels[name]
	if l == nil {
		np := pair(labelName, name)
		l = &nameLabels{name: []*dto.LabelPair{np}, extra: map[*observe.Metric][]*dto.LabelPair{}}
		for i, st := range observe.BreakerStates {
			l.states[i] = []*dto.LabelPair{np, pair(labelState, st.String())} // sorted: rampart_name < rampart_state
		}
		s.c.labels[name] = l
	}
	l.gen = s.gen
	return l
}

// Instance sends the samples of one instance.
func (s *scrape) Instance(name string, spec *observe.Type, v []float64) {
	l := s.labelsOf(name)
	ds := s.c.descs[spec]
	for i := range spec.Metrics {
		ms := &spec.Metrics[i]
		if ms.States {
			for st := range observe.BreakerStates {
				x := 0.0
				if int(v[i]) == st {
					x = 1
				}
				s.ch <- newSample(ds[i], l.states[st], false, x)
			}
			continue
		}
		lp := l.name
		if ms.Attr != "" {
			lp = l.extra[ms]
			if lp == nil {
				lp = sortedPairs(l.name[0], pair(observe.PromLabel(ms.Attr), ms.Value))
				l.extra[ms] = lp
			}
		}
		s.ch <- newSample(ds[i], lp, ms.Kind == observe.Counter, v[i])
	}
}

// sortedPairs returns a and b sorted by name, as the registry wants a
// metric's labels.
func sortedPairs(a, b *dto.LabelPair) []*dto.LabelPair {
	if b.GetName() < a.GetName() {
		a, b = b, a
	}
	return []*dto.LabelPair{a, b}
}

// Skipped sends rampart_skipped_instances and forgets the names this
// scrape did not see.
func (s *scrape) Skipped(counts *[observe.NumSkipReasons]int) {
	for i, n := range counts {
		s.ch <- prometheus.MustNewConstMetric(s.c.skip, prometheus.GaugeValue, float64(n), observe.SkipReasons[i])
	}
	// Forget the names this scrape did not see.
	for name, l := range s.c.labels {
		if l.gen != s.gen {
			delete(s.c.labels, name)
		}
	}
}
