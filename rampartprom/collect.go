package rampartprom

// This file is the set of instances an adapter collects, shared word for
// word by rampartotel and rampartprom (each module holds a copy).

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/rampart-go/rampart"
)

// Source is a set of named instances that the adapter reads at every
// collection, such as a *registry.Registry. Range calls f for each instance
// until f returns false. Instances of a type the adapter does not know are
// skipped and counted (rampart.skipped_instances). A name that is not
// valid UTF-8 is collected with each invalid byte sequence replaced by
// U+FFFD (strings.ToValidUTF8). A panic of Range, or of the Stats of an
// instance it holds, is recovered and counted as skipped, reason
// "panicked": it never fails a collection.
type Source interface {
	Range(f func(name string, instance any) bool)
}

// ErrUnsupported is returned by Add for an instance whose type the adapter
// does not collect (see the package doc for the types it does).
var ErrUnsupported = errors.New("unsupported instance type")

// ErrDuplicateName is returned by Add for a name already added for an
// instance of the same kind family.
var ErrDuplicateName = errors.New("name already added for this kind")

// entry is one instance added by name.
type entry struct {
	name string
	inst any
	spec *kindSpec
}

// seriesKey identifies an instance's series: its family and its name.
type seriesKey struct {
	family string
	name   string
}

// emitter receives the values of one instance at collection time.
type emitter interface {
	// begin starts a collection (under the set's lock, as are the other
	// methods).
	begin()
	// instance reports the values v of spec's metrics for the named
	// instance (v is reused: read it before returning).
	instance(name string, spec *kindSpec, v []float64)
	// skipped reports the instances the Sources held and that were not
	// collected, by reason.
	skipped(counts *[nSkipReasons]int)
}

// set is the instances an adapter collects. Only collection and
// Add/Remove/AddSource take its lock: the policies' calls never touch it.
type set struct {
	mu      sync.Mutex
	tk      rampart.Ticker
	sources []Source
	named   map[string][]entry
	seen    map[seriesKey]struct{} // reused by every collection (cleared, never reallocated once grown)
	buf     [maxMetrics]float64
	skip    [nSkipReasons]int
}

func newSet(tk rampart.Ticker) *set {
	return &set{tk: tickerOrDefault(tk), named: map[string][]entry{}, seen: map[seriesKey]struct{}{}}
}

func (s *set) add(name string, inst any) error {
	if name == "" {
		return fmt.Errorf("rampart adapter: Add: empty name")
	}
	if !utf8.ValidString(name) { // an attribute or label value must be UTF-8: an exporter would fail on it
		return fmt.Errorf("rampart adapter: Add(%q): the name is not valid UTF-8", name)
	}
	if isNil(inst) {
		return fmt.Errorf("rampart adapter: Add(%q): nil instance", name)
	}
	spec, noStats := specOf(inst)
	if noStats {
		return fmt.Errorf("rampart adapter: Add(%q): %w: a *pipeline.Pipeline built without Config.CountStats counts nothing; build it with CountStats, or add its policies (Pipeline.Config())", name, ErrUnsupported)
	}
	if spec == nil {
		return fmt.Errorf("rampart adapter: Add(%q): %w: %T", name, ErrUnsupported, inst)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.named[name] {
		if e.spec.family == spec.family {
			return fmt.Errorf("rampart adapter: Add(%q, %T): %w (%s)", name, inst, ErrDuplicateName, e.spec.typ)
		}
	}
	s.named[name] = append(s.named[name], entry{name: name, inst: inst, spec: spec})
	return nil
}

func (s *set) remove(name string) {
	s.mu.Lock()
	delete(s.named, name)
	s.mu.Unlock()
}

func (s *set) addSource(src Source) {
	s.mu.Lock()
	s.sources = append(s.sources, src)
	s.mu.Unlock()
}

// collect reads every instance's Stats once and hands the values to em.
// An instance added by name wins over a Source's instance of the same
// family and name; of a Source's duplicates, the first one wins. A panic
// of a Source's Range or of an instance's Stats (a type of the user's
// with a Stats() pipeline.FallbackStats method) is recovered and counted
// as skipped, reason panicked: one bad instance or Source never fails the
// collection of the others (a Prometheus scrape, or an OpenTelemetry
// reader's goroutine, which the panic would kill).
func (s *set) collect(em emitter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.seen)
	s.skip = [nSkipReasons]int{}
	em.begin()
	now := s.tk.Now() // for windowed stats read at a clock reading (RatioBudget)
	for name, es := range s.named {
		for i := range es {
			e := &es[i]
			s.seen[seriesKey{e.spec.family, name}] = struct{}{}
			s.emit(em, name, e.spec, e.inst, now)
		}
	}
	for _, src := range s.sources {
		s.rangeSource(em, src, now)
	}
	em.skipped(&s.skip)
}

// rangeSource collects the instances src holds. A panic of src.Range is
// recovered here and counted once (the instances it handed over before
// the panic are collected).
func (s *set) rangeSource(em emitter, src Source, now int64) {
	defer func() {
		if recover() != nil {
			s.skip[skipPanicked]++
		}
	}()
	src.Range(func(name string, inst any) bool {
		spec, noStats := specOf(inst)
		switch {
		case noStats:
			s.skip[skipNoStats]++
			return true
		case spec == nil || isNil(inst):
			s.skip[skipUnknownType]++
			return true
		}
		name = strings.ToValidUTF8(name, "\uFFFD") // returns name itself, no allocation, when it is valid
		k := seriesKey{spec.family, name}
		if _, dup := s.seen[k]; dup {
			if !s.addedAs(name, inst) { // the same instance added by name too is no duplicate
				s.skip[skipDuplicate]++
			}
			return true
		}
		s.seen[k] = struct{}{}
		s.emit(em, name, spec, inst, now)
		return true
	})
}

// emit reads inst's Stats and hands the values to em. A panic of the read
// is recovered and counted: nothing of inst is emitted (em.instance runs
// only after the whole read).
func (s *set) emit(em emitter, name string, spec *kindSpec, inst any, now int64) {
	defer func() {
		if recover() != nil {
			s.skip[skipPanicked]++
		}
	}()
	v := s.buf[:len(spec.metrics)]
	spec.read(inst, now, v)
	em.instance(name, spec, v)
}

// addedAs reports whether inst was added under name.
func (s *set) addedAs(name string, inst any) bool {
	for _, e := range s.named[name] {
		if e.inst == inst {
			return true
		}
	}
	return false
}
