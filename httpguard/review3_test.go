package httpguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/internal/watchdog"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// A panicking ClientConfig.RetryStatus (or IsFailure) runs inside the
// attempt, after the response was tracked: the panic leaves RoundTrip
// before c.finish, so the response body (and its connection) is never
// closed. With hedging, c.done is never set either, so late hedged
// responses are kept open for good. Expected: RoundTrip closes every
// response it does not return on the panic path too (defer finish).
func TestReview3ClientPanickingClassifierClosesBody(t *testing.T) {
	bt := &bodyTracker{base: memTransport{hello}}
	rt, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base:        bt,
		RetryStatus: func(int) bool { panic("classifier") },
	})
	require.NoError(t, err)
	require.PanicsWithValue(t, "classifier", func() {
		_, _ = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
	})
	require.Equal(t, 0, bt.open(), "the response body of the panicking attempt is still open")
}

// When the timeout answers for a handler that wrote nothing, the headers the
// handler had already set on w (caching, encoding, validators, cookies) go
// out with the 503: a "Cache-Control: public, max-age=3600" makes shared
// caches keep the error for an hour, a "Content-Encoding: gzip" makes the
// plain-text body undecodable. http.TimeoutHandler avoids it by buffering
// the handler's headers. Expected: the timeout response carries none of the
// handler's representation headers.
func TestReview3ServerTimeoutDropsHandlerHeaders(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	wd := watchdog.New(watchdog.Config{Clock: tick, Manual: true})
	defer wd.Close()
	to, err := timeout.New(timeout.Config{Duration: time.Second, Watchdog: wd})
	require.NoError(t, err)
	defer to.Close()
	overrun := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Set-Cookie", "session=abc")
		tick.Advance(2 * time.Second)
		wd.Sweep()
		<-r.Context().Done()
	})
	h, err := httpguard.NewHandler(overrun, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Timeout: to})})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	for _, k := range []string{"Content-Encoding", "ETag", "Set-Cookie"} {
		require.Empty(t, rec.Header().Get(k), "the 503 carries the handler's %s", k)
	}
	require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))

	// What a middleware around the guard set before it ran stays: an
	// on-the-fly compressor's Content-Encoding, a session cookie.
	rec = httptest.NewRecorder()
	rec.Header().Set("Content-Encoding", "br")
	rec.Header().Set("Set-Cookie", "outer=1")
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "br", rec.Header().Get("Content-Encoding"))
	require.Equal(t, []string{"outer=1"}, rec.Header().Values("Set-Cookie"))
	require.Empty(t, rec.Header().Get("ETag"))
}

// Guard (passes): a server pipeline's retry is ignored, so a handler that
// answers 503 runs once, and its 503 is recorded by the breaker as a
// failure exactly once.
func TestReview3ServerIgnoresRetry(t *testing.T) {
	var hits atomic.Int32
	rp, err := retry.New(retry.Config{MaxAttempts: 5, Backoff: retry.Constant, BaseDelay: time.Nanosecond})
	require.NoError(t, err)
	cb, err := circuitbreaker.New(circuitbreaker.Config{})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}), httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: rp, Breaker: cb})})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.EqualValues(t, 1, hits.Load())
	require.Equal(t, uint64(0), rp.Stats().Retries)
	require.EqualValues(t, 1, cb.Stats().WindowFailures)
}

// Guard (passes): a client whose request context is already cancelled
// sends nothing and closes the request body.
func TestReview3ClientCancelledBeforeSend(t *testing.T) {
	var hits atomic.Int32
	rt, err := httpguard.NewTransport(httpguard.ClientConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)}),
		Base: memTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
		})},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := &closeCounter{Reader: strings.NewReader("x")}
	req := httptest.NewRequest(http.MethodPut, "http://x/", nil).WithContext(ctx)
	req.Body = body
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err)
	require.EqualValues(t, 0, hits.Load())
	require.EqualValues(t, 1, body.closes.Load())
}

// TestReview3NilHostBreakerIsAnError: a NewHostBreaker that returns neither a
// breaker nor an error is a configuration mistake reported on the request,
// not a route silently built without a breaker; nothing is sent.
func TestReview3NilHostBreakerIsAnError(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c, _ := clientFor(t, httpguard.ClientConfig{
		Pipeline:       mustPipeline(t, pipeline.Config{}),
		NewHostBreaker: func(string) (*circuitbreaker.Breaker, error) { return nil, nil },
	})
	resp, err := c.Get(srv.URL)
	if resp != nil {
		_ = resp.Body.Close()
	}
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	require.Zero(t, hits.Load())
}
