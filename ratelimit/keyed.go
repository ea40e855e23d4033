package ratelimit

import (
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

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
	// room is needed (or by SweepAt), from the new key's shard, or from the
	// next shards when it has none to evict. When the up to 32 keys a new
	// key's admission samples are all active, the new key is refused: an
	// active key is never evicted, so every key keeps its limit (see
	// [Keyed]). With MaxKeys keys held, a fraction f of them active, about
	// f³² of new keys are refused (0.08 % at f = 80 %, 3.4 % at 90 %, 19 %
	// at 95 %): size MaxKeys at 2 to 3 times the keys active at once (the
	// distinct keys seen in one burst's span), where refusals are below one
	// in 10⁹.
	//
	// Config.Compact applies to the limiter's own words: an empty Keyed is
	// 1416 B instead of 2928 B for the default MaxKeys (16 shards), 344 B
	// instead of 768 B for a MaxKeys up to 4096 (one shard), unnamed, with a
	// whole-ns interval (TestKeyedBytes); the keys cost the same 32-byte
	// slots in both layouts.
	MaxKeys int
}

// Table geometry. A shard's table is linear-probing open addressing, at
// most half full counting tombstones, so that a lookup of a present key
// reads 1.5 slots on average and a miss 2.5 (Knuth, TAOCP vol. 3, 6.4), two
// slots a cache line.
const (
	shardKeys     = 4096 // keys a shard aims to hold: a rebuild copies about 2·shardKeys slots
	maxKeyShards  = 1024 // beyond 4M keys shards grow instead
	minSlots      = 8
	sampleEntries = 8  // keys one eviction sample examines in a full table
	sampleSlots   = 64 // slots it scans at most to find them
	sampleRounds  = 4  // samples a new key's admission takes at most before it is refused
)

// evicted marks the TAT word of a key removed from the table (a tombstone)
// or of a slot retired by a rebuild: no admission CAS can succeed on it any
// more, so an admission never lands on a key that is gone.
const evicted = retired

// kslot is one key in a shard's table: its 128-bit fingerprint (two
// independent randomised 64-bit hashes, h1 = 0 when the slot is empty) and its
// GCRA state. A slot is taken once in the life of a table and never given
// to another key: an evicted key leaves a tombstone (its TAT word evicted)
// until the next rebuild, so a lock-free reader that matched the
// fingerprint can CAS the TAT without the slot changing hands under it.
// 32 bytes: two slots a cache line, none straddling two.
type kslot struct {
	h1  atomic.Uint64
	h2  atomic.Uint64
	tat atomic.Int64
	_   uint64
}

// ktable is a shard's table. Its slots are taken and evicted only under the
// shard's mutex; a rebuild (to grow, shrink or drop tombstones) retires
// every slot (Swap to evicted, which hands over the last TAT exactly even
// while readers CAS it) into a new table published whole, so a reader still
// on the old one fails its CAS and looks again under the mutex.
type ktable struct {
	mask  uint64
	slots []kslot
}

// find returns the live slot of the key whose fingerprint is h1, h2, and
// the number of slots read, or nil when it is not in t. Lock-free: a
// concurrent eviction or rebuild can make it miss a key that is present,
// and the caller then looks again under the shard's mutex.
func (t *ktable) find(h1, h2 uint64) (s *kslot, probes int) {
	for i := h1 & t.mask; probes <= int(t.mask); i = (i + 1) & t.mask {
		probes++
		s := &t.slots[i]
		x := s.h1.Load()
		if x == 0 {
			return nil, probes
		}
		// A tombstone of the key may precede its live slot (evicted, then
		// inserted again): skip it.
		if x == h1 && s.h2.Load() == h2 && s.tat.Load() != evicted {
			return s, probes
		}
	}
	return nil, probes
}

// put takes the first empty slot of h1's run for a key with TAT tat (under
// the mutex, or into a table not yet published). The TAT and h2 go in
// before h1, so a reader that sees h1 sees the rest.
func (t *ktable) put(h1, h2 uint64, tat int64) *kslot {
	i := h1 & t.mask
	for t.slots[i].h1.Load() != 0 {
		i = (i + 1) & t.mask
	}
	s := &t.slots[i]
	s.tat.Store(tat)
	s.h2.Store(h2)
	s.h1.Store(h1)
	return s
}

// newKtable returns an empty table of size slots (a power of 2).
func newKtable(size int) *ktable {
	return &ktable{mask: uint64(size - 1), slots: make([]kslot, size)}
}

// kshard is the writers' side of one shard: inserts, evictions and
// rebuilds take mu.
type kshard struct {
	mu      sync.Mutex
	n       int64  // live keys (under mu)
	used    int    // slots taken, live or tombstone (under mu)
	cap     int64  // twice the shard's share of MaxKeys: a bound on its table, not on the keys (Keyed.keys is)
	hand    uint64 // the next slot the eviction sample examines (under mu)
	floor   int64  // the largest TAT evicted from this shard: a new key starts there (under mu)
	scanned uint64 // slots the eviction samples have scanned (under mu; for the cost tests)
}

// paddedShard is a shard on its own cache lines (the default layout), so
// that inserts into different shards do not contend.
type paddedShard struct {
	kshard
	_ pad.Line
}

// emptyKtable is the table of every shard that never held a key: one empty
// slot, so a lookup misses at once, and the first insert rebuilds it into a
// table of the shard's own (it is never written).
var emptyKtable = newKtable(1)

// Keyed is a set of GCRA limiters, one per key, created on first use and
// evicted when idle. Create it with [NewKeyed] and call [Keyed.Allow] (or
// [Keyed.Admit], which also says how long to wait) with the caller's key.
// The zero value is not usable; all methods are safe for concurrent use.
//
// Evicting an idle key loses nothing: a key whose arrival time has passed
// is in exactly the state of a new one (a full burst).
//
// Keys are identified by a 128-bit fingerprint: two hash/maphash hashes,
// each randomised afresh per limiter. The key itself is not kept
// (no allocation, no copy, nothing for the garbage collector to scan). Two
// keys share one limit only if both their hashes collide: a chance below
// n²/2¹²⁹ for n keys (10⁻²⁷ at a million), which no client can aim for:
// the hashes' random parameters are never revealed.
//
// The table is sharded by the first hash, about 4096 keys a shard, each
// shard a linear-probing table of 32-byte slots at most half full. A key
// already present costs the two hashes, a lock-free probe of about 1.5
// slots (two to a cache line: one line in most lookups), one load and one
// CAS on the slot's TAT word, and no allocation. A new key takes its
// shard's mutex and a slot, allocating nothing either; a shard whose table
// passes half full is rebuilt (doubled, or only cleared of tombstones)
// under that mutex, copying its own slots: about 4096 keys for MaxKeys up
// to 4M, amortised O(1) a key. Other shards go on meanwhile, and so do the
// shard's held keys that the rebuild has not yet moved; a held key it has
// already moved misses the lock-free lookup and waits on the shard's mutex
// until the rebuild ends, about 0.4 ms per 4096 keys on a 2-core VM
// (BenchmarkKeyedShardRebuild). SweepAt holds each shard the same way.
//
// When MaxKeys keys are held, a new key's admission takes up to 4 samples
// of the next 8 keys at its shard's eviction hand (each scanning at most 64
// slots), evicts those of them that are idle and takes a freed slot; when
// its shard has no key to evict and the bound on all keys is what refused
// it, the remaining samples go to the next shards, one shard's mutex at a
// time. When all the keys sampled (up to 32) are active, the new key is
// refused with the wait until the soonest of them goes idle: an upper
// bound, since a key not sampled may go idle sooner and an immediate retry,
// sampling further on, may be admitted. With a fraction f of the held keys
// active, about f³² of new keys are refused (0.08 % at 80 %, 3.4 % at 90 %,
// 19 % at 95 %): size MaxKeys at 2 to 3 times the keys that can be active
// at once (the distinct keys seen in one burst's span). That is a bounded
// cost whatever the table's size, and it is the choice of refusal over
// evicting an active key: an evicted active key would come back with a
// full burst, so a flood of new keys could reset the limits of the keys it
// displaced (and a client with fresh keys already has one burst per key).
// Keys already held keep their slot and their cost through a flood
// (TestKeyedFloodLeavesKnownKeysAlone); a key that was idle, was evicted
// and comes back is a new key.
//
// Memory: 67 bytes a key at 1M keys (TestKeyedBytesPerKey), the slots of
// tables between a quarter and a half full, whatever the keys' length; a
// table held at MaxKeys while new keys replace idle ones settles between
// 8/3 and 16/3 slots (85 to 171 bytes) a key, depending on how a shard's
// share of MaxKeys falls between powers of 2: 4 slots (128 bytes) at the
// default MaxKeys, 5.2 at 100,000, its tombstones cleared by each rebuild
// (TestKeyedChurnSlotsPerKeyIsWithinTheDocumentedBound,
// TestKeyedChurnAtMaxKeysKeepsTheTableBounded). The samples can refuse a
// new key while idle keys remain elsewhere: in the latter test, 20 waves of
// MaxKeys new keys each replacing the last, about 0.002 % of them.
//
// Speed, against the usual hand-written keyed limiter (a
// map[string]*rate.Limiter of golang.org/x/time/rate behind a
// sync.RWMutex), as the median over six interleaved rounds of
// `cd bench && go test -run '^$' -bench 'Keyed/' -benchmem` on a shared
// 2-core VM (docs/ratelimit.md has the table): at 1M keys 4.3× its speed
// drawing keys uniformly and 4.5× on a Zipf draw from one goroutine, 3.4×
// and 2.8× from two; at 100k keys 2.1× to 3.6×; at 1k keys, all in cache,
// 1.7× to 1.9×. A new key refused by a table full of active keys (its four
// samples) costs 0.42 µs at 1k keys, 1.1 µs at 100k and 1.5 µs at 1M (the
// sweep this replaced: 53 µs at 1k, 94 ms at 100k).
type Keyed struct {
	p          params
	hk1        maphash.Seed
	hk2        maphash.Seed
	shift      uint                     // 64 − log2(shards): h1's top bits pick its shard
	tabs       []atomic.Pointer[ktable] // per shard; read by every admission, replaced under its shard's mu
	shards     []*kshard                // a pointer per shard: padded apart by default, packed when Compact
	tk         rampart.Ticker
	rejected   *rampart.RejectedError
	onRejected func(n int, wait time.Duration)
	countStats bool
	maxKeys    int64
	// keys (held, at most maxKeys; changed on insert and eviction only) and
	// the CountStats counters point into a keyedPadded (each word on its
	// own lines, off the lines every admission reads) or, with Compact, a
	// keyedCompact. One more load, from this read-mostly line, where they
	// are written.
	keys                *atomic.Int64
	admitted, rejectedN *atomic.Uint64

	evictedN       atomic.Uint64 // slow paths only
	listenerPanics atomic.Uint64 // slow paths only
}

// keyedPadded holds a padded Keyed's shared words; keyedCompact a compact
// one's.
type (
	keyedPadded struct {
		keys pad.Int64
		paddedCounts
	}
	keyedCompact struct {
		keys atomic.Int64
		counts
	}
)

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
		hk1:        maphash.MakeSeed(),
		hk2:        maphash.MakeSeed(),
		tk:         c.Ticker,
		rejected:   unnamedRejection,
		onRejected: c.OnRejected,
		countStats: c.CountStats,
	}
	if c.Name != "" {
		k.rejected = rampart.NewRejectedError("ratelimit", c.Name, ErrLimited)
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
	k.shards = make([]*kshard, nsh)
	k.maxKeys = int64(maxKeys)
	if c.Compact {
		w := new(keyedCompact)
		k.keys, k.admitted, k.rejectedN = &w.keys, &w.admitted, &w.rejected
		shards := make([]kshard, nsh)
		for i := range shards {
			k.shards[i] = &shards[i]
		}
	} else {
		w := new(keyedPadded)
		k.keys, k.admitted, k.rejectedN = &w.keys.Int64, &w.admitted.Uint64, &w.rejected.Uint64
		shards := make([]paddedShard, nsh)
		for i := range shards {
			k.shards[i] = &shards[i].kshard
		}
	}
	for i, sh := range k.shards {
		// MaxKeys bounds the keys of all shards together; a shard may hold
		// up to twice its share, since keys hash unevenly (±2 % at 4096 a
		// shard), and a table full at MaxKeys keys must take them all.
		sh.cap = 2 * int64((maxKeys-1)/nsh+1) // ⌈maxKeys/nsh⌉ without overflow at MaxInt
		sh.floor = math.MinInt64 / 2
		k.tabs[i].Store(emptyKtable)
	}
	return k, nil
}

// hash returns key's fingerprint; h1 is never 0 (the empty slot).
func (k *Keyed) hash(key string) (h1, h2 uint64) {
	return max(maphash.String(k.hk1, key), 1), maphash.String(k.hk2, key)
}

// AdmitN takes n permits of key's limit at time now, with the contract
// of [Limiter.AdmitN]: 0 when admitted, otherwise the ns to wait
// (read-only), [Never] for n < 1 or n > the burst. When key is new and the
// keys sampled in its full table are all active, the wait is until the
// soonest of them goes idle, an upper bound (see [Keyed]).
func (k *Keyed) AdmitN(key string, now int64, n int) (wait time.Duration) {
	if uint64(n-1) >= uint64(k.p.burst) {
		return time.Duration(k.reject(n, never))
	}
	u, ph := k.p.unitsPhase(now) // floor for the test, phase for a new TAT (see params)
	inc := int64(n) * k.p.k
	h1, h2 := k.hash(key)
	si := h1 >> k.shift
	if s, _ := k.tabs[si].Load().find(h1, h2); s != nil { // lock-free, no allocation
		for {
			tat := s.tat.Load()
			if tat == evicted {
				break // evicted or retired since the lookup: take the slow path
			}
			if tat+inc-u > k.p.tau { // as in Limiter.AdmitN
				return time.Duration(k.reject(n, k.p.waitFor(now, tat+inc))) // read-only
			}
			if s.tat.CompareAndSwap(tat, max(tat, ph)+inc) { // the one write, on the key's word
				if k.countStats {
					k.admitted.Add(1)
				}
				return 0
			}
		}
	}
	return time.Duration(k.admitSlow(h1, h2, si, now, u, ph, n))
}

// Admit is AdmitN for one permit of key at a reading of the limiter's
// Ticker.
func (k *Keyed) Admit(key string) time.Duration { return k.AdmitN(key, k.tk.Now(), 1) }

// admitSlow is the slow path of AdmitN for a key the lock-free lookup did
// not find (new, evicted, or in a table being rebuilt). Under the shard's
// mutex it looks again, makes room and inserts when the key is new, and
// decides; no slot can be evicted or retired while the mutex is held, so
// the decision needs no retry. The listener runs after the unlock.
func (k *Keyed) admitSlow(h1, h2, si uint64, now, u, ph int64, n int) int64 {
	inc := int64(n) * k.p.k
	sh := k.shards[si]
	sh.mu.Lock()
	s, _ := k.tabs[si].Load().find(h1, h2)
	if s == nil && !k.reserve(sh) {
		// Full: sample this shard, then, when the bound on all keys
		// refused and this shard had nothing to evict, the next shards.
		r := sampleResult{soonest: math.MaxInt64}
		reserved := k.sampleShard(sh, si, u, &r, true)
		if !reserved && r.evicted == 0 && sh.n < sh.cap && r.rounds < sampleRounds {
			// One mutex at a time: this shard's is released while the
			// others are sampled, so the key may be inserted meanwhile.
			sh.mu.Unlock()
			for j := uint64(1); r.rounds < sampleRounds && j < uint64(len(k.shards)); j++ {
				oi := (si + j) & uint64(len(k.shards)-1)
				o := k.shards[oi]
				o.mu.Lock()
				k.sampleShard(o, oi, u, &r, false)
				o.mu.Unlock()
				if r.evicted > 0 {
					break
				}
			}
			sh.mu.Lock()
			if s, _ = k.tabs[si].Load().find(h1, h2); s == nil {
				reserved = k.reserve(sh)
			}
		}
		if s == nil && !reserved {
			sh.mu.Unlock()
			// Full of active keys, or a racing insert took the slot our
			// eviction freed: a finite wait, never Never (which means
			// the n can never be admitted).
			return k.reject(n, k.fullWait(&r, u, now))
		}
	}
	if s == nil {
		t := k.tabs[si].Load()
		if (sh.used+1)*2 > len(t.slots) { // keep the table at most half full
			// Double when the live keys alone would fill more than 3/8 of
			// the table, else only clear its tombstones: a shard that
			// evicts and inserts at its cap settles between 8/3 and 16/3
			// slots a key (4 when its share is a power of 2), and
			// the rebuild's cost is spread over at least 1/8 of its slots.
			size := len(t.slots)
			if (sh.n+1)*8 > int64(size)*3 {
				size *= 2
			}
			t = k.rebuild(sh, si, max(size, minSlots)) // emptyKtable's 1 slot becomes minSlots
		}
		// A full burst for any reading not older than an evicted TAT; the
		// key is inserted even when refused.
		s = t.put(h1, h2, sh.floor)
		sh.used++
		sh.n++
	}
	var w int64
	for {
		tat := s.tat.Load()
		if tat+inc-u > k.p.tau {
			w = k.p.waitFor(now, tat+inc)
			break
		}
		if s.tat.CompareAndSwap(tat, max(tat, ph)+inc) {
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

// rebuild replaces shard si's table by one of size slots holding its live
// keys, and returns it. Called under sh.mu. Each old slot is retired by a
// Swap to evicted, which returns its last TAT even while lock-free readers
// CAS it: an admission lands either before the Swap (and is carried over)
// or fails and retries under the mutex, on the new table.
func (k *Keyed) rebuild(sh *kshard, si uint64, size int) *ktable {
	old := k.tabs[si].Load()
	t := newKtable(size)
	for i := range old.slots {
		s := &old.slots[i]
		h1 := s.h1.Load()
		if h1 == 0 {
			continue
		}
		if tat := s.tat.Swap(evicted); tat != evicted { // a tombstone is dropped
			t.put(h1, s.h2.Load(), tat)
		}
	}
	k.tabs[si].Store(t)
	sh.used = int(sh.n)
	return t
}

// sampleResult accumulates what a new key's eviction samples found, over
// the shards they visit.
type sampleResult struct {
	soonest int64 // the least TAT of the active keys sampled (MaxInt64: none)
	evicted int   // idle keys evicted
	rounds  int   // samples taken, at most sampleRounds
}

// sampleShard takes eviction samples of shard si (under sh.mu) until one
// evicts a key, sampleRounds samples are taken in all, or the shard's
// table is scanned whole, and accumulates them in r; a shard visited
// counts one sample at least. In the new key's own shard (own) it tries to
// reserve a slot after each sample that evicted, and reports whether it
// did.
func (k *Keyed) sampleShard(sh *kshard, si uint64, u int64, r *sampleResult, own bool) bool {
	t := k.tabs[si].Load()
	for scanned := 0; r.rounds < sampleRounds && scanned < len(t.slots); {
		soonest, evictedHere, n := k.evictSample(sh, t, u)
		r.rounds++
		r.soonest = min(r.soonest, soonest)
		r.evicted += evictedHere
		scanned += n
		if evictedHere > 0 {
			return own && k.reserve(sh)
		}
	}
	return false
}

// evictSample examines up to sampleEntries live keys of shard table t from
// the shard's hand, scanning at most sampleSlots slots (and each slot
// once), evicts those idle at u (TAT ≤ u: a full burst, the same as a new
// key), and returns the least TAT among the others, how many it evicted
// and the slots it scanned. Called under sh.mu.
func (k *Keyed) evictSample(sh *kshard, t *ktable, u int64) (soonest int64, evictedHere, scanned int) {
	soonest = math.MaxInt64
	examined := 0
	for range min(len(t.slots), sampleSlots) {
		if examined >= sampleEntries {
			break
		}
		scanned++
		s := &t.slots[sh.hand&t.mask]
		sh.hand++
		if s.h1.Load() == 0 || s.tat.Load() == evicted {
			continue // empty or a tombstone
		}
		examined++
		if k.evictIfIdle(sh, s, u) {
			evictedHere++
		} else {
			soonest = min(soonest, s.tat.Load())
		}
	}
	sh.scanned += uint64(scanned)
	return soonest, evictedHere, scanned
}

// evictIfIdle evicts the live key of slot s when it is idle at u, leaving a
// tombstone, and reports whether it did. Called under sh.mu.
func (k *Keyed) evictIfIdle(sh *kshard, s *kslot, u int64) bool {
	for {
		tat := s.tat.Load()
		if tat > u {
			return false // active (or already evicted: evicted > u)
		}
		// The CAS fails if an admission updated the key meanwhile: a key
		// is evicted only in a state equal to a new one.
		if s.tat.CompareAndSwap(tat, evicted) {
			// No new slot for this key (same fingerprint, same shard) can
			// start below the TAT evicted.
			sh.floor = max(sh.floor, tat)
			sh.n--
			k.keys.Add(-1)
			k.evictedN.Add(1)
			return true
		}
	}
}

// reserve takes a slot for a new key in shard sh, under sh.mu, and reports
// whether there was one: below MaxKeys in all and below the shard's cap.
// The count is raised by a CAS that never takes it above MaxKeys, so Len
// never reads more keys than the bound, even for an instant (shards insert
// concurrently, each under its own mutex).
func (k *Keyed) reserve(sh *kshard) bool {
	if sh.n >= sh.cap {
		return false
	}
	for {
		n := k.keys.Load()
		if n >= k.maxKeys {
			return false
		}
		if k.keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// fullWait is the wait of a new key refused because the table is full: 1
// ns when its samples evicted a key (a racing insert took the slot: retry
// at once), else until the soonest sampled key goes idle, or, when they
// found no key at all, the burst span, within which every held key goes
// idle. An upper bound: a key not sampled may go idle sooner.
func (k *Keyed) fullWait(r *sampleResult, u, now int64) int64 {
	if r.evicted > 0 {
		return 1
	}
	soonest := r.soonest
	if soonest == math.MaxInt64 {
		soonest = u + min(k.p.tau, maxUnits) + 1 // u and tau ≤ maxUnits: no overflow
	}
	return waitUntil(k.p.earliest(soonest), now)
}

// SweepAt evicts every key idle at time now (back to a full burst) and
// returns how many it evicted; each shard's table is then rebuilt without
// its tombstones, smaller when it is left less than a quarter full. It
// visits every key, one shard at a time under that shard's mutex (new keys
// of that shard wait for it, and so do its held keys once the shard's
// rebuild has moved them, until it ends; see [Keyed]). Calling it
// periodically bounds memory by the active keys rather than MaxKeys; it is
// never needed for correctness.
func (k *Keyed) SweepAt(now int64) int {
	u := k.p.units(now)
	total := 0
	for si := range k.shards {
		sh := k.shards[si]
		sh.mu.Lock()
		t := k.tabs[si].Load()
		evictedHere := 0
		for i := range t.slots {
			s := &t.slots[i]
			if s.h1.Load() != 0 && k.evictIfIdle(sh, s, u) {
				evictedHere++
			}
		}
		total += evictedHere
		size := minSlots
		for int64(size) < 4*sh.n {
			size *= 2
		}
		if size = min(size, len(t.slots)); evictedHere > 0 || size < len(t.slots) {
			k.rebuild(sh, uint64(si), size)
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
