package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	fscb "github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	fsratelimiter "github.com/failsafe-go/failsafe-go/ratelimiter"
	grpcratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/grpcguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
)

// BenchmarkGRPC measures a unary gRPC call over bufconn (an in-memory
// connection: HTTP/2 framing and proto coding, no sockets), one call at a
// time, so that the rows differ only by the interceptors.
//
//   - Unary/direct: no interceptor, the floor of every row.
//   - Unary/rampart: grpcguard's server and client interceptors, each over
//     a pipeline of a circuit breaker, a rate limiter with a high rate and
//     a bulkhead, every policy admitting.
//   - Unary/failsafe: failsafegrpc's server and client interceptors over
//     failsafe-go's same three policies.
//   - RateLimit/direct, RateLimit/rampart, RateLimit/failsafe,
//     RateLimit/grpcmiddleware: a server rate limit alone (rampart's
//     pipeline with a ratelimit.Limiter; failsafe's bursty limiter;
//     go-grpc-middleware's ratelimit interceptor over x/time/rate), where
//     go-grpc-middleware applies.
//
// The network rows carry the noise of a whole call (tens of µs on a shared
// machine); the Interceptors rows measure what the interceptors add
// alone, each library's client interceptor called directly with an
// invoker that calls its server interceptor with a handler that returns a
// prebuilt response (Interceptors/direct: the invoker calls the handler):
//
//   - Interceptors/direct, Interceptors/rampart, Interceptors/failsafe;
//     RateLimitInterceptor/{direct,rampart,failsafe,grpcmiddleware}: the
//     server rate limit alone, the same way.
//
// Subtract the direct row from a row for what its interceptors add.
func BenchmarkGRPC(b *testing.B) {
	b.Run("Interceptors/direct", func(b *testing.B) { benchGRPCInterceptors(b, nil, nil) })
	b.Run("Interceptors/rampart", func(b *testing.B) {
		s := must(grpcguard.NewServer(grpcguard.ServerConfig{Pipeline: grpcPipeline(true)}))
		c := must(grpcguard.NewClient(grpcguard.ClientConfig{Pipeline: grpcPipeline(true)}))
		benchGRPCInterceptors(b, s.UnaryInterceptor, c.UnaryInterceptor)
	})
	b.Run("Interceptors/failsafe", func(b *testing.B) {
		benchGRPCInterceptors(b, failsafegrpc.NewUnaryServerInterceptor(failsafeGRPCPolicies(true)...),
			failsafegrpc.NewUnaryClientInterceptor(failsafeGRPCPolicies(true)...))
	})
	b.Run("RateLimitInterceptor/direct", func(b *testing.B) { benchGRPCInterceptors(b, nil, nil) })
	b.Run("RateLimitInterceptor/rampart", func(b *testing.B) {
		s := must(grpcguard.NewServer(grpcguard.ServerConfig{Pipeline: grpcPipeline(false)}))
		benchGRPCInterceptors(b, s.UnaryInterceptor, nil)
	})
	b.Run("RateLimitInterceptor/failsafe", func(b *testing.B) {
		benchGRPCInterceptors(b, failsafegrpc.NewUnaryServerInterceptor(failsafeGRPCPolicies(false)...), nil)
	})
	b.Run("RateLimitInterceptor/grpcmiddleware", func(b *testing.B) {
		l := xrateLimiter{rate.NewLimiter(rate.Limit(1e9), 1<<20)}
		benchGRPCInterceptors(b, grpcratelimit.UnaryServerInterceptor(l), nil)
	})
	b.Run("Unary/direct", func(b *testing.B) { benchGRPCUnary(b, nil, nil) })
	b.Run("Unary/rampart", func(b *testing.B) {
		s := must(grpcguard.NewServer(grpcguard.ServerConfig{Pipeline: grpcPipeline(true)}))
		c := must(grpcguard.NewClient(grpcguard.ClientConfig{Pipeline: grpcPipeline(true)}))
		benchGRPCUnary(b, s.ServerOptions(), c.DialOptions())
	})
	b.Run("Unary/failsafe", func(b *testing.B) {
		benchGRPCUnary(b,
			[]grpc.ServerOption{grpc.ChainUnaryInterceptor(failsafegrpc.NewUnaryServerInterceptor(failsafeGRPCPolicies(true)...))},
			[]grpc.DialOption{grpc.WithChainUnaryInterceptor(failsafegrpc.NewUnaryClientInterceptor(failsafeGRPCPolicies(true)...))})
	})
	b.Run("RateLimit/direct", func(b *testing.B) { benchGRPCUnary(b, nil, nil) })
	b.Run("RateLimit/rampart", func(b *testing.B) {
		s := must(grpcguard.NewServer(grpcguard.ServerConfig{Pipeline: grpcPipeline(false)}))
		benchGRPCUnary(b, s.ServerOptions(), nil)
	})
	b.Run("RateLimit/failsafe", func(b *testing.B) {
		benchGRPCUnary(b,
			[]grpc.ServerOption{grpc.ChainUnaryInterceptor(failsafegrpc.NewUnaryServerInterceptor(failsafeGRPCPolicies(false)...))}, nil)
	})
	b.Run("RateLimit/grpcmiddleware", func(b *testing.B) {
		l := xrateLimiter{rate.NewLimiter(rate.Limit(1e9), 1<<20)}
		benchGRPCUnary(b, []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpcratelimit.UnaryServerInterceptor(l))}, nil)
	})
}

// grpcPipeline is a breaker, a high-rate limiter and a bulkhead (all=true),
// or the rate limiter alone.
func grpcPipeline(all bool) *pipeline.Pipeline {
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1e9, Burst: 1 << 20}))
	if !all {
		return must(pipeline.New(pipeline.Config{RateLimit: rl}))
	}
	cb := must(circuitbreaker.New(circuitbreaker.Config{}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))
	return must(pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh}))
}

// failsafeGRPCPolicies is failsafe-go's breaker, high-rate limiter and
// bulkhead (all=true), or the rate limiter alone, outermost first as in
// rampart's pipeline.
func failsafeGRPCPolicies(all bool) []failsafe.Policy[any] {
	rl := fsratelimiter.NewBurstyBuilder[any](1<<30, time.Second).Build()
	if !all {
		return []failsafe.Policy[any]{rl}
	}
	cb := fscb.NewBuilder[any]().WithFailureThresholdRatio(50, 100).WithDelay(time.Minute).Build()
	return []failsafe.Policy[any]{cb, rl, fsbulkhead.New[any](1 << 20)}
}

// xrateLimiter adapts x/time/rate to go-grpc-middleware's ratelimit.Limiter.
type xrateLimiter struct{ l *rate.Limiter }

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return status.Error(codes.ResourceExhausted, "rate limited")
	}
	return nil
}

// benchGRPCInterceptors calls the client interceptor ci (nil: none) with
// an invoker that calls the server interceptor si (nil: none) with a
// handler that returns a prebuilt response.
func benchGRPCInterceptors(b *testing.B, si grpc.UnaryServerInterceptor, ci grpc.UnaryClientInterceptor) {
	resp := &testpb.SimpleResponse{Username: "u"}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: testpb.TestService_UnaryCall_FullMethodName}
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		if si == nil {
			_, err = handler(ctx, req)
		} else {
			_, err = si(ctx, req, info, handler)
		}
		return err
	}
	ctx := context.Background()
	req, reply := &testpb.SimpleRequest{}, &testpb.SimpleResponse{}
	call := func() error {
		if ci == nil {
			return invoker(ctx, info.FullMethod, req, reply, nil)
		}
		return ci(ctx, info.FullMethod, req, reply, nil, invoker)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
}

// grpcService answers UnaryCall with a prebuilt response.
type grpcService struct {
	testpb.UnimplementedTestServiceServer
	resp *testpb.SimpleResponse
}

func (s *grpcService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return s.resp, nil
}

// benchGRPCUnary serves grpcService over bufconn with sopts and measures
// UnaryCall from a client with copts.
func benchGRPCUnary(b *testing.B, sopts []grpc.ServerOption, copts []grpc.DialOption) {
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(sopts...)
	testpb.RegisterTestServiceServer(s, &grpcService{resp: &testpb.SimpleResponse{Username: "u"}})
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(lis) }()
	cc := must(grpc.NewClient("passthrough:///bufnet", append(copts,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...))
	b.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		<-served
	})
	c := testpb.NewTestServiceClient(cc)
	ctx := context.Background()
	req := &testpb.SimpleRequest{}
	if _, err := c.UnaryCall(ctx, req); err != nil { // connect before the clock starts
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
