package ratelimit

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
)

func mustKeyed(t testing.TB, c KeyedConfig) *Keyed {
	t.Helper()
	k, err := NewKeyed(c)
	require.NoError(t, err)
	return k
}

func TestKeyedPerKey(t *testing.T) {
	ms := int64(time.Millisecond)
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 10, Burst: 2, CountStats: true}})
	require.Zero(t, k.TryAcquire("a", 0, 1))
	require.Zero(t, k.TryAcquire("a", 0, 1))
	require.Equal(t, 100*ms, k.TryAcquire("a", 0, 1))
	require.Zero(t, k.TryAcquire("b", 0, 2)) // b has its own bucket
	require.Equal(t, 50*ms, k.TryAcquire("b", 150*ms, 2))
	require.True(t, k.AllowN("a", 100*ms, 1))
	require.Equal(t, Never, k.TryAcquire("a", 100*ms, 3))
	require.Equal(t, 2, k.Len())
	st := k.Stats()
	require.Equal(t, uint64(4), st.Admitted)
	require.Equal(t, uint64(3), st.Rejected)
	require.Same(t, k.rejected, k.RejectedError())
	_, err := NewKeyed(KeyedConfig{Config: Config{Rate: 1}, MaxKeys: -1})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	_, err = NewKeyed(KeyedConfig{})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
}

func TestKeyedBoundAndEviction(t *testing.T) {
	ms := int64(time.Millisecond)
	tk := rampart.NewManualTicker(0)
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 10, Burst: 1, Ticker: tk}, MaxKeys: 3})
	for i := range 3 {
		require.True(t, k.Allow("k"+strconv.Itoa(i)))
		tk.Advance(10 * time.Millisecond)
	}
	// Full of active keys: a new key waits until the oldest goes idle (k0
	// is back to a full burst at 100 ms).
	require.Equal(t, 70*ms, k.TryAcquire("new", tk.Now(), 1))
	require.Equal(t, 3, k.Len())
	tk.Set(100 * ms)
	require.True(t, k.Allow("new")) // k0 evicted to make room
	st := k.Stats()
	require.Equal(t, uint64(1), st.Evicted)
	require.Equal(t, 3, st.Keys)
	// An evicted key comes back as new, which is what it was.
	tk.Set(115 * ms)
	require.True(t, k.Allow("k0")) // k1 (idle at 110 ms) evicted
	require.False(t, k.Allow("k0"))
	require.Equal(t, 3, k.Len())
	tk.Set(time.Hour.Nanoseconds())
	require.Equal(t, 3, k.Sweep(tk.Now()))
	require.Zero(t, k.Len())
}

// Many goroutines on a few keys with a table too small for them, so keys are
// evicted and re-created all the time: every key keeps the window bound.
func TestKeyedStress(t *testing.T) {
	const perSecond, burst, keys = 50_000, 3, 8
	tk := rampart.NewManualTicker(0)
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: perSecond, Burst: burst, Ticker: tk}, MaxKeys: keys / 2})
	var mu sync.Mutex
	times := map[string][]int64{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			local := map[string][]int64{}
			for i := range 3000 {
				if g == 0 {
					tk.Advance(time.Duration(rng.Int64N(20000)))
				}
				if g == 1 && i%500 == 0 {
					k.Sweep(tk.Now())
				}
				key := "key" + strconv.Itoa(rng.IntN(keys))
				now := tk.Now()
				if k.AllowN(key, now, 1) {
					local[key] = append(local[key], now)
				}
			}
			mu.Lock()
			for key, ts := range local {
				times[key] = append(times[key], ts...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for key, ts := range times {
		slices.Sort(ts)
		t.Logf("%s: %d admitted", key, len(ts))
		checkWindows(t, ts, burst, perSecond)
	}
	require.LessOrEqual(t, k.Len(), keys/2)
}

func TestAllocsKeyedExisting(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30}})
	keys := []string{"alpha", "beta", "gamma"}
	for _, key := range keys {
		require.True(t, k.Allow(key))
	}
	i := 0
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if !k.Allow(keys[i%len(keys)]) {
			panic("rejected")
		}
		i++
	}))
	// Rejection of an existing key.
	r := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1e-3}})
	require.True(t, r.AllowN("x", 0, 1))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if r.TryAcquire("x", 5, 1) == 0 {
			panic("admitted")
		}
	}))
}

// TestKeyedTATStaysBelowEvictedAtTheReadingCap: at readings up to and past
// the cap of the reading range, a key's full burst leaves its TAT below the
// evicted marker (a TAT equal to it would read as a removed cell), the key
// keeps its one slot through a Sweep, and the next permit is refused; n
// outside [1, burst], down to math.MinInt, is refused without a cell.
func TestKeyedTATStaysBelowEvictedAtTheReadingCap(t *testing.T) {
	for _, c := range capConfigs {
		c.Burst = 3
		probe := mustKeyed(t, KeyedConfig{Config: c})
		for _, now := range capReadings(&probe.p) {
			k := mustKeyed(t, KeyedConfig{Config: c, MaxKeys: 2})
			for _, n := range []int{math.MinInt, -1, 0, 4, math.MaxInt} {
				require.Equal(t, Never, k.TryAcquire("a", now, n), "n=%d", n)
			}
			require.Zero(t, k.Len(), "an invalid n made a key")
			require.Zero(t, k.TryAcquire("a", now, 3), "%+v at %d: a full burst", c, now)
			v, ok := k.m.Load("a")
			require.True(t, ok)
			require.Less(t, v.(*cell).tat.Load(), evicted, "%+v at %d", c, now)
			require.Zero(t, k.Sweep(now), "an active key evicted")
			require.Equal(t, 1, k.Len())
			require.NotZero(t, k.TryAcquire("a", now, 1), "%+v at %d: beyond the burst", c, now)
		}
	}
}
