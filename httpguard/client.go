package httpguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/ticker"
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

// ErrAttemptTimeout matches, through errors.Is, the error of an attempt
// that ran past [ClientConfig.AttemptTimeout] while the caller's context
// was still live. It does not match context.DeadlineExceeded, so that it
// is never taken for the caller's own deadline (which is returned as it is
// and never retried) and a ShouldRetry can tell the two apart: package
// retry's default classifier retries it, as it retries every error but a
// Permanent one while the caller's context is live, so a per-attempt
// timeout is retried like a 503 (a retryable request only), as in every
// HTTP resilience client. The error's Timeout method reports true, so
// url.Error.Timeout and net.Error checks see a timeout.
var ErrAttemptTimeout = errors.New("httpguard: attempt timed out (ClientConfig.AttemptTimeout)")

// attemptTimeoutError is the error of an attempt that ran past
// AttemptTimeout, built once per transport: a timeout allocates nothing.
type attemptTimeoutError struct{ msg string }

func (e *attemptTimeoutError) Error() string { return e.msg }

// Is matches [ErrAttemptTimeout].
func (e *attemptTimeoutError) Is(target error) bool { return target == ErrAttemptTimeout }

// Timeout reports true (net.Error).
func (e *attemptTimeoutError) Timeout() bool { return true }

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
	//
	// The response returned when the retry gives up is as from a plain
	// transport: RoundTrip returns at its headers, its body unread. The body
	// of a retryable status is read (up to 4 KiB, kept for reading) and
	// closed inside the attempt, so that its connection is not held during
	// the backoff, only when the retry is certain to follow: attempts
	// remain, the retry's ShouldRetry accepts the error, the caller's
	// context is live, the retry has no budget and no MaxDuration, and a
	// context deadline leaves room for the Retry-After (with a deadline and
	// no Retry-After, the backoff is unknown: not read). Otherwise it is
	// drained and closed when the next attempt starts. The one limit the
	// transport cannot see is the retry's MaxDelay: the body of a response
	// whose Retry-After exceeds it is read before the retry gives up, and
	// that response is returned readable in full.
	Pipeline *pipeline.Pipeline

	// AttemptTimeout bounds each attempt, from sending the request to
	// closing the response body (like http.Client.Timeout, per attempt). 0
	// means none. An attempt whose response headers did not come in time
	// fails with an error matching [ErrAttemptTimeout] (not
	// context.DeadlineExceeded, which names the caller's deadline): the
	// pipeline's retry retries it for a retryable request (its default
	// classifier does), its breaker records a failure, and its adaptive
	// limit a drop (as for context.DeadlineExceeded) unless
	// pipeline.Config.AdaptiveClassify decides. A deadline that passes
	// while the caller reads the body fails that read, as with
	// http.Client.Timeout. The caller's own deadline or cancellation is
	// returned as it is and never retried.
	AttemptTimeout time.Duration

	// RetryStatus reports whether a response status is retried (a
	// [*StatusError] for the pipeline, which honours its Retry-After).
	// Nil means the statuses every HTTP resilience client retries
	// (hashicorp/go-retryablehttp, Polly's standard resilience handler,
	// failsafe-go's failsafehttp): 408 Request Timeout, 429 Too Many
	// Requests and every 5xx but 501 Not Implemented and 505 HTTP Version
	// Not Supported, which the same request always gets again. Retried or
	// not, a status that IsFailure reports is recorded as a failure.
	RetryStatus func(status int) bool

	// IsFailure reports whether a status that is not retried still counts
	// as a failure for the breaker and the adaptive limit. Nil means
	// status >= 500. Such a response is returned after one attempt.
	IsFailure func(status int) bool

	// RetryNonIdempotent lets the retry resend requests whose method is not
	// idempotent (POST, PATCH, ...). By default only the methods RFC 9110
	// §9.2.2 defines as idempotent (GET, HEAD, OPTIONS, TRACE, PUT,
	// DELETE) and requests carrying an Idempotency-Key or
	// X-Idempotency-Key header (the IETF httpapi Idempotency-Key draft:
	// the server deduplicates them) are retried or hedged; any other
	// request is sent once, whatever its status or timeout. A request with
	// a body is sent more than once only when its GetBody is set
	// (http.NewRequest sets it for bytes, strings and bytes.Reader bodies).
	RetryNonIdempotent bool

	// NewHostBreaker, when set, gives every host (Request.URL.Host) its own
	// circuit breaker, built on the first request to that host and replacing
	// the pipeline's Breaker. It must build breakers on the pipeline's
	// ticker (a transport without a pipeline, or whose pipeline has no
	// policy that reads the clock, takes the breakers'); otherwise that
	// request fails with a *rampart.ConfigError naming the side that is
	// off: the pipeline's policy built without a Ticker (Field
	// "Pipeline.Retry", say) or the breakers ("NewHostBreaker"). Hosts are
	// kept for the transport's lifetime: use it for a bounded set of hosts.
	NewHostBreaker func(host string) (*circuitbreaker.Breaker, error)

	// Fallback, when set, gives the response of a request whose call ends
	// as FallbackWhen selects, in place of the error or the last response
	// RoundTrip would return: a synthetic *http.Response (see
	// [SyntheticResponse]) served from a cache or built in place. o is the
	// call's outcome (o.Err says why: a rejection error, the retry's
	// give-up error wrapping the last [*StatusError] or transport error);
	// the policies' Stats count that ending whatever Fallback returns.
	//
	// Body rules: every response of the call's attempts is closed before
	// Fallback is called (it sees the status through StatusOf(o.Err), not
	// the body), and so is the request's body. The response Fallback
	// returns is the caller's to close, as any response from RoundTrip; a
	// nil Body is replaced by http.NoBody and a nil Request by the
	// request. A non-nil error is returned as RoundTrip's error (a response
	// returned with it is closed); no response and no error returns the
	// call's own error, o.Err. Fallback runs on the caller's goroutine
	// after every permit was released: a panic goes on and leaks nothing.
	Fallback func(req *http.Request, o pipeline.Outcome) (*http.Response, error)

	// FallbackWhen selects the endings Fallback answers. Zero means
	// pipeline.DefaultEndings: a rejection by any policy of the pipeline
	// (the retry's budget included), its soft-mode timeout, and the
	// pipeline's retry giving up (after the last retryable status or
	// transport error, an AttemptTimeout included), plus
	// pipeline.Failures when FallbackFailed is set. A give-up inside Base
	// (another guarded transport's error) is a transport error of this
	// call: a failure, or this pipeline's retry giving up on it. A response that is not retried (a 404, or a
	// 500 to a request sent once) is a failure, answered only through
	// FallbackFailed; a cancellation only when FallbackWhen names
	// pipeline.Cancellations.
	FallbackWhen pipeline.Endings

	// FallbackFailed says which failures (pipeline.Failures: the
	// request's one attempt failed, or its error was not retryable) the
	// fallback answers, from the call's error: StatusOf(err) is the status
	// of a failure response, 0 for a transport error. Required when
	// FallbackWhen includes pipeline.Failures.
	FallbackFailed func(err error) bool
}

// SyntheticResponse builds a response for a [ClientConfig.Fallback]: status,
// header (nil: empty), body (its Content-Length set), for req, as HTTP/1.1.
// The caller closes its body as any response's (closing it does nothing).
func SyntheticResponse(req *http.Request, status int, header http.Header, body []byte) *http.Response {
	if header == nil {
		header = make(http.Header)
	}
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// transport is the client RoundTripper.
type transport struct {
	base           http.RoundTripper
	retryStatus    func(int) bool
	isFailure      func(int) bool
	retryAll       bool
	attemptTimeout time.Duration
	timeoutErr     error // the attempts' timeout error, built once

	def       route // the routes when there is no breaker per host
	newHostCB func(string) (*circuitbreaker.Breaker, error)
	hostsMu   sync.Mutex // serialises the creation of a host's route
	hosts     sync.Map   // host -> *route

	fallback       func(*http.Request, pipeline.Outcome) (*http.Response, error)
	fallbackWhen   pipeline.Endings
	fallbackFailed func(error) bool
}

// route holds the pipelines of one destination, all sharing its policies:
// full for retryable idempotent requests (retry and hedge), retry for
// retryable requests that must not be hedged, once for the others.
type route struct {
	full, retry, once *pipeline.Pipeline
	hedged            bool          // full has a hedger
	rp                *retry.Policy // retry's retry policy, nil when none
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
		timeoutErr: &attemptTimeoutError{"httpguard: attempt timed out after " + cfg.AttemptTimeout.String() +
			" (ClientConfig.AttemptTimeout)"},
		newHostCB: cfg.NewHostBreaker,

		fallback:       cfg.Fallback,
		fallbackWhen:   cfg.FallbackWhen,
		fallbackFailed: cfg.FallbackFailed,
	}
	if err := t.checkFallback(); err != nil {
		return nil, err
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
	if al := pc.Adaptive; al != nil && pc.AdaptiveClassify == nil {
		// The limiter classifies an attempt timeout as it classifies
		// context.DeadlineExceeded (a drop by default), which the
		// timeout's error no longer matches. Failure path only.
		pc.AdaptiveClassify = func(ctx context.Context, err error) rampart.Result {
			if errors.Is(err, ErrAttemptTimeout) {
				err = context.DeadlineExceeded
			}
			return al.Classify(ctx, err)
		}
	}
	r, err := newRoute(pc)
	if err != nil {
		return nil, err
	}
	t.def = r
	return t, nil
}

// checkFallback validates the fallback's fields and fills in FallbackWhen's
// default. Construction only.
func (t *transport) checkFallback() error {
	const all = pipeline.Rejections | pipeline.Timeouts | pipeline.RetriesExhausted | pipeline.Failures | pipeline.Cancellations
	switch {
	case t.fallback == nil && (t.fallbackWhen != 0 || t.fallbackFailed != nil):
		return rampart.NewConfigError("httpguard", "Fallback", "is nil, but FallbackWhen or FallbackFailed is set")
	case t.fallback == nil:
		return nil
	case t.fallbackWhen == 0:
		t.fallbackWhen = pipeline.DefaultEndings
		if t.fallbackFailed != nil {
			t.fallbackWhen |= pipeline.Failures
		}
	case t.fallbackFailed != nil && t.fallbackWhen&pipeline.Failures == 0:
		return rampart.NewConfigError("httpguard", "FallbackFailed", "is set but FallbackWhen does not include pipeline.Failures: it would never be called")
	}
	if bad := t.fallbackWhen &^ all; bad != 0 {
		return rampart.NewConfigError("httpguard", "FallbackWhen", "holds endings that no call has (%#x)", uint16(bad))
	}
	if t.fallbackWhen&pipeline.Failures != 0 && t.fallbackFailed == nil {
		return rampart.NewConfigError("httpguard", "FallbackFailed", "must be set when FallbackWhen includes pipeline.Failures")
	}
	return nil
}

// answers reports whether the fallback answers the call that ended as o.
// Failure path.
func (t *transport) answers(o pipeline.Outcome) bool {
	if t.fallback == nil || !t.fallbackWhen.Selects(o) {
		return false
	}
	return !pipeline.Failures.Selects(o) || t.fallbackFailed(o.Err)
}

// answer returns the fallback's response for req (see ClientConfig.Fallback).
// Failure path: every response of the call is closed already.
func (t *transport) answer(req *http.Request, o pipeline.Outcome) (*http.Response, error) {
	resp, err := t.fallback(req, o)
	switch {
	case err != nil:
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		return nil, err
	case resp == nil:
		return nil, o.Err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	if resp.Request == nil {
		resp.Request = req
	}
	return resp, nil
}

// defaultRetryStatus is RetryStatus's default: 408, 429 and the 5xx
// statuses but 501 and 505.
func defaultRetryStatus(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests:
		return true
	case status == http.StatusNotImplemented, status == http.StatusHTTPVersionNotSupported:
		return false
	}
	return status >= 500 && status <= 599
}

// newRoute builds the pipelines of a route from cfg.
func newRoute(cfg pipeline.Config) (route, error) {
	var r route
	var err error
	if r.full, err = pipeline.New(cfg); err != nil {
		return route{}, err
	}
	r.hedged = cfg.Hedge != nil
	r.rp = cfg.Retry
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
	if err := hostBreakerTicker(&cfg, host, cb); err != nil {
		return nil, err
	}
	cfg.Breaker = cb
	r, err := newRoute(cfg)
	if err != nil {
		return nil, err
	}
	t.hosts.Store(host, &r)
	return &r, nil
}

// hostBreakerTicker checks that cb, host's breaker, runs on the ticker of
// the pipeline cfg (whose Breaker it replaces), and names the side that is
// off when it does not: package pipeline would blame the breaker whichever
// it is. A pipeline on rampart.DefaultTicker with no policy that reads it
// (the default was filled in, as for a nil ClientConfig.Pipeline) takes
// cb's ticker instead. Slow path: a host's first request.
func hostBreakerTicker(cfg *pipeline.Config, host string, cb *circuitbreaker.Breaker) error {
	pt, bt := cfg.Ticker, cb.Ticker()
	same, ok := ticker.Equal(bt, pt)
	if !ok {
		return rampart.NewConfigError("httpguard", "NewHostBreaker", "built the breaker of host %q on a Ticker that "+ticker.UncomparableReason, host, bt)
	}
	if same {
		return nil
	}
	// The policies that read the pipeline's ticker, the breaker replaced
	// excepted (pipeline.New checked they share it).
	var users []string
	for _, u := range [...]struct {
		name string
		on   bool
	}{{"Retry", cfg.Retry != nil}, {"RateLimit", cfg.RateLimit != nil}, {"Adaptive", cfg.Adaptive != nil},
		{"Timeout", cfg.Timeout != nil}, {"Hedge", cfg.Hedge != nil}} {
		if u.on {
			users = append(users, u.name)
		}
	}
	def := rampart.DefaultTicker()
	pDef, _ := ticker.Equal(pt, def)
	bDef, _ := ticker.Equal(bt, def)
	const mixed = "; readings of different tickers are not comparable: build the breakers and the pipeline's policies on one Ticker"
	switch {
	case pDef && len(users) == 0:
		cfg.Ticker = bt // no policy reads the default: nothing to mismatch
		return nil
	case pDef && !bDef:
		// The pipeline's policies were built without a Ticker.
		also := ""
		if len(users) > 1 {
			also = " (as do its " + strings.Join(users[1:], ", ") + ")"
		}
		return rampart.NewConfigError("httpguard", "Pipeline."+users[0],
			"uses rampart.DefaultTicker() (its Config.Ticker is not set)%s, but NewHostBreaker built the breaker of host %q on another Ticker"+mixed, also, host)
	}
	on := "the pipeline's Ticker"
	if len(users) > 0 {
		on += " (used by its " + strings.Join(users, ", ") + ")"
	}
	if bDef {
		return rampart.NewConfigError("httpguard", "NewHostBreaker",
			"built the breaker of host %q on rampart.DefaultTicker() (its Config.Ticker is not set), not on %s"+mixed, host, on)
	}
	return rampart.NewConfigError("httpguard", "NewHostBreaker",
		"built the breaker of host %q on a different Ticker than %s"+mixed, host, on)
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
		c.sequential, c.rp = true, r.rp
		resp, o = pipeline.TryCall(req.Context(), r.retry, c.attempt)
	}
	if o.Code != pipeline.OK && t.answers(o) {
		// Every response of the call is closed before the fallback runs
		// (a panic in it then leaks nothing).
		finished = true
		c.finish(nil)
		return t.answer(req, o)
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
	sequential bool          // attempts never overlap (no hedging)
	rp         *retry.Policy // sequential, and this policy may retry a failed attempt; else nil
	n          int           // sequential attempts started

	mu       sync.Mutex
	bodyUsed bool             // the original body was handed to an attempt
	resps    []*http.Response // responses not yet discarded
	done     bool             // finish ran: late responses are closed at once
}

// attempt sends one attempt; it is the pipeline's call. Hedged attempts run
// concurrently.
func (c *clientCall) attempt(ctx context.Context) (*http.Response, error) {
	if c.sequential {
		c.n++
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
			if r.Context().Err() == context.DeadlineExceeded && ctx.Err() == nil {
				// The attempt's own deadline, not the caller's: retryable.
				err = c.t.timeoutErr
			}
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
		se := &StatusError{StatusCode: status, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), resp: resp}
		if c.rp != nil && c.retryFollows(ctx, se) {
			releaseBody(resp)
		}
		return resp, se
	case c.t.isFailure(status):
		return resp, retry.Permanent(&StatusError{StatusCode: status, retryAfter: -1, resp: resp})
	}
	return resp, nil
}

// retryFollows reports whether the retry policy is certain to retry se,
// the status error of attempt c.n, so that its body may be released before
// the backoff (see releaseBody). The policy decides only after the attempt
// returns, and the response it does not retry is returned to the caller
// as from a plain transport, headers in and body untouched: reading that
// body here would keep RoundTrip waiting for it (a streamed 429, a 503
// whose body comes slowly). So it answers true only when no limit the
// transport cannot see ahead of the decision can stop the retry: attempts
// remain, the policy retries the error, the caller's context is live,
// there is no budget (which may refuse) and no MaxDuration (NeedsTime),
// and a context deadline leaves room for the Retry-After hint (the backoff
// delay, drawn at the decision, is not known before: with a deadline and
// no hint, no). The one limit it cannot see is MaxDelay, which a hint
// longer than it exceeds: such a response is released and then returned
// (readable in full). Retry path only; ShouldRetry is called once more,
// as the retry's contract allows.
func (c *clientCall) retryFollows(ctx context.Context, se *StatusError) bool {
	rp := c.rp
	if c.n >= rp.MaxAttempts() || ctx.Err() != nil || rp.Budget() != nil || rp.NeedsTime() || !rp.Retryable(se) {
		return false
	}
	d, ok := ctx.Deadline()
	if !ok {
		return true
	}
	return se.retryAfter >= 0 && se.retryAfter < time.Until(d)
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

// drainLimit is how much of a discarded body is read so that its
// connection can be reused: a small error body does not cost the
// connection, a large one is not read to the end.
const drainLimit = 4 << 10

// drainClose reads up to drainLimit bytes of body and closes it.
func drainClose(body io.ReadCloser) {
	if body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	_ = body.Close()
}

// releaseBody reads the body of a response that will be retried
// (retryFollows) into memory when it is no longer than drainLimit, and
// closes it: the connection goes back to the pool before the retry's
// backoff (a Retry-After may be seconds), not when the next attempt
// starts. The response stays readable, in case it is returned after all
// (a Retry-After above the retry's MaxDelay). A longer body stays open
// (what was read comes first) and is drained and closed when the next
// attempt starts or the call ends. Retry path only: it allocates the copy.
func releaseBody(resp *http.Response) {
	orig := resp.Body
	if orig == nil || orig == http.NoBody {
		return
	}
	b, err := io.ReadAll(io.LimitReader(orig, drainLimit+1))
	if err == nil && len(b) > drainLimit {
		resp.Body = &splicedBody{Reader: io.MultiReader(bytes.NewReader(b), orig), orig: orig}
		return
	}
	_ = orig.Close()
	resp.Body = &memBody{r: bytes.NewReader(b), err: err}
}

// memBody is a response body read into memory; err, when not nil, is the
// read error that ended it, returned after the bytes.
type memBody struct {
	r   *bytes.Reader
	err error
}

func (m *memBody) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err == io.EOF && m.err != nil {
		err = m.err
	}
	return n, err
}

func (m *memBody) Close() error { return nil }

// splicedBody is a body whose first bytes were read into memory.
type splicedBody struct {
	io.Reader
	orig io.ReadCloser
}

func (s *splicedBody) Close() error { return s.orig.Close() }

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
