package ratelimit

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
)

// The accuracy of K shards under a load of 10× the rate: the window bound
// K·⌈burst/K⌉ + rate·W + K holds, and at least 99 % of the rate is admitted.
func TestShardedAccuracy(t *testing.T) {
	for _, tc := range []struct{ k, burst int }{{1, 16}, {2, 16}, {4, 16}, {8, 16}, {8, 8}} {
		const perSecond = 1000
		k, burst := tc.k, tc.burst
		s, err := NewSharded(ShardedConfig{Config: Config{Rate: perSecond, Burst: burst, CountStats: true}, Shards: k})
		require.NoError(t, err)
		require.Equal(t, k, s.Shards())
		require.InDelta(t, float64(perSecond), s.Stats().Rate, 1e-6)
		var times []int64
		const horizon = int64(10 * time.Second)
		for now := int64(0); now < horizon; now += int64(100 * time.Microsecond) {
			if s.AllowN(now, 1) {
				times = append(times, now)
			}
		}
		shardBurst := k * ((burst + k - 1) / k)
		checkWindows(t, times, shardBurst+k-1, perSecond)
		ideal := float64(burst) + perSecond*float64(horizon)/1e9
		ratio := float64(len(times)) / ideal
		t.Logf("K=%d burst=%d: admitted %d of ideal %.0f (%.4f)", k, burst, len(times), ideal, ratio)
		if burst/k >= 2 {
			require.GreaterOrEqual(t, ratio, 0.99)
		} else {
			// A shard burst of 1 loses each admission's lateness (about 4 %
			// here): give every shard a burst of 2 or more.
			require.GreaterOrEqual(t, ratio, 0.9)
		}
		require.Equal(t, uint64(len(times)), s.Stats().Admitted)
	}
	_, err := NewSharded(ShardedConfig{Config: Config{Rate: 1}, Shards: -1})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	// A huge K is refused at construction rather than exhausting memory in it.
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e6}, Shards: 1 << 30})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e6}, Shards: MaxShards})
	require.NoError(t, err)
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e-9}, Shards: 64})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	d, err := NewSharded(ShardedConfig{Config: Config{Rate: 1}})
	require.NoError(t, err)
	require.GreaterOrEqual(t, d.Shards(), 1)
	require.Same(t, d.shards[0].rejected, d.RejectedError())
	require.Equal(t, rampart.DefaultTicker(), d.Ticker())
}

func TestShardedConcurrent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 1000, Burst: 16, Ticker: tk}, Shards: 4})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range 2000 {
				if s.Allow() {
					n++
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, 16, total) // no time passed: exactly the bursts
}

func TestAllocsSharded(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	s, err := NewSharded(ShardedConfig{Config: Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30}, Shards: 4})
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if !s.Allow() {
			panic("rejected")
		}
	}))
}

// TestShardedAtTheReadingCap: at readings up to and past the cap of the
// reading range, K shards admit at most K shard bursts, every shard's TAT
// stays below retired, and n outside [1, shard burst], down to
// math.MinInt, is refused with Never.
func TestShardedAtTheReadingCap(t *testing.T) {
	for _, c := range capConfigs {
		if c.Limit == 1 {
			c.Limit = 2 // two shards of 1 per 2 s
		}
		c.Burst = 4
		probe, err := NewSharded(ShardedConfig{Config: c, Shards: 2})
		require.NoError(t, err)
		for _, now := range capReadings(&probe.shards[0].st.Load().params) {
			s, err := NewSharded(ShardedConfig{Config: c, Shards: 2})
			require.NoError(t, err)
			for _, n := range []int{math.MinInt, -1, 0, 3, math.MaxInt} {
				require.Equal(t, Never, s.TryAcquire(now, n), "n=%d", n)
			}
			admitted := 0
			for range 20 {
				if s.AllowN(now, 1) {
					admitted++
				}
			}
			require.LessOrEqual(t, admitted, 4, "%+v at %d", c, now)
			require.GreaterOrEqual(t, admitted, 2, "%+v at %d: at least one shard's burst", c, now)
			for i, l := range s.shards {
				require.Less(t, l.st.Load().tat.Load(), retired, "%+v at %d: shard %d", c, now, i)
			}
		}
	}
}
