package grpcguard

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

// BreakerScope says what [ClientConfig.NewBreaker] keeps a breaker per.
type BreakerScope uint8

const (
	// PerTarget keeps one breaker per ClientConn target
	// (grpc.ClientConn.Target), shared by every method called on it.
	PerTarget BreakerScope = iota
	// PerMethod keeps one breaker per full method name.
	PerMethod
)

// ClientConfig configures [NewClient]. The zero value of each field but the
// pipeline means its documented default.
type ClientConfig struct {
	// Pipeline holds the policies of every method that Methods does not
	// name (and that PipelineFor gives no pipeline): a retry with its
	// budget, a breaker, a rate limiter, a bulkhead or adaptive limit, a
	// timeout (a deadline for each attempt, inside the call's), a hedger
	// (for the methods in Idempotent only). Required unless Methods or
	// PipelineFor is set; nil then means: no policy for the other methods.
	// A pipeline with a Hedge here hedges only the methods that
	// Idempotent names; the others run without it.
	Pipeline *pipeline.Pipeline

	// Methods gives some methods, by full name ("/package.Service/Method"),
	// a pipeline of their own; one with a Hedge must be named in
	// Idempotent. The map is copied by NewClient. Set at most one of
	// Methods and PipelineFor.
	Methods map[string]*pipeline.Pipeline

	// PipelineFor returns the pipeline of a method, by full name; nil means
	// Pipeline. It is called once per method, on its first call, and its
	// answer is kept (later calls read it without a lock). Past 4096
	// methods no more answers are kept: it is called on every call of a
	// method not kept, maybe concurrently, and the call costs no more (the
	// routes of each pipeline it returns are built once), but with
	// NewBreaker and PerMethod, whose routes are the method's own. A pipeline with
	// a Hedge for a method that Idempotent does not name fails that
	// method's calls with a *rampart.ConfigError.
	PipelineFor func(fullMethod string) *pipeline.Pipeline

	// RetryCodes are the status codes the pipeline's retry retries. Nil
	// means UNAVAILABLE only (gRPC A6's example policy, and the one code
	// that says the server did not process the call). A code not listed
	// is never retried, whatever the retry's ShouldRetry says; a listed
	// one is retried when ShouldRetry (nil: every error) accepts it. An
	// attempt that ran past its own deadline (the pipeline's Timeout, or
	// AttemptTimeout) while the call's deadline is live is retried too,
	// as httpguard retries its attempt timeout. A retried code counts as
	// a failure for the breaker.
	RetryCodes []codes.Code

	// IsFailure reports whether a code that is not retried counts as a
	// failure for the breaker and the adaptive limit. Nil means
	// [DefaultIsFailure]. A code that is neither retried nor a failure
	// (NOT_FOUND, INVALID_ARGUMENT, ...) is a success for the policies:
	// the server answered.
	IsFailure func(codes.Code) bool

	// Idempotent names the methods that may be sent more than once at the
	// same time (hedged): the pipeline's Hedge applies to these only.
	// NewClient refuses a Methods entry with a Hedge whose method is not
	// named here, and a default Pipeline with a Hedge when Idempotent
	// names no method. Retries do not need it: A6 retries every method
	// whose code is retryable, since such a code means the server did not
	// act on the call.
	Idempotent []string

	// AttemptTimeout bounds each attempt (a context.WithTimeout of the
	// call's context, so it never outlives the call's own deadline); 0
	// means none. It costs the attempt's context (one allocation) where
	// the pipeline's deadline-mode Timeout would cost the same.
	AttemptTimeout time.Duration

	// NewBreaker, when set, builds a breaker per target or per method (see
	// BreakerScope) on the first call that needs it, replacing the
	// pipeline's Breaker. It must build breakers on the pipeline's ticker;
	// an error it returns, or a pipeline that refuses its breaker, fails
	// those calls with that *rampart.ConfigError. Breakers are kept for
	// the client's lifetime: use it for a bounded set of targets.
	NewBreaker func(key string) (*circuitbreaker.Breaker, error)

	// BreakerScope says what NewBreaker keeps a breaker per: PerTarget
	// (the default) or PerMethod.
	BreakerScope BreakerScope
}

// Client holds the client interceptors built by [NewClient]. It is safe
// for concurrent use and may be shared by several ClientConns.
type Client struct {
	m              methods
	retryCodes     uint64 // bit c set: code c is retried
	isFailure      func(codes.Code) bool
	idem           map[string]bool
	attemptTimeout time.Duration
	newBreaker     func(string) (*circuitbreaker.Breaker, error)
	scope          BreakerScope

	routes cache[string, clientMethod]
	// byPipe is the routes of each pipeline (and whether it hedges): the
	// methods of one pipeline share them, and a method past the cache's
	// bound on names reuses them (bounded by the configuration).
	byPipe   cache[methodKey, clientMethod]
	bmu      sync.Mutex
	breakers map[string]*circuitbreaker.Breaker // NewBreaker's, by key

	trailers sync.Pool // *trailerBuf

	// one is the route of every method when the configuration has one
	// pipeline for all and no breakers to build (no Methods, PipelineFor
	// or NewBreaker): a call then costs no lookup of its method's name.
	// A Hedge needs the name (Idempotent), so one is nil then.
	one *clientRoute
}

// clientMethod is a method's routes: one, or one per target.
type clientMethod struct {
	route     *clientRoute               // when there is no breaker per target
	targets   cache[string, clientRoute] // per target (NewBreaker, PerTarget)
	perTarget bool
	pc        pipeline.Config // the method's pipeline, for the targets' routes
	hedge     bool            // the method is hedged
}

// methodKey is what a method's routes depend on, without a breaker per
// method: its pipeline, and whether it is hedged.
type methodKey struct {
	p     *pipeline.Pipeline
	hedge bool
}

// clientRoute is a method's pipeline, with what its calls need.
type clientRoute struct {
	p      *pipeline.Pipeline // nil: no policy
	hedged bool               // p hedges this method (it is idempotent)
	retry  bool               // p retries: read each attempt's trailers for the pushback
	pc     pipeline.Config    // p's policies, for streams
}

// NewClient validates cfg and returns a Client, or a *rampart.ConfigError.
func NewClient(cfg ClientConfig) (*Client, error) {
	m, err := newMethods(cfg.Pipeline, cfg.Methods, cfg.PipelineFor)
	if err != nil {
		return nil, err
	}
	if cfg.AttemptTimeout < 0 {
		return nil, rampart.NewConfigError("grpcguard", "AttemptTimeout", "must not be negative, got %v", cfg.AttemptTimeout)
	}
	if cfg.BreakerScope > PerMethod {
		return nil, rampart.NewConfigError("grpcguard", "BreakerScope", "must be PerTarget or PerMethod, got %d", cfg.BreakerScope)
	}
	c := &Client{m: m, isFailure: cfg.IsFailure, idem: make(map[string]bool, len(cfg.Idempotent)),
		attemptTimeout: cfg.AttemptTimeout, newBreaker: cfg.NewBreaker, scope: cfg.BreakerScope,
		breakers: map[string]*circuitbreaker.Breaker{}}
	if c.isFailure == nil {
		c.isFailure = DefaultIsFailure
	}
	if cfg.RetryCodes == nil {
		c.retryCodes = 1 << codes.Unavailable
	}
	for _, code := range cfg.RetryCodes {
		if code > 63 {
			return nil, rampart.NewConfigError("grpcguard", "RetryCodes", "has %d, which is not a status code", code)
		}
		c.retryCodes |= 1 << code
	}
	for _, name := range cfg.Idempotent {
		if err := checkMethodName("Idempotent", name); err != nil {
			return nil, err
		}
		c.idem[name] = true
	}
	for name, p := range m.fixed {
		if p.Config().Hedge != nil && !c.idem[name] {
			return nil, rampart.NewConfigError("grpcguard", "Methods", "[%q] has a Hedge, but Idempotent does not name the method: only an idempotent method may be hedged", name)
		}
	}
	if m.def != nil && m.def.Config().Hedge != nil && len(c.idem) == 0 {
		return nil, rampart.NewConfigError("grpcguard", "Pipeline", "has a Hedge, but Idempotent names no method: only an idempotent method may be hedged")
	}
	c.trailers.New = func() any { return new(trailerBuf) }
	if len(m.fixed) == 0 && m.fn == nil && c.newBreaker == nil && m.def != nil && m.def.Config().Hedge == nil {
		r, err := newClientRoute(m.def.Config(), false)
		if err != nil {
			return nil, err
		}
		c.one = r
	}
	c.routes.build = c.newMethod
	c.byPipe.build = c.newMethodOf
	if c.newBreaker == nil {
		// Without breakers to build, every configured method's route is
		// built now: New reports a pipeline that refuses the combination.
		keys := make([]string, 0, len(m.fixed))
		for k := range m.fixed {
			keys = append(keys, k)
		}
		if err := c.routes.preload(keys); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// newMethod builds the routes of method. Slow path: its first call.
func (c *Client) newMethod(method string) (*clientMethod, error) {
	p, fixed := c.m.fixed[method]
	if !fixed && c.m.fn != nil {
		p = c.m.fn(method)
		if p != nil && p.Config().Hedge != nil && !c.idem[method] {
			return nil, rampart.NewConfigError("grpcguard", "PipelineFor", "gave method %q a pipeline with a Hedge, but Idempotent does not name it: only an idempotent method may be hedged", method)
		}
	}
	if p == nil {
		p = c.m.def
	}
	hedge := p != nil && p.Config().Hedge != nil && c.idem[method]
	if p == nil || c.newBreaker == nil || c.scope == PerTarget {
		return c.byPipe.get(methodKey{p, hedge})
	}
	// A breaker per method: the routes are the method's own.
	cm := &clientMethod{pc: p.Config(), hedge: hedge}
	cb, err := c.breaker(method)
	if err != nil {
		return nil, err
	}
	cm.pc.Breaker = cb
	r, err := newClientRoute(cm.pc, cm.hedge)
	if err != nil {
		return nil, err
	}
	cm.route = r
	return cm, nil
}

// newMethodOf builds the routes of the methods of k's pipeline: no
// breaker per method. Slow path.
func (c *Client) newMethodOf(k methodKey) (*clientMethod, error) {
	cm := &clientMethod{}
	if k.p == nil {
		cm.route = &clientRoute{}
		return cm, nil
	}
	cm.pc = k.p.Config()
	cm.hedge = k.hedge
	if c.newBreaker != nil { // PerTarget: newMethod builds PerMethod's
		if c.scope == PerTarget {
			cm.perTarget = true
			cm.targets.build = func(target string) (*clientRoute, error) {
				cb, err := c.breaker(target)
				if err != nil {
					return nil, err
				}
				pc := cm.pc
				pc.Breaker = cb
				return newClientRoute(pc, cm.hedge)
			}
			return cm, nil
		}
	}
	r, err := newClientRoute(cm.pc, cm.hedge)
	if err != nil {
		return nil, err
	}
	cm.route = r
	return cm, nil
}

// breaker returns NewBreaker's breaker for key, built once. Slow path.
func (c *Client) breaker(key string) (*circuitbreaker.Breaker, error) {
	c.bmu.Lock()
	defer c.bmu.Unlock()
	if cb, ok := c.breakers[key]; ok {
		return cb, nil
	}
	cb, err := c.newBreaker(key)
	if err != nil {
		return nil, err
	}
	if cb == nil {
		return nil, rampart.NewConfigError("grpcguard", "NewBreaker", "returned no breaker and no error for %q", key)
	}
	c.breakers[key] = cb
	return cb, nil
}

// newClientRoute builds a route for the policies of pc. Slow path.
func newClientRoute(pc pipeline.Config, hedge bool) (*clientRoute, error) {
	if !hedge {
		pc.Hedge, pc.Idempotent = nil, false
	}
	if pc.Retry == nil && pc.Breaker == nil && pc.RateLimit == nil && pc.Bulkhead == nil && pc.Adaptive == nil && pc.Shed == nil && pc.Timeout == nil && pc.Hedge == nil {
		return &clientRoute{}, nil
	}
	p, err := pipeline.New(pc)
	if err != nil {
		return nil, err
	}
	return &clientRoute{p: p, hedged: pc.Hedge != nil, retry: pc.Retry != nil, pc: pc}, nil
}

// route returns the route of method on cc: one map lookup (two with a
// breaker per target), no lock, no allocation once the method is known.
func (c *Client) route(method string, cc *grpc.ClientConn) (*clientRoute, error) {
	if c.one != nil {
		return c.one, nil
	}
	cm, err := c.routes.get(method)
	if err != nil {
		return nil, err
	}
	if !cm.perTarget {
		return cm.route, nil
	}
	target := ""
	if cc != nil {
		target = cc.Target()
	}
	return cm.targets.get(target)
}

// retryable reports whether code is in RetryCodes.
func (c *Client) retryable(code codes.Code) bool { return code < 64 && c.retryCodes&(1<<code) != 0 }

// trailerBuf is a retried call's trailer and the call options that ask
// grpc for it, pooled: reading the pushback costs the interceptor no
// allocation (grpc's copy of the trailer is its own).
type trailerBuf struct {
	md   metadata.MD
	opts [8]grpc.CallOption
}

// with returns opts followed by the option that stores the trailer in b.
func (b *trailerBuf) with(opts []grpc.CallOption) []grpc.CallOption {
	o := b.opts[:0]
	if len(opts)+1 > cap(o) {
		o = make([]grpc.CallOption, 0, len(opts)+1) // more options than the buffer holds: rare
	}
	o = append(o, opts...)
	return append(o, grpc.Trailer(&b.md))
}

// UnaryInterceptor runs each unary call through its method's pipeline:
// retried on the codes of ClientConfig.RetryCodes with the server's
// pushback honoured, refused by an open breaker or a full bulkhead
// (UNAVAILABLE) or a rate limit (RESOURCE_EXHAUSTED) as a
// [*RejectedError], hedged when the method is idempotent. The error of the
// last attempt comes back as grpc returned it.
func (c *Client) UnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r, err := c.route(method, cc)
	if err != nil {
		return err
	}
	if r.p == nil {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if r.hedged {
		if pm, ok := reply.(proto.Message); ok {
			return c.hedged(ctx, r, method, req, pm, cc, invoker, opts)
		}
	}
	var tb *trailerBuf
	if r.retry {
		tb = c.trailers.Get().(*trailerBuf)
		opts = tb.with(opts)
	}
	n := 0
	raw, o := pipeline.TryCall(ctx, r.p, func(actx context.Context) (error, error) {
		prev := n
		n++
		var md *metadata.MD
		if tb != nil {
			tb.md = nil
			md = &tb.md
		}
		return c.attempt(actx, prev, method, req, reply, cc, invoker, opts, md)
	})
	if tb != nil {
		clear(tb.opts[:])
		tb.md = nil
		c.trailers.Put(tb)
	}
	return c.result(ctx, raw, o)
}

// hedgeResult is a hedged attempt's reply and error.
type hedgeResult struct {
	reply proto.Message
	err   error
}

// hedged runs an idempotent unary call hedged: each attempt decodes into a
// reply of its own (they run at once), and the winner's is merged into
// reply. Hedged path: it allocates each attempt's reply, and the
// hedger's own costs (package hedge).
func (c *Client) hedged(ctx context.Context, r *clientRoute, method string, req any, reply proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	var n atomic.Int32
	res, o := pipeline.TryCallHedged(ctx, r.p, func(actx context.Context) (hedgeResult, error) {
		prev := int(n.Add(1) - 1)
		msg := reply.ProtoReflect().New().Interface()
		var md *metadata.MD
		aopts := opts
		if r.retry {
			md = new(metadata.MD)
			aopts = append(opts[:len(opts):len(opts)], grpc.Trailer(md))
		}
		raw, verdict := c.attempt(actx, prev, method, req, msg, cc, invoker, aopts, md)
		return hedgeResult{msg, raw}, verdict
	})
	if res.reply != nil && res.err == nil && (o.Code == pipeline.OK || o.Code == pipeline.Failed) {
		proto.Reset(reply)
		proto.Merge(reply, res.reply)
	}
	return c.result(ctx, res.err, o)
}

// attempt sends one attempt; prev is the number of attempts of the call
// started before it. It returns grpc's error as it is (raw) and what the
// pipeline sees of it (verdict, see judge).
func (c *Client) attempt(ctx context.Context, prev int, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, md *metadata.MD) (raw, verdict error) {
	if prev > 0 {
		// A retry or a hedge (A6): the server may tell them apart. Retry
		// path only: it allocates the outgoing metadata.
		ctx = metadata.AppendToOutgoingContext(ctx, PreviousAttemptsKey, strconv.Itoa(prev))
	}
	actx := ctx
	var cancel context.CancelFunc
	binding := false // the attempt's deadline comes before the call's
	if c.attemptTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, c.attemptTimeout) // bounded by ctx: never past the call's deadline
		ad, _ := actx.Deadline()
		cd, ok := ctx.Deadline()
		binding = !ok || ad.Before(cd)
	}
	err := invoker(actx, method, req, reply, cc, opts...)
	timedOut := false
	if cancel != nil {
		// The attempt ran past its own deadline while the call's is live:
		// seen by the client (its context ended) or first by the server,
		// which got the deadline as grpc-timeout and whose
		// DEADLINE_EXCEEDED can come in before the client's timer fires.
		timedOut = err != nil && ctx.Err() == nil &&
			(actx.Err() == context.DeadlineExceeded || (binding && codeOf(err) == codes.DeadlineExceeded))
		cancel()
	}
	if err == nil {
		return nil, nil
	}
	var tr metadata.MD
	if md != nil {
		tr = *md
	}
	return err, c.judge(ctx, err, tr, timedOut)
}

// judge is what the pipeline sees of an attempt's error: the attempt's
// context error when its context ended (the caller's, the pipeline's
// timeout's, a losing hedge's), so that the pipeline and the breaker see
// a cancellation or a timeout; the error itself, with the pushback as its
// retry-after hint, for a retryable code (or an attempt timeout);
// retry.Permanent of it for a failure that is not retried, or for a
// retryable code whose pushback says not to retry; nil for a code that is
// neither (the server answered: a success for the policies, returned to
// the caller as it is). Failure path only.
func (c *Client) judge(ctx context.Context, err error, md metadata.MD, timedOut bool) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if timedOut {
		return err
	}
	code := codeOf(err)
	if c.retryable(code) {
		if d, ok := pushback(md, err); ok {
			if d < 0 {
				return retry.Permanent(err) // A6: the server said not to retry
			}
			return retry.WithRetryAfter(err, d)
		}
		return err
	}
	if c.isFailure(code) {
		return retry.Permanent(err)
	}
	return nil
}

// result is the error a call returns: grpc's own error of the last attempt
// (raw) when the pipeline ran it to the end, gave up retrying it (the
// retries' limits, the budget) or the caller's context ended; a
// [*RejectedError] when a policy refused it or its timeout expired.
func (c *Client) result(ctx context.Context, raw error, o pipeline.Outcome) error {
	switch o.Code {
	case pipeline.OK, pipeline.Failed:
		return raw
	case pipeline.Canceled:
		if raw != nil {
			return raw
		}
		return status.FromContextError(ctx.Err()).Err()
	case pipeline.Rejected:
		if o.Policy == pipeline.Retry && raw != nil {
			return raw // the budget refused a retry: the last attempt's status
		}
		return &RejectedError{Code: RejectionCode(o.Policy), Policy: o.Policy, RetryAfter: max(o.RetryAfter, 0), err: o.Err}
	}
	return &RejectedError{Code: codes.DeadlineExceeded, Policy: pipeline.Timeout, err: o.Err} // TimedOut
}

// DialOptions returns the options that install the interceptors on a
// ClientConn.
func (c *Client) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor),
		grpc.WithChainStreamInterceptor(c.StreamInterceptor),
	}
}
