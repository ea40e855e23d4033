package observe

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/rampart-go/rampart"
)

// Source is a set of named instances that a Set reads at every
// collection, such as a *registry.Registry. Range calls f for each instance
// until f returns false. Instances of a type the scheme does not know are
// skipped and counted (rampart.skipped_instances). A name that is not
// valid UTF-8 is collected with each invalid byte sequence replaced by
// U+FFFD (strings.ToValidUTF8). A panic of Range, or of the Stats of an
// instance it holds, is recovered and counted as skipped, reason
// "panicked": it never fails a collection.
type Source interface {
	Range(f func(name string, instance any) bool)
}

// ErrUnsupported is returned by Add for an instance whose type the scheme
// does not know (see the package doc for the types it does).
var ErrUnsupported = errors.New("unsupported instance type")

// ErrDuplicateName is returned by Add for a name already added for an
// instance of the same kind family.
var ErrDuplicateName = errors.New("name already added for this kind")

// entry is one instance added by name.
type entry struct {
	name string
	inst any
	spec *Type
}

// seriesKey identifies an instance's series: its family and its name.
type seriesKey struct {
	family string
	name   string
}

// Emitter receives the values a collection reads: an exporter's
// translation into its own observations. A Set calls its methods under
// the Set's lock, one collection at a time, in this order: Begin, Instance
// for each instance, Skipped.
type Emitter interface {
	// Begin starts a collection.
	Begin()
	// Instance reports the values v of t's Metrics for the named instance
	// (v[i] is t.Metrics[i]'s value; v is reused: read it before
	// returning).
	Instance(name string, t *Type, v []float64)
	// Skipped reports the instances the Sources held and that were not
	// collected, and the panics recovered, by reason (indexed as
	// SkipReasons).
	Skipped(counts *[NumSkipReasons]int)
}

// Set is the named instances an exporter collects. Only Collect and
// Add/Remove/AddSource take its lock: the policies' calls never touch it.
// Its methods are safe for concurrent use.
type Set struct {
	mu      sync.Mutex
	tk      rampart.Ticker
	sources []Source
	named   map[string][]entry
	seen    map[seriesKey]struct{} // reused by every collection (cleared, never reallocated once grown)
	buf     [MaxMetrics]float64
	skip    [NumSkipReasons]int
}

// NewSet returns a Set of no instance. tk is the clock read once per
// collection for the stats read at a clock reading (the window of a
// *retry.RatioBudget); nil means rampart.DefaultTicker.
func NewSet(tk rampart.Ticker) *Set {
	return &Set{tk: tickerOrDefault(tk), named: map[string][]entry{}, seen: map[seriesKey]struct{}{}}
}

// Add collects inst under name from the next collection on. It returns an
// error wrapping ErrUnsupported for a type the scheme does not know (a
// *pipeline.Pipeline built without Config.CountStats included: it counts
// nothing), and one wrapping ErrDuplicateName if name is already added for
// an instance of the same family. An empty name, a name that is not
// valid UTF-8, and a nil instance are refused too.
func (s *Set) Add(name string, inst any) error {
	if name == "" {
		return fmt.Errorf("observe: Add: empty name")
	}
	if !utf8.ValidString(name) { // an attribute or label value must be UTF-8: an exporter would fail on it
		return fmt.Errorf("observe: Add(%q): the name is not valid UTF-8", name)
	}
	if isNil(inst) {
		return fmt.Errorf("observe: Add(%q): nil instance", name)
	}
	spec, noStats := specOf(inst)
	if noStats {
		return fmt.Errorf("observe: Add(%q): %w: a *pipeline.Pipeline built without Config.CountStats counts nothing; build it with CountStats, or add its policies (Pipeline.Config())", name, ErrUnsupported)
	}
	if spec == nil {
		return fmt.Errorf("observe: Add(%q): %w: %T", name, ErrUnsupported, inst)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.named[name] {
		if e.spec.Family == spec.Family {
			return fmt.Errorf("observe: Add(%q, %T): %w (%s)", name, inst, ErrDuplicateName, e.spec.GoType)
		}
	}
	s.named[name] = append(s.named[name], entry{name: name, inst: inst, spec: spec})
	return nil
}

// Remove stops collecting the instances added under name.
func (s *Set) Remove(name string) {
	s.mu.Lock()
	delete(s.named, name)
	s.mu.Unlock()
}

// AddSource collects every instance src holds, at every collection. An
// instance added by name wins over a Source's of the same family and name.
func (s *Set) AddSource(src Source) {
	s.mu.Lock()
	s.sources = append(s.sources, src)
	s.mu.Unlock()
}

// Collect reads every instance's Stats once and hands the values to em.
// It allocates nothing per instance or series once its map of names seen
// has grown to the number of instances.
// An instance added by name wins over a Source's instance of the same
// family and name; of a Source's duplicates, the first one wins. A panic
// of a Source's Range or of an instance's Stats (a type of the user's
// with a Stats() pipeline.FallbackStats method) is recovered and counted
// as skipped, reason panicked: one bad instance or Source never fails the
// collection of the others (a Prometheus scrape, or an OpenTelemetry
// reader's goroutine, which the panic would kill).
func (s *Set) Collect(em Emitter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.seen)
	s.skip = [NumSkipReasons]int{}
	em.Begin()
	now := s.tk.Now() // for windowed stats read at a clock reading (RatioBudget)
	for name, es := range s.named {
		for i := range es {
			e := &es[i]
			s.seen[seriesKey{e.spec.Family, name}] = struct{}{}
			s.emit(em, name, e.spec, e.inst, now)
		}
	}
	for _, src := range s.sources {
		s.rangeSource(em, src, now)
	}
	em.Skipped(&s.skip)
}

// rangeSource collects the instances src holds. A panic of src.Range is
// recovered here and counted once (the instances it handed over before
// the panic are collected).
func (s *Set) rangeSource(em Emitter, src Source, now int64) {
	defer func() {
		if recover() != nil {
			s.skip[SkipPanicked]++
		}
	}()
	src.Range(func(name string, inst any) bool {
		spec, noStats := specOf(inst)
		switch {
		case noStats:
			s.skip[SkipNoStats]++
			return true
		case spec == nil || isNil(inst):
			s.skip[SkipUnknownType]++
			return true
		}
		name = strings.ToValidUTF8(name, "\uFFFD") // returns name itself, no allocation, when it is valid
		k := seriesKey{spec.Family, name}
		if _, dup := s.seen[k]; dup {
			if !s.addedAs(name, inst) { // the same instance added by name too is no duplicate
				s.skip[SkipDuplicate]++
			}
			return true
		}
		s.seen[k] = struct{}{}
		s.emit(em, name, spec, inst, now)
		return true
	})
}

// emit reads inst's Stats and hands the values to em. A panic of the read
// is recovered and counted: nothing of inst is emitted (em.Instance runs
// only after the whole read).
func (s *Set) emit(em Emitter, name string, spec *Type, inst any, now int64) {
	defer func() {
		if recover() != nil {
			s.skip[SkipPanicked]++
		}
	}()
	v := s.buf[:len(spec.Metrics)]
	spec.read(inst, now, v)
	em.Instance(name, spec, v)
}

// addedAs reports whether inst was added under name.
func (s *Set) addedAs(name string, inst any) bool {
	for _, e := range s.named[name] {
		if e.inst == inst {
			return true
		}
	}
	return false
}
