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
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/internal/testkit"
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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
	testkit.LeakCheck(t)
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

// statusOnce answers status (with a short body) to the first request, then
// 200; hits counts the requests.
func statusOnce(status int, hits *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			http.Error(w, http.StatusText(status), status)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
}

// By default the transient statuses are retried for an idempotent request
// (408, 429 and the 5xx but 501 and 505, as hashicorp/go-retryablehttp and
// Polly's standard resilience handler decide); the others are returned
// after one attempt, and a non-idempotent request is sent once whatever
// its status.
func TestClientDefaultRetryStatuses(t *testing.T) {
	for _, c := range []struct {
		status  int
		retried bool
	}{
		{http.StatusRequestTimeout, true}, {http.StatusTooManyRequests, true},
		{http.StatusInternalServerError, true}, {http.StatusBadGateway, true},
		{http.StatusServiceUnavailable, true}, {http.StatusGatewayTimeout, true},
		{http.StatusInsufficientStorage, true},
		{http.StatusNotImplemented, false}, {http.StatusHTTPVersionNotSupported, false},
		{http.StatusBadRequest, false}, {http.StatusNotFound, false}, {http.StatusConflict, false},
	} {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPost} {
			var hits atomic.Int32
			bt := &bodyTracker{base: memTransport{statusOnce(c.status, &hits)}}
			rt, err := httpguard.NewTransport(httpguard.ClientConfig{
				Pipeline: mustPipeline(t, pipeline.Config{Retry: fastRetry(t, nil)}),
				Base:     bt,
			})
			require.NoError(t, err)
			req, err := http.NewRequest(m, "http://x/", strings.NewReader("payload")) // GetBody set
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			want, code := int32(1), c.status
			if c.retried && m != http.MethodPost {
				want, code = 2, http.StatusOK
			}
			require.Equal(t, want, hits.Load(), "%s answered %d", m, c.status)
			require.Equal(t, code, resp.StatusCode, "%s answered %d", m, c.status)
			require.Zero(t, bt.open(), "%s answered %d", m, c.status)
		}
	}
}

// roundTripFunc is a Base made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// slowFirst is a Base whose first n attempts wait for their context to
// end (as http.Transport does) and whose later ones answer 200.
func slowFirst(n int32, hits *atomic.Int32) http.RoundTripper {
	ok := memTransport{hello}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if hits.Add(1) <= n {
			<-r.Context().Done()
			return nil, r.Context().Err()
		}
		return ok.RoundTrip(r)
	})
}

// An attempt that runs past AttemptTimeout is retried for an idempotent
// request (its error matches ErrAttemptTimeout, not
// context.DeadlineExceeded, which names the caller's deadline); the
// give-up error matches
// ErrAttemptTimeout and reads as a timeout; a non-idempotent request is
// sent once; the caller's own deadline is returned as it is, not retried.
func TestClientRetriesAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker()
		rp, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Constant, BaseDelay: time.Millisecond, Ticker: tick})
		require.NoError(t, err)
		var hits atomic.Int32
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{
			Pipeline:       mustPipeline(t, pipeline.Config{Retry: rp}),
			Base:           slowFirst(1, &hits),
			AttemptTimeout: time.Second,
		})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.EqualValues(t, 2, hits.Load())
		require.EqualValues(t, 1, rp.Stats().Retries)

		// Every attempt times out: the retries give up on the timeout.
		hits.Store(0)
		rt, err = httpguard.NewTransport(httpguard.ClientConfig{
			Pipeline:       mustPipeline(t, pipeline.Config{Retry: rp}),
			Base:           slowFirst(100, &hits),
			AttemptTimeout: time.Second,
		})
		require.NoError(t, err)
		_, err = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.ErrorIs(t, err, httpguard.ErrAttemptTimeout)
		require.ErrorIs(t, err, retry.ErrExhausted)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		to, ok := errors.AsType[interface {
			error
			Timeout() bool
		}](err)
		require.True(t, ok && to.Timeout())
		require.EqualValues(t, 3, hits.Load())

		// A POST is sent once.
		hits.Store(0)
		_, err = rt.RoundTrip(httptest.NewRequest(http.MethodPost, "http://x/", strings.NewReader("x")))
		require.ErrorIs(t, err, httpguard.ErrAttemptTimeout)
		require.EqualValues(t, 1, hits.Load())

		// The caller's deadline, before the attempt's: not retried.
		hits.Store(0)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err = rt.RoundTrip(httptest.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, httpguard.ErrAttemptTimeout)
		require.EqualValues(t, 1, hits.Load())
	})
}

// A response about to be retried has its (small) body read and closed
// before the retry's backoff, so its connection is not held during the
// wait; when the retries give up, the last response is still readable in
// full, a body longer than the drain limit included.
func TestClientClosesRetriedResponseBeforeBackoff(t *testing.T) {
	for _, size := range []int{0, 10, 4 << 10, 4<<10 + 1, 64 << 10} {
		body := strings.Repeat("x", size)
		var bt *bodyTracker
		var openAtRetry []int
		rp := fastRetry(t, func(c *retry.Config) {
			c.MaxAttempts = 3
			c.OnRetry = func(int, time.Duration, error) { openAtRetry = append(openAtRetry, bt.open()) }
		})
		bt = &bodyTracker{base: memTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, body)
		})}}
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Pipeline: mustPipeline(t, pipeline.Config{Retry: rp}), Base: bt})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, body, string(got), "size %d", size)
		require.Zero(t, bt.open(), "size %d", size)
		want := []int{0, 0}
		if size > 4<<10 {
			want = []int{1, 1} // too long to keep in memory: drained when the next attempt starts
		}
		require.Equal(t, want, openAtRetry, "size %d: bodies open when the retry's backoff starts", size)
	}
}

// slowBody is a response body whose bytes come only once release is closed
// (a server that sends a 503's headers, then its body slowly, or a
// streaming 429); it counts its closes.
type slowBody struct {
	release chan struct{}
	closes  atomic.Int32
	sent    bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	<-b.release
	if b.sent {
		return 0, io.EOF
	}
	b.sent = true
	return copy(p, "busy"), nil
}

func (b *slowBody) Close() error { b.closes.Add(1); return nil }

// The response of a retryable status that no retry follows (the last
// attempt, a status the retry's ShouldRetry refuses) is returned as from a
// plain transport: RoundTrip returns at its headers without reading its
// body, which is the base transport's own, untouched, readable in full and
// closed once, by the caller; the retried responses before it are closed.
func TestClientUnretriedResponseReturnedAtHeaders(t *testing.T) {
	for _, c := range []struct {
		name     string
		attempts int
		refuse   bool // ShouldRetry refuses every error
		want     int32
	}{
		{"only attempt", 1, false, 1},
		{"last of three", 3, false, 3},
		{"not retryable", 3, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow := &slowBody{release: make(chan struct{})}
				var attempts atomic.Int32
				bt := &bodyTracker{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					n := attempts.Add(1)
					if !c.refuse && int(n) < c.attempts {
						resp := memResponse(503, "retried")
						resp.Header.Set("Retry-After", "0")
						return resp, nil
					}
					return &http.Response{StatusCode: 503, Header: http.Header{}, Body: slow, Request: r}, nil
				})}
				rp, err := retry.New(retry.Config{MaxAttempts: c.attempts, Backoff: retry.Constant, BaseDelay: time.Microsecond,
					ShouldRetry: func(error) bool { return !c.refuse }})
				require.NoError(t, err)
				rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: bt, Pipeline: mustPipeline(t, pipeline.Config{Retry: rp})})
				require.NoError(t, err)
				done := make(chan *http.Response, 1)
				go func() {
					resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
					if err != nil {
						resp = nil
					}
					done <- resp
				}()
				synctest.Wait()
				var resp *http.Response
				select {
				case resp = <-done:
				default:
					close(slow.release)
					<-done
					t.Fatalf("RoundTrip did not return at the headers of its last response (attempts %d)", attempts.Load())
				}
				require.NotNil(t, resp)
				require.Equal(t, 503, resp.StatusCode)
				require.Equal(t, c.want, attempts.Load())
				require.Equal(t, 1, bt.open(), "only the returned response is open")
				require.Zero(t, slow.closes.Load(), "the returned body is not closed by the transport")
				close(slow.release)
				got, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.Equal(t, "busy", string(got))
				require.NoError(t, resp.Body.Close())
				require.Zero(t, bt.open())
				require.EqualValues(t, 1, slow.closes.Load(), "closed once")
			})
		})
	}
}

// A host breaker on another ticker than the pipeline's is a ConfigError
// naming the side that is off: the pipeline's policies built without a
// Ticker, or NewHostBreaker's breakers.
func TestClientHostBreakerTickerMismatchNamesTheComponent(t *testing.T) {
	a, b := rampart.NewManualTicker(1), rampart.NewManualTicker(1)
	newRetry := func(tk rampart.Ticker) *retry.Policy {
		return fastRetry(t, func(c *retry.Config) { c.Ticker = tk })
	}
	newLimiter := func(tk rampart.Ticker) *ratelimit.Limiter {
		rl, err := ratelimit.New(ratelimit.Config{Rate: 1e6, Burst: 10, Ticker: tk})
		require.NoError(t, err)
		return rl
	}
	for _, c := range []struct {
		name    string
		cfg     pipeline.Config
		breaker rampart.Ticker // nil: rampart.DefaultTicker()
		field   string         // "": no error
		reason  string
	}{
		{"retry without ticker", pipeline.Config{Retry: newRetry(nil)}, a, "Pipeline.Retry", "Config.Ticker is not set"},
		{"retry and limiter without ticker", pipeline.Config{Retry: newRetry(nil), RateLimit: newLimiter(nil)}, a, "Pipeline.Retry", "as do its RateLimit"},
		{"limiter without ticker", pipeline.Config{RateLimit: newLimiter(nil)}, a, "Pipeline.RateLimit", "Config.Ticker is not set"},
		{"breaker without ticker", pipeline.Config{Retry: newRetry(a)}, nil, "NewHostBreaker", "rampart.DefaultTicker() (its Config.Ticker is not set), not on the pipeline's Ticker (used by its Retry)"},
		{"pipeline ticker, breaker without", pipeline.Config{Ticker: a}, nil, "NewHostBreaker", "rampart.DefaultTicker()"},
		{"two manual tickers", pipeline.Config{Retry: newRetry(a), RateLimit: newLimiter(a)}, b, "NewHostBreaker", "a different Ticker than the pipeline's Ticker (used by its Retry, RateLimit)"},
		{"pipeline and breaker on another", pipeline.Config{Ticker: a}, b, "NewHostBreaker", "a different Ticker"},
		{"one ticker", pipeline.Config{Retry: newRetry(a)}, a, "", ""},
		{"both default", pipeline.Config{Retry: newRetry(nil)}, nil, "", ""},
		{"no policy reads the default", pipeline.Config{}, a, "", ""},
	} {
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{
			Pipeline: mustPipeline(t, c.cfg),
			Base:     memTransport{hello},
			NewHostBreaker: func(host string) (*circuitbreaker.Breaker, error) {
				return circuitbreaker.New(circuitbreaker.Config{Name: host, Ticker: c.breaker})
			},
		})
		require.NoError(t, err, c.name)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		if c.field == "" {
			require.NoError(t, err, c.name)
			require.NoError(t, resp.Body.Close())
			continue
		}
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, c.name)
		testkit.RequireConfigError(t, err, "httpguard", c.field)
		ce, _ := errors.AsType[*rampart.ConfigError](err)
		require.Contains(t, ce.Reason, c.reason, c.name)
		require.Contains(t, ce.Reason, `host "x"`, c.name)
	}
}

// Without a pipeline, breakers per host run on their own ticker: the
// transport's pipeline takes it (it held only the filled-in default).
func TestClientHostBreakerWithoutPipelineUsesItsTicker(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	var hits atomic.Int32
	rt, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base: memTransport{http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
		})},
		NewHostBreaker: func(host string) (*circuitbreaker.Breaker, error) {
			return circuitbreaker.New(circuitbreaker.Config{Name: host, Mode: circuitbreaker.Consecutive,
				ConsecutiveFailures: 1, OpenDuration: time.Minute, Ticker: tick})
		},
	})
	require.NoError(t, err)
	resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
	require.ErrorIs(t, err, circuitbreaker.ErrOpen)
	tick.Advance(time.Minute) // the breaker's open period passes on its own ticker
	resp, err = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 2, hits.Load())
}

// The adaptive limit classifies an attempt timeout as it classifies
// context.DeadlineExceeded (a drop by default), although the timeout's
// error no longer matches it.
func TestClientAttemptTimeoutClassifiedAsDeadlineByAdaptive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewNanoTicker()
		var seen []error
		al, err := adaptive.New(adaptive.Config{Ticker: tick, Classify: func(ctx context.Context, err error) rampart.Result {
			seen = append(seen, err)
			return adaptive.DefaultClassify(ctx, err)
		}})
		require.NoError(t, err)
		var hits atomic.Int32
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{
			Pipeline:       mustPipeline(t, pipeline.Config{Adaptive: al}),
			Base:           slowFirst(1, &hits),
			AttemptTimeout: time.Second,
		})
		require.NoError(t, err)
		_, err = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.ErrorIs(t, err, httpguard.ErrAttemptTimeout)
		require.Equal(t, []error{context.DeadlineExceeded}, seen)
		require.Zero(t, al.Stats().InFlight)
	})
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

// A panicking ClientConfig.RetryStatus (or IsFailure) runs inside the
// attempt, after the response was tracked: RoundTrip closes every response
// it does not return on the panic path too, and the panic goes on
// unchanged.
func TestClientPanickingClassifierClosesBody(t *testing.T) {
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

// A client whose request context is already cancelled sends nothing,
// returns an error and closes the request body.
func TestClientCancelledBeforeSendSendsNothing(t *testing.T) {
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

// A NewHostBreaker that returns neither a breaker nor an error is a
// configuration mistake reported on the request (a ConfigError naming
// NewHostBreaker), not a route silently built without a breaker; nothing
// is sent.
func TestClientNilHostBreakerIsAConfigError(t *testing.T) {
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
	testkit.RequireConfigError(t, err, "httpguard", "NewHostBreaker")
	require.Zero(t, hits.Load())
}

// memResponse is a response with status and body, built in memory.
func memResponse(status int, body string) *http.Response {
	rec := httptest.NewRecorder()
	rec.WriteHeader(status)
	_, _ = io.WriteString(rec, body)
	return rec.Result()
}

// hedgerOn builds a hedger on tick with its own watchdog (inside the bubble).
func hedgerOn(t *testing.T, tick rampart.Ticker, mod func(*hedge.Config)) *hedge.Hedger {
	cfg := hedge.Config{Delay: time.Millisecond, Ticker: tick, Tick: time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, err := hedge.New(cfg)
	require.NoError(t, err)
	return h
}

// The transport starts no goroutine of its own except the hedged attempts,
// which end with the call (package doc): RoundTrip returns, and the
// pipeline's bulkhead slot is released, only once a losing hedge has left
// the base RoundTripper (here it honours the cancellation, then takes a
// moment to tear the connection down), so the next request never makes
// two in flight to the dependency under a bulkhead of 1.
func TestClientHedgedLoserEndsBeforeRoundTripReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hedgerOn(t, tick, nil)
		defer hg.Close()
		bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
		require.NoError(t, err)
		var inBase, peak atomic.Int32
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if v := inBase.Add(1); v > peak.Load() {
				peak.Store(v)
			}
			defer inBase.Add(-1)
			switch n.Add(1) {
			case 1:
				tick.Advance(2 * time.Millisecond)
				<-hedgeStarted
				return memResponse(200, "first"), nil
			case 2:
				close(hedgeStarted)
				<-r.Context().Done()
				time.Sleep(time.Millisecond) // tearing the connection down takes a moment
				return nil, r.Context().Err()
			}
			return memResponse(200, "next"), nil
		})
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: base,
			Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh, Hedge: hg, Idempotent: true})})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		stillIn := inBase.Load()
		peak.Store(0) // one call's own hedges overlap by design; the next call must not
		resp, err = rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		synctest.Wait()
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.EqualValues(t, 0, stillIn, "a hedged attempt was still running when RoundTrip returned")
		require.EqualValues(t, 1, peak.Load(), "%d requests in flight under a bulkhead of 1 once the first call returned", peak.Load())
	})
}

// A hedged request with a body (a PUT): the first attempt sends the
// original body, the hedge a replay from GetBody; both see the whole body;
// the losing response and a late response are drained and closed, the
// request body is closed, and no goroutine is left when the bubble ends.
func TestClientHedgedBodyReplayAndLateResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hedgerOn(t, tick, nil)
		defer hg.Close()
		var mu sync.Mutex
		var seen []string
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		bt := &bodyTracker{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			mu.Lock()
			seen = append(seen, string(b))
			mu.Unlock()
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-hedgeStarted
				return memResponse(200, "first"), nil // wins
			}
			close(hedgeStarted)
			time.Sleep(5 * time.Millisecond) // ignores cancellation: RoundTrip waits for it
			return memResponse(200, "late"), nil
		})}
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: bt,
			Pipeline: mustPipeline(t, pipeline.Config{Hedge: hg, Idempotent: true})})
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodPut, "http://x/", strings.NewReader("payload"))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("payload")), nil }
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, "first", string(b))
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Equal(t, 0, bt.open(), "the late hedged response was not closed")
		require.Equal(t, []string{"payload", "payload"}, seen)
		require.EqualValues(t, 1, hg.Stats().Hedges)
	})
}

// The caller's context cancelled mid-race: RoundTrip returns the context's
// error, every response is closed, the breaker's permit is released, and
// nothing is left running.
func TestClientHedgedCallerCancelMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hedgerOn(t, tick, func(c *hedge.Config) { c.MaxHedges = 2 })
		defer hg.Close()
		cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 5})
		require.NoError(t, err)
		rp, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 3})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		bt := &bodyTracker{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-hedgeStarted
				cancel()
			} else if n.Load() == 2 {
				close(hedgeStarted)
			}
			<-r.Context().Done()
			return nil, r.Context().Err()
		})}
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: bt,
			Pipeline: mustPipeline(t, pipeline.Config{Retry: rp, Breaker: cb, Hedge: hg, Idempotent: true})})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequestWithContext(ctx, http.MethodGet, "http://x/", nil))
		if resp != nil {
			_ = resp.Body.Close()
		}
		require.ErrorIs(t, err, context.Canceled)
		require.Nil(t, resp)
		synctest.Wait()
		require.Equal(t, 0, bt.open())
		require.Equal(t, circuitbreaker.Closed, cb.State())
		require.Zero(t, rp.Stats().Retries, "no retry after the caller left")
	})
}

// A hedged race in which every attempt answers 503: the status error ends
// the race, the retry runs the next (hedged) attempt, and when the retries
// give up the last 503 response is returned; every other body is closed.
func TestClientRetryOverHedgedRaces(t *testing.T) {
	testkit.LeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hedgerOn(t, tick, nil)
		defer hg.Close()
		rp, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 3, BaseDelay: time.Millisecond})
		require.NoError(t, err)
		var n atomic.Int32
		bt := &bodyTracker{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			resp := memResponse(503, "busy")
			resp.Header.Set("Retry-After", "0")
			return resp, nil
		})}
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: bt,
			Pipeline: mustPipeline(t, pipeline.Config{Retry: rp, Hedge: hg, Idempotent: true})})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		require.Equal(t, 503, resp.StatusCode)
		require.EqualValues(t, 3, n.Load(), "three attempts, none hedged (each answered before the delay)")
		require.Equal(t, 1, bt.open(), "only the returned response is open")
		require.NoError(t, resp.Body.Close())
		synctest.Wait()
		require.Equal(t, 0, bt.open())
	})
}

// ctxBody reads its content only while its request's context is live.
type ctxBody struct {
	ctx context.Context
	r   io.Reader
}

func (b *ctxBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	return b.r.Read(p)
}

func (b *ctxBody) Close() error { return nil }

// A hedge that wins: its response body, read through its context after
// RoundTrip returned, stays readable (the winner's context is not
// cancelled), and the slow first attempt's context was cancelled.
func TestClientHedgeWinnerBodyReadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hedgerOn(t, tick, nil)
		defer hg.Close()
		var n atomic.Int32
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-r.Context().Done() // cancelled when the hedge wins
				return nil, r.Context().Err()
			}
			resp := memResponse(200, "")
			resp.Body = &ctxBody{ctx: r.Context(), r: strings.NewReader("hedged body")}
			return resp, nil
		})
		rt, err := httpguard.NewTransport(httpguard.ClientConfig{Base: base,
			Pipeline: mustPipeline(t, pipeline.Config{Hedge: hg, Idempotent: true})})
		require.NoError(t, err)
		resp, err := rt.RoundTrip(httptest.NewRequest(http.MethodGet, "http://x/", nil))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, "hedged body", string(b))
		require.NoError(t, resp.Body.Close())
		require.Equal(t, uint64(1), hg.Stats().HedgesWon)
	})
}

// trackedBase is a Base answering status (with a body) through a body
// tracker, counting its attempts.
func trackedBase(status func(n int32) int) (*bodyTracker, *atomic.Int32) {
	hits := new(atomic.Int32)
	return &bodyTracker{base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n := hits.Add(1)
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return memResponse(status(n), "upstream body"), nil
	})}, hits
}

// The client's Fallback answers a rejection, the retry giving up on a
// retryable status and, with FallbackFailed, a failure status, with a
// synthetic response; every attempt's response and the request's body are
// closed before it runs; the policies count the real ending; a 404 is not
// answered by default.
func TestClientFallbackAnswersRejectionsAndGiveUps(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, OpenDuration: time.Minute})
	require.NoError(t, err)
	bt, hits := trackedBase(func(n int32) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNotFound
	})
	var seen []pipeline.Outcome
	var openAtFallback []int
	tr, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base:     bt,
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, Retry: fastRetry(t, func(c *retry.Config) { c.MaxAttempts = 3; c.Ticker = tick }), Breaker: cb}),
		Fallback: func(req *http.Request, o pipeline.Outcome) (*http.Response, error) {
			seen = append(seen, o)
			openAtFallback = append(openAtFallback, bt.open())
			return httpguard.SyntheticResponse(req, http.StatusOK, http.Header{"X-Fallback": {"1"}}, []byte("cached")), nil
		},
		FallbackWhen:   pipeline.DefaultEndings | pipeline.Failures,
		FallbackFailed: func(err error) bool { return httpguard.StatusOf(err) == http.StatusGone },
	})
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	read := func(resp *http.Response) string {
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return string(b)
	}

	body := &closeCounter{Reader: strings.NewReader("x")}
	req, err := http.NewRequest(http.MethodPut, "http://svc/a", body)
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
	resp, err := c.Do(req) // three 503s: the retry gives up
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("X-Fallback"))
	require.Same(t, req, resp.Request)
	require.Equal(t, "cached", read(resp))
	require.EqualValues(t, 3, hits.Load())
	require.Equal(t, http.StatusServiceUnavailable, httpguard.StatusOf(seen[0].Err))
	require.ErrorIs(t, seen[0].Err, retry.ErrExhausted)
	require.Zero(t, openAtFallback[0], "the attempts' bodies are closed before the fallback runs")
	require.EqualValues(t, 1, body.closes.Load())

	resp, err = c.Get("http://svc/b") // a 404: fn's own answer, not answered
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, "upstream body", read(resp))
	require.Len(t, seen, 1)

	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	before := hits.Load()
	resp, err = c.Get("http://svc/c")
	require.NoError(t, err)
	require.Equal(t, "cached", read(resp))
	require.Equal(t, before, hits.Load(), "rejected: nothing sent")
	require.Equal(t, pipeline.Rejected, seen[1].Code)
	require.Equal(t, pipeline.Breaker, seen[1].Policy)
	require.Equal(t, uint64(1), cb.Stats().Rejected)
	require.Zero(t, bt.open())
}

// A failure that FallbackFailed accepts is answered; the Fallback's error
// is RoundTrip's (its response closed), no response and no error returns
// the call's own error, and a panicking Fallback leaks no body.
func TestClientFallbackFailuresErrorsAndPanics(t *testing.T) {
	bt, _ := trackedBase(func(int32) int { return http.StatusInternalServerError })
	errOffline := errors.New("offline")
	var mode atomic.Int32
	synthetic := &trackedBody{ReadCloser: io.NopCloser(strings.NewReader(""))}
	tr, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base: bt,
		Fallback: func(req *http.Request, o pipeline.Outcome) (*http.Response, error) {
			switch mode.Load() {
			case 1:
				return &http.Response{StatusCode: http.StatusOK, Body: synthetic}, errOffline
			case 2:
				return nil, nil
			case 3:
				panic("fallback bug")
			}
			return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, nil
		},
		FallbackFailed: func(err error) bool { return httpguard.StatusOf(err) == http.StatusInternalServerError },
	})
	require.NoError(t, err)
	req := func() *http.Request {
		r, err := http.NewRequest(http.MethodPost, "http://svc/", nil)
		require.NoError(t, err)
		return r
	}
	resp, err := tr.RoundTrip(req())
	require.NoError(t, err)
	require.Equal(t, http.NoBody, resp.Body, "a nil Body is http.NoBody")
	require.NotNil(t, resp.Request)

	mode.Store(1)
	resp, err = tr.RoundTrip(req())
	require.Nil(t, resp)
	require.ErrorIs(t, err, errOffline)
	require.True(t, synthetic.closed.Load(), "a response returned with an error is closed")

	mode.Store(2)
	resp, err = tr.RoundTrip(req())
	require.Nil(t, resp)
	require.Equal(t, http.StatusInternalServerError, httpguard.StatusOf(err), "the call's own error")

	mode.Store(3)
	panicked, _ := testkit.Run(func() { _, _ = tr.RoundTrip(req()) })
	require.Equal(t, "fallback bug", panicked)
	require.Zero(t, bt.open())
}

// The client fallback's configuration errors.
func TestClientFallbackConfigErrors(t *testing.T) {
	fb := func(*http.Request, pipeline.Outcome) (*http.Response, error) { return nil, nil }
	pred := func(error) bool { return true }
	for _, c := range []struct {
		field string
		cfg   httpguard.ClientConfig
	}{
		{"Fallback", httpguard.ClientConfig{FallbackWhen: pipeline.Rejections}},
		{"Fallback", httpguard.ClientConfig{FallbackFailed: pred}},
		{"FallbackFailed", httpguard.ClientConfig{Fallback: fb, FallbackWhen: pipeline.Failures}},
		{"FallbackFailed", httpguard.ClientConfig{Fallback: fb, FallbackWhen: pipeline.Rejections, FallbackFailed: pred}},
		{"FallbackWhen", httpguard.ClientConfig{Fallback: fb, FallbackWhen: pipeline.RejectionsBy(pipeline.Timeout)}},
	} {
		_, err := httpguard.NewTransport(c.cfg)
		testkit.RequireConfigError(t, err, "httpguard", c.field)
	}
}

// The retry giving up inside the Base transport (another guarded
// transport's give-up, returned as its error) is this client's failure
// when its own pipeline has no retry: a default Fallback does not answer
// it, and RoundTrip returns the Base's error unchanged.
func TestClientFallbackLeavesTheBaseTransportsGiveUpToFailures(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	refused := errors.New("connection refused")
	var sent atomic.Int32
	inner, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			return nil, refused
		}),
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, Retry: fastRetry(t, func(c *retry.Config) { c.MaxAttempts = 2; c.Ticker = tick })}),
	})
	require.NoError(t, err)
	answered := 0
	outer, err := httpguard.NewTransport(httpguard.ClientConfig{
		Base:     inner,
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick}), // no retry
		Fallback: func(req *http.Request, o pipeline.Outcome) (*http.Response, error) {
			answered++
			return httpguard.SyntheticResponse(req, http.StatusOK, nil, []byte("cached")), nil
		},
	})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, "http://svc/a", nil)
	require.NoError(t, err)
	resp, err := outer.RoundTrip(req)
	require.Zero(t, answered, "the Base's give-up answered by the outer fallback")
	require.Nil(t, resp)
	require.ErrorIs(t, err, retry.ErrExhausted)
	require.ErrorIs(t, err, refused)
	require.EqualValues(t, 2, sent.Load(), "the inner retry's two attempts")
}
