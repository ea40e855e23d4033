package ratelimit

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
	"time"
)

// DefaultMaxKeys is the key bound of a [Keyed] limiter whose MaxKeys is 0.
const DefaultMaxKeys = 1 << 16

// KeyedConfig configures a [Keyed] limiter: one limit per key (per client,
// per tenant), every key with the same rate and burst.
type KeyedConfig struct {
	// Config is the limit of each key (any of its three forms), its name,
	// ticker and rejection listener. CountStats applies to Keyed.Stats.
	Config
	// MaxKeys bounds the number of keys held. 0 means DefaultMaxKeys.
	// Keys idle long enough to be back to a full burst are evicted when
	// room is needed (or by SweepAt); when every slot holds an active key, a
	// new key is rejected until one goes idle.
	MaxKeys int
}

// cell is one key's GCRA state: its theoretical arrival time in units, or
// evicted once the key is removed. A cell fills one 64-byte allocation size
// class, whose objects start on 64-byte boundaries, so two keys never share a
// cache line (with 8-byte cells, eight neighbouring keys did, and measured
// 40 % slower under two goroutines); a full pad.Int64 would cost 128 bytes a
// key.
type cell struct {
	tat atomic.Int64
	_   [56]byte
}

// evicted marks a cell removed from the table: no admission CAS can succeed
// on it any more, so an admission never lands on a cell that is gone.
const evicted = retired

// Keyed is a set of GCRA limiters, one per key, created on first use and
// evicted when idle. Create it with [NewKeyed] and call [Keyed.Allow] (or
// [Keyed.Admit], which also says how long to wait) with the caller's key.
//
// Evicting an idle key loses nothing: a key whose arrival
// time has passed is in exactly the state of a new one (a full burst).
//
// A key already present costs a lock-free map lookup (sync.Map, no
// allocation for a string key), one load and one CAS on the key's own word;
// the first use of a key allocates its cell and map entry. The zero value is
// not usable; all methods are safe for concurrent use.
type Keyed struct {
	p          params
	m          sync.Map // string → *cell
	maxKeys    int64
	tk         rampart.Ticker
	rejected   *rampart.RejectedError
	onRejected func(n int, wait time.Duration)
	countStats bool

	sweepMu sync.Mutex // one sweep at a time (slow path)

	keys           pad.Int64 // cells in the table, at most maxKeys; changed on insert and eviction only
	admitted       pad.Uint64
	rejectedN      pad.Uint64
	evictedN       atomic.Uint64
	floor          atomic.Int64 // the largest TAT evicted: a new cell starts there
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
		maxKeys:    int64(maxKeys),
		tk:         c.Ticker,
		rejected:   rampart.NewRejectedError("ratelimit", c.Name, ErrLimited),
		onRejected: c.OnRejected,
		countStats: c.CountStats,
	}
	k.floor.Store(math.MinInt64 / 2)
	if ticker.IsNil(k.tk) {
		return nil, rampart.NewConfigError("ratelimit", "Ticker", ticker.NilReason, k.tk)
	}
	if k.tk == nil {
		k.tk = rampart.DefaultTicker()
	}
	k.p.origin = originOf(k.tk.Now()) // as in New
	return k, nil
}

// AdmitN takes n permits of key's limit at time now, with the contract
// of [Limiter.AdmitN]: 0 when admitted, otherwise the ns to wait
// (read-only), [Never] for n < 1 or n > the burst. When key is new and the
// table is full of active keys, the wait is until a key goes idle.
func (k *Keyed) AdmitN(key string, now int64, n int) (wait time.Duration) {
	if uint64(n-1) >= uint64(k.p.burst) {
		return time.Duration(k.reject(n, never))
	}
	u, ph := k.p.unitsPhase(now) // floor for the test, phase for a new TAT (see params)
	inc := int64(n) * k.p.k
	if v, ok := k.m.Load(key); ok { // lock-free lookup, no allocation
		c := v.(*cell)
		for {
			tat := c.tat.Load()
			if tat == evicted {
				break // evicted since the lookup: take the slow path
			}
			if tat+inc-u > k.p.tau { // as in Limiter.AdmitN
				return time.Duration(k.reject(n, k.p.waitFor(now, tat+inc))) // read-only
			}
			if c.tat.CompareAndSwap(tat, max(tat, ph)+inc) { // the one write, on the key's word
				if k.countStats {
					k.admitted.Add(1)
				}
				return 0
			}
		}
	}
	return time.Duration(k.insertSlow(key, now, u, ph, n))
}

// Admit is AdmitN for one permit of key at a reading of the limiter's
// Ticker.
func (k *Keyed) Admit(key string) time.Duration { return k.AdmitN(key, k.tk.Now(), 1) }

// insertSlow is the slow path of AdmitN for a key not in the table (or
// whose cell was just evicted).
func (k *Keyed) insertSlow(key string, now, u, ph int64, n int) int64 {
	inc := int64(n) * k.p.k
	swept := false
	for {
		v, ok := k.m.Load(key)
		if !ok {
			if k.keys.Add(1) > k.maxKeys { // reserve a slot
				k.keys.Add(-1)
				soonest := k.sweep(u)
				if swept || k.keys.Load() >= k.maxKeys {
					// Full of active keys, or a racing insert took the
					// slot our first sweep freed: a finite wait, never
					// Never (which means the n can never be admitted).
					return k.reject(n, k.fullWait(soonest, now))
				}
				swept = true
				continue
			}
			c := &cell{}
			c.tat.Store(k.floor.Load()) // a full burst for any reading not older than an evicted TAT
			var loaded bool
			v, loaded = k.m.LoadOrStore(key, c)
			if loaded {
				k.keys.Add(-1) // someone else inserted it first
			}
		}
		c := v.(*cell)
		for {
			tat := c.tat.Load()
			if tat == evicted {
				k.m.CompareAndDelete(key, c) // help the evictor, then retry
				break
			}
			if tat+inc-u > k.p.tau {
				return k.reject(n, k.p.waitFor(now, tat+inc))
			}
			if c.tat.CompareAndSwap(tat, max(tat, ph)+inc) {
				if k.countStats {
					k.admitted.Add(1)
				}
				return 0
			}
		}
	}
}

// sweep evicts every idle cell (TAT ≤ u: a full burst, the same as a new
// cell) and returns the least TAT among the others.
func (k *Keyed) sweep(u int64) (soonest int64) {
	k.sweepMu.Lock()
	defer k.sweepMu.Unlock()
	soonest = math.MaxInt64
	k.m.Range(func(key, v any) bool {
		c := v.(*cell)
		for {
			tat := c.tat.Load()
			if tat == evicted {
				return true
			}
			if tat > u {
				soonest = min(soonest, tat)
				return true
			}
			// Raise the floor first, so that no new cell for this key can
			// start below the TAT being evicted.
			atomicx.Max(&k.floor, tat)
			// The CAS fails if an admission updated the cell meanwhile:
			// a cell is evicted only in a state equal to a new one.
			if c.tat.CompareAndSwap(tat, evicted) {
				k.m.CompareAndDelete(key, c)
				k.keys.Add(-1)
				k.evictedN.Add(1)
				return true
			}
		}
	})
	return soonest
}

// fullWait is the wait of a new key refused because the table is full:
// until the soonest held key goes idle, or 1 ns when the sweep found none
// active (slots are being freed and taken concurrently: retry at once).
func (k *Keyed) fullWait(soonest, now int64) int64 {
	if soonest == math.MaxInt64 {
		return 1
	}
	return max(k.p.earliest(soonest)-now, 1)
}

// SweepAt evicts every key idle at time now (back to a full burst) and
// returns how many it evicted. Calling it periodically bounds memory by the
// active keys rather than MaxKeys; it is never needed for correctness.
func (k *Keyed) SweepAt(now int64) int {
	before := k.evictedN.Load()
	k.sweep(k.p.units(now))
	return int(k.evictedN.Load() - before)
}

// Sweep is SweepAt at a reading of the limiter's Ticker.
func (k *Keyed) Sweep() int { return k.SweepAt(k.tk.Now()) }

// Len returns the number of keys held.
func (k *Keyed) Len() int { return int(k.keys.Load()) }

func (k *Keyed) reject(n int, wait int64) int64 {
	if k.countStats {
		k.rejectedN.Add(1)
	}
	if k.onRejected != nil {
		notify.Call2(&k.listenerPanics, k.onRejected, n, time.Duration(wait))
	}
	return wait
}

// AllowN reports whether n permits of key were taken at time now.
func (k *Keyed) AllowN(key string, now int64, n int) bool { return k.AdmitN(key, now, n) == 0 }

// Allow takes one permit of key now if its rate allows it.
func (k *Keyed) Allow(key string) bool { return k.AdmitN(key, k.tk.Now(), 1) == 0 }

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
	ListenerPanics uint64 // panics recovered from OnRejected
}

// Stats returns the counters. It allocates nothing.
func (k *Keyed) Stats() KeyedStats {
	return KeyedStats{
		Admitted:       k.admitted.Load(),
		Rejected:       k.rejectedN.Load(),
		Evicted:        k.evictedN.Load(),
		Keys:           k.Len(),
		ListenerPanics: k.listenerPanics.Load(),
	}
}
