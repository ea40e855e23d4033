package ratelimit

import (
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
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
	// The table is split into shards of about 4096 keys (a key's shard is
	// fixed by its hash), each holding at most twice its share of MaxKeys.
	// Keys idle long enough to be back to a full burst are evicted when
	// room is needed (or by SweepAt), from the new key's shard. When the few
	// keys a new key's admission samples there are all active, the new key
	// is refused until one goes idle: an active key is never evicted, so
	// every key keeps its limit (see [Keyed]).
	MaxKeys int
}

// Table geometry. A shard's table is linear-probing open addressing, at
// most half full, so that a lookup of a present key reads 1.5 slots on
// average and a miss 2.5 (Knuth, TAOCP vol. 3, 6.4), four slots a cache
// line.
const (
	shardKeys     = 4096 // keys a shard aims to hold: its growth copies at most 2·shardKeys slots
	maxKeyShards  = 1024 // beyond 4M keys shards grow instead
	minSlots      = 8
	sampleEntries = 8  // keys a new key's admission examines in a full shard
	sampleSlots   = 64 // slots it scans at most to find them (a full shard is 1/4 to 1/2 occupied)
)

// entry is one key's GCRA state: its theoretical arrival time in units, or
// evicted once the key is removed, and the key itself (immutable). A key of
// up to 104 bytes is copied into the entry's own allocation, so that the
// lookup's comparison reads the line the admission's CAS writes, not a
// third one.
type entry struct {
	tat atomic.Int64
	key string
}

// Entries with the key's bytes inline, sized to the allocator's classes of
// 48, 64, 96 and 128 bytes.
type (
	entry24 struct {
		e entry
		b [24]byte
	}
	entry40 struct {
		e entry
		b [40]byte
	}
	entry72 struct {
		e entry
		b [72]byte
	}
	entry104 struct {
		e entry
		b [104]byte
	}
)

// newEntry returns an entry for key with TAT tat.
func newEntry(key string, tat int64) *entry {
	var e *entry
	var b []byte
	switch n := len(key); {
	case n == 0:
		e = &entry{}
	case n <= 24:
		x := new(entry24)
		e, b = &x.e, x.b[:n]
	case n <= 40:
		x := new(entry40)
		e, b = &x.e, x.b[:n]
	case n <= 72:
		x := new(entry72)
		e, b = &x.e, x.b[:n]
	case n <= 104:
		x := new(entry104)
		e, b = &x.e, x.b[:n]
	default:
		e = &entry{key: strings.Clone(key)}
	}
	if b != nil {
		copy(b, key)
		// The bytes are never written again: the string is immutable, and
		// it keeps its own allocation (the entry) alive.
		e.key = unsafe.String(unsafe.SliceData(b), len(b))
	}
	e.tat.Store(tat)
	return e
}

// evicted marks an entry removed from the table: no admission CAS can
// succeed on it any more, so an admission never lands on a key that is
// gone.
const evicted = retired

// kslot is one slot of a shard's table: the key's hash (0 when the slot is
// empty) and its entry. Readers load both without a lock; a reader that
// sees a hash and an entry from two different moments compares the key,
// which is in the entry, so it never admits on another key's entry.
type kslot struct {
	h atomic.Uint64
	e atomic.Pointer[entry]
}

// ktable is a shard's table. Its slots change only under the shard's mutex;
// a grown or shrunk table replaces it whole, and the entries (the keys'
// states) move to the new table unchanged, so a reader still on the old
// table admits on the same entry.
type ktable struct {
	mask  uint64
	slots []kslot
}

// find returns key's entry and the number of slots read, or nil when key is
// not in t. Lock-free: a concurrent insert, eviction or move can make it
// miss a key that is present, and the caller then looks again under the
// shard's mutex.
func (t *ktable) find(h uint64, key string) (e *entry, probes int) {
	for i := h & t.mask; probes <= int(t.mask); i = (i + 1) & t.mask {
		probes++
		s := &t.slots[i]
		sh := s.h.Load()
		if sh == 0 {
			return nil, probes
		}
		if sh == h {
			if e := s.e.Load(); e != nil && e.key == key {
				return e, probes
			}
		}
	}
	return nil, probes
}

// put stores e in the first empty slot of h's run (under the mutex). The
// entry goes in before the hash, so a reader that sees the hash sees an
// entry.
func (t *ktable) put(h uint64, e *entry) {
	i := h & t.mask
	for t.slots[i].h.Load() != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i].e.Store(e)
	t.slots[i].h.Store(h)
}

// remove empties slot i (under the mutex) by backward shift: the entries
// after it in its run move back into the hole whenever their home slot
// allows, so that no tombstone lengthens later probes (Knuth's Algorithm R).
// A reader racing with a move may miss a key; it then looks again under the
// mutex.
func (t *ktable) remove(i uint64) {
	for j := (i + 1) & t.mask; ; j = (j + 1) & t.mask {
		h := t.slots[j].h.Load()
		if h == 0 {
			break
		}
		// The entry at j may move to i unless its home slot lies
		// cyclically in (i, j].
		if home := h & t.mask; (j-home)&t.mask >= (j-i)&t.mask {
			t.slots[i].e.Store(t.slots[j].e.Load())
			t.slots[i].h.Store(h)
			i = j
		}
	}
	t.slots[i].h.Store(0)
	t.slots[i].e.Store(nil)
}

// resized returns a copy of t with size slots (a power of 2 above the
// entries held).
func (t *ktable) resized(size int) *ktable {
	nt := &ktable{mask: uint64(size - 1), slots: make([]kslot, size)}
	for i := range t.slots {
		if h := t.slots[i].h.Load(); h != 0 {
			nt.put(h, t.slots[i].e.Load())
		}
	}
	return nt
}

// kshard is the writers' side of one shard: inserts, evictions and resizes
// take mu. Each shard sits on its own cache lines, so that inserts into
// different shards do not contend.
type kshard struct {
	mu      sync.Mutex
	n       atomic.Int64 // keys held; written under mu, read by Len
	cap     int64        // twice the shard's share of MaxKeys: a bound on its table, not on the keys (Keyed.keys is)
	hand    uint64       // the next slot the eviction sample examines (under mu)
	floor   int64        // the largest TAT evicted from this shard: a new entry starts there (under mu)
	scanned uint64       // slots the eviction samples have scanned (under mu; for the cost tests)
	_       pad.Line
}

// Keyed is a set of GCRA limiters, one per key, created on first use and
// evicted when idle. Create it with [NewKeyed] and call [Keyed.Allow] (or
// [Keyed.Admit], which also says how long to wait) with the caller's key.
// The zero value is not usable; all methods are safe for concurrent use.
//
// Evicting an idle key loses nothing: a key whose arrival time has passed
// is in exactly the state of a new one (a full burst).
//
// The table is sharded by a hash of the key (hash/maphash, seeded at random
// per limiter, so that no client can choose keys that collide); each shard
// is an open-addressing table at most half full. A key already present
// costs the hash, a lock-free probe of about 1.5 slots (four to a cache
// line), one load and one CAS on the key's own entry, and no allocation.
// The first use of a key takes its shard's mutex and allocates its entry
// (48 bytes for a key of up to 24 bytes, its bytes inline); a shard that
// grows copies its slots, at most 2·4096, under that mutex.
//
// When a new key's shard is full, its admission examines the next 8 keys
// at the shard's eviction hand (scanning at most 64 slots), evicts those of
// them that are idle and takes a freed slot; when none of them is idle the
// new key is refused, with the wait until the soonest of them goes idle.
// That is a bounded cost whatever the table's size, and it is the choice of
// refusal over evicting an active key: an evicted active key would come
// back with a full burst, so a flood of new keys could reset the limits of
// the keys it displaced. Keys already held, active or idle, keep their slot
// and their cost through a flood (TestKeyedFloodLeavesKnownKeysAlone: 1M
// distinct keys into a full table leave the held keys' probes unchanged and
// scan at most 64 slots each); a key that was idle and evicted comes back
// as a new key. Size MaxKeys above the keys that can be active at once (the
// distinct keys per emission interval × the burst's span) for new keys
// never to be refused.
//
// Memory: about 80 bytes a key for keys of up to 24 bytes (a 48-byte entry
// and two 16-byte slots), measured at 1M keys by TestKeyedBytesPerKey.
type Keyed struct {
	p          params
	seed       maphash.Seed
	shift      uint                     // 64 − log2(shards): a hash's top bits pick its shard
	tabs       []atomic.Pointer[ktable] // per shard; read by every admission, replaced under its shard's mu
	shards     []kshard
	tk         rampart.Ticker
	rejected   *rampart.RejectedError
	onRejected func(n int, wait time.Duration)
	countStats bool
	maxKeys    int64

	keys           pad.Int64 // keys held, at most maxKeys; changed on insert and eviction only
	admitted       pad.Uint64
	rejectedN      pad.Uint64
	evictedN       atomic.Uint64
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
	if ticker.IsNil(k.tk) {
		return nil, rampart.NewConfigError("ratelimit", "Ticker", ticker.NilReason, k.tk)
	}
	if k.tk == nil {
		k.tk = rampart.DefaultTicker()
	}
	k.p.origin = originOf(k.tk.Now()) // as in New
	nsh := 1
	for nsh < maxKeyShards && nsh*shardKeys < maxKeys {
		nsh *= 2
	}
	k.shift = uint(64 - bits.TrailingZeros(uint(nsh)))
	k.tabs = make([]atomic.Pointer[ktable], nsh)
	k.shards = make([]kshard, nsh)
	k.maxKeys = int64(maxKeys)
	for i := range k.shards {
		// MaxKeys bounds the keys of all shards together; a shard may hold
		// up to twice its share, since keys hash unevenly (±2 % at 4096 a
		// shard), and a table full at MaxKeys keys must take them all.
		k.shards[i].cap = 2 * int64((maxKeys+nsh-1)/nsh)
		k.shards[i].floor = math.MinInt64 / 2
		k.tabs[i].Store(&ktable{mask: minSlots - 1, slots: make([]kslot, minSlots)})
	}
	return k, nil
}

// hash returns key's hash, never 0 (the empty slot).
func (k *Keyed) hash(key string) uint64 {
	return max(maphash.String(k.seed, key), 1)
}

// AdmitN takes n permits of key's limit at time now, with the contract
// of [Limiter.AdmitN]: 0 when admitted, otherwise the ns to wait
// (read-only), [Never] for n < 1 or n > the burst. When key is new and the
// keys sampled in its full shard are all active, the wait is until the
// soonest of them goes idle (see [Keyed]).
func (k *Keyed) AdmitN(key string, now int64, n int) (wait time.Duration) {
	if uint64(n-1) >= uint64(k.p.burst) {
		return time.Duration(k.reject(n, never))
	}
	u, ph := k.p.unitsPhase(now) // floor for the test, phase for a new TAT (see params)
	inc := int64(n) * k.p.k
	h := k.hash(key)
	si := h >> k.shift
	if e, _ := k.tabs[si].Load().find(h, key); e != nil { // lock-free, no allocation
		for {
			tat := e.tat.Load()
			if tat == evicted {
				break // evicted since the lookup: take the slow path
			}
			if tat+inc-u > k.p.tau { // as in Limiter.AdmitN
				return time.Duration(k.reject(n, k.p.waitFor(now, tat+inc))) // read-only
			}
			if e.tat.CompareAndSwap(tat, max(tat, ph)+inc) { // the one write, on the key's entry
				if k.countStats {
					k.admitted.Add(1)
				}
				return 0
			}
		}
	}
	return time.Duration(k.admitSlow(key, h, si, now, u, ph, n))
}

// Admit is AdmitN for one permit of key at a reading of the limiter's
// Ticker.
func (k *Keyed) Admit(key string) time.Duration { return k.AdmitN(key, k.tk.Now(), 1) }

// admitSlow is the slow path of AdmitN for a key the lock-free lookup did
// not find (new, evicted, or moved by a racing writer). Under the shard's
// mutex it looks again, makes room and inserts when the key is new, and
// decides; no entry in the table can be evicted while the mutex is held,
// so the decision needs no retry. The listener runs after the unlock.
func (k *Keyed) admitSlow(key string, h, si uint64, now, u, ph int64, n int) int64 {
	inc := int64(n) * k.p.k
	sh := &k.shards[si]
	sh.mu.Lock()
	e, _ := k.tabs[si].Load().find(h, key)
	if e == nil {
		if !k.reserve(sh) {
			soonest := k.evictSample(sh, si, u)
			if !k.reserve(sh) {
				sh.mu.Unlock()
				// Full of active keys, or a racing insert in another
				// shard took the slot our eviction freed: a finite wait,
				// never Never (which means the n can never be admitted).
				return k.reject(n, k.fullWait(soonest, now))
			}
		}
		e = newEntry(key, sh.floor) // a full burst for any reading not older than an evicted TAT
		t := k.tabs[si].Load()
		if (sh.n.Load()+1)*2 > int64(len(t.slots)) { // keep the table at most half full
			t = t.resized(2 * len(t.slots))
			k.tabs[si].Store(t)
		}
		t.put(h, e)
		sh.n.Add(1)
	}
	var w int64
	for {
		tat := e.tat.Load()
		if tat+inc-u > k.p.tau {
			w = k.p.waitFor(now, tat+inc) // the entry is inserted even when refused
			break
		}
		if e.tat.CompareAndSwap(tat, max(tat, ph)+inc) {
			break
		}
	}
	sh.mu.Unlock()
	if w != 0 {
		return k.reject(n, w)
	}
	if k.countStats {
		k.admitted.Add(1)
	}
	return 0
}

// evictSample examines up to sampleEntries keys from the shard's hand,
// scanning at most sampleSlots slots (and each slot once), evicts those
// idle at u (TAT ≤ u: a full burst, the same as a new entry), and returns
// the least TAT among the others. Called under sh.mu.
func (k *Keyed) evictSample(sh *kshard, si uint64, u int64) (soonest int64) {
	t := k.tabs[si].Load()
	soonest = math.MaxInt64
	examined := 0
	for range min(len(t.slots), sampleSlots) {
		if examined >= sampleEntries {
			break
		}
		sh.scanned++
		i := sh.hand & t.mask
		e := t.slots[i].e.Load()
		if e == nil {
			sh.hand++
			continue
		}
		examined++
		if k.evictIfIdle(sh, t, i, e, u) {
			continue // slot i now holds the next entry of its run, or nothing
		}
		soonest = min(soonest, e.tat.Load())
		sh.hand++
	}
	return soonest
}

// evictIfIdle evicts e, in slot i of the shard's table t, when it is idle
// at u, and reports whether it did. Called under sh.mu.
func (k *Keyed) evictIfIdle(sh *kshard, t *ktable, i uint64, e *entry, u int64) bool {
	for {
		tat := e.tat.Load()
		if tat > u {
			return false
		}
		// The CAS fails if an admission updated the entry meanwhile: an
		// entry is evicted only in a state equal to a new one.
		if e.tat.CompareAndSwap(tat, evicted) {
			// No new entry for this key (same hash, same shard) can start
			// below the TAT evicted.
			sh.floor = max(sh.floor, tat)
			t.remove(i)
			sh.n.Add(-1)
			k.keys.Add(-1)
			k.evictedN.Add(1)
			return true
		}
	}
}

// reserve takes a slot for a new key in shard sh, under sh.mu, and reports
// whether there was one: below MaxKeys in all and below the shard's cap.
func (k *Keyed) reserve(sh *kshard) bool {
	if sh.n.Load() >= sh.cap {
		return false
	}
	if k.keys.Add(1) > k.maxKeys {
		k.keys.Add(-1)
		return false
	}
	return true
}

// fullWait is the wait of a new key refused because its shard is full:
// until the soonest sampled key goes idle, or 1 ns when the sample found
// none active (slots are being freed and taken concurrently: retry at
// once).
func (k *Keyed) fullWait(soonest, now int64) int64 {
	if soonest == math.MaxInt64 {
		return 1
	}
	return max(k.p.earliest(soonest)-now, 1)
}

// SweepAt evicts every key idle at time now (back to a full burst) and
// returns how many it evicted; a shard left less than 1/8 full gets a
// smaller table. It visits every key, one shard at a time under that
// shard's mutex (new keys of that shard wait for it; admissions of held
// keys do not). Calling it periodically bounds memory by the active keys
// rather than MaxKeys; it is never needed for correctness.
func (k *Keyed) SweepAt(now int64) int {
	u := k.p.units(now)
	total := 0
	for si := range k.shards {
		sh := &k.shards[si]
		sh.mu.Lock()
		t := k.tabs[si].Load()
		// A removal moves later entries of the run back into slot i, so
		// i advances only past a slot that stays; an entry moved from the
		// start of the table to its end (a run that wraps) is seen twice,
		// which is harmless.
		for i := 0; i < len(t.slots); {
			e := t.slots[i].e.Load()
			if e != nil && k.evictIfIdle(sh, t, uint64(i), e, u) {
				total++
				continue
			}
			i++
		}
		if n := int(sh.n.Load()); len(t.slots) > minSlots && n*8 < len(t.slots) {
			size := minSlots
			for size < 4*n {
				size *= 2
			}
			k.tabs[si].Store(t.resized(size))
		}
		sh.mu.Unlock()
	}
	return total
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
