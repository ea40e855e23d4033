package ratelimit

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
)

// DefaultMaxKeys is the key bound of a [Keyed] limiter whose MaxKeys is 0.
const DefaultMaxKeys = 1 << 16

// keyedShards is the number of independently locked parts of a Keyed
// limiter's table: lookups of different keys rarely touch the same lock.
const keyedShards = 64

// KeyedConfig configures a [Keyed] limiter: one limit per key (per client,
// per tenant), every key with the same rate and burst.
type KeyedConfig struct {
	// Config is the limit of each key (any of its three forms), its name,
	// ticker and rejection listener. CountStats applies to Keyed.Stats.
	Config
	// MaxKeys bounds the number of keys held. 0 means DefaultMaxKeys.
	// Keys that have been idle long enough to be back to a full burst
	// are evicted when room is needed (or by Sweep); when every slot
	// holds an active key, a new key is rejected until one goes idle.
	MaxKeys int
}

// cell is one key's GCRA state: its theoretical arrival time in units. Not
// padded: a keyed limiter holds many cells, each touched by one client.
type cell struct {
	tat atomic.Int64
}

// keyShard is one part of the key table. The read lock guards lookups and the
// CAS on a cell (so that a cell is never updated after its eviction); the
// write lock guards insertion and eviction.
type keyShard struct {
	_   pad.Line
	mu  sync.RWMutex
	m   map[string]*cell
	max int
}

// Keyed is a set of GCRA limiters, one per key, created on first use and
// evicted when idle. Evicting an idle key loses nothing: a key whose
// arrival time has passed is in exactly the state of a new one (a full
// burst). Looking up a key already present allocates nothing; the first use
// of a key allocates its cell and map entry. Create it with [NewKeyed]; all
// methods are safe for concurrent use.
type Keyed struct {
	p          params
	seed       maphash.Seed
	tk         rampart.Ticker
	rejected   *rampart.RejectedError
	onRejected func(n int, wait int64)
	countStats bool
	shards     [keyedShards]keyShard

	admitted       pad.Uint64
	rejectedN      pad.Uint64
	evicted        atomic.Uint64
	listenerPanics atomic.Uint64
}

// NewKeyed validates c and returns a keyed limiter.
func NewKeyed(c KeyedConfig) (*Keyed, error) {
	p, err := c.Config.build()
	if err != nil {
		return nil, err
	}
	if c.MaxKeys < 0 {
		return nil, rampart.NewConfigError("ratelimit", "MaxKeys", "must not be negative, got %d", c.MaxKeys)
	}
	maxKeys := c.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	k := &Keyed{
		p:          p,
		seed:       maphash.MakeSeed(),
		tk:         c.Ticker,
		rejected:   rampart.NewRejectedError("ratelimit", c.Name, ErrLimited),
		onRejected: c.OnRejected,
		countStats: c.CountStats,
	}
	if k.tk == nil {
		k.tk = rampart.DefaultTicker()
	}
	for i := range k.shards {
		sh := &k.shards[i]
		sh.max = maxKeys / keyedShards
		if i < maxKeys%keyedShards {
			sh.max++
		}
		sh.m = make(map[string]*cell)
	}
	return k, nil
}

// TryAcquire takes n permits of key's limit at time now, with the same
// contract as [Limiter.TryAcquire]: 0 when admitted, otherwise the ns to
// wait (read-only), [Never] for n < 1 or n > the burst. When the key is new
// and the table is full of active keys, the wait is until a slot frees.
func (k *Keyed) TryAcquire(key string, now int64, n int) (wait int64) {
	if uint64(n-1) >= uint64(k.p.burst) {
		return k.reject(n, Never)
	}
	sh := &k.shards[maphash.String(k.seed, key)%keyedShards] // hash: no allocation
	u := k.p.units(now)
	inc := int64(n) * k.p.k
	sh.mu.RLock() // one atomic add on this shard's reader count
	if c := sh.m[key]; c != nil {
		for {
			tat := c.tat.Load()
			next := max(tat, u) + inc
			if next-u > k.p.tau {
				sh.mu.RUnlock()
				return k.reject(n, k.p.waitFor(now, next)) // read-only
			}
			if c.tat.CompareAndSwap(tat, next) { // the one write to the cell
				sh.mu.RUnlock()
				if k.countStats {
					k.admitted.Add(1)
				}
				return 0
			}
		}
	}
	sh.mu.RUnlock()
	return k.insertSlow(sh, key, now, u, n)
}

// insertSlow is the slow path of TryAcquire for a key not in the table.
func (k *Keyed) insertSlow(sh *keyShard, key string, now, u int64, n int) int64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.m[key]
	if c == nil {
		if len(sh.m) >= sh.max {
			soonest := k.sweepLocked(sh, u)
			if len(sh.m) >= sh.max {
				return k.reject(n, max(k.p.earliest(soonest)-now, 1))
			}
		}
		c = &cell{}
		c.tat.Store(math.MinInt64 / 2)
		sh.m[key] = c
	}
	// Under the write lock nobody else updates c.
	tat := c.tat.Load()
	next := max(tat, u) + int64(n)*k.p.k
	if next-u > k.p.tau {
		return k.reject(n, k.p.waitFor(now, next))
	}
	c.tat.Store(next)
	if k.countStats {
		k.admitted.Add(1)
	}
	return 0
}

// sweepLocked evicts the idle cells of sh (TAT ≤ u: a full burst, the same as
// a new cell) and returns the least TAT among the others.
func (k *Keyed) sweepLocked(sh *keyShard, u int64) (soonest int64) {
	soonest = math.MaxInt64
	for key, c := range sh.m {
		if tat := c.tat.Load(); tat <= u {
			delete(sh.m, key)
			k.evicted.Add(1)
		} else {
			soonest = min(soonest, tat)
		}
	}
	return soonest
}

// Sweep evicts every idle key (back to a full burst at time now) and
// returns how many it evicted. Call it periodically to bound memory by the
// active keys rather than MaxKeys; it is never required for correctness.
func (k *Keyed) Sweep(now int64) int {
	u := k.p.units(now)
	before := k.evicted.Load()
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		k.sweepLocked(sh, u)
		sh.mu.Unlock()
	}
	return int(k.evicted.Load() - before)
}

// Len returns the number of keys held.
func (k *Keyed) Len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}

func (k *Keyed) reject(n int, wait int64) int64 {
	if k.countStats {
		k.rejectedN.Add(1)
	}
	if k.onRejected != nil {
		notify.Call2(&k.listenerPanics, k.onRejected, n, wait)
	}
	return wait
}

// AllowN reports whether n permits of key were taken at time now.
func (k *Keyed) AllowN(key string, now int64, n int) bool { return k.TryAcquire(key, now, n) == 0 }

// Allow takes one permit of key now if its rate allows it.
func (k *Keyed) Allow(key string) bool { return k.TryAcquire(key, k.tk.Now(), 1) == 0 }

// RejectedError returns the preallocated rejection error (matching
// [ErrLimited] and [rampart.ErrRejected]).
func (k *Keyed) RejectedError() error { return k.rejected }

// Ticker returns the clock the shorthands read.
func (k *Keyed) Ticker() rampart.Ticker { return k.tk }

// KeyedStats is a snapshot of a keyed limiter's counters.
type KeyedStats struct {
	Admitted       uint64 // only with CountStats
	Rejected       uint64 // only with CountStats
	Evicted        uint64 // idle keys evicted
	Keys           int    // keys held now
	ListenerPanics uint64
}

// Stats returns the counters. It allocates nothing (it takes each shard's
// read lock to count the keys).
func (k *Keyed) Stats() KeyedStats {
	return KeyedStats{
		Admitted:       k.admitted.Load(),
		Rejected:       k.rejectedN.Load(),
		Evicted:        k.evicted.Load(),
		Keys:           k.Len(),
		ListenerPanics: k.listenerPanics.Load(),
	}
}
