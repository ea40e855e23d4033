package statuspage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/statuspage"
	"github.com/rampart-go/rampart/timeout"
)

var update = flag.Bool("update", false, "rewrite testdata/status.golden.json")

var errBoom = errors.New("boom")

// fixture is one instance of every kind the page knows, on one
// ManualTicker, with a few calls run through them so that their counters
// are not all zero.
type fixture struct {
	tk       *rampart.ManualTicker
	breaker  *circuitbreaker.Breaker
	injector *chaos.Injector
	closers  []func() error
	list     []statuspage.Instance
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	tk := rampart.NewManualTicker(1_000_000_000)
	f := &fixture{tk: tk}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	f.breaker, err = circuitbreaker.New(circuitbreaker.Config{Name: "db", Ticker: tk, WindowSize: 10, MinimumCalls: 5, FailureRateThreshold: 50, OpenDuration: time.Second, CountStats: true})
	must(err)
	bh, err := bulkhead.New(bulkhead.Config{Name: "api", Max: 8})
	must(err)
	rl, err := ratelimit.New(ratelimit.Config{Name: "ingress", Rate: 10, Burst: 5, Ticker: tk, CountStats: true})
	must(err)
	keyed, err := ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Name: "tenants", Rate: 1, Burst: 1, Ticker: tk, CountStats: true}, MaxKeys: 64})
	must(err)
	sharded, err := ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "hot", Rate: 100, Burst: 8, Ticker: tk}, Shards: 2})
	must(err)
	al, err := adaptive.New(adaptive.Config{Name: "backend", Ticker: tk, InitialLimit: 10})
	must(err)
	th, err := adaptive.NewThrottler(adaptive.ThrottlerConfig{Name: "client", Ticker: tk})
	must(err)
	tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 10, TokenRatio: 0.1})
	must(err)
	rp, err := retry.New(retry.Config{Name: "db", MaxAttempts: 3, Budget: tb, Ticker: tk})
	must(err)
	rb, err := retry.NewRatioBudget(retry.RatioBudgetConfig{})
	must(err)
	f.injector, err = chaos.New(chaos.Config{ErrorRate: 1, Error: errBoom, Seed: 1})
	must(err)
	hg, err := hedge.New(hedge.Config{Name: "search", Delay: 20 * time.Millisecond, Ticker: tk})
	must(err)
	f.closers = append(f.closers, hg.Close)
	to, err := timeout.New(timeout.Config{Name: "api", Duration: 150 * time.Millisecond, Ticker: tk})
	must(err)
	f.closers = append(f.closers, to.Close)
	// A shedder whose Source knows no signal: it never engages, and its
	// Stats are the same every run.
	sh, err := shed.New(shed.Config{Name: "db", Ticker: tk, Source: shed.SourceFunc(func(int64, *shed.Signals) {})})
	must(err)
	pl, err := pipeline.New(pipeline.Config{Name: "db", Ticker: tk, Retry: rp, Breaker: f.breaker, Shed: sh, CountStats: true})
	must(err)
	stale := "cached"
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: pl, When: pipeline.Rejections, Value: &stale})
	must(err)
	t.Cleanup(func() {
		for _, c := range f.closers {
			_ = c()
		}
	})

	// Some traffic: a call through the pipeline succeeds (a success the
	// breaker counts), the breaker trips on four failures, and then a
	// call through the pipeline is rejected by it, and another one is
	// answered by the fallback; two bulkhead permits held; the limiter
	// spends three tokens; two keys; a retry.
	must(pl.Do(context.Background(), func(context.Context) error { return nil }))
	for range 4 {
		p, err := f.breaker.Acquire()
		must(err)
		f.breaker.Release(p, rampart.Failure)
	}
	if err := pl.Do(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, circuitbreaker.ErrOpen) {
		t.Fatalf("pipeline: %v, want ErrOpen", err)
	}
	if v, err := fb.Call(context.Background(), func(context.Context) (string, error) { return "fresh", nil }); v != "cached" || err != nil {
		t.Fatalf("fallback: %q, %v", v, err)
	}
	must(bh.Acquire())
	must(bh.Acquire())
	t.Cleanup(func() { bh.Release(); bh.Release() })
	for range 3 {
		rl.Allow()
	}
	keyed.Allow("a")
	keyed.Allow("b")
	keyed.Allow("b")
	for range 3 {
		_ = f.injector.Do(context.Background(), func(context.Context) error { return nil })
	}
	rb.OnRequest(tk.Now())
	rb.AllowRetry(tk.Now())
	f.list = []statuspage.Instance{
		{Name: "api", Value: bh}, {Name: "api-timeout", Value: to}, {Name: "backend", Value: al},
		{Name: "client", Value: th}, {Name: "db", Value: f.breaker}, {Name: "db-budget", Value: tb},
		{Name: "db-fallback", Value: fb}, {Name: "db-pipeline", Value: pl}, {Name: "db-retry", Value: rp},
		{Name: "db-shed", Value: sh}, {Name: "faults", Value: f.injector},
		{Name: "hot", Value: sharded}, {Name: "ingress", Value: rl}, {Name: "ratio-budget", Value: rb},
		{Name: "search", Value: hg}, {Name: "tenants", Value: keyed}, {Name: "other", Value: struct{}{}},
	}
	return f
}

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

// TestStatusJSONMatchesGolden: the JSON of every kind, on a ManualTicker,
// is byte for byte testdata/status.golden.json (go test -update rewrites
// it): a change of the document's shape, or of a policy's Stats, shows up
// here.
func TestStatusJSONMatchesGolden(t *testing.T) {
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	w := get(t, h, "/debug/rampart/status.json")
	if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
	}
	const golden = "testdata/status.golden.json"
	if *update {
		if err := os.WriteFile(golden, w.Body.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.Body.Bytes(), want) {
		t.Fatalf("status.json differs from %s (go test -update rewrites it):\n%s", golden, w.Body.String())
	}
	// The same request again at the same reading is the same document.
	if again := get(t, h, "/status.json"); !bytes.Equal(again.Body.Bytes(), want) {
		t.Fatalf("a second request differs:\n%s", again.Body.String())
	}
}

// TestStatusJSONReadsTheInstancesLive: the document follows the instances
// (a breaker opened by hand reads "forced-open") and lists every instance
// once, sorted by name, the explicit list winning over the Source (here
// also a shedder, whose runtime signals are not deterministic enough for
// the golden file).
func TestStatusJSONReadsTheInstancesLive(t *testing.T) {
	f := newFixture(t)
	sh, err := shed.New(shed.Config{Name: "load", Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	src := sourceFunc(func(yield func(string, any) bool) {
		_ = yield("db", f.injector) && yield("zeta", f.injector) && yield("load", sh)
	})
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Source: src, Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := sh.Acquire(); err != nil {
		t.Fatal(err)
	} else {
		defer sh.Release(p, rampart.Success)
	}
	f.breaker.TransitionTo(circuitbreaker.ForcedOpen)
	doc := decode(t, get(t, h, "/status.json"))
	var names []string
	for _, in := range doc.Instances {
		names = append(names, in.Name)
	}
	if got, want := strings.Join(names, ","), "api,api-timeout,backend,client,db,db-budget,db-fallback,db-pipeline,db-retry,db-shed,faults,hot,ingress,load,other,ratio-budget,search,tenants,zeta"; got != want {
		t.Fatalf("names %s, want %s", got, want)
	}
	db := find(t, doc, "db")
	if db.Kind != "circuitbreaker" || db.Stats["State"] != "forced-open" {
		t.Fatalf("db: %+v", db)
	}
	if z := find(t, doc, "zeta"); z.Kind != "chaos" {
		t.Fatalf("zeta: %+v", z)
	}
	if l := find(t, doc, "load"); l.Kind != "shed" || l.Stats["InFlight"] != 1.0 {
		t.Fatalf("load: %+v", l)
	}
	if o := find(t, doc, "other"); o.Kind != "other" || o.Stats != nil || o.Type != "struct {}" {
		t.Fatalf("other: %+v", o)
	}
}

// TestCountsOfPipelinesFallbacksAndBreakers: the JSON shows a counting
// pipeline's outcomes beside its policies (the shedder among them, in the
// pipeline's order), a Fallback's answers (a generic type, found by its
// Stats method) and the successes of a breaker that counts them.
func TestCountsOfPipelinesFallbacksAndBreakers(t *testing.T) {
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	doc := decode(t, get(t, h, "/status.json"))
	pl := find(t, doc, "db-pipeline")
	out, _ := pl.Stats["Outcomes"].(map[string]any)
	if out == nil || out["Calls"] != 3.0 || out["Succeeded"] != 1.0 || out["Rejected"] != 2.0 ||
		out["RejectedBy"].([]any)[pipeline.Breaker] != 2.0 || out["Attempts"] != 3.0 {
		t.Fatalf("pipeline outcomes: %+v", pl.Stats)
	}
	var kinds []string
	for _, p := range pl.Stats["Policies"].([]any) {
		kinds = append(kinds, p.(map[string]any)["Kind"].(string))
	}
	if got := strings.Join(kinds, ","); got != "retry,circuitbreaker,shed" {
		t.Errorf("pipeline policies %s, want retry,circuitbreaker,shed", got)
	}
	if fb := find(t, doc, "db-fallback"); fb.Kind != "fallback" || fb.Stats["Answered"] != 1.0 ||
		fb.Stats["AnsweredRejected"].([]any)[pipeline.Breaker] != 1.0 {
		t.Fatalf("fallback: %+v", fb)
	}
	if db := find(t, doc, "db"); db.Stats["Successes"] != 1.0 || db.Stats["Failures"] != 4.0 {
		t.Fatalf("breaker: %+v", db.Stats)
	}
	if sh := find(t, doc, "db-shed"); sh.Kind != "shed" || sh.Stats["Admitted"] != 1.0 {
		t.Fatalf("shed: %+v", sh.Stats)
	}
}

type sourceFunc func(yield func(string, any) bool)

func (s sourceFunc) Range(f func(string, any) bool) { s(f) }

type docJSON struct {
	Now       int64 `json:"now"`
	Actions   bool  `json:"actions"`
	Instances []struct {
		Name    string         `json:"name"`
		Kind    string         `json:"kind"`
		Type    string         `json:"type"`
		Stats   map[string]any `json:"stats"`
		Actions []string       `json:"actions"`
	} `json:"instances"`
}

func decode(t *testing.T, w *httptest.ResponseRecorder) docJSON {
	t.Helper()
	var d docJSON
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatalf("%v: %s", err, w.Body.String())
	}
	return d
}

func find(t *testing.T, d docJSON, name string) struct {
	Name    string         `json:"name"`
	Kind    string         `json:"kind"`
	Type    string         `json:"type"`
	Stats   map[string]any `json:"stats"`
	Actions []string       `json:"actions"`
} {
	t.Helper()
	for _, in := range d.Instances {
		if in.Name == name {
			return in
		}
	}
	t.Fatalf("no instance %q", name)
	panic("unreachable")
}

func post(h http.Handler, form url.Values, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "http://status.local/debug/rampart/action", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestActionsRefusedWithoutAuthorisation: without Authorize every action
// is 403 and changes nothing; with it, a request it refuses is 403, one
// from another origin is 403 even when it would accept it, a GET is 405,
// and the page and the JSON offer no action to a refused request.
func TestActionsRefusedWithoutAuthorisation(t *testing.T) {
	f := newFixture(t)
	force := url.Values{"name": {"db"}, "action": {"force-open"}}
	readOnly, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	authorize := func(r *http.Request) bool { return r.Header.Get("X-Token") == "secret" }
	guarded, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk, Authorize: authorize})
	if err != nil {
		t.Fatal(err)
	}
	withToken := func(r *http.Request) { r.Header.Set("X-Token", "secret") }
	for _, tc := range []struct {
		name string
		h    http.Handler
		mod  func(*http.Request)
		want int
	}{
		{"read-only", readOnly, withToken, http.StatusForbidden},
		{"refused by Authorize", guarded, nil, http.StatusForbidden},
		{"cross-origin", guarded, func(r *http.Request) { withToken(r); r.Header.Set("Origin", "https://evil.example") }, http.StatusForbidden},
	} {
		if w := post(tc.h, force, tc.mod); w.Code != tc.want {
			t.Errorf("%s: status %d, want %d: %s", tc.name, w.Code, tc.want, w.Body.String())
		}
		if s := f.breaker.State(); s != circuitbreaker.Open {
			t.Fatalf("%s: the breaker moved to %v", tc.name, s)
		}
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/action?name=db&action=force-open", nil)
	withToken(r)
	guarded.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "POST" {
		t.Errorf("GET action: status %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
	if d := decode(t, get(t, guarded, "/status.json")); d.Actions || find(t, d, "db").Actions != nil {
		t.Errorf("an unauthorised request is offered actions: %+v", d)
	}
	if body := get(t, guarded, "/").Body.String(); strings.Contains(body, "<form") {
		t.Errorf("an unauthorised request's page has forms")
	}
}

// TestActionsWithAuthorisation: an authorised POST moves the breaker
// (into every state TransitionTo can enter, and Reset), switches the injector, answers the
// instance's JSON or, from the page's forms, 303 to the page; an unknown
// instance is 404, an action its kind lacks 400.
func TestActionsWithAuthorisation(t *testing.T) {
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk, Authorize: func(*http.Request) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	sameOrigin := func(r *http.Request) { r.Header.Set("Origin", "http://status.local") }
	for _, tc := range []struct {
		action string
		want   circuitbreaker.State
	}{
		{"force-open", circuitbreaker.ForcedOpen}, {"open", circuitbreaker.Open}, {"half-open", circuitbreaker.HalfOpen},
		{"metrics-only", circuitbreaker.MetricsOnly}, {"disable", circuitbreaker.Disabled}, {"reset", circuitbreaker.Closed},
	} {
		w := post(h, url.Values{"name": {"db"}, "action": {tc.action}}, sameOrigin)
		if w.Code != http.StatusOK || f.breaker.State() != tc.want {
			t.Fatalf("%s: status %d, breaker %v: %s", tc.action, w.Code, f.breaker.State(), w.Body.String())
		}
		var in struct{ Stats struct{ State string } }
		if err := json.Unmarshal(w.Body.Bytes(), &in); err != nil || in.Stats.State != tc.want.String() {
			t.Fatalf("%s: answer %s (%v)", tc.action, w.Body.String(), err)
		}
	}
	if w := post(h, url.Values{"name": {"faults"}, "action": {"disable"}, "redirect": {"1"}}, nil); w.Code != http.StatusSeeOther || f.injector.Enabled() {
		t.Fatalf("chaos disable: status %d, enabled %v", w.Code, f.injector.Enabled())
	}
	if w := post(h, url.Values{"name": {"nobody"}, "action": {"reset"}}, nil); w.Code != http.StatusNotFound {
		t.Errorf("unknown instance: status %d", w.Code)
	}
	if w := post(h, url.Values{"name": {"api"}, "action": {"reset"}}, nil); w.Code != http.StatusBadRequest {
		t.Errorf("a bulkhead reset: status %d", w.Code)
	}
	if d := decode(t, get(t, h, "/status.json")); !d.Actions || strings.Join(find(t, d, "db").Actions, ",") != "force-open,open,half-open,metrics-only,disable,reset" {
		t.Errorf("an authorised request is not offered the actions: %+v", find(t, d, "db"))
	}
}

// node is a generic XML element, for parsing the page.
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

func (n node) walk(f func(node)) {
	f(n)
	for _, c := range n.Nodes {
		c.walk(f)
	}
}

// TestPageParsesAndChartsTheSamples: the page is well-formed (it parses as
// XML, with the HTML entities it uses), refreshes itself by a meta
// refresh, carries no script, and charts each instance's samples: after 5
// samples a second apart, the breaker's chart has its state strip (5
// rectangles) and the bulkhead's two polylines of 5 points each, the
// in-flight one at the height of its value.
func TestPageParsesAndChartsTheSamples(t *testing.T) {
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk, Samples: 60, Authorize: func(*http.Request) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		h.Sample()
		f.tk.Advance(time.Second)
	}
	w := get(t, h, "/debug/rampart/") // the fifth sample, on request
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, content type %q", w.Code, w.Header().Get("Content-Type"))
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	body := strings.TrimPrefix(w.Body.String(), "<!DOCTYPE html>")
	dec := xml.NewDecoder(strings.NewReader(body))
	dec.Strict = true
	dec.Entity = xml.HTMLEntity
	var root node
	if err := dec.Decode(&root); err != nil {
		t.Fatalf("the page does not parse: %v\n%s", err, body)
	}
	var refresh, scripts, forms int
	charts := map[string]node{}
	root.walk(func(n node) {
		switch n.XMLName.Local {
		case "meta":
			if n.attr("http-equiv") == "refresh" && n.attr("content") == "5" {
				refresh++
			}
		case "script":
			scripts++
		case "form":
			forms++
		case "section":
			for _, c := range n.Nodes {
				if c.XMLName.Local == "svg" {
					charts[n.attr("data-name")] = c
				}
			}
		}
	})
	if refresh != 1 || scripts != 0 || forms != 8 { // 6 breaker actions, 2 chaos ones
		t.Errorf("%d meta refreshes, %d scripts, %d forms", refresh, scripts, forms)
	}
	count := func(svg node, tag, class string) (out []node) {
		svg.walk(func(n node) {
			if n.XMLName.Local == tag && n.attr("class") == class {
				out = append(out, n)
			}
		})
		return out
	}
	if n := len(count(charts["db"], "rect", "state")); n != 5 {
		t.Errorf("breaker chart: %d state rectangles, want 5", n)
	}
	lines := count(charts["api"], "polyline", "series")
	if len(lines) != 2 || lines[0].attr("data-series") != "in flight" || lines[1].attr("data-series") != "max" {
		t.Fatalf("bulkhead chart: %+v", lines)
	}
	ymax, _ := strconv.ParseFloat(charts["api"].attr("data-ymax"), 64)
	for _, l := range lines {
		pts := strings.Fields(l.attr("points"))
		if len(pts) != 5 {
			t.Fatalf("%s: %d points, want 5", l.attr("data-series"), len(pts))
		}
		want := 2.0 // in flight
		if l.attr("data-series") == "max" {
			want = 8
		}
		for _, p := range pts {
			_, ys, _ := strings.Cut(p, ",")
			y, _ := strconv.ParseFloat(ys, 64)
			if got := ymax * (64 - y) / 64; got < want-0.1 || got > want+0.1 {
				t.Errorf("%s: point %s maps back to %v, want %v", l.attr("data-series"), p, got, want)
			}
		}
	}
	if n := len(count(charts["api"], "g", "legend")); n != 2 {
		t.Errorf("bulkhead chart: %d legends", n)
	}
}

// TestRingIsBounded: a ring holds at most Samples samples, and sampling on
// request takes at most one per Interval.
func TestRingIsBounded(t *testing.T) {
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk, Samples: 3, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		get(t, h, "/")
		get(t, h, "/") // not due: no sample
		f.tk.Advance(time.Second)
	}
	body := get(t, h, "/").Body.String()
	_, chart, _ := strings.Cut(body, `data-name="api"`)
	chart, _, _ = strings.Cut(chart, "</svg>")
	_, pts, _ := strings.Cut(chart, `points="`)
	pts, _, _ = strings.Cut(pts, `"`)
	if n := len(strings.Fields(pts)); n != 3 {
		t.Fatalf("%d points charted, want 3: %s", n, chart)
	}
}

// TestRunSamplesUntilCancelled: Run samples once at once and returns the
// context's error when it ends, leaving no goroutine.
func TestRunSamplesUntilCancelled(t *testing.T) {
	testkit.LeakCheck(t)
	f := newFixture(t)
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Ticker: f.tk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if !strings.Contains(get(t, h, "/").Body.String(), "in flight 2") {
		t.Fatal("Run took no sample")
	}
}

// TestRunSamplesEveryInterval: in a synctest bubble, Run samples at once
// and then every Interval: after 3.5 s, four samples, charted as four
// points at the readings they were taken.
func TestRunSamplesEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := bulkhead.New(bulkhead.Config{Max: 4})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tk := testkit.FuncTicker(func() int64 { return int64(time.Since(start)) + 1 })
		h, err := statuspage.New(statuspage.Config{Instances: []statuspage.Instance{{Name: "b", Value: b}}, Ticker: tk, Samples: 10})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		time.Sleep(3500 * time.Millisecond) // the bubble's clock
		synctest.Wait()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil)) // 3.5 s: not due, no sample
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		_, pts, _ := strings.Cut(w.Body.String(), `points="`)
		pts, _, _ = strings.Cut(pts, `"`)
		var xs []string
		for _, p := range strings.Fields(pts) {
			x, _, _ := strings.Cut(p, ",")
			xs = append(xs, x)
		}
		// A 10 s window ending at 3.5 s, 300 units wide: samples at 0, 1,
		// 2 and 3 s sit at 195, 225, 255 and 285.
		if got := strings.Join(xs, " "); got != "195.0 225.0 255.0 285.0" {
			t.Fatalf("sample x coordinates %q, want 195.0 225.0 255.0 285.0", got)
		}
	})
}

// TestNewRejectsInvalidConfig: invalid fields are ConfigErrors at New.
func TestNewRejectsInvalidConfig(t *testing.T) {
	b, err := bulkhead.New(bulkhead.Config{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		c     statuspage.Config
	}{
		{"Interval", statuspage.Config{Interval: -1}},
		{"Samples", statuspage.Config{Samples: -1}},
		{"Samples", statuspage.Config{Samples: 100_001}},
		{"Refresh", statuspage.Config{Refresh: -time.Second}},
		{"Instances", statuspage.Config{Instances: []statuspage.Instance{{Name: "", Value: b}}}},
		{"Instances", statuspage.Config{Instances: []statuspage.Instance{{Name: "x"}}}},
		{"Instances", statuspage.Config{Instances: []statuspage.Instance{{Name: "x", Value: b}, {Name: "x", Value: b}}}},
		{"Instances", statuspage.Config{Instances: []statuspage.Instance{{Name: "x", Value: (*circuitbreaker.Breaker)(nil)}}}},
		{"Instances", statuspage.Config{Instances: []statuspage.Instance{{Name: "x", Value: (*pipeline.Fallback[int])(nil)}}}},
		{"Interval", statuspage.Config{Interval: 100 * time.Hour, Samples: 100_000}},
		{"Interval", statuspage.Config{Interval: time.Duration(math.MaxInt64/300 + 1)}}, // Samples 0: the default 300
	} {
		_, err := statuspage.New(tc.c)
		testkit.RequireConfigError(t, err, "statuspage", tc.field)
		if !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Errorf("%v does not match ErrInvalidConfig", err)
		}
	}
}

// TestOnlyGetAndHeadReadThePage: other methods on the page or the JSON are 405.
func TestOnlyGetAndHeadReadThePage(t *testing.T) {
	h, err := statuspage.New(statuspage.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/status.json"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, p, nil))
		if w.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d", p, w.Code)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodHead, "/status.json", nil))
	if w.Code != http.StatusOK {
		t.Errorf("HEAD: %d", w.Code)
	}
	_, _ = io.Copy(io.Discard, w.Body)
}

// TestConcurrentRequestsSamplesAndSourceChanges: pages, documents, actions
// and samples from several goroutines while the Source's instances come
// and go, under the race detector: every answer is complete and the rings
// stay bounded.
func TestConcurrentRequestsSamplesAndSourceChanges(t *testing.T) {
	f := newFixture(t)
	var flip atomic.Bool
	src := sourceFunc(func(yield func(string, any) bool) {
		if flip.Load() {
			yield("extra", f.injector)
		}
	})
	h, err := statuspage.New(statuspage.Config{Instances: f.list, Source: src, Ticker: f.tk, Samples: 8, Authorize: func(*http.Request) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 24 {
				switch (g + i) % 4 {
				case 0:
					if w := get(t, h, "/status.json"); w.Code != http.StatusOK || !json.Valid(w.Body.Bytes()) {
						t.Errorf("status.json: %d", w.Code)
					}
				case 1:
					if w := get(t, h, "/"); w.Code != http.StatusOK || !strings.HasSuffix(w.Body.String(), "</html>\n") {
						t.Errorf("page: %d", w.Code)
					}
				case 2:
					h.Sample()
					f.tk.Advance(time.Second)
				case 3:
					flip.Store(!flip.Load())
					act := []string{"force-open", "reset"}[i%2]
					if w := post(h, url.Values{"name": {"db"}, "action": {act}}, nil); w.Code != http.StatusOK {
						t.Errorf("%s: %d", act, w.Code)
					}
				}
			}
		})
	}
	wg.Wait()
	body := get(t, h, "/").Body.String()
	_, chart, _ := strings.Cut(body, `data-name="api"`)
	chart, _, _ = strings.Cut(chart, "</svg>")
	_, pts, _ := strings.Cut(chart, `points="`)
	pts, _, _ = strings.Cut(pts, `"`)
	if n := len(strings.Fields(pts)); n < 1 || n > 8 {
		t.Fatalf("%d points charted from a ring of 8", n)
	}
}

// TestNewAcceptsTheLongestWindowThatFits: Samples × Interval up to the
// largest time.Duration is accepted, with Samples as given (not its
// default), and the page says so.
func TestNewAcceptsTheLongestWindowThatFits(t *testing.T) {
	b, err := bulkhead.New(bulkhead.Config{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	iv := time.Duration(math.MaxInt64 / 10)
	h, err := statuspage.New(statuspage.Config{Interval: iv, Samples: 10, Instances: []statuspage.Instance{{Name: "b", Value: b}}})
	if err != nil {
		t.Fatalf("New(10 × %v): %v", iv, err)
	}
	body := get(t, h, "/").Body.String()
	if want := "the last " + (10 * iv).String() + " charted"; !strings.Contains(body, want) {
		i := strings.Index(body, "the last")
		t.Fatalf("page %q, want %q", body[i:i+40], want)
	}
}

// TestTypedNilsInASourceAreLeftOut: a Source's nil pointer of a known
// type (whose Stats would panic every sample, Run's goroutine with it) is
// left out of the samples, the page and the JSON.
func TestTypedNilsInASourceAreLeftOut(t *testing.T) {
	b, err := bulkhead.New(bulkhead.Config{Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	src := sourceFunc(func(yield func(string, any) bool) {
		_ = yield("a", (*circuitbreaker.Breaker)(nil)) && yield("b", b) && yield("c", (*pipeline.Pipeline)(nil))
	})
	h, err := statuspage.New(statuspage.Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	h.Sample()
	if w := get(t, h, "/"); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `data-name="b"`) {
		t.Fatalf("page: %d", w.Code)
	}
	var doc statuspage.Document
	if err := json.Unmarshal(get(t, h, "/status.json").Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Instances) != 1 || doc.Instances[0].Name != "b" {
		t.Fatalf("instances %+v, want b only", doc.Instances)
	}
}

// swapSource holds one instance under the name "b", which the test
// replaces.
type swapSource struct{ v any }

func (s *swapSource) Range(f func(string, any) bool) { f("b", s.v) }

// breakerWithSuccesses is a breaker counting successes, with n of them.
func breakerWithSuccesses(t *testing.T, tk rampart.Ticker, n int) *circuitbreaker.Breaker {
	t.Helper()
	b, err := circuitbreaker.New(circuitbreaker.Config{CountStats: true, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		p, err := b.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		b.Release(p, rampart.Success)
	}
	return b
}

// summaryOf is the summary line the page shows for instance name.
func summaryOf(t *testing.T, h http.Handler, name string) string {
	t.Helper()
	_, sec, _ := strings.Cut(get(t, h, "/").Body.String(), `<h2>`+name+` `)
	_, sum, _ := strings.Cut(sec, `<div class="summary">`)
	sum, _, _ = strings.Cut(sum, `</div>`)
	return sum
}

// TestAReplacedInstanceGetsARingOfItsOwn: an instance replaced under its
// name by another of the same kind starts a history of its own: no rate
// is drawn across the two instances' counts (it was negative), and the
// page shows the new instance's samples only, even before its first.
func TestAReplacedInstanceGetsARingOfItsOwn(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	src := &swapSource{v: breakerWithSuccesses(t, tk, 1000)}
	h, err := statuspage.New(statuspage.Config{Source: src, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	h.Sample()
	tk.Advance(time.Second)
	h.Sample()
	if got := summaryOf(t, h, "b"); !strings.Contains(got, "successes/s 0") {
		t.Fatalf("summary %q before the replacement, want successes/s 0", got)
	}
	nb := breakerWithSuccesses(t, tk, 0)
	src.v = nb
	if got := summaryOf(t, h, "b"); got != "no sample yet" { // no sample due: the old ring is not the new instance's
		t.Fatalf("summary %q of the new instance before its first sample", got)
	}
	tk.Advance(time.Second)
	h.Sample()
	if got := summaryOf(t, h, "b"); strings.Contains(got, "successes/s") {
		t.Fatalf("summary %q: a rate across two instances", got)
	}
	for range 5 {
		p, err := nb.Acquire()
		if err != nil {
			t.Fatal(err)
		}
		nb.Release(p, rampart.Success)
	}
	tk.Advance(time.Second)
	h.Sample()
	if got := summaryOf(t, h, "b"); !strings.Contains(got, "successes/s 5") {
		t.Fatalf("summary %q, want the new instance's successes/s 5", got)
	}
}

// uncomparableFallback is a value type of the user's that the page shows
// as a fallback (it has Stats() pipeline.FallbackStats), and that == cannot
// compare (a slice field).
type uncomparableFallback struct{ answered []uint64 }

func (u uncomparableFallback) Stats() pipeline.FallbackStats {
	return pipeline.FallbackStats{Answered: u.answered[0]}
}

// TestUncomparableInstancesAreSampled: an instance that == cannot compare
// is sampled without a panic and keeps its ring (a replacement cannot be
// told apart from it: a count that goes down draws no rate).
func TestUncomparableInstancesAreSampled(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	counts := []uint64{10}
	src := &swapSource{v: uncomparableFallback{counts}}
	h, err := statuspage.New(statuspage.Config{Source: src, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	h.Sample()
	counts[0] = 13
	tk.Advance(time.Second)
	h.Sample()
	if got := summaryOf(t, h, "b"); !strings.Contains(got, "answered/s 3") {
		t.Fatalf("summary %q, want answered/s 3", got)
	}
	src.v = uncomparableFallback{[]uint64{1}}
	tk.Advance(time.Second)
	h.Sample()
	if got := summaryOf(t, h, "b"); strings.Contains(got, "answered/s") {
		t.Fatalf("summary %q: a rate from a count that went down", got)
	}
}
