package rampartotel

import (
	"context"
	"errors"
	"github.com/rampart-go/rampart/observe/observetest"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// limitedPipeline is a pipeline of a rate limit of one call per second
// (burst 1) and a 1 s soft timeout (judged by tk alone), on tk.

// errBoom is the error of the functions that fail.
var errBoom = errors.New("boom")

func limitedPipeline(t testing.TB, tk rampart.Ticker) *pipeline.Pipeline {
	t.Helper()
	return observetest.Must(pipeline.New(pipeline.Config{
		Ticker:    tk,
		RateLimit: observetest.Must(ratelimit.New(ratelimit.Config{Name: "rl", Ticker: tk, Rate: 1, Burst: 1})),
		Timeout:   observetest.Must(timeout.New(timeout.Config{Name: "to", Ticker: tk, Duration: time.Second, Mode: timeout.ModeSoft})),
	}))
}

func recordingSpan(t *testing.T) (context.Context, func() []sdktrace.Event) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("test").Start(context.Background(), "call")
	return ctx, func() []sdktrace.Event {
		span.End()
		ended := rec.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans ended, want 1", len(ended))
		}
		return ended[0].Events()
	}
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// TestDoAddsASpanEventOnRejectionAndTimeout: a call that succeeds adds no
// event; a rate-limit rejection adds rampart.rejected with the policy, the
// attempts and the Retry-After hint; a call past its timeout adds
// rampart.timed_out. Do returns what p.Do would.
func TestDoAddsASpanEventOnRejectionAndTimeout(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	p := limitedPipeline(t, tk)
	ctx, events := recordingSpan(t)

	if err := Do(ctx, p, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := Do(ctx, p, func(context.Context) error { return nil })
	if !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("second call: %v, want ErrLimited", err)
	}
	tk.Advance(time.Second)
	o := Try(ctx, p, func(context.Context) error { tk.Advance(2 * time.Second); return nil })
	if o.Code != pipeline.TimedOut {
		t.Fatalf("third call: %v, want timed out", o.Code)
	}

	evs := events()
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2: %+v", len(evs), evs)
	}
	if evs[0].Name != EventRejected {
		t.Errorf("first event %q, want %q", evs[0].Name, EventRejected)
	}
	a := attrMap(evs[0].Attributes)
	if a[attrPolicy] != "ratelimit" || a[attrAttempts] != int64(1) || a[attrRetryAfter] != 1.0 || a[attrError] != err.Error() {
		t.Errorf("rejection event attributes %v", a)
	}
	if evs[1].Name != EventTimedOut || attrMap(evs[1].Attributes)[attrPolicy] != "timeout" {
		t.Errorf("second event %q %v, want %q by timeout", evs[1].Name, evs[1].Attributes, EventTimedOut)
	}
}

// breakerPipeline is a pipeline of a breaker named "payments" that trips
// after failures consecutive failures, stays open 1 s and closes on one
// successful probe, on tk.
func breakerPipeline(t testing.TB, tk rampart.Ticker, failures int) (*pipeline.Pipeline, *circuitbreaker.Breaker) {
	t.Helper()
	cb := observetest.Must(circuitbreaker.New(circuitbreaker.Config{Name: "payments", Ticker: tk,
		Mode: circuitbreaker.Consecutive, ConsecutiveFailures: failures,
		OpenDuration: time.Second, HalfOpenProbes: 1, HalfOpenSuccesses: 1}))
	return observetest.Must(pipeline.New(pipeline.Config{Ticker: tk, Breaker: cb})), cb
}

func eventNames(evs []sdktrace.Event) []string {
	names := make([]string, len(evs))
	for i, e := range evs {
		names[i] = e.Name
	}
	return names
}

// TestDoAddsTheBreakerTransitionToTheSpanOfTheCallThatMadeIt: the call
// whose failure trips the breaker gets rampart.circuitbreaker.transition
// (name, closed→open), the failure before it and the rejection after it
// get none (the rejection its rampart.rejected), and the first call after
// the open time, whose probe closes the breaker, gets open→closed: the
// states before and after the call, not the half-open step between.
func TestDoAddsTheBreakerTransitionToTheSpanOfTheCallThatMadeIt(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	p, _ := breakerPipeline(t, tk, 2)
	fail := func(context.Context) error { return errBoom }
	ok := func(context.Context) error { return nil }

	for i, tc := range []struct {
		fn        func(context.Context) error
		want      []string
		from, to  string
		advanceBy time.Duration
		wantErrIs error
	}{
		{fn: fail, wantErrIs: errBoom},
		{fn: fail, wantErrIs: errBoom, want: []string{EventBreakerTransition}, from: "closed", to: "open"},
		{fn: ok, wantErrIs: circuitbreaker.ErrOpen, want: []string{EventRejected}},
		{fn: ok, advanceBy: time.Second, want: []string{EventBreakerTransition}, from: "open", to: "closed"},
		{fn: ok},
	} {
		tk.Advance(tc.advanceBy)
		ctx, events := recordingSpan(t)
		err := Do(ctx, p, tc.fn)
		if !errors.Is(err, tc.wantErrIs) || (tc.wantErrIs == nil && err != nil) {
			t.Fatalf("call %d: %v, want %v", i, err, tc.wantErrIs)
		}
		evs := events()
		if got := eventNames(evs); len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Fatalf("call %d: events %v, want %v", i, got, tc.want)
		}
		if tc.from != "" {
			a := attrMap(evs[0].Attributes)
			if a[attrName] != "payments" || a[attrStateFrom] != tc.from || a[attrStateTo] != tc.to || len(a) != 3 {
				t.Errorf("call %d: transition attributes %v, want payments %s→%s", i, a, tc.from, tc.to)
			}
		}
	}
}

// TestTryAddsTheTransitionBeforeTheOutcomeEvent: a call that times out,
// a failure that trips the breaker, gets the transition first, then
// rampart.timed_out.
func TestTryAddsTheTransitionBeforeTheOutcomeEvent(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	cb := observetest.Must(circuitbreaker.New(circuitbreaker.Config{Name: "payments", Ticker: tk,
		Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1}))
	p := observetest.Must(pipeline.New(pipeline.Config{Ticker: tk, Breaker: cb,
		Timeout: observetest.Must(timeout.New(timeout.Config{Ticker: tk, Duration: time.Second, Mode: timeout.ModeSoft}))}))
	ctx, events := recordingSpan(t)
	o := Try(ctx, p, func(context.Context) error { tk.Advance(2 * time.Second); return nil })
	if o.Code != pipeline.TimedOut {
		t.Fatalf("outcome %v, want timed out", o.Code)
	}
	if got := eventNames(events()); len(got) != 2 || got[0] != EventBreakerTransition || got[1] != EventTimedOut {
		t.Errorf("events %v, want the transition then %s", got, EventTimedOut)
	}
}

// TestAPanicInFnStillGetsTheTransition: a panic is recorded as the
// breaker's failure; the call that panicked gets the transition it caused,
// and the panic goes on unchanged.
func TestAPanicInFnStillGetsTheTransition(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	p, cb := breakerPipeline(t, tk, 1)
	ctx, events := recordingSpan(t)
	func() {
		defer func() {
			if r := recover(); r != errBoom {
				t.Errorf("recovered %v, want errBoom", r)
			}
		}()
		_ = Do(ctx, p, func(context.Context) error { panic(errBoom) })
	}()
	if cb.State() != circuitbreaker.Open {
		t.Fatalf("breaker %v, want open", cb.State())
	}
	evs := events()
	if got := eventNames(evs); len(got) != 1 || got[0] != EventBreakerTransition {
		t.Fatalf("events %v, want the transition", got)
	}
	if a := attrMap(evs[0].Attributes); a[attrStateFrom] != "closed" || a[attrStateTo] != "open" {
		t.Errorf("transition attributes %v", a)
	}
}

// TestATransitionByAnotherCallDuringThisOneIsAttributedToIt: the readings
// are the state before and after the call, so a transition made by
// another caller while this call runs (here, a manual one inside fn) is on
// this call's span too, as the docs say.
func TestATransitionByAnotherCallDuringThisOneIsAttributedToIt(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	p, cb := breakerPipeline(t, tk, 5)
	ctx, events := recordingSpan(t)
	if err := Do(ctx, p, func(context.Context) error { cb.TransitionTo(circuitbreaker.ForcedOpen); return nil }); err != nil {
		t.Fatal(err)
	}
	evs := events()
	if got := eventNames(evs); len(got) != 1 || got[0] != EventBreakerTransition {
		t.Fatalf("events %v, want the transition", got)
	}
	if a := attrMap(evs[0].Attributes); a[attrStateFrom] != "closed" || a[attrStateTo] != "forced-open" {
		t.Errorf("transition attributes %v", a)
	}
}

// TestDoAddsTheShedderTransitionToTheCallThatSampledIt: the call whose
// admission samples the signals over the threshold (the shedder engages)
// gets rampart.shed.transition with rampart.shed.overloaded true; the
// calls before and after it get none.
func TestDoAddsTheShedderTransitionToTheCallThatSampledIt(t *testing.T) {
	tk := rampart.NewManualTicker(1e12)
	var latency time.Duration
	sh := observetest.Must(shed.New(shed.Config{Name: "cpu", Ticker: tk, SampleInterval: time.Millisecond,
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) { s.SchedLatency, s.CPU, s.Runnable = latency, -1, -1 })}))
	p := observetest.Must(pipeline.New(pipeline.Config{Ticker: tk, Shed: sh}))
	ok := func(context.Context) error { return nil }
	for i, tc := range []struct {
		latency time.Duration
		events  int
	}{{0, 0}, {time.Second, 1}, {time.Second, 0}} {
		latency = tc.latency
		tk.Advance(time.Millisecond)
		ctx, events := recordingSpan(t)
		_ = Do(ctx, p, ok)
		var got []sdktrace.Event
		for _, e := range events() {
			if e.Name == EventShedTransition {
				got = append(got, e)
			}
		}
		if len(got) != tc.events {
			t.Fatalf("call %d: %d shed transitions, want %d (overloaded %v)", i, len(got), tc.events, sh.Overloaded())
		}
		if len(got) == 1 {
			if a := attrMap(got[0].Attributes); a[attrOverloaded] != true || len(a) != 1 {
				t.Errorf("call %d: attributes %v, want overloaded true", i, a)
			}
		}
	}
}

// TestOnRejectedAddsAnEventToTheRequestSpan: the httpguard listener adds
// the event to the request's span and writes the status (or calls next).
func TestOnRejectedAddsAnEventToTheRequestSpan(t *testing.T) {
	ctx, events := recordingSpan(t)
	o := pipeline.Outcome{Code: pipeline.Rejected, Policy: pipeline.Bulkhead, Attempts: 1, Err: errBoom}
	w := httptest.NewRecorder()
	OnRejected(nil)(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx), http.StatusServiceUnavailable, o)
	if w.Code != http.StatusServiceUnavailable || w.Body.String() != "Service Unavailable: boom\n" {
		t.Errorf("response %d %q", w.Code, w.Body.String())
	}
	called := false
	OnRejected(func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
		called = true
		w.WriteHeader(status)
	})(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx), http.StatusTooManyRequests, o)
	if !called {
		t.Error("next not called")
	}
	evs := events()
	if len(evs) != 2 || evs[0].Name != EventRejected || attrMap(evs[0].Attributes)[attrPolicy] != "bulkhead" {
		t.Errorf("events %+v", evs)
	}
}

// TestDoAllocs: Do allocates nothing more than p.Do, on success and on a
// rejection under a span that is not recording, and through a pipeline
// with a breaker under a recording span whose calls change no state.
func TestDoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	tk := rampart.NewManualTicker(1e12)
	p := observetest.Must(pipeline.New(pipeline.Config{Ticker: tk,
		RateLimit: observetest.Must(ratelimit.New(ratelimit.Config{Ticker: tk, Rate: 1, Burst: 1}))}))
	ctx := context.Background()
	calls := 0
	ok := testing.AllocsPerRun(100, func() {
		tk.Advance(time.Second)
		_ = Do(ctx, p, func(context.Context) error { calls++; return nil }) // a closure that captures
	})
	rejected := testing.AllocsPerRun(100, func() {
		_ = Do(ctx, p, func(context.Context) error { calls++; return nil })
	})
	if ok != 0 || rejected != 0 {
		t.Errorf("Do allocates %v per admitted call, %v per rejection; want 0", ok, rejected)
	}
	if calls != 101 {
		t.Errorf("fn ran %d times, want 101 (one per admitted call)", calls)
	}

	pb, _ := breakerPipeline(t, tk, 5)
	rctx, _ := recordingSpan(t)
	for name, ctx := range map[string]context.Context{"not recording": ctx, "recording": rctx} {
		if a := testing.AllocsPerRun(100, func() {
			_ = Do(ctx, pb, func(context.Context) error { calls++; return nil })
		}); a != 0 {
			t.Errorf("Do through a breaker, span %s: %v allocations per call, want 0", name, a)
		}
	}
}
