package connectguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rampart-go/rampart/connectguard"
)

// TestMain checks that no test leaves a goroutine behind. The one it lets
// live is the library's shared watchdog sweep, which a timeout without a
// Watchdog of its own arms and which exits on its own once idle.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/rampart-go/rampart/internal/watchdog.(*Watchdog).loop"))
}

const (
	sayProc   = "/test.v1.Echo/Say"
	countProc = "/test.v1.Echo/Count"
)

type msg = wrapperspb.StringValue

// must returns v, and fails the test (by a panic: it has no t) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// handlers are the test service's two procedures: a unary Say and a
// server-streaming Count.
type handlers struct {
	// outer, when set, is an interceptor outside the guard (the first of
	// connect.WithInterceptors is the outermost).
	outer connect.Interceptor
	say   func(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error)
	count func(ctx context.Context, req *connect.Request[msg], s *connect.ServerStream[msg]) error
}

func okSay(ctx context.Context, req *connect.Request[msg]) (*connect.Response[msg], error) {
	return connect.NewResponse(wrapperspb.String("ok")), nil
}

// protocols are the client protocols the end-to-end tests run: Connect
// (errors' metadata in headers) and gRPC-Web (in trailers), both over
// HTTP/1.1.
var protocols = map[string][]connect.ClientOption{"connect": nil, "grpcweb": {connect.WithGRPCWeb()}}

// eachProtocol runs f with each protocol's client options.
func eachProtocol(t *testing.T, f func(t *testing.T, opts []connect.ClientOption)) {
	for name, opts := range protocols {
		t.Run(name, func(t *testing.T) { f(t, opts) })
	}
}

// serve starts h on httptest with the handler interceptor si (nil: none)
// and returns clients of both procedures with the client interceptor ci
// (nil: none) and the server's URL.
func serve(t *testing.T, h handlers, si, ci *connectguard.Interceptor, copts ...connect.ClientOption) (*connect.Client[msg, msg], *connect.Client[msg, msg], *httptest.Server) {
	t.Helper()
	var hopts []connect.HandlerOption
	switch {
	case h.outer != nil && si != nil:
		hopts = append(hopts, connect.WithInterceptors(h.outer, si))
	case si != nil:
		hopts = append(hopts, connect.WithInterceptors(si))
	}
	if h.say == nil {
		h.say = okSay
	}
	mux := http.NewServeMux()
	mux.Handle(sayProc, connect.NewUnaryHandler(sayProc, h.say, hopts...))
	if h.count != nil {
		mux.Handle(countProc, connect.NewServerStreamHandler(countProc, h.count, hopts...))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if ci != nil {
		copts = append(copts, connect.WithInterceptors(ci))
	}
	return connect.NewClient[msg, msg](srv.Client(), srv.URL+sayProc, copts...),
		connect.NewClient[msg, msg](srv.Client(), srv.URL+countProc, copts...), srv
}

// afterGuard is an interceptor outside the guard that reports when the
// guard's streaming handler has returned (its permits released), panic or
// not.
type afterGuard struct{ done chan<- struct{} }

func (a afterGuard) WrapUnary(n connect.UnaryFunc) connect.UnaryFunc { return n }
func (a afterGuard) WrapStreamingClient(n connect.StreamingClientFunc) connect.StreamingClientFunc {
	return n
}
func (a afterGuard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		defer func() { a.done <- struct{}{} }()
		return next(ctx, conn)
	}
}
