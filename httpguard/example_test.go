package httpguard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/rampart-go/rampart/bulkhead"
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
