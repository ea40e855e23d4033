package histogram

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/rampart-go/rampart/internal/israce"
)

func TestIndexBounds(t *testing.T) {
	// Every bucket's bounds map back to it, buckets tile [0, MaxValue]
	// without gaps, and each bucket is at most RelativeError of its low end.
	var next int64
	for i := 0; i < NumBuckets; i++ {
		lo, hi := Bounds(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if Index(lo) != i || Index(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: Index(lo)=%d Index(hi)=%d", i, lo, hi, Index(lo), Index(hi))
		}
		if lo >= 64 && float64(hi-lo) > float64(lo)*RelativeError {
			t.Fatalf("bucket %d [%d,%d] wider than the bound", i, lo, hi)
		}
		if lo < 64 && hi != lo {
			t.Fatalf("bucket %d [%d,%d] not exact below 64", i, lo, hi)
		}
		next = hi + 1
	}
	if next-1 != MaxValue {
		t.Fatalf("last bucket ends at %d, want %d", next-1, int64(MaxValue))
	}
	if Index(-5) != 0 || Index(math.MaxInt64) != NumBuckets-1 {
		t.Fatal("clamping")
	}
}

func FuzzIndex(f *testing.F) {
	for _, v := range []int64{0, 1, 63, 64, 65, 1000, 1 << 20, MaxValue, MaxValue + 1, -1, math.MaxInt64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		i := Index(v)
		if i < 0 || i >= NumBuckets {
			t.Fatalf("Index(%d) = %d", v, i)
		}
		c := min(max(v, 0), MaxValue)
		lo, hi := Bounds(i)
		if c < lo || c > hi {
			t.Fatalf("%d (clamped %d) in bucket %d [%d,%d]", v, c, i, lo, hi)
		}
		if float64(hi-c) > float64(c)*RelativeError {
			t.Fatalf("%d reported as %d: beyond the bound", c, hi)
		}
	})
}

// exact returns the round(p*n)-th smallest of sorted (1-based, clamped).
func exact(sorted []int64, p float64) int64 {
	r := int(math.Round(p * float64(len(sorted))))
	r = min(max(r, 1), len(sorted))
	return sorted[r-1]
}

func TestQuantileWithinBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"uniform-small": func() int64 { return r.Int64N(100) },
		"uniform":       func() int64 { return r.Int64N(10_000_000) },
		"lognormal": func() int64 {
			return int64(math.Exp(r.NormFloat64()*1.5 + 13)) // ~0.4 ms median, long tail
		},
		"bimodal": func() int64 { // 1 ms with 5 % at 50 ms, the hedging test's service
			if r.Float64() < 0.05 {
				return 50_000_000 + r.Int64N(1000)
			}
			return 1_000_000 + r.Int64N(1000)
		},
	}
	ps := []float64{0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1}
	for name, gen := range dists {
		for _, n := range []int{1, 2, 17, 1000, 50_000} {
			var h Histogram
			vals := make([]int64, n)
			for i := range vals {
				vals[i] = gen()
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, p := range ps {
				got, cnt := h.Quantile(p)
				if cnt != uint64(n) {
					t.Fatalf("%s n=%d: count %d", name, n, cnt)
				}
				want := exact(vals, p)
				if got < want || float64(got-want) > float64(want)*RelativeError {
					t.Fatalf("%s n=%d p=%v: got %d, exact %d (bound %.4f)", name, n, p, got, want, RelativeError)
				}
			}
		}
	}
}

func TestQuantileEdges(t *testing.T) {
	var h Histogram
	if v, n := h.Quantile(0.5); v != 0 || n != 0 {
		t.Fatalf("empty: %d %d", v, n)
	}
	h.Record(-7)
	h.Record(math.MaxInt64)
	if v, _ := h.Quantile(0); v != 0 {
		t.Fatalf("p0 = %d", v)
	}
	if v, _ := h.Quantile(math.NaN()); v != MaxValue {
		t.Fatalf("NaN = %d", v)
	}
	if v, _ := h.Quantile(2); v != MaxValue {
		t.Fatalf("p2 = %d", v)
	}
	if v, _ := h.Quantile(-1); v != 0 {
		t.Fatalf("p-1 = %d", v)
	}
	h.RecordN(100, 10)
	if h.Count() != 12 || h.BucketCount(Index(100)) != 10 {
		t.Fatalf("count %d", h.Count())
	}
	h.Reset()
	if h.Count() != 0 {
		t.Fatal("reset")
	}
}

func TestDecay(t *testing.T) {
	var h Histogram
	h.RecordN(1000, 100)
	h.RecordN(5, 1)
	h.Decay(0)
	if h.Count() != 101 {
		t.Fatal("Decay(0) changed counts")
	}
	h.Decay(1)
	if h.BucketCount(Index(1000)) != 50 || h.BucketCount(Index(5)) != 0 {
		t.Fatalf("after Decay(1): %d %d", h.BucketCount(Index(1000)), h.BucketCount(Index(5)))
	}
	h.Decay(64)
	if h.Count() != 0 {
		t.Fatalf("Decay(64) left %d", h.Count())
	}
	// A shift in the distribution shows after a few halvings.
	h.RecordN(1_000_000, 1000)
	for range 4 {
		h.Decay(1)
		h.RecordN(50_000_000, 200)
	}
	if v, _ := h.Quantile(0.5); v < 50_000_000 {
		t.Fatalf("median %d did not follow the shift", v)
	}
}

// TestConcurrentRecord records from many goroutines while others query and
// decay, then checks that no record was lost (under -race in make test).
func TestConcurrentRecord(t *testing.T) {
	var h Histogram
	const goroutines, per = 8, 20_000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var qwg sync.WaitGroup
	qwg.Add(1)
	go func() { // concurrent queries see a monotone count and a sane value
		defer qwg.Done()
		var last uint64
		for {
			select {
			case <-stop:
				return
			default:
			}
			v, n := h.Quantile(0.99)
			if n < last || v < 0 || v > MaxValue {
				t.Errorf("query: n=%d last=%d v=%d", n, last, v)
				return
			}
			last = n
		}
	}()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range per {
				h.Record(r.Int64N(1 << 30))
			}
		}()
	}
	wg.Wait()
	close(stop)
	qwg.Wait()
	if n := h.Count(); n != goroutines*per {
		t.Fatalf("count %d, want %d", n, goroutines*per)
	}

	// Decay concurrent with recording: counts stay within what was
	// recorded, and once the decays stop every new record counts.
	h.Reset()
	var wg2 sync.WaitGroup
	for range goroutines {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for range per {
				h.Record(3_000)
			}
		}()
	}
	for range 50 {
		h.Decay(1)
	}
	wg2.Wait()
	before := h.Count()
	if before > goroutines*per {
		t.Fatalf("count after concurrent decay %d", before)
	}
	h.RecordN(3_000, 100)
	if n := h.Count(); n != before+100 {
		t.Fatalf("count %d, want %d", n, before+100)
	}
}

func TestAllocsRecordQuantile(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	h := new(Histogram)
	if n := testing.AllocsPerRun(1000, func() { h.Record(12345) }); n != 0 {
		t.Fatalf("Record: %v allocs", n)
	}
	if n := testing.AllocsPerRun(100, func() { h.Quantile(0.95) }); n != 0 {
		t.Fatalf("Quantile: %v allocs", n)
	}
}

// BenchmarkRecord records values spread over the buckets, one goroutine.
func BenchmarkRecord(b *testing.B) {
	h := new(Histogram)
	b.ReportAllocs()
	v := int64(1_000_000)
	for b.Loop() {
		h.Record(v)
		v = v*5/4 + 977 // spread over the buckets
		if v > 1<<40 {
			v = 1_000_000
		}
	}
	if h.Count() == 0 {
		b.Fatal("nothing recorded")
	}
}

// BenchmarkRecordParallel is BenchmarkRecord from GOMAXPROCS goroutines
// into one histogram (its counters are shared words).
func BenchmarkRecordParallel(b *testing.B) {
	h := new(Histogram)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := int64(1_000_000)
		for pb.Next() {
			h.Record(v)
			v = v*5/4 + 977
			if v > 1<<40 {
				v = 1_000_000
			}
		}
	})
	if h.Count() == 0 {
		b.Fatal("nothing recorded")
	}
}

func BenchmarkQuantile(b *testing.B) {
	h := new(Histogram)
	r := rand.New(rand.NewPCG(1, 1))
	for range 100_000 {
		h.Record(r.Int64N(1 << 32))
	}
	for b.Loop() {
		h.Quantile(0.95)
	}
}

// TestConcurrentDecay: Decay is documented safe for concurrent use, but it
// subtracted what it computed from its own load, so two Decays (or a Decay
// and a Reset) that loaded the same count both subtracted, and a counter of
// 1 wrapped around to 2^64-1, ruining every later quantile.
func TestConcurrentDecay(t *testing.T) {
	var h Histogram
	for round := range 100 {
		for i := range NumBuckets {
			lo, _ := Bounds(i)
			h.Record(lo)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if g == 3 && round%2 == 0 {
					h.Reset()
					return
				}
				h.Decay(1)
			}()
		}
		wg.Wait()
		if n := h.Count(); n != 0 {
			t.Fatalf("round %d: %d values left after decaying counts of 1", round, n)
		}
	}
}
