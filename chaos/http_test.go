package chaos_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/internal/testkit"
)

// countingTransport answers 200 and counts the requests it was sent.
type countingTransport struct{ sent atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// trackedBody records whether it was closed.
type trackedBody struct {
	io.Reader
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func newRequest(t *testing.T, ctx context.Context) (*http.Request, *trackedBody) {
	t.Helper()
	body := &trackedBody{Reader: strings.NewReader("payload")}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://db.internal/q", body)
	if err != nil {
		t.Fatal(err)
	}
	return req, body
}

func TestRoundTripperInjectsTransportError(t *testing.T) {
	next := &countingTransport{}
	inj := mustNew(t, chaos.Config{ErrorRate: 1})
	client := &http.Client{Transport: inj.RoundTripper(next)}
	req, body := newRequest(t, context.Background())
	resp, err := client.Do(req)
	if resp != nil || !errors.Is(err, chaos.ErrInjected) {
		t.Fatalf("got %v, %v; want a transport error wrapping ErrInjected", resp, err)
	}
	if next.sent.Load() != 0 || !body.closed {
		t.Errorf("sent %d, body closed %v; want unsent with its body closed", next.sent.Load(), body.closed)
	}
}

func TestRoundTripperSubstitutesResponse(t *testing.T) {
	next := &countingTransport{}
	inj := mustNew(t, chaos.Config{ResultRate: 1, RetryAfter: 1500 * time.Millisecond})
	req, body := newRequest(t, context.Background())
	resp, err := inj.RoundTripper(next).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 503 || resp.Status != "503 Service Unavailable" || resp.Header.Get("Retry-After") != "2" || resp.Request != req {
		t.Errorf("got %q, Retry-After %q; want 503 with Retry-After 2 (1.5 s rounded up)", resp.Status, resp.Header.Get("Retry-After"))
	}
	if b, _ := io.ReadAll(resp.Body); len(b) != 0 {
		t.Errorf("body %q, want empty", b)
	}
	if next.sent.Load() != 0 || !body.closed {
		t.Errorf("sent %d, body closed %v; want unsent with its body closed", next.sent.Load(), body.closed)
	}

	inj = mustNew(t, chaos.Config{ResultRate: 1, Status: http.StatusTooManyRequests})
	resp, err = inj.RoundTripper(next).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	if err != nil || resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" {
		t.Errorf("got %v, %v; want 429 without Retry-After", resp, err)
	}
}

func TestRoundTripperLatencyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		next := &countingTransport{}
		inj := mustNew(t, chaos.Config{LatencyRate: 1, Latency: time.Second})
		rt := inj.RoundTripper(next)

		start := time.Now()
		req, _ := newRequest(t, context.Background())
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 || time.Since(start) != time.Second || next.sent.Load() != 1 {
			t.Fatalf("got %v, %v after %v; want 200 after 1s", resp, err, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start = time.Now()
		req, body := newRequest(t, ctx)
		resp, err = rt.RoundTrip(req)
		if resp != nil || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 100*time.Millisecond {
			t.Fatalf("got %v, %v after %v; want DeadlineExceeded after 100ms", resp, err, time.Since(start))
		}
		if next.sent.Load() != 1 || !body.closed {
			t.Errorf("sent %d, body closed %v; want unsent with its body closed", next.sent.Load(), body.closed)
		}
	})
}

func TestRoundTripperPanicClosesBody(t *testing.T) {
	inj := mustNew(t, chaos.Config{PanicRate: 1})
	req, body := newRequest(t, context.Background())
	panicked, _ := testkit.Run(func() { _, _ = inj.RoundTripper(&countingTransport{}).RoundTrip(req) })
	if panicked != chaos.ErrInjectedPanic || !body.closed {
		t.Errorf("panicked %v, body closed %v", panicked, body.closed)
	}
}

func TestRoundTripperDisabledPassesThrough(t *testing.T) {
	next := &countingTransport{}
	inj := mustNew(t, chaos.Config{ErrorRate: 1, Disabled: true})
	resp, err := inj.RoundTripper(next).RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	if err != nil || resp.StatusCode != 200 || next.sent.Load() != 1 || inj.Stats().Calls != 0 {
		t.Errorf("got %v, %v, sent %d", resp, err, next.sent.Load())
	}
}

func okHandler(ran *int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { *ran++; _, _ = io.WriteString(w, "ok") })
}

func TestHandlerFaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        chaos.Config
		code       int
		retryAfter string
		ran        int
	}{
		{"none", chaos.Config{}, 200, "", 1},
		{"disabled", chaos.Config{ErrorRate: 1, Disabled: true}, 200, "", 1},
		{"error", chaos.Config{ErrorRate: 1}, 500, "", 0},
		{"substitute", chaos.Config{ResultRate: 1, RetryAfter: 3 * time.Second}, 503, "3", 0},
		{"substitute status", chaos.Config{ResultRate: 1, Status: 502}, 502, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := 0
			h := mustNew(t, tc.cfg).Handler(okHandler(&ran))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if rec.Code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter || ran != tc.ran {
				t.Errorf("got %d, Retry-After %q, ran %d; want %d, %q, %d", rec.Code, rec.Header().Get("Retry-After"), ran, tc.code, tc.retryAfter, tc.ran)
			}
			if tc.code == 500 && !strings.Contains(rec.Body.String(), chaos.ErrInjected.Error()) {
				t.Errorf("body %q, want the error's text", rec.Body.String())
			}
		})
	}
}

func TestHandlerNilNextIsDefaultServeMux(t *testing.T) {
	rec := httptest.NewRecorder()
	mustNew(t, chaos.Config{}).Handler(nil).ServeHTTP(rec, httptest.NewRequest("GET", "/chaos-test-unregistered", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("got %d, want DefaultServeMux's 404", rec.Code)
	}
}

func TestHandlerPanics(t *testing.T) {
	ran := 0
	h := mustNew(t, chaos.Config{PanicRate: 1}).Handler(okHandler(&ran))
	panicked, _ := testkit.Run(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) })
	if panicked != chaos.ErrInjectedPanic || ran != 0 {
		t.Errorf("panicked %v, ran %d", panicked, ran)
	}
}

func TestHandlerLatencyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ran := 0
		h := mustNew(t, chaos.Config{LatencyRate: 1, Latency: time.Second}).Handler(okHandler(&ran))

		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 || ran != 1 || time.Since(start) != time.Second {
			t.Fatalf("got %d, ran %d after %v; want 200 after 1s", rec.Code, ran, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start = time.Now()
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != http.StatusGatewayTimeout || ran != 1 || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("deadline: got %d, ran %d after %v; want 504 after 50ms", rec.Code, ran, time.Since(start))
		}

		ctx, cancel = context.WithCancel(context.Background())
		cancel()
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
		if rec.Code != http.StatusServiceUnavailable || ran != 1 {
			t.Fatalf("canceled: got %d, ran %d; want 503", rec.Code, ran)
		}
	})
}

// TestRoundTripperRetryAfterOfTheLargestDuration: the substituted response's
// Retry-After is rounded up to whole seconds without overflowing.
func TestRoundTripperRetryAfterOfTheLargestDuration(t *testing.T) {
	inj, err := chaos.New(chaos.Config{ResultRate: 1, RetryAfter: math.MaxInt64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := newRequest(t, context.Background())
	resp, err := inj.RoundTripper(&countingTransport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.Header.Get("Retry-After"), strconv.FormatInt(int64(math.MaxInt64/time.Second)+1, 10); got != want {
		t.Fatalf("Retry-After %q, want %q", got, want)
	}
}
