package ratelimit

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/sameptr"
)

// ShardedConfig configures a [Sharded] limiter.
type ShardedConfig struct {
	// Config is the total limit (any of its three forms), split evenly
	// between the shards.
	Config
	// Shards is the number of sub-limiters K. 0 means GOMAXPROCS (at most
	// 64) at NewSharded, and the shards NewSharded allocated at
	// [Sharded.Update]. 1 is a plain Limiter behind one more indirection.
	// At most MaxShards.
	Shards int
}

// MaxShards bounds ShardedConfig.Shards: each shard is a padded limiter of a
// few cache lines, and more shards than cores only lose accuracy.
const MaxShards = 4096

// Sharded is K independent GCRA limiters of rate/K and burst ⌈burst/K⌉ each,
// for extreme contention on one limit. Create it with [NewSharded] and call
// [Sharded.Allow] (or [Sharded.Admit]) as on one [Limiter]; the zero value is
// not usable, and all methods are safe for concurrent use.
//
// Callers spread over K words instead of CASing one. Each call picks a shard at random (the runtime's per-thread
// generator, no shared state) and, when that shard rejects, borrows from the
// next one: two probes at most.
//
// The accuracy trade-off: over any window W the total admitted is at most
// K·⌈burst/K⌉ + rate·W + K (each shard keeps its own bound), against
// burst + rate·W + 1 for one Limiter; under a load above the rate it admits
// slightly less than the rate, because a shard that is full while not probed
// wastes its refill (TestShardedAccuracy, at 10× the rate over 10 s on a
// manual clock, requires at least 99 % of the ideal with K = 2, 4 or 8 and
// a burst of 16, and at least 90 % with K = 8 and a burst of 8, a shard
// burst of 1: keep burst/K at 2 or more). Use it only when a single Limiter's CAS
// is measured to be the bottleneck (dozens of cores on one limit).
type Sharded struct {
	shards     []*Limiter // each without listener or counters
	tk         rampart.Ticker
	rejected   *rampart.RejectedError
	onRejected func(n int, wait time.Duration)
	countStats bool

	admitted       pad.Uint64 // only with CountStats
	rejectedN      pad.Uint64 // only with CountStats
	listenerPanics atomic.Uint64

	// mu serialises Update (and Config's reads): racing Updates apply one
	// configuration each to all the shards, never some shards each. The
	// admissions never take it.
	mu sync.Mutex
	// total is the configuration in force, as Config reports it: the
	// interval num/den ns of the total rate and the total burst (under mu).
	total struct {
		num, den uint64
		burst    int64
	}
}

// NewSharded validates c and returns a sharded limiter.
func NewSharded(c ShardedConfig) (*Sharded, error) {
	sp, k, err := c.shardParams()
	if err != nil {
		return nil, err
	}
	s := &Sharded{shards: make([]*Limiter, k), onRejected: c.OnRejected, countStats: c.CountStats}
	for i := range s.shards {
		l, err := New(Config{Rate: 1, Name: c.Name, Ticker: c.Ticker})
		if err != nil {
			return nil, err
		}
		sp.origin = l.st.Load().origin // the shard's own, from New (one clock)
		// Padded, whatever Config.Compact says: a shard's TAT word is
		// written by every call routed to it, and shards exist to spread
		// those writes over cache lines.
		l.st.Store(newState(sp, l.st.Load().tat.Load(), false))
		s.shards[i] = l
	}
	s.tk = s.shards[0].tk
	s.rejected = s.shards[0].rejected
	s.setTotal(&c)
	return s, nil
}

// setTotal records the total configuration of c, validated, for Config.
func (s *Sharded) setTotal(c *ShardedConfig) {
	p, _ := c.Config.validate() // validated by shardParams
	s.total.num, s.total.den, s.total.burst = p.num, p.den, p.burst
}

// shardParams validates c for NewSharded and Update and returns the
// parameters of each of its k shards.
func (c *ShardedConfig) shardParams() (params, int, error) {
	p, err := c.Config.validate()
	if err != nil {
		return params{}, 0, err
	}
	k := c.Shards
	if k < 0 || k > MaxShards {
		return params{}, 0, rampart.NewConfigError("ratelimit", "Shards", "must be between 0 and %d, got %d", MaxShards, k)
	}
	if k == 0 {
		k = min(runtime.GOMAXPROCS(0), 64)
	}
	if p.num > maxNum/uint64(k) {
		return params{}, 0, rampart.NewConfigError("ratelimit", "Shards", "%d shards of an interval of %d/%d ns overflow", k, p.num, p.den)
	}
	burst := (p.burst + int64(k) - 1) / int64(k)
	sp, err := newParams(p.num*uint64(k), p.den, burst, "Shards")
	if err != nil {
		return params{}, 0, err
	}
	return sp, k, nil
}

// Update changes the total rate and burst while calls run, splitting them
// between the shards as NewSharded does; each shard keeps its permits
// (capped at its new burst), as [Limiter.Update]. It validates c as
// NewSharded does and refuses with a *rampart.ConfigError naming the field
// a change to Shards (0 means the shards NewSharded allocated, whatever
// GOMAXPROCS is now), Name (an empty Name keeps the name NewSharded was
// given), Ticker, CountStats or OnRejected (the func value NewSharded was
// given, as [Sharded.Config] returns it, is accepted); Compact is ignored,
// as by NewSharded (shards are always padded). Start from
// [Sharded.Config] to change one field.
//
// Updates are serialised: racing Updates leave every shard on the
// configuration of one of them. Update reads the Ticker once, before any
// shard changes (a Ticker that panics changes nothing). The shards are
// updated one after the other, not at one instant: a call racing Update
// may take its permit from a shard already updated and borrow from one not
// yet, each at that shard's own rate.
func (s *Sharded) Update(c ShardedConfig) error {
	if c.Shards == 0 {
		c.Shards = len(s.shards) // the shards NewSharded allocated, whatever GOMAXPROCS is now
	}
	sp, k, err := c.shardParams()
	if err != nil {
		return err
	}
	const fixed = "is fixed at construction: "
	switch {
	case k != len(s.shards):
		return rampart.NewConfigError("ratelimit", "Shards", fixed+"New allocated %d shards (got %d)", len(s.shards), k)
	case c.Name != "" && c.Name != s.rejected.Name(): // "": the name NewSharded was given
		return rampart.NewConfigError("ratelimit", "Name", fixed+"New built the rejection error that carries it (got %q, built with %q)", c.Name, s.rejected.Name())
	case !sameTicker(c.Ticker, s.tk):
		return rampart.NewConfigError("ratelimit", "Ticker", fixed+"the theoretical arrival times are counted in readings of the old clock, which another clock's do not compare with")
	case c.CountStats != s.countStats:
		return rampart.NewConfigError("ratelimit", "CountStats", fixed+"every admission reads it from a word NewSharded set (got %v)", c.CountStats)
	case !sameptr.Func(c.OnRejected, s.onRejected):
		return rampart.NewConfigError("ratelimit", "OnRejected", fixed+"the rejection path reads it from a word NewSharded set; pass the func value NewSharded was given")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// One reading for all the shards, before any changes: a Ticker that
	// panics leaves them all on the configuration in force.
	now := s.tk.Now()
	for _, l := range s.shards {
		if st := l.st.Load(); st.num == sp.num && st.den == sp.den && st.burst == sp.burst {
			continue
		}
		if err := l.set(now, func(*state) (params, error) { return sp, nil }); err != nil {
			return err // not reached: sp is valid for every shard
		}
	}
	s.setTotal(&c)
	return nil
}

// Config returns the total configuration in force, the one Update
// applied last (or NewSharded), with its defaults filled in: the rate in
// its exact Limit/Period form (Rate, Capacity and RefillRate zero; set
// another form after zeroing Limit and Period), the total Burst, Shards K,
// the Ticker the limiter reads, Name, CountStats and the OnRejected func
// value it was given; Compact false (ignored). Change a field and pass it
// to [Sharded.Update].
func (s *Sharded) Config() ShardedConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := ShardedConfig{
		Config: Config{
			Name:       s.rejected.Name(),
			Burst:      int(s.total.burst),
			Ticker:     s.tk,
			CountStats: s.countStats,
			OnRejected: s.onRejected,
		},
		Shards: len(s.shards),
	}
	c.setInterval(s.total.num, s.total.den)
	return c
}

// AdmitN takes n permits (n at most the shard burst ⌈burst/K⌉) at time
// now from a random shard, or from the next one if that one rejects; it
// returns 0 or the shorter of the two waits, with the contract of
// [Limiter.AdmitN].
func (s *Sharded) AdmitN(now int64, n int) (wait time.Duration) {
	i := rand.Uint32() % uint32(len(s.shards)) // per-thread generator: no shared write
	w := s.shards[i].AdmitN(now, n)
	if w != 0 && len(s.shards) > 1 {
		i++
		if int(i) == len(s.shards) {
			i = 0
		}
		w = min(w, s.shards[i].AdmitN(now, n))
	}
	if w == 0 {
		if s.countStats {
			s.admitted.Add(1)
		}
		return 0
	}
	if s.countStats {
		s.rejectedN.Add(1)
	}
	if s.onRejected != nil {
		notify.Call2(&s.listenerPanics, s.onRejected, n, w)
	}
	return w
}

// Admit is AdmitN for one permit at a reading of the limiter's Ticker.
func (s *Sharded) Admit() time.Duration { return s.AdmitN(s.tk.Now(), 1) }

// AllowN reports whether n permits were taken at time now.
func (s *Sharded) AllowN(now int64, n int) bool { return s.AdmitN(now, n) == 0 }

// Allow takes one permit now if the rate allows it.
func (s *Sharded) Allow() bool { return s.AdmitN(s.tk.Now(), 1) == 0 }

// RejectedError returns the preallocated rejection error.
func (s *Sharded) RejectedError() error { return s.rejected }

// Ticker returns the clock the shorthands read.
func (s *Sharded) Ticker() rampart.Ticker { return s.tk }

// Shards returns K.
func (s *Sharded) Shards() int { return len(s.shards) }

// Stats sums the shards' counters; Rate and Burst are the totals.
func (s *Sharded) Stats() Stats {
	t := Stats{
		Admitted:       s.admitted.Load(),
		Rejected:       s.rejectedN.Load(),
		ListenerPanics: s.listenerPanics.Load(),
	}
	for _, l := range s.shards {
		st := l.Stats()
		t.Rate += st.Rate
		t.Burst += st.Burst
	}
	t.Interval = s.shards[0].Stats().Interval / time.Duration(len(s.shards))
	return t
}
