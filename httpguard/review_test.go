package httpguard_test

import (
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

// A huge DefaultRetryAfter (which NewHandler accepts) must not wrap around
// to "Retry-After: 1" when rounded up to whole seconds.
func TestServerHugeRetryAfterDoesNotWrap(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	require.True(t, bh.TryEnter()) // the bulkhead is full
	defer bh.Exit()
	h, err := httpguard.NewHandler(http.NotFoundHandler(), httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Bulkhead: bh}),
		DefaultRetryAfter: time.Duration(math.MaxInt64),
	})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "9223372037", w.Header().Get("Retry-After"))
}

// A delay-seconds Retry-After too large for int64 is the longest hint (the
// retry then stops with HintTooLong), not an invalid one that the retry
// ignores and answers with its short backoff.
func TestClientRetryAfterBeyondInt64IsHuge(t *testing.T) {
	var hits atomic.Int32
	rp, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Constant, BaseDelay: time.Microsecond})
	require.NoError(t, err)
	rt, err := httpguard.NewTransport(httpguard.ClientConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Retry: rp}),
		Base: memTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Retry-After", "99999999999999999999")
			w.WriteHeader(http.StatusServiceUnavailable)
		})},
	})
	require.NoError(t, err)
	resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.EqualValues(t, 1, hits.Load(), "retried despite a Retry-After of ~3e12 years")
}

// A streaming handler behind the middleware still finds an http.Flusher (the
// usual `w.(http.Flusher)` check), and a flush before any write counts as
// the implicit 200.
func TestServerHandlerCanFlush(t *testing.T) {
	var flushed bool
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if ok {
			f.Flush()
			flushed = true
		}
	}), httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{})})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.True(t, flushed, "the handler saw no http.Flusher")
	require.True(t, w.Flushed)
	require.Equal(t, http.StatusOK, w.Code)
}

// A 1xx TimeoutStatus cannot be a final response (net/http would send it as
// an informational header followed by an implicit 200): NewHandler refuses
// it.
func TestServerRefusesInformationalTimeoutStatus(t *testing.T) {
	_, err := httpguard.NewHandler(http.NotFoundHandler(), httpguard.ServerConfig{
		Pipeline:      mustPipeline(t, pipeline.Config{}),
		TimeoutStatus: http.StatusEarlyHints,
	})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
}

// A handler that takes over the connection (a WebSocket upgrade) through the
// usual `w.(http.Hijacker)` check still can behind the middleware.
func TestServerHandlerCanHijack(t *testing.T) {
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "no hijacker", http.StatusInternalServerError)
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = buf.Flush()
	}), httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{})})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "hijacked", string(body))
}
