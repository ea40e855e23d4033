package redislimit

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/ratelimit"
)

// TestRedisStoppedMidRun runs each failure mode against a Redis server of its
// own, stops the server mid-run, and checks that decisions follow the mode,
// that none blocks longer than the timeout, and that once the breaker is
// open no call reaches the network.
func TestRedisStoppedMidRun(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailLocal} {
		t.Run([]string{"FailOpen", "FailClosed", "FailLocal"}[mode], func(t *testing.T) {
			addr, stop, err := startRedis()
			require.NoError(t, err)
			defer stop()
			c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{addr}, MaxRetries: -1})
			defer c.Close()
			clock := rampart.NewManualTicker(1)
			var listened int
			l, err := New(Config{
				Client: c, Limit: Limit{Rate: 100, Burst: 10}, Failure: mode, Replicas: 2,
				Timeout: 200 * time.Millisecond, BreakerFailures: 3, BreakerOpen: time.Second,
				Ticker: clock, OnRedisError: func(error) { listened++; panic("listener panics are contained") },
			})
			require.NoError(t, err)
			ctx := context.Background()
			r, err := l.Allow(ctx, "k")
			require.NoError(t, err)
			require.True(t, r.Allowed)
			require.Equal(t, SourceRedis, r.Source)

			stop() // Redis goes away mid-run

			var allowed int
			for i := range 10 {
				start := time.Now()
				r, err := l.Allow(ctx, "k")
				require.Less(t, time.Since(start), 200*time.Millisecond+150*time.Millisecond, "call %d blocked past the timeout", i)
				require.Equal(t, SourceFallback, r.Source)
				switch mode {
				case FailOpen:
					require.NoError(t, err)
					require.True(t, r.Allowed)
				case FailClosed:
					require.ErrorIs(t, err, ErrUnavailable)
					require.False(t, r.Allowed)
				case FailLocal:
					require.NoError(t, err)
				}
				if r.Allowed {
					allowed++
				}
			}
			if mode == FailLocal {
				// This replica's share: burst 10/2 = 5 at once, and no time passed.
				require.Equal(t, 5, allowed)
			}
			st := l.Stats()
			// Three failures opened the breaker; the other seven never touched the network.
			require.Equal(t, uint64(3), st.RedisErrors)
			require.Equal(t, 3, listened)
			require.Equal(t, uint64(3), st.ListenerPanics)
			require.True(t, st.BreakerOpen)
			require.Equal(t, uint64(10), st.Fallbacks)
			if mode == FailClosed {
				_, err := l.Allow(ctx, "k")
				require.ErrorIs(t, err, ErrUnavailable)
			}
			// After the open period, one probe reaches for Redis again (and fails).
			clock.Advance(time.Second)
			_, _ = l.Allow(ctx, "k")
			require.Equal(t, uint64(4), l.Stats().RedisErrors)
		})
	}
}

// TestCallerCancelDoesNotOpenBreaker: a caller whose context is already
// cancelled or past its deadline says nothing about Redis. Such calls used
// to count as Redis failures, so a handful of impatient callers opened the
// breaker and sent every caller to the Failure mode with Redis healthy.
func TestCallerCancelDoesNotOpenBreaker(t *testing.T) {
	l, err := New(Config{Client: newClient(t), Limit: Limit{Rate: 1000, Burst: 100},
		Failure: FailClosed, BreakerFailures: 2, Ticker: rampart.NewManualTicker(1)})
	require.NoError(t, err)
	key := uniqueKey(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel2()
	for range 3 {
		_, _ = l.Allow(cancelled, key)
		_, _ = l.Allow(expired, key)
	}
	st := l.Stats()
	require.False(t, st.BreakerOpen)
	require.Zero(t, st.RedisErrors)
	r, err := l.Allow(context.Background(), key)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Equal(t, SourceRedis, r.Source)
}

// TestRedisHungReturnsAtTimeout: a Redis server that accepts connections but
// never answers (stopped with SIGSTOP, as a stalled or partitioned server
// behaves) must not hold callers past Config.Timeout, with the client built
// as the README builds it: go-redis' default options ignore context
// deadlines on socket reads (ContextTimeoutEnabled false), so each call used
// to block for the client's ReadTimeout (3 s) or longer, the breaker opened
// only after several such calls, and FailClosed callers hung. Every call must
// come back well within a second here; the bound is generous for a loaded
// machine and still far below the client's own 3 s. Once the server resumes,
// the probe reaches it and decisions are exact again.
func TestRedisHungReturnsAtTimeout(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailLocal} {
		t.Run([]string{"FailOpen", "FailClosed", "FailLocal"}[mode], func(t *testing.T) {
			addr, srv, err := startRedisProcess()
			require.NoError(t, err)
			t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
			c := redis.NewClient(&redis.Options{Addr: addr}) // the README's client: default options
			t.Cleanup(func() { c.Close() })
			clock := rampart.NewManualTicker(1)
			const timeout = 100 * time.Millisecond
			l, err := New(Config{ // one event per minute comes back: the counts below are exact
				Client: c, Limit: Limit{Rate: 1, Period: time.Minute, Burst: 10}, Failure: mode, Replicas: 2,
				Timeout: timeout, BreakerFailures: 3, BreakerOpen: time.Second, Ticker: clock,
			})
			require.NoError(t, err)
			ctx := context.Background()
			r, err := l.Allow(ctx, "k") // dials and loads the script
			require.NoError(t, err)
			require.Equal(t, SourceRedis, r.Source)

			require.NoError(t, srv.Process.Signal(syscall.SIGSTOP))
			t.Cleanup(func() { srv.Process.Signal(syscall.SIGCONT) }) // runs before the kill above
			const slack = 1500 * time.Millisecond                     // the bug blocks >= 3 s
			var allowed int
			for i := range 10 {
				start := time.Now()
				r, err := l.Allow(ctx, "k")
				elapsed := time.Since(start)
				require.Less(t, elapsed, slack, "call %d blocked past the timeout", i)
				if i < 3 {
					t.Logf("call %d against the stopped server returned after %v", i, elapsed)
				}
				require.Equal(t, SourceFallback, r.Source)
				switch mode {
				case FailOpen:
					require.NoError(t, err)
					require.True(t, r.Allowed)
				case FailClosed:
					require.ErrorIs(t, err, ErrUnavailable)
					if i < 3 {
						require.ErrorIs(t, err, context.DeadlineExceeded) // Redis did not answer
					} else {
						require.ErrorIs(t, err, errBreakerOpen) // no call made
						require.Equal(t, time.Second, r.RetryAfter)
					}
					require.False(t, r.Allowed)
					require.Equal(t, -1, r.Remaining)
				case FailLocal:
					require.NoError(t, err)
				}
				if r.Allowed {
					allowed++
				}
			}
			if mode == FailLocal {
				require.Equal(t, 5, allowed) // this replica's share of the burst, 10/2
			}
			st := l.Stats()
			// Three timeouts opened the breaker; the other seven made no call.
			require.Equal(t, uint64(3), st.RedisErrors)
			require.True(t, st.BreakerOpen)
			require.Equal(t, uint64(10), st.Fallbacks)

			// The server resumes: after the open period the probe reaches it,
			// closes the breaker, and a fresh key gets exactly its burst.
			require.NoError(t, srv.Process.Signal(syscall.SIGCONT))
			clock.Advance(time.Second)
			key := uniqueKey(t)
			for i := range 10 {
				r, err := l.Allow(ctx, key)
				require.NoError(t, err)
				require.Equal(t, SourceRedis, r.Source, "call %d", i)
				require.True(t, r.Allowed, "call %d", i)
				require.Equal(t, 9-i, r.Remaining)
			}
			r, err = l.Allow(ctx, key)
			require.NoError(t, err)
			require.Equal(t, SourceRedis, r.Source)
			require.False(t, r.Allowed)
			st = l.Stats()
			require.False(t, st.BreakerOpen)
			require.Equal(t, uint64(3), st.RedisErrors)
		})
	}
}

// cancelOnWrite is a connection that cancels a context once a write has
// reached the socket, when armed: the caller gives up while its command is
// on the wire and the reply is still to come.
type cancelOnWrite struct {
	net.Conn
	armed  *atomic.Bool
	cancel context.CancelFunc
}

func (c cancelOnWrite) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.armed.Load() {
		c.cancel()
	}
	return n, err
}

// TestCallerCancelWhileRedisHung: a caller that gives up while its command
// waits for a hung Redis gets context.Canceled at once (the client's socket
// read ignores the context and would wait out its ReadTimeout), and, being
// the caller's own doing, it neither counts as a Redis failure nor opens the
// breaker.
func TestCallerCancelWhileRedisHung(t *testing.T) {
	addr, srv, err := startRedisProcess()
	require.NoError(t, err)
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Bool
	c := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return cancelOnWrite{conn, &armed, cancel}, nil
	}})
	t.Cleanup(func() { c.Close() })
	l, err := New(Config{Client: c, Limit: Limit{Rate: 100, Burst: 10}, Failure: FailClosed,
		Timeout: time.Minute, BreakerFailures: 1, Ticker: rampart.NewManualTicker(1)})
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k") // dials and loads the script
	require.NoError(t, err)

	require.NoError(t, srv.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGCONT) })
	armed.Store(true)
	start := time.Now()
	_, err = l.Allow(ctx, "k")
	elapsed := time.Since(start)
	t.Logf("cancelled call returned after %v", elapsed)
	require.Less(t, elapsed, 1500*time.Millisecond) // the client's own read waits 5 s
	require.ErrorIs(t, err, context.Canceled)
	st := l.Stats()
	require.Zero(t, st.RedisErrors)
	require.False(t, st.BreakerOpen)
}

// TestLeaseRefillWaitersReturnAtTimeout: in lease mode, callers that find a
// key's lease spent wait for the one refill in flight. When that refill
// fails (Redis hung: no reply within Timeout), they must take the Failure
// mode's decision at once. Each used to make a round trip of its own after
// it, one after another under the refill lock, so the k-th waiter returned
// after k timeouts (30 waiters: 3 s) until the breaker opened.
func TestLeaseRefillWaitersReturnAtTimeout(t *testing.T) {
	addr, srv, err := startRedisProcess()
	require.NoError(t, err)
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	const timeout = 100 * time.Millisecond
	l, err := New(Config{Client: c, Limit: Limit{Rate: 100, Burst: 10}, Lease: 5, LeaseTTL: time.Hour,
		Failure: FailClosed, Timeout: timeout, BreakerFailures: 100, Ticker: rampart.NewManualTicker(1)})
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5 { // one round trip takes a lease of 5; the calls spend it
		r, err := l.Allow(ctx, "k")
		require.NoError(t, err)
		require.True(t, r.Allowed, "call %d", i)
	}
	require.Equal(t, uint64(1), l.Stats().RoundTrips)

	require.NoError(t, srv.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { srv.Process.Signal(syscall.SIGCONT) })
	const callers = 30
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for range callers {
		wg.Go(func() {
			start := time.Now()
			r, err := l.Allow(ctx, "k")
			elapsed := time.Since(start)
			for {
				old := slowest.Load()
				if int64(elapsed) <= old || slowest.CompareAndSwap(old, int64(elapsed)) {
					break
				}
			}
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || r.Allowed || r.Source != SourceFallback {
				t.Errorf("got %+v, %v; want a FailClosed rejection for a timeout", r, err)
			}
		})
	}
	wg.Wait()
	st := l.Stats()
	t.Logf("slowest of %d callers: %v; %d round trips timed out", callers, time.Duration(slowest.Load()), st.RedisErrors)
	require.Less(t, time.Duration(slowest.Load()), 1500*time.Millisecond)
	require.Equal(t, uint64(callers), st.Fallbacks)
	require.Equal(t, uint64(1), st.RoundTrips) // none of the timed-out ones counts as one
}

// failOrPanicHook makes every command fail (mode 1) or panic (mode 2).
type failOrPanicHook struct{ mode *atomic.Int32 }

func (h failOrPanicHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failOrPanicHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch h.mode.Load() {
		case 1:
			cmd.SetErr(errors.New("injected failure"))
			return cmd.Err()
		case 2:
			panic("client hook panics")
		}
		return next(ctx, cmd)
	}
}
func (h failOrPanicHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClientPanicInHalfOpenReleasesProbe: a panic in the client (re-raised
// on the caller's goroutine) while the breaker in front of Redis is
// half-open gives the probe's permit back, so once Redis is healthy the
// breaker closes and decisions come from Redis again.
func TestClientPanicInHalfOpenReleasesProbe(t *testing.T) {
	c := newClient(t)
	var mode atomic.Int32
	c.AddHook(failOrPanicHook{&mode})
	clock := rampart.NewManualTicker(1)
	l, err := New(Config{Client: c, Limit: Limit{Rate: 1000, Burst: 100}, BreakerFailures: 1,
		BreakerOpen: time.Second, Ticker: clock, Timeout: time.Second})
	require.NoError(t, err)
	ctx := context.Background()
	key := uniqueKey(t)

	mode.Store(1)
	r, _ := l.Allow(ctx, key)
	require.Equal(t, SourceFallback, r.Source)
	require.Equal(t, circuitbreaker.Open, l.brk.cb.State())

	clock.Advance(2 * time.Second) // the open period is over: the next call is the probe
	mode.Store(2)
	func() {
		defer func() { require.NotNil(t, recover(), "the client's panic is re-raised") }()
		l.Allow(ctx, key)
	}()

	mode.Store(0) // Redis is healthy again
	for range 3 {
		clock.Advance(2 * time.Second)
		r, err = l.Allow(ctx, key)
		require.NoError(t, err)
	}
	require.Equal(t, SourceRedis, r.Source, "breaker state %v, stats %+v: the panicking probe's permit was not released",
		l.brk.cb.State(), l.brk.cb.Stats())
}

// TestFailLocalRefusesShareOutOfBounds: with FailLocal, a limit within the
// script's bounds whose local share the in-process limiter cannot hold is
// refused by AllowLimitN (and by New) with a *rampart.ConfigError. 1 per
// 3e18 ns passes the script's 2^52 µs tolerance but its share has an
// interval above ratelimit's 2^61 ns: AllowLimitN accepted it, and while
// Redis was down every decision under it, even a never-used key's first
// event, was a rejection with RetryAfter 0 and a nil error (the fallback
// dropped the share's ConfigError). The same limit is accepted without
// FailLocal, which builds no share.
func TestFailLocalRefusesShareOutOfBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: every round trip fails at once
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	cfg := Config{Client: c, Limit: Limit{Rate: 10, Burst: 10}, Failure: FailLocal,
		Ticker: rampart.NewManualTicker(1), BreakerFailures: 1000}
	l, err := New(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.AllowLimitN(ctx, "ok", Limit{Rate: 1, Period: time.Hour}, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed, "a fresh key under 1/h decided locally: %+v", d)
	require.Equal(t, SourceFallback, d.Source)

	big := Limit{Rate: 1, Period: 3e18}
	before := l.Stats()
	d, err = l.AllowLimitN(ctx, "big", big, 1)
	var ce *rampart.ConfigError
	require.ErrorAs(t, err, &ce, "AllowLimitN(%+v) in FailLocal = %+v", big, d)
	require.Equal(t, "Limit", ce.Field)
	require.False(t, d.Allowed)
	st := l.Stats()
	require.Equal(t, before.Fallbacks, st.Fallbacks, "refused before any round trip or fallback")
	require.Equal(t, before.Rejected, st.Rejected)
	t.Log(err)

	cfg.Limit = big
	_, err = New(cfg)
	require.ErrorAs(t, err, &ce, "New with the default limit %+v in FailLocal", big)

	for _, mode := range []FailureMode{FailOpen, FailClosed} {
		cfg.Failure = mode
		_, err = New(cfg)
		require.NoError(t, err, "mode %d builds no share", mode)
	}
}

// TestFailLocalShareBounds: normalize's check of FailLocal's share refuses
// exactly the shares ratelimit.New refuses, at the edges of its interval
// (2^61 ns, on the fraction in lowest terms) and burst (2^60 ns) bounds and
// of Period·Replicas overflowing, so that the fallback never meets a share
// it cannot build.
func TestFailLocalShareBounds(t *testing.T) {
	const maxNum = 1 << 61
	type tc struct {
		lim      Limit
		replicas int
	}
	cases := []tc{
		{Limit{Rate: 1, Period: maxNum}, 1},
		{Limit{Rate: 1, Period: maxNum + 1}, 1},
		{Limit{Rate: 1, Period: maxNum / 4}, 4},
		{Limit{Rate: 1, Period: maxNum/4 + 1}, 4},
		{Limit{Rate: 2, Period: 2*maxNum + 2}, 1}, // reduces to maxNum+1
		{Limit{Rate: 2, Period: 2 * maxNum}, 1},   // reduces to maxNum
		{Limit{Rate: 7, Period: 3e18}, 1},         // an interval of 4.3e17 ns, but 3e18/7 in lowest terms
		{Limit{Rate: 3, Period: 3e18}, 1},         // 1e18/1
		{Limit{Rate: 1, Period: 3e18}, 1},
		// burst·ceil(interval) against maxTau = 2^32·2^28 ns
		{Limit{Rate: 1, Period: 1 << 28, Burst: 1 << 32}, 1},
		{Limit{Rate: 1, Period: 1<<28 + 1, Burst: 1 << 32}, 1},
		{Limit{Rate: 3, Period: 3 << 28, Burst: 1 << 32}, 1},
		{Limit{Rate: 3, Period: 3<<28 + 1, Burst: 1 << 32}, 1}, // ceil: 2^28+1 ns
		{Limit{Rate: 1, Period: 1 << 28, Burst: 1 << 32}, 2},   // 2^31 at 2^29 ns
		{Limit{Rate: 1, Period: 1<<28 + 1, Burst: 1<<32 - 1}, 2},
		{Limit{Rate: 1, Period: 1<<28 + 1, Burst: 1 << 32}, 3}, // share burst (2^32)/3
		{Limit{Rate: 3, Period: time.Second, Burst: 1 << 32}, 3},
		{Limit{Rate: 1 << 20, Period: 1 << 62}, 5}, // Period·Replicas overflows int64
		{Limit{Rate: 1 << 20, Period: 1 << 60}, 5},
		{Limit{Rate: 1000, Period: time.Second, Burst: 5}, 8}, // share burst max(1, 5/8)
	}
	for _, c := range cases {
		lim, err := c.lim.normalize(0)
		if err != nil {
			t.Logf("%+v: outside the script's own bounds, skipped: %v", c.lim, err)
			continue
		}
		_, got := lim.normalize(c.replicas)
		var want error
		if lim.Period > time.Duration(math.MaxInt64)/time.Duration(c.replicas) {
			want = errors.New("Period·Replicas overflows")
		} else {
			_, want = ratelimit.New(ratelimit.Config{Limit: lim.Rate, Period: lim.Period * time.Duration(c.replicas),
				Burst: max(1, lim.Burst/c.replicas)})
		}
		require.Equal(t, want != nil, got != nil, "%+v × %d replicas: normalize %v, ratelimit.New %v", lim, c.replicas, got, want)
		if got != nil {
			var ce *rampart.ConfigError
			require.ErrorAs(t, got, &ce)
		}
		t.Logf("%+v × %d: %v", lim, c.replicas, got)
	}
}

// gateHook holds every call of one script, once armed, until gate closes:
// a Redis that is slow (the gate closed later) or hung (never, until the
// test ends). passed counts the held calls that went on to Redis and
// returned.
type gateHook struct {
	sha    string
	armed  *atomic.Bool
	gate   chan struct{}
	passed *atomic.Int64
}

func (h gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); h.armed.Load() && len(a) > 1 && cmd.Name() == "evalsha" && a[1] == h.sha {
			<-h.gate
			defer h.passed.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// newGatedClient is a client of the test server with a gateHook on the
// script sha (its gate closed at the test's end).
func newGatedClient(t *testing.T, sha string) (*redis.Client, gateHook) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	h := gateHook{sha: sha, armed: new(atomic.Bool), gate: make(chan struct{}), passed: new(atomic.Int64)}
	c.AddHook(h)
	t.Cleanup(func() {
		select {
		case <-h.gate:
		default:
			close(h.gate)
		}
		c.Close()
	})
	return c, h
}

// TestCallerDeadlineIsNotHeldAgainstRedis: a caller whose deadline comes
// before Timeout's gets its context's error at its deadline (and the
// Failure mode's decision), but Redis is judged by Timeout alone: a Redis
// that answers after the caller's deadline and within Timeout is not
// counted a failure and does not open the breaker (it used to, so that a
// few callers short of time sent every caller to the Failure mode with
// Redis healthy); one that does not answer within Timeout still opens it,
// all callers' deadlines short or not.
func TestCallerDeadlineIsNotHeldAgainstRedis(t *testing.T) {
	t.Run("slow", func(t *testing.T) {
		c, h := newGatedClient(t, gcraScript.Hash())
		l, err := New(Config{Client: c, Limit: Limit{Rate: 1000, Burst: 100}, Failure: FailClosed,
			Timeout: time.Minute, BreakerFailures: 1, Ticker: rampart.NewManualTicker(1)})
		require.NoError(t, err)
		key := uniqueKey(t)
		_, err = l.Allow(context.Background(), key) // dials and loads the script
		require.NoError(t, err)
		h.armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = l.Allow(ctx, key)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, ErrUnavailable)
		st := l.Stats()
		require.Zero(t, st.RedisErrors, "%+v", st)
		require.False(t, st.BreakerOpen)
		close(h.gate) // Redis answers, within Timeout
		require.True(t, waitFor(10*time.Second, func() bool { return l.Stats().RoundTrips == 2 }), "%+v", l.Stats())
		d, err := l.Allow(context.Background(), key)
		require.NoError(t, err)
		require.Equal(t, SourceRedis, d.Source)
		require.Zero(t, l.Stats().RedisErrors)
	})
	t.Run("hung", func(t *testing.T) {
		c, h := newGatedClient(t, gcraScript.Hash())
		var errs atomic.Int64
		l, err := New(Config{Client: c, Limit: Limit{Rate: 1000, Burst: 100}, Failure: FailClosed,
			Timeout: 2 * time.Second, BreakerFailures: 1, Ticker: rampart.NewManualTicker(1),
			OnRedisError: func(error) { errs.Add(1) }})
		require.NoError(t, err)
		key := uniqueKey(t)
		_, err = l.Allow(context.Background(), key)
		require.NoError(t, err)
		h.armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = l.Allow(ctx, key)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, waitFor(10*time.Second, func() bool { return l.Stats().BreakerOpen }), "%+v", l.Stats())
		require.EqualValues(t, 1, l.Stats().RedisErrors)
		require.EqualValues(t, 1, errs.Load())
		_, err = l.Allow(context.Background(), key)
		require.ErrorIs(t, err, ErrUnavailable, "the breaker is open: no round trip")
	})
	t.Run("cancelled", func(t *testing.T) {
		// The caller cancels (with a cause of its own) the half-open probe:
		// it counts for nothing, and the probe is given back.
		c, h := newGatedClient(t, gcraScript.Hash())
		var seen atomic.Int64
		c.AddHook(failScriptHook{sha: gcraScript.Hash(), n: 2, seen: &seen}) // the second call fails: the breaker opens
		clock := rampart.NewManualTicker(1)
		l, err := New(Config{Client: c, Limit: Limit{Rate: 1000, Burst: 100}, Failure: FailClosed,
			Timeout: time.Minute, BreakerFailures: 1, BreakerOpen: time.Second, Ticker: clock})
		require.NoError(t, err)
		key := uniqueKey(t)
		_, err = l.Allow(context.Background(), key)
		require.NoError(t, err)
		_, err = l.Allow(context.Background(), key)
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, l.Stats().BreakerOpen)
		clock.Advance(time.Second) // half-open: the next call is the probe
		h.armed.Store(true)
		gone := errors.New("caller gone")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // before Timeout's
		defer cancel()
		ctx, cancelCause := context.WithCancelCause(ctx)
		time.AfterFunc(5*time.Millisecond, func() { cancelCause(gone) })
		_, err = l.Allow(ctx, key)
		require.ErrorIs(t, err, gone)
		require.EqualValues(t, 1, l.Stats().RedisErrors, "the injected failure only")
		h.armed.Store(false)
		d, err := l.Allow(context.Background(), key)
		require.NoError(t, err, "the probe was given back: %+v", l.Stats())
		require.Equal(t, SourceRedis, d.Source)
		require.False(t, l.Stats().BreakerOpen)
	})
}
