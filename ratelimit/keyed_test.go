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
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
)

func mustKeyed(t testing.TB, c KeyedConfig) *Keyed {
	t.Helper()
	k, err := NewKeyed(c)
	require.NoError(t, err)
	return k
}

// find looks key up as AdmitN does, lock-free: its slot (nil when absent)
// and the slots read.
func (k *Keyed) find(key string) (*kslot, int) {
	h1, h2 := k.hash(key)
	return k.tabs[h1>>k.shift].Load().find(h1, h2)
}

// entries counts the live keys in the shards' tables (at rest).
func (k *Keyed) entries() int {
	n := 0
	for i := range k.tabs {
		t := k.tabs[i].Load()
		for j := range t.slots {
			if t.slots[j].h1.Load() != 0 && t.slots[j].tat.Load() != evicted {
				n++
			}
		}
	}
	return n
}

// scanned sums the slots the shards' eviction samples have scanned.
func (k *Keyed) scanned() uint64 {
	n := uint64(0)
	for i := range k.shards {
		k.shards[i].mu.Lock()
		n += k.shards[i].scanned
		k.shards[i].mu.Unlock()
	}
	return n
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

// TestKeyedMaxKeysAtMaxInt: the largest bound is accepted and each shard's
// share of it computed without overflow, so new keys are taken.
func TestKeyedMaxKeysAtMaxInt(t *testing.T) {
	huge := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1}, MaxKeys: math.MaxInt})
	require.True(t, huge.AllowN("a", 0, 1))
	require.True(t, huge.AllowN("b", 0, 1))
	require.Equal(t, 2, huge.Len())
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
	require.Equal(t, k.entries(), k.Len())
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

// TestAllocsKeyedNewKeyRefused: a new key refused because the table is
// full of active keys (a flood's path) allocates nothing, with a listener
// and counters too; the key is not kept.
func TestAllocsKeyedNewKeyRefused(t *testing.T) {
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour, CountStats: true, OnRejected: func(int, time.Duration) {}}, MaxKeys: 64})
	for i := range 64 {
		require.True(t, k.AllowN("held-"+strconv.Itoa(i), 0, 1))
	}
	fresh := make([]string, 64)
	for i := range fresh {
		fresh[i] = "new-" + strconv.Itoa(i)
	}
	i := 0
	testkit.WantAllocs(t, "AdmitN new key, table full", 0, func() {
		if int64(k.AdmitN(fresh[i%len(fresh)], 1, 1)) == 0 {
			panic("admitted")
		}
		i++
	})
	require.Equal(t, 64, k.Len())
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
			e, _ := k.find("a")
			require.NotNil(t, e)
			require.Less(t, e.tat.Load(), evicted, "%+v at %d", c, now)
			require.Zero(t, k.SweepAt(now), "an active key evicted")
			require.Equal(t, 1, k.Len())
			require.NotZero(t, int64(k.AdmitN("a", now, 1)), "%+v at %d: beyond the burst", c, now)
		}
	}
}

// fullKeyed returns a Keyed limiter of n keys, every one of them active for
// an hour (one permit per hour, just spent), so its shards are full.
func fullKeyed(t testing.TB, n int) *Keyed {
	t.Helper()
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour}, MaxKeys: n})
	for i := range n {
		require.True(t, k.AllowN("held-"+strconv.Itoa(i), 0, 1))
	}
	require.Equal(t, n, k.Len())
	return k
}

// TestKeyedNewKeyCostIsBoundedAtAnyTableSize: when every slot holds an
// active key, a new key is refused (a finite wait, at most the hour until
// the held keys go idle) after scanning at most sampleRounds samples of
// sampleSlots slots, at 1k as at 100k keys: no sweep of the table.
func TestKeyedNewKeyCostIsBoundedAtAnyTableSize(t *testing.T) {
	for _, n := range []int{1000, 100_000} {
		k := fullKeyed(t, n)
		for i := range 2000 {
			before := k.scanned()
			w := int64(k.AdmitN("new-"+strconv.Itoa(i), int64(time.Minute), 1))
			require.Greater(t, w, int64(0), "n=%d: a new key admitted into a table full of active keys", n)
			require.LessOrEqual(t, w, int64(time.Hour-time.Minute), "n=%d", n)
			require.LessOrEqual(t, k.scanned()-before, uint64(sampleRounds*sampleSlots), "n=%d: new key %d scanned more than its samples", n, i)
		}
		require.Equal(t, n, k.Len())
		require.Zero(t, k.Stats().Evicted, "an active key was evicted")
	}
}

// TestKeyedFloodLeavesKnownKeysAlone: a flood of 1M distinct keys (100k
// under the race detector), each taking a permit, into a table that holds
// 1000 active known keys fills the table and is then refused, each flood
// key scanning a bounded sample; the known keys keep their slot (found by
// the lock-free lookup), their lookup cost (total probes within 2× of the
// unflooded cost: later inserts never lengthen a held key's probe, and a
// shard's rebuild places it again in a table as sparse as before), and
// their limit: each has exactly its 3 remaining permits.
func TestKeyedFloodLeavesKnownKeysAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("a million keys")
	}
	const known = 1000
	flood := 1_000_000
	if israce.Enabled {
		flood = 100_000 // the detector makes a million take minutes
	}
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 4, Period: time.Hour, CountStats: true}})
	keys := make([]string, known)
	probes := func() int {
		total := 0
		for _, key := range keys {
			e, p := k.find(key)
			require.NotNil(t, e, "known key %q not found by the lock-free lookup", key)
			total += p
		}
		return total
	}
	for i := range keys {
		keys[i] = "known-" + strconv.Itoa(i)
		require.True(t, k.AllowN(keys[i], 0, 1))
	}
	unflooded := probes()
	buf := []byte("flood-")
	now := int64(time.Second)
	refused := 0
	for i := range flood {
		if !k.AllowN(string(strconv.AppendInt(buf[:6], int64(i), 10)), now, 1) {
			refused++
		}
	}
	scanned := k.scanned() // per call at most sampleRounds·sampleSlots: TestKeyedNewKeyCostIsBoundedAtAnyTableSize
	flooded := probes()
	t.Logf("known keys' probes: %d unflooded, %d after %d flood keys (%d refused, %.1f slots scanned each); %d keys held",
		unflooded, flooded, flood, refused, float64(scanned)/float64(refused), k.Len())
	require.LessOrEqual(t, scanned, uint64(refused)*sampleRounds*sampleSlots)
	require.LessOrEqual(t, flooded, 2*unflooded)
	require.Equal(t, DefaultMaxKeys, k.Len())
	require.Equal(t, flood-(DefaultMaxKeys-known), refused)
	require.Zero(t, k.Stats().Evicted, "an active key was evicted")
	for _, key := range keys {
		require.Equal(t, 3, countTrue(5, func() bool { return k.AllowN(key, now, 1) }), "known key %q", key)
	}
}

// TestKeyedTableKeepsEveryKeyFindable: random admissions of more keys
// than fit into tables of 1, 2 and 32 shards, with periodic SweepAt calls
// (which also shrink tables) and a clock that sometimes reads back: every
// key held stays found by the lock-free lookup (no tombstone, eviction or
// rebuild breaks a probe run), and the tables hold exactly Len live keys,
// never more than MaxKeys.
func TestKeyedTableKeepsEveryKeyFindable(t *testing.T) {
	for _, maxKeys := range []int{40, 5000, 70_000} {
		rng := rand.New(rand.NewPCG(3, uint64(maxKeys)))
		k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 3, Period: time.Second, Burst: 3}, MaxKeys: maxKeys})
		nkeys := 300
		if maxKeys > 1000 {
			nkeys = maxKeys + maxKeys/4
		}
		held := map[string]bool{}
		now := int64(0)
		for step := range 20_000 {
			now += rng.Int64N(int64(20*time.Millisecond)) - int64(5*time.Millisecond) // some readings go back
			now = max(now, 0)
			key := "k" + strconv.Itoa(rng.IntN(nkeys))
			k.AllowN(key, now, 1+rng.IntN(3))
			if e, _ := k.find(key); e != nil {
				held[key] = true
			}
			if step%997 == 0 {
				k.SweepAt(now)
			}
			if step%1999 == 0 || step == 19_999 {
				require.Equal(t, k.entries(), k.Len(), "step %d", step)
				require.LessOrEqual(t, k.Len(), maxKeys)
				found := 0
				for key := range held {
					if e, _ := k.find(key); e != nil {
						found++
					} else {
						delete(held, key)
					}
				}
				require.Equal(t, k.Len(), found, "step %d: a held key is not found", step)
			}
		}
	}
}

// TestKeyedConcurrentGrowthKeepsEachLimit, in both layouts: goroutines
// admit on 64 known keys while others insert distinct keys, so that every
// shard's table is rebuilt (each slot retired by a Swap) under the
// lock-free lookups. The clock is frozen, so each known key admits exactly
// its burst: an admission racing with a rebuild is carried over or retried
// under the shard's mutex, never lost (which would give more than the
// burst), and a lookup that misses a key never inserts a second slot for
// it; the counters agree.
func TestKeyedConcurrentGrowthKeepsEachLimit(t *testing.T) {
	for _, compact := range []bool{false, true} {
		testKeyedConcurrentGrowth(t, compact)
	}
}

func testKeyedConcurrentGrowth(t *testing.T, compact bool) {
	const known, burst = 64, 20
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: burst, Period: time.Hour, Burst: burst, Ticker: rampart.NewManualTicker(0), Compact: compact, CountStats: true}, MaxKeys: 40_000})
	var admitted [known]atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() { // inserts
			for i := range 8000 {
				k.Allow("g" + strconv.Itoa(g) + "-" + strconv.Itoa(i))
			}
		})
		wg.Go(func() { // known keys
			for i := range 8000 {
				j := (i*7 + g) % known
				if k.Allow("known-" + strconv.Itoa(j)) {
					admitted[j].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for j := range admitted {
		require.Equal(t, int64(burst), admitted[j].Load(), "known-%d", j)
	}
	require.Equal(t, 4*8000+known, k.Len())
	require.Equal(t, k.entries(), k.Len())
	require.Equal(t, uint64(4*8000+known*burst), k.Stats().Admitted, "compact=%v", compact)
}

// TestKeyedBytesPerKey: a million keys cost 64 to 72 heap bytes each,
// whatever their length: two or a little more 32-byte slots (256 shards of
// 8192 slots for about 3906 keys each, 67.1 bytes a key, or 16384 slots in a
// shard that drew more than 4095 keys), and nothing per key besides.
func TestKeyedBytesPerKey(t *testing.T) {
	if testing.Short() || israce.Enabled {
		t.Skip("a million keys; the race detector's allocations would count")
	}
	const n = 1_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 10}, MaxKeys: n})
	for _, key := range keys {
		k.Allow(key)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, n, k.Len())
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes per key at %d keys", perKey, n)
	require.GreaterOrEqual(t, perKey, 64.0)
	require.LessOrEqual(t, perKey, 72.0)
	runtime.KeepAlive(k)
	runtime.KeepAlive(keys) // live throughout: only the limiter's bytes count
}

// TestKeyedBytes: an empty Keyed limiter, unnamed, with a whole-ns
// interval, in both layouts, for one shard (MaxKeys up to 4096) and for the
// 16 shards of the default MaxKeys; every shard starts on the shared empty
// table, so a key-less shard costs its writer state only.
func TestKeyedBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	for _, tc := range []struct {
		maxKeys         int
		compact, padded int64
	}{{4096, 344, 768}, {0, 1416, 2928}} {
		for _, compact := range []bool{true, false} {
			want := tc.padded
			if compact {
				want = tc.compact
			}
			testkit.WantBytes(t, "Keyed MaxKeys="+strconv.Itoa(tc.maxKeys)+" compact="+strconv.FormatBool(compact), want, func() any {
				return mustKeyed(t, KeyedConfig{Config: Config{Limit: 1000, Period: time.Second, Compact: compact}, MaxKeys: tc.maxKeys})
			})
		}
	}
}

// TestKeyedChurnAtMaxKeysKeepsTheTableBounded: a one-shard table held at
// MaxKeys while new keys keep replacing idle ones (20 waves of 4096 keys, a
// second apart; each eviction leaves a tombstone until a rebuild clears
// them) settles at 4 slots a key, not at a table that doubles with every
// tombstone, and refuses almost no new key.
func TestKeyedChurnAtMaxKeysKeepsTheTableBounded(t *testing.T) {
	const maxKeys = 4096
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: maxKeys})
	now := int64(0)
	refused := 0
	for i := range 20 * maxKeys {
		if i%maxKeys == 0 {
			now += int64(time.Second) // every key held is idle: each new key replaces one
		}
		if !k.AllowN("c"+strconv.Itoa(i), now, 1) {
			refused++
		}
	}
	t.Logf("refused %d of %d; %d slots for %d keys; %d evicted", refused, 20*maxKeys, len(k.tabs[0].Load().slots), k.Len(), k.Stats().Evicted)
	require.Equal(t, 4*maxKeys, len(k.tabs[0].Load().slots))
	// The samples refuse a new key when their 32 keys are all active
	// although idle ones remain elsewhere: near the end of each wave, when
	// few do (about 0.002 % of these inserts; 1 % would be a broken hand).
	require.Less(t, refused, 20*maxKeys/100)
	// Every key admitted is held or was evicted (a refused one is not kept).
	require.Equal(t, uint64(20*maxKeys-refused), k.Stats().Evicted+uint64(k.Len()))
}

// TestKeyedNewKeyAdmittedWhenMostHeldKeysAreActive: at MaxKeys with 80 %
// of the held keys active, a new key is refused only when every key of
// sampleRounds samples is active (about 0.8^32 of them, 0.08 %), not
// whenever one sample of 8 is (0.8^8, 17 %): of 100 new keys, none or
// almost none is refused, and a refused one's hint is an upper bound.
func TestKeyedNewKeyAdmittedWhenMostHeldKeysAreActive(t *testing.T) {
	const (
		hr      = int64(time.Hour)
		maxKeys = 4096
		hot     = maxKeys * 8 / 10
	)
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour}, MaxKeys: maxKeys})
	for i := range maxKeys - hot {
		require.True(t, k.AllowN("cold-"+strconv.Itoa(i), 0, 1)) // idle at 1 h
	}
	for i := range hot {
		require.True(t, k.AllowN("hot-"+strconv.Itoa(i), hr/2, 1)) // active until 1.5 h
	}
	now := hr + int64(time.Second)
	refused := 0
	for i := range 100 {
		if w := k.AdmitN("new-"+strconv.Itoa(i), now, 1); w != 0 {
			refused++
			require.LessOrEqual(t, int64(w), hr/2, "the hint is at most the soonest sampled key's idle time")
		}
	}
	t.Logf("refused %d of 100 new keys with %d of %d held keys active", refused, hot, maxKeys)
	// One sample of 8 refuses about 17 of 100; sampleRounds samples about
	// 0.1 (2 or more has a chance near 1e-4).
	require.LessOrEqual(t, refused, 2)
}

// TestKeyedChurnSlotsPerKeyIsWithinTheDocumentedBound: a table held at
// MaxKeys while new keys replace idle ones settles between 8/3 and 16/3
// slots for each of its MaxKeys keys whatever MaxKeys (4 only when a
// shard's share is a power of 2, as at DefaultMaxKeys).
func TestKeyedChurnSlotsPerKeyIsWithinTheDocumentedBound(t *testing.T) {
	for _, maxKeys := range []int{3073, 4096, 100_000} {
		k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: maxKeys})
		now := int64(0)
		for i := range 6 * maxKeys {
			if i%maxKeys == 0 {
				now += int64(time.Second)
			}
			k.AllowN("c"+strconv.Itoa(i), now, 1)
		}
		slots := 0
		for i := range k.tabs {
			slots += len(k.tabs[i].Load().slots)
		}
		per := float64(slots) / float64(maxKeys)
		t.Logf("MaxKeys %d: %d slots (%d keys held): %.2f slots (%.0f B) a key", maxKeys, slots, k.Len(), per, per*32)
		// A table doubles when its live keys would pass 3/8 of it, and
		// under churn a shard holds its share of MaxKeys: 8/3 slots a key
		// just after a doubling, 16/3 just before, against MaxKeys (the
		// keys held dip below it by the idle keys a sample evicts at
		// once, up to sampleRounds·sampleEntries a shard, which a rebuild
		// may see).
		require.GreaterOrEqual(t, 3*slots, 8*(maxKeys-sampleRounds*sampleEntries*len(k.shards)), "MaxKeys %d", maxKeys)
		require.LessOrEqual(t, 3*slots, 16*maxKeys, "MaxKeys %d", maxKeys)
	}
}

// TestKeyedLenNeverExceedsMaxKeys: new keys racing for the last slots of
// a full table never make Len (or Stats().Keys) read above MaxKeys, even
// for an instant.
func TestKeyedLenNeverExceedsMaxKeys(t *testing.T) {
	const maxKeys = 4
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour}, MaxKeys: maxKeys})
	for i := range maxKeys {
		require.True(t, k.AllowN("held-"+strconv.Itoa(i), 0, 1))
	}
	var done atomic.Int32
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			defer done.Add(1)
			for i := range 20_000 {
				k.AllowN("new-"+strconv.Itoa(g)+"-"+strconv.Itoa(i), 1, 1)
			}
		})
	}
	maxSeen := 0
	for done.Load() < 2 {
		maxSeen = max(maxSeen, k.Len(), k.Stats().Keys)
	}
	wg.Wait()
	require.LessOrEqual(t, maxSeen, maxKeys)
	require.Equal(t, maxKeys, k.Len())
}

// TestKeyedWaitAtTheLeastReadingSaturates: a wait computed at a reading
// far below the origin (math.MinInt64 is a valid reading) is the true,
// huge wait, not a sum wrapped to 1 ns, for a held key refused by its
// limit and for a new key refused by a full table.
func TestKeyedWaitAtTheLeastReadingSaturates(t *testing.T) {
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: 1})
	require.True(t, k.AllowN("a", 0, 1))
	require.Equal(t, time.Duration(math.MaxInt64-1), k.AdmitN("a", math.MinInt64, 1), "held key")
	require.Equal(t, time.Duration(math.MaxInt64-1), k.AdmitN("b", math.MinInt64, 1), "new key, table full")
}

// TestKeyedNewKeyOfAnEmptyShardEvictsFromAnother: when MaxKeys keys are
// held in other shards and the new key's own shard has none to evict, the
// new key samples the next shards: refused with a real hint (not 1 ns)
// while their keys are active, admitted once they are idle.
func TestKeyedNewKeyOfAnEmptyShardEvictsFromAnother(t *testing.T) {
	const hr = int64(time.Hour)
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour}, MaxKeys: 2 * shardKeys}) // 2 shards
	require.Len(t, k.shards, 2)
	for i, held := 0, 0; held < 2*shardKeys; i++ {
		// White-box: every held key in shard 1 (a skew random hashing
		// makes unlikely, but a table must handle).
		if key := "h" + strconv.Itoa(i); k.shardOf(key) == 1 {
			require.True(t, k.AllowN(key, 0, 1), "held key %d", held)
			held++
		}
	}
	fresh := ""
	for i := 0; fresh == ""; i++ {
		if key := "new" + strconv.Itoa(i); k.shardOf(key) == 0 {
			fresh = key
		}
	}
	w := k.AdmitN(fresh, hr/2, 1)
	require.Equal(t, time.Duration(hr/2), w, "while the held keys are active: the time until the sampled ones go idle")
	require.Zero(t, k.AdmitN(fresh, 2*hr, 1), "every held key idle for an hour: one is evicted for the new key")
	e, _ := k.find(fresh)
	require.NotNil(t, e, "the new key is held")
	require.LessOrEqual(t, k.Len(), 2*shardKeys)
	require.Equal(t, uint64(2*shardKeys+1-k.Len()), k.Stats().Evicted, "each key evicted is one fewer held")
}

// shardOf returns the shard of key.
func (k *Keyed) shardOf(key string) uint64 {
	h1, _ := k.hash(key)
	return h1 >> k.shift
}

// BenchmarkKeyedShardRebuild measures a rebuild of one shard holding
// shardKeys keys (what a held key the rebuild has already moved waits for
// on the shard's mutex): `go test -run '^$' -bench KeyedShardRebuild
// ./ratelimit/`.
func BenchmarkKeyedShardRebuild(b *testing.B) {
	k := mustKeyed(b, KeyedConfig{Config: Config{Limit: 1, Period: time.Hour}, MaxKeys: shardKeys})
	for i := range shardKeys {
		k.AllowN("k"+strconv.Itoa(i), 0, 1)
	}
	sh := k.shards[0]
	size := len(k.tabs[0].Load().slots)
	b.ReportAllocs()
	for b.Loop() {
		sh.mu.Lock()
		k.rebuild(sh, 0, size)
		sh.mu.Unlock()
	}
	b.ReportMetric(float64(shardKeys), "keys")
}
