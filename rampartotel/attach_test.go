package rampartotel

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rampart-go/rampart/observe/observetest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// attach adds every instance of f to a new Metrics and collects once.
func attach(t testing.TB, f *observetest.Fixture) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	m, r := newMetrics(t)
	for name, inst := range f.Instances() {
		if err := m.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return m, r
}

// TestAdmitAllocsAttached: every policy's admit case allocates as much
// with its instance attached (and collected) as detached, which is the
// policy's own count (nothing, but for the timeout's context): the adapter
// adds nothing to the call path.
func TestAdmitAllocsAttached(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	detached, attached := observetest.NewAdmitFixture(), observetest.NewAdmitFixture()
	attach(t, attached)
	dc, ac := observetest.AdmitCases(detached), observetest.AdmitCases(attached)
	for i := range dc {
		d := testing.AllocsPerRun(1000, dc[i].Run)
		a := testing.AllocsPerRun(1000, ac[i].Run)
		if a != d || d != dc[i].Allocs {
			t.Errorf("%s: %v allocations attached, %v detached; want %v", dc[i].Name, a, d, dc[i].Allocs)
		}
	}
}

// BenchmarkAdmit: every policy's admit case, detached and attached (added
// to a Metrics that has collected once).
func BenchmarkAdmit(b *testing.B) {
	detached, attached := observetest.NewAdmitFixture(), observetest.NewAdmitFixture()
	attach(b, attached)
	dc, ac := observetest.AdmitCases(detached), observetest.AdmitCases(attached)
	for i := range dc {
		b.Run(dc[i].Name+"/detached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dc[i].Run()
			}
		})
		b.Run(ac[i].Name+"/attached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ac[i].Run()
			}
		})
	}
}

// BenchmarkCollect: one collection (ManualReader.Collect) of 1,000 named
// instances (without the SDK's cardinality limit, which the breakers'
// 2,004 state series would exceed).
func BenchmarkCollect(b *testing.B) {
	m, r := newMetrics(b, sdkmetric.WithCardinalityLimit(0))
	observetest.ManyInstances(b, 1000, m.Add)
	var rm metricdata.ResourceMetrics
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Collect(context.Background(), &rm); err != nil {
			b.Fatal(err)
		}
	}
}

// syncSource is a Source safe for concurrent use.
type syncSource struct {
	mu    sync.Mutex
	insts map[string]any
}

func (s *syncSource) Range(f func(string, any) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, i := range s.insts {
		if !f(n, i) {
			return
		}
	}
}

func (s *syncSource) set(name string, inst any) {
	s.mu.Lock()
	if inst == nil {
		delete(s.insts, name)
	} else {
		s.insts[name] = inst
	}
	s.mu.Unlock()
}

// TestCollectionRacesCallsAndAddRemove: collections run while every
// policy admits calls and while instances are added and removed, by name
// and in a Source; once the calls are done, a collection reads exactly the
// instances' Stats.
func TestCollectionRacesCallsAndAddRemove(t *testing.T) {
	f := observetest.NewAdmitFixture()
	m, r := attach(t, f)
	src := &syncSource{insts: map[string]any{}}
	m.AddSource(src)
	var wg sync.WaitGroup
	for _, c := range observetest.AdmitCases(f) {
		wg.Go(func() {
			for range 200 {
				c.Run()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			g := observetest.NewAdmitFixture()
			name := fmt.Sprintf("dyn-%d", i%4)
			m.Remove(name)
			_ = m.Add(name, g.Breaker)
			src.set(name, g.Limiter)
			if i%3 == 0 {
				src.set(name, nil)
			}
		}
	})
	wg.Go(func() {
		var rm metricdata.ResourceMetrics
		for range 50 {
			if err := r.Collect(context.Background(), &rm); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	got := collect(t, r)
	checks := map[string]float64{
		"rampart.ratelimit.rate|login":       f.Limiter.Stats().Rate,
		"rampart.bulkhead.in_flight|db":      0,
		"rampart.bulkhead.max|db":            float64(f.Bulkhead.Stats().Max),
		"rampart.retry.retries|fetch":        0,
		"rampart.chaos.calls|faults":         float64(f.Chaos.Stats().Calls),
		"rampart.adaptive.in_flight|backend": 0,
	}
	for k, v := range checks {
		if got[k].value != v {
			t.Errorf("%s = %v, want %v", k, got[k].value, v)
		}
	}
	for i := range 4 {
		if _, ok := got[fmt.Sprintf("rampart.circuitbreaker.rejected|dyn-%d", i)]; !ok {
			t.Errorf("dyn-%d's breaker not collected", i)
		}
	}
}

// TestReadersCollectConcurrently: two readers of one MeterProvider
// collect at the same time (each runs the callback), and every collection
// sees every instance with its attributes.
func TestReadersCollectConcurrently(t *testing.T) {
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := New(mp.Meter("test"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	f := observetest.NewAdmitFixture()
	for name, inst := range f.Instances() {
		if err := m.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, r := range []*sdkmetric.ManualReader{r1, r2} {
		wg.Go(func() {
			for range 20 {
				got := collect(t, r)
				if _, ok := got["rampart.circuitbreaker.state|api|closed"]; !ok {
					t.Error("the breaker's state not collected")
					return
				}
			}
		})
	}
	wg.Wait()
}
