package registry_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

func names(r *registry.Registry) []string {
	var out []string
	r.Range(func(name string, _ any) bool { out = append(out, name); return true })
	return out
}

func TestAddGetRemove(t *testing.T) {
	r := registry.New()
	if err := r.Add("b", 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Add("a", "x", "g"); err != nil {
		t.Fatal(err)
	}
	if got := names(r); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Range order %v", got)
	}
	if v, ok := r.Get("a"); !ok || v != "x" {
		t.Fatalf("Get(a) = %v, %v", v, ok)
	}
	if _, ok := r.Get("c"); ok {
		t.Fatal("Get of an absent name found something")
	}
	if !r.Remove("a") || r.Remove("a") {
		t.Fatal("Remove reports wrongly")
	}
	if got := names(r); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after Remove: %v", got)
	}
	if r.Len() != 1 {
		t.Fatalf("Len = %d", r.Len())
	}
}

func TestAddRefusals(t *testing.T) {
	r := registry.New()
	if err := r.Add("taken", 1); err != nil {
		t.Fatal(err)
	}
	var nilBreaker *circuitbreaker.Breaker
	for _, tc := range []struct {
		name     string
		instance any
		want     error
	}{
		{"", 1, registry.ErrEmptyName},
		{"n", nil, registry.ErrNilInstance},
		{"n", nilBreaker, registry.ErrNilInstance},
		{"taken", 2, registry.ErrNameTaken},
	} {
		if err := r.Add(tc.name, tc.instance); !errors.Is(err, tc.want) {
			t.Errorf("Add(%q, %v) = %v, want %v", tc.name, tc.instance, err, tc.want)
		}
	}
	if v, _ := r.Get("taken"); v != 1 {
		t.Fatalf("a refused Add replaced the instance: %v", v)
	}
	if r.Len() != 1 {
		t.Fatalf("a refused Add registered something: %v", names(r))
	}
}

func TestGroups(t *testing.T) {
	r := registry.New()
	_ = r.Add("c", 3, "x", "y", "x")
	_ = r.Add("a", 1, "x")
	_ = r.Add("b", 2)
	if got := r.Names("x"); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Names(x) = %v", got)
	}
	if got := r.Groups("c"); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("Groups(c) = %v", got)
	}
	if got := r.Groups("b"); got != nil {
		t.Fatalf("Groups(b) = %v", got)
	}
	var seen []string
	r.RangeGroup("x", func(name string, _ any) bool { seen = append(seen, name); return false })
	if !slices.Equal(seen, []string{"a"}) {
		t.Fatalf("RangeGroup does not stop when f returns false: %v", seen)
	}
}

// TestRangeCallbackMayWrite: Range's callback may add and remove instances;
// the enumeration goes on over the snapshot it started with.
func TestRangeCallbackMayWrite(t *testing.T) {
	r := registry.New()
	for i := range 4 {
		_ = r.Add(strconv.Itoa(i), i)
	}
	var seen []string
	r.Range(func(name string, _ any) bool {
		seen = append(seen, name)
		r.Remove("3")
		_ = r.Add("z"+name, 0)
		return true
	})
	if !slices.Equal(seen, []string{"0", "1", "2", "3"}) {
		t.Fatalf("Range saw %v", seen)
	}
	if got := names(r); !slices.Equal(got, []string{"0", "1", "2", "z0", "z1", "z2", "z3"}) {
		t.Fatalf("after: %v", got)
	}
}

// TestConcurrentAddRemoveRange: writers add and remove while readers
// enumerate and look up; every enumeration is sorted and holds each of the
// stable names, and the race detector sees no race.
func TestConcurrentAddRemoveRange(t *testing.T) {
	r := registry.New()
	const stable = 8
	for i := range stable {
		_ = r.Add(fmt.Sprintf("s%02d", i), i, "stable")
	}
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		writers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i%16)
				if err := r.Add(name, i, "churn"); err != nil {
					t.Error(err)
					return
				}
				if !r.Remove(name) {
					t.Errorf("Remove(%s) found nothing", name)
					return
				}
			}
		})
	}
	for range 4 {
		readers.Go(func() {
			for range 1000 {
				var got []string
				s := 0
				r.Range(func(name string, _ any) bool {
					got = append(got, name)
					if name[0] == 's' {
						s++
					}
					return true
				})
				if !slices.IsSorted(got) || s != stable {
					t.Errorf("Range saw %v (%d stable)", got, s)
					return
				}
				if _, ok := r.Get("s03"); !ok {
					t.Error("Get lost a stable name")
					return
				}
				if n := len(r.Names("stable")); n != stable {
					t.Errorf("Names(stable) has %d", n)
					return
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	writers.Wait()
	if got := r.Names("churn"); len(got) != 0 {
		t.Fatalf("churn left %v", got)
	}
}

func TestCreateOrGet(t *testing.T) {
	r := registry.New()
	b, err := registry.Breaker(r, "pay", circuitbreaker.Config{}, "up")
	if err != nil {
		t.Fatal(err)
	}
	if b.Config().Name != "pay" {
		t.Fatalf("Name = %q, want the registry name", b.Config().Name)
	}
	again, err := registry.Breaker(r, "pay", circuitbreaker.Config{Name: "other"}, "down")
	if err != nil || again != b {
		t.Fatalf("second Breaker = %p, %v; want the first %p", again, err, b)
	}
	if b.Config().Name != "pay" || !slices.Equal(r.Groups("pay"), []string{"up"}) {
		t.Fatal("create-or-get of an existing name applied its arguments")
	}
	if _, err := registry.RateLimiter(r, "pay", ratelimit.Config{Rate: 1}); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("another kind under a taken name: %v", err)
	}
	if _, err := registry.Bulkhead(r, "bad", bulkhead.Config{}); !errors.Is(err, rampart.ErrInvalidConfig) {
		t.Fatalf("an invalid config: %v", err)
	}
	if _, ok := r.Get("bad"); ok {
		t.Fatal("an invalid config registered something")
	}
	if _, err := registry.Breaker(r, "", circuitbreaker.Config{}); !errors.Is(err, registry.ErrEmptyName) {
		t.Fatalf("empty name: %v", err)
	}
	if got, ok := registry.Lookup[*circuitbreaker.Breaker](r, "pay"); !ok || got != b {
		t.Fatal("Lookup of the breaker failed")
	}
	if _, ok := registry.Lookup[*bulkhead.Bulkhead](r, "pay"); ok {
		t.Fatal("Lookup of another kind succeeded")
	}
}

// TestCreateOrGetEveryKind builds one instance of every kind and finds it
// again by name.
func TestCreateOrGetEveryKind(t *testing.T) {
	r := registry.New()
	mk := []func() (any, error){
		func() (any, error) { return registry.Breaker(r, "cb", circuitbreaker.Config{}) },
		func() (any, error) { return registry.RateLimiter(r, "rl", ratelimit.Config{Rate: 10}) },
		func() (any, error) {
			return registry.KeyedRateLimiter(r, "krl", ratelimit.KeyedConfig{Config: ratelimit.Config{Rate: 10}})
		},
		func() (any, error) {
			return registry.ShardedRateLimiter(r, "srl", ratelimit.ShardedConfig{Config: ratelimit.Config{Rate: 10}, Shards: 2})
		},
		func() (any, error) { return registry.Bulkhead(r, "bh", bulkhead.Config{Max: 2}) },
		func() (any, error) { return registry.AdaptiveLimiter(r, "al", adaptive.Config{}) },
		func() (any, error) { return registry.Throttler(r, "th", adaptive.ThrottlerConfig{}) },
		func() (any, error) { return registry.Retry(r, "re", retry.Config{}) },
		func() (any, error) { return registry.Timeout(r, "to", timeout.Config{Duration: 1}) },
		func() (any, error) { return registry.Hedger(r, "he", hedge.Config{Delay: 1}) },
		func() (any, error) { return registry.Pipeline(r, "pi", pipeline.Config{}) },
		func() (any, error) { return registry.Injector(r, "ch", chaos.Config{}) },
		func() (any, error) { return registry.Shedder(r, "sh", shed.Config{}) },
	}
	var first []any
	for i, f := range mk {
		v, err := f()
		if err != nil {
			t.Fatalf("kind %d: %v", i, err)
		}
		first = append(first, v)
	}
	for i, f := range mk {
		if v, err := f(); err != nil || v != first[i] {
			t.Fatalf("kind %d: a second call built another instance (%v)", i, err)
		}
	}
	if r.Len() != len(mk) {
		t.Fatalf("Len = %d", r.Len())
	}
	if h, ok := registry.Lookup[*hedge.Hedger](r, "he"); ok {
		_ = h.Close()
	}
	if to, ok := registry.Lookup[*timeout.Timeout](r, "to"); ok {
		_ = to.Close()
	}
}

// TestCreateOrGetRaceBuildsOne: racing create-or-gets of one name all get
// the same instance.
func TestCreateOrGetRaceBuildsOne(t *testing.T) {
	r := registry.New()
	var wg sync.WaitGroup
	got := make([]*bulkhead.Bulkhead, 16)
	for i := range got {
		wg.Go(func() {
			b, err := registry.Bulkhead(r, "b", bulkhead.Config{Max: 1})
			if err != nil {
				t.Error(err)
			}
			got[i] = b
		})
	}
	wg.Wait()
	for _, b := range got {
		if b != got[0] {
			t.Fatal("two instances for one name")
		}
	}
}

func TestBreakerGroupOperations(t *testing.T) {
	r := registry.New()
	a, _ := registry.Breaker(r, "a", circuitbreaker.Config{}, "up")
	b, _ := registry.Breaker(r, "b", circuitbreaker.Config{}, "up")
	c, _ := registry.Breaker(r, "c", circuitbreaker.Config{}, "other")
	_ = r.Add("x", 42, "up") // not a breaker: left alone
	if n := r.ForceOpenBreakers("up"); n != 2 {
		t.Fatalf("ForceOpenBreakers moved %d", n)
	}
	if a.State() != circuitbreaker.ForcedOpen || b.State() != circuitbreaker.ForcedOpen || c.State() != circuitbreaker.Closed {
		t.Fatalf("states %v %v %v", a.State(), b.State(), c.State())
	}
	if _, err := a.Acquire(); !errors.Is(err, circuitbreaker.ErrOpen) {
		t.Fatalf("a forced-open breaker admitted: %v", err)
	}
	if n := r.DisableBreakers("up"); n != 2 || a.State() != circuitbreaker.Disabled {
		t.Fatalf("DisableBreakers moved %d, a is %v", n, a.State())
	}
	if n := r.CloseBreakers("up"); n != 2 || a.State() != circuitbreaker.Closed || b.State() != circuitbreaker.Closed {
		t.Fatalf("CloseBreakers moved %d", n)
	}
	if n := r.CloseBreakers("up"); n != 0 {
		t.Fatalf("closing closed breakers moved %d", n)
	}
}

// TestCreateOrGetBuildMayUseTheRegistry: a GetOrCreate build that
// creates or looks up other instances in the same registry returns (build
// runs without the registry's lock; it deadlocked when it ran under it).
func TestCreateOrGetBuildMayUseTheRegistry(t *testing.T) {
	type composite struct{ b *bulkhead.Bulkhead }
	r := registry.New()
	c, err := registry.GetOrCreate(r, "composite", func() (*composite, error) {
		b, err := registry.Bulkhead(r, "inner", bulkhead.Config{Max: 4})
		if _, ok := r.Get("inner"); !ok {
			t.Error("inner not found from build")
		}
		return &composite{b}, err
	}, "g")
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := registry.Lookup[*bulkhead.Bulkhead](r, "inner"); !ok || got != c.b {
		t.Fatal("the instance build created is not registered")
	}
	if got, ok := registry.Lookup[*composite](r, "composite"); !ok || got != c || !slices.Equal(r.Names("g"), []string{"composite"}) {
		t.Fatal("the composite is not registered in its group")
	}
}

// TestCreateOrGetWhileBuilding: while a build runs, a racing create-or-get
// of its name waits and gets the instance it builds (one build), Add of
// the name is refused with ErrNameTaken, Get finds nothing yet, and a
// failed build lets the waiter build its own.
func TestCreateOrGetWhileBuilding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type custom struct{ n int }
		r := registry.New()
		started, release := make(chan struct{}), make(chan struct{})
		builds := 0
		build := func() (*custom, error) {
			builds++
			close(started)
			<-release
			return &custom{n: builds}, nil
		}
		var first *custom
		var wg sync.WaitGroup
		wg.Go(func() {
			var err error
			if first, err = registry.GetOrCreate(r, "c", build, "g"); err != nil {
				t.Error(err)
			}
		})
		<-started
		var second *custom
		wg.Go(func() {
			var err error
			if second, err = registry.GetOrCreate(r, "c", build); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait() // the second waits for the first's build
		if err := r.Add("c", &custom{}); !errors.Is(err, registry.ErrNameTaken) {
			t.Errorf("Add of a name being built: %v", err)
		}
		if _, ok := r.Get("c"); ok {
			t.Error("Get found an instance still being built")
		}
		close(release)
		wg.Wait()
		if first == nil || second != first || builds != 1 {
			t.Fatalf("racing create-or-gets: %p and %p, %d builds", first, second, builds)
		}

		// A failed build: the waiter builds its own (build's error is the
		// builder's only).
		boom := errors.New("boom")
		started, release = make(chan struct{}), make(chan struct{})
		wg.Go(func() {
			_, err := registry.GetOrCreate(r, "d", func() (*custom, error) {
				close(started)
				<-release
				return nil, boom
			})
			if err != boom {
				t.Errorf("build's error: %v", err)
			}
		})
		<-started
		var d *custom
		wg.Go(func() {
			var err error
			if d, err = registry.GetOrCreate(r, "d", func() (*custom, error) { return &custom{n: 7}, nil }); err != nil {
				t.Error(err)
			}
		})
		synctest.Wait()
		close(release)
		wg.Wait()
		if got, ok := registry.Lookup[*custom](r, "d"); d == nil || d.n != 7 || !ok || got != d {
			t.Fatalf("after a failed build the waiter got %v", d)
		}
	})
}

// TestCreateOrGetBuildThatPanicsOrExits: a build that panics (the panic
// goes on to its caller) or calls runtime.Goexit registers nothing, wakes
// the create-or-gets waiting for it with an error wrapping
// ErrBuildAborted, and frees the name for a later create-or-get or Add.
func TestCreateOrGetBuildThatPanicsOrExits(t *testing.T) {
	for _, how := range []string{"panic", "Goexit"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				type custom struct{}
				r := registry.New()
				started, release := make(chan struct{}), make(chan struct{})
				var wg sync.WaitGroup
				var recovered any
				wg.Go(func() {
					defer func() { recovered = recover() }()
					_, _ = registry.GetOrCreate(r, "c", func() (*custom, error) {
						close(started)
						<-release
						if how == "panic" {
							panic("build")
						}
						runtime.Goexit()
						return nil, nil
					})
				})
				<-started
				var waitErr error
				wg.Go(func() {
					_, waitErr = registry.GetOrCreate(r, "c", func() (*custom, error) { return &custom{}, nil })
				})
				synctest.Wait()
				close(release)
				wg.Wait()
				if how == "panic" && recovered != "build" {
					t.Fatalf("the build's panic did not reach its caller: %v", recovered)
				}
				if !errors.Is(waitErr, registry.ErrBuildAborted) {
					t.Fatalf("the waiter got %v", waitErr)
				}
				if r.Len() != 0 {
					t.Fatal("an aborted build registered something")
				}
				if _, err := registry.GetOrCreate(r, "c", func() (*custom, error) { return &custom{}, nil }); err != nil {
					t.Fatalf("the name stayed taken: %v", err)
				}
			})
		})
	}
}

// TestRateLimiterOfTheRegistryUpdates: a rate limiter the registry built
// (and named) accepts the Update the docs tell you to make: the Config it
// was given with its rate changed, and its own Config with a field
// changed; it keeps the registry's name.
func TestRateLimiterOfTheRegistryUpdates(t *testing.T) {
	r := registry.New()
	c := ratelimit.Config{Rate: 10, Burst: 5}
	l, err := registry.RateLimiter(r, "api", c)
	if err != nil {
		t.Fatal(err)
	}
	c.Rate = 20
	if err := l.Update(c); err != nil {
		t.Fatalf("Update with the Config given to the registry, Rate changed: %v", err)
	}
	lc := l.Config()
	lc.Burst = 7
	if err := l.Update(lc); err != nil {
		t.Fatalf("Update of its own Config: %v", err)
	}
	if st := l.Stats(); st.Rate != 20 || st.Burst != 7 || l.Config().Name != "api" {
		t.Fatalf("after the Updates: %+v, name %q", st, l.Config().Name)
	}
	s, err := registry.ShardedRateLimiter(r, "edge", ratelimit.ShardedConfig{Config: ratelimit.Config{Rate: 100, Burst: 8}, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ratelimit.ShardedConfig{Config: ratelimit.Config{Rate: 200, Burst: 8}, Shards: 2}); err != nil {
		t.Fatalf("Update of a sharded limiter the registry named: %v", err)
	}
	if s.Config().Name != "edge" {
		t.Fatalf("name %q", s.Config().Name)
	}
}

// TestEveryKindOfTheRegistryAcceptsTheCallersConfigBack: every kind the
// registry builds by name and that has an Update (breaker, rate limiter,
// sharded rate limiter, bulkhead, adaptive limiter, retry, timeout,
// hedger) accepts the Config its caller gave the registry (no Name: the
// registry named the instance) with a field changed, applies the change
// and keeps the registry's name.
func TestEveryKindOfTheRegistryAcceptsTheCallersConfigBack(t *testing.T) {
	r := registry.New()
	for _, tc := range []struct {
		kind string
		// update builds the instance named name from a Config without a
		// Name, updates it with that Config changed and returns the
		// change seen in the instance (true when applied), the instance's
		// name and the Update's error.
		update func(t *testing.T, name string) (applied bool, got string, err error)
	}{
		{"Breaker", func(t *testing.T, name string) (bool, string, error) {
			c := circuitbreaker.Config{FailureRateThreshold: 50}
			b, err := registry.Breaker(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.FailureRateThreshold = 25
			err = b.Update(c)
			return b.Config().FailureRateThreshold == 25, b.Config().Name, err
		}},
		{"RateLimiter", func(t *testing.T, name string) (bool, string, error) {
			c := ratelimit.Config{Rate: 10, Burst: 5}
			l, err := registry.RateLimiter(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.Burst = 7
			err = l.Update(c)
			return l.Config().Burst == 7, l.Config().Name, err
		}},
		{"ShardedRateLimiter", func(t *testing.T, name string) (bool, string, error) {
			c := ratelimit.ShardedConfig{Config: ratelimit.Config{Rate: 100, Burst: 8}, Shards: 2}
			s, err := registry.ShardedRateLimiter(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.Burst = 16
			err = s.Update(c)
			return s.Config().Burst == 16, s.Config().Name, err
		}},
		{"Bulkhead", func(t *testing.T, name string) (bool, string, error) {
			c := bulkhead.Config{Max: 4}
			b, err := registry.Bulkhead(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.Max = 8
			err = b.Update(c)
			return b.Max() == 8, b.Config().Name, err
		}},
		{"AdaptiveLimiter", func(t *testing.T, name string) (bool, string, error) {
			c := adaptive.Config{InitialLimit: 4, MaxLimit: 50}
			l, err := registry.AdaptiveLimiter(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.MaxLimit = 60
			err = l.Update(c)
			return l.Config().MaxLimit == 60, l.Config().Name, err
		}},
		{"Retry", func(t *testing.T, name string) (bool, string, error) {
			c := retry.Config{MaxAttempts: 3}
			p, err := registry.Retry(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			c.MaxAttempts = 5
			err = p.Update(c)
			return p.MaxAttempts() == 5, p.Config().Name, err
		}},
		{"Timeout", func(t *testing.T, name string) (bool, string, error) {
			c := timeout.Config{Duration: time.Second}
			to, err := registry.Timeout(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = to.Close() })
			c.Duration = time.Minute
			err = to.Update(c)
			return to.Duration() == time.Minute, to.Config().Name, err
		}},
		{"Hedger", func(t *testing.T, name string) (bool, string, error) {
			c := hedge.Config{Delay: time.Second}
			h, err := registry.Hedger(r, name, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = h.Close() })
			c.Delay = time.Minute
			err = h.Update(c)
			return h.Delay() == time.Minute, h.Config().Name, err
		}},
	} {
		name := "reg-" + tc.kind
		applied, got, err := tc.update(t, name)
		if err != nil || !applied || got != name {
			t.Errorf("%s: Update of the caller's Config, changed = %v (applied %v), name %q, want %q", tc.kind, err, applied, got, name)
		}
	}
}

// TestScaleRaisesAMaxAboveMaxInt32: a factor above 1 never lowers a
// bulkhead, whatever its Max (a Max above MaxInt32 was cut to MaxInt32),
// and a product beyond MaxInt saturates there; Restore puts the Max back.
func TestScaleRaisesAMaxAboveMaxInt32(t *testing.T) {
	big := math.MaxInt>>20 + 1 // 2⁴³ on 64-bit, far above MaxInt32 (2¹¹ on 32-bit)
	r := registry.New()
	b, err := registry.Bulkhead(r, "b", bulkhead.Config{Max: big}, "g")
	if err != nil {
		t.Fatal(err)
	}
	huge, err := registry.Bulkhead(r, "huge", bulkhead.Config{Max: math.MaxInt}, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scale("g", 2); err != nil {
		t.Fatal(err)
	}
	if b.Max() != 2*big || huge.Max() != math.MaxInt {
		t.Fatalf("Scale(g, 2): Max %d (from %d) and %d (from MaxInt)", b.Max(), big, huge.Max())
	}
	if _, err := r.Scale("g", 0.5); err != nil {
		t.Fatal(err)
	}
	if b.Max() != big/2 {
		t.Fatalf("Scale(g, 0.5): Max %d", b.Max())
	}
	if _, err := r.Restore("g"); err != nil {
		t.Fatal(err)
	}
	if b.Max() != big || huge.Max() != math.MaxInt {
		t.Fatalf("Restore: Max %d and %d", b.Max(), huge.Max())
	}
}

// TestRestoreIsExact: Scale then Restore gives a Limit/Period limiter
// back the exact interval and rate it had.
func TestRestoreIsExact(t *testing.T) {
	r := registry.New()
	l, err := registry.RateLimiter(r, "l", ratelimit.Config{Limit: 7, Period: 3 * time.Second}, "g")
	if err != nil {
		t.Fatal(err)
	}
	before, limit, period := l.Stats(), l.Config().Limit, l.Config().Period
	if _, err := r.Scale("g", 0.5); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Restore("g"); err != nil {
		t.Fatal(err)
	}
	if after, c := l.Stats(), l.Config(); after != before || c.Limit != limit || c.Period != period {
		t.Fatalf("Restore: %+v (%d per %v), was %+v (%d per %v)", after, c.Limit, c.Period, before, limit, period)
	}
}

// TestScaleOfOneInstanceUnderTwoNames: an instance registered under two
// names of a group is scaled once, from one baseline (it compounded), and
// Restore puts that baseline back; removing one of its names keeps the
// baseline for the other, and removing the last drops it.
func TestScaleOfOneInstanceUnderTwoNames(t *testing.T) {
	r := registry.New()
	b, _ := bulkhead.New(bulkhead.Config{Max: 100})
	l, _ := ratelimit.New(ratelimit.Config{Rate: 100})
	for _, name := range []string{"a", "b"} {
		if err := r.Add(name, b, "g"); err != nil {
			t.Fatal(err)
		}
		if err := r.Add("l"+name, l, "g"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.Scale("g", 0.5); n != 2 || err != nil {
		t.Fatalf("Scale = %d, %v", n, err)
	}
	if b.Max() != 50 || l.Stats().Rate != 50 {
		t.Fatalf("Scale(g, 0.5) of Max 100 and rate 100 gave %d and %v", b.Max(), l.Stats().Rate)
	}
	if n, err := r.Restore("g"); n != 2 || err != nil {
		t.Fatalf("Restore = %d, %v", n, err)
	}
	if b.Max() != 100 || l.Stats().Rate != 100 {
		t.Fatalf("Restore gave %d and %v, want 100", b.Max(), l.Stats().Rate)
	}
	if _, err := r.Scale("g", 0.5); err != nil {
		t.Fatal(err)
	}
	r.Remove("a")
	if n, _ := r.Restore("g"); n != 2 || b.Max() != 100 {
		t.Fatalf("Restore through the other name: %d restored, Max %d", n, b.Max())
	}
	if _, err := r.Scale("g", 0.5); err != nil {
		t.Fatal(err)
	}
	r.Remove("b")
	if err := r.Add("c", b, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Scale("g", 0.5); err != nil { // a new baseline: 50, the Max it has
		t.Fatal(err)
	}
	if b.Max() != 25 {
		t.Fatalf("the baseline outlived the instance's last name: Max %d", b.Max())
	}
}

// TestScaleLeavesUncomparableInstances: instances of an uncomparable type
// (a slice) in a scaled group are left alone, and removing them or a
// scaled instance and restoring does not panic.
func TestScaleLeavesUncomparableInstances(t *testing.T) {
	r := registry.New()
	_ = r.Add("s1", []int{1}, "g")
	_ = r.Add("s2", []int{2}, "g")
	b, _ := bulkhead.New(bulkhead.Config{Max: 8})
	_ = r.Add("b", b, "g")
	if n, err := r.Scale("g", 0.5); n != 1 || err != nil {
		t.Fatalf("Scale = %d, %v", n, err)
	}
	r.Remove("s1")
	r.Remove("b")
	if n, err := r.Restore("g"); n != 0 || err != nil {
		t.Fatalf("Restore = %d, %v", n, err)
	}
}

func TestScaleAndRestore(t *testing.T) {
	r := registry.New()
	tk := rampart.NewManualTicker(0)
	l, _ := registry.RateLimiter(r, "l", ratelimit.Config{Limit: 100, Period: 1e9, Burst: 10, Ticker: tk}, "edge")
	bh, _ := registry.Bulkhead(r, "bh", bulkhead.Config{Max: 10}, "edge")
	other, _ := registry.Bulkhead(r, "o", bulkhead.Config{Max: 10}, "core")
	if n, err := r.Scale("edge", 0.5); n != 2 || err != nil {
		t.Fatalf("Scale = %d, %v", n, err)
	}
	if got := l.Stats(); got.Rate != 50 || got.Burst != 10 {
		t.Fatalf("limiter after Scale(0.5): rate %v burst %d", got.Rate, got.Burst)
	}
	if bh.Max() != 5 || other.Max() != 10 {
		t.Fatalf("Max after Scale(0.5): %d (other %d)", bh.Max(), other.Max())
	}
	// A second Scale counts from the baseline, not from the scaled value.
	if _, err := r.Scale("edge", 0.25); err != nil {
		t.Fatal(err)
	}
	if l.Stats().Rate != 25 || bh.Max() != 3 {
		t.Fatalf("after Scale(0.25): rate %v, Max %d", l.Stats().Rate, bh.Max())
	}
	if _, err := r.Scale("edge", 0.001); err != nil { // rounds to 0: Max stays at least 1
		t.Fatal(err)
	}
	if bh.Max() != 1 {
		t.Fatalf("Max after a tiny factor: %d", bh.Max())
	}
	if n, err := r.Restore("edge"); n != 2 || err != nil {
		t.Fatalf("Restore = %d, %v", n, err)
	}
	if l.Stats().Rate != 100 || l.Stats().Burst != 10 || bh.Max() != 10 {
		t.Fatalf("after Restore: rate %v burst %d Max %d", l.Stats().Rate, l.Stats().Burst, bh.Max())
	}
	if n, _ := r.Restore("edge"); n != 0 {
		t.Fatalf("a second Restore restored %d", n)
	}
	for _, f := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := r.Scale("edge", f); !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Errorf("Scale(%v) = %v", f, err)
		}
	}
	if bh.Max() != 10 {
		t.Fatal("a refused Scale changed something")
	}
}

// TestGetOrCreateAnyKind: the generic create-or-get builds once, returns
// build's error unchanged, refuses a nil instance and another kind.
func TestGetOrCreateAnyKind(t *testing.T) {
	type custom struct{ n int }
	r := registry.New()
	builds := 0
	build := func() (*custom, error) { builds++; return &custom{n: builds}, nil }
	a, err := registry.GetOrCreate(r, "c", build, "g")
	if err != nil || a.n != 1 {
		t.Fatalf("first: %v, %v", a, err)
	}
	b, err := registry.GetOrCreate(r, "c", build)
	if err != nil || b != a || builds != 1 {
		t.Fatalf("second: %v, %v, %d builds", b, err, builds)
	}
	boom := errors.New("boom")
	if _, err := registry.GetOrCreate(r, "d", func() (*custom, error) { return nil, boom }); err != boom {
		t.Fatalf("build's error: %v", err)
	}
	if _, err := registry.GetOrCreate(r, "d", func() (*custom, error) { return nil, nil }); !errors.Is(err, registry.ErrNilInstance) {
		t.Fatalf("a nil instance: %v", err)
	}
	if _, ok := r.Get("d"); ok {
		t.Fatal("a failed build registered something")
	}
	if _, err := registry.GetOrCreate(r, "c", func() (int, error) { return 1, nil }); !errors.Is(err, registry.ErrKindMismatch) {
		t.Fatalf("another kind: %v", err)
	}
	if !slices.Equal(r.Names("g"), []string{"c"}) {
		t.Fatalf("groups: %v", r.Names("g"))
	}
}
