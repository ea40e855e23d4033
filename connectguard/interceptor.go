package connectguard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// PushbackKey is the metadata key of a server's retry pushback (gRPC A6,
// "grpc-retry-pushback-ms"): the milliseconds to wait before a retry; a
// negative or unparsable value means "do not retry". It travels in the
// error's metadata (connect.Error.Meta): a response header in the Connect
// protocol, a trailer in gRPC and gRPC-Web.
const PushbackKey = "grpc-retry-pushback-ms"

// PreviousAttemptsKey is the request header that carries, on a retry, how
// many attempts of the call were sent before it (gRPC A6,
// "grpc-previous-rpc-attempts").
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// attemptsKey is PreviousAttemptsKey as http.Header keeps it.
var attemptsKey = http.CanonicalHeaderKey(PreviousAttemptsKey)

// BreakerScope says what [Config.NewBreaker] keeps a breaker per.
type BreakerScope uint8

const (
	// PerHost keeps one breaker per server (the client's
	// connect.Peer.Addr), shared by every procedure called on it.
	PerHost BreakerScope = iota
	// PerProcedure keeps one breaker per procedure.
	PerProcedure
)

// Config configures [New]. The zero value of each field but the pipeline
// means its documented default. One Interceptor serves a handler
// (connect.WithInterceptors on connect.NewUnaryHandler and its kin) or a
// client (on connect.NewClient), or both: each call's Spec.IsClient says
// which rules apply.
type Config struct {
	// Pipeline holds the policies of every procedure that Procedures does
	// not name (and that PipelineFor gives no pipeline). Required unless
	// Procedures or PipelineFor is set. On a handler its retry is not
	// used. Its Hedge is refused: see New.
	Pipeline *pipeline.Pipeline

	// Procedures gives some procedures, by full name
	// ("/package.Service/Method", connect.Spec.Procedure), a pipeline of
	// their own. The map is copied by New. Set at most one of Procedures
	// and PipelineFor.
	Procedures map[string]*pipeline.Pipeline

	// PipelineFor returns the pipeline of a procedure; nil means Pipeline.
	// It is called once per procedure, on its first call, and its answer is
	// kept (later calls read it without a lock). Past 4096 procedures (names
	// that requests choose) no more answers are kept: it is called on every
	// call of a procedure not kept, maybe concurrently, and the call costs
	// no more (the routes of each pipeline it returns are built once), but
	// with NewBreaker and PerProcedure, whose routes are the procedure's
	// own.
	PipelineFor func(procedure string) *pipeline.Pipeline

	// IsFailure reports whether a code counts as a failure for the breaker
	// and the adaptive limit: a handler's code on a server, a code that is
	// not retried on a client. Nil means [DefaultIsFailure]. CodeCanceled
	// is neither: the policies see context.Canceled.
	IsFailure func(connect.Code) bool

	// DefaultPushback is the pushback a handler sends with a rejection
	// whose policy gives no hint (a bulkhead, an adaptive limit) and with a
	// timeout. Zero means one second. Must not be negative.
	DefaultPushback time.Duration

	// RetryCodes are the codes a client's retry retries. Nil means
	// CodeUnavailable only (gRPC A6). An attempt that ran past its own
	// deadline (AttemptTimeout, the pipeline's Timeout) while the call's
	// is live is retried too. A retried code counts as a failure for the
	// breaker.
	RetryCodes []connect.Code

	// AttemptTimeout bounds each client attempt inside the call's own
	// deadline (never past it); 0 means none.
	AttemptTimeout time.Duration

	// NewBreaker, when set, builds a client breaker per host or per
	// procedure (BreakerScope) on the first call that needs it, replacing
	// the pipeline's Breaker. An error it returns fails those calls with
	// that error. Breakers are kept for the interceptor's lifetime.
	NewBreaker func(key string) (*circuitbreaker.Breaker, error)

	// BreakerScope says what NewBreaker keeps a breaker per: PerHost (the
	// default) or PerProcedure.
	BreakerScope BreakerScope
}

// Interceptor is the connect.Interceptor built by [New]. It is safe for
// concurrent use.
type Interceptor struct {
	m              methods
	isFailure      func(connect.Code) bool
	defPushback    time.Duration
	defPushbackS   string
	retryCodes     uint64
	attemptTimeout time.Duration
	newBreaker     func(string) (*circuitbreaker.Breaker, error)
	scope          BreakerScope

	routes cache[string, procRoute]
	// byPipe is the routes of each pipeline: the procedures of one
	// pipeline share them, and a procedure past the cache's bound on names
	// reuses them (bounded by the configuration's pipelines).
	byPipe   cache[*pipeline.Pipeline, procRoute]
	bmu      sync.Mutex
	breakers map[string]*circuitbreaker.Breaker
}

var _ connect.Interceptor = (*Interceptor)(nil)

// procRoute is a procedure's pipelines.
type procRoute struct {
	server    *pipeline.Pipeline // without the retry; nil: no policy
	soft      bool               // server's timeout is soft-mode
	client    *pipeline.Pipeline // nil: no policy
	cpc       pipeline.Config    // client's policies, for streams and per-host breakers
	perHost   bool
	hosts     cache[string, procRoute] // per host (NewBreaker, PerHost): client only
	hostRoute bool
}

// New validates cfg and returns an Interceptor, or a *rampart.ConfigError.
// A pipeline with a Hedge is refused: a connect interceptor sees one
// request (connect.AnyRequest) per call, which its client mutates as it
// sends it, so concurrent hedged attempts cannot share it, and a copy of
// it cannot be built from an interceptor.
func New(cfg Config) (*Interceptor, error) {
	m, err := newMethods(cfg.Pipeline, cfg.Procedures, cfg.PipelineFor)
	if err != nil {
		return nil, err
	}
	if cfg.DefaultPushback < 0 {
		return nil, rampart.NewConfigError("connectguard", "DefaultPushback", "must not be negative, got %v", cfg.DefaultPushback)
	}
	if cfg.AttemptTimeout < 0 {
		return nil, rampart.NewConfigError("connectguard", "AttemptTimeout", "must not be negative, got %v", cfg.AttemptTimeout)
	}
	if cfg.BreakerScope > PerProcedure {
		return nil, rampart.NewConfigError("connectguard", "BreakerScope", "must be PerHost or PerProcedure, got %d", cfg.BreakerScope)
	}
	i := &Interceptor{m: m, isFailure: cfg.IsFailure, defPushback: cfg.DefaultPushback, attemptTimeout: cfg.AttemptTimeout,
		newBreaker: cfg.NewBreaker, scope: cfg.BreakerScope, breakers: map[string]*circuitbreaker.Breaker{}}
	if i.isFailure == nil {
		i.isFailure = DefaultIsFailure
	}
	if i.defPushback == 0 {
		i.defPushback = time.Second
	}
	i.defPushbackS = pushbackMillis(i.defPushback)
	if cfg.RetryCodes == nil {
		i.retryCodes = 1 << connect.CodeUnavailable
	}
	for _, c := range cfg.RetryCodes {
		if c > 63 {
			return nil, rampart.NewConfigError("connectguard", "RetryCodes", "has %d, which is not a code", c)
		}
		i.retryCodes |= 1 << c
	}
	for name, p := range m.fixed {
		if p.Config().Hedge != nil {
			return nil, rampart.NewConfigError("connectguard", "Procedures", "[%q] has a Hedge, which a connect interceptor cannot apply (see New)", name)
		}
	}
	if m.def != nil && m.def.Config().Hedge != nil {
		return nil, rampart.NewConfigError("connectguard", "Pipeline", "has a Hedge, which a connect interceptor cannot apply (see New)")
	}
	i.routes.build = i.newRoute
	i.byPipe.build = i.newRouteOf
	if i.newBreaker == nil {
		keys := make([]string, 0, len(m.fixed))
		for k := range m.fixed {
			keys = append(keys, k)
		}
		if err := i.routes.preload(keys); err != nil {
			return nil, err
		}
	}
	return i, nil
}

// DefaultIsFailure is the default IsFailure: the codes that say the
// server, not the request, is at fault (as HTTP's 5xx): CodeUnknown,
// CodeDeadlineExceeded, CodeInternal, CodeUnavailable and CodeDataLoss.
func DefaultIsFailure(c connect.Code) bool {
	switch c {
	case connect.CodeUnknown, connect.CodeDeadlineExceeded, connect.CodeInternal, connect.CodeUnavailable, connect.CodeDataLoss:
		return true
	}
	return false
}

// RejectionCode returns the code the interceptor answers for a rejection by
// a policy of kind k: CodeResourceExhausted for the rate limiter,
// CodeDeadlineExceeded for the timeout, CodeUnavailable for the others.
func RejectionCode(k pipeline.Kind) connect.Code {
	switch k {
	case pipeline.RateLimit:
		return connect.CodeResourceExhausted
	case pipeline.Timeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeUnavailable
}

// newRoute returns the routes of a procedure: its pipeline's, but with a
// breaker per procedure. Slow path: a procedure's first call (every call
// past the cache's bound on names).
func (i *Interceptor) newRoute(proc string) (*procRoute, error) {
	p := i.m.pipelineFor(proc)
	if p != nil && p.Config().Hedge != nil {
		return nil, rampart.NewConfigError("connectguard", "PipelineFor", "gave %q a pipeline with a Hedge, which a connect interceptor cannot apply (see New)", proc)
	}
	if p == nil || i.newBreaker == nil || i.scope == PerHost {
		return i.byPipe.get(p)
	}
	return i.routeOf(p, proc)
}

// newRouteOf builds the routes of the procedures of p, without a breaker
// per procedure. Slow path.
func (i *Interceptor) newRouteOf(p *pipeline.Pipeline) (*procRoute, error) {
	return i.routeOf(p, "")
}

// routeOf builds the routes of p; proc names the breaker of a breaker per
// procedure. Slow path.
func (i *Interceptor) routeOf(p *pipeline.Pipeline, proc string) (*procRoute, error) {
	r := &procRoute{}
	if p == nil {
		return r, nil
	}
	spc := p.Config()
	spc.Retry = nil
	if hasPolicy(spc) {
		sp, err := pipeline.New(spc)
		if err != nil {
			return nil, err
		}
		r.server = sp
		r.soft = spc.Timeout != nil && spc.Timeout.Mode() == timeout.ModeSoft
	}
	r.cpc = p.Config()
	if i.newBreaker != nil {
		if i.scope == PerHost {
			r.perHost = true
			base := r.cpc
			r.hosts.build = func(host string) (*procRoute, error) {
				cb, err := i.breaker(host)
				if err != nil {
					return nil, err
				}
				pc := base
				pc.Breaker = cb
				cp, err := pipeline.New(pc)
				if err != nil {
					return nil, err
				}
				return &procRoute{client: cp, cpc: pc, hostRoute: true}, nil
			}
			return r, nil
		}
		cb, err := i.breaker(proc)
		if err != nil {
			return nil, err
		}
		r.cpc.Breaker = cb
	}
	if hasPolicy(r.cpc) {
		cp, err := pipeline.New(r.cpc)
		if err != nil {
			return nil, err
		}
		r.client = cp
	}
	return r, nil
}

func hasPolicy(pc pipeline.Config) bool {
	return pc.Retry != nil || pc.Breaker != nil || pc.RateLimit != nil || pc.Bulkhead != nil || pc.Adaptive != nil || pc.Shed != nil || pc.Timeout != nil
}

// breaker returns NewBreaker's breaker for key, built once. Slow path.
func (i *Interceptor) breaker(key string) (*circuitbreaker.Breaker, error) {
	i.bmu.Lock()
	defer i.bmu.Unlock()
	if cb, ok := i.breakers[key]; ok {
		return cb, nil
	}
	cb, err := i.newBreaker(key)
	if err != nil {
		return nil, err
	}
	if cb == nil {
		return nil, rampart.NewConfigError("connectguard", "NewBreaker", "returned no breaker and no error for %q", key)
	}
	i.breakers[key] = cb
	return cb, nil
}

// clientRoute returns the client route of a call.
func (i *Interceptor) clientRoute(spec connect.Spec, peer connect.Peer) (*procRoute, error) {
	r, err := i.routes.get(spec.Procedure)
	if err != nil || !r.perHost {
		return r, err
	}
	return r.hosts.get(peer.Addr)
}

// pushbackMillis formats d as A6's pushback: whole milliseconds, rounded up.
func pushbackMillis(d time.Duration) string {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// codeOf is err's code, a context error's included. Failure path only.
func codeOf(err error) connect.Code {
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return connect.CodeOf(err)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeOf(err)
}

// rejection is a refused or timed-out call as a connect error carrying the
// pushback (server) or the hint (client). Rejection path: it allocates the
// error.
func (i *Interceptor) rejection(o pipeline.Outcome, pushback bool) *connect.Error {
	code := RejectionCode(o.Policy)
	if o.Code == pipeline.TimedOut {
		code = connect.CodeDeadlineExceeded
	}
	e := connect.NewError(code, o.Err)
	if pushback {
		v := i.defPushbackS
		if o.RetryAfter > 0 {
			v = pushbackMillis(o.RetryAfter)
		}
		e.Meta().Set(PushbackKey, v)
	}
	return e
}

// WrapUnary guards a unary call: on a handler, through its procedure's
// pipeline with rejections answered by code and pushback; on a client,
// with retries, the pushback honoured, local rejections, attempt deadlines.
// See the package doc.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return i.clientUnary(ctx, req, next)
		}
		return i.serverUnary(ctx, req, next)
	}
}

// verdict is what a server pipeline sees of a handler's error (see
// grpcguard: nil for a code that is not a failure, context.Canceled for a
// client that went away). Failure path only.
func (i *Interceptor) verdict(err error) error {
	if err == nil {
		return nil
	}
	c := codeOf(err)
	switch {
	case c == connect.CodeCanceled:
		return context.Canceled
	case !i.isFailure(c):
		return nil
	case c == connect.CodeDeadlineExceeded:
		return context.DeadlineExceeded
	}
	return err
}

func (i *Interceptor) serverUnary(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	r, err := i.routes.get(req.Spec().Procedure)
	if err != nil {
		return nil, err
	}
	if r.server == nil {
		return next(ctx, req)
	}
	var resp connect.AnyResponse
	var herr error
	ran := false
	o := r.server.Try(ctx, func(ctx context.Context) error {
		ran = true
		resp, herr = next(ctx, req)
		return i.verdict(herr)
	})
	switch o.Code {
	case pipeline.OK, pipeline.Failed:
		return resp, herr
	case pipeline.Canceled:
		if ran {
			return resp, herr
		}
		return nil, connect.NewError(codeOf(ctx.Err()), ctx.Err())
	case pipeline.TimedOut:
		if ran && herr == nil && r.soft {
			return resp, nil
		}
	}
	return nil, i.rejection(o, true)
}

// retryable reports whether code is in RetryCodes.
func (i *Interceptor) retryable(c connect.Code) bool { return c < 64 && i.retryCodes&(1<<c) != 0 }

// judge is what a client pipeline sees of an attempt's error (as in
// grpcguard): the attempt context's error when it ended; the error with
// the pushback as its hint for a retryable code or an attempt timeout;
// retry.Permanent for a failure not retried or a pushback that says no;
// nil for a code that is neither. Failure path only.
func (i *Interceptor) judge(ctx context.Context, err error, timedOut bool) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if timedOut {
		return err
	}
	c := codeOf(err)
	if i.retryable(c) {
		if d, ok := pushbackOf(err); ok {
			if d < 0 {
				return retry.Permanent(err)
			}
			return retry.WithRetryAfter(err, d)
		}
		return err
	}
	if i.isFailure(c) {
		return retry.Permanent(err)
	}
	return nil
}

// pushbackOf reads the pushback from a connect error's metadata. ok is
// false when there is none; a negative d means do not retry.
func pushbackOf(err error) (d time.Duration, ok bool) {
	ce, cok := errors.AsType[*connect.Error](err)
	if !cok {
		return 0, false
	}
	vs := metaValues(ce.Meta(), PushbackKey)
	if len(vs) == 0 {
		return 0, false
	}
	if len(vs) > 1 {
		return -1, true // several values: not retried, as grpc-go's own retry (A6 allows one)
	}
	ms, perr := strconv.ParseInt(vs[0], 10, 64)
	if perr != nil || ms < 0 {
		return -1, true
	}
	if ms > int64(1<<63-1)/int64(time.Millisecond) {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(ms) * time.Millisecond, true
}

// metaValues reads key's values from h, canonical or as sent (gRPC
// trailers keep their lower-case names). No allocation.
func metaValues(h http.Header, key string) []string {
	if v := h.Values(key); len(v) > 0 {
		return v
	}
	return h[key]
}

// attemptResult is a client attempt's response and connect's error.
type attemptResult struct {
	resp connect.AnyResponse
	err  error
}

func (i *Interceptor) clientUnary(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	r, err := i.clientRoute(req.Spec(), req.Peer())
	if err != nil {
		return nil, err
	}
	if r.client == nil {
		return next(ctx, req)
	}
	n := 0
	var orig []string // the caller's own values of the header, put back after the retries
	had := false
	res, o := pipeline.TryCall(ctx, r.client, func(actx context.Context) (attemptResult, error) {
		if n > 0 {
			// A retry (A6): the attempts are sequential, so the one
			// request may carry it. Retry path only.
			h := req.Header()
			if n == 1 {
				orig, had = h[attemptsKey]
			}
			h.Set(PreviousAttemptsKey, strconv.Itoa(n))
		}
		n++
		return i.attempt(actx, req, next)
	})
	if n > 1 { // a retry set the header on the caller's request: put it back
		if had {
			req.Header()[attemptsKey] = orig
		} else {
			delete(req.Header(), attemptsKey)
		}
	}
	switch o.Code {
	case pipeline.OK, pipeline.Failed:
		return res.resp, res.err
	case pipeline.Canceled:
		if res.err != nil {
			return nil, res.err
		}
		return nil, connect.NewError(codeOf(ctx.Err()), ctx.Err())
	case pipeline.Rejected:
		if o.Policy == pipeline.Retry && res.err != nil {
			return nil, res.err // the budget refused a retry: the last attempt's error
		}
	}
	return nil, i.rejection(o, false)
}

// attempt sends one client attempt.
func (i *Interceptor) attempt(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (attemptResult, error) {
	actx := ctx
	var cancel context.CancelFunc
	binding := false
	if i.attemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, i.attemptTimeout) // bounded by ctx: never past the call's deadline
		ad, _ := actx.Deadline()
		cd, ok := ctx.Deadline()
		binding = !ok || ad.Before(cd)
	}
	resp, err := next(actx, req)
	timedOut := false
	if cancel != nil {
		// Seen by the client, or first by the server (which got the
		// deadline in the request and may answer before the client's
		// timer fires).
		timedOut = err != nil && ctx.Err() == nil &&
			(actx.Err() == context.DeadlineExceeded || (binding && codeOf(err) == connect.CodeDeadlineExceeded))
		cancel()
	}
	if err == nil {
		return attemptResult{resp, nil}, nil
	}
	return attemptResult{resp, err}, i.judge(ctx, err, timedOut)
}
