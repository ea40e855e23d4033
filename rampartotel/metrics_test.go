package rampartotel

import (
	"context"
	"errors"
	"math"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/observe"
	"github.com/rampart-go/rampart/observe/observetest"
	"github.com/rampart-go/rampart/pipeline"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// point is one collected series.
type point struct {
	kind  observe.Kind
	unit  string
	value float64
}

// collect reads every series through r, keyed as want is.
func collect(t testing.TB, r *sdkmetric.ManualReader) map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var kind observe.Kind
			var dps []metricdata.DataPoint[float64]
			switch d := m.Data.(type) {
			case metricdata.Gauge[float64]:
				kind, dps = observe.Gauge, d.DataPoints
			case metricdata.Sum[float64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s: a sum that is not a cumulative monotonic counter", m.Name)
				}
				kind, dps = observe.Counter, d.DataPoints
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			for _, dp := range dps {
				name, _ := dp.Attributes.Value(attribute.Key(observe.AttrName))
				state, _ := dp.Attributes.Value(attribute.Key(observe.AttrState))
				reason, _ := dp.Attributes.Value(attribute.Key(observe.AttrReason))
				other := state.AsString()
				for _, a := range observe.ExtraAttrs {
					if v, ok := dp.Attributes.Value(attribute.Key(a)); ok {
						other = v.AsString()
					}
				}
				k := observetest.SeriesKey(m.Name, name.AsString(), other)
				if reason.AsString() != "" {
					k = m.Name + "|" + reason.AsString()
				}
				if _, dup := out[k]; dup {
					t.Errorf("series %s collected twice", k)
				}
				out[k] = point{kind, m.Unit, dp.Value}
			}
		}
	}
	return out
}

func newMetrics(t testing.TB, opts ...sdkmetric.Option) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	return newMetricsOf(t, Config{}, opts...)
}

// newMetricsOf returns a Metrics of cfg on a new MeterProvider, and its
// reader.
func newMetricsOf(t testing.TB, cfg Config, opts ...sdkmetric.Option) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(append(opts, sdkmetric.WithReader(r))...)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := New(mp.Meter("github.com/rampart-go/rampart/rampartotel"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, r
}

// TestEveryInstrumentAfterAKnownSequence: after the fixture's calls, every
// series of the scheme, for one instance of every kind, has the value the
// calls imply, the scheme's kind and unit, and no other series exists.
func TestEveryInstrumentAfterAKnownSequence(t *testing.T) {
	f := observetest.NewFixture(t)
	m, r := newMetricsOf(t, Config{Ticker: f.Ticker}) // the ratio budget's window ends at the fixture's clock
	for name, inst := range f.Instances() {
		if err := m.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	f.Drive(t)
	got := collect(t, r)
	expected := map[string]point{}
	for name, inst := range f.Instances() {
		spec, _ := observe.TypeOf(inst)
		for _, ms := range spec.Metrics {
			if ms.States {
				for _, st := range observe.BreakerStates {
					k := observetest.SeriesKey(ms.Name, name, st.String())
					expected[k] = point{ms.Kind, ms.Unit, observetest.Want[k]}
				}
				continue
			}
			k := observetest.SeriesKey(ms.Name, name, ms.Value)
			expected[k] = point{ms.Kind, ms.Unit, observetest.Want[k]}
		}
	}
	for _, reason := range observe.SkipReasons {
		expected[observe.SkippedMetric.Name+"|"+reason] = point{observe.Gauge, observe.SkippedMetric.Unit, 0}
	}
	for k := range observetest.Want {
		if _, ok := expected[k]; !ok {
			t.Errorf("want lists %s, which is no series of the scheme", k)
		}
	}
	var keys []string
	for k := range expected {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := expected[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got[k]
		e, expectedOK := expected[k]
		switch {
		case !ok:
			t.Errorf("%s: not collected", k)
		case !expectedOK:
			t.Errorf("%s = %v: not in the scheme", k, g.value)
		case g.kind != e.kind || g.unit != e.unit:
			t.Errorf("%s: %s %q, want %s %q", k, g.kind, g.unit, e.kind, e.unit)
		case math.Abs(g.value-e.value) > 1e-9:
			t.Errorf("%s = %v, want %v", k, g.value, e.value)
		}
	}
}

// fakeSource is a Source over a map, in a fixed order.
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

// TestSourceSkipsUnknownAndDuplicateInstances: a Source's instances are
// collected; those of unknown types, pipelines and duplicate names are
// skipped and counted by reason; an instance added by name and held by the
// Source too is collected once and is no duplicate.
func TestSourceSkipsUnknownAndDuplicateInstances(t *testing.T) {
	f := observetest.NewFixture(t)
	m, r := newMetrics(t)
	if err := m.Add("login", f.Limiter); err != nil {
		t.Fatal(err)
	}
	f.Drive(t)
	src := &fakeSource{
		names: []string{"api", "login", "login", "weird", "api", "tenant", "pipe"},
		insts: []any{f.Breaker, f.Limiter, f.Sharded, struct{}{}, f.Breaker, f.Keyed, newPipeline(t)},
	}
	m.AddSource(src)
	got := collect(t, r)
	check := func(k string, v float64) {
		t.Helper()
		if g, ok := got[k]; !ok || g.value != v {
			t.Errorf("%s = %v (collected: %v), want %v", k, g.value, ok, v)
		}
	}
	check("rampart.circuitbreaker.rejected|api", 1)
	check("rampart.ratelimit.admitted|login", 2)
	check("rampart.ratelimit.keys|tenant", 2)
	check("rampart.skipped_instances|unknown_type", 1)
	check("rampart.skipped_instances|no_stats", 1)
	check("rampart.skipped_instances|duplicate_name", 2)

	// Removed, login is the Source's first instance of that name.
	m.Remove("login")
	got = collect(t, r)
	check("rampart.ratelimit.admitted|login", 2)
	check("rampart.skipped_instances|duplicate_name", 2)
}

// TestAddRefusesWhatItCannotCollect: Add refuses an empty name, a nil
// instance, an unknown type, a pipeline, and a name taken in the same
// family; the same name in another family is accepted.
func TestAddRefusesWhatItCannotCollect(t *testing.T) {
	f := observetest.NewFixture(t)
	m, _ := newMetrics(t)
	if err := m.Add("", f.Breaker); err == nil {
		t.Error("empty name accepted")
	}
	if err := m.Add("x", nil); err == nil {
		t.Error("nil accepted")
	}
	if err := m.Add("x", f.Breaker); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		inst any
		want error
	}{
		{struct{}{}, ErrUnsupported},
		{newPipeline(t), ErrUnsupported},
		{f.Breaker, ErrDuplicateName},
	} {
		if err := m.Add("x", tc.inst); !errors.Is(err, tc.want) {
			t.Errorf("Add(%T) = %v, want %v", tc.inst, err, tc.want)
		}
	}
	if err := m.Add("x", f.Limiter); err != nil {
		t.Errorf("Add of another family under a taken name: %v", err)
	}
	if err := m.Add("x", f.Keyed); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("Add of a *Keyed where a *Limiter has the name: %v, want ErrDuplicateName", err)
	}
}

func TestNewRefusesANilMeter(t *testing.T) {
	_, err := New(nil, Config{})
	if !errors.Is(err, rampart.ErrInvalidConfig) {
		t.Fatalf("New(nil) = %v, want ErrInvalidConfig", err)
	}
}

// newPipeline returns a pipeline of one breaker.
func newPipeline(t testing.TB) *pipeline.Pipeline {
	t.Helper()
	return observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}))
}

// TestAddTakesCountingPipelinesAndFallbacksOfAnyType: a pipeline built
// with CountStats is collected, and so is a Fallback of any value type
// (through its Stats method); a typed nil Fallback is refused as nil.
func TestAddTakesCountingPipelinesAndFallbacksOfAnyType(t *testing.T) {
	m, _ := newMetrics(t)
	p := observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{})), CountStats: true}))
	if err := m.Add("p", p); err != nil {
		t.Fatalf("Add(counting pipeline): %v", err)
	}
	s := "stale"
	fs := observetest.Must(pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Value: &s}))
	if err := m.Add("p", fs); err != nil {
		t.Fatalf("Add(*Fallback[string]): %v", err)
	}
	type reply struct{ N int }
	fr := observetest.Must(pipeline.NewFallback(pipeline.FallbackConfig[reply]{Pipeline: p, Value: &reply{N: 1}}))
	if err := m.Add("q", fr); err != nil {
		t.Fatalf("Add(*Fallback[reply]): %v", err)
	}
	if err := m.Add("r", (*pipeline.Fallback[int])(nil)); err == nil || errors.Is(err, ErrUnsupported) {
		t.Fatalf("Add(nil *Fallback[int]) = %v, want the nil instance error", err)
	}
}

// panickingSource is a Source whose Range panics.
type panickingSource struct{}

func (panickingSource) Range(func(string, any) bool) { panic("a Source's bug") }

// panickingStats is a type of the user's that the adapter collects as a
// fallback (it has Stats() pipeline.FallbackStats), whose Stats panics.
type panickingStats struct{}

func (*panickingStats) Stats() pipeline.FallbackStats { panic("a Stats' bug") }

// TestPanicsOfASourceOrAStatsNeverLeaveACollection: a Source whose Range
// panics, and instances whose Stats panics (added by name or held by a
// Source), are skipped and counted as panicked; the panic never leaves
// the SDK's callback (on a PeriodicReader's goroutine it would kill the
// process), and every other instance is collected, those the Source held
// after the panicking one included.
func TestPanicsOfASourceOrAStatsNeverLeaveACollection(t *testing.T) {
	m, r := newMetrics(t)
	if err := m.Add("own", &panickingStats{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Add("good", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err != nil {
		t.Fatal(err)
	}
	m.AddSource(panickingSource{})
	m.AddSource(&fakeSource{names: []string{"bad", "after"},
		insts: []any{&panickingStats{}, observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Collect panicked: %v", p)
		}
	}()
	got := collect(t, r)
	for k, v := range map[string]float64{
		"rampart.circuitbreaker.rejected|good":  0,
		"rampart.circuitbreaker.rejected|after": 0,
		"rampart.skipped_instances|panicked":    3,
	} {
		if p, ok := got[k]; !ok || p.value != v {
			t.Errorf("%s = %v (collected: %v), want %v", k, p.value, ok, v)
		}
	}
	for k := range got {
		if strings.HasSuffix(k, "|own") || strings.HasSuffix(k, "|bad") {
			t.Errorf("series %s of a panicking instance collected", k)
		}
	}
}

// TestNamesAreValidUTF8: Add refuses a name that is not valid UTF-8 (an
// attribute value must be: an exporter's encoding would fail on it), and
// a Source's such name is collected with U+FFFD in place of the invalid
// bytes.
func TestNamesAreValidUTF8(t *testing.T) {
	m, r := newMetrics(t)
	if err := m.Add("bad\xff", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err == nil {
		t.Error("Add accepted a name that is not valid UTF-8")
	}
	m.AddSource(&fakeSource{names: []string{"src\xff"}, insts: []any{observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	got := collect(t, r)
	if _, ok := got["rampart.circuitbreaker.rejected|src\uFFFD"]; !ok {
		t.Error(`"src\uFFFD" not collected`)
	}
	for k := range got {
		if !utf8.ValidString(k) {
			t.Errorf("series %q: not valid UTF-8", k)
		}
	}
}
