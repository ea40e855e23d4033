package circuitbreaker

import (
	"math"
	"sync/atomic"
	"unsafe"
)

// Outcome codes stored in a count-window slot. Bit 0 = the slot holds a
// call, bit 1 = failed, bit 2 = slow; 0 is an empty slot.
const (
	codeEmpty    = 0
	codeFilled   = 1
	codeFailBit  = 2
	codeSlowBit  = 4
	codeOK       = codeFilled
	codeFail     = codeFilled | codeFailBit
	codeSlowOK   = codeFilled | codeSlowBit
	codeSlowFail = codeFilled | codeFailBit | codeSlowBit
)

func outcomeCode(failed, slow bool) uint32 {
	c := uint32(codeFilled)
	if failed {
		c |= codeFailBit
	}
	if slow {
		c |= codeSlowBit
	}
	return c
}

// Slots are packed slotsPerWord to a word, slotBits each: a 100-call
// window is 7 words (64 B with the allocator's rounding) instead of 100.
const (
	slotBits     = 4
	slotsPerWord = 64 / slotBits
	slotMask     = 1<<slotBits - 1
)

// countWindow is the last n outcomes in a ring of slots, packed 16 to a
// word (4-bit outcome codes), wait-free:
//
//	if code is a success and the window holds n successes: return (3 loads, no write)
//	s   := seq.Add(1) - 1          // one atomic add on the one globally hot word
//	old := slot(s) <- code         // one CAS on the slot's word, skipped (a load) when the slot holds code
//	counters += delta(old, code)   // 0 adds when old == code (a success over a success)
//
// The counters mirror the slots' contents: every change of a slot is made by
// a CAS whose caller applies exactly the difference it caused. While
// records are in flight a counter may lag or, briefly, run ahead of the
// slots (even below 0, or fails above total: a slot's fail→ok change
// applied after a later ok→fail one), by at most the number of records in
// flight. Resetting swaps every word to empty under the same rule, so the
// counters never drift. A snapshot reads the three counters one after the
// other, so it clamps them into a possible window: 0 ≤ fails, slows ≤ total
// ≤ n (see snapshot).
//
// Packing trades the slots' spread over cache lines (a slot a word, calls
// that follow each other a line apart) for a sixteenth of the memory: the
// slots of a 100-call window share one line. The words are written only
// when a slot's outcome changes (never on the healthy path, which writes
// nothing), and every such record also writes the sequence and a counter
// on the hot line, so the slots' line adds one line to the traffic of a
// record that already moves one; consecutive calls still write different
// words (stride), so their CASes do not fail on each other.
//
// The sequence and the counters are hotWords of the Breaker, which every
// method takes as h (a pointer field here would cost the Breaker 8 B).
type countWindow struct {
	words  *atomic.Uint64 // the slot words, nWords() of them; read-mostly
	n      uint32         // at most maxWindowSize
	mask   uint32         // n-1 when n is a power of two, else 0
	stride uint32         // coprime with n: consecutive calls write slots in different words
}

func (w *countWindow) init(n int) {
	w.n = uint32(n)
	w.words = unsafe.SliceData(make([]atomic.Uint64, w.nWords()))
	if n&(n-1) == 0 {
		w.mask = uint32(n - 1)
	}
	// Slot of sequence s: s*stride mod n. With stride coprime with n this
	// is a permutation of each run of n sequence numbers, and s and s-n
	// still share a slot (the ring holds the last n calls), but calls that
	// follow each other (often on different cores) write slots of
	// different words, so their CASes do not collide. s*stride wraps
	// after 2^64/stride calls: never.
	w.stride = 1
	if w.n > 2*slotsPerWord {
		w.stride = slotsPerWord + 1
		for gcd(uint64(w.stride), uint64(w.n)) != 1 {
			w.stride++
		}
	}
}

// nWords is the number of slot words: n slots, slotsPerWord a word.
func (w *countWindow) nWords() int { return int((w.n + slotsPerWord - 1) / slotsPerWord) }

// slots returns the slot words.
func (w *countWindow) slots() []atomic.Uint64 { return unsafe.Slice(w.words, w.nWords()) }

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// add records an outcome code and returns the code it replaced.
func (w *countWindow) add(h *hotWords, code uint32) uint32 {
	if code == codeOK && w.allOK(h) {
		// Healthy fast path: a success over a window that holds n
		// successes changes nothing, whichever slot it would replace, so
		// nothing is written: three loads of lines that nobody writes
		// while the dependency is healthy, so they stay shared between
		// cores and a healthy breaker scales like a read. (Linearised as a
		// record just before any racing failure.)
		return codeOK
	}
	s := (h.seq.Add(1) - 1) * uint64(w.stride) // atomic 1: claim a slot
	var i uint64
	if w.mask != 0 || w.n == 1 {
		i = s & uint64(w.mask)
	} else {
		i = s % uint64(w.n)
	}
	old := w.swap(i, code) // atomic 2: publish the outcome (a load only when the slot holds code)
	if old != code {
		w.apply(h, old, code) // atomics 3–5, only when the slot's content changed
	}
	return old
}

// swap stores code in slot i and returns the code it held. When the slot
// already holds code nothing is written (a load instead of a locked CAS,
// and the line stays shared between cores): the common healthy case, a
// success over a success, linearised just before a concurrent writer's.
// Otherwise one CAS on the slot's word, retried only when a record of
// another slot of the word landed in between.
func (w *countWindow) swap(i uint64, code uint32) uint32 {
	word := w.word(i)
	shift := i % slotsPerWord * slotBits
	for {
		v := word.Load()
		old := uint32(v>>shift) & slotMask
		if old == code || word.CompareAndSwap(v, v&^(slotMask<<shift)|uint64(code)<<shift) {
			return old
		}
	}
}

// word returns the word that holds slot i, in [0, n): pointer arithmetic,
// without the slice header and bounds check of slots() (the record path
// computes i modulo n, so it is in range).
func (w *countWindow) word(i uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(unsafe.Pointer(w.words), uintptr(i/slotsPerWord)*unsafe.Sizeof(atomic.Uint64{})))
}

// slot returns the code slot i holds.
func (w *countWindow) slot(i uint64) uint32 {
	return uint32(w.word(i).Load()>>(i%slotsPerWord*slotBits)) & slotMask
}

// apply moves the counters from old's contribution to code's.
func (w *countWindow) apply(h *hotWords, old, code uint32) {
	if d := int64(code&codeFilled) - int64(old&codeFilled); d != 0 {
		h.total.Add(d)
	}
	if d := int64(code&codeFailBit>>1) - int64(old&codeFailBit>>1); d != 0 {
		h.fails.Add(d)
	}
	if d := int64(code&codeSlowBit>>2) - int64(old&codeSlowBit>>2); d != 0 {
		h.slows.Add(d)
	}
}

// allOK reports whether the window is full of plain successes (by its
// counters, which may lag the slots by the records in flight).
func (w *countWindow) allOK(h *hotWords) bool {
	return h.fails.Load() == 0 && h.slows.Load() == 0 && h.total.Load() == int64(w.n)
}

// snapshot returns the window's counts, always a possible window: 0 ≤
// fails, slows ≤ total ≤ n, so no rate exceeds 100 %. The counters are read
// one by one while records land, and may run ahead of the slots by the
// records in flight (see countWindow): fails and slows are read before
// total (a record raises total first, so calls that land between the reads
// raise total, not only fails), then each is clamped to that range, an
// error bounded by the records in flight, as the counters' own.
func (w *countWindow) snapshot(h *hotWords) (total, fails, slows int64) {
	fails, slows = h.fails.Load(), h.slows.Load()
	total = min(max(h.total.Load(), 0), int64(w.n))
	return total, min(max(fails, 0), total), min(max(slows, 0), total)
}

// reset empties every slot (rare path: a transition to closed): one swap
// a word, then the counters lose what its slots held.
func (w *countWindow) reset(h *hotWords) {
	words := w.slots()
	for i := range words {
		for old := words[i].Swap(codeEmpty); old != 0; old >>= slotBits {
			if c := uint32(old) & slotMask; c != codeEmpty {
				w.apply(h, c, codeEmpty)
			}
		}
	}
}

// bucket is one time slice of a timeWindow.
type bucket struct {
	epoch atomic.Int64 // the tick (now / resolution) this bucket counts
	total atomic.Int64
	fails atomic.Int64
	slows atomic.Int64
}

// timeWindow is a ring of buckets, each tagged with the tick it counts. A
// record that finds its bucket holding an older tick claims it by CAS of the
// epoch to recycling, zeroes the counters, then publishes the new tick;
// records racing with that (for the old or the new slice) can be dropped or
// land in the fresh bucket, an error bounded by the records in flight at a
// bucket boundary, accepted for a statistical policy. Such a record can
// also land half in the old slice and half in the new one (its total add
// before the counters are zeroed, its failure add after), so a bucket may
// briefly hold more failures than calls; and a snapshot reads a bucket's
// three counters one after the other while records land. A snapshot
// therefore reads failures and slow calls before calls and clamps each
// bucket's to its calls: failures ≤ calls and slow calls ≤ calls always,
// no rate above 100 %. A snapshot re-reads a bucket's epoch after its
// counters, so it never counts one slice's calls under another slice's tick
// (which could add a whole old bucket to the window and trip the breaker
// spuriously).
//
// The buckets are packed, two to a 64 B line, in both layouts: every call
// of a slice writes the one bucket of that slice, so a line per bucket
// would separate words that are never written at the same time (the
// neighbours are the slices before and after, which no call of this slice
// writes; snapshots read every bucket, the current one included, in either
// layout). The header lives in the Breaker: no allocation but the buckets.
type timeWindow struct {
	buckets *bucket // n of them
	res     int64   // bucket resolution in ns
	n       int64
}

// recycling is the epoch of a bucket being reset: it is below every real
// tick and outside every window.
const recycling = math.MinInt64

func newTimeWindow(span int64, n int) timeWindow {
	w := timeWindow{res: span / int64(n), n: int64(n)}
	w.buckets = unsafe.SliceData(make([]bucket, n))
	for i := range w.n {
		w.bucket(i).epoch.Store(-1 << 62)
	}
	return w
}

// bucket returns bucket i, in [0, n).
func (w *timeWindow) bucket(i int64) *bucket { return &unsafe.Slice(w.buckets, w.n)[i] }

// tick is floor(now / res): readings are from an arbitrary epoch and may be
// negative, where Go's division would round toward zero (two slices in tick 0).
func (w *timeWindow) tick(now int64) int64 {
	t := now / w.res
	if now < 0 && t*w.res != now {
		t--
	}
	return t
}

func (w *timeWindow) bucketFor(tick int64) *bucket {
	i := tick % w.n
	if i < 0 {
		i += w.n
	}
	return w.bucket(i)
}

// add records one outcome at now. It reports whether it started a new slice
// (recycled the bucket): the window slid, so older calls left it and the
// rates may have risen without any new failure.
func (w *timeWindow) add(now int64, failed, slow bool) (slid bool) {
	tick := w.tick(now)
	b := w.bucketFor(tick)
	if e := b.epoch.Load(); e != tick {
		if e > tick || e == recycling {
			// A late record for a slice already recycled, or one racing
			// with the recycling: drop it.
			return false
		}
		// Rare: once per bucket per slice. The epoch is published only
		// after the counters are zeroed, so no snapshot counts the old
		// slice's calls as the new one's.
		if b.epoch.CompareAndSwap(e, recycling) {
			b.total.Store(0)
			b.fails.Store(0)
			b.slows.Store(0)
			b.epoch.Store(tick)
			slid = true
		} else if b.epoch.Load() != tick {
			return false // another record is recycling it: racing, dropped
		}
	}
	b.total.Add(1)
	if failed {
		b.fails.Add(1)
	}
	if slow {
		b.slows.Add(1)
	}
	return slid
}

func (w *timeWindow) snapshot(now int64) (total, fails, slows int64) {
	tick := w.tick(now)
	for i := range w.n {
		b := w.bucket(i)
		for {
			e := b.epoch.Load()
			if e > tick || e <= tick-w.n { // also excludes recycling
				break
			}
			// Failures and slow calls first: a record adds to total
			// first, so one that lands between these reads raises total,
			// not only fails.
			f, sl := b.fails.Load(), b.slows.Load()
			t := b.total.Load()
			if b.epoch.Load() != e {
				continue // recycled while read: the counts may be another slice's
			}
			t = max(t, 0)
			total += t
			fails += min(max(f, 0), t) // a record split by a recycling can leave f > t
			slows += min(max(sl, 0), t)
			break
		}
	}
	return total, fails, slows
}

func (w *timeWindow) reset() {
	for i := range w.n {
		b := w.bucket(i)
		b.epoch.Store(-1 << 62)
		b.total.Store(0)
		b.fails.Store(0)
		b.slows.Store(0)
	}
}
