package notify

import (
	"sync/atomic"
	"testing"

	"github.com/rampart-go/rampart/internal/israce"
)

func TestRecoversAndCounts(t *testing.T) {
	var panics atomic.Uint64
	var got []int
	Call1(&panics, func(a int) { got = append(got, a) }, 1)
	Call2(&panics, func(a, b int) { got = append(got, a+b) }, 1, 2)
	Call3(&panics, func(a, b, c int) { got = append(got, a+b+c) }, 1, 2, 3)
	if len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 6 || panics.Load() != 0 {
		t.Fatalf("got %v, panics %d", got, panics.Load())
	}
	Call1(&panics, func(int) { panic("boom") }, 0)
	Call2(&panics, func(int, int) { panic("boom") }, 0, 0)
	Call3(&panics, func(int, int, int) { panic(nil) }, 0, 0, 0) // a *runtime.PanicNilError
	if panics.Load() != 3 {
		t.Fatalf("panics %d, want 3", panics.Load())
	}
}

func TestAllocs(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	var panics atomic.Uint64
	f := func(a, b int64) {}
	if n := testing.AllocsPerRun(100, func() { Call2(&panics, f, 1, 2) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}
