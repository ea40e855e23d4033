package rampartprom

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// attach adds every instance of f to a new registered Collector and
// gathers once.
func attach(t testing.TB, f *fixture) (*Collector, *prometheus.Registry) {
	t.Helper()
	c := NewCollector(Config{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for name, inst := range f.instances() {
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
	detached, attached := newAdmitFixture(), newAdmitFixture()
	attach(t, attached)
	dc, ac := admitCases(detached), admitCases(attached)
	for i := range dc {
		d := testing.AllocsPerRun(1000, dc[i].run)
		a := testing.AllocsPerRun(1000, ac[i].run)
		if a != d || d != dc[i].allocs {
			t.Errorf("%s: %v allocations attached, %v detached; want %v", dc[i].name, a, d, dc[i].allocs)
		}
	}
}

// BenchmarkAdmit: every policy's admit case, detached and attached (added
// to a registered Collector that has been scraped once).
func BenchmarkAdmit(b *testing.B) {
	detached, attached := newAdmitFixture(), newAdmitFixture()
	attach(b, attached)
	dc, ac := admitCases(detached), admitCases(attached)
	for i := range dc {
		b.Run(dc[i].name+"/detached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dc[i].run()
			}
		})
		b.Run(ac[i].name+"/attached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ac[i].run()
			}
		})
	}
}

// manyInstances adds n named instances, a breaker, a rate limiter and a
// bulkhead in turn.
func manyInstances(t testing.TB, n int, add func(name string, inst any) error) {
	t.Helper()
	for i := range n {
		f := newAdmitFixture()
		var inst any
		switch i % 3 {
		case 0:
			inst = f.breaker
		case 1:
			inst = f.limiter
		default:
			inst = f.bulkhead
		}
		if err := add(fmt.Sprintf("instance-%04d", i), inst); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkCollect: one scrape of 1,000 named instances: Gather (the
// collector and the registry), and Gather plus the text encoding that
// promhttp writes.
func BenchmarkCollect(b *testing.B) {
	c := NewCollector(Config{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	manyInstances(b, 1000, c.Add)
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
	f := newAdmitFixture()
	c, reg := attach(t, f)
	src := &syncSource{insts: map[string]any{}}
	c.AddSource(src)
	var wg sync.WaitGroup
	for _, ac := range admitCases(f) {
		wg.Go(func() {
			for range 200 {
				ac.run()
			}
		})
	}
	wg.Go(func() {
		for i := range 100 {
			g := newAdmitFixture()
			name := fmt.Sprintf("dyn-%d", i%4)
			c.Remove(name)
			_ = c.Add(name, g.breaker)
			src.set(name, g.limiter)
			src.set(fmt.Sprintf("dyn-%d", (i+1)%4), g.breaker) // a duplicate of an added name, at times
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
		"rampart.ratelimit.rate|login":       f.limiter.Stats().Rate,
		"rampart.bulkhead.in_flight|db":      0,
		"rampart.bulkhead.max|db":            float64(f.bulkhead.Stats().Max),
		"rampart.retry.retries|fetch":        0,
		"rampart.chaos.calls|faults":         float64(f.chaos.Stats().Calls),
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
	f := newAdmitFixture()
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
