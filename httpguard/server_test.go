package httpguard_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/internal/watchdog"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

func mustPipeline(t testing.TB, cfg pipeline.Config) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.New(cfg)
	require.NoError(t, err)
	return p
}

// serve starts an httptest server for h and returns its URL and a client
// whose transport is closed with the server.
func serve(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	ts := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		ts.Close()
	})
	return ts.URL, &http.Client{Transport: tr}
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp, string(b)
}

var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "hello") })

func TestServerRateLimit429WithRetryAfter(t *testing.T) {
	testkit.LeakCheck(t)
	tick := rampart.NewManualTicker(1)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 0.5, Burst: 1, Ticker: tick}) // one per 2 s
	require.NoError(t, err)
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl})})
	require.NoError(t, err)
	url, c := serve(t, h)

	resp, body := get(t, c, url)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "hello", body)
	resp, _ = get(t, c, url)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	tick.Advance(1500 * time.Millisecond)
	resp, _ = get(t, c, url)
	require.Equal(t, "1", resp.Header.Get("Retry-After"), "0.5 s rounds up to 1")
}

func TestServerBulkhead503(t *testing.T) {
	testkit.LeakCheck(t)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	h, err := httpguard.NewHandler(slow, httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Bulkhead: bh}),
		DefaultRetryAfter: 3 * time.Second,
	})
	require.NoError(t, err)
	url, c := serve(t, h)
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, body := get(t, c, url+"/slow")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, "done", body)
	})
	<-entered
	resp, body := get(t, c, url)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	require.Contains(t, body, "bulkhead")
	close(release)
	wg.Wait()
	require.Equal(t, int64(0), bh.Stats().InFlight)
}

func TestServerBreakerOpensOn5xxAnd503WithRemainingTime(t *testing.T) {
	testkit.LeakCheck(t)
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 2,
		OpenDuration: 30 * time.Second, Ticker: tick})
	require.NoError(t, err)
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	})
	h, err := httpguard.NewHandler(failing, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb})})
	require.NoError(t, err)
	url, c := serve(t, h)
	for range 2 {
		resp, _ := get(t, c, url)
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	}
	require.Equal(t, circuitbreaker.Open, cb.State(), "5xx counts as a failure by default")
	tick.Advance(10*time.Second + time.Millisecond)
	resp, _ := get(t, c, url)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "20", resp.Header.Get("Retry-After"))
}

func TestServerClassifierConfigurable(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1, Ticker: tick})
	require.NoError(t, err)
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	h, err := httpguard.NewHandler(notFound, httpguard.ServerConfig{
		Pipeline:  mustPipeline(t, pipeline.Config{Breaker: cb}),
		IsFailure: func(status int) bool { return status == http.StatusNotFound },
	})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Equal(t, circuitbreaker.Open, cb.State())
}

func TestServerTimeoutStatus(t *testing.T) {
	for _, status := range []int{0, http.StatusGatewayTimeout} {
		tick := rampart.NewManualTicker(1)
		// A watchdog swept by the test: the pipeline's verdict in deadline
		// mode is the watchdog's.
		wd := watchdog.New(watchdog.Config{Clock: tick, Manual: true})
		to, err := timeout.New(timeout.Config{Duration: time.Second, Watchdog: wd})
		require.NoError(t, err)
		// The handler overruns its deadline and gives up without writing.
		overrun := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, ok := r.Context().Deadline()
			require.True(t, ok)
			tick.Advance(2 * time.Second)
			wd.Sweep()
			<-r.Context().Done()
		})
		h, err := httpguard.NewHandler(overrun, httpguard.ServerConfig{
			Pipeline: mustPipeline(t, pipeline.Config{Timeout: to}), TimeoutStatus: status,
		})
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		want := status
		if want == 0 {
			want = http.StatusServiceUnavailable
		}
		require.Equal(t, want, rec.Code)
		require.NoError(t, to.Close())
		require.NoError(t, wd.Close())
	}
}

func TestServerTimeoutKeepsAWrittenResponse(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Ticker: tick, Tick: time.Hour})
	require.NoError(t, err)
	defer to.Close()
	late := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		tick.Advance(2 * time.Second)
	})
	h, err := httpguard.NewHandler(late, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Timeout: to})})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusAccepted, rec.Code, "a written response is never replaced")
}

func TestServerOnRejectAndMiddleware(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick})
	require.NoError(t, err)
	mw, err := httpguard.Middleware(httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl}),
		OnRejected: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":"`+o.Policy.String()+`"}`)
		},
	})
	require.NoError(t, err)
	h := mw(hello)
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		require.Equal(t, want, rec.Code, "request %d", i)
		if want != http.StatusOK {
			require.Equal(t, `{"error":"ratelimit"}`, rec.Body.String())
			require.Equal(t, "1", rec.Header().Get("Retry-After"))
		}
	}
	_, err = httpguard.Middleware(httpguard.ServerConfig{})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
}

func TestServerPanicReleasesPermit(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }),
		httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh})})
	require.NoError(t, err)
	require.Panics(t, func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)) })
	require.Equal(t, int64(0), bh.Stats().InFlight)
}

// abortRig is a guarded httputil.ReverseProxy in front of an httptest
// upstream; every exchange's panic value (nil when it returned) reaches
// aborted once the guard has returned.
type abortRig struct {
	front   *httptest.Server
	cb      *circuitbreaker.Breaker
	bh      *bulkhead.Bulkhead
	al      *adaptive.Limiter
	aborted chan any
}

func newAbortRig(t *testing.T, upstream http.Handler) *abortRig {
	t.Helper()
	up := httptest.NewServer(upstream)
	target, err := url.Parse(up.URL)
	require.NoError(t, err)
	upTr := &http.Transport{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = upTr
	proxy.FlushInterval = -1 // every chunk goes to the client at once
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 5, OpenDuration: time.Minute})
	require.NoError(t, err)
	// A leaked bulkhead permit or adaptive slot rejects the next request.
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	al, err := adaptive.New(adaptive.Config{Ticker: tick, InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
	require.NoError(t, err)
	guard, err := httpguard.NewHandler(proxy, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb, Bulkhead: bh, Adaptive: al}),
	})
	require.NoError(t, err)
	rig := &abortRig{cb: cb, bh: bh, al: al, aborted: make(chan any, 1)}
	rig.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { rig.aborted <- recover() }()
		guard.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		rig.front.Close()
		upTr.CloseIdleConnections()
		up.Close()
	})
	return rig
}

// A client that leaves mid-body makes httputil.ReverseProxy abort with
// http.ErrAbortHandler. That says nothing about the upstream: the breaker
// records no failure and stays closed however many downloads are aborted,
// every permit is released, and the guard re-raises http.ErrAbortHandler
// as net/http expects.
func TestServerClientAbortMidBodyIsNotAFailure(t *testing.T) {
	testkit.LeakCheck(t)
	const chunk = "first chunk"
	rig := newAbortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, chunk)
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // the rest never comes: the proxy gives up when its client leaves
	}))
	for i := range 20 {
		conn, err := net.Dial("tcp", rig.front.Listener.Addr().String())
		require.NoError(t, err)
		_, err = fmt.Fprintf(conn, "GET /download HTTP/1.1\r\nHost: example\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		buf := make([]byte, len(chunk))
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		require.NoError(t, conn.Close()) // the client leaves mid-body
		require.Equal(t, http.ErrAbortHandler, <-rig.aborted, "download %d", i)
	}
	st := rig.cb.Stats()
	require.Equal(t, circuitbreaker.Closed, rig.cb.State())
	require.Zero(t, st.Failures)
	require.Zero(t, st.ConsecutiveFailures)
	require.Zero(t, st.Trips)
	require.Zero(t, rig.bh.Stats().InFlight)
	require.Zero(t, rig.bh.Stats().Rejected)
	require.Zero(t, rig.al.Stats().InFlight)
	require.Zero(t, rig.al.Stats().Rejected)
}

// An upstream that breaks mid-body, with the client still there, makes the
// proxy abort too: that one is the upstream's failure.
func TestServerUpstreamAbortMidBodyIsAFailure(t *testing.T) {
	testkit.LeakCheck(t)
	rig := newAbortRig(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort") // 5 bytes of 100
		_ = buf.Flush()
	}))
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(rig.front.URL)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body) // truncated
	_ = resp.Body.Close()
	require.Equal(t, http.ErrAbortHandler, <-rig.aborted)
	require.EqualValues(t, 1, rig.cb.Stats().Failures)
	require.Zero(t, rig.bh.Stats().InFlight)
	require.Zero(t, rig.al.Stats().InFlight)
}

// An admitted request allocates nothing in the middleware: its exchange
// (the status recorder and the pipeline's call) comes from the server's
// pool and the abort guard is a deferred call, with the typical policy set
// (a breaker, a rate limiter, a bulkhead and a soft-mode timeout), with
// headers that an outer middleware set (saved for the timeout answer), and
// for a handler that flushes or copies its body through io.ReaderFrom. A
// deadline-mode timeout costs two allocations that are not the
// middleware's: the timeout's context (a fresh one per call, as
// timeout.ModeDeadline documents) and net/http's copy of the request that
// carries it (Request.WithContext allocates one every time).
func TestServerAllocsAdmittedRequest(t *testing.T) {
	noContent := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	body := []byte("ok")
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	flush := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
		w.(http.Flusher).Flush()
	})
	src := &bytesReader{}
	readFrom := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src.b = body
		_, _ = w.(io.ReaderFrom).ReadFrom(src)
	})
	soft, deadline := timeout.ModeSoft, timeout.ModeDeadline
	for _, c := range []struct {
		name    string
		mode    *timeout.Mode // nil: no timeout nor rate limiter
		handler http.Handler
		header  bool // an outer middleware set headers before the guard ran
		want    int
	}{
		{"breaker and bulkhead", nil, noContent, false, 0},
		{"typical set, soft timeout", &soft, write, false, 0},
		{"typical set, soft timeout, outer headers", &soft, write, true, 0},
		{"typical set, soft timeout, Flush", &soft, flush, false, 0},
		{"typical set, soft timeout, ReadFrom", &soft, readFrom, false, 0},
		{"typical set, deadline timeout", &deadline, write, false, 2},
		{"typical set, deadline timeout, outer headers", &deadline, write, true, 2},
	} {
		tick := rampart.NewManualTicker(1)
		cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick})
		require.NoError(t, err)
		bh, err := bulkhead.New(bulkhead.Config{Max: 100, Ticker: tick})
		require.NoError(t, err)
		cfg := pipeline.Config{Ticker: tick, Breaker: cb, Bulkhead: bh}
		if c.mode != nil {
			rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1 << 30, Ticker: tick})
			require.NoError(t, err)
			to, err := timeout.New(timeout.Config{Duration: time.Minute, Mode: *c.mode, Ticker: tick, Tick: time.Hour})
			require.NoError(t, err)
			t.Cleanup(func() { _ = to.Close() })
			cfg.RateLimit, cfg.Timeout = rl, to
		}
		h, err := httpguard.NewHandler(c.handler, httpguard.ServerConfig{Pipeline: mustPipeline(t, cfg)})
		require.NoError(t, err)
		w := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
		if c.header {
			w.Header().Set("X-Request-Id", "1")
			w.Header().Set("Set-Cookie", "outer=1")
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		testkit.WantAllocs(t, c.name, c.want, func() { h.ServeHTTP(w, r) })
		require.Zero(t, bh.Stats().InFlight, c.name)
	}
}

// A rejection, the answer a server gives most under overload, costs one
// allocation: the response's header values (Retry-After, Content-Type,
// X-Content-Type-Options), in one backing array; the body is written as
// the policy's preallocated error says it, without formatting. The
// timeout answer costs the same one.
func TestServerAllocsRejectedRequest(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick})
	require.NoError(t, err)
	require.True(t, rl.Allow()) // spend the only permit
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	require.NoError(t, bh.Acquire()) // the bulkhead is full
	defer bh.Release()
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, OpenDuration: time.Minute})
	require.NoError(t, err)
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		cfg  pipeline.Config
		ctx  context.Context
		want int
	}{
		{"rate limit", pipeline.Config{Ticker: tick, RateLimit: rl}, context.Background(), http.StatusTooManyRequests},
		{"bulkhead", pipeline.Config{Ticker: tick, Bulkhead: bh}, context.Background(), http.StatusServiceUnavailable},
		{"breaker", pipeline.Config{Ticker: tick, Breaker: cb}, context.Background(), http.StatusServiceUnavailable},
		{"canceled", pipeline.Config{Ticker: tick}, ctx, http.StatusServiceUnavailable},
	} {
		h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, c.cfg)})
		require.NoError(t, err)
		w := httptest.NewRecorder()
		r := httptest.NewRequestWithContext(c.ctx, http.MethodGet, "/", nil)
		testkit.WantAllocs(t, c.name, 1, func() {
			clear(w.Header())
			w.Body.Reset()
			h.ServeHTTP(w, r)
		})
		require.Equal(t, c.want, w.Code, c.name)
		require.NotEmpty(t, w.Header().Get("Retry-After"), c.name)
	}
}

// The rejection and timeout answers are what http.Error writes (its
// Content-Type, X-Content-Type-Options, no stale Content-Length, the text
// and a newline), with Retry-After, and Cache-Control: no-store on the
// timeout answer.
func TestServerAnswersAsHTTPError(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tick})
	require.NoError(t, err)
	require.True(t, rl.Allow())
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, RateLimit: rl})})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name    string
		ctx     context.Context
		status  int
		text    string
		noStore bool
	}{
		{"rejection", context.Background(), http.StatusTooManyRequests,
			http.StatusText(http.StatusTooManyRequests) + ": " + rl.RejectedError().Error(), false},
		{"canceled", ctx, http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable), true},
	} {
		want := httptest.NewRecorder()
		want.Header().Set("Content-Length", "1000")
		http.Error(want, c.text, c.status)
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Length", "1000") // set for a body that is not the answer's
		h.ServeHTTP(rec, httptest.NewRequestWithContext(c.ctx, http.MethodGet, "/", nil))
		require.Equal(t, c.status, rec.Code, c.name)
		require.Equal(t, want.Body.String(), rec.Body.String(), c.name)
		require.NotEmpty(t, rec.Header().Get("Retry-After"), c.name)
		rec.Header().Del("Retry-After")
		if c.noStore {
			require.Equal(t, "no-store", rec.Header().Get("Cache-Control"), c.name)
			rec.Header().Del("Cache-Control")
		}
		require.Equal(t, want.Header(), rec.Header(), c.name)
	}
}

// bytesReader reads b once; it has no WriteTo, so that io.Copy and
// ReadFrom take the reader path, and it allocates nothing.
type bytesReader struct{ b []byte }

func (r *bytesReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// readFromRecorder is a ResponseRecorder with the io.ReaderFrom of
// net/http's own writer (which sends a file with sendfile(2)); it counts
// the calls and allocates nothing.
type readFromRecorder struct {
	*httptest.ResponseRecorder
	calls int
	buf   [64]byte
}

func (w *readFromRecorder) ReadFrom(src io.Reader) (n int64, err error) {
	w.calls++
	for {
		k, err := src.Read(w.buf[:])
		if k > 0 {
			_, _ = w.ResponseRecorder.Write(w.buf[:k])
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// A handler that io.Copies its body to w (a file server) reaches the
// underlying writer's io.ReaderFrom through the middleware, so net/http
// keeps sending files with sendfile(2); what it copied is the implicit 200
// (a breaker counting 200 as a failure sees it), an empty copy writes
// nothing (net/http's ReadFrom does not either), and without an
// io.ReaderFrom underneath the bytes go through Write.
func TestServerHandlerCopyUsesReaderFrom(t *testing.T) {
	var body string
	var seen []int
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(w, &bytesReader{b: []byte(body)})
		require.NoError(t, err)
	}), httpguard.ServerConfig{
		Pipeline:  mustPipeline(t, pipeline.Config{}),
		IsFailure: func(status int) bool { seen = append(seen, status); return false },
	})
	require.NoError(t, err)

	body = "file contents"
	w := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, 1, w.calls, "io.Copy behind the middleware did not reach the writer's ReadFrom")
	require.Equal(t, body, w.Body.String())
	require.Equal(t, []int{http.StatusOK}, seen, "the copied body is the implicit 200")

	body = ""
	w = &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, 1, w.calls)
	require.Equal(t, []int{http.StatusOK}, seen, "an empty copy wrote nothing")

	body = "through Write"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, body, rec.Body.String())
	require.Equal(t, []int{http.StatusOK, http.StatusOK}, seen)
}

// Exchanges are reused: a request never sees what the one before it
// recorded. A 500 followed by a handler that writes nothing (an implicit
// 200) is one failure, not two; a request after a timeout answer that
// restored an outer middleware's headers does not get them.
func TestServerReusedExchangeStartsClean(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100})
	require.NoError(t, err)
	fail := true
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}), httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb})})
	require.NoError(t, err)
	for range 3 {
		fail = true
		require.Equal(t, http.StatusInternalServerError, serveRecorded(h, nil).Code)
		fail = false
		require.Equal(t, http.StatusOK, serveRecorded(h, nil).Code)
		require.EqualValues(t, 0, cb.Stats().ConsecutiveFailures, "the implicit 200 was recorded as the previous request's 500")
	}
}

// Concurrent requests through one handler each record their own status:
// IsFailure sees every request's status exactly as its handler wrote it,
// and every response carries its own.
func TestServerConcurrentRequestsRecordTheirOwnStatus(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1 << 10})
	require.NoError(t, err)
	var seen [600]atomic.Int64
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, err := strconv.Atoi(r.URL.Path[1:])
		if err != nil {
			panic(err)
		}
		w.WriteHeader(status)
	}), httpguard.ServerConfig{
		Pipeline:  mustPipeline(t, pipeline.Config{Bulkhead: bh}),
		IsFailure: func(status int) bool { seen[status].Add(1); return false },
	})
	require.NoError(t, err)
	const workers, requests = 8, 240 // each worker serves every status 40 times
	statuses := []int{200, 201, 204, 404, 500, 503}
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for j := range requests {
				status := statuses[(i+j)%len(statuses)]
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/"+strconv.Itoa(status), nil))
				if rec.Code != status {
					t.Errorf("request for %d answered %d", status, rec.Code)
				}
			}
		})
	}
	wg.Wait()
	var total int64
	for _, st := range statuses {
		total += seen[st].Load()
	}
	require.EqualValues(t, workers*requests, total)
	for _, st := range statuses {
		require.EqualValues(t, workers*requests/len(statuses), seen[st].Load(), "status %d", st)
	}
	require.Zero(t, bh.Stats().InFlight)
}

// A huge DefaultRetryAfter (which NewHandler accepts) must not wrap around
// to "Retry-After: 1" when rounded up to whole seconds.
func TestServerHugeRetryAfterDoesNotWrap(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	require.NoError(t, bh.Acquire()) // the bulkhead is full
	defer bh.Release()
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

// A 1xx TimeoutStatus cannot be a final response (net/http would send it as
// an informational header followed by an implicit 200): NewHandler refuses
// it.
func TestServerRefusesInformationalTimeoutStatus(t *testing.T) {
	_, err := httpguard.NewHandler(http.NotFoundHandler(), httpguard.ServerConfig{
		Pipeline:      mustPipeline(t, pipeline.Config{}),
		TimeoutStatus: http.StatusEarlyHints,
	})
	testkit.RequireConfigError(t, err, "httpguard", "TimeoutStatus")
}

// When the timeout answers for a handler that wrote nothing, none of the
// headers the handler had set on w (caching, encoding, validators, cookies)
// go out with the 503, which says "Cache-Control: no-store": a handler's
// "Cache-Control: public, max-age=3600" would make shared caches keep the
// error for an hour, its "Content-Encoding: gzip" would make the plain-text
// body undecodable (http.TimeoutHandler buffers the handler's headers for
// the same reason).
func TestServerTimeoutDropsHandlerHeaders(t *testing.T) {
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

	// The next request reuses the exchange: it restores nothing of the
	// headers saved for the one before.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Empty(t, rec.Header().Get("Content-Encoding"))
	require.Empty(t, rec.Header().Values("Set-Cookie"))
}

// The answer for a request whose context ended (no timeout in the
// pipeline) keeps the entity headers an outer middleware set before the
// guard ran, and drops those its handler set, as the timeout answer does:
// both when the context ended before admission and when the handler gave
// up on it without writing.
func TestServerCanceledAnswerKeepsOuterHeaders(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour})
	require.NoError(t, err)
	var cancel context.CancelFunc
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Add("Set-Cookie", "inner=1")
		cancel() // the client leaves; the handler gives up without writing
		<-r.Context().Done()
	}), httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh})})
	require.NoError(t, err)
	for _, name := range []string{"ended before admission", "ended while the handler ran"} {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		if name == "ended before admission" {
			cancel()
		}
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Encoding", "br")
		rec.Header().Set("Set-Cookie", "outer=1")
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		cancel()
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, name)
		require.Equal(t, "br", rec.Header().Get("Content-Encoding"), name)
		require.Equal(t, []string{"outer=1"}, rec.Header().Values("Set-Cookie"), name)
		require.Empty(t, rec.Header().Get("ETag"), name)
	}
}

func serveRecorded(h http.Handler, ctx context.Context) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if ctx != nil {
		r = r.WithContext(ctx)
	}
	h.ServeHTTP(rec, r)
	return rec
}

// The rate limiter's wait is answered with 429 and a Retry-After rounded up
// to whole seconds (1 ms -> 1, 1.5 s -> 2, exactly 2 s -> 2, 1 h -> 3600).
func TestServerRateLimitRetryAfterRoundsUp(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want string
	}{{1000, "1"}, {1 / 1.5, "2"}, {0.5, "2"}, {1.0 / 3600, "3600"}} {
		tick := rampart.NewManualTicker(1)
		rl, err := ratelimit.New(ratelimit.Config{Rate: c.rate, Burst: 1, Ticker: tick})
		require.NoError(t, err)
		h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl})})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, serveRecorded(h, nil).Code)
		rec := serveRecorded(h, nil)
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		require.Equal(t, c.want, rec.Header().Get("Retry-After"), "rate %v", c.rate)
	}
}

// An adaptive-limit rejection answers 503 with DefaultRetryAfter rounded up.
func TestServerAdaptiveRejection503WithDefaultRetryAfter(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	al, err := adaptive.New(adaptive.Config{Ticker: tick, InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
	require.NoError(t, err)
	var h http.Handler
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := serveRecorded(h, nil) // a second request while this one holds the only slot
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "3", rec.Header().Get("Retry-After"))
		w.WriteHeader(http.StatusNoContent)
	})
	h, err = httpguard.NewHandler(inner, httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Adaptive: al}),
		DefaultRetryAfter: 2100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, serveRecorded(h, nil).Code)
	require.Zero(t, al.Stats().InFlight)
}

// A server pipeline's retry is ignored: a handler that answers 5xx runs
// once, with no retry counted, its status is recorded by the breaker as
// exactly one failure (in either mode), and the caller's pipeline keeps its
// retry.
func TestServerRunsHandlerOnceIgnoringRetry(t *testing.T) {
	for _, c := range []struct {
		name     string
		status   int
		retry    retry.Config
		breaker  circuitbreaker.Config
		failures func(circuitbreaker.Stats) int64
	}{
		{"503 count-based", http.StatusServiceUnavailable,
			retry.Config{MaxAttempts: 5, Backoff: retry.Constant, BaseDelay: time.Nanosecond},
			circuitbreaker.Config{},
			func(s circuitbreaker.Stats) int64 { return s.WindowFailures }},
		{"502 consecutive, retry everything", http.StatusBadGateway,
			retry.Config{MaxAttempts: 5, BaseDelay: time.Microsecond, ShouldRetry: func(error) bool { return true }},
			circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100},
			func(s circuitbreaker.Stats) int64 { return s.ConsecutiveFailures }},
	} {
		tick := rampart.NewManualTicker(1)
		c.retry.Ticker, c.breaker.Ticker = tick, tick
		rp, err := retry.New(c.retry)
		require.NoError(t, err, c.name)
		cb, err := circuitbreaker.New(c.breaker)
		require.NoError(t, err, c.name)
		p := mustPipeline(t, pipeline.Config{Retry: rp, Breaker: cb})
		var hits atomic.Int32
		h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			http.Error(w, "busy", c.status)
		}), httpguard.ServerConfig{Pipeline: p})
		require.NoError(t, err, c.name)
		require.Equal(t, c.status, serveRecorded(h, nil).Code, c.name)
		require.EqualValues(t, 1, hits.Load(), c.name)
		require.Equal(t, uint64(0), rp.Stats().Retries, c.name)
		require.EqualValues(t, 1, c.failures(cb.Stats()), c.name)
		require.NotNil(t, p.Config().Retry, c.name)
	}
}

// IsFailure decides what the breaker records, for every status written
// (an implicit 200 included), and a 1xx informational status is not the
// final one.
func TestServerIsFailureSeesFinalStatus(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100})
	require.NoError(t, err)
	var seen []int
	status := 0
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusEarlyHints)
		if status != 0 {
			w.WriteHeader(status)
		}
		_, _ = io.WriteString(w, "x")
	}), httpguard.ServerConfig{
		Pipeline:  mustPipeline(t, pipeline.Config{Breaker: cb}),
		IsFailure: func(s int) bool { seen = append(seen, s); return s == http.StatusTeapot },
	})
	require.NoError(t, err)
	serveRecorded(h, nil)
	status = http.StatusTeapot
	serveRecorded(h, nil)
	require.Equal(t, []int{200, 418}, seen)
	require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
}

// OnRejected gets the decided status and Outcome, with Retry-After set.
func TestServerOnRejectGetsStatusAndOutcome(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 1, OpenDuration: 90 * time.Second})
	require.NoError(t, err)
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	var got pipeline.Outcome
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb}),
		OnRejected: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
			got = o
			require.Equal(t, "90", w.Header().Get("Retry-After"))
			w.WriteHeader(status)
		},
	})
	require.NoError(t, err)
	rec := serveRecorded(h, nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, pipeline.Rejected, got.Code)
	require.Equal(t, pipeline.Breaker, got.Policy)
	require.True(t, errors.Is(got.Err, circuitbreaker.ErrOpen))
	require.Equal(t, 90*time.Second, got.RetryAfter)
}

// A panicking handler: the permits are released, the breaker records a
// failure and the panic goes on unchanged.
func TestServerHandlerPanicRecordsBreakerFailure(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100})
	require.NoError(t, err)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler") }),
		httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb, Bulkhead: bh})})
	require.NoError(t, err)
	require.PanicsWithValue(t, "handler", func() { serveRecorded(h, nil) })
	require.Zero(t, bh.Stats().InFlight)
	require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
}

// A request whose context ends while it waits for a bulkhead permit (an
// outer middleware's deadline, say) was never served, and the middleware
// answers it: net/http would otherwise send an empty 200 OK for a request
// the handler never saw.
func TestServerCanceledBeforeAdmissionIsNot200(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh})})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // e.g. an outer deadline that already passed
	rec := serveRecorded(h, ctx)
	require.NotEqual(t, http.StatusOK, rec.Code, "a request never served answered 200 with body %q", rec.Body.String())
}

// TestServerAllocsRejectedRequestLongRetryAfter: a Retry-After hint of 100 s
// or more adds its digits to the rejection's one allocation (strconv has
// only the smaller numbers ready-made), as the package doc says.
func TestServerAllocsRejectedRequestLongRetryAfter(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, OpenDuration: 5 * time.Minute})
	require.NoError(t, err)
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, Breaker: cb})})
	require.NoError(t, err)
	w, r := httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)
	testkit.WantAllocs(t, "breaker open 5 min", 2, func() {
		clear(w.Header())
		w.Body.Reset()
		h.ServeHTTP(w, r)
	})
	require.Equal(t, "300", w.Header().Get("Retry-After"))
}

// flushErrWriter is a ResponseWriter whose flush fails, as net/http's does
// once the client is gone.
type flushErrWriter struct{ *httptest.ResponseRecorder }

var errFlushBroken = errors.New("broken pipe")

func (flushErrWriter) FlushError() error { return errFlushBroken }

// TestServerFlushErrorReachesTheHandler: http.ResponseController.Flush
// behind the guard returns the writer's flush error, as it does on a bare
// handler, so that a streaming handler stops when the client is gone.
func TestServerFlushErrorReachesTheHandler(t *testing.T) {
	var got error
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("event: x\n\n"))
		got = http.NewResponseController(w).Flush()
	})
	g, err := httpguard.NewHandler(h, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{})})
	require.NoError(t, err)
	g.ServeHTTP(flushErrWriter{httptest.NewRecorder()}, httptest.NewRequest(http.MethodGet, "/", nil))
	require.ErrorIs(t, got, errFlushBroken)
}

// A Fallback answers the rejections and the timeout answer in the guard's
// place, with the guard's status and Retry-After by default (StaticFallback
// with a zero Status) or others (Status 200, DropRetryAfter); the policies
// still count the rejection and the timeout, and the fallback is not
// called for an admitted request nor, by default, for an ended request.
func TestServerFallbackAnswersRejectionsAndTimeouts(t *testing.T) {
	page := []byte("<p>busy, here is yesterday's page</p>")
	keep, err := httpguard.StaticFallback(httpguard.StaticFallbackConfig{
		Header: http.Header{"content-type": {"text/html"}}, Body: page})
	require.NoError(t, err)
	replace, err := httpguard.StaticFallback(httpguard.StaticFallbackConfig{
		Status: http.StatusOK, DropRetryAfter: true, Header: http.Header{"Cache-Control": {"max-age=5"}}, Body: page})
	require.NoError(t, err)
	for _, c := range []struct {
		name     string
		fallback func(http.ResponseWriter, *http.Request, int, pipeline.Outcome)
		status   int // of the rate-limit rejection; the timeout's is 503
		retry    bool
	}{
		{"keep", keep, http.StatusTooManyRequests, true},
		{"replace", replace, http.StatusOK, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			rl, err := ratelimit.New(ratelimit.Config{Rate: 1e-6, Burst: 2, Ticker: tick, CountStats: true})
			require.NoError(t, err)
			to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
			require.NoError(t, err)
			slow := false
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if slow {
					w.Header().Set("Etag", `"never sent"`)
					tick.Advance(2 * time.Second) // overruns and writes nothing
					return
				}
				_, _ = io.WriteString(w, "fresh")
			})
			h, err := httpguard.NewHandler(next, httpguard.ServerConfig{
				Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl, Timeout: to}), Fallback: c.fallback})
			require.NoError(t, err)
			do := func(method string) *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
				return rec
			}
			rec := do(http.MethodGet)
			require.Equal(t, "fresh", rec.Body.String())

			slow = true
			rec = do(http.MethodGet) // the second permit; times out
			wantTimeout := c.status
			if c.status != http.StatusOK {
				wantTimeout = http.StatusServiceUnavailable
			}
			require.Equal(t, wantTimeout, rec.Code)
			require.Equal(t, string(page), rec.Body.String())
			require.Empty(t, rec.Header().Get("Etag"), "the handler's entity headers are restored")
			require.Equal(t, uint64(1), to.Stats().Timeouts)

			rec = do(http.MethodGet) // no permit left: rejected
			require.Equal(t, c.status, rec.Code)
			require.Equal(t, string(page), rec.Body.String())
			require.Equal(t, strconv.Itoa(len(page)), rec.Header().Get("Content-Length"))
			if c.retry {
				require.NotEmpty(t, rec.Header().Get("Retry-After"), "the rate limiter's wait")
				require.Equal(t, "text/html", rec.Header().Get("Content-Type"))
			} else {
				require.Empty(t, rec.Header().Values("Retry-After"))
				require.Equal(t, "max-age=5", rec.Header().Get("Cache-Control"))
			}
			require.Equal(t, uint64(1), rl.Stats().Rejected, "the rejection is counted")

			rec = do(http.MethodHead)
			require.Equal(t, c.status, rec.Code)
			require.Empty(t, rec.Body.String(), "no body for HEAD")

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
			require.Equal(t, http.StatusServiceUnavailable, rec.Code)
			require.NotEqual(t, string(page), rec.Body.String(), "an ended request gets the plain answer by default")
		})
	}
}

// FallbackWhen narrows the fallback to some rejections (the others get
// OnRejected or the plain answer) or widens it to ended requests; the
// fallback gets the decided status and the request's Outcome.
func TestServerFallbackWhen(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, OpenDuration: time.Minute})
	require.NoError(t, err)
	var got []pipeline.Outcome
	fb := func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
		got = append(got, o)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "fallback")
	}
	onRejected := func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "onrejected")
	}
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, Breaker: cb, Bulkhead: bh}),
		Fallback: fb, FallbackWhen: pipeline.RejectionsBy(pipeline.Breaker) | pipeline.Cancellations, OnRejected: onRejected})
	require.NoError(t, err)
	serveBody := func(ctx context.Context) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
		return rec.Code, rec.Body.String()
	}
	require.NoError(t, bh.Acquire())
	code, body := serveBody(context.Background())
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "onrejected", body)
	bh.Release()
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	code, body = serveBody(context.Background())
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "fallback", body)
	require.True(t, cb.TransitionTo(circuitbreaker.Closed))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, body = serveBody(ctx)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "fallback", body)
	require.Len(t, got, 2)
	require.Equal(t, pipeline.Breaker, got[0].Policy)
	require.Equal(t, pipeline.Canceled, got[1].Code)
	require.Equal(t, uint64(1), cb.Stats().Rejected)
}

// A panicking Fallback runs after the permits were released: the panic
// goes on and the bulkhead admits again.
func TestServerFallbackPanicLeaksNothing(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh}),
		Fallback: func(http.ResponseWriter, *http.Request, int, pipeline.Outcome) { panic("fallback bug") }})
	require.NoError(t, err)
	require.NoError(t, bh.Acquire())
	panicked, _ := testkit.Run(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil)) })
	require.Equal(t, "fallback bug", panicked)
	bh.Release()
	require.Zero(t, bh.Stats().InFlight)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, "hello", rec.Body.String())
}

// The fallback's configuration errors.
func TestServerFallbackConfigErrors(t *testing.T) {
	p := mustPipeline(t, pipeline.Config{})
	fb := func(http.ResponseWriter, *http.Request, int, pipeline.Outcome) {}
	for _, c := range []struct {
		field string
		cfg   httpguard.ServerConfig
	}{
		{"FallbackWhen", httpguard.ServerConfig{Pipeline: p, FallbackWhen: pipeline.Timeouts}},
		{"FallbackWhen", httpguard.ServerConfig{Pipeline: p, Fallback: fb, FallbackWhen: pipeline.Failures}},
		{"FallbackWhen", httpguard.ServerConfig{Pipeline: p, Fallback: fb, FallbackWhen: pipeline.RetriesExhausted}},
		{"OnRejected", httpguard.ServerConfig{Pipeline: p, Fallback: fb, OnRejected: fb}},
	} {
		_, err := httpguard.NewHandler(hello, c.cfg)
		testkit.RequireConfigError(t, err, "httpguard", c.field)
	}
	_, err := httpguard.StaticFallback(httpguard.StaticFallbackConfig{Status: http.StatusContinue})
	testkit.RequireConfigError(t, err, "httpguard", "StaticFallbackConfig.Status")
}

// With a Fallback configured an admitted request still costs the
// middleware nothing, and a rejection answered by a StaticFallback costs
// one allocation (the Retry-After value's slice), as the plain answer.
func TestServerAllocsFallback(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	static, err := httpguard.StaticFallback(httpguard.StaticFallbackConfig{Body: []byte("busy")})
	require.NoError(t, err)
	body := []byte("hello")
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	h, err := httpguard.NewHandler(write, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Ticker: tick, Bulkhead: bh}), Fallback: static})
	require.NoError(t, err)
	w := &codeWriter{h: make(http.Header)}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	testkit.WantAllocs(t, "admitted", 0, func() {
		w.body = w.body[:0]
		h.ServeHTTP(w, r)
	})
	require.Equal(t, "hello", string(w.body))
	require.NoError(t, bh.Acquire())
	defer bh.Release()
	testkit.WantAllocs(t, "rejected, static fallback", 1, func() {
		clear(w.h)
		w.body = w.body[:0]
		h.ServeHTTP(w, r)
	})
	require.Equal(t, http.StatusServiceUnavailable, w.code)
	require.Equal(t, "busy", string(w.body))
}

// codeWriter is a ResponseWriter that keeps the last status and body,
// without httptest.ResponseRecorder's header snapshot (an allocation) and
// first-status-only rule.
type codeWriter struct {
	h    http.Header
	code int
	body []byte
}

func (w *codeWriter) Header() http.Header         { return w.h }
func (w *codeWriter) WriteHeader(code int)        { w.code = code }
func (w *codeWriter) Write(b []byte) (int, error) { w.body = append(w.body, b...); return len(b), nil }

// A shed rejection answers 503 with DefaultRetryAfter (the shedder gives no
// hint) and reaches OnRejected with Policy Shed; once the shedder releases,
// the request is served again. The shedder's signal is a fake Source on a
// manual clock.
func TestServerShed503WhileEngaged(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	var hot atomic.Bool
	sh, err := shed.New(shed.Config{Ticker: tick, SampleInterval: 100 * time.Millisecond, CoolOff: 100 * time.Millisecond,
		Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
			s.SchedLatency = 0
			if hot.Load() {
				s.SchedLatency = time.Second
			}
		})})
	require.NoError(t, err)
	var rejected []pipeline.Kind
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Shed: sh}),
		DefaultRetryAfter: 2 * time.Second,
		OnRejected: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
			rejected = append(rejected, o.Policy)
			w.WriteHeader(status)
		},
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serveRecorded(h, nil).Code) // one completion: a cap of 1
	sample := func() {
		tick.Advance(100 * time.Millisecond)
		pm, err := sh.AcquireAt(tick.Now())
		require.NoError(t, err)
		sh.ReleaseAt(pm, tick.Now(), rampart.Ignored)
	}
	hot.Store(true)
	sample()
	require.True(t, sh.Overloaded())
	// Every slot of the published limit held (the cap and one call more,
	// or a probe's: read, never assumed); the clock stays put, so no
	// sample moves it meanwhile.
	limit := sh.Stats().Limit
	require.Positive(t, limit)
	pms := make([]shed.Permit, 0, limit)
	for range limit {
		pm, err := sh.AcquireAt(tick.Now())
		require.NoError(t, err, "within the limit %d", limit)
		pms = append(pms, pm)
	}
	rec := serveRecorded(h, nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "2", rec.Header().Get("Retry-After"))
	require.Equal(t, []pipeline.Kind{pipeline.Shed}, rejected)
	require.Equal(t, limit, sh.InFlight(), "the rejected request holds no slot")
	for _, pm := range pms {
		sh.ReleaseAt(pm, tick.Now(), rampart.Ignored)
	}
	hot.Store(false)
	tick.Advance(time.Second) // past the cool-off
	sample()
	require.False(t, sh.Overloaded())
	require.Equal(t, http.StatusOK, serveRecorded(h, nil).Code)
	require.Zero(t, sh.InFlight())
	require.Len(t, rejected, 1)
}

// The server runs its pipeline's copy without the retry; with
// CountStats the copy counts into the application's pipeline, so its
// Stats count the requests, a rejection by its kind.
func TestServerCountsIntoTheApplicationsPipeline(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	rt, err := retry.New(retry.Config{Ticker: tick})
	require.NoError(t, err)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1})
	require.NoError(t, err)
	p := mustPipeline(t, pipeline.Config{Retry: rt, Bulkhead: bh, CountStats: true})
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: p})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, serveRecorded(h, nil).Code)
	require.NoError(t, bh.Acquire())
	require.Equal(t, http.StatusServiceUnavailable, serveRecorded(h, nil).Code)
	bh.Release()
	s := p.Stats()
	require.EqualValues(t, 2, s.Calls)
	require.EqualValues(t, 1, s.Succeeded)
	require.EqualValues(t, 1, s.RejectedBy[pipeline.Bulkhead])
}

// A request whose context ends while the handler overruns the soft
// timeout is canceled, not timed out: a default Fallback does not answer
// it (the plain timeout answer is written, to a client that has gone).
func TestServerFallbackLeavesARequestEndedDuringAnOverrun(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel()                      // the client leaves
		tick.Advance(2 * time.Second) // the handler overruns and writes nothing
	})
	answered := 0
	h, err := httpguard.NewHandler(next, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Timeout: to}),
		Fallback: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
			answered++
			w.WriteHeader(status)
		}})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	require.Zero(t, answered, "a request that ended was answered by the default FallbackWhen")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}
