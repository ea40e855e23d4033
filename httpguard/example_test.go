package httpguard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
)

// Example protects a server with a rate limit and a concurrency limit, and
// calls it through a client transport that retries idempotent requests and
// honours Retry-After.
func Example() {
	rl, _ := ratelimit.New(ratelimit.Config{Rate: 0.001, Burst: 2}) // two requests, then 429
	bh, _ := bulkhead.New(bulkhead.Config{Max: 64})
	admission, _ := pipeline.New(pipeline.Config{RateLimit: rl, Bulkhead: bh})
	h, _ := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}), httpguard.ServerConfig{Pipeline: admission})
	srv := httptest.NewServer(h)
	defer srv.Close()

	// The client retries 429/502/503/504 for idempotent requests; here one
	// attempt only, to show the server's answer.
	rt, _ := retry.New(retry.Config{MaxAttempts: 1, MaxDelay: 5 * time.Second})
	client, _ := pipeline.New(pipeline.Config{Retry: rt})
	tr, _ := httpguard.NewTransport(httpguard.ClientConfig{Pipeline: client})
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	for range 3 {
		resp, err := c.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Values("Retry-After"))
	}
	// Output:
	// 200 []
	// 200 []
	// 429 [1000]
}

// ExampleStaticFallback serves a static page when the guard sheds a
// request, with the guard's 503 and Retry-After kept; the bulkhead still
// counts the rejection.
func ExampleStaticFallback() {
	bh, _ := bulkhead.New(bulkhead.Config{Max: 1})
	admission, _ := pipeline.New(pipeline.Config{Bulkhead: bh})
	busyPage, _ := httpguard.StaticFallback(httpguard.StaticFallbackConfig{
		Header: http.Header{"Content-Type": {"text/html; charset=utf-8"}},
		Body:   []byte("<h1>Busy</h1><p>Try again in a moment.</p>"),
	})
	h, _ := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}), httpguard.ServerConfig{Pipeline: admission, Fallback: busyPage})

	_ = bh.Acquire() // a slow request holds the only permit
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	bh.Release()
	fmt.Println(rec.Code, rec.Header().Get("Retry-After"), rec.Body.String(), bh.Stats().Rejected)
	// Output: 503 1 <h1>Busy</h1><p>Try again in a moment.</p> 1
}

// ExampleClientConfig_fallback answers from a cache while the breaker of
// the upstream is open: the caller gets a synthetic response, to close as
// any other.
func ExampleClientConfig_fallback() {
	cb, _ := circuitbreaker.New(circuitbreaker.Config{Name: "upstream"})
	p, _ := pipeline.New(pipeline.Config{Breaker: cb})
	tr, _ := httpguard.NewTransport(httpguard.ClientConfig{
		Pipeline: p,
		Fallback: func(req *http.Request, o pipeline.Outcome) (*http.Response, error) {
			h := http.Header{"Warning": {`110 - "Response is Stale"`}}
			return httpguard.SyntheticResponse(req, http.StatusOK, h, []byte("cached rates")), nil
		},
	})
	cb.TransitionTo(circuitbreaker.ForcedOpen)

	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://rates.internal/today", nil)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("Warning"), string(body), cb.Stats().Rejected)
	// Output: 200 110 - "Response is Stale" cached rates 1
}
