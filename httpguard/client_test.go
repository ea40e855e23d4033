package httpguard_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// bodyTracker wraps a transport and records whether each response body it
// returned was closed.
type bodyTracker struct {
	base   http.RoundTripper
	mu     sync.Mutex
	bodies []*trackedBody
}

type trackedBody struct {
	io.ReadCloser
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return b.ReadCloser.Close() }

func (bt *bodyTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := bt.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	tb := &trackedBody{ReadCloser: resp.Body}
	resp.Body = tb
	bt.mu.Lock()
	bt.bodies = append(bt.bodies, tb)
	bt.mu.Unlock()
	return resp, nil
}

// open returns how many tracked bodies are still open.
func (bt *bodyTracker) open() int {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	n := 0
	for _, b := range bt.bodies {
		if !b.closed.Load() {
			n++
		}
	}
	return n
}

// clientFor returns a client sending through a guarded transport over a
// fresh http.Transport (closed at cleanup), and the body tracker.
func clientFor(t *testing.T, cfg httpguard.ClientConfig) (*http.Client, *bodyTracker) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	bt := &bodyTracker{base: tr}
	cfg.Base = bt
	rt, err := httpguard.NewTransport(cfg)
	require.NoError(t, err)
	return &http.Client{Transport: rt}, bt
}

func fastRetry(t testing.TB, mod func(*retry.Config)) *retry.Policy {
	cfg := retry.Config{MaxAttempts: 4, Backoff: retry.Constant, BaseDelay: time.Microsecond}
	if mod != nil {
		mod(&cfg)
	}
	r, err := retry.New(cfg)
	require.NoError(t, err)
	return r
}

// flaky answers 503 (with Retry-After: 0) to the first n requests, then 200
// with the request body echoed.
func flaky(n int32, hits *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if hits.Add(1) <= n {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(append([]byte("ok:"), body...))
	})
}

func TestClientRetriesIdempotentAndClosesDiscardedBodies(t *testing.T) {
	leakCheck(t)
	var hits atomic.Int32
	url, _ := serve(t, flaky(2, &hits))
	c, bt := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)})})
	resp, body := get(t, c, url)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok:", body)
	require.EqualValues(t, 3, hits.Load())
	require.Zero(t, bt.open(), "every response body was closed")
}

func TestClientReturnsLastResponseWhenRetriesGiveUp(t *testing.T) {
	leakCheck(t)
	var hits atomic.Int32
	url, _ := serve(t, flaky(100, &hits))
	c, bt := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)})})
	resp, body := get(t, c, url)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "busy\n", body, "the last response is readable")
	require.EqualValues(t, 4, hits.Load())
	require.Zero(t, bt.open())
}

func TestClientDoesNotRetryPostUnlessIdempotencyKey(t *testing.T) {
	leakCheck(t)
	var hits atomic.Int32
	url, _ := serve(t, flaky(1, &hits))
	c, bt := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)})})

	resp, err := c.Post(url, "text/plain", strings.NewReader("payload"))
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 1, hits.Load(), "POST is sent once")

	hits.Store(0)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader("payload"))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err = c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok:payload", string(b), "the body was replayed through GetBody")
	require.EqualValues(t, 2, hits.Load())
	require.Zero(t, bt.open())
}

func TestClientBodyWithoutGetBodyIsSentOnce(t *testing.T) {
	leakCheck(t)
	var hits atomic.Int32
	url, _ := serve(t, flaky(1, &hits))
	c, _ := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)})})
	req, err := http.NewRequest(http.MethodPut, url, io.NopCloser(strings.NewReader("x")))
	require.NoError(t, err)
	require.Nil(t, req.GetBody)
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.EqualValues(t, 1, hits.Load())
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
}

func (c *closeCounter) Close() error { c.closes.Add(1); return nil }

func TestClientRejectionReturnsErrorAndClosesRequestBody(t *testing.T) {
	leakCheck(t)
	tick := rampart.NewManualTicker(1)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick})
	require.NoError(t, err)
	require.True(t, rl.Allow()) // spend the only permit
	var hits atomic.Int32
	url, _ := serve(t, flaky(0, &hits))
	c, _ := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl})})
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, err := http.NewRequest(http.MethodPost, url, body)
	require.NoError(t, err)
	_, err = c.Do(req)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Zero(t, hits.Load())
	require.EqualValues(t, 1, body.closes.Load())
}

func TestParseRetryAfterForms(t *testing.T) {
	// Through the transport: an in-memory base answering with the header.
	now := time.Now()
	for _, c := range []struct {
		header string
		min    time.Duration
		max    time.Duration
	}{
		{"7", 7 * time.Second, 7 * time.Second},
		{now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 85 * time.Second, 91 * time.Second},
		{now.Add(-time.Hour).UTC().Format(http.TimeFormat), 0, 0},
		{"", -1, -1},
		{"soon", -1, -1},
		{"-3", -1, -1},
	} {
		var got time.Duration = -2
		p := mustPipeline(t, pipeline.Config{Retry: fastRetry(t, func(rc *retry.Config) {
			rc.MaxAttempts = 1
			rc.ShouldRetry = func(err error) bool {
				var se *httpguard.StatusError
				if errors.As(err, &se) {
					got = se.RetryAfter()
				}
				return false
			}
		})})
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Pipeline: p, Base: memTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.header != "" {
				w.Header().Set("Retry-After", c.header)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})}})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.GreaterOrEqual(t, got, c.min, "%q", c.header)
		require.LessOrEqual(t, got, c.max, "%q", c.header)
	}
}

// memTransport serves requests in memory with h (no network, so it works
// inside a synctest bubble).
type memTransport struct{ h http.Handler }

func (m memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, r)
	if r.Body != nil {
		_ = r.Body.Close()
	}
	return rec.Result(), nil
}

func TestClientHonoursRetryAfterSecondsAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker() // inside the bubble: fake time
		var hits atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if hits.Add(1) == 1 {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		rp, err := retry.New(retry.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, Ticker: tick})
		require.NoError(t, err)
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{
			Pipeline: mustPipeline(t, pipeline.Config{Retry: rp}),
			Base:     memTransport{h},
		})
		require.NoError(t, err)
		start := time.Now()
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 2*time.Second, time.Since(start), "waited exactly the Retry-After")

		// A Retry-After past the context's deadline: give up at once with
		// the response.
		hits.Store(0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start = time.Now()
		resp, err = rt.RoundTrip(httptest.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Zero(t, time.Since(start))
		require.EqualValues(t, 1, hits.Load())
	})
}

func TestClientHedgesIdempotentRequests(t *testing.T) {
	leakCheck(t)
	var hits atomic.Int32
	url, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			<-r.Context().Done() // the slow first attempt, cancelled when the hedge wins
			return
		}
		_, _ = io.WriteString(w, "fast")
	}))
	tick := rampart.NewNanoTicker()
	hg, err := hedge.New(hedge.Config{Delay: 5 * time.Millisecond, Ticker: tick, Tick: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hg.Close() })
	c, bt := clientFor(t, httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Hedge: hg, Idempotent: true})})
	resp, body := get(t, c, url)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "fast", body)
	require.EqualValues(t, 2, hits.Load())
	require.Equal(t, uint64(1), hg.Stats().HedgesWon)
	require.Zero(t, bt.open())

	// A POST is not hedged.
	hits.Store(1) // every request is fast now
	resp, err = c.Post(url, "text/plain", bytes.NewReader(nil))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 2, hits.Load())
}

func TestClientBreakerPerHost(t *testing.T) {
	leakCheck(t)
	tick := rampart.NewManualTicker(1)
	var downHits, upHits atomic.Int32
	down, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		downHits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	up, _ := serve(t, flaky(0, &upHits))
	c, bt := clientFor(t, httpguard.ClientConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick}),
		NewHostBreaker: func(host string) (*circuitbreaker.Breaker, error) {
			return circuitbreaker.New(circuitbreaker.Config{Name: host, Mode: circuitbreaker.Consecutive,
				ConsecutiveFailures: 2, OpenDuration: time.Minute, Ticker: tick})
		},
	})
	for range 2 {
		resp, _ := get(t, c, down)
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	}
	_, err := c.Get(down)
	require.ErrorIs(t, err, circuitbreaker.ErrOpen)
	require.EqualValues(t, 2, downHits.Load())
	resp, _ := get(t, c, up)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the other host has its own breaker")
	require.Zero(t, bt.open())
}

func TestClientAttemptTimeoutBoundsTheBody(t *testing.T) {
	leakCheck(t)
	url, _ := serve(t, hello)
	c, _ := clientFor(t, httpguard.ClientConfig{AttemptTimeout: time.Minute})
	resp, body := get(t, c, url)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "hello", body, "the body is readable after RoundTrip returned")
}

func TestClientRefusesDeadlineTimeout(t *testing.T) {
	to, err := timeout.New(timeout.Config{Duration: time.Second})
	require.NoError(t, err)
	_, err = httpguard.NewTransport(httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Timeout: to})})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
}
