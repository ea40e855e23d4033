package ratelimit

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
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
	require.Zero(t, int64(k.AdmitN("a", 0, 1)))
	require.Zero(t, int64(k.AdmitN("a", 0, 1)))
	require.Equal(t, 100*ms, int64(k.AdmitN("a", 0, 1)))
	require.Zero(t, int64(k.AdmitN("b", 0, 2))) // b has its own bucket
	require.Equal(t, 50*ms, int64(k.AdmitN("b", 150*ms, 2)))
	require.True(t, k.AllowN("a", 100*ms, 1))
	require.Equal(t, int64(Never), int64(k.AdmitN("a", 100*ms, 3)))
	require.Equal(t, 2, k.Len())
	st := k.Stats()
	require.Equal(t, uint64(4), st.Admitted)
	require.Equal(t, uint64(3), st.Rejected)
	require.Same(t, k.rejected, k.RejectedError())
	_, err := NewKeyed(KeyedConfig{Config: Config{Rate: 1}, MaxKeys: -1})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	testkit.RequireConfigError(t, err, "ratelimit", "MaxKeys")
	_, err = NewKeyed(KeyedConfig{})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	testkit.RequireConfigError(t, err, "ratelimit", "Rate")
}

// TestKeyedListenerPanicIsCounted: a panicking OnRejected never breaks the
// call and is counted; the rejection is still reported and counted once.
func TestKeyedListenerPanicIsCounted(t *testing.T) {
	boom := func(int, time.Duration) { panic("boom") }
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1, OnRejected: boom, CountStats: true}})
	require.True(t, k.AllowN("a", 0, 1))
	require.Equal(t, int64(time.Second), int64(k.AdmitN("a", 0, 1)))
	require.Equal(t, int64(Never), int64(k.AdmitN("a", 0, 2)))
	ks := k.Stats()
	require.Equal(t, uint64(2), ks.ListenerPanics)
	require.Equal(t, uint64(2), ks.Rejected)
	require.Equal(t, uint64(1), ks.Admitted)
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
	require.Equal(t, 70*ms, int64(k.AdmitN("new", tk.Now(), 1)))
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
	require.Equal(t, 3, k.SweepAt(tk.Now()))
	require.Zero(t, k.Len())
}

// TestKeyedSweepLenFloor: Len and SweepAt counts, a full table's rejection
// wait (until the soonest key goes idle), eviction when a key goes idle,
// and the floor: a new key with a reading older than an evicted TAT gets
// no fresh burst.
func TestKeyedSweepLenFloor(t *testing.T) {
	const s = int64(time.Second)
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: rampart.NewManualTicker(0)}, MaxKeys: 2})
	require.NoError(t, err)
	require.True(t, k.AllowN("a", 0, 1))
	require.True(t, k.AllowN("b", s/2, 1))
	require.Equal(t, 2, k.Len())
	require.Equal(t, 0, k.SweepAt(s/2))
	// Full of active keys: "a" idles at 1 s.
	require.Equal(t, s-s/4, int64(k.AdmitN("c", s/4, 1)))
	require.Equal(t, 2, k.Len())
	// At 1 s "a" is idle: "c" takes its slot.
	require.True(t, k.AllowN("c", s, 1))
	require.Equal(t, 2, k.Len())
	require.Equal(t, uint64(1), k.Stats().Evicted)
	// SweepAt at 2 s evicts both ("b" idle at 1.5 s, "c" at 2 s).
	require.Equal(t, 2, k.SweepAt(2*s))
	require.Equal(t, 0, k.Len())
	require.Equal(t, 0, k.SweepAt(2*s))
	// Floor: the evicted TAT was 2 s; a reading of 1.5 s is an early arrival.
	require.Equal(t, s/2, int64(k.AdmitN("d", 3*s/2, 1)))
	require.Equal(t, 1, k.Len()) // the cell was inserted even though rejected
	require.True(t, k.AllowN("d", 2*s, 1))
}

// TestKeyedEvictionGivesNoCreditToAStaleReading: Keyed.AdmitN keeps
// the contract of Limiter.AdmitN, "a now older than other callers'
// readings never creates credit", through eviction: a cell whose TAT has
// passed at the sweeper's reading is dropped, and a caller whose reading is
// older than that TAT gets no fresh burst for the same key. Here the key
// takes its burst of 5 at 10 s, a SweepAt at 11 s evicts it, and a caller
// still at 10 s is refused, as a Limiter refuses it (otherwise 10
// admissions at one instant against a bound of burst + 1 = 6).
func TestKeyedEvictionGivesNoCreditToAStaleReading(t *testing.T) {
	sec := int64(time.Second)
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 5, Period: time.Second}})
	l := mustNew(t, Config{Limit: 5, Period: time.Second})
	for range 5 {
		require.True(t, k.AllowN("a", 10*sec, 1))
		require.True(t, l.AllowN(10*sec, 1))
	}
	require.Equal(t, 1, k.SweepAt(11*sec)) // idle at 11 s: evicted
	require.False(t, l.AllowN(10*sec, 1), "the Limiter refuses the stale reading")
	require.False(t, k.AllowN("a", 10*sec, 1), "the evicted key must refuse it too")
}

// TestKeyedFullTableWaitIsFinite: Never means "this n can never be
// admitted"; a new key refused because the table is momentarily full (a
// racing insert took the slot a sweep had just freed) gets a finite wait,
// not Never.
func TestKeyedFullTableWaitIsFinite(t *testing.T) {
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: 1})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	var never atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte("g0-0000")
			key[1] = byte('0' + g)
			for i := range 3000 {
				// Every reading is a second after the previous one: every
				// key held is idle, so a sweep can always free its slot.
				now := clock.Add(int64(time.Second))
				key[3], key[4], key[5], key[6] = byte('0'+i/1000%10), byte('0'+i/100%10), byte('0'+i/10%10), byte('0'+i%10)
				if int64(k.AdmitN(string(key), now, 1)) == int64(Never) {
					never.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := never.Load(); n != 0 {
		t.Fatalf("%d valid requests for a new key got int64(Never)", n)
	}
}

// TestKeyedFullTableListenerGoexitKeepsTheSlot: a rejection listener that
// calls runtime.Goexit on the full-table path of a new key ends the
// caller's goroutine and leaks no slot: the slot the insert reserved is
// given back before the listener runs.
func TestKeyedFullTableListenerGoexitKeepsTheSlot(t *testing.T) {
	sec := int64(time.Second)
	var goexit atomic.Bool
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second, OnRejected: func(int, time.Duration) {
		if goexit.Load() {
			testkit.Goexit()
		}
	}}, MaxKeys: 1})
	require.True(t, k.AllowN("a", 0, 1)) // active until 1 s
	goexit.Store(true)
	_, goexited := testkit.Run(func() {
		k.AllowN("b", 0, 1) // table full: rejected, listener exits the goroutine
	})
	require.True(t, goexited, "the listener's Goexit did not end the caller's goroutine")
	goexit.Store(false)
	require.Equal(t, 1, k.Len())
	require.True(t, k.AllowN("b", sec, 1), "a idle at 1 s: evicted for b")
	require.Equal(t, 1, k.Len())
}

// TestKeyedNegativeOrigin: on a clock that started below 0, Keyed lets
// time move from its origin: the bucket refills one per second, a full
// table's wait, eviction and SweepAt count from the origin.
func TestKeyedNegativeOrigin(t *testing.T) {
	const s = int64(time.Second)
	tk := rampart.NewManualTicker(-20 * s)
	kl, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: tk}})
	require.NoError(t, err)
	admitted := countTrue(10, func() bool { defer tk.Advance(time.Second); return int64(kl.AdmitN("k", tk.Now(), 1)) == 0 })
	require.Equal(t, 10, admitted, "one per second over 10 s")

	start := -10 * s
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: rampart.NewManualTicker(start)}, MaxKeys: 1})
	require.NoError(t, err)
	require.True(t, k.AllowN("a", start, 1))
	require.Equal(t, s, int64(k.AdmitN("a", start, 1)))
	require.Equal(t, s, int64(k.AdmitN("b", start, 1))) // full table: until "a" idles
	require.True(t, k.AllowN("b", start+s, 1))          // "a" evicted
	require.Equal(t, 1, k.Len())
	require.Equal(t, 1, k.SweepAt(start+2*s))
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
					k.SweepAt(tk.Now())
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

// TestKeyedConcurrentLen: concurrent inserts, admissions and sweeps on a
// small table never leave Len above MaxKeys at rest, and Len equals the
// number of keys in the map at rest.
func TestKeyedConcurrentLen(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	k, err := NewKeyed(KeyedConfig{Config: Config{Rate: 1000, Burst: 2, Ticker: tk}, MaxKeys: 8})
	require.NoError(t, err)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				now := tk.Now()
				k.AdmitN(keys[(i*7+g)%len(keys)], now, 1)
				if i%50 == 0 {
					k.SweepAt(now)
				}
			}
		})
	}
	wg.Go(func() {
		for range 5000 {
			tk.Advance(100 * time.Microsecond)
			runtime.Gosched()
		}
	})
	wg.Wait()
	n := 0
	k.m.Range(func(_, _ any) bool { n++; return true })
	require.Equal(t, n, k.Len())
	require.LessOrEqual(t, k.Len(), 8)
	k.SweepAt(tk.Now() + int64(time.Second))
	require.Equal(t, 0, k.Len())
}

// TestAllocsKeyedExisting: admitting and rejecting an existing key
// allocate nothing, the rejection also with a listener and counters (and
// for an n that can never be admitted).
func TestAllocsKeyedExisting(t *testing.T) {
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30}})
	keys := []string{"alpha", "beta", "gamma"}
	for _, key := range keys {
		require.True(t, k.Allow(key))
	}
	i := 0
	testkit.WantAllocs(t, "Allow existing key", 0, func() {
		if !k.Allow(keys[i%len(keys)]) {
			panic("rejected")
		}
		i++
	})
	// Rejection of an existing key.
	r := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1e-3}})
	require.True(t, r.AllowN("x", 0, 1))
	testkit.WantAllocs(t, "AdmitN existing key rejected", 0, func() {
		if int64(r.AdmitN("x", 5, 1)) == 0 {
			panic("admitted")
		}
	})
	// The same with a listener and counters.
	lc := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1e-3, CountStats: true, OnRejected: func(int, time.Duration) {}}})
	require.True(t, lc.AllowN("x", 0, 1))
	testkit.WantAllocs(t, "AdmitN rejected with listener and counters", 0, func() {
		if int64(lc.AdmitN("x", 5, 1)) == 0 || int64(lc.AdmitN("x", 5, 2)) != int64(Never) {
			panic("admitted")
		}
	})
}

// TestKeyedTATStaysBelowEvictedAtTheReadingCap: at readings up to and past
// the cap of the reading range, a key's full burst leaves its TAT below the
// evicted marker (a TAT equal to it would read as a removed cell), the key
// keeps its one slot through a SweepAt, and the next permit is refused; n
// outside [1, burst], down to math.MinInt, is refused without a cell.
func TestKeyedTATStaysBelowEvictedAtTheReadingCap(t *testing.T) {
	for _, c := range capConfigs {
		c.Burst = 3
		probe := mustKeyed(t, KeyedConfig{Config: c})
		for _, now := range capReadings(&probe.p) {
			k := mustKeyed(t, KeyedConfig{Config: c, MaxKeys: 2})
			for _, n := range []int{math.MinInt, -1, 0, 4, math.MaxInt} {
				require.Equal(t, int64(Never), int64(k.AdmitN("a", now, n)), "n=%d", n)
			}
			require.Zero(t, k.Len(), "an invalid n made a key")
			require.Zero(t, int64(k.AdmitN("a", now, 3)), "%+v at %d: a full burst", c, now)
			v, ok := k.m.Load("a")
			require.True(t, ok)
			require.Less(t, v.(*cell).tat.Load(), evicted, "%+v at %d", c, now)
			require.Zero(t, k.SweepAt(now), "an active key evicted")
			require.Equal(t, 1, k.Len())
			require.NotZero(t, int64(k.AdmitN("a", now, 1)), "%+v at %d: beyond the burst", c, now)
		}
	}
}
