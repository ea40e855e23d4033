package atomicx

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/quick"
)

func TestMaxMin(t *testing.T) {
	var a atomic.Int64
	a.Store(5)
	if got := Max(&a, 3); got != 5 || a.Load() != 5 {
		t.Fatalf("Max lowered: %d", got)
	}
	if got := Max(&a, 9); got != 9 || a.Load() != 9 {
		t.Fatalf("Max: %d", got)
	}
	if got := Min(&a, 12); got != 9 {
		t.Fatalf("Min raised: %d", got)
	}
	if got := Min(&a, -4); got != -4 || a.Load() != -4 {
		t.Fatalf("Min: %d", got)
	}
}

func TestMaxMinConcurrent(t *testing.T) {
	var hi, lo atomic.Int64
	lo.Store(math.MaxInt64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				v := int64(g*2000 + i)
				Max(&hi, v)
				Min(&lo, v)
			}
		})
	}
	wg.Wait()
	if hi.Load() != 8*2000-1 || lo.Load() != 0 {
		t.Fatalf("hi=%d lo=%d", hi.Load(), lo.Load())
	}
}

func TestAddBelowNeverOvershoots(t *testing.T) {
	var a, peak atomic.Int64
	const limit = 7
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 5000 {
				if AddBelow(&a, 1, limit) {
					admitted.Add(1)
					Max(&peak, a.Load())
					if !SubAbove(&a, 1, 0) {
						t.Error("SubAbove refused a held unit")
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if a.Load() != 0 {
		t.Fatalf("leaked %d", a.Load())
	}
	if peak.Load() > limit {
		t.Fatalf("peak %d above limit %d", peak.Load(), limit)
	}
	if admitted.Load() == 0 {
		t.Fatal("nothing admitted")
	}
	if SubAbove(&a, 1, 0) {
		t.Fatal("SubAbove went below the floor")
	}
}

func TestAddClamped(t *testing.T) {
	var a atomic.Int64
	if got := AddClamped(&a, 10, 0, 5); got != 5 {
		t.Fatalf("got %d", got)
	}
	if got := AddClamped(&a, -100, -2, 5); got != -2 {
		t.Fatalf("got %d", got)
	}
	a.Store(math.MaxInt64 - 1)
	if got := AddClamped(&a, 10, math.MinInt64, math.MaxInt64); got != math.MaxInt64 {
		t.Fatalf("no saturation: %d", got)
	}
}

func TestSatAdd(t *testing.T) {
	cases := []struct{ x, y, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{math.MaxInt64, math.MinInt64, -1},
		{-5, 3, -2},
	}
	for _, c := range cases {
		if got := SatAdd(c.x, c.y); got != c.want {
			t.Errorf("SatAdd(%d, %d) = %d, want %d", c.x, c.y, got, c.want)
		}
	}
	// Against big-enough arithmetic: the result is the clamp of the true sum.
	f := func(x, y int64) bool {
		s := float64(x) + float64(y)
		got := SatAdd(x, y)
		switch {
		case s >= math.MaxInt64:
			return got == math.MaxInt64 || got == x+y
		case s <= math.MinInt64:
			return got == math.MinInt64 || got == x+y
		default:
			return got == x+y
		}
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSatMul(t *testing.T) {
	if SatMul(3, 4) != 12 || SatMul(-1, 4) != 0 || SatMul(math.MaxInt64/2, 3) != math.MaxInt64 {
		t.Fatal("SatMul")
	}
}

func TestField(t *testing.T) {
	state := Field{Shift: 0, Width: 3}
	gen := Field{Shift: 3, Width: 61}
	var w uint64
	w = state.Set(w, 5)
	w = gen.Set(w, 12345)
	if state.Get(w) != 5 || gen.Get(w) != 12345 {
		t.Fatalf("got %d %d", state.Get(w), gen.Get(w))
	}
	w = state.Set(w, 9) // truncated to 3 bits
	if state.Get(w) != 1 || gen.Get(w) != 12345 {
		t.Fatalf("truncation leaked: %d %d", state.Get(w), gen.Get(w))
	}
	full := Field{Shift: 0, Width: 64}
	if full.Get(full.Set(0, math.MaxUint64)) != math.MaxUint64 {
		t.Fatal("64-bit field")
	}
}

func TestFieldConcurrentCAS(t *testing.T) {
	lo := Field{Shift: 0, Width: 32}
	hi := Field{Shift: 32, Width: 32}
	var w atomic.Uint64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			f := lo
			if g%2 == 1 {
				f = hi
			}
			for range 1000 {
				for {
					old := w.Load()
					if w.CompareAndSwap(old, f.Set(old, f.Get(old)+1)) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if lo.Get(w.Load()) != 4000 || hi.Get(w.Load()) != 4000 {
		t.Fatalf("lo=%d hi=%d", lo.Get(w.Load()), hi.Get(w.Load()))
	}
}

func TestPack32(t *testing.T) {
	h, l := Unpack32(Pack32(0xdeadbeef, 7))
	if h != 0xdeadbeef || l != 7 {
		t.Fatal("Pack32 round trip")
	}
}
