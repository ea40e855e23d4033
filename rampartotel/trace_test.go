package rampartotel

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/timeout"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// limitedPipeline is a pipeline of a rate limit of one call per second
// (burst 1) and a 1 s soft timeout (judged by tk alone), on tk.
func limitedPipeline(t testing.TB, tk rampart.Ticker) *pipeline.Pipeline {
	t.Helper()
	return must(pipeline.New(pipeline.Config{
		Ticker:    tk,
		RateLimit: must(ratelimit.New(ratelimit.Config{Name: "rl", Ticker: tk, Rate: 1, Burst: 1})),
		Timeout:   must(timeout.New(timeout.Config{Name: "to", Ticker: tk, Duration: time.Second, Mode: timeout.ModeSoft})),
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
// rejection under a span that is not recording.
func TestDoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	tk := rampart.NewManualTicker(1e12)
	p := must(pipeline.New(pipeline.Config{Ticker: tk,
		RateLimit: must(ratelimit.New(ratelimit.Config{Ticker: tk, Rate: 1, Burst: 1}))}))
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
}
