package ratelimit

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
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
	testkit.RequireConfigError(t, err, "ratelimit", "Shards")
	// A huge K is refused at construction rather than exhausting memory in it.
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e6}, Shards: 1 << 30})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	testkit.RequireConfigError(t, err, "ratelimit", "Shards")
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e6}, Shards: MaxShards})
	require.NoError(t, err)
	_, err = NewSharded(ShardedConfig{Config: Config{Rate: 1e-9}, Shards: 64})
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	testkit.RequireConfigError(t, err, "ratelimit", "Shards")
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

// TestShardedUpdate: Update splits the new total rate and burst between the
// shards, each keeping its permits; a change of Shards, Name, Ticker,
// CountStats or OnRejected is refused with a ConfigError naming it.
func TestShardedUpdate(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	c := ShardedConfig{Config: Config{Rate: 8, Burst: 8, Ticker: tk, Name: "edge"}, Shards: 4}
	s, err := NewSharded(c)
	require.NoError(t, err)
	for _, l := range s.shards { // drain every shard (a shard burst of 2)
		require.True(t, l.AllowN(0, 2))
	}
	require.False(t, s.AllowN(0, 1))
	c.Rate, c.Burst = 80, 16
	require.NoError(t, s.Update(c))
	st := s.Stats()
	require.InDelta(t, 80.0, st.Rate, 1e-9)
	require.Equal(t, 16, st.Burst)
	require.False(t, s.AllowN(0, 1), "the drained shards kept their debt")
	tk.Advance(50 * time.Millisecond) // 20/s per shard: one permit each
	for _, l := range s.shards {
		require.InDelta(t, 1.0, l.TokensAt(tk.Now()), 1e-9)
	}

	for _, tc := range []struct {
		field  string
		change func(*ShardedConfig)
	}{
		{"Shards", func(c *ShardedConfig) { c.Shards = 2 }},
		{"Shards", func(c *ShardedConfig) { c.Shards = -1 }},
		{"Name", func(c *ShardedConfig) { c.Name = "other" }},
		{"Ticker", func(c *ShardedConfig) { c.Ticker = nil }},
		{"CountStats", func(c *ShardedConfig) { c.CountStats = true }},
		{"OnRejected", func(c *ShardedConfig) { c.OnRejected = func(int, time.Duration) {} }},
		{"Rate", func(c *ShardedConfig) { c.Rate = 0 }},
	} {
		bad := c
		bad.Rate = 800
		tc.change(&bad)
		err := s.Update(bad)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, tc.field)
		require.Equal(t, tc.field, ce.Field, err.Error())
		require.InDelta(t, 80.0, s.Stats().Rate, 1e-9, "a refused Update applied its rate")
	}
	c.Compact = true // ignored by Sharded, as by NewSharded
	require.NoError(t, s.Update(c))
	c.Name = "" // the name NewSharded was given
	require.NoError(t, s.Update(c))
	require.Equal(t, "edge", s.RejectedError().(*rampart.RejectedError).Name())
	require.Equal(t, "edge", s.Config().Name)
}

// shardConfigs counts the shards holding each (interval, burst).
func shardConfigs(s *Sharded) map[[3]uint64]int {
	m := map[[3]uint64]int{}
	for _, l := range s.shards {
		st := l.st.Load()
		m[[3]uint64{st.num, st.den, uint64(st.burst)}]++
	}
	return m
}

// panicTicker reads 1 s, and panics on its panicAt-th reading.
type panicTicker struct{ calls, panicAt atomic.Int64 }

func (p *panicTicker) Now() int64 {
	if p.calls.Add(1) == p.panicAt.Load() {
		panic("ticker")
	}
	return 1e9
}

// TestShardedUpdateThatPanicsChangesNoShard: a Ticker that panics during
// an Update, at whichever of its readings, leaves every shard on one
// configuration (Update reads the clock once, before any shard changes),
// and a later Update applies.
func TestShardedUpdateThatPanicsChangesNoShard(t *testing.T) {
	for at := int64(1); at <= 5; at++ {
		tk := &panicTicker{}
		c := ShardedConfig{Config: Config{Rate: 100, Burst: 8, Ticker: tk}, Shards: 4}
		s, err := NewSharded(c)
		require.NoError(t, err)
		tk.panicAt.Store(tk.calls.Load() + at)
		c.Rate = 1000
		func() {
			defer func() { _ = recover() }()
			_ = s.Update(c)
		}()
		require.Len(t, shardConfigs(s), 1, "a panic at the Update's reading %d left the shards on two configurations", at)
		tk.panicAt.Store(0)
		c.Rate = 2000
		require.NoError(t, s.Update(c))
		require.Len(t, shardConfigs(s), 1)
		require.InDelta(t, 2000.0, s.Stats().Rate, 1e-9)
	}
}

// TestShardedRacingUpdatesApplyOneConfig: two Updates racing (with
// admissions beside them) leave every shard on the configuration of one
// of them, never some shards on each.
func TestShardedRacingUpdatesApplyOneConfig(t *testing.T) {
	a := ShardedConfig{Config: Config{Rate: 1000, Burst: 64}, Shards: 64}
	b := a
	b.Rate = 2000
	s, err := NewSharded(a)
	require.NoError(t, err)
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for range 2 { // admissions, so that the updaters are descheduled at random points
		bg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					s.Allow()
					runtime.Gosched()
				}
			}
		})
	}
	defer func() { close(stop); bg.Wait() }()
	for round := range 1000 {
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.Update(a) })
		wg.Go(func() { _ = s.Update(b) })
		wg.Wait()
		if m := shardConfigs(s); len(m) != 1 {
			t.Fatalf("round %d: after two racing Updates the shards hold %d configurations: %v", round, len(m), m)
		}
	}
}

// TestShardedUpdateAfterGOMAXPROCSChanges: with Shards 0, Update accepts
// the Config NewSharded was given after GOMAXPROCS changed (the runtime
// changes it by itself when the container's CPU limit does): 0 means the
// shards NewSharded allocated.
func TestShardedUpdateAfterGOMAXPROCSChanges(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(old)
	c := ShardedConfig{Config: Config{Rate: 1000, Burst: 64}}
	s, err := NewSharded(c)
	require.NoError(t, err)
	require.Equal(t, 1, s.Shards())
	runtime.GOMAXPROCS(2)
	c.Rate = 2000
	require.NoError(t, s.Update(c))
	require.InDelta(t, 2000.0, s.Stats().Rate, 1e-9)
	require.Equal(t, 1, s.Config().Shards)
}

// TestShardedConfigRoundTrips: Config returns the total configuration in
// force (the exact Limit/Period form, the total burst, K shards, the
// defaults filled in); Update(Config()) changes nothing.
func TestShardedConfigRoundTrips(t *testing.T) {
	for _, c := range []ShardedConfig{
		{Config: Config{Rate: 1000, Burst: 10}, Shards: 4},
		{Config: Config{Rate: 3, Burst: 7, Name: "edge", CountStats: true}, Shards: 3},
		{Config: Config{Limit: 7, Period: 3 * time.Second}, Shards: 1},
		{Config: Config{Rate: 1e9 / 4096, Burst: 4096}, Shards: 4096},
	} {
		s, err := NewSharded(c)
		require.NoError(t, err)
		before := shardConfigs(s)
		got := s.Config()
		require.Equal(t, c.Shards, got.Shards)
		require.Equal(t, c.Name, got.Name)
		require.Equal(t, c.CountStats, got.CountStats)
		p, err := c.Config.validate()
		require.NoError(t, err)
		require.Equal(t, int(p.burst), got.Burst, "the total burst given (its default filled in), not the shards' sum")
		require.NoError(t, s.Update(got), "%+v", c)
		require.Equal(t, before, shardConfigs(s))
		again, err := NewSharded(got)
		require.NoError(t, err)
		require.Equal(t, before, shardConfigs(again))
	}
}

// TestShardedUpdateRacingAdmissions: Updates of the total rate and burst
// race with admissions on a clock that does not move: no shard ever
// hands out more than the largest burst it had, so the admissions stay
// within the sum of the shards' largest bursts.
func TestShardedUpdateRacingAdmissions(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	c := ShardedConfig{Config: Config{Rate: 1000, Burst: 16, Ticker: tk, CountStats: true}, Shards: 4}
	s, err := NewSharded(c)
	require.NoError(t, err)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				if s.Allow() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			c := c
			c.Rate, c.Burst = float64(500+i), 4+i%13
			require.NoError(t, s.Update(c))
		}
	})
	wg.Wait()
	require.LessOrEqual(t, admitted.Load(), int64(16)) // time never moved: at most the first bursts
	require.Equal(t, uint64(admitted.Load()), s.Stats().Admitted)
	require.Equal(t, uint64(4*2000-admitted.Load()), s.Stats().Rejected)
}

// TestShardedShardBurstAndStats: an n above the shard burst but within the
// configured burst can never be admitted by any shard (Never, reported to
// the listener and counted once, as is an n below 1); two shards of burst
// 1 admit exactly two at one instant whatever shard is drawn first (the
// second probe borrows from the neighbour); Stats reports the shards'
// totals, the burst as K·⌈burst/K⌉.
func TestShardedShardBurstAndStats(t *testing.T) {
	var got []int64
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 8, Burst: 8, CountStats: true,
		OnRejected: func(_ int, w time.Duration) { got = append(got, int64(w)) }}, Shards: 4})
	require.NoError(t, err)
	require.Equal(t, int64(Never), int64(s.AdmitN(0, 3))) // shard burst 2
	require.Equal(t, int64(Never), int64(s.AdmitN(0, 0)))
	require.Zero(t, int64(s.AdmitN(0, 2)))
	require.Equal(t, []int64{int64(Never), int64(Never)}, got)
	require.Equal(t, uint64(2), s.Stats().Rejected)
	require.Equal(t, 8, s.Stats().Burst)
	require.InDelta(t, 8.0, s.Stats().Rate, 1e-9)

	for range 50 {
		s, err := NewSharded(ShardedConfig{Config: Config{Rate: 10, Burst: 2, Ticker: rampart.NewManualTicker(0), CountStats: true}, Shards: 2})
		require.NoError(t, err)
		require.Equal(t, int64(Never), int64(s.AdmitN(0, 2))) // shard burst is 1
		require.True(t, s.AllowN(0, 1))
		require.True(t, s.AllowN(0, 1))
		w := int64(s.AdmitN(0, 1))
		require.Equal(t, int64(200*time.Millisecond), w) // each shard runs at 5/s
		st := s.Stats()
		require.Equal(t, uint64(2), st.Admitted)
		require.Equal(t, uint64(2), st.Rejected)
		require.InDelta(t, 10.0, st.Rate, 1e-9)
		require.Equal(t, 2, st.Burst)
		require.Equal(t, 100*time.Millisecond, st.Interval)
	}
	// Burst not divisible by K: the total is K·⌈burst/K⌉.
	s, err = NewSharded(ShardedConfig{Config: Config{Rate: 10, Burst: 5}, Shards: 4})
	require.NoError(t, err)
	require.Equal(t, 8, s.Stats().Burst)
}

// TestShardedListenerPanicIsCounted: a panicking OnRejected never breaks
// the call and is counted; the rejection is still reported and counted
// once.
func TestShardedListenerPanicIsCounted(t *testing.T) {
	boom := func(int, time.Duration) { panic("boom") }
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 2, Burst: 2, OnRejected: boom, CountStats: true}, Shards: 2})
	require.NoError(t, err)
	admitted := countTrue(4, func() bool { return s.AllowN(0, 1) })
	require.Equal(t, 2, admitted) // each shard: burst 1
	ss := s.Stats()
	require.Equal(t, uint64(2), ss.ListenerPanics)
	require.Equal(t, uint64(2), ss.Rejected)
	require.Equal(t, uint64(2), ss.Admitted)
}

// TestShardedNegativeOrigin: on a clock that started below 0, Sharded lets
// time move from its origin: one shard refills one per second, two shards
// wait and admit counting from the origin.
func TestShardedNegativeOrigin(t *testing.T) {
	const s = int64(time.Second)
	tk := rampart.NewManualTicker(-20 * s)
	one, err := NewSharded(ShardedConfig{Config: Config{Limit: 1, Period: time.Second, Ticker: tk}, Shards: 1})
	require.NoError(t, err)
	admitted := countTrue(10, func() bool { defer tk.Advance(time.Second); return int64(one.AdmitN(tk.Now(), 1)) == 0 })
	require.Equal(t, 10, admitted, "one shard: one per second over 10 s")

	start := -10 * s
	sh, err := NewSharded(ShardedConfig{Config: Config{Limit: 2, Period: time.Second, Ticker: rampart.NewManualTicker(start)}, Shards: 2})
	require.NoError(t, err)
	require.True(t, sh.AllowN(start, 1))
	require.True(t, sh.AllowN(start, 1))
	require.Equal(t, s, int64(sh.AdmitN(start, 1)))
	require.True(t, sh.AllowN(start+s, 1))
}

// TestAllocsSharded: a Sharded admission, and a rejection with a listener
// and counters, allocate nothing.
func TestAllocsSharded(t *testing.T) {
	s, err := NewSharded(ShardedConfig{Config: Config{Limit: 1e9, Period: time.Second, Burst: 1 << 30}, Shards: 4})
	require.NoError(t, err)
	testkit.WantAllocs(t, "Allow", 0, func() {
		if !s.Allow() {
			panic("rejected")
		}
	})
	r, err := NewSharded(ShardedConfig{Config: Config{Rate: 1e-3, Burst: 2, CountStats: true, OnRejected: func(int, time.Duration) {}}, Shards: 2})
	require.NoError(t, err)
	require.True(t, r.AllowN(0, 1))
	require.True(t, r.AllowN(0, 1))
	testkit.WantAllocs(t, "AdmitN rejected with listener and counters", 0, func() {
		if int64(r.AdmitN(5, 1)) == 0 {
			panic("admitted")
		}
	})
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
				require.Equal(t, int64(Never), int64(s.AdmitN(now, n)), "n=%d", n)
			}
			admitted := countTrue(20, func() bool { return s.AllowN(now, 1) })
			require.LessOrEqual(t, admitted, 4, "%+v at %d", c, now)
			require.GreaterOrEqual(t, admitted, 2, "%+v at %d: at least one shard's burst", c, now)
			for i, l := range s.shards {
				require.Less(t, l.st.Load().tat.Load(), retired, "%+v at %d: shard %d", c, now, i)
			}
		}
	}
}

// TestShardedShardsDoNotShareCacheLines: each shard's TAT word, written by
// every call routed to it, shares no cache line with another shard's state.
func TestShardedShardsDoNotShareCacheLines(t *testing.T) {
	s, err := NewSharded(ShardedConfig{Config: Config{Rate: 1e6, Burst: 64}, Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	line := uintptr(pad.LineSize)
	for i, a := range s.shards {
		tat := uintptr(unsafe.Pointer(&a.st.Load().tat)) / line
		for j, b := range s.shards {
			if i == j {
				continue
			}
			lo := uintptr(unsafe.Pointer(b.st.Load()))
			hi := lo + unsafe.Sizeof(state{}) - 1
			if lo/line <= tat && tat <= hi/line {
				t.Errorf("shard %d's TAT word shares a cache line with shard %d's state", i, j)
			}
		}
	}
}
