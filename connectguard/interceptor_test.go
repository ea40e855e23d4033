package connectguard_test

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/connectguard"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

func newGuard(cfg connectguard.Config) *connectguard.Interceptor { return must(connectguard.New(cfg)) }

func guardOf(pc pipeline.Config) *connectguard.Interceptor {
	return newGuard(connectguard.Config{Pipeline: must(pipeline.New(pc))})
}

// fastRetry retries at once (1 µs backoff): the tests count attempts.
func fastRetry(c retry.Config) *retry.Policy {
	c.BaseDelay, c.MaxDelay = time.Microsecond, time.Second
	return must(retry.New(c))
}

func pushbackOf(t *testing.T, err error) string {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		t.Fatalf("err = %v, want a *connect.Error", err)
	}
	return ce.Meta().Get(connectguard.PushbackKey)
}

func wantRejection(t *testing.T, err error, code connect.Code, pushbackMs int64) {
	t.Helper()
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	if got := pushbackOf(t, err); got != strconv.FormatInt(pushbackMs, 10) {
		t.Fatalf("pushback %q, want %d", got, pushbackMs)
	}
}

func req() *connect.Request[msg] { return connect.NewRequest(wrapperspb.String("hi")) }

func TestHandlerRejectionCodesAndPushback(t *testing.T) {
	eachProtocol(t, func(t *testing.T, copts []connect.ClientOption) {
		t.Run("ratelimit", func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			rl := must(ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk}))
			say, _, _ := serve(t, handlers{}, guardOf(pipeline.Config{RateLimit: rl}), nil, copts...)
			if _, err := say.CallUnary(t.Context(), req()); err != nil {
				t.Fatal(err)
			}
			_, err := say.CallUnary(t.Context(), req())
			wantRejection(t, err, connect.CodeResourceExhausted, 1000)
		})
		t.Run("breaker", func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			cb := must(circuitbreaker.New(circuitbreaker.Config{Ticker: tk, OpenDuration: 30 * time.Second}))
			cb.TransitionTo(circuitbreaker.Open)
			say, _, _ := serve(t, handlers{}, guardOf(pipeline.Config{Breaker: cb}), nil, copts...)
			_, err := say.CallUnary(t.Context(), req())
			wantRejection(t, err, connect.CodeUnavailable, 30000)
		})
		t.Run("bulkhead", func(t *testing.T) {
			bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
			entered, unblock := make(chan struct{}), make(chan struct{})
			h := handlers{say: func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
				close(entered)
				<-unblock
				return connect.NewResponse(wrapperspb.String("slow")), nil
			}}
			g := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh})), DefaultPushback: 250 * time.Millisecond})
			say, _, _ := serve(t, h, g, nil, copts...)
			first := make(chan error, 1)
			go func() { _, err := say.CallUnary(t.Context(), req()); first <- err }()
			<-entered
			_, err := say.CallUnary(t.Context(), req())
			wantRejection(t, err, connect.CodeUnavailable, 250)
			close(unblock)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		})
		t.Run("timeout", func(t *testing.T) {
			wd := timeout.NewWatchdog(time.Millisecond, rampart.DefaultTicker())
			t.Cleanup(func() { _ = wd.Close() })
			to := must(timeout.New(timeout.Config{Duration: time.Millisecond, Watchdog: wd}))
			h := handlers{say: func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}}
			say, _, _ := serve(t, h, guardOf(pipeline.Config{Timeout: to}), nil, copts...)
			_, err := say.CallUnary(t.Context(), req())
			wantRejection(t, err, connect.CodeDeadlineExceeded, 1000)
		})
	})
}

func TestHandlerUserErrorsPassThroughUnchanged(t *testing.T) {
	cb := must(circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1}))
	h := handlers{say: func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
		e := connect.NewError(connect.CodeNotFound, errors.New("no such user"))
		e.Meta().Set("X-Reason", "user")
		return nil, e
	}}
	say, _, _ := serve(t, h, guardOf(pipeline.Config{Breaker: cb}), nil)
	for range 3 {
		_, err := say.CallUnary(t.Context(), req())
		ce, ok := errors.AsType[*connect.Error](err)
		if !ok || ce.Code() != connect.CodeNotFound || ce.Message() != "no such user" || ce.Meta().Get("X-Reason") != "user" {
			t.Fatalf("err = %v, want the handler's NOT_FOUND as it was", err)
		}
	}
	if s := cb.State(); s != circuitbreaker.Closed {
		t.Fatalf("breaker %v after NOT_FOUND answers, want closed", s)
	}
}

func TestHandlerStreamHoldsItsPermitUntilItReturns(t *testing.T) {
	bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
	cb := must(circuitbreaker.New(circuitbreaker.Config{Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 5}))
	finish, entered := make(chan struct{}), make(chan struct{}, 1)
	returned := make(chan struct{}, 1)
	h := handlers{outer: afterGuard{returned}, count: func(ctx context.Context, r *connect.Request[msg], s *connect.ServerStream[msg]) error {
		entered <- struct{}{}
		// The first message sends the response's headers, which the
		// client's CallServerStream waits for over HTTP/1.1.
		if err := s.Send(wrapperspb.String("first")); err != nil {
			return err
		}
		switch r.Msg.GetValue() {
		case "panic":
			panic("handler")
		case "cancel":
			<-ctx.Done()
			return ctx.Err()
		}
		<-finish
		return nil
	}}
	g := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{Bulkhead: bh, Breaker: cb}))})
	_, count, _ := serve(t, h, g, nil)

	s := must(count.CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("count"))))
	<-entered
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	if n := bh.Stats().InFlight; n != 1 {
		t.Fatalf("in flight %d during the stream, want 1", n)
	}
	s2, err := count.CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("count")))
	if err != nil {
		t.Fatal(err)
	}
	if s2.Receive() || connect.CodeOf(s2.Err()) != connect.CodeUnavailable {
		t.Fatalf("second stream: %v, want UNAVAILABLE", s2.Err())
	}
	_ = s2.Close()
	<-returned // the rejected stream's
	finish <- struct{}{}
	if s.Receive() || s.Err() != nil {
		t.Fatalf("end: %v", s.Err())
	}
	_ = s.Close()
	<-returned

	// A client that cancels, and a handler that panics, release it too.
	ctx, cancel := context.WithCancel(t.Context())
	s3 := must(count.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("cancel"))))
	<-entered
	cancel()
	_ = s3.Close() // closes the connection under the cancelled stream: the handler's context ends
	<-returned
	s4 := must(count.CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("panic"))))
	<-entered
	<-returned
	for s4.Receive() { // the first message, then the panic's end
	}
	_ = s4.Close()
	// returned comes from outside the guard, once it has released: the
	// next stream is admitted.
	s5 := must(count.CallServerStream(t.Context(), connect.NewRequest(wrapperspb.String("count"))))
	<-entered
	if !s5.Receive() {
		t.Fatalf("after cancel and panic: %v (the permit was not released)", s5.Err())
	}
	finish <- struct{}{}
	for s5.Receive() {
	}
	_ = s5.Close()
	<-returned
}

// failing counts a Say handler's calls and their previous-attempt headers.
type failing struct {
	mu       sync.Mutex
	calls    int
	previous []string
}

func (f *failing) say(answer func(n int) (*connect.Response[msg], error)) handlers {
	return handlers{say: func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
		f.mu.Lock()
		n := f.calls
		f.calls++
		f.previous = append(f.previous, r.Header().Get(connectguard.PreviousAttemptsKey))
		f.mu.Unlock()
		return answer(n)
	}}
}

func (f *failing) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func unavailable(int) (*connect.Response[msg], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
}

func TestClientRetriesStopAtTheBudget(t *testing.T) {
	bud := must(retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 4, TokenRatio: 0.1}))
	rp := fastRetry(retry.Config{MaxAttempts: 10, Budget: bud})
	var f failing
	say, _, _ := serve(t, f.say(unavailable), nil, guardOf(pipeline.Config{Retry: rp}))
	for _, want := range []int{2, 3} { // as in grpcguard: 4 tokens, retried while above 2
		_, err := say.CallUnary(t.Context(), req())
		if ce, ok := errors.AsType[*connect.Error](err); !ok || ce.Code() != connect.CodeUnavailable || ce.Message() != "down" {
			t.Fatalf("err = %v, want the server's UNAVAILABLE", err)
		}
		if n := f.count(); n != want {
			t.Fatalf("server saw %d attempts, want %d", n, want)
		}
	}
	if r := rp.Stats().BudgetRefused; r != 2 {
		t.Fatalf("budget refused %d, want 2", r)
	}
}

func TestClientHonoursThePushback(t *testing.T) {
	for name, tc := range map[string]struct {
		pushback string
		attempts int
		delay    time.Duration
	}{"wait": {"3", 2, 3 * time.Millisecond}, "negative": {"-1", 1, 0}, "unparsable": {"soon", 1, 0}} {
		eachProtocol(t, func(t *testing.T, copts []connect.ClientOption) {
			t.Run(name, func(t *testing.T) {
				var delays []time.Duration
				rp := fastRetry(retry.Config{MaxAttempts: 3, OnRetry: func(_ int, d time.Duration, _ error) { delays = append(delays, d) }})
				var f failing
				h := f.say(func(n int) (*connect.Response[msg], error) {
					if n == 0 {
						e := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
						e.Meta().Set(connectguard.PushbackKey, tc.pushback)
						return nil, e
					}
					return connect.NewResponse(wrapperspb.String("ok")), nil
				})
				say, _, _ := serve(t, h, nil, guardOf(pipeline.Config{Retry: rp}), copts...)
				_, err := say.CallUnary(t.Context(), req())
				if n := f.count(); n != tc.attempts {
					t.Fatalf("%d attempts, want %d (err %v)", n, tc.attempts, err)
				}
				if tc.attempts == 1 {
					if connect.CodeOf(err) != connect.CodeUnavailable {
						t.Fatalf("err = %v, want UNAVAILABLE", err)
					}
					return
				}
				if err != nil || len(delays) != 1 || delays[0] != tc.delay {
					t.Fatalf("err %v, delays %v, want nil and [%v]", err, delays, tc.delay)
				}
			})
		})
	}
}

func TestClientRetriesOnlyTheRetryableCodes(t *testing.T) {
	internal := func(int) (*connect.Response[msg], error) {
		return nil, connect.NewError(connect.CodeInternal, errors.New("bug"))
	}
	for name, tc := range map[string]struct {
		codes    []connect.Code
		attempts int
	}{"default": {nil, 1}, "internal marked": {[]connect.Code{connect.CodeInternal}, 3}} {
		t.Run(name, func(t *testing.T) {
			g := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})})), RetryCodes: tc.codes})
			var f failing
			say, _, _ := serve(t, f.say(internal), nil, g)
			_, err := say.CallUnary(t.Context(), req())
			if connect.CodeOf(err) != connect.CodeInternal || f.count() != tc.attempts {
				t.Fatalf("err %v after %d attempts, want INTERNAL after %d", err, f.count(), tc.attempts)
			}
		})
	}
}

func TestClientSetsPreviousAttemptsOnEachRetry(t *testing.T) {
	var f failing
	say, _, _ := serve(t, f.say(func(n int) (*connect.Response[msg], error) {
		if n < 2 {
			return unavailable(n)
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}), nil, guardOf(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})}))
	if _, err := say.CallUnary(t.Context(), req()); err != nil {
		t.Fatal(err)
	}
	if got := f.previous; len(got) != 3 || got[0] != "" || got[1] != "1" || got[2] != "2" {
		t.Fatalf("grpc-previous-rpc-attempts %q, want [\"\" 1 2]", got)
	}
}

func TestClientAttemptDeadlineNeverOutlivesTheCall(t *testing.T) {
	deadlines := make(chan time.Time, 4)
	var slowDone atomic.Bool
	h := handlers{say: func(ctx context.Context, r *connect.Request[msg]) (*connect.Response[msg], error) {
		d, _ := ctx.Deadline()
		deadlines <- d
		if r.Msg.GetValue() == "slow" && slowDone.CompareAndSwap(false, true) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}}
	g := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 2})})),
		AttemptTimeout: 10 * time.Second})
	say, _, _ := serve(t, h, nil, g)
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	before := time.Now()
	if _, err := say.CallUnary(ctx, req()); err != nil {
		t.Fatal(err)
	}
	if d := <-deadlines; d.Before(before) || d.After(before.Add(11*time.Second)) {
		t.Fatalf("handler deadline %v from now, want the attempt's, about 10s", d.Sub(before))
	}
	short, cancel2 := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel2()
	want, _ := short.Deadline()
	if _, err := say.CallUnary(short, req()); err != nil {
		t.Fatal(err)
	}
	// The deadline travels as the time left: the handler's is the call's
	// plus the transit, far below the 10 s attempt timeout.
	if d := <-deadlines; d.After(want.Add(time.Second)) {
		t.Fatalf("handler deadline %v past the call's: the attempt outlived the call", d.Sub(want))
	}
	g2 := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 2})})),
		AttemptTimeout: 300 * time.Millisecond})
	say2, _, _ := serve(t, h, nil, g2)
	if _, err := say2.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("slow"))); err != nil {
		t.Fatalf("the retry after an attempt timeout: %v", err)
	}
	<-deadlines
	<-deadlines
}

func TestClientBreakerPerHostAndPerProcedure(t *testing.T) {
	for _, scope := range []connectguard.BreakerScope{connectguard.PerHost, connectguard.PerProcedure} {
		var mu sync.Mutex
		var keys []string
		breakers := map[string]*circuitbreaker.Breaker{}
		g := newGuard(connectguard.Config{Pipeline: must(pipeline.New(pipeline.Config{})), BreakerScope: scope,
			NewBreaker: func(key string) (*circuitbreaker.Breaker, error) {
				mu.Lock()
				defer mu.Unlock()
				keys = append(keys, key)
				cb, err := circuitbreaker.New(circuitbreaker.Config{Name: key})
				breakers[key] = cb
				return cb, err
			}})
		var f1, f2 failing
		ok := func(int) (*connect.Response[msg], error) { return connect.NewResponse(wrapperspb.String("ok")), nil }
		c1, _, s1 := serve(t, f1.say(ok), nil, g)
		c2, _, s2 := serve(t, f2.say(ok), nil, g)
		for range 3 {
			for _, c := range []*connect.Client[msg, msg]{c1, c2} {
				if _, err := c.CallUnary(t.Context(), req()); err != nil {
					t.Fatal(err)
				}
			}
		}
		h1, h2 := s1.Listener.Addr().String(), s2.Listener.Addr().String()
		switch scope {
		case connectguard.PerHost:
			if len(keys) != 2 || keys[0] != h1 || keys[1] != h2 {
				t.Fatalf("per host: breakers %q, want [%s %s]", keys, h1, h2)
			}
			breakers[h1].TransitionTo(circuitbreaker.Open)
			_, err := c1.CallUnary(t.Context(), req())
			if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, circuitbreaker.ErrOpen) || !errors.Is(err, rampart.ErrRejected) {
				t.Fatalf("err = %v, want a local UNAVAILABLE matching circuitbreaker.ErrOpen", err)
			}
			if f1.count() != 3 {
				t.Fatalf("server 1 saw %d calls, want 3", f1.count())
			}
			if _, err := c2.CallUnary(t.Context(), req()); err != nil {
				t.Fatalf("other host: %v", err)
			}
		case connectguard.PerProcedure:
			if len(keys) != 1 || keys[0] != sayProc {
				t.Fatalf("per procedure: breakers %q, want [%s]", keys, sayProc)
			}
		}
	}
}

func TestClientLocalRateLimitIsResourceExhausted(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk}))
	say, _, _ := serve(t, handlers{}, nil, guardOf(pipeline.Config{RateLimit: rl}))
	if _, err := say.CallUnary(t.Context(), req()); err != nil {
		t.Fatal(err)
	}
	_, err := say.CallUnary(t.Context(), req())
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !errors.Is(err, ratelimit.ErrLimited) {
		t.Fatalf("err = %v, want a local RESOURCE_EXHAUSTED matching ratelimit.ErrLimited", err)
	}
}

func TestClientStreamHoldsItsPermitUntilItEnds(t *testing.T) {
	bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
	h := handlers{count: func(ctx context.Context, r *connect.Request[msg], s *connect.ServerStream[msg]) error {
		for range 3 {
			if err := s.Send(wrapperspb.String("n")); err != nil {
				return err
			}
		}
		return nil
	}}
	_, count, _ := serve(t, h, nil, guardOf(pipeline.Config{Bulkhead: bh}))
	s := must(count.CallServerStream(t.Context(), req()))
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	if n := bh.Stats().InFlight; n != 1 {
		t.Fatalf("in flight %d during the stream, want 1", n)
	}
	_, err := count.CallServerStream(t.Context(), req())
	if err == nil {
		t.Fatal("a second stream while the first holds the permit")
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("second stream: %v, want a local UNAVAILABLE (bulkhead full)", err)
	}
	for s.Receive() {
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if n := bh.Stats().InFlight; n != 0 {
		t.Fatalf("in flight %d after the stream ended, want 0", n)
	}
	_ = s.Close()
}

func TestConfigErrors(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{}))
	hp := must(pipeline.New(pipeline.Config{Hedge: must(hedge.New(hedge.Config{Delay: time.Millisecond})), Idempotent: true}))
	for name, cfg := range map[string]connectguard.Config{
		"nil pipeline":         {},
		"empty procedures":     {Procedures: map[string]*pipeline.Pipeline{}},
		"empty procedure name": {Procedures: map[string]*pipeline.Pipeline{"": p}},
		"not a full name":      {Procedures: map[string]*pipeline.Pipeline{"Say": p}},
		"nil procedure pipe":   {Procedures: map[string]*pipeline.Pipeline{sayProc: nil}},
		"hedge":                {Pipeline: hp},
		"hedge on a procedure": {Procedures: map[string]*pipeline.Pipeline{sayProc: hp}},
		"negative pushback":    {Pipeline: p, DefaultPushback: -1},
		"negative attempt":     {Pipeline: p, AttemptTimeout: -1},
		"bad scope":            {Pipeline: p, BreakerScope: 9},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := connectguard.New(cfg)
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("err = %v, want a *rampart.ConfigError", err)
			}
		})
	}
}

// shortCircuit answers every unary call with a prebuilt response, without
// calling the network: placed inside the guard, it leaves the guard's own
// cost to measure.
type shortCircuit struct{ resp connect.AnyResponse }

func (s shortCircuit) WrapUnary(connect.UnaryFunc) connect.UnaryFunc {
	return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return s.resp, nil }
}
func (s shortCircuit) WrapStreamingClient(n connect.StreamingClientFunc) connect.StreamingClientFunc {
	return n
}
func (s shortCircuit) WrapStreamingHandler(n connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return n
}

func TestClientAdmitPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cb := must(circuitbreaker.New(circuitbreaker.Config{}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1e9, Burst: 1 << 20}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))
	g := guardOf(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh, Retry: must(retry.New(retry.Config{}))})
	sc := shortCircuit{connect.NewResponse(wrapperspb.String("ok"))}
	bare := connect.NewClient[msg, msg](nil, "http://127.0.0.1:1"+sayProc, connect.WithInterceptors(sc))
	guarded := connect.NewClient[msg, msg](nil, "http://127.0.0.1:1"+sayProc, connect.WithInterceptors(g, sc))
	r := req()
	ctx := context.Background()
	allocs := func(c *connect.Client[msg, msg]) float64 {
		return testing.AllocsPerRun(1000, func() {
			if _, err := c.CallUnary(ctx, r); err != nil {
				t.Fatal(err)
			}
		})
	}
	if b, gd := allocs(bare), allocs(guarded); gd != b {
		t.Fatalf("the guard adds %v allocations to a client call (%v with it, %v without), want 0", gd-b, gd, b)
	}
}

func TestServerAdmitPathAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	cb := must(circuitbreaker.New(circuitbreaker.Config{}))
	rl := must(ratelimit.New(ratelimit.Config{Rate: 1e9, Burst: 1 << 20}))
	bh := must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))
	g := guardOf(pipeline.Config{Breaker: cb, RateLimit: rl, Bulkhead: bh})
	resp := connect.NewResponse(wrapperspb.String("ok"))
	h := g.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return resp, nil })
	r := req() // a request built here has a zero Spec: IsClient is false, the handler's path
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := h(ctx, r); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("handler admit path: %v allocations, want 0", n)
	}
}

// A retry's grpc-previous-rpc-attempts is not left on the caller's
// request: the caller's header comes back as it was (absent here), and the
// same request sent again is a first attempt.
func TestClientRestoresTheCallersHeaderAfterRetries(t *testing.T) {
	var f failing
	say, _, _ := serve(t, f.say(func(n int) (*connect.Response[msg], error) {
		if n < 2 {
			return unavailable(n)
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}), nil, guardOf(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})}))
	r := req()
	if _, err := say.CallUnary(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if v, ok := r.Header()[http.CanonicalHeaderKey(connectguard.PreviousAttemptsKey)]; ok {
		t.Errorf("the caller's request now carries %s: %q", connectguard.PreviousAttemptsKey, v)
	}
	if _, err := say.CallUnary(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if got := f.previous; len(got) != 4 || got[3] != "" {
		t.Fatalf("grpc-previous-rpc-attempts %q, want the 4th (a new call's first attempt) empty", got)
	}
	r.Header().Set(connectguard.PreviousAttemptsKey, "7") // the caller's own value
	f.mu.Lock()
	f.calls = 0 // two failures again: retries set the header
	f.mu.Unlock()
	if _, err := say.CallUnary(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if v := r.Header().Values(connectguard.PreviousAttemptsKey); len(v) != 1 || v[0] != "7" {
		t.Fatalf("the caller's own %s came back as %q, want [7]", connectguard.PreviousAttemptsKey, v)
	}
}

// A server's error with more than one pushback value is not retried (as
// grpc-go's own retry).
func TestClientDoesNotRetryOnSeveralPushbackValues(t *testing.T) {
	eachProtocol(t, func(t *testing.T, copts []connect.ClientOption) {
		var f failing
		h := f.say(func(n int) (*connect.Response[msg], error) {
			if n == 0 {
				e := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
				e.Meta().Add(connectguard.PushbackKey, "1")
				e.Meta().Add(connectguard.PushbackKey, "-1")
				return nil, e
			}
			return connect.NewResponse(wrapperspb.String("ok")), nil
		})
		say, _, _ := serve(t, h, nil, guardOf(pipeline.Config{Retry: fastRetry(retry.Config{MaxAttempts: 3})}), copts...)
		_, err := say.CallUnary(t.Context(), req())
		if n := f.count(); n != 1 || connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("%d attempts (err %v) on two pushback values, want 1 (UNAVAILABLE)", n, err)
		}
	})
}

// countingTransport counts the HTTP requests a client sends.
type countingTransport struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// A stream the client guard refused never reaches the server: connect's
// CallServerStream answers the refused Send with CloseRequest and
// CloseResponse, which must not make the HTTP request (connect makes it
// on CloseRequest even when nothing was sent, and CloseResponse waits for
// its response, so that a request made is counted before the call
// returns).
func TestClientRefusedStreamSendsNoRequest(t *testing.T) {
	bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
	release := make(chan struct{})
	h := handlers{count: func(ctx context.Context, r *connect.Request[msg], s *connect.ServerStream[msg]) error {
		if err := s.Send(wrapperspb.String("n")); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	_, _, srv := serve(t, h, nil, nil)
	hc := srv.Client()
	tr := &countingTransport{next: hc.Transport}
	hc.Transport = tr
	count := connect.NewClient[msg, msg](hc, srv.URL+countProc, connect.WithInterceptors(guardOf(pipeline.Config{Bulkhead: bh})))
	s := must(count.CallServerStream(t.Context(), req()))
	if !s.Receive() {
		t.Fatal(s.Err())
	}
	_, err := count.CallServerStream(t.Context(), req())
	if !errors.Is(err, bulkhead.ErrFull) {
		t.Fatalf("a second stream while the first holds the permit: %v, want the bulkhead's rejection", err)
	}
	if n := tr.n.Load(); n != 1 {
		t.Fatalf("%d HTTP requests, want 1 (the refused stream went out)", n)
	}
	close(release)
	for s.Receive() {
	}
	_ = s.Close()
}

// A pipeline whose only policy is a shedder is applied, on the handler
// and on the client, unary calls and streams alike, at the pipeline's
// ShedPriority.
func TestAShedOnlyPipelineIsApplied(t *testing.T) {
	s := must(shed.New(shed.Config{}))
	var prio atomic.Int32
	p := must(pipeline.New(pipeline.Config{Shed: s, CountStats: true, ShedPriority: func(context.Context) int { prio.Add(1); return 0 }}))
	g := newGuard(connectguard.Config{Pipeline: p})
	held := make(chan int, 1)
	h := handlers{count: func(ctx context.Context, r *connect.Request[msg], st *connect.ServerStream[msg]) error {
		held <- s.InFlight()
		return st.Send(wrapperspb.String("n"))
	}}
	say, count, _ := serve(t, h, g, g)
	if _, err := say.CallUnary(t.Context(), req()); err != nil {
		t.Fatal(err)
	}
	if n := p.Stats().Calls; n != 2 || prio.Load() != 2 {
		t.Fatalf("the shed-only pipeline saw %d calls (ShedPriority asked %d times), want 2 (the client's and the handler's)", n, prio.Load())
	}
	st := must(count.CallServerStream(t.Context(), req()))
	for st.Receive() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if n := <-held; n != 2 || prio.Load() != 4 {
		t.Fatalf("the stream held %d of the shedder's permits in its handler (ShedPriority asked %d times), want 2 (4)", n, prio.Load())
	}
	if n := s.InFlight(); n != 0 {
		t.Fatalf("%d of the shedder's permits held after the stream, want 0", n)
	}
}

// fakeConn is a client stream connection whose Receive fails.
type fakeConn struct {
	connect.StreamingClientConn
	spec connect.Spec
}

func (f *fakeConn) Peer() connect.Peer { return connect.Peer{Addr: "x"} }
func (f *fakeConn) Spec() connect.Spec { return f.spec }
func (f *fakeConn) Receive(any) error {
	return connect.NewError(connect.CodeCanceled, context.Canceled)
}

// A stream whose context is done when it is admitted: the context's
// AfterFunc ends it at once on its own goroutine, while the interceptor is
// still setting it up (the race detector checks that it touches nothing
// the interceptor writes), and the permit comes back.
func TestClientStreamEndedAsItOpensReleasesItsPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := must(bulkhead.New(bulkhead.Config{Max: 1}))
		g := guardOf(pipeline.Config{Bulkhead: bh})
		spec := connect.Spec{Procedure: countProc, StreamType: connect.StreamTypeServer, IsClient: true}
		for range 50 {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			conn := g.WrapStreamingClient(func(context.Context, connect.Spec) connect.StreamingClientConn { return &fakeConn{spec: spec} })(ctx, spec)
			synctest.Wait() // the AfterFunc has ended the stream
			if err := bh.Acquire(); err != nil {
				t.Fatalf("the ended stream still holds the bulkhead's only slot: %v", err)
			}
			bh.Release()
			_ = conn.Receive(nil)
		}
	})
}

// specReq is a request with the Spec the test gives it.
type specReq struct {
	*connect.Request[msg]
	spec connect.Spec
}

func (r specReq) Spec() connect.Spec { return r.spec }

// Past the cache's bound on procedure names, a procedure not cached reuses
// the routes of its pipeline: its calls, on the handler and on the client,
// build nothing and allocate nothing.
func TestPastTheProcedureBoundReusesThePipelinesRoutes(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	g := newGuard(connectguard.Config{PipelineFor: func(string) *pipeline.Pipeline { return p }})
	resp := connect.NewResponse(wrapperspb.String("ok"))
	h := g.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return resp, nil })
	for _, client := range []bool{false, true} {
		for i := range 5000 {
			_, _ = h(t.Context(), specReq{req(), connect.Spec{Procedure: "/junk.S/M" + strconv.Itoa(i), IsClient: client}})
		}
		if raceEnabled {
			continue // allocation counts differ under -race
		}
		var r connect.AnyRequest = specReq{req(), connect.Spec{Procedure: sayProc, IsClient: client}}
		ctx := context.Background()
		if n := testing.AllocsPerRun(100, func() { _, _ = h(ctx, r) }); n != 0 {
			t.Fatalf("a procedure past the bound (client %v): %.0f allocations per call, want 0", client, n)
		}
	}
}

// Filling the procedure cache copies O(n) routes in all, not one copy of
// the whole map per new procedure (O(n²): some 300 MiB for 4096).
func TestFillingTheProcedureCacheTakesLinearSpace(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	g := newGuard(connectguard.Config{PipelineFor: func(string) *pipeline.Pipeline { return p }})
	resp := connect.NewResponse(wrapperspb.String("ok"))
	h := g.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return resp, nil })
	reqs := make([]connect.AnyRequest, 4096)
	for i := range reqs {
		reqs[i] = specReq{req(), connect.Spec{Procedure: "/junk.S/M" + strconv.Itoa(i)}}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, r := range reqs {
		_, _ = h(t.Context(), r)
	}
	runtime.ReadMemStats(&after)
	if b := after.TotalAlloc - before.TotalAlloc; b > 8<<20 {
		t.Fatalf("filling the cache with %d procedures allocated %d KiB, want at most 8 MiB", len(reqs), b>>10)
	}
}

// A caller that leaves while its call overruns a timeout gets the
// handler's own result (the pipeline's ending is Canceled, not TimedOut):
// no CodeDeadlineExceeded and no pushback in its place.
func TestHandlerCallerGoneDuringAnOverrunGetsTheHandlersResult(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to := must(timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick}))
	g := guardOf(pipeline.Config{Timeout: to})
	late := connect.NewResponse(wrapperspb.String("late"))
	for _, want := range []error{nil, connect.NewError(connect.CodeCanceled, errors.New("gone"))} {
		ctx, cancel := context.WithCancel(t.Context())
		h := g.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			cancel()                      // the caller leaves
			tick.Advance(2 * time.Second) // the call overruns
			return late, want
		})
		resp, err := h(ctx, req())
		if err != want || resp != late {
			t.Fatalf("%v, %v; want the handler's late answer, %v", resp, err, want)
		}
	}
}

// Goroutines calling the same new procedures at once resolve each one
// once: a route built into the cache's young map is found there until it
// is published.
func TestResolvesEachProcedureOnceUnderConcurrentCalls(t *testing.T) {
	p := must(pipeline.New(pipeline.Config{Bulkhead: must(bulkhead.New(bulkhead.Config{Max: 1 << 20}))}))
	var mu sync.Mutex
	asked := map[string]int{}
	g := newGuard(connectguard.Config{PipelineFor: func(proc string) *pipeline.Pipeline {
		mu.Lock()
		asked[proc]++
		mu.Unlock()
		return p
	}})
	resp := connect.NewResponse(wrapperspb.String("ok"))
	h := g.WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) { return resp, nil })
	const procs = 300
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 3 * procs {
				r := specReq{req(), connect.Spec{Procedure: "/s.S/M" + strconv.Itoa((i*(w+1))%procs)}}
				if _, err := h(t.Context(), r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for proc, n := range asked {
		if n != 1 {
			t.Fatalf("PipelineFor asked %d times for %s, want 1", n, proc)
		}
	}
	if len(asked) != procs {
		t.Fatalf("%d procedures resolved, want %d", len(asked), procs)
	}
}
