package httpguard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
)

func review4Serve(h http.Handler, ctx context.Context) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if ctx != nil {
		r = r.WithContext(ctx)
	}
	h.ServeHTTP(rec, r)
	return rec
}

// The rate limiter's wait is rounded up to whole seconds (1 ms -> 1,
// 1.5 s -> 2, exactly 2 s -> 2) and answered with 429.
func TestReview4ServerRetryAfterRounding(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want string
	}{{1000, "1"}, {1 / 1.5, "2"}, {0.5, "2"}, {1.0 / 3600, "3600"}} {
		tick := rampart.NewManualTicker(1)
		rl, err := ratelimit.New(ratelimit.Config{Rate: c.rate, Burst: 1, Ticker: tick})
		require.NoError(t, err)
		h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{RateLimit: rl})})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, review4Serve(h, nil).Code)
		rec := review4Serve(h, nil)
		require.Equal(t, http.StatusTooManyRequests, rec.Code)
		require.Equal(t, c.want, rec.Header().Get("Retry-After"), "rate %v", c.rate)
	}
}

// An adaptive-limit rejection answers 503 with DefaultRetryAfter rounded up.
func TestReview4ServerAdaptiveRejection503(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	al, err := adaptive.New(adaptive.Config{Ticker: tick, InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
	require.NoError(t, err)
	var h http.Handler
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := review4Serve(h, nil) // a second request while this one holds the only slot
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
		require.Equal(t, "3", rec.Header().Get("Retry-After"))
		w.WriteHeader(http.StatusNoContent)
	})
	h, err = httpguard.NewHandler(inner, httpguard.ServerConfig{
		Pipeline:          mustPipeline(t, pipeline.Config{Adaptive: al}),
		DefaultRetryAfter: 2100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, review4Serve(h, nil).Code)
	require.Zero(t, al.Stats().InFlight)
}

// A pipeline's retry is dropped by the server: a failing handler runs once.
// The original pipeline keeps its retry.
func TestReview4ServerDoesNotRetryHandler(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	rt, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 5, BaseDelay: time.Microsecond,
		ShouldRetry: func(error) bool { return true }})
	require.NoError(t, err)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100})
	require.NoError(t, err)
	p := mustPipeline(t, pipeline.Config{Retry: rt, Breaker: cb})
	n := 0
	h, err := httpguard.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.WriteHeader(http.StatusBadGateway)
	}), httpguard.ServerConfig{Pipeline: p})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, review4Serve(h, nil).Code)
	require.Equal(t, 1, n)
	require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
	require.NotNil(t, p.Config().Retry)
}

// IsFailure decides what the breaker records, for every status written
// (an implicit 200 included), and a 1xx informational status is not the
// final one.
func TestReview4ServerIsFailureSeesFinalStatus(t *testing.T) {
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
	review4Serve(h, nil)
	status = http.StatusTeapot
	review4Serve(h, nil)
	require.Equal(t, []int{200, 418}, seen)
	require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
}

// OnReject gets the decided status and Outcome, with Retry-After set.
func TestReview4ServerOnRejectOutcome(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive,
		ConsecutiveFailures: 1, OpenDuration: 90 * time.Second})
	require.NoError(t, err)
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	var got pipeline.Outcome
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{
		Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb}),
		OnReject: func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
			got = o
			require.Equal(t, "90", w.Header().Get("Retry-After"))
			w.WriteHeader(status)
		},
	})
	require.NoError(t, err)
	rec := review4Serve(h, nil)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, pipeline.Rejected, got.Code)
	require.Equal(t, pipeline.Breaker, got.Policy)
	require.True(t, errors.Is(got.Err, circuitbreaker.ErrOpen))
	require.Equal(t, 90*time.Second, got.RetryAfter)
}

// A panicking handler: the permits are released, the breaker records a
// failure and the panic goes on unchanged.
func TestReview4ServerPanicRecordsBreakerFailure(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 100})
	require.NoError(t, err)
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("handler") }),
		httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Breaker: cb, Bulkhead: bh})})
	require.NoError(t, err)
	require.PanicsWithValue(t, "handler", func() { review4Serve(h, nil) })
	require.Zero(t, bh.Stats().InFlight)
	require.EqualValues(t, 1, cb.Stats().ConsecutiveFailures)
}

// A request whose context ends while it waits for a bulkhead permit (an
// outer middleware's deadline, say) was never served: the middleware must
// answer it. Today the Canceled outcome writes nothing, so net/http sends
// an empty 200 OK for a request the handler never saw.
func TestReview4ServerCanceledBeforeAdmissionIsNot200(t *testing.T) {
	bh, err := bulkhead.New(bulkhead.Config{Max: 1, MaxWait: time.Hour})
	require.NoError(t, err)
	h, err := httpguard.NewHandler(hello, httpguard.ServerConfig{Pipeline: mustPipeline(t, pipeline.Config{Bulkhead: bh})})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // e.g. an outer deadline that already passed
	rec := review4Serve(h, ctx)
	require.NotEqual(t, http.StatusOK, rec.Code, "a request never served answered 200 with body %q", rec.Body.String())
}
