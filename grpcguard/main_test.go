package grpcguard_test

import (
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/test/bufconn"
)

// TestMain checks that no test leaves a goroutine behind: no server, no
// connection, no stream, no hedged attempt. The one goroutine it lets live
// is the library's shared watchdog sweep, which the hedger (and a timeout
// without a Watchdog of its own) arms and which exits on its own once idle.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/rampart-go/rampart/internal/watchdog.(*Watchdog).loop"))
}

const (
	unaryMethod  = testpb.TestService_UnaryCall_FullMethodName
	duplexMethod = testpb.TestService_FullDuplexCall_FullMethodName
	outMethod    = testpb.TestService_StreamingOutputCall_FullMethodName
)

// service is a TestService whose methods the test sets.
type service struct {
	testpb.UnimplementedTestServiceServer
	unary  func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error)
	duplex func(s testpb.TestService_FullDuplexCallServer) error
	out    func(in *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error
}

func (s *service) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return s.unary(ctx, in)
}

func (s *service) FullDuplexCall(st testpb.TestService_FullDuplexCallServer) error {
	return s.duplex(st)
}

func (s *service) StreamingOutputCall(in *testpb.StreamingOutputCallRequest, st testpb.TestService_StreamingOutputCallServer) error {
	return s.out(in, st)
}

// networks are the transports every end-to-end test runs on.
var networks = []string{"bufconn", "tcp"}

// eachNetwork runs f on each transport.
func eachNetwork(t *testing.T, f func(t *testing.T, network string)) {
	for _, n := range networks {
		t.Run(n, func(t *testing.T) { f(t, n) })
	}
}

// start serves svc on network (bufconn, or TCP on 127.0.0.1 with a free
// port) and returns a client connection; both stop when the test ends.
func start(t *testing.T, network string, svc *service, sopts []grpc.ServerOption, copts ...grpc.DialOption) (testpb.TestServiceClient, *grpc.ClientConn) {
	t.Helper()
	var lis net.Listener
	target := "passthrough:///bufnet"
	switch network {
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		lis = bl
		copts = append(copts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) }))
	default:
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis, target = l, l.Addr().String()
	}
	s := grpc.NewServer(sopts...)
	testpb.RegisterTestServiceServer(s, svc)
	served := make(chan struct{})
	go func() { defer close(served); _ = s.Serve(lis) }()
	cc, err := grpc.NewClient(target, append(copts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		s.Stop()
		<-served
	})
	return testpb.NewTestServiceClient(cc), cc
}
