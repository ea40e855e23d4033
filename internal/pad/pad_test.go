package pad

import (
	"sync"
	"testing"
	"unsafe"
)

func TestLayout(t *testing.T) {
	if LineSize != 64 && LineSize != 128 && LineSize != 256 {
		t.Fatalf("unexpected cache line size %d", LineSize)
	}
	check := func(name string, size, off, width uintptr) {
		t.Helper()
		if size != 2*LineSize {
			t.Errorf("%s: size %d, want %d", name, size, 2*LineSize)
		}
		if off != LineSize {
			t.Errorf("%s: value offset %d, want %d", name, off, LineSize)
		}
		if off+width+(LineSize-width) != size {
			t.Errorf("%s: trailing pad does not reach the end of the struct", name)
		}
	}
	var i64 Int64
	check("Int64", unsafe.Sizeof(i64), unsafe.Offsetof(i64.Int64), 8)
	var u64 Uint64
	check("Uint64", unsafe.Sizeof(u64), unsafe.Offsetof(u64.Uint64), 8)
	var i32 Int32
	check("Int32", unsafe.Sizeof(i32), unsafe.Offsetof(i32.Int32), 4)
	var u32 Uint32
	check("Uint32", unsafe.Sizeof(u32), unsafe.Offsetof(u32.Uint32), 4)
}

// TestNeighbours checks that two padded words in one struct are at least a
// cache line apart, whatever the struct's alignment.
func TestNeighbours(t *testing.T) {
	var s struct {
		a Int64
		b Int64
		c int64
	}
	pa := uintptr(unsafe.Pointer(&s.a.Int64))
	pb := uintptr(unsafe.Pointer(&s.b.Int64))
	pc := uintptr(unsafe.Pointer(&s.c))
	if pb-pa < LineSize || pc-pb < LineSize {
		t.Fatalf("words too close: a=%#x b=%#x c=%#x", pa, pb, pc)
	}
}

func TestConcurrentAdd(t *testing.T) {
	var w Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				w.Add(1)
			}
		})
	}
	wg.Wait()
	if got := w.Load(); got != 8000 {
		t.Fatalf("got %d, want 8000", got)
	}
}
