package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
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
