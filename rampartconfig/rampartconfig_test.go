package rampartconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// full sets every field of every kind.
const full = `
defaults:
  breaker: {failureRateThreshold: 40, openDuration: 2s, groups: [edge]}
  retry: {maxAttempts: 4}
breakers:
  b1:
    compact: true
    mode: time
    windowSize: 50
    timeWindow: 20s
    buckets: 20
    consecutiveFailures: 7
    slowCallDuration: 300ms
    slowCallRateThreshold: 80
    minimumCalls: 15
    maxOpenDuration: 30s
    openBackoffFactor: 1.5
    openJitter: 0.1
    halfOpenProbes: 6
    halfOpenMaxConcurrent: 3
    halfOpenSuccesses: 4
    maxHalfOpenDuration: 10s
rateLimiters:
  r1: {rate: 100, burst: 10, countStats: true, compact: true}
  r2: {limit: 60, period: 1m}
  r3: {capacity: 5, refillRate: 2.5}
shardedRateLimiters:
  s1: {rate: 1000, burst: 100, countStats: true, shards: 4}
  s2: {limit: 600, period: 1m, shards: 2}
  s3: {capacity: 50, refillRate: 2.5, shards: 2}
bulkheads:
  k1: {max: 8, maxWait: 50ms, compact: true, groups: [a, b]}
adaptiveLimiters:
  a1:
    algorithm: {aimd: {backoff: 0.8, increase: 2, timeout: 1s, dropThreshold: 0.1}}
    initialLimit: 30
    minLimit: 2
    maxLimit: 500
    window: 2s
    minWindowSamples: 5
    partitions: [{name: hi, share: 0.6}, {name: lo, share: 0.4}]
    queue: {maxLength: 10, target: 10ms, interval: 200ms, fifo: true}
    maxSampleStride: 32
    compact: true
  a2:
    algorithm: {vegas: {alpha: 3, beta: 6, smoothing: 0.5, probeInterval: 100, probeLimit: 3, dropThreshold: 0.2}}
  a3:
    algorithm: {gradient2: {tolerance: 2, queueSize: 4, smoothing: 0.2, longWindow: 100, probeInterval: 50, probeLimit: 2}}
retries:
  t1: {maxDuration: 3s, backoff: linear, baseDelay: 10ms, maxDelay: 1s, multiplier: 3, increment: 20ms}
timeouts:
  o1: {duration: 200ms, mode: soft, maxAbandoned: 5, workers: 2}
  o2: {duration: 1s, tick: 5ms}
hedgers:
  h1: {percentile: 0.95, minDelay: 5ms, maxDelay: 100ms, warmUp: 50, refresh: 2s, maxHedges: 2, asyncFirst: true, tick: 2ms}
  h2: {delay: 20ms}
shedders:
  x1:
    sampleInterval: 50ms
    window: 2s
    coolOff: 3s
    hysteresis: 0.3
    schedLatencyThreshold: 20ms
    cpuThreshold: 0.8
    runnableThreshold: 8
    inFlightThreshold: 100
    latencyThreshold: 50ms
    priorities: 3
    priorityReserve: 0.2
    maxSampleStride: 32
    compact: true
pipelines:
  db:
    groups: [storage]
    idempotent: true
    countStats: true
    breaker: {failureRateThreshold: 25}
    retry: {ref: t1}
    rateLimiter: {ref: r1}
    bulkhead: {max: 4}
    timeout: {duration: 150ms}
    shed: {ref: x1}
`

// mustLoad loads a YAML document or fails the test.
func mustLoad(t *testing.T, s string) *Document {
	t.Helper()
	d, err := Load([]byte(s), YAML)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return d
}

// mustBuild builds a document or fails the test, closing it at the end.
func mustBuild(t *testing.T, d *Document, o Options) *Live {
	t.Helper()
	l, err := Build(d, o)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// get returns the registry's instance of name as a T.
func get[T any](t *testing.T, l *Live, name string) T {
	t.Helper()
	v, ok := registry.Lookup[T](l.Registry(), name)
	if !ok {
		t.Fatalf("no %T named %q", v, name)
	}
	return v
}

func TestLoadEveryFieldOfEveryKindRoundTrips(t *testing.T) {
	d := mustLoad(t, full)
	plans, err := d.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := map[string]any{}
	for _, p := range plans {
		cfgs[p.name] = p.cfg
	}
	b := *cfgs["b1"].(*circuitbreaker.Config)
	wantB := circuitbreaker.Config{Name: "b1", Compact: true, Mode: circuitbreaker.TimeWindow, WindowSize: 50, TimeWindow: 20 * time.Second,
		Buckets: 20, ConsecutiveFailures: 7, FailureRateThreshold: 40, SlowCallDuration: 300 * time.Millisecond, SlowCallRateThreshold: 80,
		MinimumCalls: 15, OpenDuration: 2 * time.Second, MaxOpenDuration: 30 * time.Second, OpenBackoffFactor: 1.5, OpenJitter: 0.1,
		HalfOpenProbes: 6, HalfOpenMaxConcurrent: 3, HalfOpenSuccesses: 4, MaxHalfOpenDuration: 10 * time.Second}
	if !reflect.DeepEqual(b, wantB) {
		t.Errorf("breaker b1:\n got %+v\nwant %+v", b, wantB)
	}
	checks := map[string]any{
		"r1":          ratelimit.Config{Name: "r1", Rate: 100, Burst: 10, CountStats: true, Compact: true},
		"r2":          ratelimit.Config{Name: "r2", Limit: 60, Period: time.Minute},
		"r3":          ratelimit.Config{Name: "r3", Capacity: 5, RefillRate: 2.5},
		"s1":          ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "s1", Rate: 1000, Burst: 100, CountStats: true}, Shards: 4},
		"s2":          ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "s2", Limit: 600, Period: time.Minute}, Shards: 2},
		"s3":          ratelimit.ShardedConfig{Config: ratelimit.Config{Name: "s3", Capacity: 50, RefillRate: 2.5}, Shards: 2},
		"k1":          bulkhead.Config{Name: "k1", Max: 8, MaxWait: 50 * time.Millisecond, Compact: true},
		"t1":          retry.Config{Name: "t1", MaxAttempts: 4, MaxDuration: 3 * time.Second, Backoff: retry.Linear, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second, Multiplier: 3, Increment: 20 * time.Millisecond},
		"o1":          timeout.Config{Name: "o1", Duration: 200 * time.Millisecond, Mode: timeout.ModeSoft, MaxAbandoned: 5, Workers: 2},
		"o2":          timeout.Config{Name: "o2", Duration: time.Second, Tick: 5 * time.Millisecond},
		"h1":          hedge.Config{Name: "h1", Percentile: 0.95, MinDelay: 5 * time.Millisecond, MaxDelay: 100 * time.Millisecond, WarmUp: 50, Refresh: 2 * time.Second, MaxHedges: 2, AsyncFirst: true, Tick: 2 * time.Millisecond},
		"h2":          hedge.Config{Name: "h2", Delay: 20 * time.Millisecond},
		"db.breaker":  circuitbreaker.Config{Name: "db.breaker", FailureRateThreshold: 25, OpenDuration: 2 * time.Second},
		"db.bulkhead": bulkhead.Config{Name: "db.bulkhead", Max: 4},
		"db.timeout":  timeout.Config{Name: "db.timeout", Duration: 150 * time.Millisecond},
		"x1": shed.Config{Name: "x1", SampleInterval: 50 * time.Millisecond, Window: 2 * time.Second, CoolOff: 3 * time.Second, Hysteresis: 0.3,
			SchedLatencyThreshold: 20 * time.Millisecond, CPUThreshold: 0.8, RunnableThreshold: 8, InFlightThreshold: 100,
			LatencyThreshold: 50 * time.Millisecond, Priorities: 3, PriorityReserve: 0.2, MaxSampleStride: 32, Compact: true},
		"a1": adaptive.Config{Name: "a1", Algorithm: adaptive.AIMD{Backoff: 0.8, Increase: 2, Timeout: time.Second, DropThreshold: 0.1},
			InitialLimit: 30, MinLimit: 2, MaxLimit: 500, Window: 2 * time.Second, MinWindowSamples: 5,
			Partitions: []adaptive.Partition{{Name: "hi", Share: 0.6}, {Name: "lo", Share: 0.4}},
			Queue:      adaptive.QueueConfig{MaxLength: 10, Target: 10 * time.Millisecond, Interval: 200 * time.Millisecond, FIFO: true}, MaxSampleStride: 32, Compact: true},
		"a2": adaptive.Config{Name: "a2", Algorithm: adaptive.Vegas{Alpha: 3, Beta: 6, Smoothing: 0.5, ProbeInterval: 100, ProbeLimit: 3, DropThreshold: 0.2}},
		"a3": adaptive.Config{Name: "a3", Algorithm: adaptive.Gradient2{Tolerance: 2, QueueSize: 4, Smoothing: 0.2, LongWindow: 100, ProbeInterval: 50, ProbeLimit: 2}},
	}
	for name, want := range checks {
		got := reflect.ValueOf(cfgs[name]).Elem().Interface()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
	// Every spec field of every kind is set by the document above.
	specs := map[string]any{}
	for _, p := range plans {
		if p.kind != nil {
			specs[p.kind.key+"/"+p.name] = p.spec
		}
	}
	for _, k := range kinds {
		seen := map[string]bool{}
		for key, s := range specs {
			if strings.HasPrefix(key, k.key+"/") {
				markSet(reflect.ValueOf(s).Elem(), "", seen)
			}
		}
		for _, f := range specFields(k.spec, "") {
			if !seen[f] {
				t.Errorf("%s.%s: no document of the test sets it", k.key, f)
			}
		}
	}
}

// markSet records the set fields of a spec value.
func markSet(v reflect.Value, prefix string, seen map[string]bool) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Anonymous {
			continue
		}
		fv := v.Field(i)
		if fv.IsNil() {
			continue
		}
		name := prefix + jsonName(f)
		seen[name] = true
		if fv.Kind() == reflect.Pointer && fv.Elem().Kind() == reflect.Struct {
			markSet(fv.Elem(), name+".", seen)
		}
		if fv.Kind() == reflect.Slice && fv.Len() > 0 {
			markSet(fv.Index(0), name+".", seen)
		}
	}
}

// specFields lists a spec type's field paths (nested ones included).
func specFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			continue
		}
		name := prefix + jsonName(f)
		out = append(out, name)
		ft := f.Type
		if ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[Duration]() {
			out = append(out, specFields(ft, name+".")...)
		}
	}
	return out
}

func TestLoadDefaultsAreInheritedAndOverridden(t *testing.T) {
	d := mustLoad(t, `
defaults:
  breaker: {failureRateThreshold: 40, openDuration: 2s, groups: [edge]}
breakers:
  inherits: {}
  overrides: {failureRateThreshold: 10, groups: [core]}
`)
	l := mustBuild(t, d, Options{})
	in := get[*circuitbreaker.Breaker](t, l, "inherits").Config()
	if in.FailureRateThreshold != 40 || in.OpenDuration != 2*time.Second {
		t.Errorf("inherits: threshold %v, open %v; want the defaults' 40, 2s", in.FailureRateThreshold, in.OpenDuration)
	}
	ov := get[*circuitbreaker.Breaker](t, l, "overrides").Config()
	if ov.FailureRateThreshold != 10 || ov.OpenDuration != 2*time.Second {
		t.Errorf("overrides: threshold %v, open %v; want 10 and the default 2s", ov.FailureRateThreshold, ov.OpenDuration)
	}
	if g := l.Registry().Groups("inherits"); !reflect.DeepEqual(g, []string{"edge"}) {
		t.Errorf("inherits groups %v, want [edge]", g)
	}
	if g := l.Registry().Groups("overrides"); !reflect.DeepEqual(g, []string{"core"}) {
		t.Errorf("overrides groups %v, want [core]", g)
	}
}

func TestLoadReportsEveryErrorWithItsPath(t *testing.T) {
	d := `
defaults:
  bulkhead: {max: -1}
breakers:
  a: {failureRateThreshold: 150, halfOpenProbes: 1000, openJitter: 2}
  b: {mode: sliding}
bulkheads:
  k: {}
rateLimiters:
  r: {rate: -5}
adaptiveLimiters:
  q: {queue: {maxLength: -1}, algorithm: {vegas: {}, aimd: {}}}
pipelines:
  db:
    breaker: {failureRateThreshold: 150}
    retry: {ref: nowhere}
`
	_, err := Load([]byte(d), YAML)
	if err == nil {
		t.Fatal("Load accepted an invalid document")
	}
	if !errors.Is(err, rampart.ErrInvalidConfig) {
		t.Errorf("%v does not match rampart.ErrInvalidConfig", err)
	}
	want := []string{
		"defaults.bulkhead.max: ",
		"breakers.a.failureRateThreshold: must be a percentage in (0, 100]",
		"breakers.a.openJitter: must be in [0, 1), got 2",
		"breakers.a.halfOpenProbes: must be in [1, 255]",
		`breakers.b.mode: must be one of "consecutive", "count", "time", got "sliding"`,
		"rateLimiters.r.rate: ",
		"adaptiveLimiters.q.algorithm: must set exactly one of vegas, aimd, gradient2, got 2",
		"adaptiveLimiters.q.queue.maxLength: must not be negative, got -1",
		"pipelines.db.breaker.failureRateThreshold: must be a percentage in (0, 100] (0 = default 50), got 150",
		`pipelines.db.retry.ref: no retries named "nowhere"`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the error does not report %q:\n%s", w, msg)
		}
	}
	if n := strings.Count(msg, "defaults.bulkhead.max"); n != 1 {
		t.Errorf("the invalid default is reported %d times, want once (not again for bulkheads.k):\n%s", n, msg)
	}
	if strings.Contains(msg, "bulkheads.k") {
		t.Errorf("bulkheads.k's only error is its inherited default:\n%s", msg)
	}
}

func TestLoadRefusesUnknownFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Format
		doc  string
	}{
		{"yaml top", YAML, "breakerz: {}"},
		{"yaml field", YAML, "breakers: {a: {failureRate: 3}}"},
		{"yaml slot", YAML, "pipelines: {p: {circuit: {}}}"},
		{"json top", JSON, `{"breakerz": {}}`},
		{"json field", JSON, `{"breakers": {"a": {"failureRate": 3}}}`},
		{"json nested", JSON, `{"adaptiveLimiters": {"a": {"queue": {"length": 3}}}}`},
		{"duration number", YAML, "timeouts: {t: {duration: 5}}"},
		{"duration json number", JSON, `{"timeouts": {"t": {"duration": 5}}}`},
		{"two yaml documents", YAML, "breakers: {}\n---\nbreakers: {}\n"},
		{"json trailing", JSON, `{} {}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Load([]byte(tc.doc), tc.f); err == nil {
				t.Errorf("Load accepted %q", tc.doc)
			}
		})
	}
}

func TestLoadReportsEveryUnknownFieldWithItsPath(t *testing.T) {
	for _, tc := range []struct {
		f   Format
		doc string
	}{
		{YAML, "breakerz: {}\nbreakers: {a: {failureRate: 3}}\npipelines: {p: {circuit: {}, breaker: {ref: a, extra: 1}}}\nadaptiveLimiters: {q: {partitions: [{weight: 1}]}}"},
		{JSON, `{"breakerz": {}, "breakers": {"a": {"failureRate": 3}}, "pipelines": {"p": {"circuit": {}, "breaker": {"ref": "a", "extra": 1}}}, "adaptiveLimiters": {"q": {"partitions": [{"weight": 1}]}}}`},
	} {
		_, err := Load([]byte(tc.doc), tc.f)
		if err == nil {
			t.Fatalf("%v: Load accepted unknown fields", tc.f)
		}
		for _, w := range []string{"breakerz: unknown field", "breakers.a.failureRate: unknown field", "pipelines.p.circuit: unknown field",
			"pipelines.p.breaker.extra: unknown field", "adaptiveLimiters.q.partitions[0].weight: unknown field"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: the error does not report %q:\n%v", tc.f, w, err)
			}
		}
	}
}

func TestLoadYAMLAndJSONGiveTheSameDocument(t *testing.T) {
	y := mustLoad(t, full)
	var tree any
	if err := yaml.Unmarshal([]byte(full), &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	j, err := Load(js, JSON)
	if err != nil {
		t.Fatalf("Load JSON: %v\n%s", err, js)
	}
	py, _ := y.plan(nil)
	pj, _ := j.plan(nil)
	if len(py) != len(pj) || len(py) == 0 {
		t.Fatalf("%d instances from YAML, %d from JSON", len(py), len(pj))
	}
	for i := range py {
		if py[i].name != pj[i].name || !reflect.DeepEqual(py[i].spec, pj[i].spec) || !reflect.DeepEqual(py[i].cfg, pj[i].cfg) {
			t.Errorf("%s: YAML %+v, JSON %+v", py[i].name, py[i].cfg, pj[i].cfg)
		}
	}
}

func TestBuildRegistersInstancesPipelinesAndInlinePolicies(t *testing.T) {
	l := mustBuild(t, mustLoad(t, full), Options{})
	reg := l.Registry()
	p := get[*pipeline.Pipeline](t, l, "db")
	c := p.Config()
	if c.Breaker != get[*circuitbreaker.Breaker](t, l, "db.breaker") || c.Retry != get[*retry.Policy](t, l, "t1") ||
		c.RateLimit != get[*ratelimit.Limiter](t, l, "r1") || c.Bulkhead != get[*bulkhead.Bulkhead](t, l, "db.bulkhead") ||
		c.Timeout != get[*timeout.Timeout](t, l, "db.timeout") {
		t.Errorf("pipeline db's policies are not the registered instances: %+v", c)
	}
	if !c.Idempotent || !c.CountStats {
		t.Errorf("pipeline db: idempotent %v, countStats %v", c.Idempotent, c.CountStats)
	}
	if g := reg.Groups("db.breaker"); !reflect.DeepEqual(g, []string{"storage"}) {
		t.Errorf("an inline policy's groups %v, want the pipeline's [storage]", g)
	}
	if n := reg.ForceOpenBreakers("edge"); n != 1 { // b1 (db.breaker is in storage)
		t.Errorf("ForceOpenBreakers(edge) moved %d, want 1", n)
	}
}

func TestBuildRefusesANameTakenInTheRegistry(t *testing.T) {
	reg := registry.New()
	if err := reg.Add("a", 42); err != nil {
		t.Fatal(err)
	}
	_, err := Build(mustLoad(t, "breakers: {a: {}}\nbulkheads: {k: {max: 1}}"), Options{Registry: reg})
	if err == nil || !strings.Contains(err.Error(), "breakers.a") {
		t.Fatalf("Build over a taken name: %v", err)
	}
	if reg.Len() != 1 {
		t.Errorf("a failed Build registered %d instances", reg.Len()-1)
	}
}

// open trips breaker b (count window) with failures.
func open(t *testing.T, b *circuitbreaker.Breaker) {
	t.Helper()
	for range 20 {
		if p, err := b.Acquire(); err == nil {
			b.Release(p, rampart.Failure)
		}
	}
	if b.State() != circuitbreaker.Open {
		t.Fatalf("breaker %v, want open", b.State())
	}
}

func TestApplyChangesInPlaceKeepingState(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustBuild(t, mustLoad(t, `
breakers: {b: {windowSize: 10, minimumCalls: 10}}
bulkheads: {k: {max: 2}}
rateLimiters: {r: {rate: 10, burst: 5}}
retries: {t: {maxAttempts: 2}}
timeouts: {o: {duration: 1s}}
pipelines: {p: {breaker: {ref: b}, retry: {ref: t}}}
`), Options{Ticker: tk})
	b := get[*circuitbreaker.Breaker](t, l, "b")
	k := get[*bulkhead.Bulkhead](t, l, "k")
	r := get[*ratelimit.Limiter](t, l, "r")
	p := get[*pipeline.Pipeline](t, l, "p")
	open(t, b)
	if err := l.Apply(mustLoad(t, `
breakers: {b: {windowSize: 10, minimumCalls: 10, failureRateThreshold: 90, openDuration: 1m}}
bulkheads: {k: {max: 7}}
rateLimiters: {r: {limit: 20, period: 1s}}
retries: {t: {maxAttempts: 5}}
timeouts: {o: {duration: 3s}}
pipelines: {p: {breaker: {ref: b}, retry: {ref: t}}}
`)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if get[*circuitbreaker.Breaker](t, l, "b") != b || get[*bulkhead.Bulkhead](t, l, "k") != k ||
		get[*ratelimit.Limiter](t, l, "r") != r || get[*pipeline.Pipeline](t, l, "p") != p {
		t.Fatal("Apply replaced an instance it could update")
	}
	if b.State() != circuitbreaker.Open {
		t.Errorf("the breaker is %v after a threshold change, want still open", b.State())
	}
	if got := b.Config().FailureRateThreshold; got != 90 {
		t.Errorf("threshold %v, want 90", got)
	}
	if k.Max() != 7 || r.Stats().Rate != 20 || get[*retry.Policy](t, l, "t").MaxAttempts() != 5 ||
		get[*timeout.Timeout](t, l, "o").Duration() != 3*time.Second {
		t.Errorf("max %d, rate %v, attempts %d, timeout %v; want 7, 20, 5, 3s", k.Max(), r.Stats().Rate,
			get[*retry.Policy](t, l, "t").MaxAttempts(), get[*timeout.Timeout](t, l, "o").Duration())
	}
	if l.Version() != 2 {
		t.Errorf("version %d, want 2", l.Version())
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	l := mustBuild(t, mustLoad(t, `
breakers: {a: {}, z: {windowSize: 10, minimumCalls: 5}}
bulkheads: {k: {max: 2}}
hedgers: {h: {delay: 10ms}}
`), Options{})
	before := l.Document()
	for _, tc := range []struct{ name, doc, want string }{
		{"fixed field last", `
breakers: {a: {failureRateThreshold: 10}, z: {windowSize: 20, minimumCalls: 5}}
bulkheads: {k: {max: 9}}
hedgers: {h: {delay: 10ms}}
`, "breakers.z.windowSize: is fixed at construction"},
		{"invalid value last", `
breakers: {a: {failureRateThreshold: 10}, z: {windowSize: 10, minimumCalls: 50}}
bulkheads: {k: {max: 9}}
hedgers: {h: {delay: 10ms}}
`, "breakers.z.minimumCalls"},
		{"mode change of a bulkhead", `
breakers: {a: {failureRateThreshold: 10}, z: {windowSize: 10, minimumCalls: 5}}
bulkheads: {k: {max: 9, maxWait: 1s}}
hedgers: {h: {delay: 10ms}}
`, "bulkheads.k.maxWait: is fixed at construction"},
		{"hedger fixed", `
breakers: {a: {failureRateThreshold: 10}, z: {windowSize: 10, minimumCalls: 5}}
bulkheads: {k: {max: 9}}
hedgers: {h: {delay: 10ms, asyncFirst: true}}
`, "hedgers.h.asyncFirst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := l.Apply(mustLoadOrInvalid(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply: %v, want an error with %q", err, tc.want)
			}
			if got := get[*circuitbreaker.Breaker](t, l, "a").Config().FailureRateThreshold; got != 50 {
				t.Errorf("breaker a's threshold is %v after a refused Apply, want 50", got)
			}
			if got := get[*bulkhead.Bulkhead](t, l, "k").Max(); got != 2 {
				t.Errorf("bulkhead k's max is %d after a refused Apply, want 2", got)
			}
			if !reflect.DeepEqual(l.Document(), before) || l.Version() != 1 {
				t.Errorf("a refused Apply changed the document in force")
			}
		})
	}
}

// mustLoadOrInvalid loads a document that Load accepts but Apply may not;
// one Load refuses fails the test.
func mustLoadOrInvalid(t *testing.T, s string) *Document {
	t.Helper()
	d, err := Load([]byte(s), YAML)
	if err != nil {
		if strings.Contains(s, "minimumCalls: 50") { // invalid for New too: hand it over unvalidated
			d = &Document{}
			if err := decode([]byte(s), YAML, d); err != nil {
				t.Fatal(err)
			}
			return d
		}
		t.Fatalf("Load: %v", err)
	}
	return d
}

func TestApplyReplacesAFixedFieldWhenMarked(t *testing.T) {
	l := mustBuild(t, mustLoad(t, `
breakers: {b: {windowSize: 10, minimumCalls: 5}}
pipelines: {p: {breaker: {ref: b}}}
`), Options{})
	b := get[*circuitbreaker.Breaker](t, l, "b")
	p := get[*pipeline.Pipeline](t, l, "p")
	if err := l.Apply(mustLoad(t, `
breakers: {b: {windowSize: 20, minimumCalls: 5, replace: true}}
pipelines: {p: {breaker: {ref: b}}}
`)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	nb := get[*circuitbreaker.Breaker](t, l, "b")
	np := get[*pipeline.Pipeline](t, l, "p")
	if nb == b || nb.Config().WindowSize != 20 {
		t.Errorf("the breaker was not replaced: same %v, window %d", nb == b, nb.Config().WindowSize)
	}
	if np == p || np.Config().Breaker != nb {
		t.Errorf("the pipeline does not use the new breaker")
	}
	if err := l.Apply(mustLoad(t, `
breakers: {b: {windowSize: 20, minimumCalls: 5, replace: true}}
pipelines: {p: {breaker: {ref: b}, idempotent: true}}
`)); err == nil || !strings.Contains(err.Error(), "pipelines.p: is fixed at construction") {
		t.Errorf("a pipeline change without replace: %v", err)
	}
}

func TestApplyRemovesInstancesAbsentFromTheDocument(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "breakers: {a: {}, b: {}}\nhedgers: {h: {delay: 1ms}}\npipelines: {p: {timeout: {duration: 1s}}}"), Options{})
	if err := l.Apply(mustLoad(t, "breakers: {a: {}}")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "h", "p", "p.timeout"} {
		if _, ok := l.Registry().Get(n); ok {
			t.Errorf("%s is still registered", n)
		}
	}
	if _, ok := l.Registry().Get("a"); !ok {
		t.Error("a was removed")
	}
}

func TestApplyUndoesWhatItAppliedWhenAStepFails(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 2}}"), Options{})
	// A name taken after the validation: Add fails in the commit step.
	changes, built, err := l.diff(mustPlan(t, l, "bulkheads: {k: {max: 9}}\nbreakers: {new: {}}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.reg.Add("new", 1); err != nil {
		t.Fatal(err)
	}
	if err := l.commit(mustPlan(t, l, "bulkheads: {k: {max: 9}}\nbreakers: {new: {}}"), changes); err == nil {
		t.Fatal("commit over a taken name succeeded")
	}
	for _, b := range built {
		closeInst(b)
	}
	if got := get[*bulkhead.Bulkhead](t, l, "k").Max(); got != 2 {
		t.Errorf("the bulkhead's max is %d after an undone apply, want 2", got)
	}
	if v, _ := l.reg.Get("new"); v != 1 {
		t.Errorf("the taken name holds %v", v)
	}
}

// mustPlan plans a document with l's options.
func mustPlan(t *testing.T, l *Live, s string) []*planned {
	t.Helper()
	p, err := mustLoad(t, s).plan(&l.opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLowerCamelIsEveryTag(t *testing.T) {
	for _, ty := range []reflect.Type{reflect.TypeFor[Document](), reflect.TypeFor[Defaults](), reflect.TypeFor[AlgorithmSpec](),
		reflect.TypeFor[VegasSpec](), reflect.TypeFor[AIMDSpec](), reflect.TypeFor[Gradient2Spec](), reflect.TypeFor[QueueSpec](),
		reflect.TypeFor[PartitionSpec](), reflect.TypeFor[PipelineSpec]()} {
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() || f.Anonymous {
				continue
			}
			if y, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); y != jsonName(f) {
				t.Errorf("%s.%s: yaml %q, json %q", ty.Name(), f.Name, y, jsonName(f))
			}
		}
	}
	for _, k := range kinds {
		for i := range k.spec.NumField() {
			f := k.spec.Field(i)
			if f.Anonymous {
				continue
			}
			if jsonName(f) != lowerCamel(f.Name) {
				t.Errorf("%s.%s is %q, want %q", k.key, f.Name, jsonName(f), lowerCamel(f.Name))
			}
			if _, ok := k.config.FieldByName(f.Name); !ok {
				t.Errorf("%s.%s sets no field of %v", k.key, f.Name, k.config)
			}
		}
	}
}

// onBulkheadRejected is a listener kept in a variable, so that every
// reload hands the bulkhead the func value it was built with.
var onBulkheadRejected = func(int64, time.Duration) {}

func TestOptionsConfigureSetsCodeFieldsOnEveryLoadAndReload(t *testing.T) {
	var calls []string
	var trips int
	o := Options{Configure: func(name string, cfg any) {
		calls = append(calls, name)
		switch c := cfg.(type) {
		case *circuitbreaker.Config:
			c.OnStateChange = func(_, to circuitbreaker.State) {
				if to == circuitbreaker.Open {
					trips++
				}
			}
		case *bulkhead.Config:
			c.OnRejected = onBulkheadRejected
		}
	}}
	l := mustBuild(t, mustLoad(t, "breakers: {b: {windowSize: 10, minimumCalls: 10}}\nbulkheads: {k: {max: 1}}"), o)
	open(t, get[*circuitbreaker.Breaker](t, l, "b"))
	if trips != 1 {
		t.Errorf("OnStateChange saw %d trips, want 1", trips)
	}
	k := get[*bulkhead.Bulkhead](t, l, "k")
	if err := l.Apply(mustLoad(t, "breakers: {b: {windowSize: 10, minimumCalls: 10}}\nbulkheads: {k: {max: 3, groups: [g]}}")); err != nil {
		t.Fatalf("a reload with the same listener: %v", err)
	}
	if get[*bulkhead.Bulkhead](t, l, "k") != k || k.Max() != 3 {
		t.Error("the bulkhead was not updated in place")
	}
	if g := l.Registry().Groups("k"); len(g) != 1 || g[0] != "g" {
		t.Errorf("groups %v after a regroup, want [g]", g)
	}
	if !strings.Contains(strings.Join(calls, ","), "k") {
		t.Errorf("Configure was not called for k: %v", calls)
	}
}

func TestLoadAcceptsDefaultsThatLeaveARequiredFieldToTheInstances(t *testing.T) {
	for _, doc := range []string{
		"defaults: {bulkhead: {maxWait: 100ms}}\nbulkheads: {a: {max: 5}}",
		"defaults: {rateLimiter: {burst: 10}}\nrateLimiters: {a: {rate: 100}}",
		"defaults: {timeout: {maxAbandoned: 10}}\ntimeouts: {a: {duration: 1s}}",
		"defaults: {hedge: {maxHedges: 2}}\nhedgers: {a: {delay: 10ms}}",
		"defaults: {shardedRateLimiter: {shards: 2}}\nshardedRateLimiters: {a: {rate: 100}}",
	} {
		if _, err := Load([]byte(doc), YAML); err != nil {
			t.Errorf("Load(%q): %v", strings.ReplaceAll(doc, "\n", "; "), err)
		}
	}
	// An instance that inherits the defaults and still lacks the field is
	// the instance's error, at its path.
	_, err := Load([]byte("defaults: {bulkhead: {maxWait: 100ms}}\nbulkheads: {a: {}}"), YAML)
	if err == nil || !strings.Contains(err.Error(), "bulkheads.a.max") {
		t.Errorf("Load of a bulkhead without max: %v, want an error at bulkheads.a.max", err)
	}
}

func TestBuildReportsAnInvalidCodeLevelFieldAsAConfigError(t *testing.T) {
	var nilTicker *rampart.CachedTicker // declared, never constructed
	var nilManual *rampart.ManualTicker
	for name, o := range map[string]Options{
		"Options.Ticker": {Ticker: nilTicker},
		"Configure": {Configure: func(_ string, cfg any) {
			if c, ok := cfg.(*retry.Config); ok {
				c.Ticker = nilManual
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Build panicked: %v", r)
				}
			}()
			_, err := Build(mustLoad(t, "breakers: {b: {}}\nretries: {r: {}}"), o)
			if err == nil || !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("Build: %v, want a ConfigError", err)
			}
		})
	}
}

func TestApplyOfADocumentChangedThroughItsPointersTakesEffect(t *testing.T) {
	th := 50.0
	doc := &Document{Breakers: map[string]*BreakerSpec{"b": {FailureRateThreshold: &th}}}
	l := mustBuild(t, doc, Options{})
	th = 20 // the operator lowers the threshold of the document applied
	if err := l.Apply(doc); err != nil {
		t.Fatal(err)
	}
	if got := get[*circuitbreaker.Breaker](t, l, "b").Config().FailureRateThreshold; got != 20 {
		t.Fatalf("threshold %v after Apply, want 20", got)
	}
}

func TestApplyOfADocumentDerivedFromTheOneInForceTakesEffect(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 2}}"), Options{})
	cur := l.Document()
	next := &Document{Bulkheads: map[string]*BulkheadSpec{}}
	for n, s := range cur.Bulkheads {
		c := *s // a shallow copy: the usual way to derive the next document
		next.Bulkheads[n] = &c
	}
	*next.Bulkheads["k"].Max = 9 // writes through the pointer shared with cur
	if err := l.Apply(next); err != nil {
		t.Fatal(err)
	}
	if got := get[*bulkhead.Bulkhead](t, l, "k").Max(); got != 9 {
		t.Errorf("max %d after Apply, want 9", got)
	}
	*next.Bulkheads["k"].Max = 3 // the applied document, written after
	if got := *l.Document().Bulkheads["k"].Max; got != 9 {
		t.Errorf("Document() says max %d after the caller wrote its copy, want 9", got)
	}
	if err := l.Apply(mustLoad(t, "bulkheads: {k: {max: 3}}")); err != nil {
		t.Fatal(err)
	}
	if got := get[*bulkhead.Bulkhead](t, l, "k").Max(); got != 3 {
		t.Errorf("max %d after applying a loaded max: 3, want 3", got)
	}
}

func TestApplyOfAGroupsOnlyChangeKeepsAScale(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 10, groups: [edge]}}"), Options{})
	k := get[*bulkhead.Bulkhead](t, l, "k")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil || k.Max() != 5 {
		t.Fatalf("Scale 0.5: %v, max %d", err, k.Max())
	}
	if err := l.Apply(mustLoad(t, "bulkheads: {k: {max: 10, groups: [edge, storage]}}")); err != nil {
		t.Fatal(err)
	}
	if k.Max() != 5 {
		t.Errorf("max %d after a groups-only reload, want the scaled 5", k.Max())
	}
	if g := l.Registry().Groups("k"); len(g) != 2 {
		t.Errorf("groups %v after the reload", g)
	}
	if n, _ := l.Registry().Restore("storage"); n != 1 || k.Max() != 10 {
		t.Errorf("Restore restored %d, max %d; want 1, 10", n, k.Max())
	}
}

func TestRestoreAfterAReloadOfAScaledInstancePutsBackTheDocumentsValue(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 10, groups: [edge]}}"), Options{})
	k := get[*bulkhead.Bulkhead](t, l, "k")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(mustLoad(t, "bulkheads: {k: {max: 20, groups: [edge]}}")); err != nil {
		t.Fatal(err)
	}
	if k.Max() != 20 {
		t.Errorf("max %d right after the reload, want the document's 20", k.Max())
	}
	if _, err := l.Registry().Restore("edge"); err != nil {
		t.Fatal(err)
	}
	if k.Max() != 20 {
		t.Errorf("max %d after Restore, want the document's 20", k.Max())
	}
}

func TestARefusedApplyTellsNoListener(t *testing.T) {
	var calls []string
	onLimit := func(o, n int) { calls = append(calls, fmt.Sprintf("%d->%d", o, n)) } // one func value, every time
	o := Options{Configure: func(_ string, cfg any) {
		if c, ok := cfg.(*adaptive.Config); ok {
			c.OnLimitChange = onLimit
		}
	}}
	l := mustBuild(t, mustLoad(t, "adaptiveLimiters: {a: {initialLimit: 20}}\nbreakers: {z: {windowSize: 10, minimumCalls: 5}}"), o)
	a := get[*adaptive.Limiter](t, l, "a")
	err := l.Apply(mustLoad(t, "adaptiveLimiters: {a: {initialLimit: 20, maxLimit: 10}}\nbreakers: {z: {windowSize: 20, minimumCalls: 5}}"))
	if err == nil {
		t.Fatal("Apply of a fixed-field change succeeded")
	}
	if a.Limit() != 20 {
		t.Fatalf("limit %d after a refused Apply", a.Limit())
	}
	if len(calls) != 0 {
		t.Errorf("OnLimitChange was told %v by a refused Apply; the limit is still %d", calls, a.Limit())
	}
}

func TestApplyKeepsOnlyTheRemovedInstancesThatNeedClosing(t *testing.T) {
	with := mustLoad(t, "breakers: {a: {}, big: {}}\nbulkheads: {k: {max: 1}}\nhedgers: {h: {delay: 10ms}}\npipelines: {p: {breaker: {ref: a}}}")
	without := mustLoad(t, "breakers: {a: {}}")
	l := mustBuild(t, without, Options{})
	defer l.Close()
	for range 5 {
		if err := l.Apply(with); err != nil {
			t.Fatal(err)
		}
		if err := l.Apply(without); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range l.retired {
		if _, ok := a.inst.(*hedge.Hedger); !ok {
			t.Errorf("a removed %T is kept until Close", a.inst)
		}
	}
	if len(l.retired) != 5 {
		t.Errorf("%d removed instances kept, want the 5 hedgers", len(l.retired))
	}
}

func TestAnInlinePolicyWithoutGroupsIsInItsPipelines(t *testing.T) {
	l := mustBuild(t, mustLoad(t, `
defaults: {breaker: {groups: [fallback]}}
breakers: {named: {}}
pipelines:
  none: {breaker: {}}
  some: {groups: [storage], breaker: {}}
  own: {groups: [storage], breaker: {groups: [edge]}}
`), Options{})
	for name, want := range map[string][]string{
		"named": {"fallback"}, "none.breaker": nil, "some.breaker": {"storage"}, "own.breaker": {"edge"},
	} {
		if got := l.Registry().Groups(name); !reflect.DeepEqual(got, want) {
			t.Errorf("%s is in groups %v, want %v", name, got, want)
		}
	}
}

func TestLoadReportsEveryAlgorithmErrorAtItsField(t *testing.T) {
	_, err := Load([]byte(`adaptiveLimiters:
  g: {algorithm: {gradient2: {tolerance: 0.5, smoothing: 2, longWindow: -1, queueSize: 4}}}
  v: {algorithm: {vegas: {alpha: 3, beta: 3}}}
  a: {maxLimit: -1, algorithm: {aimd: {backoff: 1.5}}}
`), YAML)
	if err == nil || !errors.Is(err, rampart.ErrInvalidConfig) {
		t.Fatalf("Load: %v, want a ConfigError", err)
	}
	msg := err.Error()
	for _, w := range []string{
		"adaptiveLimiters.g.algorithm.gradient2.tolerance: must be at least 1, got 0.5",
		"adaptiveLimiters.g.algorithm.gradient2.smoothing: must be in (0, 1], got 2",
		"adaptiveLimiters.g.algorithm.gradient2.longWindow: must not be negative, got -1",
		"adaptiveLimiters.v.algorithm.vegas: Vegas.Beta (3) must exceed Alpha (3)", // no field alone is wrong
		"adaptiveLimiters.a.algorithm.aimd.backoff: must be in (0, 1), got 1.5",
		"adaptiveLimiters.a.maxLimit: ", // the instance's other fields are still checked
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("the error does not report %q:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, "queueSize") || strings.Contains(msg, "g.algorithm:") {
		t.Errorf("a valid field, or the algorithm as a whole, is reported:\n%s", msg)
	}
}

func TestSheddersAreBuiltAndAReloadChangingOneNeedsReplace(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "shedders: {s: {cpuThreshold: 0.8, groups: [edge]}}\npipelines: {p: {shed: {ref: s}}, q: {shed: {inFlightThreshold: 10}}}"), Options{})
	s := get[*shed.Shedder](t, l, "s")
	get[*shed.Shedder](t, l, "q.shed")
	p := get[*pipeline.Pipeline](t, l, "p")
	if err := l.Apply(mustLoad(t, "shedders: {s: {cpuThreshold: 0.8, groups: [edge, core]}}\npipelines: {p: {shed: {ref: s}}, q: {shed: {inFlightThreshold: 10}}}")); err != nil {
		t.Fatalf("a groups-only change: %v", err)
	}
	if get[*shed.Shedder](t, l, "s") != s || get[*pipeline.Pipeline](t, l, "p") != p {
		t.Error("a groups-only change rebuilt the shedder or its pipeline")
	}
	err := l.Apply(mustLoad(t, "shedders: {s: {cpuThreshold: 0.7}}\npipelines: {p: {shed: {ref: s}}}"))
	if err == nil || !errors.Is(err, rampart.ErrInvalidConfig) || !strings.Contains(err.Error(), "shedders.s.cpuThreshold") {
		t.Fatalf("a changed shedder without replace: %v, want an error at shedders.s.cpuThreshold", err)
	}
	if get[*shed.Shedder](t, l, "s") != s || l.Version() != 2 {
		t.Fatal("a refused Apply changed the shedder")
	}
	if err := l.Apply(mustLoad(t, "shedders: {s: {cpuThreshold: 0.7, replace: true}}\npipelines: {p: {shed: {ref: s}}}")); err != nil {
		t.Fatal(err)
	}
	if get[*shed.Shedder](t, l, "s") == s || get[*pipeline.Pipeline](t, l, "p") == p {
		t.Error("a replaced shedder, or its pipeline, was not rebuilt")
	}
	if _, ok := l.Registry().Get("q.shed"); ok {
		t.Error("the removed pipeline's inline shedder is still registered")
	}
}

// TestApplyRegroupsAfterTheCallersDocumentIsEdited edits the groups of a
// Document already applied (those a section inherits from defaults, and a
// pipeline's) and applies it again: the new groups are in force, as Apply
// kept no slice of the caller's.
func TestApplyRegroupsAfterTheCallersDocumentIsEdited(t *testing.T) {
	doc := mustLoad(t, "defaults: {bulkhead: {groups: [edge]}}\nbulkheads: {k: {max: 10}}\npipelines: {p: {groups: [edge], bulkhead: {max: 3}}}")
	l := mustBuild(t, doc, Options{})
	doc.Defaults.Bulkhead.Groups[0] = "storage"
	doc.Pipelines["p"].Groups[0] = "storage"
	if err := l.Apply(doc); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"k", "p", "p.bulkhead"} {
		if g := l.Registry().Groups(n); !slices.Equal(g, []string{"storage"}) {
			t.Errorf("%s: groups %v after applying storage, want [storage]", n, g)
		}
	}
}

// takeNameOnThirdConfigure returns Options whose Configure, once *arm is
// set, registers a bulkhead under "n" at the third pipeline Configure of
// the Apply (the first two are plan's validation and diff's rebuild): the
// name is taken between the checks and commit, which then fails.
func takeNameOnThirdConfigure(l **Live, arm *int) Options {
	return Options{Configure: func(name string, cfg any) {
		if _, ok := cfg.(*pipeline.Config); ok && *arm > 0 {
			if *arm++; *arm != 3 {
				return
			}
			b, _ := bulkhead.New(bulkhead.Config{Max: 1})
			_ = (*l).Registry().Add("n", b)
		}
	}}
}

// TestAFailedApplyKeepsAScaledBulkheadScaled: commit updates a scaled
// bulkhead, then fails; the undo puts back the scaled value it had (not
// the old document's), and Restore still puts back the document's.
func TestAFailedApplyKeepsAScaledBulkheadScaled(t *testing.T) {
	var l *Live
	arm := 0
	l = mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 10, groups: [edge]}}\npipelines: {p: {bulkhead: {max: 1}}}"), takeNameOnThirdConfigure(&l, &arm))
	k := get[*bulkhead.Bulkhead](t, l, "k")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil || k.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, k.Max())
	}
	arm = 1
	if err := l.Apply(mustLoad(t, "bulkheads: {k: {max: 20, groups: [edge]}, n: {max: 1}}\npipelines: {p: {replace: true, countStats: true, bulkhead: {max: 1}}}")); err == nil {
		t.Fatal("Apply succeeded")
	}
	if k.Max() != 5 {
		t.Errorf("max %d after a refused Apply, want the scaled 5 it had", k.Max())
	}
	if n, _ := l.Registry().Restore("edge"); n != 1 || k.Max() != 10 {
		t.Errorf("Restore after a refused Apply restored %d, max %d; want 1, 10", n, k.Max())
	}
}

// TestAFailedApplyKeepsTheScaleBaselineOfARemovedInstance: a document
// that drops a scaled bulkhead fails in commit; the bulkhead stays
// registered with its baseline, so that Restore puts back its value.
func TestAFailedApplyKeepsTheScaleBaselineOfARemovedInstance(t *testing.T) {
	var l *Live
	arm := 0
	l = mustBuild(t, mustLoad(t, "bulkheads: {r: {max: 10, groups: [edge]}}\npipelines: {p: {bulkhead: {max: 1}}}"), takeNameOnThirdConfigure(&l, &arm))
	r := get[*bulkhead.Bulkhead](t, l, "r")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil || r.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, r.Max())
	}
	arm = 1
	if err := l.Apply(mustLoad(t, "bulkheads: {n: {max: 1}}\npipelines: {p: {replace: true, countStats: true, bulkhead: {max: 1}}}")); err == nil {
		t.Fatal("Apply succeeded")
	}
	if n, _ := l.Registry().Restore("edge"); n != 1 || r.Max() != 10 {
		t.Errorf("Restore after a refused Apply restored %d, max %d; want 1, 10", n, r.Max())
	}
}

// TestAnUpdateRacingAScaleLeavesRestoreTheDocumentsValue scales a group
// while Apply updates its bulkhead: whichever lands first, Restore puts
// back the document's value, never a scaled one.
func TestAnUpdateRacingAScaleLeavesRestoreTheDocumentsValue(t *testing.T) {
	l := mustBuild(t, mustLoad(t, "bulkheads: {k: {max: 1000, groups: [edge]}}"), Options{})
	k := get[*bulkhead.Bulkhead](t, l, "k")
	docs := []*Document{mustLoad(t, "bulkheads: {k: {max: 2000, groups: [edge]}}"), mustLoad(t, "bulkheads: {k: {max: 1000, groups: [edge]}}")}
	for i := range 5000 {
		if _, err := l.Registry().Scale("edge", 0.5); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = l.Registry().Scale("edge", 0.5) })
		if err := l.Apply(docs[i%2]); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := l.Registry().Restore("edge"); err != nil {
			t.Fatal(err)
		}
		if want := []int{2000, 1000}[i%2]; k.Max() != want {
			t.Fatalf("iteration %d: max %d after Restore, want the document's %d", i, k.Max(), want)
		}
	}
}

// TestAFreshListenerClosureIsRefusedBeforeAnyUpdate: Configure sets a new
// closure of one func literal on every call, which Update refuses (a
// listener is fixed at construction). The checks before commit refuse it,
// so no other instance is updated (nor its Scale undone).
func TestAFreshListenerClosureIsRefusedBeforeAnyUpdate(t *testing.T) {
	o := Options{Configure: func(name string, cfg any) {
		if c, ok := cfg.(*bulkhead.Config); ok && name == "b" {
			c.OnRejected = func(int64, time.Duration) { _ = name }
		}
	}}
	l := mustBuild(t, mustLoad(t, "bulkheads: {a: {max: 10, groups: [edge]}, b: {max: 10}}"), o)
	a := get[*bulkhead.Bulkhead](t, l, "a")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil || a.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, a.Max())
	}
	err := l.Apply(mustLoad(t, "bulkheads: {a: {max: 12, groups: [edge]}, b: {max: 20}}"))
	if err == nil || !errors.Is(err, rampart.ErrInvalidConfig) || !strings.Contains(err.Error(), "bulkheads.b") {
		t.Fatalf("Apply: %v, want a refusal at bulkheads.b", err)
	}
	if a.Max() != 5 {
		t.Errorf("a: max %d after the refused Apply, want the scaled 5", a.Max())
	}
}

// TestAShedderKeepsTheSameSourceFunc: Configure gives a shedder the same
// SourceFunc on every call (a func in an interface, which DeepEqual
// never finds equal); a reload changing its groups alone is accepted, one
// changing a fixed field names that field, not Source.
func TestAShedderKeepsTheSameSourceFunc(t *testing.T) {
	src := shed.SourceFunc(func(int64, *shed.Signals) {})
	o := Options{Configure: func(_ string, cfg any) {
		if c, ok := cfg.(*shed.Config); ok {
			c.Source = src
		}
	}}
	l := mustBuild(t, mustLoad(t, "shedders: {s: {cpuThreshold: 0.8}}"), o)
	if err := l.Apply(mustLoad(t, "shedders: {s: {cpuThreshold: 0.8, groups: [edge]}}")); err != nil {
		t.Fatalf("a groups-only change: %v", err)
	}
	err := l.Apply(mustLoad(t, "shedders: {s: {cpuThreshold: 0.7}}"))
	if err == nil || !strings.Contains(err.Error(), "cpuThreshold") || strings.Contains(err.Error(), "Source") {
		t.Fatalf("a changed cpuThreshold: %v, want an error naming cpuThreshold", err)
	}
}

// TestAFailedApplyKeepsTheScaleBaselineOfAReplacedInstance: a document
// that replaces a scaled bulkhead fails in commit (a new name taken
// meanwhile); the old bulkhead stays registered with its baseline, so
// that Restore puts back its value.
func TestAFailedApplyKeepsTheScaleBaselineOfAReplacedInstance(t *testing.T) {
	var l *Live
	arm := 0
	l = mustBuild(t, mustLoad(t, "bulkheads: {a: {max: 10, groups: [edge]}}\npipelines: {p: {bulkhead: {max: 1}}}"), takeNameOnThirdConfigure(&l, &arm))
	a := get[*bulkhead.Bulkhead](t, l, "a")
	if _, err := l.Registry().Scale("edge", 0.5); err != nil || a.Max() != 5 {
		t.Fatalf("Scale: %v, max %d", err, a.Max())
	}
	arm = 1
	if err := l.Apply(mustLoad(t, "bulkheads: {a: {max: 10, groups: [edge], replace: true, compact: true}, n: {max: 1}}\npipelines: {p: {replace: true, countStats: true, bulkhead: {max: 1}}}")); err == nil {
		t.Fatal("Apply succeeded")
	}
	if get[*bulkhead.Bulkhead](t, l, "a") != a {
		t.Fatal("a refused Apply left the replacement registered")
	}
	if n, _ := l.Registry().Restore("edge"); n != 1 || a.Max() != 10 {
		t.Errorf("Restore after a refused Apply restored %d, max %d; want 1, 10", n, a.Max())
	}
}
