package percpu

import (
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestStripesStartOnALine: every stripe starts a cache line, so no two Ps
// write one line.
func TestStripesStartOnALine(t *testing.T) {
	for range 100 {
		c := New()
		for s := 0; s <= c.n; s++ {
			if a := uintptr(unsafe.Pointer(&c.words[s*Width])); a%pad.LineSize != 0 {
				t.Fatalf("stripe %d at %#x, not on a %d-byte line", s, a, pad.LineSize)
			}
		}
	}
}

// TestStressAddsSumExactly: adds from many goroutines on every P sum
// exactly.
func TestStressAddsSumExactly(t *testing.T) {
	c := New()
	const goroutines, adds = 16, 5000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for k := range adds {
				c.Add(g%Width, 1)
				c.Add2(0, 1, Width-1, uint64(k%3))
				if k%100 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	var snap [Width]uint64
	c.Snapshot(&snap)
	want := [Width]uint64{}
	for g := range goroutines {
		want[g%Width] += adds
	}
	want[0] += goroutines * adds
	for k := range adds {
		want[Width-1] += goroutines * uint64(k%3)
	}
	if snap != want {
		t.Fatalf("sums %v, want %v", snap, want)
	}
	for i := range Width {
		if c.Load(i) != want[i] {
			t.Fatalf("Load(%d) = %d, want %d", i, c.Load(i), want[i])
		}
	}
}

// TestAddsPastTheStripesSumExactly: with GOMAXPROCS raised above the
// stripes allocated at New, the Ps past them add into the overflow stripe
// and no add is lost (a P past the stripes once added atomically into
// another P's stripe, which that P adds to with a plain read-modify-write).
func TestAddsPastTheStripesSumExactly(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	c := New()
	runtime.GOMAXPROCS(4 * c.n)
	const goroutines = 32
	adds := 400000
	if israce.Enabled {
		adds = 5000 // every add is atomic there: the count only checks the overflow stripe is summed
	}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for k := range adds {
				c.Add(0, 1)
				c.Add2(1, 1, 2, 2)
				if k%1000 == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	wg.Wait()
	var snap [Width]uint64
	c.Snapshot(&snap)
	n := uint64(goroutines * adds)
	want := [Width]uint64{n, n, 2 * n}
	if snap != want {
		t.Fatalf("sums %v, want %v", snap[:3], want[:3])
	}
	if got := c.Load(0); got != want[0] {
		t.Fatalf("Load(0) = %d, want %d: %d adds lost", got, want[0], want[0]-got)
	}
}

// TestAllocsAdd: an add allocates nothing.
func TestAllocsAdd(t *testing.T) {
	c := New()
	testkit.WantAllocs(t, "Add", 0, func() { c.Add(3, 1) })
	testkit.WantAllocs(t, "Add2", 0, func() { c.Add2(3, 1, 4, 2) })
}

// TestBytes: New allocates Bytes(max(GOMAXPROCS, NumCPU)) for the words
// (a stripe per P, the overflow stripe and a line; a size class may round
// it up) and the struct (32 B; 16 B on 32-bit).
func TestBytes(t *testing.T) {
	n := max(runtime.GOMAXPROCS(0), runtime.NumCPU())
	got := testkit.Bytes(t, func() any { return New() })
	words := int64(Bytes(n))
	if got < words+int64(unsafe.Sizeof(Counters{})) || got > words+words/8+64 {
		t.Fatalf("New allocates %d B for %d Ps, want about %d (words) + the struct", got, n, words)
	}
}
