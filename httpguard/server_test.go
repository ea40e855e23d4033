package httpguard_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/watchdog"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/timeout"
)

// leakCheck verifies, after every other cleanup of t (servers, transports),
// that t started no goroutine that is still running.
func leakCheck(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

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
	leakCheck(t)
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
	leakCheck(t)
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
	leakCheck(t)
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
		OnReject: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
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
	leakCheck(t)
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
	leakCheck(t)
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

// An admitted request costs one allocation, its exchange (the status
// recorder and the pipeline's call); the abort guard adds none.
func TestServerAllocsAdmittedRequest(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick})
	require.NoError(t, err)
	bh, err := bulkhead.New(bulkhead.Config{Max: 100, Ticker: tick})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb, Bulkhead: bh})})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	require.Equal(t, 1.0, testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, r) }))
}
