package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/rampartconfig"
	"github.com/rampart-go/rampart/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemoShort runs both modes of the database scenario for a few seconds
// at a low rate, with a database slow enough during the slowdown that the
// pool is overloaded, and checks that both produce a complete table and
// that the protected mode sheds (fast 503s) instead of queueing; that the
// status page answers; and that /metrics, scraped during the protected
// slowdown, holds the breaker's and the bulkheads' series of the
// registry's instances (checkMetrics). No latency assertion: the machine
// is shared.
func TestDemoShort(t *testing.T) {
	o := defaultOptions()
	o.scenario = "db"
	o.rate = 200
	o.warmup, o.steady, o.slowdown, o.recovery = 500*time.Millisecond, 700*time.Millisecond, 1500*time.Millisecond, 500*time.Millisecond
	o.dbPool = 2 // 200 req/s × 28 % × 10 ms = 0.56 busy; ×8 = 4.5 busy: overloaded
	o.slowFactor = 8
	o.clientTimeout = 4 * time.Second // generous: CI runs packages side by side on 2 cores
	o.out = t.TempDir()
	var statusErr error = errNoStatus
	var metricsURL string
	o.onStatus = func(page, metrics string) { statusErr, metricsURL = checkStatusJSON(page+"status.json"), metrics }
	var scrape []byte
	var scrapeErr error = errorString("/metrics was not scraped during the protected slowdown")
	o.onTick = func(scenario, mode, phase string) {
		if scrape == nil && scenario == "db" && mode == "protected" && phase == "slowdown" {
			scrape, scrapeErr = get(metricsURL)
		}
	}
	var out bytes.Buffer
	results, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	if statusErr != nil {
		t.Errorf("status page: %v", statusErr)
	}
	if !strings.Contains(out.String(), "status page: http://127.0.0.1:") || !strings.Contains(out.String(), "metrics: http://127.0.0.1:") {
		t.Errorf("the status page's or /metrics' URL is not printed")
	}
	if scrapeErr != nil {
		t.Errorf("/metrics: %v", scrapeErr)
	} else {
		checkMetrics(t, scrape)
	}
	checkSeries(t, results)
	for _, name := range []string{"overload.json", "overload.csv", "overload.svg", "overload.html"} {
		if fi, err := os.Stat(filepath.Join(o.out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("-out wrote no %s: %v", name, err)
		}
	}
	t.Log("\n" + out.String())
	if len(results) != 2 || results[0].mode != "unprotected" || results[1].mode != "protected" {
		t.Fatalf("results %+v", results)
	}
	for _, r := range results {
		if len(r.phases) != 4 {
			t.Fatalf("%s: %d phases", r.mode, len(r.phases))
		}
		for _, p := range r.phases {
			if p.sent.Load() == 0 || p.ok.Load() == 0 {
				t.Errorf("%s/%s: sent %d ok %d", r.mode, p.phase.name, p.sent.Load(), p.ok.Load())
			}
			t.Logf("%s/%s: failed %d (no response %d, 504 %d)", r.mode, p.phase.name, p.failed.Load(), p.errs.Load(), p.gw.Load())
			if got := p.ok.Load() + p.shed.Load() + p.failed.Load(); got != p.sent.Load() {
				t.Errorf("%s/%s: %d outcomes for %d sent", r.mode, p.phase.name, got, p.sent.Load())
			}
			row := "| " + r.mode + " | " + p.phase.name + " | "
			if !strings.Contains(out.String(), row) {
				t.Errorf("table has no row %q", row)
			}
		}
	}
	unprot, prot := results[0].phases[2], results[1].phases[2]
	if prot.shed.Load() == 0 {
		t.Errorf("protected slowdown shed nothing")
	}
	if unprot.shed.Load() != 0 {
		t.Errorf("unprotected mode shed %d", unprot.shed.Load())
	}
	for _, line := range []string{"sent", "shed"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no progress line with %q", line)
		}
	}
}

func TestFlags(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags([]string{"-rate", "123", "-mode", "protected", "-steady", "3s"}, &errOut)
	if err != nil || o.rate != 123 || o.mode != "protected" || o.steady != 3*time.Second {
		t.Fatalf("%+v %v", o, err)
	}
	if o.pool() != 8 || o.admission() != 64 {
		t.Fatalf("pool %d admission %d", o.pool(), o.admission())
	}
	o, _ = parseFlags([]string{"-rate", "10000"}, &errOut)
	if o.pool() != 40 || o.admission() != 1000 {
		t.Fatalf("pool %d admission %d", o.pool(), o.admission())
	}
}

// parseFlags refuses every value that would fail late (-deadline 0 and
// -db-max-wait -1ms would make timeout.New / bulkhead.New return a
// ConfigError only when the protected run starts, after the whole
// unprotected run of "-mode both") or give a meaningless run (a rate of 0,
// an unknown mode, phases of no length in all, shares outside [0, 1] or
// NaN, a negative slow-down factor, a negative -max-lag that drops every
// iteration, negative durations that skip a phase or make delays negative,
// a negative -admission taken as the default).
func TestFlagsRejectInvalidValues(t *testing.T) {
	for _, bad := range [][]string{
		{"-rate", "0"},
		{"-mode", "x"},
		{"-warmup", "0", "-steady", "0", "-slowdown", "0", "-recovery", "0"},
		{"-deadline", "0"},
		{"-deadline", "-1s"},
		{"-db-max-wait", "-1ms"},
		{"-cache-hits", "1.5"},
		{"-cache-hits", "NaN"},
		{"-writes", "-0.1"},
		{"-db-errors", "2"},
		{"-slow-factor", "-4"},
		{"-slow-factor", "NaN"},
		{"-max-lag", "-1ms"},
		{"-client-timeout", "-1s"},
		{"-api-time", "-50ms"},
		{"-db-visit", "-10ms"},
		{"-warmup", "-2s"},
		{"-admission", "-5"},
	} {
		var errOut bytes.Buffer
		if _, err := parseFlags(bad, &errOut); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The default flags build a protected guard without error, and it closes
// (the timeout's watchdog) cleanly; goleak (TestMain) checks that nothing
// outlives it.
func TestDefaultGuardBuildsAndCloses(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags(nil, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	g, err := newGuard(o, reg)
	if err != nil {
		t.Fatal(err)
	}
	db, err := newDatabase(reg, o.pool(), o.dbVisit, o.dbErrors)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.handler(newService(o, db)); err != nil {
		t.Fatal(err)
	}
	g.close()
}

// TestDatabaseTransientErrors: the database's transient errors come from
// its fault injector, at -db-errors of the visits, after the visit has
// held its connection; an invalid share is refused.
func TestDatabaseTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want error
	}{{0, nil}, {1, errTransient}} {
		db, err := newDatabase(registry.New(), 1, 0, tc.rate)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if err := db.query(context.Background()); err != tc.want {
				t.Fatalf("rate %v: got %v, want %v", tc.rate, err, tc.want)
			}
		}
		if s := db.faults.Stats(); db.visits.Load() != 10 || (tc.want != nil) != (s.Errored == 10) {
			t.Errorf("rate %v: %d visits, injector stats %+v", tc.rate, db.visits.Load(), s)
		}
	}
	if _, err := newDatabase(registry.New(), 1, 0, 2); err == nil {
		t.Error("a share of 2 was accepted")
	}
}

var errNoStatus = errorString("the status page was not started")

type errorString string

func (e errorString) Error() string { return string(e) }

// get fetches url's body (an error unless 200).
func get(url string) ([]byte, error) {
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // no idle connection outlives the test
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorString("status " + resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// checkStatusJSON fetches the demo's status.json and decodes it.
func checkStatusJSON(url string) error {
	b, err := get(url)
	if err != nil {
		return err
	}
	var doc struct {
		Instances []any `json:"instances"`
	}
	return json.Unmarshal(b, &doc)
}

// checkMetrics parses a scrape of /metrics (the text exposition format,
// with expfmt) taken during the protected run: the database breaker's
// state set (one series per state, 1 for the current one) and the entry's
// and the database's bulkheads' permits and limits, under their registry
// names; the runtime's scheduling latency beside them.
func checkMetrics(t *testing.T, scrape []byte) {
	t.Helper()
	fams := parseScrape(t, scrape)
	series := func(family, name string) []*dto.Metric { return seriesOf(fams, family, name) }
	states := map[string]float64{}
	for _, m := range series("rampart_circuitbreaker_state", "db-breaker") {
		for _, l := range m.GetLabel() {
			if l.GetName() == "rampart_state" {
				states[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	var on int
	for _, v := range states {
		if v == 1 {
			on++
		}
	}
	if _, ok := states["closed"]; !ok || on != 1 {
		t.Errorf("rampart_circuitbreaker_state{rampart_name=\"db-breaker\"}: %v, want a state set with one state at 1", states)
	}
	for _, f := range []string{"rampart_circuitbreaker_rejected_total", "rampart_circuitbreaker_window_failure_rate_ratio", "rampart_circuitbreaker_trips_total"} {
		if len(series(f, "db-breaker")) != 1 {
			t.Errorf("no %s{rampart_name=\"db-breaker\"}", f)
		}
	}
	for _, name := range []string{"api-admission", "db-bulkhead"} {
		for _, f := range []string{"rampart_bulkhead_in_flight", "rampart_bulkhead_max", "rampart_bulkhead_rejected_total"} {
			if len(series(f, name)) != 1 {
				t.Errorf("no %s{rampart_name=%q}", f, name)
			}
		}
	}
	if m := series("rampart_bulkhead_max", "db-bulkhead"); len(m) == 1 && m[0].GetGauge().GetValue() != 2 {
		t.Errorf("the database bulkhead's max is %v, want the pool's 2", m[0].GetGauge().GetValue())
	}
	for _, name := range []string{"api", "db"} { // CountStats: the calls by how they ended
		if n := len(series("rampart_pipeline_calls_total", name)); n < 5 {
			t.Errorf("%d rampart_pipeline_calls_total{rampart_name=%q} series, want one per code", n, name)
		}
	}
	if fams["go_sched_latencies_seconds"] == nil {
		t.Error("no go_sched_latencies_seconds (the runtime's scheduler metrics)")
	}
}

// parseScrape parses a scrape of /metrics (the text exposition format).
func parseScrape(t *testing.T, scrape []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(scrape))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// seriesOf returns family's series whose rampart_name is name.
func seriesOf(fams map[string]*dto.MetricFamily, family, name string) []*dto.Metric {
	var out []*dto.Metric
	if f := fams[family]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rampart_name" && l.GetValue() == name {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// checkSeries: each run has about one point a second, each point's counts
// add up (completed = succeeded + shed + failed), the rates integrate back
// to the table's totals, and the protected run records its breaker's state.
func checkSeries(t *testing.T, results []result) {
	t.Helper()
	for _, r := range results {
		pts := r.series.Points
		var total time.Duration
		for _, p := range r.phases {
			total += p.phase.duration
		}
		// One point a second of the run, however long the drain after the
		// phases took (on a starved machine, longer than the client
		// timeout), and the partial last one.
		end := 0.0
		if len(pts) > 0 {
			end = pts[len(pts)-1].T
		}
		if min, max := int(total.Seconds())-1, int(end)+2; len(pts) < min || len(pts) > max || end < total.Seconds()-0.5 {
			t.Errorf("%s: %d points for a %s run that ended at %vs", r.mode, len(pts), total, end)
		}
		if len(r.series.Phases) != len(r.phases) {
			t.Errorf("%s: %d phase spans", r.mode, len(r.series.Phases))
		}
		var ok, want, offered, wantOffered, sent, wantSent float64
		for _, p := range pts {
			offered += p.Offered * p.Dt
			sent += p.Sent * p.Dt
			if d := p.Completed - p.Succeeded - p.Shed - p.Failed; math.Abs(d) > 0.01 {
				t.Errorf("%s at %vs: completed %v is not the sum of its parts", r.mode, p.T, p.Completed)
			}
			ok += p.Succeeded * p.Dt
			if r.scenario == "db" && r.mode == "protected" && p.BreakerState == "" {
				t.Errorf("protected at %vs: no breaker state", p.T)
			}
		}
		for _, p := range r.phases {
			want += float64(p.ok.Load())
			wantOffered += float64(p.offered)
			wantSent += float64(p.sent.Load())
		}
		for _, c := range []struct {
			what      string
			got, want float64
		}{{"successes", ok, want}, {"offered iterations", offered, wantOffered}, {"sent iterations", sent, wantSent}} {
			if math.Abs(c.got-c.want) > 1 {
				t.Errorf("%s: the series integrate to %.1f %s, the table counts %.0f", r.mode, c.got, c.what, c.want)
			}
		}
	}
}

// node is a generic XML element.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []node     `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n node) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attr(name), 64)
	if err != nil {
		t.Fatalf("<%s> %s=%q: %v", n.XMLName.Local, name, n.attr(name), err)
	}
	return v
}

// all returns the elements under n (n included) with tag and, when class is
// not empty, that class.
func (n node) all(tag, class string) []node {
	var out []node
	var walk func(node)
	walk = func(m node) {
		if m.XMLName.Local == tag && (class == "" || m.attr("class") == class) {
			out = append(out, m)
		}
		for _, c := range m.Nodes {
			walk(c)
		}
	}
	walk(n)
	return out
}

func parseXML(t *testing.T, s string) node {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(s))
	dec.Strict = true
	dec.Entity = xml.HTMLEntity
	var root node
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("does not parse: %v", err)
	}
	return root
}

// TestChartDrawsTheRecordedSeries renders the fixed recording in testdata
// and reads the SVG back with encoding/xml: for each row and mode, a
// panel whose every series has one polyline point per recorded point with a
// value, each mapping back (through the panel's own axes) to that point's
// time and value; both columns of a row share the y range; the phases are
// shaded with their names; each row has a legend entry per series and
// both axes have ticks and a label; the breaker's strip has one
// rectangle per protected point; the unprotected column says it has no
// policies.
func TestChartDrawsTheRecordedSeries(t *testing.T) {
	rec, err := readRecording("testdata/recording.json")
	if err != nil {
		t.Fatal(err)
	}
	checkChart(t, rec)
	if title := parseXML(t, renderSVG(rec)).all("text", "title"); len(title) != 1 || !strings.Contains(title[0].Text, "200 req/s") {
		t.Errorf("title %+v", title)
	}
}

// checkChart renders rec and checks the SVG as
// TestChartDrawsTheRecordedSeries says, for rec's scenario's rows.
func checkChart(t *testing.T, rec recording) {
	t.Helper()
	rows := specOf(rec).rows
	svg := parseXML(t, renderSVG(rec))
	if svg.XMLName.Local != "svg" || svg.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root %v", svg.XMLName)
	}
	if n := len(svg.all("script", "")); n != 0 {
		t.Errorf("%d scripts", n)
	}
	panels := svg.all("g", "panel")
	if len(panels) != 2*len(rows) {
		t.Fatalf("%d panels, want %d", len(panels), 2*len(rows))
	}
	for _, row := range rows {
		var yRange [2]string
		for ci, run := range rec.Runs {
			var panel node
			for _, p := range panels {
				if p.attr("data-row") == row.key && p.attr("data-mode") == run.Mode {
					panel = p
				}
			}
			if panel.XMLName.Local == "" {
				t.Fatalf("no %s panel for %s", row.key, run.Mode)
			}
			x0, y0, w, h := panel.num(t, "data-x"), panel.num(t, "data-y"), panel.num(t, "data-w"), panel.num(t, "data-h")
			t0, t1, v0, v1 := panel.num(t, "data-t0"), panel.num(t, "data-t1"), panel.num(t, "data-v0"), panel.num(t, "data-v1")
			logScale := panel.attr("data-scale") == "log"
			if r := [2]string{panel.attr("data-v0"), panel.attr("data-v1")}; ci == 0 {
				yRange = r
			} else if r != yRange {
				t.Errorf("%s: y range %v for %s, %v for the other mode", row.key, r, run.Mode, yRange)
			}
			back := func(px, py float64) (tm, v float64) {
				tm = t0 + (px-x0)/w*(t1-t0)
				f := (y0 + h - py) / h
				if logScale {
					return tm, math.Pow(10, math.Log10(v0)+f*(math.Log10(v1)-math.Log10(v0)))
				}
				return tm, v0 + f*(v1-v0)
			}
			for _, s := range row.series {
				var want []point
				for _, p := range run.Points {
					if v, ok := s.get(run.Mode, p); ok && (!logScale || v > 0) {
						want = append(want, p)
					}
				}
				var got [][2]float64
				for _, pl := range panel.all("polyline", "series") {
					if pl.attr("data-series") != s.key {
						continue
					}
					for _, xy := range strings.Fields(pl.attr("points")) {
						xs, ys, _ := strings.Cut(xy, ",")
						px, _ := strconv.ParseFloat(xs, 64)
						py, _ := strconv.ParseFloat(ys, 64)
						tm, v := back(px, py)
						got = append(got, [2]float64{tm, v})
					}
				}
				if len(got) != len(want) {
					t.Errorf("%s/%s/%s: %d points drawn, %d recorded", row.key, run.Mode, s.key, len(got), len(want))
					continue
				}
				for i, p := range want {
					v, _ := s.get(run.Mode, p)
					tol := (v1 - v0) * 0.002
					if logScale {
						tol = v * 0.01
					}
					if math.Abs(got[i][0]-p.T) > 0.02 || math.Abs(got[i][1]-v) > tol {
						t.Errorf("%s/%s/%s: point %d maps back to (%.3f s, %.3f), recorded (%.3f s, %.3f)", row.key, run.Mode, s.key, i, got[i][0], got[i][1], p.T, v)
					}
				}
			}
			phases := panel.all("rect", "phase")
			if len(phases) != len(run.Phases) {
				t.Errorf("%s/%s: %d phase rectangles", row.key, run.Mode, len(phases))
			}
			for i, ph := range phases {
				if i < len(run.Phases) && ph.attr("data-phase") != run.Phases[i].Name {
					t.Errorf("%s/%s: phase %d is %q", row.key, run.Mode, i, ph.attr("data-phase"))
				}
			}
			axes := panel.all("g", "axis")
			if len(axes) != 2 || len(axes[0].all("text", "tick")) < 2 || len(axes[1].all("text", "tick")) < 2 || len(panel.all("text", "axis-label")) != 1 {
				t.Errorf("%s/%s: axes %d, x label %d", row.key, run.Mode, len(axes), len(panel.all("text", "axis-label")))
			} else if top := axes[0].all("text", "tick"); top[len(top)-1].num(t, "data-value") != v1 {
				t.Errorf("%s/%s: the top y tick is not the axis' end %v", row.key, run.Mode, v1)
			}
			if row.state != nil {
				var states int
				for _, p := range run.Points {
					if row.state(p) != "" {
						states++
					}
				}
				if n := len(panel.all("rect", "state")); n != states {
					t.Errorf("%s/%s: %d state rectangles, %d points with a state", row.key, run.Mode, n, states)
				}
				if noData := len(panel.all("text", "no-data")); (run.Mode == "unprotected") != (noData == 1) {
					t.Errorf("%s/%s: %d no-data notes", row.key, run.Mode, noData)
				}
			}
		}
		var legend node
		for _, l := range svg.all("g", "legend") {
			if l.attr("data-row") == row.key {
				legend = l
			}
		}
		items := map[string]bool{}
		for _, it := range legend.all("g", "legend-item") {
			items[it.attr("data-series")] = true
		}
		for _, s := range row.series {
			if !items[s.key] {
				t.Errorf("%s: no legend entry for %s", row.key, s.key)
			}
		}
	}
	if title := svg.all("text", "title"); len(title) != 1 {
		t.Errorf("title %+v", title)
	}
	if c := svg.all("text", "caption"); len(c) != 1 || !strings.Contains(c[0].Text, rec.GoVersion) || !strings.Contains(c[0].Text, rec.Command) {
		t.Errorf("caption %+v", c)
	}
}

// TestChartOutputs: -out's four files from the recording: the JSON reads
// back to the same recording, the CSV has a row per point, the HTML
// parses, embeds the SVG inline and has no script.
func TestChartOutputs(t *testing.T) {
	rec, err := readRecording("testdata/recording.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := writeOutputs(dir, rec); err != nil {
		t.Fatal(err)
	}
	back, err := readRecording(filepath.Join(dir, "overload.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(rec)
	b, _ := json.Marshal(back)
	if !bytes.Equal(a, b) {
		t.Error("overload.json does not read back to the recording")
	}
	f, err := os.Open(filepath.Join(dir, "overload.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	n := 1
	for _, r := range rec.Runs {
		n += len(r.Points)
	}
	if len(rows) != n || strings.Join(rows[0], ",") != strings.Join(csvHeader, ",") {
		t.Errorf("%d CSV rows, want %d; header %v", len(rows), n, rows[0])
	}
	page, err := os.ReadFile(filepath.Join(dir, "overload.html"))
	if err != nil {
		t.Fatal(err)
	}
	html := parseXML(t, strings.TrimPrefix(string(page), "<!DOCTYPE html>\n"))
	if svgs := html.all("svg", ""); len(svgs) != 1 || len(svgs[0].all("g", "panel")) != 2*len(dbChart.rows) {
		t.Errorf("the page embeds %d SVGs", len(svgs))
	}
	if n := len(html.all("script", "")); n != 0 {
		t.Errorf("%d scripts", n)
	}
}

// TestRenderFlagRedrawsARecording: -render draws a recording without
// running the demo.
func TestRenderFlagRedrawsARecording(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags([]string{"-render", "testdata/recording.json", "-out", t.TempDir()}, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := render(o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "recording.svg") {
		t.Errorf("output %q", out.String())
	}
	if _, err := parseFlags([]string{"-status", "0.0.0.0:8080"}, &errOut); err == nil {
		t.Error("-status on a non-loopback address was accepted")
	}
}

// TestCPUScenarioShort runs the CPU scenario's two modes for a second or
// two each: each produces its table rows (the figures are not asserted:
// the machine is shared), its outcomes add up, the protected run reports
// its shedder's state at the end of the overload, and -out writes the
// scenario's recording, whose chart checkChart reads back.
func TestCPUScenarioShort(t *testing.T) {
	o := defaultOptions()
	o.scenario = "cpu"
	var metricsURL string
	o.onStatus = func(_, metrics string) { metricsURL = metrics }
	var scrape []byte
	var scrapeErr error = errorString("/metrics was not scraped during the protected overload")
	o.onTick = func(scenario, mode, phase string) {
		if scrape == nil && scenario == "cpu" && mode == "protected" && phase == "overload" {
			scrape, scrapeErr = get(metricsURL)
		}
	}
	o.cpuWork, o.cpuCapacity = 2*time.Millisecond, 200*time.Millisecond
	o.cpuWarmup, o.cpuOverload, o.cpuRecover = 300*time.Millisecond, 1200*time.Millisecond, 300*time.Millisecond
	o.clientTimeout = 4 * time.Second
	o.out = t.TempDir()
	var out bytes.Buffer
	results, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if len(results) != 2 || results[0].mode != "unprotected" || results[1].mode != "protected" {
		t.Fatalf("results %+v", results)
	}
	if scrapeErr != nil {
		t.Errorf("/metrics: %v", scrapeErr)
	} else {
		// The shedder's and its pipeline's series, under their registry names.
		fams := parseScrape(t, scrape)
		for _, f := range []string{"rampart_shed_overloaded", "rampart_shed_in_flight", "rampart_shed_limit", "rampart_shed_rejected_total", "rampart_shed_admitted_total"} {
			if len(seriesOf(fams, f, "cpu-shed")) != 1 {
				t.Errorf("no %s{rampart_name=\"cpu-shed\"}", f)
			}
		}
		if len(seriesOf(fams, "rampart_pipeline_calls_total", "cpu")) == 0 {
			t.Error("no rampart_pipeline_calls_total{rampart_name=\"cpu\"}")
		}
	}
	checkSeries(t, results)
	for _, r := range results {
		if r.scenario != "cpu" || len(r.phases) != 3 || r.capacity <= 0 || r.capAfter <= 0 {
			t.Fatalf("%s: scenario %q, %d phases, capacity %v, %v", r.mode, r.scenario, len(r.phases), r.capacity, r.capAfter)
		}
		for _, p := range r.phases {
			if got := p.ok.Load() + p.shed.Load() + p.failed.Load(); got != p.sent.Load() {
				t.Errorf("%s/%s: %d outcomes for %d sent", r.mode, p.phase.name, got, p.sent.Load())
			}
			row := "| " + r.mode + " | " + p.phase.name + " | "
			if !strings.Contains(out.String(), row) {
				t.Errorf("the cpu table has no row %q", row)
			}
		}
		if over := r.phases[1]; over.phase.name != "overload" || over.phase.rate < 2*r.phases[0].phase.rate-1 {
			t.Errorf("%s: the overload offers %d req/s, the warm-up %d", r.mode, over.phase.rate, r.phases[0].phase.rate)
		}
		if r.mode == "unprotected" && r.phases[1].shed.Load() != 0 {
			t.Errorf("unprotected: %d shed", r.phases[1].shed.Load())
		}
	}
	if n := results[1].notes; len(n) != 1 || !strings.Contains(n[0], "the shedder at the end of the overload") {
		t.Errorf("protected notes %q", n)
	}
	if !strings.Contains(out.String(), "| cpu mode | phase | capacity/s before, after |") {
		t.Error("no cpu table")
	}
	rec, err := readRecording(filepath.Join(o.out, "overload-cpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Scenario != "cpu" {
		t.Errorf("recorded scenario %q", rec.Scenario)
	}
	for _, name := range []string{"overload-cpu.csv", "overload-cpu.svg", "overload-cpu.html"} {
		if fi, err := os.Stat(filepath.Join(o.out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("-out wrote no %s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.out, "overload.json")); err == nil {
		t.Error("-scenario cpu wrote the database scenario's overload.json")
	}
	checkChart(t, rec)
}

// TestSeriesIntegrateToTheCountsAtHighRates: at over a thousand requests
// a second, points whose intervals are not whole milliseconds still
// integrate (rate × dt) back to the counts within a hundredth of a
// request: dt is recorded finely enough that rate × its rounding error is
// not a request.
func TestSeriesIntegrateToTheCountsAtHighRates(t *testing.T) {
	p := &phaseStats{phase: phase{name: "overload", duration: 4 * time.Second, rate: 1300}}
	start := time.Unix(0, 0)
	r := newRecorder("unprotected", []*phaseStats{p}, start)
	var now time.Duration
	for range 4 {
		now += time.Second + 450*time.Microsecond // each interval 1.00045 s
		p.ok.Add(1301)
		r.record(start.Add(now), "overload", point{})
	}
	var got float64
	for _, pt := range r.series.Points {
		got += pt.Succeeded * pt.Dt
	}
	if want := float64(p.ok.Load()); math.Abs(got-want) > 0.01 {
		t.Errorf("the series integrate to %.3f successes, the counters say %.0f", got, want)
	}
}

// TestConfigFileSetsAndUpdatesTheLimits: -config builds the protected
// database run's policies from the document (the guard gets them by name:
// limits.yaml, the example file, gives the defaults' values), and the
// watched file's changes reach the running instances: a valid one at once,
// an invalid one reported and the limits in force kept.
func TestConfigFileSetsAndUpdatesTheLimits(t *testing.T) {
	example, err := os.ReadFile("limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, example, 0o644); err != nil {
		t.Fatal(err)
	}
	o := defaultOptions()
	reg := registry.New()
	events := make(chan rampartconfig.Event, 8)
	var out bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim, err := startConfig(ctx, path, reg, &lockedWriter{w: &out}, func(e rampartconfig.Event) { events <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer lim.close()
	if got := strings.Join(lim.built, " "); got != "api-admission api-deadline db-breaker db-bulkhead db-retry" {
		t.Errorf("limits.yaml built %q", got)
	}
	g, err := newGuard(o, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if got, ok := registry.Lookup[*bulkhead.Bulkhead](reg, "db-bulkhead"); !ok || got != g.dbLimit {
		t.Fatal("the guard did not get the document's db-bulkhead")
	}
	if g.dbLimit.Stats().Max != int64(o.pool()) || g.admission.Stats().Max != int64(o.admission()) || g.deadline.Duration() != o.deadline {
		t.Errorf("limits.yaml: db max %d, admission max %d, deadline %v; the defaults are %d, %d, %v",
			g.dbLimit.Stats().Max, g.admission.Stats().Max, g.deadline.Duration(), o.pool(), o.admission(), o.deadline)
	}
	next := func() rampartconfig.Event {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(30 * time.Second): // a bound on a broken watcher, not a wait for the result
			t.Fatal("no reload event")
			return rampartconfig.Event{}
		}
	}
	write := func(old, new string) {
		t.Helper()
		b := bytes.Replace(example, []byte(old), []byte(new), 1)
		if bytes.Equal(b, example) {
			t.Fatalf("limits.yaml has no %q", old)
		}
		// As an editor saves: a new file renamed onto the old one, so the
		// watcher never reads a half-written file.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("max: 8 ", "max: 4 ")
	if e := next(); e.Err != nil || g.dbLimit.Stats().Max != 4 {
		t.Errorf("after max 8 -> 4: event %+v, db-bulkhead max %d", e, g.dbLimit.Stats().Max)
	}
	write("max: 8 ", "max: -1 ")
	if e := next(); e.Err == nil || g.dbLimit.Stats().Max != 4 {
		t.Errorf("after max -1: event %+v, db-bulkhead max %d (4 kept)", e, g.dbLimit.Stats().Max)
	}
	if !strings.Contains(out.String(), "applied, version") || !strings.Contains(out.String(), "not applied") {
		t.Errorf("reload lines: %q", out.String())
	}
}

// TestCapacityCountsCompletionsNotCutOffs: the capacity measurement goes
// on past its duration until some requests have completed, and cuts none
// off, so a measurement shorter than a request (a starved machine: the
// race detector, other jobs) reads as a rate, not as 0.
func TestCapacityCountsCompletionsNotCutOffs(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	c, err := measureCapacity(context.Background(), ok, time.Nanosecond)
	if err != nil || !(c > 0) {
		t.Errorf("capacity %v, %v", c, err)
	}
}

// TestVisitEstimateRecoversAfterAStall: after a stall has pushed the
// estimate of a database visit past every request's budget, the refusals
// bring it back down, so visits start again once the database is fast
// (the estimate learnt only from visits made, and no visit was made).
func TestVisitEstimateRecoversAfterAStall(t *testing.T) {
	o := defaultOptions()
	reg := registry.New()
	g, err := newGuard(o, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	db, err := newDatabase(reg, 1, 0, 0) // visits take no time
	if err != nil {
		t.Fatal(err)
	}
	g.visitAvg.Store(int64(10 * time.Second)) // what a stall of the process leaves
	refused := 0
	for ; refused < 1000; refused++ {
		ctx, cancel := context.WithTimeout(context.Background(), o.deadline)
		err := g.visit(ctx, db, 0)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, errNoTime) {
			t.Fatal(err)
		}
	}
	if refused >= 1000 {
		t.Fatalf("1000 visits refused after the stall; the estimate is still %v", g.visitEstimate())
	}
	t.Logf("visits start again after %d refusals", refused)
}

// TestLastShortIntervalFoldsIntoThePointBefore: the run's last point is
// the interval after the last tick, often a fraction of a millisecond
// (the phases end on whole seconds, as the ticks do); two responses in
// 100 µs would read as 20000 req/s and scale the row's shared y axis to
// it. Folded into the point before, the run's rates stay near 100 req/s
// and the series still integrate to the counts.
func TestLastShortIntervalFoldsIntoThePointBefore(t *testing.T) {
	p := &phaseStats{phase: phase{name: "recovery", duration: 2 * time.Second, rate: 100}}
	start := time.Unix(0, 0)
	r := newRecorder("protected", []*phaseStats{p}, start)
	r.phaseStarted("recovery", scheduleOf(p), start)
	for i := 1; i <= 2; i++ {
		p.sent.Add(100)
		p.ok.Add(100)
		r.record(start.Add(time.Duration(i)*time.Second), "recovery", point{})
	}
	r.phasesEnded(start.Add(2 * time.Second))
	p.ok.Add(2) // the last two responses, 100 µs after the last tick
	r.finish(start.Add(2*time.Second+100*time.Microsecond), "recovery", point{})
	var most, ok float64
	for _, pt := range r.series.Points {
		most = max(most, pt.Succeeded)
		ok += pt.Succeeded * pt.Dt
	}
	if most > 200 {
		t.Errorf("a run of 100 req/s has a point of %.0f succeeded/s", most)
	}
	if n := len(r.series.Points); n != 2 || r.series.Points[n-1].T != 2 {
		t.Errorf("%d points, the last at t=%v: want 2, the last at 2 (the short interval folded into it)", n, r.series.Points[n-1].T)
	}
	if math.Abs(ok-202) > 0.01 {
		t.Errorf("the points integrate to %.3f successes, want 202", ok)
	}
	svg := parseXML(t, renderSVG(recording{Rate: 100, Runs: []runSeries{r.series}}))
	for _, pn := range svg.all("g", "panel") {
		if pn.attr("data-row") == "throughput" && pn.num(t, "data-v1") > 200 {
			t.Errorf("%s throughput panel's y axis ends at %v for a run of 100 req/s", pn.attr("data-mode"), pn.num(t, "data-v1"))
		}
	}
}

// TestRenderWritesOnlyTheChartOfItsFile: -render FILE writes FILE's chart
// (FILE's name, .svg and .html), linking to FILE; it rewrites neither FILE
// nor another recording of that directory.
func TestRenderWritesOnlyTheChartOfItsFile(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile("testdata/recording.json")
	if err != nil {
		t.Fatal(err)
	}
	// A field this version does not know must survive: FILE is not rewritten.
	src = bytes.Replace(src, []byte(`"rate": 200,`), []byte(`"rate": 200, "note": "kept",`), 1)
	other := map[string][]byte{}
	for _, name := range []string{"overload.json", "overload.csv", "overload.svg", "overload.html"} {
		other[name] = []byte("another recording's " + name + "\n")
	}
	other["run2.json"] = src
	for name, b := range other {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parseFlags([]string{"-render", filepath.Join(dir, "run2.json")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := render(o, &out); err != nil {
		t.Fatal(err)
	}
	for name, want := range other {
		if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
			t.Errorf("-render %s rewrote %s: now %.80q", o.render, name, got)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(other)+2 {
		t.Errorf("%d files in the directory, want %d and run2.svg, run2.html", len(entries), len(other))
	}
	if _, err := os.Stat(filepath.Join(dir, "run2.svg")); err != nil {
		t.Error(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "run2.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), `href="run2.json"`) || strings.Contains(string(page), `href="overload.json"`) {
		t.Errorf("run2.html does not link to run2.json alone: %q", page)
	}
}

// TestCPUWorkDoesNotDependOnTheChunk: -cpu-work is the CPU of one request
// whatever -cpu-chunk: a chunk that does not divide it (3 ms of 5 ms) or
// exceeds it (10 ms) gives the same work as one that does, in chunks of at
// most -cpu-chunk.
func TestCPUWorkDoesNotDependOnTheChunk(t *testing.T) {
	const perNs = 1.0 // burn rounds a nanosecond: 5 ms is 5e6 rounds
	d := 5 * time.Millisecond
	for _, chunk := range []time.Duration{100 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, 7 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond} {
		w := splitWork(d, chunk, perNs)
		rounds := float64(w.chunks) * float64(w.chunkIters)
		if want := perNs * float64(d); math.Abs(rounds-want) > float64(w.chunks) {
			t.Errorf("-cpu-work %v -cpu-chunk %v: %d chunks of %d rounds, %.0f rounds, want %.0f", d, chunk, w.chunks, w.chunkIters, rounds, want)
		}
		if float64(w.chunkIters) > perNs*float64(chunk) {
			t.Errorf("-cpu-chunk %v: a chunk of %d rounds is longer than %v", chunk, w.chunkIters, chunk)
		}
	}
}

// TestChartSaysTheRecordedFactors: the chart's texts state the
// recording's factors (testdata/recording.json was recorded with
// -slow-factor 8; a CPU run with -cpu-load 3 offers three times the
// capacity), and neutral words for a recording without them.
func TestChartSaysTheRecordedFactors(t *testing.T) {
	rec, err := readRecording("testdata/recording.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rec.Command, "-slow-factor 8") {
		t.Fatalf("recording's command %q", rec.Command)
	}
	page := func(rec recording) string {
		var b bytes.Buffer
		if err := writeHTML(&b, rec, renderSVG(rec), []string{"x.json"}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if p := page(rec); strings.Contains(p, "4×") || !strings.Contains(p, "a database slowdown") {
		t.Error("the page of a recording without its slowdown factor does not say \"a database slowdown\"")
	}
	rec.SlowFactor = 8
	if p := page(rec); !strings.Contains(p, "an 8× database slowdown") {
		t.Error("the page of an 8× slowdown does not say \"an 8× database slowdown\"")
	}
	o := defaultOptions()
	o.cpuLoad = 3
	pts := []point{{T: 1, Dt: 1, Phase: "overload", Offered: 300, Capacity: 100}}
	cpu := newRecording(o, []string{"-scenario", "cpu", "-cpu-load", "3"}, []runSeries{{Mode: "protected", Points: pts}})
	cpu.Scenario = "cpu"
	if p := page(cpu); strings.Contains(p, "twice") || !strings.Contains(p, "3× the measured capacity") {
		t.Error("the chart of a -cpu-load 3 run does not say \"3× the measured capacity\"")
	}
	cpu.CPULoad = 0
	if p := page(cpu); strings.Contains(p, "twice") || !strings.Contains(p, "a multiple of the measured capacity") {
		t.Error("the chart of a CPU recording without its load does not say \"a multiple of the measured capacity\"")
	}
}

// TestCapacityFlagIsBoundedByTheMeasurement: the capacity is measured for
// at most maxMeasure, so a longer -cpu-capacity is refused at the flag.
func TestCapacityFlagIsBoundedByTheMeasurement(t *testing.T) {
	if _, err := parseFlags([]string{"-cpu-capacity", maxMeasure.String()}, io.Discard); err != nil {
		t.Errorf("-cpu-capacity %v refused: %v", maxMeasure, err)
	}
	if _, err := parseFlags([]string{"-cpu-capacity", (maxMeasure + time.Millisecond).String()}, io.Discard); err == nil {
		t.Errorf("-cpu-capacity %v accepted, measured for %v", maxMeasure+time.Millisecond, maxMeasure)
	}
}

// TestSlowFactorIsBounded: -slow-factor is in (0, 1000]; a huge factor
// would overflow the database's ×1000 fixed point and make every visit
// instant.
func TestSlowFactorIsBounded(t *testing.T) {
	for _, bad := range []string{"0", "1000.5", "1e13", "+Inf"} {
		if _, err := parseFlags([]string{"-slow-factor", bad}, io.Discard); err == nil {
			t.Errorf("-slow-factor %s accepted", bad)
		}
	}
	o, err := parseFlags([]string{"-slow-factor", "1000"}, io.Discard)
	if err != nil {
		t.Fatalf("-slow-factor 1000 refused: %v", err)
	}
	db, err := newDatabase(registry.New(), 1, 10*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	db.setSlowdown(o.slowFactor)
	if got := db.slow.Load(); got != 1000*1000 {
		t.Errorf("-slow-factor 1000: the database's factor ×1000 is %d", got)
	}
}
