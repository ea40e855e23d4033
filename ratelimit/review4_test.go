package ratelimit

// Fourth review of package ratelimit: Reserve/Reservation, Wait, Tokens,
// SetRate/SetBurst under load, Keyed and Sharded, the reading cap (maxUnits)
// and the negative-clock origin. Reproductions of bugs are skipped with
// "BUG: ..."; the other tests guard behaviour not covered elsewhere.

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// TestReview4TokensDuringSetRate: replace swaps retired into the old TAT word
// and publishes the new state only after some big.Int arithmetic. Tokens
// reloads the state once when it sees retired, but the new state is usually
// not published yet, so it computes with TAT = retired and reports about
// -6.9e18/k permits (e.g. -6.9e9 for 1/s) to a caller that merely asked
// during a SetRate.
func TestReview4TokensDuringSetRate(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 10, Burst: 10, Ticker: tk})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			require.NoError(t, l.SetRate(float64(10+i%2)))
		}
	})
	worst := math.Inf(1)
	for range 200000 {
		worst = min(worst, l.Tokens(0))
		if worst < -1 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	require.GreaterOrEqual(t, worst, 0.0, "Tokens of a full, untouched limiter")
}

// TestReview4SaturatedReadingWaitLies: past the reading cap (2⁶² units, from
// a 2⁶¹–2⁶² ns reading) time stops, yet waitFor answers 1 ns (earliest
// returns MaxInt64/2, below now), so Reserve commits reservations "ready in
// 1 ns" until maxReserve units of debt (2⁶⁰/k: a billion for 1/s), and Wait
// admits them all after a 1 ns sleep. TimeToAct is now+1, which wraps to
// math.MinInt64 at now = math.MaxInt64.
func TestReview4SaturatedReadingWaitLies(t *testing.T) {
	for _, now := range []int64{1 << 62, math.MaxInt64} {
		l := mustNew(t, Config{Limit: 1, Period: time.Second, Ticker: rampart.NewManualTicker(now)})
		require.True(t, l.AllowN(now, 1))
		// One permit per second: nothing more may be admitted for an hour of
		// readings that do not even move.
		admitted := 0
		for range 100 {
			r, err := l.Reserve(now, 1, time.Hour)
			if err != nil {
				break
			}
			require.GreaterOrEqual(t, r.TimeToAct(), now, "TimeToAct wrapped")
			if r.Delay() < time.Hour {
				admitted++
			}
		}
		require.LessOrEqual(t, admitted, 0, "reservations ready within the hour at a 1/s limit, reading %d", now)
		require.NotEqual(t, int64(1), l.TryAcquire(now, 1), "a wait of 1 ns that never comes")
	}
}

// TestReview4ReservationAccessors: Delay, TimeToAct, DelayFrom and N of a
// delayed reservation, and the exact-or-nothing Cancel rule step by step.
func TestReview4ReservationAccessors(t *testing.T) {
	const ms = int64(time.Millisecond)
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 10, Burst: 2, Ticker: tk}) // 100 ms interval
	r0, err := l.Reserve(0, 2, 0)
	require.NoError(t, err)
	require.Zero(t, r0.Delay())
	require.Equal(t, int64(0), r0.TimeToAct())

	r1, err := l.Reserve(10*ms, 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, 90*time.Millisecond, r1.Delay())
	require.Equal(t, 100*ms, r1.TimeToAct())
	require.Equal(t, 40*time.Millisecond, r1.DelayFrom(60*ms))
	require.Zero(t, r1.DelayFrom(200*ms))
	require.Equal(t, 1, r1.N())
	require.True(t, r1.OK())

	r2, err := l.Reserve(10*ms, 2, time.Second)
	require.NoError(t, err)
	require.Equal(t, 290*time.Millisecond, r2.Delay())

	// r1 is not the latest: nothing back, and it is spent.
	require.False(t, r1.Cancel(20*ms))
	require.False(t, r1.OK())
	// r2's time has passed: nothing back.
	r2b := r2
	require.False(t, r2b.Cancel(301*ms))
	// r2 at its time exactly: back.
	require.True(t, r2.Cancel(300*ms))
	require.False(t, r2.Cancel(300*ms)) // twice: no-op
	// Now r1 is the latest again but was spent by its failed Cancel.
	require.False(t, r1.Cancel(20*ms))
	require.InDelta(t, -0.8, l.Tokens(20*ms), 1e-9)

	// A rejected reservation commits nothing and its zero value is not OK.
	before := l.Tokens(20 * ms)
	r3, err := l.Reserve(20*ms, 2, 10*time.Millisecond)
	require.ErrorIs(t, err, ErrLimited)
	require.False(t, r3.OK())
	require.Equal(t, before, l.Tokens(20*ms))

	// Cancel after SetBurst gives nothing back.
	r4, err := l.Reserve(20*ms, 1, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.SetBurst(2))
	require.False(t, r4.Cancel(20*ms))
}

// TestReview4ReserveCancelRestoresExactly: cancelling a stack of
// reservations in reverse order restores the limiter exactly, for a rate
// whose interval is not a whole number of ns (units ≠ ns).
func TestReview4ReserveCancelRestoresExactly(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: 3, Burst: 3, Ticker: tk})
	now := int64(12345)
	before := l.Tokens(now)
	var rs []Reservation
	for range 10 {
		r, err := l.Reserve(now, 2, time.Hour)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		require.True(t, rs[i].Cancel(now), "reservation %d", i)
	}
	require.Equal(t, before, l.Tokens(now))
	require.True(t, l.AllowN(now, 3))
	require.False(t, l.AllowN(now, 1))
}

// TestReview4AdmissionBoundUnderSetRate: admitters (TryAcquire, Reserve with
// no wait and sometimes Cancel) race with SetRate/SetBurst/SetLimit while a
// manual clock advances. Never more than maxBurst + maxRate·elapsed (+1 per
// rate epoch for rounding) may be admitted.
func TestReview4AdmissionBoundUnderSetRate(t *testing.T) {
	const maxRate, maxBurst = 1000.0, 20
	tk := rampart.NewManualTicker(0)
	l := mustNew(t, Config{Rate: maxRate, Burst: maxBurst, Ticker: tk})
	var admitted, epochs atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				now := tk.Now()
				n := 1 + (i+g)%3
				switch i % 3 {
				case 0:
					if l.TryAcquire(now, n) == 0 {
						admitted.Add(int64(n))
					}
				case 1:
					if l.AllowN(now, n) {
						admitted.Add(int64(n))
					}
				default:
					r, err := l.Reserve(now, n, 0)
					if err == nil {
						admitted.Add(int64(n))
						if i%2 == 0 && r.Cancel(now) {
							admitted.Add(-int64(n))
						}
					}
				}
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			switch i % 3 {
			case 0:
				require.NoError(t, l.SetRate(maxRate/float64(1+i%4)))
			case 1:
				require.NoError(t, l.SetBurst(1+i%maxBurst))
			default:
				require.NoError(t, l.SetLimit(int(maxRate)/(1+i%3), time.Second))
			}
			epochs.Add(1)
			runtime.Gosched()
		}
	})
	for range 20000 {
		tk.Advance(37 * time.Microsecond)
		if admitted.Load()%7 == 0 {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	elapsed := float64(tk.Now()) / 1e9
	bound := maxBurst + maxRate*elapsed + float64(epochs.Load()) + 1
	require.LessOrEqual(t, float64(admitted.Load()), bound, "admitted over %.3fs with %d epochs", elapsed, epochs.Load())
	require.Positive(t, admitted.Load())
}

// TestReview4NegativeOriginReserve: on a clock that started below 0, Reserve,
// TimeToAct, Cancel and TryAcquire's wait all count from the origin; readings
// before the origin count as early arrivals.
func TestReview4NegativeOriginReserve(t *testing.T) {
	const s = int64(time.Second)
	start := -10 * s
	tk := rampart.NewManualTicker(start)
	l := mustNew(t, Config{Limit: 1, Period: time.Second, Ticker: tk})
	require.True(t, l.AllowN(start, 1))
	r, err := l.Reserve(start, 1, time.Hour)
	require.NoError(t, err)
	require.Equal(t, start+s, r.TimeToAct())
	require.Equal(t, time.Second, r.Delay())
	require.True(t, r.Cancel(start))
	require.Equal(t, s, l.TryAcquire(start, 1))
	// A reading older than the origin: an early arrival, wait measured from it.
	require.Equal(t, 2*s, l.TryAcquire(start-s, 1))
	require.True(t, l.AllowN(start+s, 1))
	tk.Set(start + s) // SetRate counts the permits at the ticker's reading
	require.NoError(t, l.SetRate(2))
	require.InDelta(t, 0.0, l.Tokens(start+s), 1e-9)
	require.True(t, l.AllowN(start+s+s/2, 1)) // origin kept across SetRate
}

// TestReview4KeyedSweepLenFloor: Len and Sweep counts, a full table's
// rejection wait (until the soonest key goes idle), eviction when a key goes
// idle, and the floor: a new key with a reading older than an evicted TAT
// gets no fresh burst.
func TestReview4KeyedSweepLenFloor(t *testing.T) {
	const s = int64(time.Second)
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: rampart.NewManualTicker(0)}, MaxKeys: 2})
	require.NoError(t, err)
	require.True(t, k.AllowN("a", 0, 1))
	require.True(t, k.AllowN("b", s/2, 1))
	require.Equal(t, 2, k.Len())
	require.Equal(t, 0, k.Sweep(s/2))
	// Full of active keys: "a" idles at 1 s.
	require.Equal(t, s-s/4, k.TryAcquire("c", s/4, 1))
	require.Equal(t, 2, k.Len())
	// At 1 s "a" is idle: "c" takes its slot.
	require.True(t, k.AllowN("c", s, 1))
	require.Equal(t, 2, k.Len())
	require.Equal(t, uint64(1), k.Stats().Evicted)
	// Sweep at 2 s evicts both ("b" idle at 1.5 s, "c" at 2 s).
	require.Equal(t, 2, k.Sweep(2*s))
	require.Equal(t, 0, k.Len())
	require.Equal(t, 0, k.Sweep(2*s))
	// Floor: the evicted TAT was 2 s; a reading of 1.5 s is an early arrival.
	require.Equal(t, s/2, k.TryAcquire("d", 3*s/2, 1))
	require.Equal(t, 1, k.Len()) // the cell was inserted even though rejected
	require.True(t, k.AllowN("d", 2*s, 1))
}

// TestReview4KeyedConcurrentLen: concurrent inserts, admissions and sweeps
// on a small table never leave Len above MaxKeys at rest, and Len equals the
// number of keys in the map at rest.
func TestReview4KeyedConcurrentLen(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	k, err := NewKeyed(KeyedConfig{Config: Config{Rate: 1000, Burst: 2, Ticker: tk}, MaxKeys: 8})
	require.NoError(t, err)
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				now := tk.Now()
				k.TryAcquire(keys[(i*7+g)%len(keys)], now, 1)
				if i%50 == 0 {
					k.Sweep(now)
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
	k.Sweep(tk.Now() + int64(time.Second))
	require.Equal(t, 0, k.Len())
}

// TestReview4ShardedShardBurstAndStats: an n above the shard burst but within
// the configured burst can never be admitted (Never); two shards of burst 1
// admit exactly two at one instant whatever shard is drawn first (the second
// probe borrows from the neighbour); Stats reports the shards' totals.
func TestReview4ShardedShardBurstAndStats(t *testing.T) {
	for range 50 {
		s, err := NewSharded(ShardedConfig{Config: Config{Rate: 10, Burst: 2, Ticker: rampart.NewManualTicker(0), CountStats: true}, Shards: 2})
		require.NoError(t, err)
		require.Equal(t, Never, s.TryAcquire(0, 2)) // shard burst is 1
		require.True(t, s.AllowN(0, 1))
		require.True(t, s.AllowN(0, 1))
		w := s.TryAcquire(0, 1)
		require.Equal(t, int64(200*time.Millisecond), w) // each shard runs at 5/s
		st := s.Stats()
		require.Equal(t, uint64(2), st.Admitted)
		require.Equal(t, uint64(2), st.Rejected)
		require.InDelta(t, 10.0, st.Rate, 1e-9)
		require.Equal(t, 2, st.Burst)
		require.Equal(t, 100*time.Millisecond, st.Interval)
	}
	// Burst not divisible by K: the total is K·⌈burst/K⌉.
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 10, Burst: 5}, Shards: 4})
	require.NoError(t, err)
	require.Equal(t, 8, s.Stats().Burst)
}

// TestReview4NegativeOriginKeyedSharded: Keyed and Sharded on a clock that
// started below 0 let time move from their origin too.
func TestReview4NegativeOriginKeyedSharded(t *testing.T) {
	const s = int64(time.Second)
	start := -10 * s
	k, err := NewKeyed(KeyedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: rampart.NewManualTicker(start)}, MaxKeys: 1})
	require.NoError(t, err)
	require.True(t, k.AllowN("a", start, 1))
	require.Equal(t, s, k.TryAcquire("a", start, 1))
	require.Equal(t, s, k.TryAcquire("b", start, 1)) // full table: until "a" idles
	require.True(t, k.AllowN("b", start+s, 1))       // "a" evicted
	require.Equal(t, 1, k.Len())
	require.Equal(t, 1, k.Sweep(start+2*s))

	sh, err := NewSharded(ShardedConfig{Config: Config{Limit: 2, Period: time.Second, Ticker: rampart.NewManualTicker(start)}, Shards: 2})
	require.NoError(t, err)
	require.True(t, sh.AllowN(start, 1))
	require.True(t, sh.AllowN(start, 1))
	require.Equal(t, s, sh.TryAcquire(start, 1))
	require.True(t, sh.AllowN(start+s, 1))
}
