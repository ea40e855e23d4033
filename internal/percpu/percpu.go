// Package percpu provides counters striped per P (the Go scheduler's
// processor): each P adds to its own stripe, so goroutines on different
// cores never write one cache line, and a reader sums the stripes. It is
// the layout of sync.Pool's per-P pools and of the Linux kernel's percpu
// counters, for statistics that many goroutines bump on every call and that
// are read rarely (a metrics scrape).
//
// An add pins the goroutine to its P for the duration of the add (the
// runtime's procPin, no lock, no atomic read-modify-write on 64-bit
// platforms without the race detector): a few nanoseconds. A P whose id is
// past the stripes allocated at New (GOMAXPROCS raised above
// max(GOMAXPROCS, NumCPU) at New) adds atomically into one overflow stripe
// that only such Ps write, and only atomically: a P with a stripe of its
// own is its stripe's only writer, so its plain add never races with
// another P's. The Ps past the stripes contend on the overflow stripe's
// lines, the price of a GOMAXPROCS raised after New.
package percpu

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/pad"
)

// Width is the number of counters of a [Counters]: one stripe is Width
// words, 128 B, two lines on amd64 (one on arm64).
const Width = 16

// Counters is a set of Width uint64 counters striped per P. Build it with
// [New]; the zero Counters is not usable.
type Counters struct {
	words []uint64 // n+1 stripes of Width words, the first starting a cache line: one per P, then the overflow stripe
	n     int      // stripes of a P's own; stripe n is the overflow stripe
}

// procPin pins the calling goroutine to its P (no preemption, no
// migration) until procUnpin, and returns the P's id, in [0, GOMAXPROCS).
// It is the runtime's own per-P primitive (sync.Pool's), which the runtime
// source marks as kept, signature unchanged, for the packages that link to
// it.
//
//go:linkname procPin runtime.procPin
func procPin() int

// procUnpin ends procPin.
//
//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// plainAdd is true where a counter that only its pinned P writes may be
// added to with a plain read-modify-write: a 64-bit platform (where a
// concurrent atomic load of the word cannot tear) without the race
// detector (which does not see a P's pinning as an order between the
// goroutines that run on it).
const plainAdd = unsafe.Sizeof(uintptr(0)) == 8 && !israce.Enabled

// New returns counters with a stripe per P: max(GOMAXPROCS, NumCPU)
// stripes of 128 B, each starting a cache line, so that no two Ps write one
// line, and one overflow stripe for the Ps past them (Bytes).
func New() *Counters {
	n := max(runtime.GOMAXPROCS(0), runtime.NumCPU())
	line := int(pad.LineSize / 8)
	words := make([]uint64, (n+1)*Width+line)
	// Start the first stripe on a line: Go aligns a []uint64 to 8 bytes
	// only, and a stripe that straddled a line would share it with the
	// next P's.
	off := 0
	if r := int(uintptr(unsafe.Pointer(&words[0])) % pad.LineSize); r != 0 {
		off = (int(pad.LineSize) - r) / 8
	}
	end := off + (n+1)*Width
	return &Counters{words: words[off:end:end], n: n}
}

// Bytes returns what New asks for a machine with n Ps: its n stripes, the
// overflow stripe and one line more for the alignment, without the
// Counters struct itself (the allocator rounds it up to its size class:
// see the test).
func Bytes(n int) int { return ((n+1)*Width + int(pad.LineSize/8)) * 8 }

// stripe returns the first word of the stripe P id adds to: its own, or
// the overflow stripe for a P past the stripes.
func (c *Counters) stripe(id int) int { return min(id, c.n) * Width }

// Add adds d to counter i (0 ≤ i < Width) in the caller's P's stripe.
func (c *Counters) Add(i int, d uint64) {
	id := procPin()
	if id < c.n && plainAdd {
		c.words[id*Width+i] += d
	} else {
		// The overflow stripe (or any stripe without plainAdd) has
		// several writers: atomic.
		atomic.AddUint64(&c.words[c.stripe(id)+i], d)
	}
	procUnpin()
}

// Add2 adds di to counter i and dj to counter j in one pinning.
func (c *Counters) Add2(i int, di uint64, j int, dj uint64) {
	id := procPin()
	if id < c.n && plainAdd {
		s := c.words[id*Width : id*Width+Width : id*Width+Width]
		s[i&(Width-1)] += di
		s[j&(Width-1)] += dj
	} else {
		s := c.stripe(id)
		atomic.AddUint64(&c.words[s+i], di)
		atomic.AddUint64(&c.words[s+j], dj)
	}
	procUnpin()
}

// Load returns the sum of counter i over the stripes. The stripes are read
// one by one: a sum taken while adds run counts some of them and not
// others, as any snapshot of counters that keep moving.
func (c *Counters) Load(i int) uint64 {
	var sum uint64
	for s := 0; s <= c.n; s++ {
		sum += atomic.LoadUint64(&c.words[s*Width+i])
	}
	return sum
}

// Snapshot fills dst with every counter's sum, in one pass over the
// stripes.
func (c *Counters) Snapshot(dst *[Width]uint64) {
	*dst = [Width]uint64{}
	for s := 0; s <= c.n; s++ {
		for i := range Width {
			dst[i] += atomic.LoadUint64(&c.words[s*Width+i])
		}
	}
}
