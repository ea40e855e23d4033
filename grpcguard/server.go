package grpcguard

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/timeout"
)

// ServerConfig configures [NewServer]. The zero value of each field but the
// pipeline means its documented default.
type ServerConfig struct {
	// Pipeline admits the calls of every method that Methods does not
	// name (and that PipelineFor gives no pipeline). Required unless
	// Methods or PipelineFor is set; nil then means: no policy for the
	// other methods. Its retry and hedger, if any, are not used: a server
	// does not retry its own handler.
	Pipeline *pipeline.Pipeline

	// Methods gives some methods, by full name ("/package.Service/Method",
	// as grpc.UnaryServerInfo.FullMethod), a pipeline of their own. The map
	// is copied by NewServer. Set at most one of Methods and PipelineFor.
	Methods map[string]*pipeline.Pipeline

	// PipelineFor returns the pipeline of a method, by full name; nil means
	// Pipeline. It is called once per method, on the method's first call,
	// and its answer is kept (a later call reads it without a lock): it
	// must not depend on anything but the name. Past 4096 methods (names
	// an UnknownServiceHandler's clients choose) no more answers are kept:
	// it is called on every call of a method not kept, maybe concurrently,
	// and the call costs no more (the route of each pipeline it returns is
	// built once).
	PipelineFor func(fullMethod string) *pipeline.Pipeline

	// Tap moves each method's rate limiter out of the interceptors into the
	// [Server.InHandle] tap, which refuses a call before its request is
	// read or decoded. Install the tap (grpc.InTapHandle, or
	// [Server.ServerOptions], which does): with Tap set the interceptors
	// do not apply the rate limit. The tap can only admit by rate: it runs
	// before the handler and cannot hold a concurrency permit (bulkhead,
	// adaptive limit) or record an outcome (breaker) for a handler it does
	// not run; those stay in the interceptors. The rate limit is then taken
	// before the breaker is asked, so calls refused by an open breaker
	// spend quota, unlike in a pipeline.
	Tap bool

	// IsFailure reports whether a handler's status code counts as a failure
	// for the breaker and the adaptive limit. Nil means [DefaultIsFailure].
	// A CANCELED call (the client went away) is neither: the policies see
	// context.Canceled and record it as Ignored.
	IsFailure func(codes.Code) bool

	// DefaultPushback is the pushback sent with a rejection whose policy
	// gives no hint (a bulkhead, an adaptive limit) and with a timeout.
	// Zero means one second. Must not be negative.
	DefaultPushback time.Duration
}

// Server holds the interceptors and the tap built by [NewServer]. It is
// safe for concurrent use.
type Server struct {
	m           methods
	tap         bool
	isFailure   func(codes.Code) bool
	defPushback time.Duration
	defMD       metadata.MD // pushbackMD(defPushback), built once, shared read-only
	routes      cache[string, serverRoute]
	// byPipe is the route of each pipeline a method resolves to: methods
	// of one pipeline share its route, and a method past the cache's bound
	// on names reuses it (bounded by the configuration's pipelines).
	byPipe cache[*pipeline.Pipeline, serverRoute]
	// one is the route of every method when the configuration has one
	// pipeline for all (no Methods, no PipelineFor): a call then costs no
	// lookup of its method's name.
	one *serverRoute
}

// serverRoute is what a method's calls need, built once per method.
type serverRoute struct {
	p    *pipeline.Pipeline // the interceptors' pipeline; nil: no policy
	rl   *ratelimit.Limiter // the tap's rate limiter; nil: none (or Tap unset)
	soft bool               // p's timeout is soft-mode: a late success is answered
}

// NewServer validates cfg and returns a Server, or a *rampart.ConfigError.
func NewServer(cfg ServerConfig) (*Server, error) {
	m, err := newMethods(cfg.Pipeline, cfg.Methods, cfg.PipelineFor)
	if err != nil {
		return nil, err
	}
	if cfg.DefaultPushback < 0 {
		return nil, rampart.NewConfigError("grpcguard", "DefaultPushback", "must not be negative, got %v", cfg.DefaultPushback)
	}
	s := &Server{m: m, tap: cfg.Tap, isFailure: cfg.IsFailure, defPushback: cfg.DefaultPushback}
	if s.isFailure == nil {
		s.isFailure = DefaultIsFailure
	}
	if s.defPushback == 0 {
		s.defPushback = time.Second
	}
	s.defMD = pushbackMD(s.defPushback)
	s.routes.build = s.newRoute
	s.byPipe.build = s.routeOf
	keys := make([]string, 0, len(m.fixed))
	for k := range m.fixed {
		keys = append(keys, k)
	}
	if err := s.routes.preload(keys); err != nil {
		return nil, err
	}
	if m.def != nil {
		r, err := s.routeOf(m.def)
		if err != nil {
			return nil, err
		}
		if len(m.fixed) == 0 && m.fn == nil {
			s.one = r
		}
	}
	return s, nil
}

// route returns the route of method.
func (s *Server) route(method string) (*serverRoute, error) {
	if s.one != nil {
		return s.one, nil
	}
	return s.routes.get(method)
}

// newRoute returns the route of method, its pipeline's. Slow path: a
// method's first call (every call past the cache's bound on names).
func (s *Server) newRoute(method string) (*serverRoute, error) {
	return s.byPipe.get(s.m.pipelineFor(method))
}

// routeOf builds the route of a method whose pipeline is p. Slow path.
func (s *Server) routeOf(p *pipeline.Pipeline) (*serverRoute, error) {
	r := &serverRoute{}
	if p == nil {
		return r, nil
	}
	pc := p.Config()
	pc.Retry, pc.Hedge, pc.Idempotent = nil, nil, false
	if s.tap {
		r.rl, pc.RateLimit = pc.RateLimit, nil
	}
	if pc.Breaker == nil && pc.RateLimit == nil && pc.Bulkhead == nil && pc.Adaptive == nil && pc.Shed == nil && pc.Timeout == nil {
		return r, nil // nothing for the interceptors: the handler is called directly
	}
	np, err := pipeline.New(pc)
	if err != nil {
		return nil, err
	}
	r.p = np
	r.soft = pc.Timeout != nil && pc.Timeout.Mode() == timeout.ModeSoft
	return r, nil
}

// ServerOptions returns the options that install the interceptors, and the
// tap when ServerConfig.Tap is set. Other interceptors given to
// grpc.NewServer with grpc.ChainUnaryInterceptor run around these (a
// recovery interceptor belongs outside: the guard releases its permits
// and lets a handler's panic go on).
func (s *Server) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor),
		grpc.ChainStreamInterceptor(s.StreamInterceptor),
	}
	if s.tap {
		opts = append(opts, grpc.InTapHandle(s.InHandle))
	}
	return opts
}

// verdict is what the pipeline sees of a handler's error: nil for a code
// that is not a failure (the server did its job), context.Canceled for a
// client that went away (Ignored by the breaker and the adaptive limit),
// context.DeadlineExceeded for a failed DEADLINE_EXCEEDED (a timeout for
// the adaptive limit too), else the error itself. Failure path only.
func (s *Server) verdict(err error) error {
	if err == nil {
		return nil
	}
	c := codeOf(err)
	switch {
	case c == codes.Canceled:
		return context.Canceled
	case !s.isFailure(c):
		return nil
	case c == codes.DeadlineExceeded:
		return context.DeadlineExceeded
	}
	return err
}

// UnaryInterceptor admits each unary call through its method's pipeline.
// See the package doc for the status codes. An admitted call costs the
// interceptor no allocation beyond its pipeline's (a deadline-mode
// timeout's context).
func (s *Server) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, err := s.route(info.FullMethod)
	if err != nil {
		return nil, err
	}
	if r.p == nil {
		return handler(ctx, req)
	}
	var resp any
	var herr error
	ran := false
	o := r.p.Try(ctx, func(ctx context.Context) error {
		ran = true
		resp, herr = handler(ctx, req)
		return s.verdict(herr)
	})
	switch o.Code {
	case pipeline.OK, pipeline.Failed:
		return resp, herr
	case pipeline.Canceled:
		if ran {
			return resp, herr
		}
		return nil, status.FromContextError(ctx.Err()).Err()
	case pipeline.TimedOut:
		if ran && herr == nil && r.soft {
			return resp, nil // soft mode classifies only: the late answer is still the answer
		}
	}
	rej, md := s.rejection(o)
	_ = grpc.SetTrailer(ctx, md)
	return nil, rej
}

// rejection builds the error and the trailing metadata of a rejected or
// timed-out call. Rejection path: it allocates the error (and the
// metadata when the policy gives a hint).
func (s *Server) rejection(o pipeline.Outcome) (*RejectedError, metadata.MD) {
	e := &RejectedError{Code: RejectionCode(o.Policy), Policy: o.Policy, RetryAfter: o.RetryAfter, err: o.Err}
	if o.Code == pipeline.TimedOut {
		e.Code, e.Policy = codes.DeadlineExceeded, pipeline.Timeout
	}
	if e.RetryAfter <= 0 {
		e.RetryAfter = s.defPushback
		return e, s.defMD
	}
	return e, pushbackMD(e.RetryAfter)
}

// StreamInterceptor admits each stream once, through its method's
// pipeline: the stream holds its permits (a bulkhead or adaptive slot, the
// breaker's permit) until the handler returns, however many messages it
// carries, and the breaker records the handler's final status.
func (s *Server) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r, err := s.route(info.FullMethod)
	if err != nil {
		return err
	}
	if r.p == nil {
		return handler(srv, ss)
	}
	sctx := ss.Context()
	var herr error
	ran := false
	o := r.p.Try(sctx, func(ctx context.Context) error {
		ran = true
		st := ss
		if ctx != sctx {
			st = &ctxStream{ServerStream: ss, ctx: ctx} // a deadline-mode timeout's context
		}
		herr = handler(srv, st)
		return s.verdict(herr)
	})
	switch o.Code {
	case pipeline.OK, pipeline.Failed:
		return herr
	case pipeline.Canceled:
		if ran {
			return herr
		}
		return status.FromContextError(sctx.Err()).Err()
	case pipeline.TimedOut:
		if ran && herr == nil && r.soft {
			return nil
		}
	}
	rej, md := s.rejection(o)
	ss.SetTrailer(md)
	return rej
}

// ctxStream is a server stream whose context is the pipeline's (a
// deadline-mode timeout's).
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the pipeline's context.
func (c *ctxStream) Context() context.Context { return c.ctx }

// InHandle is the tap (install it with grpc.InTapHandle, or with
// [Server.ServerOptions]): with ServerConfig.Tap set, it admits each call
// by its method's rate limiter before grpc reads the request, and refuses
// it with RESOURCE_EXHAUSTED. grpc sends only the status for a tap's
// refusal, no trailing metadata, so the pushback goes as a
// google.rpc.RetryInfo in the status details (its RetryDelay), which this
// package's client reads as it reads the A6 pushback. Without
// ServerConfig.Tap it admits every call.
func (s *Server) InHandle(ctx context.Context, info *tap.Info) (context.Context, error) {
	if !s.tap {
		return ctx, nil
	}
	r, err := s.route(info.FullMethodName)
	if err != nil {
		return ctx, status.Error(codes.Internal, err.Error())
	}
	if r.rl == nil {
		return ctx, nil
	}
	if w := r.rl.Admit(); w != 0 {
		return ctx, retryInfoStatus(codes.ResourceExhausted, r.rl.RejectedError().Error(), w)
	}
	return ctx, nil
}
