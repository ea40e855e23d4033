package rampartprom

import (
	"errors"
	"github.com/rampart-go/rampart/observe"
	"github.com/rampart-go/rampart/observe/observetest"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
)

// point is one collected series.
type point struct {
	kind  observe.Kind
	value float64
}

// series flattens metric families into points keyed as want is, by
// OpenTelemetry name (the Prometheus name is checked against promName).
func series(t testing.TB, mfs map[string]*dto.MetricFamily) map[string]point {
	t.Helper()
	otelName := map[string]string{observe.PromName(&observe.SkippedMetric): observe.SkippedMetric.Name}
	for _, k := range observe.Types() {
		for _, ms := range k.Metrics {
			otelName[observe.PromName(&ms)] = ms.Name
		}
	}
	out := map[string]point{}
	for pname, mf := range mfs {
		name, ok := otelName[pname]
		if !ok {
			t.Errorf("family %s is not in the scheme", pname)
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			var p point
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				p = point{observe.Counter, m.GetCounter().GetValue()}
			case dto.MetricType_GAUGE:
				p = point{observe.Gauge, m.GetGauge().GetValue()}
			default:
				t.Fatalf("%s: type %v", pname, mf.GetType())
			}
			other := labels[labelState]
			for _, a := range observe.ExtraAttrs {
				if v := labels[observe.PromLabel(a)]; v != "" {
					other = v
				}
			}
			k := observetest.SeriesKey(name, labels[labelName], other)
			if r := labels[labelReason]; r != "" {
				k = name + "|" + r
			}
			out[k] = p
		}
	}
	return out
}

func gather(t testing.TB, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		m[mf.GetName()] = mf
	}
	return m
}

func newRegistered(t testing.TB, f *observetest.Fixture) (*Collector, *prometheus.Registry) {
	t.Helper()
	c := NewCollector(Config{Ticker: f.Ticker})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for name, inst := range f.Instances() {
		if err := c.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	return c, reg
}

// expected returns every series of the scheme for the fixture's
// instances, valued from want.
func expected(f *observetest.Fixture) map[string]point {
	e := map[string]point{}
	for name, inst := range f.Instances() {
		spec, _ := observe.TypeOf(inst)
		for _, ms := range spec.Metrics {
			if ms.States {
				for _, st := range observe.BreakerStates {
					k := observetest.SeriesKey(ms.Name, name, st.String())
					e[k] = point{ms.Kind, observetest.Want[k]}
				}
				continue
			}
			k := observetest.SeriesKey(ms.Name, name, ms.Value)
			e[k] = point{ms.Kind, observetest.Want[k]}
		}
	}
	for _, r := range observe.SkipReasons {
		e[observe.SkippedMetric.Name+"|"+r] = point{observe.Gauge, 0}
	}
	return e
}

func compare(t *testing.T, got, exp map[string]point) {
	t.Helper()
	var keys []string
	for k := range exp {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := exp[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got[k]
		e, eok := exp[k]
		switch {
		case !ok:
			t.Errorf("%s: not collected", k)
		case !eok:
			t.Errorf("%s = %v: not in the scheme", k, g.value)
		case g.kind != e.kind:
			t.Errorf("%s: %s, want %s", k, g.kind, e.kind)
		case math.Abs(g.value-e.value) > 1e-9:
			t.Errorf("%s = %v, want %v", k, g.value, e.value)
		}
	}
}

// TestEverySeriesAfterAKnownSequence: after the fixture's calls, every
// series of the scheme has the value the calls imply and its kind, through
// a pedantic registry (which checks the descriptors against the metrics).
func TestEverySeriesAfterAKnownSequence(t *testing.T) {
	f := observetest.NewFixture(t)
	_, reg := newRegistered(t, f)
	f.Drive(t)
	compare(t, series(t, gather(t, reg)), expected(f))
}

// TestExpositionText: the exposition of a few families, to the byte (HELP,
// TYPE, names, labels, values).
func TestExpositionText(t *testing.T) {
	f := observetest.NewFixture(t)
	c, _ := newRegistered(t, f)
	f.Drive(t)
	const text = `# HELP rampart_bulkhead_in_flight Permits held now.
# TYPE rampart_bulkhead_in_flight gauge
rampart_bulkhead_in_flight{rampart_name="db"} 1
# HELP rampart_bulkhead_wait_time_seconds_total Time spent queueing, admitted or not.
# TYPE rampart_bulkhead_wait_time_seconds_total counter
rampart_bulkhead_wait_time_seconds_total{rampart_name="db"} 0
# HELP rampart_circuitbreaker_rejected_total Calls rejected (open, forced open, half-open full).
# TYPE rampart_circuitbreaker_rejected_total counter
rampart_circuitbreaker_rejected_total{rampart_name="api"} 1
# HELP rampart_circuitbreaker_remaining_open_seconds Time left before an open breaker lets probes through.
# TYPE rampart_circuitbreaker_remaining_open_seconds gauge
rampart_circuitbreaker_remaining_open_seconds{rampart_name="api"} 6
# HELP rampart_circuitbreaker_state 1 for the breaker's current state, 0 for the others (one series per state).
# TYPE rampart_circuitbreaker_state gauge
rampart_circuitbreaker_state{rampart_name="api",rampart_state="closed"} 0
rampart_circuitbreaker_state{rampart_name="api",rampart_state="disabled"} 0
rampart_circuitbreaker_state{rampart_name="api",rampart_state="forced-open"} 0
rampart_circuitbreaker_state{rampart_name="api",rampart_state="half-open"} 0
rampart_circuitbreaker_state{rampart_name="api",rampart_state="metrics-only"} 0
rampart_circuitbreaker_state{rampart_name="api",rampart_state="open"} 1
# HELP rampart_circuitbreaker_window_failure_rate_ratio Share of the window's results that failed.
# TYPE rampart_circuitbreaker_window_failure_rate_ratio gauge
rampart_circuitbreaker_window_failure_rate_ratio{rampart_name="api"} 0
# HELP rampart_circuitbreaker_successes_total Successes released (counted only with Config.CountStats).
# TYPE rampart_circuitbreaker_successes_total counter
rampart_circuitbreaker_successes_total{rampart_name="api"} 1
# HELP rampart_fallback_answers_total Calls the fallback answered, by how they ended (counted with the pipeline's Config.CountStats).
# TYPE rampart_fallback_answers_total counter
rampart_fallback_answers_total{rampart_ending="canceled",rampart_name="checkout-do"} 0
rampart_fallback_answers_total{rampart_ending="canceled",rampart_name="checkout-value"} 0
rampart_fallback_answers_total{rampart_ending="failed",rampart_name="checkout-do"} 1
rampart_fallback_answers_total{rampart_ending="failed",rampart_name="checkout-value"} 0
rampart_fallback_answers_total{rampart_ending="rejected",rampart_name="checkout-do"} 0
rampart_fallback_answers_total{rampart_ending="rejected",rampart_name="checkout-value"} 1
rampart_fallback_answers_total{rampart_ending="retries_exhausted",rampart_name="checkout-do"} 0
rampart_fallback_answers_total{rampart_ending="retries_exhausted",rampart_name="checkout-value"} 0
rampart_fallback_answers_total{rampart_ending="timed_out",rampart_name="checkout-do"} 0
rampart_fallback_answers_total{rampart_ending="timed_out",rampart_name="checkout-value"} 0
# HELP rampart_hedge_delay_seconds The current hedging delay (-1 s: no hedging yet).
# TYPE rampart_hedge_delay_seconds gauge
rampart_hedge_delay_seconds{rampart_name="read"} 0.25
# HELP rampart_pipeline_calls_total Calls that ended, by Code (counted with Config.CountStats).
# TYPE rampart_pipeline_calls_total counter
rampart_pipeline_calls_total{rampart_code="canceled",rampart_name="checkout"} 0
rampart_pipeline_calls_total{rampart_code="failed",rampart_name="checkout"} 2
rampart_pipeline_calls_total{rampart_code="ok",rampart_name="checkout"} 1
rampart_pipeline_calls_total{rampart_code="rejected",rampart_name="checkout"} 2
rampart_pipeline_calls_total{rampart_code="timed_out",rampart_name="checkout"} 0
# HELP rampart_ratelimit_admitted_total Calls admitted (counted only with Config.CountStats).
# TYPE rampart_ratelimit_admitted_total counter
rampart_ratelimit_admitted_total{rampart_name="ingest"} 4
rampart_ratelimit_admitted_total{rampart_name="login"} 2
rampart_ratelimit_admitted_total{rampart_name="tenant"} 2
# HELP rampart_ratelimit_rate_per_second Admissions per second allowed.
# TYPE rampart_ratelimit_rate_per_second gauge
rampart_ratelimit_rate_per_second{rampart_name="ingest"} 4
rampart_ratelimit_rate_per_second{rampart_name="login"} 1
# HELP rampart_shed_trigger 1 for each signal at or above its threshold at the last sample, 0 for the others.
# TYPE rampart_shed_trigger gauge
rampart_shed_trigger{rampart_name="cpu",rampart_signal="cpu"} 0
rampart_shed_trigger{rampart_name="cpu",rampart_signal="in_flight"} 0
rampart_shed_trigger{rampart_name="cpu",rampart_signal="latency"} 0
rampart_shed_trigger{rampart_name="cpu",rampart_signal="runnable"} 0
rampart_shed_trigger{rampart_name="cpu",rampart_signal="sched_latency"} 1
`
	err := testutil.CollectAndCompare(c, strings.NewReader(text),
		"rampart_bulkhead_in_flight", "rampart_bulkhead_wait_time_seconds_total", "rampart_circuitbreaker_rejected_total",
		"rampart_circuitbreaker_remaining_open_seconds", "rampart_circuitbreaker_state", "rampart_circuitbreaker_window_failure_rate_ratio",
		"rampart_hedge_delay_seconds", "rampart_ratelimit_admitted_total", "rampart_ratelimit_rate_per_second",
		"rampart_circuitbreaker_successes_total", "rampart_fallback_answers_total", "rampart_pipeline_calls_total", "rampart_shed_trigger")
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// TestScrapeOverHTTP: a real scrape of promhttp's handler, parsed with
// expfmt, carries every series of the scheme with its value.
func TestScrapeOverHTTP(t *testing.T) {
	f := observetest.NewFixture(t)
	_, reg := newRegistered(t, f)
	f.Drive(t)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	compare(t, series(t, mfs), expected(f))
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

// TestSourceDuplicatesNeverFailAScrape: a Source holding a name twice
// (which a pedantic registry would refuse as a duplicate series) is
// scraped with the first instance, the others counted as skipped.
func TestSourceDuplicatesNeverFailAScrape(t *testing.T) {
	f := observetest.NewFixture(t)
	c := NewCollector(Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	f.Drive(t)
	c.AddSource(&fakeSource{names: []string{"api", "api", "x", "p"}, insts: []any{f.Breaker, f.Breaker, 42, newPipeline()}})
	got := series(t, gather(t, reg))
	for k, v := range map[string]float64{
		"rampart.circuitbreaker.rejected|api":      1,
		"rampart.skipped_instances|duplicate_name": 1,
		"rampart.skipped_instances|unknown_type":   1,
		"rampart.skipped_instances|no_stats":       1,
	} {
		if got[k].value != v {
			t.Errorf("%s = %v, want %v", k, got[k].value, v)
		}
	}
}

// TestAddRefusesWhatItCannotCollect: Add refuses unknown types, pipelines
// and a name taken in the same family.
func TestAddRefusesWhatItCannotCollect(t *testing.T) {
	f := observetest.NewFixture(t)
	c := NewCollector(Config{})
	if err := c.Add("x", f.Breaker); err != nil {
		t.Fatal(err)
	}
	for _, inst := range []any{struct{}{}, newPipeline()} {
		if err := c.Add("y", inst); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Add(%T) = %v, want ErrUnsupported", inst, err)
		}
	}
	if err := c.Add("x", f.Breaker); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("second Add: %v, want ErrDuplicateName", err)
	}
}

func newPipeline() *pipeline.Pipeline {
	return observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}))
}

// TestAddTakesCountingPipelinesAndFallbacksOfAnyType: a pipeline built
// with CountStats is collected, and so is a Fallback of any value type
// (through its Stats method); a typed nil Fallback is refused as nil.
func TestAddTakesCountingPipelinesAndFallbacksOfAnyType(t *testing.T) {
	c := NewCollector(Config{})
	p := observetest.Must(pipeline.New(pipeline.Config{Breaker: observetest.Must(circuitbreaker.New(circuitbreaker.Config{})), CountStats: true}))
	if err := c.Add("p", p); err != nil {
		t.Fatalf("Add(counting pipeline): %v", err)
	}
	s := "stale"
	fs := observetest.Must(pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Value: &s}))
	if err := c.Add("p", fs); err != nil {
		t.Fatalf("Add(*Fallback[string]): %v", err)
	}
	type reply struct{ N int }
	fr := observetest.Must(pipeline.NewFallback(pipeline.FallbackConfig[reply]{Pipeline: p, Value: &reply{N: 1}}))
	if err := c.Add("q", fr); err != nil {
		t.Fatalf("Add(*Fallback[reply]): %v", err)
	}
	if err := c.Add("r", (*pipeline.Fallback[int])(nil)); err == nil || errors.Is(err, ErrUnsupported) {
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

// TestPanicsOfASourceOrAStatsNeverFailAScrape: a Source whose Range
// panics, and instances whose Stats panics (added by name or held by a
// Source), are skipped and counted as panicked; the scrape answers 200
// with every other instance, those the Source held after the panicking
// one included.
func TestPanicsOfASourceOrAStatsNeverFailAScrape(t *testing.T) {
	c := NewCollector(Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := c.Add("own", &panickingStats{}); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("good", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err != nil {
		t.Fatal(err)
	}
	c.AddSource(panickingSource{})
	c.AddSource(&fakeSource{names: []string{"bad", "after"},
		insts: []any{&panickingStats{}, observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %.300s", rec.Code, rec.Body.String())
	}
	got := series(t, gather(t, reg))
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

// TestNamesAreValidUTF8: Add refuses a name that is not valid UTF-8 (a
// label value must be: one such name would fail every scrape), and a
// Source's such name is collected with U+FFFD in place of the invalid
// bytes.
func TestNamesAreValidUTF8(t *testing.T) {
	c := NewCollector(Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := c.Add("good", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err != nil {
		t.Fatal(err)
	}
	if err := c.Add("bad\xff", observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))); err == nil {
		t.Error("Add accepted a name that is not valid UTF-8")
	}
	c.AddSource(&fakeSource{names: []string{"src\xff"}, insts: []any{observetest.Must(circuitbreaker.New(circuitbreaker.Config{}))}})
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %.300s", rec.Code, rec.Body.String())
	}
	got := series(t, gather(t, reg))
	for _, name := range []string{"good", "src\uFFFD"} {
		if _, ok := got["rampart.circuitbreaker.rejected|"+name]; !ok {
			t.Errorf("%q not collected", name)
		}
	}
}
