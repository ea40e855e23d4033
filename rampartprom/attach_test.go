package rampartprom

import (
	"bytes"
	"fmt"
	"github.com/rampart-go/rampart/observe/observetest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// attach adds every instance of f to a new registered Collector and
// gathers once.
func attach(t testing.TB, f *observetest.Fixture) (*Collector, *prometheus.Registry) {
	t.Helper()
	c := NewCollector(Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for name, inst := range f.Instances() {
		if err := c.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// TestAdmitAllocsAttached: every policy's admit case allocates as much
// with its instance attached (and scraped) as detached, which is the
// policy's own count (nothing, but for the timeout's context): the
// collector adds nothing to the call path.
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
// to a registered Collector that has been scraped once).
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

// BenchmarkCollect: one scrape of 1,000 named instances: Gather (the
// collector and the registry), and Gather plus the text encoding that
// promhttp writes.
func BenchmarkCollect(b *testing.B) {
	c := NewCollector(Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	observetest.ManyInstances(b, 1000, c.Add)
	b.Run("Gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("GatherAndEncode", func(b *testing.B) {
		var buf bytes.Buffer
		b.ReportAllocs()
		for b.Loop() {
			mfs, err := reg.Gather()
			if err != nil {
				b.Fatal(err)
			}
			buf.Reset()
			enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
			for _, mf := range mfs {
				if err := enc.Encode(mf); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
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

// TestCollectionRacesCallsAndAddRemove: scrapes run while every policy
// admits calls and while instances are added and removed, by name and in
// a Source, and every scrape succeeds (no duplicate series); once the
// calls are done, a scrape reads exactly the instances' Stats.
func TestCollectionRacesCallsAndAddRemove(t *testing.T) {
	f := observetest.NewAdmitFixture()
	c, reg := attach(t, f)
	src := &syncSource{insts: map[string]any{}}
	c.AddSource(src)
	var wg sync.WaitGroup
	for _, ac := range observetest.AdmitCases(f) {
		wg.Go(func() {
			for range 200 {
				ac.Run()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			g := observetest.NewAdmitFixture()
			name := fmt.Sprintf("dyn-%d", i%4)
			c.Remove(name)
			_ = c.Add(name, g.Breaker)
			src.set(name, g.Limiter)
			src.set(fmt.Sprintf("dyn-%d", (i+1)%4), g.Breaker) // a duplicate of an added name, at times
			if i%3 == 0 {
				src.set(name, nil)
			}
		}
	})
	wg.Go(func() {
		for range 50 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	got := series(t, gather(t, reg))
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

// TestScrapesRunConcurrently: two scrapes of one registry at the same time
// (each runs Collect, sharing the collector's cached label pairs) both
// succeed and see every instance.
func TestScrapesRunConcurrently(t *testing.T) {
	f := observetest.NewAdmitFixture()
	_, reg := attach(t, f)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 20 {
				got := series(t, gather(t, reg))
				if _, ok := got["rampart.circuitbreaker.state|api|closed"]; !ok {
					t.Error("the breaker's state not collected")
					return
				}
			}
		})
	}
	wg.Wait()
}
