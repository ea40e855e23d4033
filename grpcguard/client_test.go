package grpcguard_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/grpcguard"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
)

func newClient(cfg grpcguard.ClientConfig) *grpcguard.Client { return must(grpcguard.NewClient(cfg)) }

// fastRetry retries at once (1 µs backoff): the tests count attempts, not
// time.
func fastRetry(c retry.Config) *retry.Policy {
	c.BaseDelay, c.MaxDelay = time.Microsecond, time.Second
	return must(retry.New(c))
}

// failing answers every unary call with err after setting the trailer md
// (when not nil) and counts the calls and their previous-attempt headers.
type failing struct {
	mu       sync.Mutex
	calls    int
	previous []string
}

func (f *failing) service(answer func(n int) (*testpb.SimpleResponse, metadata.MD, error)) *service {
	return &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		f.mu.Lock()
		n := f.calls
		f.calls++
		f.previous = append(f.previous, firstOf(md.Get(grpcguard.PreviousAttemptsKey)))
		f.mu.Unlock()
		resp, tr, err := answer(n)
		if tr != nil {
			_ = grpc.SetTrailer(ctx, tr)
		}
		return resp, err
	}}
}

func (f *failing) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func unavailable(n int) (*testpb.SimpleResponse, metadata.MD, error) {
	return nil, nil, status.Error(codes.Unavailable, "down")
}

func TestClientRetriesStopAtTheBudget(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		bud := must(retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 4, TokenRatio: 0.1}))
		rp := fastRetry(retry.Config{MaxAttempts: 10, Budget: bud})
		g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: rp}))})
		var f failing
		c, _ := start(t, network, f.service(unavailable), nil, g.DialOptions()...)
		// 4 tokens, retries while above 2: the first call's first failure
		// leaves 3 (retried), its second 2 (refused); the second call's
		// failure leaves 1 (refused).
		for _, want := range []int{2, 3} {
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
			if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "down" {
				t.Fatalf("err = %v, want the server's UNAVAILABLE as it sent it", err)
			}
			if n := f.count(); n != want {
				t.Fatalf("server saw %d attempts, want %d", n, want)
			}
		}
		if r := rp.Stats().BudgetRefused; r != 2 {
			t.Fatalf("budget refused %d retries, want 2", r)
		}
	})
}

func TestClientHonoursThePushback(t *testing.T) {
	for name, tc := range map[string]struct {
		pushback string
		attempts int
		delay    time.Duration
	}{
		"wait":       {"3", 2, 3 * time.Millisecond},
		"negative":   {"-1", 1, 0},
		"unparsable": {"soon", 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			var delays []time.Duration
			rp := fastRetry(retry.Config{MaxAttempts: 3, OnRetry: func(_ int, d time.Duration, _ error) { delays = append(delays, d) }})
			g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: rp}))})
			var f failing
			svc := f.service(func(n int) (*testpb.SimpleResponse, metadata.MD, error) {
				if n == 0 {
					return nil, metadata.Pairs(grpcguard.PushbackKey, tc.pushback), status.Error(codes.Unavailable, "busy")
				}
				return &testpb.SimpleResponse{}, nil, nil
			})
			c, _ := start(t, "bufconn", svc, nil, g.DialOptions()...)
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
			if n := f.count(); n != tc.attempts {
				t.Fatalf("%d attempts, want %d (err %v)", n, tc.attempts, err)
			}
			if tc.attempts == 1 {
				if status.Code(err) != codes.Unavailable {
					t.Fatalf("err = %v, want the server's UNAVAILABLE", err)
				}
				return
			}
			if err != nil || len(delays) != 1 || delays[0] != tc.delay {
				t.Fatalf("err %v, retry delays %v, want nil and [%v] (the pushback replaces the backoff)", err, delays, tc.delay)
			}
		})
	}
}

func TestClientHonoursATapsRetryInfo(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	rl := must(ratelimit.New(ratelimit.Config{Rate: 500, Burst: 1, Ticker: tk}))
	sg := newServer(t, grpcguard.ServerConfig{Pipeline: must(pipeline.New(pipeline.Config{RateLimit: rl})), Tap: true})
	var delays []time.Duration
	rp := fastRetry(retry.Config{MaxAttempts: 2, OnRetry: func(_ int, d time.Duration, _ error) {
		delays = append(delays, d)
		tk.Advance(d) // the server's clock moves with the client's wait
	}})
	g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: rp})),
		RetryCodes: []codes.Code{codes.ResourceExhausted}})
	c, _ := start(t, "bufconn", okService(), sg.ServerOptions(), g.DialOptions()...)
	for range 2 {
		if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(delays) != 1 || delays[0] != 2*time.Millisecond {
		t.Fatalf("retry delays %v, want [2ms] (the tap's RetryInfo)", delays)
	}
}

func TestClientRetriesOnlyTheRetryableCodes(t *testing.T) {
	internal := func(int) (*testpb.SimpleResponse, metadata.MD, error) {
		return nil, nil, status.Error(codes.Internal, "bug")
	}
	for name, tc := range map[string]struct {
		codes    []codes.Code
		attempts int
	}{"default": {nil, 1}, "internal marked": {[]codes.Code{codes.Internal}, 3}} {
		t.Run(name, func(t *testing.T) {
			g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})})),
				RetryCodes: tc.codes})
			var f failing
			c, _ := start(t, "bufconn", f.service(internal), nil, g.DialOptions()...)
			_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
			if status.Code(err) != codes.Internal || f.count() != tc.attempts {
				t.Fatalf("err %v after %d attempts, want INTERNAL after %d", err, f.count(), tc.attempts)
			}
		})
	}
}

func TestClientSetsPreviousAttemptsOnEachRetry(t *testing.T) {
	g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})}))})
	var f failing
	c, _ := start(t, "bufconn", f.service(func(n int) (*testpb.SimpleResponse, metadata.MD, error) {
		if n < 2 {
			return unavailable(n)
		}
		return &testpb.SimpleResponse{}, nil, nil
	}), nil, g.DialOptions()...)
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := f.previous; len(got) != 3 || got[0] != "" || got[1] != "1" || got[2] != "2" {
		t.Fatalf("grpc-previous-rpc-attempts %q, want [\"\" 1 2]", got)
	}
}

func TestClientHedgeWinsAgainstASlowFirstAttemptAndCancelsIt(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		hg := must(hedge.New(hedge.Config{Delay: time.Millisecond}))
		p := must(pipeline.New(pipeline.Config{Hedge: hg, Idempotent: true}))
		g := newClient(grpcguard.ClientConfig{Pipeline: p, Idempotent: []string{unaryMethod}})
		firstEntered, loserCanceled := make(chan struct{}), make(chan struct{})
		var previous []string
		var mu sync.Mutex
		svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			prev := firstOf(md.Get(grpcguard.PreviousAttemptsKey))
			mu.Lock()
			previous = append(previous, prev)
			mu.Unlock()
			if prev == "" { // the first attempt: slow until the hedge wins
				close(firstEntered)
				<-ctx.Done()
				close(loserCanceled)
				return nil, ctx.Err()
			}
			<-firstEntered // so that the loser is on the server when it is cancelled
			return &testpb.SimpleResponse{Username: "hedge " + prev}, nil
		}}
		c, _ := start(t, network, svc, nil, g.DialOptions()...)
		resp, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
		if err != nil || resp.GetUsername() != "hedge 1" {
			t.Fatalf("resp %v, err %v, want the hedge's answer", resp, err)
		}
		<-loserCanceled // the slow first attempt was cancelled on the server
		mu.Lock()
		defer mu.Unlock()
		if len(previous) != 2 {
			t.Fatalf("attempts %q, want 2", previous)
		}
	})
}

func TestClientAttemptDeadlineNeverOutlivesTheCalls(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		deadlines := make(chan time.Time, 4)
		var slowDone atomic.Bool
		svc := &service{unary: func(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			d, _ := ctx.Deadline()
			deadlines <- d
			if in.GetFillUsername() && slowDone.CompareAndSwap(false, true) { // the slow attempt: past its own deadline
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &testpb.SimpleResponse{}, nil
		}}
		g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 2})})),
			AttemptTimeout: 10 * time.Second})
		c, _ := start(t, network, svc, nil, g.DialOptions()...)

		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		before := time.Now()
		if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		if d := <-deadlines; d.After(before.Add(10*time.Second+time.Second)) || d.Before(before) {
			t.Fatalf("server deadline %v, want the attempt's, about %v", d.Sub(before), 10*time.Second)
		}
		short, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel2()
		want, _ := short.Deadline()
		if _, err := c.UnaryCall(short, &testpb.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
		// grpc sends the time left (grpc-timeout): the server's deadline is
		// the call's plus the transit, far below the 10 s attempt timeout.
		if d := <-deadlines; d.After(want.Add(time.Second)) {
			t.Fatalf("server deadline %v after the call's %v: the attempt outlived the call", d.Sub(want), want)
		}

		// An attempt past its own deadline, with the call's live, is retried.
		g2 := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 2})})),
			AttemptTimeout: 300 * time.Millisecond})
		c2, _ := start(t, network, svc, nil, g2.DialOptions()...)
		if _, err := c2.UnaryCall(t.Context(), &testpb.SimpleRequest{FillUsername: true}); err != nil {
			t.Fatalf("the retry after an attempt timeout: %v", err)
		}
		<-deadlines
		<-deadlines
	})
}

func TestClientBreakerPerTargetAndPerMethod(t *testing.T) {
	for _, scope := range []grpcguard.BreakerScope{grpcguard.PerTarget, grpcguard.PerMethod} {
		var mu sync.Mutex
		var keys []string
		breakers := map[string]*circuitbreaker.Breaker{}
		g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{})), BreakerScope: scope,
			NewBreaker: func(key string) (*circuitbreaker.Breaker, error) {
				mu.Lock()
				defer mu.Unlock()
				keys = append(keys, key)
				cb, err := circuitbreaker.New(circuitbreaker.Config{Name: key})
				breakers[key] = cb
				return cb, err
			}})
		var f1, f2 failing
		ok := func(int) (*testpb.SimpleResponse, metadata.MD, error) { return &testpb.SimpleResponse{}, nil, nil }
		c1, cc1 := start(t, "tcp", f1.service(ok), nil, g.DialOptions()...)
		c2, cc2 := start(t, "tcp", f2.service(ok), nil, g.DialOptions()...)
		for range 3 {
			for _, c := range []testpb.TestServiceClient{c1, c2} {
				if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		switch scope {
		case grpcguard.PerTarget:
			if len(keys) != 2 || keys[0] != cc1.Target() || keys[1] != cc2.Target() {
				t.Fatalf("per target: breakers %q, want [%s %s]", keys, cc1.Target(), cc2.Target())
			}
			// The first target's breaker opens: its calls are refused
			// locally, the other target's go on.
			breakers[cc1.Target()].TransitionTo(circuitbreaker.Open)
			_, err := c1.UnaryCall(t.Context(), &testpb.SimpleRequest{})
			if re, ok := errors.AsType[*grpcguard.RejectedError](err); !ok || status.Code(err) != codes.Unavailable ||
				re.Policy != pipeline.Breaker || !errors.Is(err, rampart.ErrRejected) || !errors.Is(err, circuitbreaker.ErrOpen) {
				t.Fatalf("err = %v, want a local UNAVAILABLE rejection matching circuitbreaker.ErrOpen", err)
			}
			if f1.count() != 3 {
				t.Fatalf("server 1 saw %d calls, want 3: the rejected one never left", f1.count())
			}
			if _, err := c2.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
				t.Fatalf("other target: %v", err)
			}
		case grpcguard.PerMethod:
			if len(keys) != 1 || keys[0] != unaryMethod {
				t.Fatalf("per method: breakers %q, want [%s]", keys, unaryMethod)
			}
		}
	}
}

func TestClientLocalRateLimitIsResourceExhausted(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk}))
	g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{RateLimit: rl}))})
	c, _ := start(t, "bufconn", okService(), nil, g.DialOptions()...)
	if _, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	re, ok := errors.AsType[*grpcguard.RejectedError](err)
	if !ok || status.Code(err) != codes.ResourceExhausted || re.RetryAfter != time.Second || !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("err = %v, want RESOURCE_EXHAUSTED with a 1s hint matching ratelimit.ErrLimited", err)
	}
}

func TestClientConfigErrors(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{}))
	hp := must(pipeline.New(pipeline.Config{Hedge: must(hedge.New(hedge.Config{Delay: time.Millisecond})), Idempotent: true}))
	for name, cfg := range map[string]grpcguard.ClientConfig{
		"nil pipeline":               {},
		"empty methods":              {Methods: map[string]*pipeline.Pipeline{}},
		"empty method name":          {Methods: map[string]*pipeline.Pipeline{"": p}},
		"hedge not idempotent":       {Methods: map[string]*pipeline.Pipeline{unaryMethod: hp}},
		"default hedge, none idem":   {Pipeline: hp},
		"bad idempotent name":        {Pipeline: p, Idempotent: []string{"grpc.testing.TestService/UnaryCall"}},
		"negative attempt timeout":   {Pipeline: p, AttemptTimeout: -1},
		"invalid breaker scope":      {Pipeline: p, BreakerScope: 7},
		"retry code out of range":    {Pipeline: p, RetryCodes: []codes.Code{99}},
		"hedge idempotent elsewhere": {Methods: map[string]*pipeline.Pipeline{unaryMethod: hp}, Idempotent: []string{duplexMethod}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := grpcguard.NewClient(cfg)
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("err = %v, want a *rampart.ConfigError", err)
			}
		})
	}
	// A hedge that PipelineFor gives a method not declared idempotent
	// fails that method's calls with the ConfigError (it cannot be seen at
	// NewClient).
	g := newClient(grpcguard.ClientConfig{PipelineFor: func(string) *pipeline.Pipeline { return hp }})
	err := g.UnaryInterceptor(context.Background(), unaryMethod, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil,
		func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
	if !errors.Is(err, rampart.ErrInvalidConfig) {
		t.Fatalf("err = %v, want the ConfigError", err)
	}
}

func TestClientAdmitPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cb := must(circuitbreaker.New(circuitbreaker.Config{}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1e9, Burst: 1 << 20}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))
	rp := must(retry.New(retry.Config{}))
	for name, cfg := range map[string]grpcguard.ClientConfig{
		"policies":       {Pipeline: must(pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh}))},
		"policies+retry": {Pipeline: must(pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh, Retry: rp}))},
		"pipeline a method": {Methods: map[string]*pipeline.Pipeline{
			unaryMethod: must(pipeline.New(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh, Retry: rp}))}},
	} {
		g := newClient(cfg)
		invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return nil
		}
		ctx := context.Background()
		var req testpb.SimpleRequest
		var reply testpb.SimpleResponse
		if n := testing.AllocsPerRun(1000, func() {
			if err := g.UnaryInterceptor(ctx, unaryMethod, &req, &reply, nil, invoker); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Fatalf("%s: %v allocations on the admit path, want 0", name, n)
		}
	}
}

func TestClientStreamHoldsItsPermitUntilItEnds(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh}))})
		svc := &service{duplex: func(s testpb.TestService_FullDuplexCallServer) error {
			for {
				if _, err := s.Recv(); err != nil {
					return nil
				}
				if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
					return err
				}
			}
		}}
		c, _ := start(t, network, svc, nil, g.DialOptions()...)
		s1 := must(c.FullDuplexCall(t.Context()))
		for range 3 {
			if err := s1.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s1.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.FullDuplexCall(t.Context()); status.Code(err) != codes.Unavailable || !errors.Is(err, bulkhead.ErrFull) {
			t.Fatalf("second stream: %v, want a local UNAVAILABLE (bulkhead full)", err)
		}
		_ = s1.CloseSend()
		if _, err := s1.Recv(); err != io.EOF {
			t.Fatalf("end: %v", err)
		}
		if n := bh.Stats().InFlight; n != 0 {
			t.Fatalf("in flight %d after the stream ended, want 0", n)
		}
		// A cancelled stream releases its permit too.
		ctx, cancel := context.WithCancel(t.Context())
		s2 := must(c.FullDuplexCall(ctx))
		cancel()
		if _, err := s2.Recv(); status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled stream: %v", err)
		}
		if n := bh.Stats().InFlight; n != 0 {
			t.Fatalf("in flight %d after the stream was cancelled, want 0", n)
		}
	})
}

func TestClientStreamRetriesOnlyBeforeItsFirstResponse(t *testing.T) {
	eachNetwork(t, func(t *testing.T, network string) {
		var attempts atomic.Int32
		var failAfterFirst atomic.Bool
		svc := &service{out: func(in *testpb.StreamingOutputCallRequest, s testpb.TestService_StreamingOutputCallServer) error {
			n := attempts.Add(1)
			if failAfterFirst.Load() {
				if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
					return err
				}
				return status.Error(codes.Unavailable, "mid-stream")
			}
			if n == 1 {
				return status.Error(codes.Unavailable, "not yet")
			}
			for range len(in.GetResponseParameters()) {
				if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
					return err
				}
			}
			return nil
		}}
		g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})}))})
		c, _ := start(t, network, svc, nil, g.DialOptions()...)
		req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{}, {}}}
		s := must(c.StreamingOutputCall(t.Context(), req))
		got := 0
		for {
			_, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got++
		}
		if got != 2 || attempts.Load() != 2 {
			t.Fatalf("%d messages after %d attempts, want 2 after 2 (the request replayed)", got, attempts.Load())
		}
		failAfterFirst.Store(true)
		attempts.Store(0)
		s = must(c.StreamingOutputCall(t.Context(), req))
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(); status.Code(err) != codes.Unavailable || attempts.Load() != 1 {
			t.Fatalf("err %v after %d attempts, want UNAVAILABLE after 1: a stream is not retried after its first response", err, attempts.Load())
		}
	})
}

// fakeCS is a client stream whose RecvMsg returns err.
type fakeCS struct {
	grpc.ClientStream
	ctx context.Context
	err error
}

func (f *fakeCS) RecvMsg(any) error            { return f.err }
func (f *fakeCS) SendMsg(any) error            { return nil }
func (f *fakeCS) CloseSend() error             { return nil }
func (f *fakeCS) Trailer() metadata.MD         { return nil }
func (f *fakeCS) Header() (metadata.MD, error) { return nil, nil }
func (f *fakeCS) Context() context.Context     { return f.ctx }

// hookTicker reads the time, and calls hook on its at-th reading.
type hookTicker struct {
	calls atomic.Int32
	at    int32
	hook  func()
}

func (h *hookTicker) Now() int64 {
	if h.calls.Add(1) == h.at && h.hook != nil {
		h.hook()
	}
	return time.Now().UnixNano()
}

// A stream whose context ends between a retry's release of the failed
// attempt and the next attempt's admission: the context's AfterFunc ends
// the stream while it holds nothing, and the next attempt's permit must
// still come back (admit sees the stream ended and releases it).
func TestClientStreamEndedDuringARetryKeepsNoPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		tk := &hookTicker{at: 4}                       // 1 the start, 2 the admission, 3 the retry's decision, 4 the retry's admission
		tk.hook = func() { cancel(); synctest.Wait() } // the AfterFunc ends the stream, now
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		rp := must(retry.New(retry.Config{MaxAttempts: 3, BaseDelay: time.Nanosecond, MaxDelay: time.Nanosecond, Ticker: tk}))
		c := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: rp, Bulkhead: bh, Ticker: tk}))})
		opened := 0
		streamer := func(sctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
			opened++
			if opened == 1 {
				return &fakeCS{ctx: sctx, err: status.Error(codes.Unavailable, "down")}, nil
			}
			return &fakeCS{ctx: sctx, err: status.Error(codes.Canceled, "context canceled")}, nil
		}
		cs, err := c.StreamInterceptor(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, nil, duplexMethod, streamer)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.RecvMsg(new(struct{})); status.Code(err) != codes.Canceled {
			t.Fatalf("RecvMsg: %v, want Canceled", err)
		}
		if tk.calls.Load() < 4 {
			t.Fatalf("the retry's admission was not reached (%d readings)", tk.calls.Load())
		}
		if err := bh.Acquire(); err != nil {
			t.Fatalf("the ended stream still holds the bulkhead's only slot: %v (opened %d)", err, opened)
		}
		bh.Release()
	})
}

// A stream whose context ends as it is opened: the context's AfterFunc
// ends the stream on its own goroutine while the interceptor is still
// setting the stream up (the race detector checks that it touches
// nothing the interceptor writes), and the permit comes back.
func TestClientStreamEndedAsItOpensReleasesItsPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 50 {
			ctx, cancel := context.WithCancel(t.Context())
			bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
			c := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh}))})
			streamer := func(sctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
				cancel() // the client gives up as the stream opens
				return &fakeCS{ctx: sctx, err: status.Error(codes.Canceled, "canceled")}, nil
			}
			cs, err := c.StreamInterceptor(ctx, &grpc.StreamDesc{ServerStreams: true}, nil, duplexMethod, streamer)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the AfterFunc has ended the stream
			if err := bh.Acquire(); err != nil {
				t.Fatalf("the ended stream still holds the bulkhead's only slot: %v", err)
			}
			bh.Release()
			_ = cs.RecvMsg(new(struct{}))
		}
	})
}

// grpc-go's own retry (its stream's shouldRetry) does not retry an attempt
// whose trailer has more than one grpc-retry-pushback-ms value.
func TestClientDoesNotRetryOnSeveralPushbackValues(t *testing.T) {
	rp := fastRetry(retry.Config{MaxAttempts: 3})
	g := newClient(grpcguard.ClientConfig{Pipeline: must(pipeline.New(pipeline.Config{Retry: rp}))})
	var f failing
	svc := f.service(func(n int) (*testpb.SimpleResponse, metadata.MD, error) {
		if n == 0 {
			return nil, metadata.MD{grpcguard.PushbackKey: {"1", "-1"}}, status.Error(codes.Unavailable, "busy")
		}
		return &testpb.SimpleResponse{}, nil, nil
	})
	c, _ := start(t, "bufconn", svc, nil, g.DialOptions()...)
	_, _ = c.UnaryCall(t.Context(), &testpb.SimpleRequest{})
	if n := f.count(); n != 1 {
		t.Fatalf("%d attempts on a trailer with two pushback values, want 1 (as grpc-go: not retried)", n)
	}
}

// A client pipeline whose only policy is a shedder is applied: its unary
// calls and its streams go through the shedder, at the pipeline's
// ShedPriority.
func TestClientAppliesAShedOnlyPipeline(t *testing.T) {
	s := must(shed.New(shed.Config{}))
	var prio atomic.Int32
	p := must(pipeline.New(pipeline.Config{Shed: s, CountStats: true, ShedPriority: func(context.Context) int { prio.Add(1); return 0 }}))
	cl := newClient(grpcguard.ClientConfig{Pipeline: p})
	_ = cl.UnaryInterceptor(t.Context(), unaryMethod, nil, nil, nil,
		func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
	if n := p.Stats().Calls; n != 1 || prio.Load() != 1 {
		t.Fatalf("the shed-only pipeline saw %d unary calls (ShedPriority asked %d times), want 1", n, prio.Load())
	}
	streamer := func(sctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		return &fakeCS{ctx: sctx, err: io.EOF}, nil
	}
	before := s.Stats()
	cs, err := cl.StreamInterceptor(t.Context(), &grpc.StreamDesc{ServerStreams: true}, nil, outMethod, streamer)
	if err != nil {
		t.Fatal(err)
	}
	if prio.Load() != 2 {
		t.Fatalf("ShedPriority asked %d times, want 2 (the stream's admission)", prio.Load())
	}
	if got := s.Stats(); got.Admitted != before.Admitted+1 || got.InFlight != 1 {
		t.Fatalf("the shedder admitted %d streams (%d in flight), want 1 held", got.Admitted-before.Admitted, got.InFlight)
	}
	if err := cs.RecvMsg(new(struct{})); err != io.EOF {
		t.Fatal(err)
	}
	if got := s.Stats(); got.InFlight != 0 {
		t.Fatalf("the ended stream holds %d of the shedder's permits", got.InFlight)
	}
}

// Past the cache's bound on method names, a method not cached reuses the
// routes of its pipeline: its calls build nothing and allocate nothing.
func TestClientPastTheMethodBoundReusesThePipelinesRoute(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	c := newClient(grpcguard.ClientConfig{PipelineFor: func(string) *pipeline.Pipeline { return p }})
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for i := range 5000 {
		_ = c.UnaryInterceptor(t.Context(), "/junk.S/M"+strconv.Itoa(i), nil, nil, nil, invoker)
	}
	if raceEnabled {
		return // allocation counts differ under -race
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { _ = c.UnaryInterceptor(ctx, unaryMethod, nil, nil, nil, invoker) }); n != 0 {
		t.Fatalf("a method past the bound: %.0f allocations per call, want 0", n)
	}
}
