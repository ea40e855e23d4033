package observe

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/observe/observetest"
	"github.com/rampart-go/rampart/pipeline"
)

// recorder is an Emitter that keeps every series of the last collection,
// keyed as observetest.Want is.
type recorder struct {
	series map[string]float64
	kinds  map[string]Kind
}

func (r *recorder) Begin() { r.series, r.kinds = map[string]float64{}, map[string]Kind{} }

func (r *recorder) put(k string, kind Kind, v float64) {
	if _, dup := r.series[k]; dup {
		panic("series " + k + " emitted twice")
	}
	r.series[k], r.kinds[k] = v, kind
}

func (r *recorder) Instance(name string, t *Type, v []float64) {
	for i := range t.Metrics {
		ms := &t.Metrics[i]
		switch {
		case ms.States:
			for st, s := range BreakerStates {
				r.put(observetest.SeriesKey(ms.Name, name, s.String()), ms.Kind, b2f(int(v[i]) == st))
			}
		case ms.Attr != "":
			r.put(observetest.SeriesKey(ms.Name, name, ms.Value), ms.Kind, v[i])
		default:
			r.put(observetest.SeriesKey(ms.Name, name, ""), ms.Kind, v[i])
		}
	}
}

func (r *recorder) Skipped(counts *[NumSkipReasons]int) {
	for i, n := range counts {
		r.put(SkippedMetric.Name+"|"+SkipReasons[i], Gauge, float64(n))
	}
}

// collect runs one collection of s and returns its series.
func collect(s *Set) map[string]float64 {
	var r recorder
	s.Collect(&r)
	return r.series
}

// TestEverySeriesAfterAKnownSequence: after the fixture's known sequence,
// every series of every type has the value observetest.Want lists (0 where
// it lists none), and a counter's series is a Counter.
func TestEverySeriesAfterAKnownSequence(t *testing.T) {
	f := observetest.NewFixture(t)
	s := NewSet(f.Ticker)
	for name, inst := range f.Instances() {
		if err := s.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	f.Drive(t)
	var r recorder
	s.Collect(&r)
	for k, v := range observetest.Want {
		if _, ok := r.series[k]; !ok {
			t.Errorf("%s (want %v) not collected", k, v)
		}
	}
	for _, typ := range types {
		for _, ms := range typ.Metrics {
			found := false
			for k, kind := range r.kinds {
				if strings.HasPrefix(k, ms.Name+"|") {
					found = true
					if kind != ms.Kind {
						t.Errorf("%s: %s, want %s", k, kind, ms.Kind)
					}
				}
			}
			if !found {
				t.Errorf("%s of %s: no series", ms.Name, typ.GoType)
			}
		}
	}
	for k, v := range r.series {
		if math.Abs(v-observetest.Want[k]) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, v, observetest.Want[k])
		}
	}
}

// fakeSource is a Source over a list, in a fixed order.
type fakeSource struct {
	names []string
	insts []any
}

func (s *fakeSource) Range(f func(string, any) bool) {
	for i := range s.names {
		if !f(s.names[i], s.insts[i]) {
			return
		}
	}
}

func newPipeline() *pipeline.Pipeline {
	return observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}))
}

// TestSourceSkipsUnknownAndDuplicateInstances: a Source's instances are
// collected; those of unknown types, pipelines that count nothing and
// duplicate names in a family are skipped and counted by reason; an
// instance added by name and held by the Source too is collected once and
// is no duplicate; after Remove, the Source's instance of the name is
// collected.
func TestSourceSkipsUnknownAndDuplicateInstances(t *testing.T) {
	f := observetest.NewFixture(t)
	s := NewSet(f.Ticker)
	if err := s.Add("login", f.Limiter); err != nil {
		t.Fatal(err)
	}
	f.Drive(t)
	s.AddSource(&fakeSource{
		names: []string{"api", "login", "login", "weird", "api", "tenant", "pipe"},
		insts: []any{f.Breaker, f.Limiter, f.Sharded, struct{}{}, f.Breaker, f.Keyed, newPipeline()},
	})
	got := collect(s)
	check := func(k string, v float64) {
		t.Helper()
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (collected: %v), want %v", k, g, ok, v)
		}
	}
	check("rampart.circuitbreaker.rejected|api", 1)
	check("rampart.ratelimit.admitted|login", 2)
	check("rampart.ratelimit.keys|tenant", 2)
	check("rampart.skipped_instances|unknown_type", 1)
	check("rampart.skipped_instances|no_stats", 1)
	check("rampart.skipped_instances|duplicate_name", 2)

	s.Remove("login")
	got = collect(s)
	check("rampart.ratelimit.admitted|login", 2)
	check("rampart.skipped_instances|duplicate_name", 2)
}

// TestAddRefusesWhatItCannotCollect: Add refuses an empty name, a nil
// instance, an unknown type, a pipeline that counts nothing, and a name
// taken in the same family; the same name in another family is accepted.
func TestAddRefusesWhatItCannotCollect(t *testing.T) {
	f := observetest.NewFixture(t)
	s := NewSet(nil)
	if err := s.Add("", f.Breaker); err == nil {
		t.Error("empty name accepted")
	}
	if err := s.Add("x", nil); err == nil {
		t.Error("nil accepted")
	}
	if err := s.Add("x", (*circuitbreaker.Breaker)(nil)); err == nil || errors.Is(err, ErrUnsupported) {
		t.Errorf("typed nil: %v, want the nil instance error", err)
	}
	if err := s.Add("x", f.Breaker); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		inst any
		want error
	}{
		{struct{}{}, ErrUnsupported},
		{newPipeline(), ErrUnsupported},
		{f.Breaker, ErrDuplicateName},
	} {
		if err := s.Add("x", tc.inst); !errors.Is(err, tc.want) {
			t.Errorf("Add(%T) = %v, want %v", tc.inst, err, tc.want)
		}
	}
	if err := s.Add("x", f.Limiter); err != nil {
		t.Errorf("Add of another family under a taken name: %v", err)
	}
	if err := s.Add("x", f.Keyed); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("Add of a *Keyed where a *Limiter has the name: %v, want ErrDuplicateName", err)
	}
}

// TestTypeOfKnowsCountingPipelinesAndFallbacksOfAnyType: a pipeline built
// with CountStats is known, one without is known as counting nothing, a
// Fallback of any value type is known through its Stats method.
func TestTypeOfKnowsCountingPipelinesAndFallbacksOfAnyType(t *testing.T) {
	p := observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{})), CountStats: true}))
	if typ, _ := TypeOf(p); typ == nil || typ.Family != "pipeline" {
		t.Errorf("TypeOf(counting pipeline) = %v", typ)
	}
	if typ, noStats := TypeOf(newPipeline()); typ != nil || !noStats {
		t.Errorf("TypeOf(pipeline without CountStats) = %v, %v; want nil, true", typ, noStats)
	}
	type reply struct{ N int }
	fr := observetest.Must(pipeline.NewFallback(pipeline.FallbackConfig[reply]{Pipeline: p, Value: &reply{N: 1}}))
	if typ, _ := TypeOf(fr); typ == nil || typ.Family != "fallback" {
		t.Errorf("TypeOf(*Fallback[reply]) = %v", typ)
	}
	if typ, noStats := TypeOf(struct{}{}); typ != nil || noStats {
		t.Errorf("TypeOf(struct{}{}) = %v, %v; want nil, false", typ, noStats)
	}
}

// panickingSource is a Source whose Range panics.
type panickingSource struct{}

func (panickingSource) Range(func(string, any) bool) { panic("a Source's bug") }

// panickingStats is a type of the user's that the scheme knows as a
// fallback (it has Stats() pipeline.FallbackStats), whose Stats panics.
type panickingStats struct{}

func (*panickingStats) Stats() pipeline.FallbackStats { panic("a Stats' bug") }

// TestPanicsOfASourceOrAStatsNeverLeaveACollection: a Source whose Range
// panics, and instances whose Stats panics (added by name or held by a
// Source), are skipped and counted as panicked, nothing of them emitted;
// every other instance is collected, those the Source held after the
// panicking one included.
func TestPanicsOfASourceOrAStatsNeverLeaveACollection(t *testing.T) {
	s := NewSet(nil)
	if err := s.Add("own", &panickingStats{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("good", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err != nil {
		t.Fatal(err)
	}
	s.AddSource(panickingSource{})
	s.AddSource(&fakeSource{names: []string{"bad", "after"},
		insts: []any{&panickingStats{}, observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	got := collect(s)
	for k, v := range map[string]float64{
		"rampart.circuitbreaker.rejected|good":  0,
		"rampart.circuitbreaker.rejected|after": 0,
		"rampart.skipped_instances|panicked":    3,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (collected: %v), want %v", k, g, ok, v)
		}
	}
	for k := range got {
		if strings.HasSuffix(k, "|own") || strings.HasSuffix(k, "|bad") {
			t.Errorf("series %s of a panicking instance collected", k)
		}
	}
}

// TestNamesAreValidUTF8: Add refuses a name that is not valid UTF-8, and a
// Source's such name is collected with U+FFFD in place of the invalid
// bytes.
func TestNamesAreValidUTF8(t *testing.T) {
	s := NewSet(nil)
	if err := s.Add("bad\xff", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err == nil {
		t.Error("Add accepted a name that is not valid UTF-8")
	}
	s.AddSource(&fakeSource{names: []string{"src\xff"}, insts: []any{observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	got := collect(s)
	if _, ok := got["rampart.circuitbreaker.rejected|src\uFFFD"]; !ok {
		t.Error(`"src\uFFFD" not collected`)
	}
	for k := range got {
		if !utf8.ValidString(k) {
			t.Errorf("series %q: not valid UTF-8", k)
		}
	}
}

// TestCollectionsRaceAddRemoveAndCalls: collections run while other
// goroutines Add, Remove and call the instances; each collection sees
// every instance added for its whole span, and the race detector finds
// nothing.
func TestCollectionsRaceAddRemoveAndCalls(t *testing.T) {
	f := observetest.NewAdmitFixture()
	s := NewSet(nil)
	for name, inst := range f.Instances() {
		if err := s.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	cases := observetest.AdmitCases(f)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, c := range cases[:4] {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					c.Run()
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			name := "churn-" + strconv.Itoa(i%8)
			_ = s.Add(name, f.Breaker)
			s.Remove(name)
		}
	})
	for range 50 {
		got := collect(s)
		if _, ok := got["rampart.circuitbreaker.rejected|api"]; !ok {
			t.Fatal("the breaker added for the whole test is missing from a collection")
		}
	}
	close(stop)
	wg.Wait()
}
