package rampartslog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
)

// capture is a slog.Handler that keeps every record's text (as
// slog.TextHandler writes it, without the time).
type capture struct {
	mu    sync.Mutex
	lines []string
}

func (c *capture) logger() *slog.Logger {
	return slog.New(c)
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *capture) WithGroup(string) slog.Handler            { return c }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	h := slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey && len(groups) == 0 {
			return slog.Attr{}
		}
		return a
	}})
	if err := h.Handle(context.Background(), r); err != nil {
		return err
	}
	c.mu.Lock()
	c.lines = append(c.lines, strings.TrimSuffix(b.String(), "\n"))
	c.mu.Unlock()
	return nil
}

func (c *capture) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lines
	c.lines = nil
	return l
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func equal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBreakerTransitionsAreLoggedAtInfo: each transition of a breaker is
// one Info record with its name and states.
func TestBreakerTransitionsAreLoggedAtInfo(t *testing.T) {
	var c capture
	tk := rampart.NewManualTicker(0)
	b := must(circuitbreaker.New(circuitbreaker.Config{Name: "api", Ticker: tk, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 1, OpenDuration: time.Second, HalfOpenProbes: 1, OnStateChange: BreakerOnStateChange(c.logger(), "api")}))
	p := must(b.Acquire())
	b.Release(p, rampart.Failure)
	tk.Advance(time.Second)
	p = must(b.Acquire())
	b.Release(p, rampart.Success)
	equal(t, c.take(),
		`level=INFO msg="rampart: circuit breaker state change" policy=circuitbreaker name=api from=closed to=open`,
		`level=INFO msg="rampart: circuit breaker state change" policy=circuitbreaker name=api from=open to=half-open`,
		`level=INFO msg="rampart: circuit breaker state change" policy=circuitbreaker name=api from=half-open to=closed`)
}

// shedRig is a shedder on a manual clock whose Source reports 20 ms of
// scheduling latency (the default threshold is 10 ms) while overloaded is
// set, and nothing otherwise; CoolOff 1 ns releases it at the first cold
// sample.
type shedRig struct {
	tk         *rampart.ManualTicker
	s          *shed.Shedder
	overloaded bool
}

func newShedRig(t *testing.T, onOverload func(*shedRig) func(bool)) *shedRig {
	r := &shedRig{tk: rampart.NewManualTicker(0)}
	r.s = must(shed.New(shed.Config{Name: "cpu", Ticker: r.tk, SampleInterval: 100 * time.Millisecond, CoolOff: 1,
		OnOverload: onOverload(r),
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
			if r.overloaded {
				s.SchedLatency = 20 * time.Millisecond
			}
		})}))
	return r
}

// sample moves one interval on and takes the sample with one call.
func (r *shedRig) sample(t *testing.T) {
	r.tk.Advance(100 * time.Millisecond)
	p, err := r.s.AcquireAt(r.tk.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.s.ReleaseAt(p, r.tk.Now(), rampart.Ignored)
}

// engage completes 200 calls of 8 ms in one interval and 100 of 2 ms in
// the next, then reports the latency: the next sample engages the
// shedder at a cap of 4 (2,000/s × 2 ms); the calls its limit admits (the
// cap and one more) are held, and the next is shed.
func (r *shedRig) engage(t *testing.T) []shed.Permit {
	complete := func(n int, rt time.Duration) {
		now := r.tk.Now()
		for range n {
			p := must(r.s.AcquireAt(now))
			r.s.ReleaseAt(p, now+int64(rt), rampart.Success)
		}
	}
	complete(200, 8*time.Millisecond)
	r.sample(t)
	complete(100, 2*time.Millisecond)
	r.overloaded = true
	r.tk.Advance(100 * time.Millisecond)
	held := []shed.Permit{must(r.s.AcquireAt(r.tk.Now()))} // takes the sample: engaged
	for len(held) < r.s.Stats().Limit {
		held = append(held, must(r.s.AcquireAt(r.tk.Now())))
	}
	if _, err := r.s.AcquireAt(r.tk.Now()); !errors.Is(err, shed.ErrOverloaded) {
		t.Fatalf("shedder: %v, want ErrOverloaded", err)
	}
	return held
}

// TestShedTransitionsAreLoggedAtInfo: the shedder engaging and releasing
// is one Info record each, the engagement with the trigger, the cap and
// the signals of its sample when the listener can read the shedder.
func TestShedTransitionsAreLoggedAtInfo(t *testing.T) {
	for _, withStats := range []bool{false, true} {
		var c capture
		r := newShedRig(t, func(r *shedRig) func(bool) {
			var stats func() *shed.Shedder
			if withStats {
				stats = func() *shed.Shedder { return r.s }
			}
			return ShedOnOverload(c.logger(), "cpu", stats)
		})
		held := r.engage(t)
		for _, p := range held {
			r.s.ReleaseAt(p, r.tk.Now(), rampart.Success)
		}
		r.overloaded = false
		r.sample(t) // cold signals, the cool-off (1 ns) over: released
		engaged := `level=INFO msg="rampart: overload" policy=shed name=cpu overloaded=true`
		if withStats {
			engaged += ` trigger=sched_latency cap=4 sched_latency=20ms cpu=-1 runnable=-1`
		}
		equal(t, c.take(), engaged, `level=INFO msg="rampart: overload" policy=shed name=cpu overloaded=false`)
	}
}

// TestSummaryCountsShedRejections: a shedder's rejections are summarised
// as shed.rejected.<name>.
func TestSummaryCountsShedRejections(t *testing.T) {
	f := newSummaryFixture(t)
	r := newShedRig(t, func(*shedRig) func(bool) { return nil })
	if err := f.s.Add("cpu", r.s); err != nil {
		t.Fatal(err)
	}
	r.engage(t)
	f.s.Flush()
	equal(t, f.c.take(), `level=INFO msg="rampart: rejections" interval=0s shed.rejected.cpu=1`)
}

// TestAdaptiveLimitMovesBelowTheThresholdAreNotLogged: the limit is
// logged when it has moved by a quarter since the last line logged, in
// either direction.
func TestAdaptiveLimitMovesBelowTheThresholdAreNotLogged(t *testing.T) {
	var c capture
	f := AdaptiveOnLimitChange(c.logger(), "backend", 0.25)
	for _, step := range [][2]int{{20, 21}, {21, 22}, {22, 25}, {25, 30}, {30, 31}, {31, 18}, {18, 17}} {
		f(step[0], step[1])
	}
	equal(t, c.take(),
		`level=INFO msg="rampart: adaptive limit change" policy=adaptive name=backend from=20 to=25`,
		`level=INFO msg="rampart: adaptive limit change" policy=adaptive name=backend from=25 to=18`)

	every := AdaptiveOnLimitChange(c.logger(), "all", 0)
	every(5, 6)
	every(6, 6)
	every(6, 7)
	if got := len(c.take()); got != 2 {
		t.Errorf("minChange 0: %d records, want 2 (changes only)", got)
	}
}

// summaryFixture: a summary on a ManualTicker over a breaker, a rate
// limiter and a bulkhead added by name, and a Source.
type summaryFixture struct {
	tk      *rampart.ManualTicker
	c       capture
	s       *Summary
	breaker *circuitbreaker.Breaker
	limiter *ratelimit.Limiter
	bh      *bulkhead.Bulkhead
}

func newSummaryFixture(t *testing.T) *summaryFixture {
	f := &summaryFixture{tk: rampart.NewManualTicker(0)}
	f.s = must(NewSummary(SummaryConfig{Logger: f.c.logger(), Interval: 10 * time.Second, Ticker: f.tk}))
	l := f.s.OnRejected()
	f.breaker = must(circuitbreaker.New(circuitbreaker.Config{Name: "api", Ticker: f.tk, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 1, OpenDuration: time.Hour, OnRejected: l.Breaker}))
	f.limiter = must(ratelimit.New(ratelimit.Config{Name: "login", Ticker: f.tk, Rate: 1e-3, Burst: 1, CountStats: true, OnRejected: l.RateLimit}))
	f.bh = must(bulkhead.New(bulkhead.Config{Name: "db", Ticker: f.tk, Max: 1, OnRejected: l.Bulkhead}))
	for name, inst := range map[string]any{"api": f.breaker, "login": f.limiter, "db": f.bh} {
		if err := f.s.Add(name, inst); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestRejectionsAreSummarisedOncePerInterval: rejections are counted, not
// logged; the first rejection listener call after the interval logs one
// record with the counts per policy and instance since the last record;
// a quiet interval logs nothing.
func TestRejectionsAreSummarisedOncePerInterval(t *testing.T) {
	f := newSummaryFixture(t)
	p := must(f.breaker.Acquire())
	f.breaker.Release(p, rampart.Failure) // open for an hour
	for range 5 {
		f.breaker.Acquire()
	}
	f.limiter.Allow()
	for range 3 {
		f.limiter.Allow()
	}
	if err := f.bh.Acquire(); err != nil {
		t.Fatal(err)
	}
	f.bh.Acquire()
	equal(t, f.c.take()) // within the interval: nothing
	f.tk.Advance(10 * time.Second)
	f.breaker.Acquire() // the listener finds the interval passed
	equal(t, f.c.take(),
		`level=INFO msg="rampart: rejections" interval=10s bulkhead.rejected.db=1 circuitbreaker.rejected.api=6 ratelimit.rejected.login=3`)

	f.tk.Advance(5 * time.Second)
	f.limiter.Allow()
	f.tk.Advance(5 * time.Second)
	f.limiter.Allow() // due: counts only what came after the last record
	equal(t, f.c.take(), `level=INFO msg="rampart: rejections" interval=10s ratelimit.rejected.login=2`)

	f.tk.Advance(time.Minute)
	f.s.Flush() // nothing rejected since
	equal(t, f.c.take())
}

// mapSource is a Source over a map.
type mapSource map[string]any

func (m mapSource) Range(f func(string, any) bool) {
	for n, i := range m {
		if !f(n, i) {
			return
		}
	}
}

// TestSummaryReadsSources: a Source's instances are summarised from the
// flush after they first appear; unknown types are counted as skipped.
func TestSummaryReadsSources(t *testing.T) {
	f := newSummaryFixture(t)
	pol := must(retry.New(retry.Config{Name: "fetch", Ticker: f.tk, MaxAttempts: 2, Budget: budgetRefusing{}}))
	ad := must(adaptive.New(adaptive.Config{Name: "backend", Ticker: f.tk, InitialLimit: 1, MinLimit: 1}))
	src := mapSource{"fetch": pol, "backend": ad, "faults": must(chaos.New(chaos.Config{}))}
	f.s.AddSource(src)
	if err := pol.Do(context.Background(), func(context.Context) error { return errors.New("x") }); err == nil {
		t.Fatal("retry succeeded")
	}
	must(ad.Acquire())
	ad.Acquire()
	f.s.Flush()
	equal(t, f.c.take(), `level=INFO msg="rampart: rejections" interval=0s adaptive.rejected.backend=1 retry.budget_refused.fetch=1 retry.give_ups.fetch=1 skipped=1`)
}

// budgetRefusing refuses every retry.
type budgetRefusing struct{}

func (budgetRefusing) OnRequest(int64)       {}
func (budgetRefusing) OnSuccess(int64)       {}
func (budgetRefusing) OnFailure(int64)       {}
func (budgetRefusing) AllowRetry(int64) bool { return false }

func TestNewSummaryRefusesAnInvalidConfig(t *testing.T) {
	_, err := NewSummary(SummaryConfig{})
	testkit.RequireConfigError(t, err, "rampartslog", "Logger")
	_, err = NewSummary(SummaryConfig{Logger: slog.Default(), Interval: -1})
	testkit.RequireConfigError(t, err, "rampartslog", "Interval")
}

func TestAddRefusesUnsupportedTypes(t *testing.T) {
	s := must(NewSummary(SummaryConfig{Logger: slog.Default()}))
	if err := s.Add("x", 1); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Add(int) = %v", err)
	}
	b := must(circuitbreaker.New(circuitbreaker.Config{}))
	if err := s.Add("x", b); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("x", b); err == nil {
		t.Error("a second Add under a name accepted")
	}
}

// TestPollRacesRejections: listeners polling from many goroutines while
// the clock moves log each rejection exactly once across the records.
func TestPollRacesRejections(t *testing.T) {
	f := newSummaryFixture(t)
	p := must(f.breaker.Acquire())
	f.breaker.Release(p, rampart.Failure)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 500 {
				f.breaker.Acquire()
				if i%50 == 0 {
					f.tk.Advance(3 * time.Second)
				}
			}
		})
	}
	wg.Wait()
	f.s.Flush()
	var total uint64
	for _, l := range f.c.take() {
		i := strings.Index(l, "circuitbreaker.rejected.api=")
		if i < 0 {
			continue
		}
		var n uint64
		for _, ch := range l[i+len("circuitbreaker.rejected.api="):] {
			if ch < '0' || ch > '9' {
				break
			}
			n = n*10 + uint64(ch-'0')
		}
		total += n
	}
	if total != 2000 {
		t.Errorf("records sum to %d rejections, want 2000", total)
	}
}

// TestPollAllocs: a rejection listener that finds no flush due allocates
// nothing.
func TestPollAllocs(t *testing.T) {
	f := newSummaryFixture(t)
	testkit.WantAllocs(t, "Poll", 0, func() { f.s.Poll() })
}

// TestTypedNilsInASourceAreSkipped: a Source holding a nil pointer of a
// known type is not read (its Stats would panic AddSource, Flush and
// Poll): it is counted as skipped.
func TestTypedNilsInASourceAreSkipped(t *testing.T) {
	f := newSummaryFixture(t)
	f.s.AddSource(mapSource{"nil": (*circuitbreaker.Breaker)(nil), "shed": (*shed.Shedder)(nil)})
	f.s.Flush()
	equal(t, f.c.take(), `level=INFO msg="rampart: rejections" interval=0s skipped=2`)
	f.tk.Advance(10 * time.Second)
	if !f.s.Poll() {
		t.Fatal("Poll found no flush due")
	}
	equal(t, f.c.take(), `level=INFO msg="rampart: rejections" interval=10s skipped=2`)
}

// TestOneNameTwiceIsSummedUnderIt: two instances of one kind under one
// name (one added, one a Source's; or two Sources') are one count under
// that name: a record never holds a key twice (a JSON decoder would keep
// one of the two, losing the other's rejections).
func TestOneNameTwiceIsSummedUnderIt(t *testing.T) {
	var buf bytes.Buffer
	tk := rampart.NewManualTicker(0)
	s := must(NewSummary(SummaryConfig{Logger: slog.New(slog.NewJSONHandler(&buf, nil)), Ticker: tk}))
	a := must(circuitbreaker.New(circuitbreaker.Config{Ticker: tk}))
	b := must(circuitbreaker.New(circuitbreaker.Config{Ticker: tk}))
	c := must(circuitbreaker.New(circuitbreaker.Config{Ticker: tk}))
	if err := s.Add("api", a); err != nil {
		t.Fatal(err)
	}
	s.AddSource(mapSource{"api": b})
	s.AddSource(mapSource{"api": c})
	for i, br := range []*circuitbreaker.Breaker{a, b, c} {
		br.TransitionTo(circuitbreaker.ForcedOpen)
		for range i + 1 {
			br.Acquire()
		}
	}
	s.Flush()
	if n := strings.Count(buf.String(), `"api"`); n != 1 {
		t.Errorf("record %s: the key api %d times, want once", bytes.TrimSpace(buf.Bytes()), n)
	}
	var rec struct {
		Circuitbreaker struct{ Rejected map[string]uint64 } `json:"circuitbreaker"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if n := rec.Circuitbreaker.Rejected["api"]; n != 6 {
		t.Errorf("record %s: api=%d, want the 1+2+3 rejections of the three breakers", bytes.TrimSpace(buf.Bytes()), n)
	}
}

// TestFlushesAtAnEarlierReadingNeverMoveTheIntervalBack: a Poll that read
// the clock before a concurrent Flush and flushes after it logs an
// interval of 0, not a negative one, and the next record's interval runs
// from the later reading.
func TestFlushesAtAnEarlierReadingNeverMoveTheIntervalBack(t *testing.T) {
	f := newSummaryFixture(t)
	p := must(f.breaker.Acquire())
	f.breaker.Release(p, rampart.Failure) // open for an hour
	f.breaker.Acquire()
	f.s.flush(int64(20 * time.Second)) // the concurrent Flush, which took the lock first
	f.breaker.Acquire()
	f.s.flush(int64(15 * time.Second)) // the Poll, at its earlier reading
	f.breaker.Acquire()
	f.s.flush(int64(30 * time.Second))
	equal(t, f.c.take(),
		`level=INFO msg="rampart: rejections" interval=20s circuitbreaker.rejected.api=1`,
		`level=INFO msg="rampart: rejections" interval=0s circuitbreaker.rejected.api=1`,
		`level=INFO msg="rampart: rejections" interval=10s circuitbreaker.rejected.api=1`)
}
