package grpcguard_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/grpcguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// must returns v, and fails the test (by a panic: it has no t) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func newServer(t testing.TB, cfg grpcguard.ServerConfig) *grpcguard.Server {
	t.Helper()
	return must(grpcguard.NewServer(cfg))
}

// okService answers every unary call at once.
func okService() *service {
	return &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return &testpb.SimpleResponse{Username: "ok"}, nil
	}}
}

// wantRejection checks err's code and the pushback trailer.
func wantRejection(t *testing.T, err error, md metadata.MD, code codes.Code, pushbackMs int64) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	v := md.Get(grpcguard.PushbackKey)
	if len(v) != 1 || v[0] != strconv.FormatInt(pushbackMs, 10) {
		t.Fatalf("pushback = %q, want %d", v, pushbackMs)
	}
}

func TestServerRejectionCodesAndPushback(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		t.Run("ratelimit", func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			rl := must(ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk}))
			p := must(pipeline.New(pipeline.Config{RateLimit: rl}))
			c, _ := start(t, network, okService(), newServer(t, grpcguard.ServerConfig{Pipeline: p}).ServerOptions())
			if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
				t.Fatal(err)
			}
			var md metadata.MD
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&md))
			wantRejection(t, err, md, codes.ResourceExhausted, 1000)
		})
		t.Run("breaker", func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			cb := must(circuitbreaker.New(circuitbreaker.Config{Ticker: tk, OpenDuration: 30 * time.Second}))
			cb.TransitionTo(circuitbreaker.Open)
			p := must(pipeline.New(pipeline.Config{Breaker: cb}))
			c, _ := start(t, network, okService(), newServer(t, grpcguard.ServerConfig{Pipeline: p}).ServerOptions())
			var md metadata.MD
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&md))
			wantRejection(t, err, md, codes.Unavailable, 30000)
		})
		t.Run("bulkhead", func(t *testing.T) {
			bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
			p := must(pipeline.New(pipeline.Config{Bulkhead: bh}))
			entered, unblock := make(chan struct{}), make(chan struct{})
			svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				close(entered)
				<-unblock
				return &testpb.SimpleResponse{}, nil
			}}
			c, _ := start(t, network, svc, newServer(t, grpcguard.ServerConfig{Pipeline: p, DefaultPushback: 250 * time.Millisecond}).ServerOptions())
			first := make(chan error, 1)
			go func() { _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); first <- err }()
			<-entered
			var md metadata.MD
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&md))
			wantRejection(t, err, md, codes.Unavailable, 250)
			close(unblock)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		})
		t.Run("timeout", func(t *testing.T) {
			wd := timeout.NewWatchdog(time.Millisecond, rampart.DefaultTicker())
			t.Cleanup(func() { _ = wd.Close() })
			to := must(timeout.New(timeout.Config{Duration: time.Millisecond, Watchdog: wd}))
			p := must(pipeline.New(pipeline.Config{Timeout: to}))
			svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				<-ctx.Done() // the pipeline's deadline
				return nil, ctx.Err()
			}}
			c, _ := start(t, network, svc, newServer(t, grpcguard.ServerConfig{Pipeline: p}).ServerOptions())
			var md metadata.MD
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}, grpc.Trailer(&md))
			wantRejection(t, err, md, codes.DeadlineExceeded, 1000)
		})
	})
}

func TestServerUserErrorsPassThroughUnchanged(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		cb := must(circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1}))
		p := must(pipeline.New(pipeline.Config{Breaker: cb}))
		st := must(status.New(codes.NotFound, "no such user").WithDetails(&errdetails.ErrorInfo{Reason: "USER"}))
		svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			return nil, st.Err()
		}}
		c, _ := start(t, network, svc, newServer(t, grpcguard.ServerConfig{Pipeline: p}).ServerOptions())
		for range 3 {
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
			got := status.Convert(err)
			if got.Code() != codes.NotFound || got.Message() != "no such user" || len(got.Details()) != 1 {
				t.Fatalf("err = %v, want the handler's NOT_FOUND with its detail", err)
			}
		}
		if s := cb.State(); s != circuitbreaker.Closed {
			t.Fatalf("breaker %v after NOT_FOUND answers: a client error is no failure of the server", s)
		}
	})
}

func TestServerFailureCodesOpenTheBreaker(t *testing.T) {
	cb := must(circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 2}))
	p := must(pipeline.New(pipeline.Config{Breaker: cb}))
	svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, status.Error(codes.Internal, "boom")
	}}
	c, _ := start(t, "bufconn", svc, newServer(t, grpcguard.ServerConfig{Pipeline: p}).ServerOptions())
	for range 2 {
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); status.Code(err) != codes.Internal {
			t.Fatalf("err = %v, want the handler's INTERNAL", err)
		}
	}
	_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE from the open breaker", err)
	}
}

// countingCodec counts the requests the server decodes.
type countingCodec struct {
	encoding.CodecV2
	decoded *atomic.Int32
}

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.decoded.Add(1)
	return c.CodecV2.Unmarshal(data, v)
}

func TestTapRejectsBeforeTheRequestIsDecoded(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		tk := rampart.NewManualTicker(0)
		rl := must(ratelimit.New(ratelimit.Config{Rate: 2, Burst: 1, Ticker: tk}))
		bh := must(bulkhead.New(bulkhead.Config{Max: 10}))
		p := must(pipeline.New(pipeline.Config{RateLimit: rl, Bulkhead: bh}))
		g := newServer(t, grpcguard.ServerConfig{Pipeline: p, Tap: true})
		var decoded, handled atomic.Int32
		svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			handled.Add(1)
			return &testpb.SimpleResponse{}, nil
		}}
		codec := countingCodec{encoding.GetCodecV2("proto"), &decoded}
		c, _ := start(t, network, svc, append(g.ServerOptions(), grpc.ForceServerCodecV2(codec)))
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
		st := status.Convert(err)
		if st.Code() != codes.ResourceExhausted {
			t.Fatalf("err = %v, want RESOURCE_EXHAUSTED from the tap", err)
		}
		var delay time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				delay = ri.GetRetryDelay().AsDuration()
			}
		}
		if delay != 500*time.Millisecond {
			t.Fatalf("RetryInfo delay = %v, want the limiter's wait, 500ms", delay)
		}
		if d, h := decoded.Load(), handled.Load(); d != 1 || h != 1 {
			t.Fatalf("decoded %d requests and handled %d, want 1 and 1: the refused one is neither", d, h)
		}
		// The interceptors do not take the rate limit a second time.
		tk.Advance(500 * time.Millisecond)
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatalf("after the wait: %v", err)
		}
	})
}

// afterGuard is an interceptor outside the guard that reports when the
// guard's interceptor has returned (its permits released).
func afterGuard(done chan<- error) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			resp, err := handler(ctx, req)
			done <- err
			return resp, err
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			err := handler(srv, ss)
			done <- err
			return err
		}
}

// recovery turns a handler's panic into INTERNAL, outside the guard.
func recovery() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if v := recover(); v != nil {
					err = status.Errorf(codes.Internal, "panic: %v", v)
				}
			}()
			return handler(ctx, req)
		}, func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = status.Errorf(codes.Internal, "panic: %v", v)
				}
			}()
			return handler(srv, ss)
		}
}

// guardedOptions chains outer interceptors around the guard's.
func guardedOptions(g *grpcguard.Server, outerU []grpc.UnaryServerInterceptor, outerS []grpc.StreamServerInterceptor) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(append(outerU, g.UnaryInterceptor)...),
		grpc.ChainStreamInterceptor(append(outerS, g.StreamInterceptor)...),
	}
}

func TestServerStreamHoldsItsPermitUntilTheHandlerReturns(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		g := newServer(t, grpcguard.ServerConfig{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh}))})
		done := make(chan error, 4)
		au, as := afterGuard(done)
		svc := &service{duplex: func(s testpb.TestService_FullDuplexCallServer) error {
			for {
				in, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: in.GetPayload()}); err != nil {
					return err
				}
			}
		}}
		c, _ := start(t, network, svc, guardedOptions(g, []grpc.UnaryServerInterceptor{au}, []grpc.StreamServerInterceptor{as}))
		s1 := must(c.FullDuplexCall(t.Context()))
		for i := range 5 { // many messages, one permit
			if err := s1.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte{byte(i)}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		if n := bh.Stats().InFlight; n != 1 {
			t.Fatalf("in flight %d during the stream, want 1 (admitted once, not per message)", n)
		}
		s2 := must(c.FullDuplexCall(t.Context()))
		if _, err := s2.Recv(); status.Code(err) != codes.Unavailable {
			t.Fatalf("second stream: %v, want UNAVAILABLE (the first holds the permit)", err)
		}
		<-done // the second stream's rejection
		if err := s1.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := s1.Recv(); err != io.EOF {
			t.Fatalf("first stream's end: %v", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := bh.Stats().InFlight; n != 0 {
			t.Fatalf("in flight %d after the handler returned, want 0", n)
		}
	})
}

func TestServerStreamReleasesItsPermitOnClientCancel(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		g := newServer(t, grpcguard.ServerConfig{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh}))})
		done := make(chan error, 1)
		au, as := afterGuard(done)
		entered := make(chan struct{})
		svc := &service{duplex: func(s testpb.TestService_FullDuplexCallServer) error {
			close(entered)
			<-s.Context().Done() // the client cancels
			return s.Context().Err()
		}}
		c, _ := start(t, network, svc, guardedOptions(g, []grpc.UnaryServerInterceptor{au}, []grpc.StreamServerInterceptor{as}))
		ctx, cancel := context.WithCancel(t.Context())
		s := must(c.FullDuplexCall(ctx))
		_ = s.Send(&testpb.StreamingOutputCallRequest{})
		<-entered
		cancel()
		<-done
		if n := bh.Stats().InFlight; n != 0 {
			t.Fatalf("in flight %d after the client cancelled, want 0", n)
		}
	})
}

func TestServerReleasesPermitsOnHandlerPanic(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		cb := must(circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 3}))
		g := newServer(t, grpcguard.ServerConfig{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh, Breaker: cb}))})
		done := make(chan error, 1)
		au, as := afterGuard(done)
		ru, rs := recovery()
		svc := &service{
			unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) { panic("unary") },
			duplex: func(s testpb.TestService_FullDuplexCallServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				panic("stream")
			},
		}
		c, _ := start(t, network, svc, guardedOptions(g, []grpc.UnaryServerInterceptor{ru, au}, []grpc.StreamServerInterceptor{rs, as}))
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); status.Code(err) != codes.Internal {
			t.Fatalf("unary: %v, want the recovery's INTERNAL", err)
		}
		s := must(c.FullDuplexCall(t.Context()))
		_ = s.Send(&testpb.StreamingOutputCallRequest{})
		if _, err := s.Recv(); status.Code(err) != codes.Internal {
			t.Fatalf("stream: %v, want the recovery's INTERNAL", err)
		}
		if n := bh.Stats().InFlight; n != 0 {
			t.Fatalf("in flight %d after the panics, want 0", n)
		}
		if f := cb.Stats().Failures; f != 2 {
			t.Fatalf("breaker failures %d, want 2 (each panic is one)", f)
		}
	})
}

func TestServerResolvesEachMethodOnce(t *testing.T) {
	bh := must(bulkhead.New(bulkhead.Config{Max: 100}))
	p := must(pipeline.New(pipeline.Config{Bulkhead: bh}))
	var calls atomic.Int32
	g := newServer(t, grpcguard.ServerConfig{PipelineFor: func(m string) *pipeline.Pipeline {
		calls.Add(1)
		return p
	}})
	c, _ := start(t, "bufconn", okService(), g.ServerOptions())
	for range 20 {
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("PipelineFor called %d times for one method, want 1", n)
	}
}

func TestServerConfigErrors(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{}))
	for name, cfg := range map[string]grpcguard.ServerConfig{
		"nil pipeline":      {},
		"empty methods":     {Methods: map[string]*pipeline.Pipeline{}},
		"empty method name": {Methods: map[string]*pipeline.Pipeline{"": p}},
		"not a full name":   {Methods: map[string]*pipeline.Pipeline{"UnaryCall": p}},
		"nil method pipe":   {Methods: map[string]*pipeline.Pipeline{unaryMethod: nil}},
		"methods and func":  {Methods: map[string]*pipeline.Pipeline{unaryMethod: p}, PipelineFor: func(string) *pipeline.Pipeline { return p }},
		"negative pushback": {Pipeline: p, DefaultPushback: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := grpcguard.NewServer(cfg)
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("err = %v, want a *rampart.ConfigError", err)
			}
		})
	}
}

// fakeServerStream is a server stream for calling the interceptor directly.
type fakeServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (f *fakeServerStream) Context() context.Context { return f.ctx }
func (f *fakeServerStream) SetTrailer(metadata.MD)   {}

func TestServerAdmitPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cb := must(circuitbreaker.New(circuitbreaker.Config{}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1e9, Burst: 1 << 20}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))
	p := must(pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh}))
	for name, cfg := range map[string]grpcguard.ServerConfig{
		"one pipeline":      {Pipeline: p},
		"pipeline a method": {Methods: map[string]*pipeline.Pipeline{unaryMethod: p, duplexMethod: p}},
	} {
		t.Run(name, func(t *testing.T) { serverAdmitAllocs(t, newServer(t, cfg)) })
	}
}

func serverAdmitAllocs(t *testing.T, g *grpcguard.Server) {
	ctx := context.Background()
	resp := &testpb.SimpleResponse{}
	handler := func(ctx context.Context, req any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	var req testpb.SimpleRequest
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := g.UnaryInterceptor(ctx, &req, info, handler); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("unary admit path: %v allocations, want 0", n)
	}
	ss := &fakeServerStream{ctx: ctx}
	sinfo := &grpc.StreamServerInfo{FullMethod: duplexMethod}
	shandler := func(srv any, ss grpc.ServerStream) error { return nil }
	if n := testing.AllocsPerRun(1000, func() {
		if err := g.StreamInterceptor(nil, ss, sinfo, shandler); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("stream admit path: %v allocations, want 0", n)
	}
}

// A server pipeline whose only policy is a shedder is applied: unary calls
// and streams go through the shedder, at the pipeline's ShedPriority.
func TestServerAppliesAShedOnlyPipeline(t *testing.T) {
	s := must(shed.New(shed.Config{}))
	var prio atomic.Int32
	p := must(pipeline.New(pipeline.Config{Shed: s, CountStats: true, ShedPriority: func(context.Context) int { prio.Add(1); return 0 }}))
	g := newServer(t, grpcguard.ServerConfig{Pipeline: p})
	_, _ = g.UnaryInterceptor(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: unaryMethod},
		func(context.Context, any) (any, error) { return nil, nil })
	inFlight := -1
	_ = g.StreamInterceptor(nil, &fakeServerStream{ctx: t.Context()}, &grpc.StreamServerInfo{FullMethod: duplexMethod},
		func(any, grpc.ServerStream) error { inFlight = s.InFlight(); return nil })
	if n := p.Stats().Calls; n != 2 || prio.Load() != 2 {
		t.Fatalf("the shed-only pipeline saw %d calls (ShedPriority asked %d times), want 2", n, prio.Load())
	}
	if inFlight != 1 || s.InFlight() != 0 {
		t.Fatalf("the stream held %d of the shedder's permits while its handler ran (%d after), want 1 (0)", inFlight, s.InFlight())
	}
}

// Past the cache's bound on method names (names an UnknownServiceHandler's
// clients choose), a method not cached reuses the route of its pipeline:
// its calls build nothing and allocate nothing.
func TestServerPastTheMethodBoundReusesThePipelinesRoute(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	g := newServer(t, grpcguard.ServerConfig{PipelineFor: func(string) *pipeline.Pipeline { return p }})
	h := func(context.Context, any) (any, error) { return nil, nil }
	for i := range 5000 {
		_, _ = g.UnaryInterceptor(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: "/junk.S/M" + strconv.Itoa(i)}, h)
	}
	if raceEnabled {
		return // allocation counts differ under -race
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryMethod}
	if n := testing.AllocsPerRun(100, func() { _, _ = g.UnaryInterceptor(context.Background(), nil, info, h) }); n != 0 {
		t.Fatalf("a method past the bound: %.0f allocations per call, want 0", n)
	}
}

// Filling the method cache copies O(n) routes in all, not one copy of the
// whole map per new method (O(n²): some 300 MiB for 4096 methods).
func TestServerFillsTheMethodCacheInLinearSpace(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	g := newServer(t, grpcguard.ServerConfig{PipelineFor: func(string) *pipeline.Pipeline { return p }})
	h := func(context.Context, any) (any, error) { return nil, nil }
	infos := make([]grpc.UnaryServerInfo, 4096)
	for i := range infos {
		infos[i].FullMethod = "/junk.S/M" + strconv.Itoa(i)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range infos {
		_, _ = g.UnaryInterceptor(t.Context(), nil, &infos[i], h)
	}
	runtime.ReadMemStats(&after)
	if b := after.TotalAlloc - before.TotalAlloc; b > 8<<20 {
		t.Fatalf("filling the cache with %d methods allocated %d KiB, want at most 8 MiB", len(infos), b>>10)
	}
}

// A caller that leaves while its call overruns a timeout gets the
// handler's own result (the pipeline's ending is Canceled, not TimedOut):
// no DEADLINE_EXCEEDED and no pushback in its place; the client has gone.
func TestServerCallerGoneDuringAnOverrunGetsTheHandlersResult(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to := must(timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick}))
	g := newServer(t, grpcguard.ServerConfig{Pipeline: must(pipeline.New(pipeline.Config{Timeout: to}))})
	for _, want := range []error{nil, status.Error(codes.Canceled, "gone")} {
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := g.UnaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: unaryMethod}, func(context.Context, any) (any, error) {
			cancel()                      // the caller leaves
			tick.Advance(2 * time.Second) // the call overruns
			return "late", want
		})
		if err != want || resp != "late" {
			t.Fatalf("unary: %v, %v; want the handler's late, %v", resp, err, want)
		}
		ctx, cancel = context.WithCancel(t.Context())
		err = g.StreamInterceptor(nil, &fakeServerStream{ctx: ctx}, &grpc.StreamServerInfo{FullMethod: duplexMethod}, func(any, grpc.ServerStream) error {
			cancel()
			tick.Advance(2 * time.Second)
			return want
		})
		if err != want {
			t.Fatalf("stream: %v, want the handler's %v", err, want)
		}
	}
}

// Goroutines calling the same new methods at once resolve each method
// once: a route built into the cache's young map is found there until it
// is published.
func TestServerResolvesEachMethodOnceUnderConcurrentCalls(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	var mu sync.Mutex
	asked := map[string]int{}
	g := newServer(t, grpcguard.ServerConfig{PipelineFor: func(m string) *pipeline.Pipeline {
		mu.Lock()
		asked[m]++
		mu.Unlock()
		return p
	}})
	h := func(context.Context, any) (any, error) { return nil, nil }
	const methods = 300
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 3 * methods {
				m := "/s.S/M" + strconv.Itoa((i*(w+1))%methods)
				if _, err := g.UnaryInterceptor(t.Context(), nil, &grpc.UnaryServerInfo{FullMethod: m}, h); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for m, n := range asked {
		if n != 1 {
			t.Fatalf("PipelineFor asked %d times for %s, want 1", n, m)
		}
	}
	if len(asked) != methods {
		t.Fatalf("%d methods resolved, want %d", len(asked), methods)
	}
}
