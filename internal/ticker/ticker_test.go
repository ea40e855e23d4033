package ticker

import (
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart/internal/testkit"
)

// readMonotonic reads clk n times after a first reading and fails t if a
// reading is below the one before it.
func readMonotonic(t *testing.T, clk interface{ Now() int64 }, n int) {
	t.Helper()
	prev := clk.Now()
	for range n {
		v := clk.Now()
		if v < prev {
			t.Errorf("went backwards: %d < %d", v, prev)
			return
		}
		prev = v
	}
}

func TestNanoMonotonic(t *testing.T) {
	n := NewNano()
	prev := n.Now()
	if prev < 0 {
		t.Fatalf("negative first reading %d", prev)
	}
	for range 10000 {
		v := n.Now()
		if v < prev {
			t.Fatalf("went backwards: %d < %d", v, prev)
		}
		prev = v
	}
}

func TestNanoSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNano()
		a := n.Now()
		time.Sleep(250 * time.Millisecond)
		if d := n.Now() - a; d != int64(250*time.Millisecond) {
			t.Fatalf("elapsed %d, want exactly 250ms under synctest", d)
		}
	})
}

// TestSameBubble: a Nano made outside a testing/synctest bubble runs on the
// clock of callers outside, not of callers inside one, and the other way
// round.
func TestSameBubble(t *testing.T) {
	outside := NewNano()
	if !SameBubble(outside) {
		t.Error("made and asked outside: not the same clock")
	}
	var inside *Nano
	synctest.Test(t, func(t *testing.T) {
		inside = NewNano()
		if SameBubble(outside) {
			t.Error("made outside, asked inside: the same clock")
		}
		if !SameBubble(inside) {
			t.Error("made and asked inside: not the same clock")
		}
	})
	if SameBubble(inside) {
		t.Error("made inside, asked outside: the same clock")
	}
}

func TestCachedRefreshesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCached(time.Millisecond)
		first := c.Now()
		if first <= 0 {
			t.Fatalf("first reading %d", first)
		}
		time.Sleep(10*time.Millisecond + time.Microsecond)
		synctest.Wait()
		got := c.Now()
		// The source started at the same instant, so after 10 ticks the cache
		// holds a reading taken at the 10th tick.
		if got-first < int64(9*time.Millisecond) || got-first > int64(10*time.Millisecond) {
			t.Fatalf("after 10ms the cached clock moved %v", time.Duration(got-first))
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		after := c.Now()
		if after < got {
			t.Fatalf("went backwards across Close: %d < %d", after, got)
		}
		time.Sleep(time.Millisecond)
		if c.Now() <= after {
			t.Fatal("closed clock stopped moving")
		}
		if err := c.Close(); err != nil { // idempotent
			t.Fatal(err)
		}
	})
}

func TestCachedStalenessBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCached(2 * time.Millisecond)
		defer c.Close()
		src := c.src
		c.Now()
		for range 50 {
			time.Sleep(700 * time.Microsecond)
			synctest.Wait()
			lag := src.Now() - c.Now()
			if lag < 0 || lag > int64(c.Interval()) {
				t.Fatalf("lag %v outside [0, %v]", time.Duration(lag), c.Interval())
			}
		}
	})
}

func TestCachedCloseBeforeStart(t *testing.T) {
	c := NewCached(0)
	if c.Interval() != DefaultInterval {
		t.Fatalf("interval %v", c.Interval())
	}
	c.Close()
	if c.Now() < 0 {
		t.Fatal("negative reading after Close")
	}
}

// TestCachedConcurrentReadersAndClose races readers with a Close, the
// first reading (which starts the refresh goroutine) included: readings
// never go backwards, a second Close after the race is harmless, and no
// goroutine is left (goleak in TestMain). Run under -race.
func TestCachedConcurrentReadersAndClose(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		interval               time.Duration
		rounds, readers, reads int
	}{
		{"long reads", 100 * time.Microsecond, 1, 8, 20000},
		{"close at start", 50 * time.Microsecond, 50, 4, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.rounds {
				c := NewCached(tc.interval)
				var wg sync.WaitGroup
				for range tc.readers {
					wg.Go(func() { readMonotonic(t, c, tc.reads) })
				}
				wg.Go(func() { c.Close() })
				wg.Wait()
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCachedCloseAfterZeroReadingNeverGoesBackwards: a Cached reading is
// stored as at least 1 (0 means "not started"), so a first reading taken
// while the source reads 0 is 1; after Close, Now reads the source
// directly and still returns no less than that 1. Under testing/synctest
// the source reads exactly 0 until time moves.
func TestCachedCloseAfterZeroReadingNeverGoesBackwards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCached(time.Millisecond)
		first := c.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if after := c.Now(); after < first {
			t.Fatalf("read %d before Close, %d after: backwards", first, after)
		}
	})
}

// TestIsNil: IsNil recognises typed nil pointers of the three clocks only.
func TestIsNil(t *testing.T) {
	var c *Cached
	var n *Nano
	var m *Manual
	for _, v := range []any{c, n, m} {
		if !IsNil(v) {
			t.Fatalf("IsNil(%T nil) = false", v)
		}
	}
	for _, v := range []any{nil, NewNano(), NewManual(0), 3} {
		if IsNil(v) {
			t.Fatalf("IsNil(%v) = true", v)
		}
	}
}

func TestManual(t *testing.T) {
	m := NewManual(100)
	if m.Now() != 100 {
		t.Fatal("start")
	}
	if m.Advance(time.Second) != 100+int64(time.Second) {
		t.Fatal("Advance")
	}
	m.Set(5e9)
	if m.Now() != 5e9 {
		t.Fatal("Set")
	}
	if p, _ := testkit.Run(func() { m.Set(1) }); p == nil {
		t.Fatal("Set backwards did not panic")
	}
	if p, _ := testkit.Run(func() { m.Advance(-1) }); p == nil {
		t.Fatal("negative Advance did not panic")
	}
	if m.Now() != 5e9 {
		t.Fatalf("a refused Set or Advance moved the clock to %d", m.Now())
	}
}

// TestManualAtTheEndsOfTheClock: the clock starts anywhere in the int64
// range, Set to the very end is allowed and stays there, a zero-duration
// Advance there does not move it, and an Advance past the end saturates
// instead of wrapping (readers never see time go backwards). The zero
// value reads 0.
func TestManualAtTheEndsOfTheClock(t *testing.T) {
	m := NewManual(math.MaxInt64 - 10)
	before := m.Now()
	got := m.Advance(time.Hour)
	if got < before || m.Now() < before {
		t.Fatalf("Advance(1h) from %d returned %d, reads %d: time went backwards", before, got, m.Now())
	}

	m = NewManual(math.MinInt64 + 1)
	if m.Now() != math.MinInt64+1 {
		t.Fatal("start")
	}
	m.Set(math.MaxInt64)
	if m.Advance(0) != math.MaxInt64 || m.Now() != math.MaxInt64 {
		t.Fatalf("reads %d", m.Now())
	}
	var z Manual // the zero value reads 0
	if z.Now() != 0 || z.Advance(5) != 5 {
		t.Fatal("zero value")
	}
}

func TestManualConcurrent(t *testing.T) {
	m := NewManual(0)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				m.Advance(1)
			}
		})
		wg.Go(func() { readMonotonic(t, m, 1000) })
	}
	wg.Wait()
	if m.Now() != 4000 {
		t.Fatalf("got %d", m.Now())
	}
}

// TestManualConcurrentSetAdvance: under concurrent Set and Advance every
// reader sees a non-decreasing clock, and a Set below the current reading
// panics instead of moving time back.
func TestManualConcurrentSetAdvance(t *testing.T) {
	m := NewManual(0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if g%2 == 0 {
					m.Advance(1)
				} else {
					testkit.Run(func() { m.Set(int64(i * 3)) }) // a Set below the current reading panics
				}
			}
		})
		wg.Go(func() { readMonotonic(t, m, 4000) })
	}
	wg.Wait()
}
