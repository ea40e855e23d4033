package httpguard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// StatusError is the error a [NewTransport] attempt returns to its pipeline
// for a response whose status is retryable or a failure: the retry and the
// breaker see it (its RetryAfter method is the server's Retry-After, which
// package retry honours). When the pipeline gives up, the transport returns
// the response itself, not this error, so callers of http.Client see the
// last response as usual.
type StatusError struct {
	// StatusCode is the response's status.
	StatusCode int
	// retryAfter is the parsed Retry-After, -1 when absent or invalid.
	retryAfter time.Duration
	resp       *http.Response
}

// Error returns e.g. "httpguard: status 503".
func (e *StatusError) Error() string { return "httpguard: status " + strconv.Itoa(e.StatusCode) }

// RetryAfter returns the server's Retry-After (seconds or HTTP-date form),
// or -1 when the response had none (package retry ignores a negative hint).
func (e *StatusError) RetryAfter() time.Duration { return e.retryAfter }

// StatusOf returns the HTTP status carried by err (a [*StatusError]
// anywhere in its chain), or 0. Use it in a breaker's Classify to treat
// some statuses differently (429, for instance, is retried but says little
// about the server's health).
func StatusOf(err error) int {
	if se, ok := errors.AsType[*StatusError](err); ok {
		return se.StatusCode
	}
	return 0
}

// ClientConfig configures [NewTransport]. The zero value of each field means
// its documented default.
type ClientConfig struct {
	// Base performs each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// Pipeline holds the policies every request goes through: a retry (with
	// its budget), a breaker, a rate limiter, a bulkhead or adaptive limit,
	// a soft-mode timeout, a hedger. Nil means none: the transport then
	// only adds its status handling. Its retry applies only to retryable
	// requests (see RetryNonIdempotent) and its hedger only to idempotent
	// requests; the others go through a copy of the pipeline without them.
	// A deadline-mode timeout is refused: it would cancel the response body
	// when RoundTrip returns; use AttemptTimeout.
	Pipeline *pipeline.Pipeline

	// AttemptTimeout bounds each attempt, from sending the request to
	// closing the response body (like http.Client.Timeout, per attempt). 0
	// means none. An attempt that times out fails with an error matching
	// context.DeadlineExceeded, which package retry's default classifier
	// does not retry (set its ShouldRetry to retry it).
	AttemptTimeout time.Duration

	// RetryStatus reports whether a response status is retried (a
	// [*StatusError] for the pipeline). Nil means 429, 502, 503 and 504.
	RetryStatus func(status int) bool

	// IsFailure reports whether a status that is not retried still counts
	// as a failure for the breaker and the adaptive limit. Nil means
	// status >= 500. Such a response is returned after one attempt.
	IsFailure func(status int) bool

	// RetryNonIdempotent lets the retry resend requests whose method is not
	// idempotent (POST, PATCH, ...). By default only GET, HEAD, OPTIONS,
	// TRACE, PUT and DELETE requests, and requests with an Idempotency-Key
	// or X-Idempotency-Key header, are retried or hedged. A request with a
	// body is sent more than once only when its GetBody is set
	// (http.NewRequest sets it for bytes, strings and bytes.Reader bodies).
	RetryNonIdempotent bool

	// NewHostBreaker, when set, gives every host (Request.URL.Host) its own
	// circuit breaker, built on the first request to that host and replacing
	// the pipeline's Breaker. It must build breakers on the pipeline's
	// ticker. Hosts are kept for the transport's lifetime: use it for a
	// bounded set of hosts.
	NewHostBreaker func(host string) (*circuitbreaker.Breaker, error)
}

// transport is the client RoundTripper.
type transport struct {
	base           http.RoundTripper
	retryStatus    func(int) bool
	isFailure      func(int) bool
	retryAll       bool
	attemptTimeout time.Duration

	def       route // the routes when there is no breaker per host
	newHostCB func(string) (*circuitbreaker.Breaker, error)
	hostsMu   sync.Mutex // serialises the creation of a host's route
	hosts     sync.Map   // host -> *route
}

// route holds the pipelines of one destination, all sharing its policies:
// full for retryable idempotent requests (retry and hedge), retry for
// retryable requests that must not be hedged, once for the others.
type route struct {
	full, retry, once *pipeline.Pipeline
	hedged            bool // full has a hedger
}

// NewTransport returns a RoundTripper that sends requests through
// cfg.Pipeline with the HTTP rules of [ClientConfig].
func NewTransport(cfg ClientConfig) (http.RoundTripper, error) {
	if cfg.AttemptTimeout < 0 {
		return nil, rampart.NewConfigError("httpguard", "AttemptTimeout", "must not be negative, got %v", cfg.AttemptTimeout)
	}
	t := &transport{
		base:           cfg.Base,
		retryStatus:    cfg.RetryStatus,
		isFailure:      cfg.IsFailure,
		retryAll:       cfg.RetryNonIdempotent,
		attemptTimeout: cfg.AttemptTimeout,
		newHostCB:      cfg.NewHostBreaker,
	}
	if t.base == nil {
		t.base = http.DefaultTransport
	}
	if t.retryStatus == nil {
		t.retryStatus = defaultRetryStatus
	}
	if t.isFailure == nil {
		t.isFailure = func(status int) bool { return status >= 500 }
	}
	var pc pipeline.Config
	if cfg.Pipeline != nil {
		pc = cfg.Pipeline.Config()
	}
	if pc.Timeout != nil && pc.Timeout.Mode() != timeout.ModeSoft {
		return nil, rampart.NewConfigError("httpguard", "Pipeline",
			"has a %v-mode Timeout, which would cancel the response body when RoundTrip returns; use ClientConfig.AttemptTimeout, or a soft-mode Timeout to classify slow responses", pc.Timeout.Mode())
	}
	r, err := newRoute(pc)
	if err != nil {
		return nil, err
	}
	t.def = r
	return t, nil
}

func defaultRetryStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// newRoute builds the pipelines of a route from cfg.
func newRoute(cfg pipeline.Config) (route, error) {
	var r route
	var err error
	if r.full, err = pipeline.New(cfg); err != nil {
		return route{}, err
	}
	r.hedged = cfg.Hedge != nil
	cfg.Hedge, cfg.Idempotent = nil, false
	if r.retry, err = pipeline.New(cfg); err != nil {
		return route{}, err
	}
	cfg.Retry = nil
	if r.once, err = pipeline.New(cfg); err != nil {
		return route{}, err
	}
	return r, nil
}

// routeFor returns the route of req's host.
func (t *transport) routeFor(req *http.Request) (*route, error) {
	if t.newHostCB == nil {
		return &t.def, nil
	}
	host := req.URL.Host
	if r, ok := t.hosts.Load(host); ok {
		return r.(*route), nil
	}
	// Slow path: the first request to this host. The mutex keeps two
	// racing first requests from building two breakers.
	t.hostsMu.Lock()
	defer t.hostsMu.Unlock()
	if r, ok := t.hosts.Load(host); ok {
		return r.(*route), nil
	}
	cb, err := t.newHostCB(host)
	if err != nil {
		return nil, err
	}
	if cb == nil {
		// Not a silent "no breaker": the caller asked for one per host.
		return nil, rampart.NewConfigError("httpguard", "NewHostBreaker", "returned no breaker and no error for host %q", host)
	}
	cfg := t.def.full.Config()
	cfg.Breaker = cb
	r, err := newRoute(cfg)
	if err != nil {
		return nil, err
	}
	t.hosts.Store(host, &r)
	return &r, nil
}

// CloseIdleConnections closes the idle connections of the base transport
// when it has such a method (http.Client.CloseIdleConnections calls it).
func (t *transport) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// idempotent reports whether req may be sent more than once.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	h := req.Header
	return h != nil && (h.Get("Idempotency-Key") != "" || h.Get("X-Idempotency-Key") != "")
}

// hasBody reports whether req carries a body.
func hasBody(req *http.Request) bool { return req.Body != nil && req.Body != http.NoBody }

// RoundTrip sends req through the pipeline. See [ClientConfig].
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r, err := t.routeFor(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	c := &clientCall{t: t, req: req}
	replayable := !hasBody(req) || req.GetBody != nil
	var resp *http.Response
	// Every response but the one returned is closed, also when user code
	// (a RetryStatus or IsFailure classifier) panics: the panic goes on
	// and no response is returned.
	finished := false
	defer func() {
		if !finished {
			c.finish(nil)
		}
	}()
	var o pipeline.Outcome
	switch {
	case !replayable || !(t.retryAll || idempotent(req)):
		c.sequential = true
		resp, o = pipeline.TryCall(req.Context(), r.once, c.attempt)
	case r.hedged && idempotent(req):
		resp, o = pipeline.TryCallHedged(req.Context(), r.full, c.attempt)
	default:
		c.sequential = true
		resp, o = pipeline.TryCall(req.Context(), r.retry, c.attempt)
	}
	if o.Code != pipeline.OK {
		resp = nil
		if se, ok := errors.AsType[*StatusError](o.Err); ok {
			// The pipeline gave up on a retryable or failure status: the
			// caller gets the response itself, as from a plain transport.
			resp, err = se.resp, nil
		} else {
			err = o.Err
		}
	}
	finished = true
	c.finish(resp)
	return resp, err
}

// clientCall is one RoundTrip: the request and the responses of its
// attempts, which are all closed but the one returned.
type clientCall struct {
	t          *transport
	req        *http.Request
	sequential bool // attempts never overlap (no hedging)

	mu       sync.Mutex
	bodyUsed bool             // the original body was handed to an attempt
	resps    []*http.Response // responses not yet discarded
	done     bool             // finish ran: late responses are closed at once
}

// attempt sends one attempt; it is the pipeline's call. Hedged attempts run
// concurrently.
func (c *clientCall) attempt(ctx context.Context) (*http.Response, error) {
	if c.sequential {
		c.discard() // the previous attempt's response is not returned: close it
	}
	r := c.req.WithContext(ctx) // a shallow copy: attempts never share one
	if hasBody(c.req) {
		c.mu.Lock()
		first := !c.bodyUsed
		c.bodyUsed = true
		c.mu.Unlock()
		if !first {
			body, err := c.req.GetBody() // non-nil: checked by RoundTrip
			if err != nil {
				return nil, retry.Permanent(err)
			}
			r.Body = body
		}
	}
	var cancel context.CancelFunc
	if c.t.attemptTimeout > 0 {
		var actx context.Context
		actx, cancel = context.WithTimeout(ctx, c.t.attemptTimeout)
		r = r.WithContext(actx)
	}
	resp, err := c.t.base.RoundTrip(r)
	if err != nil {
		if cancel != nil {
			cancel()
		}
		return nil, err
	}
	if cancel != nil {
		// The attempt's deadline also bounds the body; closing the body
		// releases it.
		resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	}
	if !c.track(resp) {
		return nil, context.Canceled // the call is over: a late hedge
	}
	status := resp.StatusCode
	switch {
	case c.t.retryStatus(status):
		return resp, &StatusError{StatusCode: status, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), resp: resp}
	case c.t.isFailure(status):
		return resp, retry.Permanent(&StatusError{StatusCode: status, retryAfter: -1, resp: resp})
	}
	return resp, nil
}

// track records resp for closing unless it is returned; it closes resp and
// returns false when the call is already over.
func (c *clientCall) track(resp *http.Response) bool {
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		drainClose(resp.Body)
		return false
	}
	c.resps = append(c.resps, resp)
	c.mu.Unlock()
	return true
}

// discard closes every response tracked so far (sequential attempts: the
// previous attempt's).
func (c *clientCall) discard() {
	c.mu.Lock()
	resps := c.resps
	c.resps = nil
	c.mu.Unlock()
	for _, r := range resps {
		drainClose(r.Body)
	}
}

// finish ends the call: every response but keep is closed, now and when a
// late hedged attempt returns; the request body is closed if no attempt
// took it (RoundTrip must close it on every path).
func (c *clientCall) finish(keep *http.Response) {
	c.mu.Lock()
	c.done = true
	resps := c.resps
	c.resps = nil
	used := c.bodyUsed
	c.mu.Unlock()
	for _, r := range resps {
		if r != keep {
			drainClose(r.Body)
		}
	}
	if !used {
		closeBody(c.req)
	}
}

// cancelBody releases an attempt's deadline when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// drainClose reads up to 4 KiB of body (so that a small error body does
// not cost the connection) and closes it.
func drainClose(body io.ReadCloser) {
	if body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, 4<<10)
	_ = body.Close()
}

func closeBody(req *http.Request) {
	if hasBody(req) {
		_ = req.Body.Close()
	}
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP-date
// (RFC 9110 §10.2.3), relative to now. It returns -1 when v is empty or
// invalid; a date in the past is 0.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return -1
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return -1
		}
		if s > int64(1<<63-1)/int64(time.Second) {
			return time.Duration(1<<63 - 1)
		}
		return time.Duration(s) * time.Second
	} else if s > 0 && errors.Is(err, strconv.ErrRange) {
		return time.Duration(1<<63 - 1) // more seconds than an int64 holds: the longest hint
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}
