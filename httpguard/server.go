package httpguard

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
)

// ErrFailureStatus is the error a [NewHandler] middleware records with its
// pipeline's breaker and adaptive limit when the handler's status is a
// failure ([ServerConfig.IsFailure]).
var ErrFailureStatus = errors.New("httpguard: handler answered a failure status")

// ServerConfig configures the server middleware. The zero value of each
// field but Pipeline means its documented default.
type ServerConfig struct {
	// Pipeline admits the requests. Required. Its retry, if any, is not
	// used: a server does not retry its own handler. With its
	// CountStats set, its Stats count the requests (the copy without
	// the retry counts into them).
	Pipeline *pipeline.Pipeline

	// IsFailure reports whether the handler's status counts as a failure
	// for the breaker and the adaptive limit. Nil means status >= 500.
	IsFailure func(status int) bool

	// TimeoutStatus is the status written when the pipeline's timeout
	// expired and the handler wrote nothing. Zero means 503 Service
	// Unavailable; a gateway sets 504 Gateway Timeout.
	TimeoutStatus int

	// DefaultRetryAfter is the Retry-After sent with a rejection whose
	// policy gives no hint (a bulkhead, an adaptive limit, a shedder).
	// Zero means one second.
	DefaultRetryAfter time.Duration

	// OnRejected, when set, writes the rejection response instead of the
	// default plain-text one. The status and the Retry-After header are
	// decided already: status is 429 or 503, and w's Retry-After header is
	// set; OnRejected must call w.WriteHeader(status) itself. It is not
	// called for the rejections that Fallback answers.
	OnRejected func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome)

	// Fallback, when set, answers in the guard's place the requests that
	// FallbackWhen selects: a rejection (the handler never ran), the
	// timeout answer (the pipeline's timeout expired and the handler wrote
	// nothing; the entity headers it set are restored first, as for the
	// plain answer) and, only when FallbackWhen names
	// pipeline.Cancellations, a request whose context ended before the
	// handler answered (also one that ended while the handler overran the
	// timeout: the client has gone, so it is a cancellation, not a
	// timeout). It serves a static page or a cached body
	// ([StaticFallback] builds one). status is the guard's answer (429 or
	// 503 for a rejection, TimeoutStatus otherwise) and w's Retry-After
	// header is set as for that answer; the fallback keeps both by calling
	// w.WriteHeader(status), or replaces them: another status (200 to
	// serve a cached page as the answer), w.Header().Del("Retry-After").
	// o is the request's outcome: the policies' Stats count the rejection
	// or the timeout whatever the fallback writes. It runs on the request's
	// goroutine after every permit was released (a panic goes on, as
	// net/http expects, and leaks nothing). What it allocates is its own.
	Fallback func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome)

	// FallbackWhen selects the endings Fallback answers: the
	// rejections (pipeline.Rejections, or pipeline.RejectionsBy some
	// kinds), pipeline.Timeouts and pipeline.Cancellations. Zero means
	// pipeline.Rejections | pipeline.Timeouts. The other endings do not
	// occur on a server (the handler's own failure status is already
	// written; a server does not retry), and NewHandler refuses them.
	FallbackWhen pipeline.Endings
}

// serverRejections are the rejections that occur on a server: a server's
// pipeline has no retry.
const serverRejections = pipeline.Rejections &^ (1 << pipeline.Retry)

// server is the middleware's handler.
type server struct {
	next              http.Handler
	p                 *pipeline.Pipeline
	isFailure         func(int) bool
	timeoutStatus     int
	defaultRetryAfter time.Duration
	// defaultRetryAfterS is defaultRetryAfter as the Retry-After value,
	// formatted once.
	defaultRetryAfterS string
	onReject           func(http.ResponseWriter, *http.Request, int, pipeline.Outcome)
	fallback           func(http.ResponseWriter, *http.Request, int, pipeline.Outcome)
	fallbackWhen       pipeline.Endings
	// exchanges holds the *exchange of requests that have been answered,
	// for the next ones: the wrapper handed to the handler costs no
	// allocation per request (gin and echo pool theirs the same way).
	exchanges sync.Pool
}

// NewHandler returns a handler that admits each request through
// cfg.Pipeline before calling next. See the package doc for the statuses.
func NewHandler(next http.Handler, cfg ServerConfig) (http.Handler, error) {
	if next == nil {
		return nil, rampart.NewConfigError("httpguard", "next", "must not be nil")
	}
	if cfg.Pipeline == nil {
		return nil, rampart.NewConfigError("httpguard", "Pipeline", "must not be nil")
	}
	if cfg.TimeoutStatus != 0 && (cfg.TimeoutStatus < 200 || cfg.TimeoutStatus > 999) {
		return nil, rampart.NewConfigError("httpguard", "TimeoutStatus", "must be a final HTTP status code (200-999), got %d", cfg.TimeoutStatus)
	}
	if cfg.DefaultRetryAfter < 0 {
		return nil, rampart.NewConfigError("httpguard", "DefaultRetryAfter", "must not be negative, got %v", cfg.DefaultRetryAfter)
	}
	if cfg.Fallback == nil && cfg.FallbackWhen != 0 {
		return nil, rampart.NewConfigError("httpguard", "FallbackWhen", "is set without a Fallback")
	}
	fallbackWhen := cfg.FallbackWhen
	if fallbackWhen == 0 {
		fallbackWhen = pipeline.Rejections | pipeline.Timeouts
	}
	if bad := fallbackWhen &^ (pipeline.Rejections | pipeline.Timeouts | pipeline.Cancellations); bad != 0 {
		return nil, rampart.NewConfigError("httpguard", "FallbackWhen",
			"holds endings that a server has not (%#x): a handler's failure status is already written and a server does not retry; use pipeline.Rejections, RejectionsBy, Timeouts and Cancellations", uint16(bad))
	}
	if cfg.Fallback != nil && cfg.OnRejected != nil && fallbackWhen&serverRejections == serverRejections {
		return nil, rampart.NewConfigError("httpguard", "OnRejected",
			"is never called: Fallback answers every rejection (FallbackWhen); set one of them, or narrow FallbackWhen with pipeline.RejectionsBy")
	}
	p := cfg.Pipeline
	if pc := p.Config(); pc.Retry != nil {
		pc.Retry = nil
		np, err := pipeline.New(pc)
		if err != nil {
			return nil, err
		}
		p = np
	}
	s := &server{
		next:              next,
		p:                 p,
		isFailure:         cfg.IsFailure,
		timeoutStatus:     cfg.TimeoutStatus,
		defaultRetryAfter: cfg.DefaultRetryAfter,
		onReject:          cfg.OnRejected,
		fallback:          cfg.Fallback,
		fallbackWhen:      fallbackWhen,
	}
	if s.isFailure == nil {
		s.isFailure = func(status int) bool { return status >= 500 }
	}
	s.exchanges.New = func() any { return &exchange{s: s} }
	if s.timeoutStatus == 0 {
		s.timeoutStatus = http.StatusServiceUnavailable
	}
	if s.defaultRetryAfter == 0 {
		s.defaultRetryAfter = time.Second
	}
	s.defaultRetryAfterS = retryAfterSeconds(s.defaultRetryAfter)
	return s, nil
}

// Middleware returns NewHandler as a middleware constructor, validating cfg
// once.
func Middleware(cfg ServerConfig) (func(http.Handler) http.Handler, error) {
	if _, err := NewHandler(http.NotFoundHandler(), cfg); err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		h, err := NewHandler(next, cfg)
		if err != nil {
			panic(err) // unreachable: cfg was validated above and next is checked by the caller's mux
		}
		return h
	}, nil
}

// exchange is one request in flight: the status recorder handed to the
// handler and what the pipeline's call needs. Exchanges are reused through
// the server's pool: ServeHTTP takes one, and puts it back cleared once the
// request is answered (not on a panic, whose exchange is left to the
// garbage collector), so an admitted request allocates nothing for it.
type exchange struct {
	http.ResponseWriter
	s      *server
	r      *http.Request
	status int
	wrote  bool
	// aborted: the handler panicked with http.ErrAbortHandler after the
	// client went away (or the pipeline's deadline passed); serve
	// returned an outcome for the pipeline and ServeHTTP re-panics.
	aborted bool
	// saved holds the entity headers (entityHeaders) as they were before
	// the handler ran: the timeout answer (and that for a request whose
	// context ended) restores them, so that it does not go out with the
	// handler's validators, caching or encoding for a body it never wrote.
	saved [len(entityHeaders)][]string
}

// entityHeaders are the headers a handler sets for the body it means to
// write, wrong on the timeout answer that replaces it. The values are kept,
// not cleared: a middleware around this one may have set them (an
// on-the-fly compressor's Content-Encoding, a session's Set-Cookie).
var entityHeaders = [...]string{
	"Content-Disposition", "Content-Encoding", "Content-Language", "Content-Location",
	"Content-Range", "Etag", "Expires", "Last-Modified", "Set-Cookie",
}

// Cache-Control is not among them: the timeout answer sets it to no-store.

// saveHeaders records the entity headers before the handler runs. An empty
// header map, the usual case (no middleware around this one set a header),
// has none: saved stays all nil, as the pool left it, without nine map
// reads.
func (e *exchange) saveHeaders() {
	h := e.ResponseWriter.Header()
	if len(h) == 0 {
		return
	}
	for i, k := range entityHeaders {
		e.saved[i] = h[k]
	}
}

// restoreHeaders puts the entity headers back as they were before the
// handler ran. Timeout path.
func (e *exchange) restoreHeaders() {
	h := e.ResponseWriter.Header()
	for i, k := range entityHeaders {
		if v := e.saved[i]; v != nil {
			h[k] = v
		} else {
			delete(h, k)
		}
	}
}

// WriteHeader records the status and forwards it.
func (e *exchange) WriteHeader(status int) {
	if !e.wrote && status >= 200 {
		e.status, e.wrote = status, true
	}
	e.ResponseWriter.WriteHeader(status)
}

// Write records an implicit 200 and forwards the bytes.
func (e *exchange) Write(b []byte) (int, error) {
	if !e.wrote {
		e.status, e.wrote = http.StatusOK, true
	}
	return e.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer (see FlushError), for streaming
// handlers that check w.(http.Flusher) rather than use
// http.ResponseController.
func (e *exchange) Flush() { _ = e.FlushError() }

// FlushError flushes the underlying writer and returns its error (the
// client is gone, say): http.ResponseController.Flush calls FlushError
// before Flush, so without it a streaming handler behind the guard would
// never see that error. A flush that the writer underneath supports counts
// as an implicit 200, as a write does.
func (e *exchange) FlushError() error {
	err := http.NewResponseController(e.ResponseWriter).Flush()
	if !e.wrote && !errors.Is(err, http.ErrNotSupported) {
		e.status, e.wrote = http.StatusOK, true
	}
	return err
}

// Hijack hands the connection to the handler (a WebSocket upgrade) for
// handlers that check w.(http.Hijacker); it fails with
// http.ErrNotSupported where the underlying writer cannot (HTTP/2). A
// hijacked exchange counts as answered: nothing more is written on it.
func (e *exchange) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, buf, err := http.NewResponseController(e.ResponseWriter).Hijack()
	if err == nil && !e.wrote {
		e.status, e.wrote = http.StatusSwitchingProtocols, true
	}
	return conn, buf, err
}

// ReadFrom hands src to the underlying writer's io.ReaderFrom, for handlers
// that io.Copy a file to w: net/http's own writer then sends it with
// sendfile(2), which a wrapper without ReadFrom would lose. Without an
// io.ReaderFrom underneath it copies to the underlying writer with
// io.Copy. What it wrote counts as the implicit 200 (net/http's ReadFrom
// writes the header only once it has bytes to send).
func (e *exchange) ReadFrom(src io.Reader) (n int64, err error) {
	if rf, ok := e.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(src)
	} else {
		n, err = io.Copy(e.ResponseWriter, src) // no ReadFrom there: io.Copy does not call back here
	}
	if n > 0 && !e.wrote {
		e.status, e.wrote = http.StatusOK, true
	}
	return n, err
}

// Unwrap lets http.ResponseController reach the underlying writer (Flush,
// Hijack, deadlines).
func (e *exchange) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// errClientGone is the error an exchange returns to its pipeline when the
// handler aborted (panicked with http.ErrAbortHandler) because the client
// went away: it matches context.Canceled, which the breaker's and the
// adaptive limit's default classifiers record as Ignored, and
// http.ErrAbortHandler, for a custom classifier.
var errClientGone error = clientGoneError{}

type clientGoneError struct{}

func (clientGoneError) Error() string {
	return "httpguard: the client went away mid-response (http.ErrAbortHandler)"
}

// Is matches context.Canceled and http.ErrAbortHandler.
func (clientGoneError) Is(target error) bool {
	return target == context.Canceled || target == http.ErrAbortHandler
}

// serve is the pipeline's call: the inner handler, its status classified.
func (e *exchange) serve(ctx context.Context) (err error) {
	r := e.r
	if ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	// The one deferred call of a request (no allocation, a few ns): a
	// handler that aborts with http.ErrAbortHandler (httputil.ReverseProxy
	// does when the client leaves mid-body) must not reach the pipeline's
	// panic guard, which records every panic as a failure.
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v != any(http.ErrAbortHandler) {
			panic(v) // not ours: the pipeline's guard records a failure and re-raises it
		}
		switch {
		case e.r.Context().Err() != nil:
			// The client left (or the server closed the connection):
			// no verdict on the handler or what it depends on.
			err = errClientGone
		case ctx.Err() != nil:
			// The pipeline's deadline cut the handler short: the
			// timeout's verdict, as for a handler that gave up on it.
			err = ctx.Err()
		default:
			// The handler gave up on its own with the client still
			// there (a proxy whose upstream broke mid-body): a failure,
			// as any panic.
			panic(v)
		}
		e.aborted = true // ServeHTTP re-panics once the permits are released
	}()
	e.s.next.ServeHTTP(e, r)
	if e.wrote && e.s.isFailure(e.status) {
		return ErrFailureStatus
	}
	if !e.wrote && ctx.Err() != nil {
		// The handler gave up on its deadline without answering: let the
		// timeout (or the cancellation) decide the outcome.
		return ctx.Err()
	}
	return nil
}

// ServeHTTP admits the request through the pipeline and calls the handler.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := s.exchanges.Get().(*exchange)
	e.ResponseWriter, e.r = w, r
	// Saved with any pipeline, not only one with a timeout: a request whose
	// context ends (before admission, or while the handler gives up on it)
	// gets the same answer, which restores them.
	e.saveHeaders()
	o := s.p.Try(r.Context(), e.serve)
	if e.aborted {
		// Every permit is released and the outcome recorded: abort the
		// response as the handler asked, the way net/http expects.
		panic(http.ErrAbortHandler)
	}
	s.answer(w, r, e, o)
	// The handler has returned and the answer is written: w may not be
	// used any more (http.ResponseWriter's contract), so neither may the
	// exchange that wrapped it. Cleared, it holds no reference to this
	// request.
	*e = exchange{s: s}
	s.exchanges.Put(e)
}

// answer writes what the outcome calls for when the handler did not answer:
// a rejection, or the timeout answer.
func (s *server) answer(w http.ResponseWriter, r *http.Request, e *exchange, o pipeline.Outcome) {
	switch o.Code {
	case pipeline.Rejected:
		status := http.StatusServiceUnavailable
		if o.Policy == pipeline.RateLimit {
			status = http.StatusTooManyRequests
		}
		if s.fallback != nil && s.fallbackWhen.Selects(o) {
			w.Header().Set("Retry-After", s.retryAfter(o))
			s.fallback(w, r, status, o)
			return
		}
		s.writeReject(w, r, status, o)
	case pipeline.TimedOut, pipeline.Canceled:
		// Canceled: the request's context ended before or while it was
		// admitted (or the handler returned without answering): not an
		// implicit 200 for a request nobody served. Writing to a client
		// that has gone is harmless.
		if !e.wrote {
			e.restoreHeaders()
			if s.fallback != nil && s.fallbackWhen.Selects(o) {
				w.Header().Set("Retry-After", s.defaultRetryAfterS)
				s.fallback(w, r, s.timeoutStatus, o)
				return
			}
			writePlain(w, s.timeoutStatus, s.defaultRetryAfterS, true, "")
		}
	}
}

// writeReject answers a rejection. Rejection path: what a server under
// overload answers most, so it costs one allocation (writePlain's), two
// when the Retry-After hint is 100 s or more (its digits).
func (s *server) writeReject(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
	ra := s.retryAfter(o)
	if s.onReject != nil {
		w.Header().Set("Retry-After", ra)
		s.onReject(w, r, status, o)
		return
	}
	writePlain(w, status, ra, false, o.Err.Error())
}

// retryAfter is the Retry-After value of a rejection: the policy's hint,
// else DefaultRetryAfter. Rejection path.
func (s *server) retryAfter(o pipeline.Outcome) string {
	if o.RetryAfter > 0 {
		return retryAfterSeconds(o.RetryAfter) // no allocation below 100 s (strconv's small numbers)
	}
	return s.defaultRetryAfterS
}

// StaticFallbackConfig is the response a [StaticFallback] serves.
type StaticFallbackConfig struct {
	// Status is the response's status. Zero keeps the guard's: 429 or 503
	// for a rejection, ServerConfig.TimeoutStatus for a timeout. Set 200
	// to serve a cached page as the answer (clients and caches then take
	// it for one: give it a short Cache-Control in Header).
	Status int

	// DropRetryAfter removes the guard's Retry-After header. By default it
	// is kept: a client that gets the static page still learns when to
	// come back.
	DropRetryAfter bool

	// Header is set on the response (Content-Type, Cache-Control, ...),
	// replacing the values of the same keys. Copied by StaticFallback.
	Header http.Header

	// Body is the response's body, written as it is (not for a HEAD
	// request, as net/http does). Copied by StaticFallback.
	Body []byte
}

// StaticFallback returns a [ServerConfig.Fallback] that serves cfg's
// response: a static page or a cached copy of one, with the guard's status
// and Retry-After or others (see [StaticFallbackConfig]), and a
// Content-Length. It copies cfg's header and body once; an answer costs no
// allocation of its own. It returns a *rampart.ConfigError for a Status
// that is not a final HTTP status (200-999).
func StaticFallback(cfg StaticFallbackConfig) (func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome), error) {
	if cfg.Status != 0 && (cfg.Status < 200 || cfg.Status > 999) {
		return nil, rampart.NewConfigError("httpguard", "StaticFallbackConfig.Status", "must be 0 (the guard's status) or a final HTTP status code (200-999), got %d", cfg.Status)
	}
	header := make(http.Header, len(cfg.Header)+1)
	for k, v := range cfg.Header {
		v = append([]string(nil), v...)
		header[http.CanonicalHeaderKey(k)] = v[:len(v):len(v)] // capped: an Add by the handler's middleware copies
	}
	header["Content-Length"] = []string{strconv.Itoa(len(cfg.Body))}
	body := append([]byte(nil), cfg.Body...)
	return func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
		h := w.Header()
		for k, v := range header {
			h[k] = v
		}
		if cfg.DropRetryAfter {
			delete(h, "Retry-After")
		}
		if cfg.Status != 0 {
			status = cfg.Status
		}
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = w.Write(body)
		}
	}, nil
}

// writePlain answers status as http.Error(w, text, status) does, where
// text is the status text, followed by ": " and detail when detail is set,
// with Retry-After ra, and Cache-Control: no-store when noStore. The
// header values share one backing array (one allocation, as in
// http.Header.Clone; each value's slice is capped, so an append by a
// middleware copies it) and the body is written as it is, without fmt
// (net/http's writer is an io.StringWriter: no copy).
func writePlain(w http.ResponseWriter, status int, ra string, noStore bool, detail string) {
	h := w.Header()
	h.Del("Content-Length") // as http.Error: it may be for the body never written
	v := make([]string, 4)
	v[0], v[1], v[2], v[3] = ra, "text/plain; charset=utf-8", "nosniff", "no-store"
	h["Retry-After"] = v[0:1:1]
	h["Content-Type"] = v[1:2:2]
	h["X-Content-Type-Options"] = v[2:3:3]
	if noStore {
		h["Cache-Control"] = v[3:4:4]
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status))
	if detail != "" {
		_, _ = io.WriteString(w, ": ")
		_, _ = io.WriteString(w, detail)
	}
	_, _ = io.WriteString(w, "\n")
}

// retryAfterSeconds formats d as whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++ // rounded up without adding to d, which could overflow
	}
	return strconv.FormatInt(max(s, 1), 10)
}
