package ratelimit

// Third review of package ratelimit: reproductions of the bugs found (each
// skipped with "BUG: ..." until fixed) and guards for behaviour the other
// tests do not cover. Internal package: some checks read the state word.

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
)

// TestReview3HugeReadingRetiresTheState: a reading of 2⁶² ns (146 years; any
// int64 is a legal reading of a ticker with an arbitrary epoch, e.g. a
// ManualTicker) gives units ≥ retired, so the first admission stores a TAT ≥
// retired and every later call that is not admitted spins for ever in
// acquireSlow's (or Reserve's) "SetRate is publishing" loop. The check reads
// the state word instead of making the call that would hang.
func TestReview3HugeReadingRetiresTheState(t *testing.T) {
	for _, now := range []int64{1 << 62, 1<<62 + 1<<61, math.MaxInt64 - int64(time.Hour)} {
		for _, c := range []Config{{Limit: 1, Period: time.Second}, {Rate: 3}} {
			l := mustNew(t, c)
			require.True(t, l.AllowN(now, 1), "%+v at %d", c, now)
			tat := l.st.Load().tat.Load()
			if tat >= retired || tat < 0 {
				t.Fatalf("%+v at %d: TAT %d after one admission (retired is %d): the next call hangs or over-admits", c, now, tat, retired)
			}
			require.False(t, l.AllowN(now, 1), "%+v at %d: burst 1 admitted twice", c, now)
			_, err := l.Reserve(now, 1, time.Hour)
			_ = err // must return, admitted or not
		}
	}
}

// TestReview3MaxInt64ReadingAdmitsWithoutLimit: at a reading of
// math.MaxInt64, max(TAT, u) + n·k wraps negative, the wrapped TAT is stored,
// and from then on every call is admitted: a limit of one per second admits
// every call, for Limiter, Keyed and Sharded alike.
func TestReview3MaxInt64ReadingAdmitsWithoutLimit(t *testing.T) {
	const now = math.MaxInt64
	l := mustNew(t, Config{Limit: 1, Period: time.Second})
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second}})
	s, err := NewSharded(ShardedConfig{Config: Config{Limit: 2, Period: time.Second}, Shards: 2})
	require.NoError(t, err)
	var nl, nk, ns int
	for range 10 {
		if l.AllowN(now, 1) {
			nl++
		}
		if k.AllowN("a", now, 1) {
			nk++
		}
		if s.AllowN(now, 1) {
			ns++
		}
	}
	require.LessOrEqual(t, nl, 1, "Limiter, burst 1")
	require.LessOrEqual(t, nk, 1, "Keyed, burst 1")
	require.LessOrEqual(t, ns, 2, "Sharded, 2 shards of burst 1")
}

// TestReview3KeyedTATEqualToEvictedMarker: the evicted marker is a legal TAT
// value (retired = 2⁶²). A reading of 2⁶² − k leaves a key's TAT exactly on
// it; the next call takes the cell for evicted, deletes it from the map
// without decrementing the key count, and inserts a fresh cell with a full
// burst: a burst of 1 admits twice at the same instant and Len counts one
// key twice (the count drifts up for ever, and MaxKeys shrinks with it).
func TestReview3KeyedTATEqualToEvictedMarker(t *testing.T) {
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second}, MaxKeys: 4})
	now := int64(evicted) - k.p.k
	require.True(t, k.AllowN("a", now, 1))
	require.False(t, k.AllowN("a", now, 1), "burst 1 admitted twice")
	require.Equal(t, 1, k.Len(), "one key")
}

// TestReview3NegativeReadingsFreezeTime: a clock whose readings are
// negative (a legal arbitrary epoch: rampart.NewManualTicker(-20s), or a user
// Ticker measured from a later instant) must still refill the bucket. Units
// used to count every negative reading as 0 (one admission in ten seconds
// at one per second); a limiter now takes its origin from such a clock.
func TestReview3NegativeReadingsFreezeTime(t *testing.T) {
	tk := rampart.NewManualTicker(-int64(20 * time.Second))
	l := mustNew(t, Config{Limit: 1, Period: time.Second, Ticker: tk})
	admitted := 0
	for range 10 {
		if l.Allow() {
			admitted++
		}
		tk.Advance(time.Second)
	}
	require.Equal(t, 10, admitted, "one per second over 10 s")

	// The same clock through Keyed and Sharded (one shard: its burst and
	// rate are the configured ones).
	tk = rampart.NewManualTicker(-int64(20 * time.Second))
	kl, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: tk}})
	require.NoError(t, err)
	sl, err := NewSharded(ShardedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: tk}, Shards: 1})
	require.NoError(t, err)
	keyed, sharded := 0, 0
	for range 10 {
		if kl.TryAcquire("k", tk.Now(), 1) == 0 {
			keyed++
		}
		if sl.TryAcquire(tk.Now(), 1) == 0 {
			sharded++
		}
		tk.Advance(time.Second)
	}
	require.Equal(t, 10, keyed, "Keyed: one per second over 10 s")
	require.Equal(t, 10, sharded, "Sharded: one per second over 10 s")
}

// TestReview3SetRateKeepsAHugeDebt: replace() converts the available permits
// to the new units with big.Int and keeps them only when the result fits an
// int64; a debt so large that it does not (permits reserved far ahead at a
// fast rate, then the rate lowered a lot) falls through to availNew = tau:
// the limiter forgets the debt and hands out a full burst at once, instead
// of keeping the debt capped at -maxReserve.
func TestReview3SetRateKeepsAHugeDebt(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 1e9, Burst: 1_000_000, Ticker: tk})
	for range 2000 { // 2e9 permits, two seconds ahead at 1e9 per second
		_, err := l.Reserve(0, 1_000_000, time.Duration(math.MaxInt64))
		require.NoError(t, err)
	}
	require.Less(t, l.Tokens(0), -1e9)
	require.NoError(t, l.SetRate(0.1)) // 2e9 permits at 0.1/s: 2e19 units, past int64
	require.Less(t, l.Tokens(0), 0.0, "the debt must survive the rate change (capped at maxReserve)")
	require.False(t, l.AllowN(0, 1))
}

// TestReview3KeyedEvictionCreatesCreditForAStaleReading: Keyed.TryAcquire
// promises the contract of Limiter.TryAcquire, including "a now older than
// other callers' readings never creates credit". Eviction breaks it: a cell
// whose TAT has passed at the sweeper's reading is dropped, and a caller
// whose reading is older than that TAT then gets a fresh cell with a full
// burst, where the evicted cell (and a Limiter) would have refused. Here the
// key takes its burst of 5 at 10 s, a Sweep at 11 s evicts it, and a caller
// still at 10 s takes 5 more: 10 admissions at one instant against a bound
// of burst + 1 = 6.
func TestReview3KeyedEvictionCreatesCreditForAStaleReading(t *testing.T) {
	sec := int64(time.Second)
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 5, Period: time.Second}})
	l := mustNew(t, Config{Limit: 5, Period: time.Second})
	for range 5 {
		require.True(t, k.AllowN("a", 10*sec, 1))
		require.True(t, l.AllowN(10*sec, 1))
	}
	require.Equal(t, 1, k.Sweep(11*sec)) // idle at 11 s: evicted
	require.False(t, l.AllowN(10*sec, 1), "the Limiter refuses the stale reading")
	require.False(t, k.AllowN("a", 10*sec, 1), "the evicted key must refuse it too")
}

// TestReview3ReserveCancelConcurrentAccounting: goroutines reserve one
// permit at a fixed reading (maxWait 0, so only immediate reservations) and
// cancel every other one. Cancel is exact or nothing, so at the end the
// tokens left are exactly the burst minus the reservations kept, and never
// more than the burst were kept.
func TestReview3ReserveCancelConcurrentAccounting(t *testing.T) {
	const burst = 1000
	l := mustNew(t, Config{Rate: 1, Burst: burst, CountStats: true})
	var kept, cancelled, refused atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				r, err := l.Reserve(0, 1, 0)
				if err != nil {
					require.ErrorIs(t, err, ErrLimited)
					refused.Add(1)
					continue
				}
				if i%2 == 0 && r.Cancel(0) {
					cancelled.Add(1)
					continue
				}
				kept.Add(1)
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, kept.Load(), int64(burst))
	require.InDelta(t, float64(burst-kept.Load()), l.Tokens(0), 1e-9)
	st := l.Stats()
	require.Equal(t, uint64(kept.Load()+cancelled.Load()), st.Admitted) // Reserve counts; Cancel does not uncount
	require.Equal(t, uint64(refused.Load()), st.Rejected)
}

// TestReview3ListenerGoexitKeyedFullTable: a rejection listener that calls
// runtime.Goexit on the full-table path of a new key must not leak the slot
// the insert reserved (keys.Add(1) is undone before the listener runs).
func TestReview3ListenerGoexitKeyedFullTable(t *testing.T) {
	sec := int64(time.Second)
	var goexit atomic.Bool
	k := mustKeyed(t, KeyedConfig{Config: Config{Limit: 1, Period: time.Second, OnRejected: func(int, int64) {
		if goexit.Load() {
			runtime.Goexit()
		}
	}}, MaxKeys: 1})
	require.True(t, k.AllowN("a", 0, 1)) // active until 1 s
	goexit.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.AllowN("b", 0, 1) // table full: rejected, listener exits the goroutine
		t.Error("Goexit did not exit")
	}()
	<-done
	goexit.Store(false)
	require.Equal(t, 1, k.Len())
	require.True(t, k.AllowN("b", sec, 1), "a idle at 1 s: evicted for b")
	require.Equal(t, 1, k.Len())
}

// TestReview3ListenerPanicsCounted: a panicking OnRejected never breaks the
// call and is counted, for Keyed and Sharded (Limiter is covered elsewhere);
// the rejection is still reported and counted once.
func TestReview3ListenerPanicsCounted(t *testing.T) {
	boom := func(int, int64) { panic("boom") }
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1, OnRejected: boom, CountStats: true}})
	require.True(t, k.AllowN("a", 0, 1))
	require.Equal(t, int64(time.Second), k.TryAcquire("a", 0, 1))
	require.Equal(t, Never, k.TryAcquire("a", 0, 2))
	ks := k.Stats()
	require.Equal(t, uint64(2), ks.ListenerPanics)
	require.Equal(t, uint64(2), ks.Rejected)
	require.Equal(t, uint64(1), ks.Admitted)

	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 2, Burst: 2, OnRejected: boom, CountStats: true}, Shards: 2})
	require.NoError(t, err)
	admitted := 0
	for range 4 {
		if s.AllowN(0, 1) {
			admitted++
		}
	}
	require.Equal(t, 2, admitted) // each shard: burst 1
	ss := s.Stats()
	require.Equal(t, uint64(2), ss.ListenerPanics)
	require.Equal(t, uint64(2), ss.Rejected)
	require.Equal(t, uint64(2), ss.Admitted)
}

// TestReview3ConfigErrors: every invalid configuration is a
// *rampart.ConfigError at construction (Keyed and Sharded included), and an
// invalid SetRate/SetBurst/SetLimit leaves the limiter as it was.
func TestReview3ConfigErrors(t *testing.T) {
	isConfigError := func(err error, what string) {
		t.Helper()
		var ce *rampart.ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v is not a *rampart.ConfigError", what, err)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, what)
	}
	bad := map[string]Config{
		"RefillRate NaN":     {Capacity: 1, RefillRate: math.NaN()},
		"RefillRate -Inf":    {Capacity: 1, RefillRate: math.Inf(-1)},
		"RefillRate huge":    {Capacity: 1, RefillRate: 1e300},
		"Rate subnormal":     {Rate: 5e-324},
		"Rate -0 and Limit":  {Rate: math.Copysign(0, -1), Limit: 0, Period: -1},
		"Period MaxInt64":    {Limit: 1, Period: time.Duration(math.MaxInt64)},
		"Limit MaxInt":       {Limit: math.MaxInt, Period: time.Second},
		"Capacity MaxInt":    {Capacity: math.MaxInt, RefillRate: 1},
		"Burst only":         {Burst: 3},
		"three forms":        {Rate: 1, Limit: 1, Capacity: 1, RefillRate: 1},
		"Capacity negative":  {Capacity: -1, RefillRate: 1},
		"Period, no Limit":   {Period: time.Second},
		"Burst huge, slow":   {Limit: 1, Period: 1 << 40, Burst: 1 << 30},
		"RefillRate no cap.": {RefillRate: 1},
	}
	for what, c := range bad {
		_, err := New(c)
		isConfigError(err, what)
		_, err = NewKeyed(KeyedConfig{Config: c})
		isConfigError(err, "keyed "+what)
		_, err = NewSharded(ShardedConfig{Config: c, Shards: 2})
		isConfigError(err, "sharded "+what)
	}
	_, err := NewKeyed(KeyedConfig{Config: Config{Rate: 1}, MaxKeys: -1})
	isConfigError(err, "MaxKeys")
	for _, shards := range []int{-1, MaxShards + 1, math.MaxInt} {
		_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1}, Shards: shards})
		isConfigError(err, "Shards")
	}
	// An interval that fits alone but overflows once multiplied by K.
	_, err = NewSharded(ShardedConfig{Config: Config{Limit: 1, Period: 1 << 60}, Shards: 4})
	isConfigError(err, "Shards × interval")

	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 10, Burst: 4, Ticker: tk})
	require.True(t, l.AllowN(0, 1))
	st := l.st.Load()
	for what, err := range map[string]error{
		"SetRate NaN":       l.SetRate(math.NaN()),
		"SetRate +Inf":      l.SetRate(math.Inf(1)),
		"SetRate 0":         l.SetRate(0),
		"SetRate too fast":  l.SetRate(2e9),
		"SetRate too slow":  l.SetRate(1e-300),
		"SetBurst negative": l.SetBurst(-1),
		"SetBurst overflow": l.SetBurst(math.MaxInt),
		"SetLimit 0":        l.SetLimit(0, time.Second),
		"SetLimit period":   l.SetLimit(1, -time.Second),
		"SetLimit too fast": l.SetLimit(3, 2),
	} {
		isConfigError(err, what)
	}
	require.Same(t, st, l.st.Load(), "a refused change must not replace the state")
	require.InDelta(t, 3.0, l.Tokens(0), 1e-9)
}

// TestReview3ShardedInvalidN: an n above the shard burst (but within the
// configured total) can never be admitted by any shard: Never, counted once.
func TestReview3ShardedInvalidN(t *testing.T) {
	var got []int64
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 8, Burst: 8, CountStats: true,
		OnRejected: func(_ int, w int64) { got = append(got, w) }}, Shards: 4})
	require.NoError(t, err)
	require.Equal(t, Never, s.TryAcquire(0, 3)) // shard burst 2
	require.Equal(t, Never, s.TryAcquire(0, 0))
	require.Zero(t, s.TryAcquire(0, 2))
	require.Equal(t, []int64{Never, Never}, got)
	require.Equal(t, uint64(2), s.Stats().Rejected)
	require.Equal(t, 8, s.Stats().Burst)
	require.InDelta(t, 8.0, s.Stats().Rate, 1e-9)
}

// TestReview3AllocsRejectPaths: the reject paths not gated elsewhere (a Keyed
// rejection with a listener and counters, a Sharded rejection with a
// listener and counters, a Reserve that commits a future slot) allocate
// nothing.
func TestReview3AllocsRejectPaths(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	listener := func(int, int64) {}
	k := mustKeyed(t, KeyedConfig{Config: Config{Rate: 1e-3, CountStats: true, OnRejected: listener}})
	require.True(t, k.AllowN("x", 0, 1))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if k.TryAcquire("x", 5, 1) == 0 || k.TryAcquire("x", 5, 2) != Never {
			panic("admitted")
		}
	}))
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 1e-3, Burst: 2, CountStats: true, OnRejected: listener}, Shards: 2})
	require.NoError(t, err)
	require.True(t, s.AllowN(0, 1))
	require.True(t, s.AllowN(0, 1))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		if s.TryAcquire(5, 1) == 0 {
			panic("admitted")
		}
	}))
	l := mustNew(t, Config{Limit: 1e9, Period: time.Second, Burst: 1})
	require.True(t, l.AllowN(0, 1))
	require.Zero(t, testing.AllocsPerRun(1000, func() {
		r, err := l.Reserve(0, 1, time.Hour) // a slot further ahead each time
		if err != nil || r.Delay() == 0 {
			panic("not reserved ahead")
		}
	}))
}
