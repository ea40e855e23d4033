package bench

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/timeout"
)

// BenchmarkHTTPServer measures the server middleware in process: a
// prebuilt *http.Request served into a minimal, reused http.ResponseWriter
// (no network, no server loop), so that the rows differ only by what the
// middleware adds to the handler. The handler writes a two-byte body.
//
//   - Success/handler-floor: the bare handler, the floor of every row.
//   - Success/rampart: httpguard.NewHandler over a pipeline of a circuit
//     breaker, a rate limiter, a bulkhead and a timeout in its default
//     mode (timeout.ModeDeadline: the handler sees the deadline in its
//     request's context), every policy admitting.
//   - Success/rampart-soft: the same with the timeout in timeout.ModeSoft
//     (the request keeps its context; a late handler is classified as
//     timed out when it returns).
//   - Success/failsafe: failsafehttp.NewHandler over failsafe-go's breaker,
//     rate limiter, bulkhead and timeout (whose context, merged with the
//     request's, gives the handler the deadline: the like of
//     Success/rampart).
//   - Success/pipeline-floor: the Success/rampart pipeline's Try around a
//     function that does nothing, and Success/withcontext-floor: one
//     Request.WithContext, the copy of the request that hands a handler
//     the deadline's context. The two lower bounds of the deadline-mode
//     row, whose difference to their sum is the middleware's own share.
//   - Reject/*: the rate limiter's only permit is spent, every request is
//     answered 429 (failsafehttp answers every rejection 429); the handler
//     never runs.
func BenchmarkHTTPServer(b *testing.B) {
	b.Run("Success/handler-floor", func(b *testing.B) { benchHTTPServer(b, httpOK, http.StatusOK) })
	b.Run("Success/rampart", func(b *testing.B) {
		benchHTTPServer(b, rampartHTTPHandler(b, timeout.ModeDeadline, false), http.StatusOK)
	})
	b.Run("Success/rampart-soft", func(b *testing.B) {
		benchHTTPServer(b, rampartHTTPHandler(b, timeout.ModeSoft, false), http.StatusOK)
	})
	b.Run("Success/failsafe", func(b *testing.B) { benchHTTPServer(b, failsafeHTTPHandler(false), http.StatusOK) })
	b.Run("Success/pipeline-floor", func(b *testing.B) {
		p := rampartHTTPPipeline(b, timeout.ModeDeadline, false)
		ctx := context.Background()
		b.ReportAllocs()
		defer reportCPU(b, cpuTime())
		for b.Loop() {
			if o := p.Try(ctx, pipelineOK); o.Code != pipeline.OK {
				b.Fatalf("not admitted: %v", o.Err)
			}
		}
	})
	b.Run("Success/withcontext-floor", func(b *testing.B) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		ctx := context.WithValue(context.Background(), httpBenchKey{}, 1)
		b.ReportAllocs()
		defer reportCPU(b, cpuTime())
		for b.Loop() {
			httpRequestSink = r.WithContext(ctx)
		}
	})
	b.Run("Reject/rampart", func(b *testing.B) {
		benchHTTPServer(b, rampartHTTPHandler(b, timeout.ModeDeadline, true), http.StatusTooManyRequests)
	})
	b.Run("Reject/failsafe", func(b *testing.B) {
		benchHTTPServer(b, failsafeHTTPHandler(true), http.StatusTooManyRequests)
	})
}

var httpBody = []byte("ok")

// httpRequestSink keeps the copies of Success/withcontext-floor alive past
// the compiler.
var httpRequestSink *http.Request

type httpBenchKey struct{}

// httpOK is the benchmarks' handler: a 200 with a two-byte body.
var httpOK = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(httpBody) })

// benchWriter is a minimal http.ResponseWriter that keeps the status and
// discards the body; its header map is reused by every request. Like
// net/http's own writer it is an io.StringWriter.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }

func (w *benchWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *benchWriter) WriteString(s string) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(s)
	return len(s), nil
}

// reset readies the writer for the next request: the status and the
// headers a previous answer set (the rejection's Retry-After and
// Content-Type) are cleared without freeing the map.
func (w *benchWriter) reset() {
	w.status = 0
	clear(w.h)
}

func benchHTTPServer(b *testing.B, h http.Handler, want int) {
	w := &benchWriter{h: make(http.Header)}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	defer reportCPU(b, cpuTime())
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != want {
			b.Fatalf("status %d, want %d", w.status, want)
		}
	}
}

// rampartHTTPHandler guards httpOK with rampartHTTPPipeline.
func rampartHTTPHandler(b *testing.B, m timeout.Mode, reject bool) http.Handler {
	h, err := httpguard.NewHandler(httpOK, httpguard.ServerConfig{Pipeline: rampartHTTPPipeline(b, m, reject)})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// rampartHTTPPipeline is a breaker, a rate limiter, a bulkhead and a
// timeout of mode m on the default ticker; reject spends the rate limiter's
// only permit.
func rampartHTTPPipeline(b *testing.B, m timeout.Mode, reject bool) *pipeline.Pipeline {
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	cb, err := circuitbreaker.New(circuitbreaker.Config{WindowSize: 100, FailureRateThreshold: 50, OpenDuration: time.Minute})
	must(err)
	rlCfg := ratelimit.Config{Rate: 1e9, Burst: 1 << 30}
	if reject {
		rlCfg = ratelimit.Config{Rate: 1e-6, Burst: 1}
	}
	rl, err := ratelimit.New(rlCfg)
	must(err)
	if reject && !rl.Allow() {
		b.Fatal("could not spend the permit")
	}
	bh, err := bulkhead.New(bulkhead.Config{Max: 1 << 20})
	must(err)
	to, err := timeout.New(timeout.Config{Duration: time.Minute, Mode: m})
	must(err)
	b.Cleanup(func() { _ = to.Close() })
	p, err := pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh, Timeout: to})
	must(err)
	return p
}

// errHTTPBench is the only error failsafe-go's breaker counts; the measured
// requests never produce it.
var errHTTPBench = errors.New("bench: failure")

// failsafeHTTPHandler guards httpOK with failsafehttp over failsafe-go's
// breaker, rate limiter, bulkhead and timeout, outermost first, as
// rampart's pipeline orders them; reject spends the rate limiter's only
// permit.
func failsafeHTTPHandler(reject bool) http.Handler {
	cb := fscb.NewBuilder[*http.Response]().
		HandleErrors(errHTTPBench).
		WithFailureThresholdRatio(50, 100).
		WithDelay(time.Minute).
		Build()
	var rl fsratelimiter.RateLimiter[*http.Response]
	if reject {
		rl = fsratelimiter.NewBurstyBuilder[*http.Response](1, time.Hour).Build()
		rl.TryAcquirePermit() // spend the only permit
	} else {
		rl = fsratelimiter.NewBurstyBuilder[*http.Response](1<<30, time.Second).Build()
	}
	bh := fsbulkhead.New[*http.Response](1 << 20)
	return failsafehttp.NewHandler(httpOK, cb, rl, bh, fstimeout.New[*http.Response](time.Minute))
}
