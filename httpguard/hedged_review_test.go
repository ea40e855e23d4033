package httpguard_test

import (
	"context"
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
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

// hrFunc is a RoundTripper from a function (in memory: usable in a
// synctest bubble).
type hrFunc func(*http.Request) (*http.Response, error)

func (f hrFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func hrResp(status int, body string) *http.Response {
	rec := httptest.NewRecorder()
	rec.WriteHeader(status)
	_, _ = io.WriteString(rec, body)
	return rec.Result()
}

// hrHedger builds a hedger on tick with its own watchdog (inside the bubble).
func hrHedger(t *testing.T, tick rampart.Ticker, mod func(*hedge.Config)) *hedge.Hedger {
	cfg := hedge.Config{Delay: time.Millisecond, Ticker: tick, Tick: time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	h, err := hedge.New(cfg)
	require.NoError(t, err)
	return h
}

// The package doc says the transport "starts no goroutine of its own except
// the hedged attempts, which end with the call", and the pipeline's bulkhead
// slot is meant to be held until the work has returned. But RoundTrip
// returns, and the attempt's bulkhead slot is released, while a losing
// hedge is still inside the base RoundTripper (here: it honours the
// cancellation, then takes a moment to tear the connection down). The
// next request is admitted meanwhile: two requests in flight to the
// dependency under a bulkhead of 1.
func TestHedgedReviewClientLoserOutlivesCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hrHedger(t, tick, nil)
		defer hg.Close()
		bh, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tick})
		require.NoError(t, err)
		var inBase, peak atomic.Int32
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		base := hrFunc(func(r *http.Request) (*http.Response, error) {
			if v := inBase.Add(1); v > peak.Load() {
				peak.Store(v)
			}
			defer inBase.Add(-1)
			switch n.Add(1) {
			case 1:
				tick.Advance(2 * time.Millisecond)
				<-hedgeStarted
				return hrResp(200, "first"), nil
			case 2:
				close(hedgeStarted)
				<-r.Context().Done()
				time.Sleep(time.Millisecond) // tearing the connection down takes a moment
				return nil, r.Context().Err()
			}
			return hrResp(200, "next"), nil
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

// --- guards that pass ---

// A hedged request with a body (a PUT): the first attempt sends the
// original body, the hedge a replay from GetBody; both see the whole body;
// the losing response and a late response are drained and closed, the
// request body is closed, and no goroutine is left when the bubble ends.
func TestHedgedReviewClientBodyReplayAndLateResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hrHedger(t, tick, nil)
		defer hg.Close()
		var mu sync.Mutex
		var seen []string
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		bt := &bodyTracker{base: hrFunc(func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			_ = r.Body.Close()
			mu.Lock()
			seen = append(seen, string(b))
			mu.Unlock()
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-hedgeStarted
				return hrResp(200, "first"), nil // wins
			}
			close(hedgeStarted)
			time.Sleep(5 * time.Millisecond) // ignores cancellation: RoundTrip waits for it
			return hrResp(200, "late"), nil
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
func TestHedgedReviewClientCallerCancelMidRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hrHedger(t, tick, func(c *hedge.Config) { c.MaxHedges = 2 })
		defer hg.Close()
		cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 5})
		require.NoError(t, err)
		rp, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 3})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		hedgeStarted := make(chan struct{})
		var n atomic.Int32
		bt := &bodyTracker{base: hrFunc(func(r *http.Request) (*http.Response, error) {
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
func TestHedgedReviewClientRetryOverHedgedRaces(t *testing.T) {
	leakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hrHedger(t, tick, nil)
		defer hg.Close()
		rp, err := retry.New(retry.Config{Ticker: tick, MaxAttempts: 3, BaseDelay: time.Millisecond})
		require.NoError(t, err)
		var n atomic.Int32
		bt := &bodyTracker{base: hrFunc(func(r *http.Request) (*http.Response, error) {
			n.Add(1)
			resp := hrResp(503, "busy")
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
func TestHedgedReviewClientHedgeWinnerBodyReadable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tick := rampart.NewManualTicker(1)
		hg := hrHedger(t, tick, nil)
		defer hg.Close()
		var n atomic.Int32
		base := hrFunc(func(r *http.Request) (*http.Response, error) {
			if n.Add(1) == 1 {
				tick.Advance(2 * time.Millisecond)
				<-r.Context().Done() // cancelled when the hedge wins
				return nil, r.Context().Err()
			}
			resp := hrResp(200, "")
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
