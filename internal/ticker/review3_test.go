package ticker_test

// Third review of internal/ticker: reproductions of the bugs found (skipped,
// "BUG: ...") and guards of behaviour the earlier tests did not cover.

import (
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart/internal/ticker"
)

// Manual's doc: "readers never see time go backwards". Advance adds without
// saturation, so a clock near math.MaxInt64 wraps to a huge negative
// reading.
func TestReview3ManualAdvanceNoWrap(t *testing.T) {
	m := ticker.NewManual(math.MaxInt64 - 10)
	before := m.Now()
	got := m.Advance(time.Hour)
	if got < before || m.Now() < before {
		t.Fatalf("Advance(1h) from %d returned %d, reads %d: time went backwards", before, got, m.Now())
	}
}

// Cached stores readings as at least 1 (0 means "not started"), so a first
// reading taken when the source reads 0 is 1; after Close, Now reads the
// source directly and returns 0: the clock goes back by one nanosecond,
// against the doc ("Readings never go backwards, including across Close").
// Under testing/synctest the source reads exactly 0 until time moves.
func TestReview3CachedCloseNeverGoesBackwards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := ticker.NewCached(time.Millisecond)
		first := c.Now()
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if after := c.Now(); after < first {
			t.Fatalf("read %d before Close, %d after: backwards", first, after)
		}
	})
}

// Guards below.

// Set to the very end of the clock is allowed, and stays there; a
// zero-duration Advance there does not move it.
func TestReview3ManualExtremes(t *testing.T) {
	m := ticker.NewManual(math.MinInt64 + 1)
	if m.Now() != math.MinInt64+1 {
		t.Fatal("start")
	}
	m.Set(math.MaxInt64)
	if m.Advance(0) != math.MaxInt64 || m.Now() != math.MaxInt64 {
		t.Fatalf("reads %d", m.Now())
	}
	var z ticker.Manual // the zero value reads 0
	if z.Now() != 0 || z.Advance(5) != 5 {
		t.Fatal("zero value")
	}
}

// Concurrent Set and Advance: every reader sees a non-decreasing clock and
// a concurrent backwards Set panics instead of moving time back.
func TestReview3ManualConcurrentSetAdvance(t *testing.T) {
	m := ticker.NewManual(0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				if g%2 == 0 {
					m.Advance(1)
				} else {
					func() {
						defer func() { recover() }() // Set below the current reading panics
						m.Set(int64(i * 3))
					}()
				}
			}
		})
		wg.Go(func() {
			prev := m.Now()
			for range 4000 {
				v := m.Now()
				if v < prev {
					t.Errorf("backwards: %d < %d", v, prev)
					return
				}
				prev = v
			}
		})
	}
	wg.Wait()
}

// IsNil recognises typed nil pointers of the three clocks only.
func TestReview3IsNil(t *testing.T) {
	var c *ticker.Cached
	var n *ticker.Nano
	var m *ticker.Manual
	for _, v := range []any{c, n, m} {
		if !ticker.IsNil(v) {
			t.Fatalf("IsNil(%T nil) = false", v)
		}
	}
	for _, v := range []any{nil, ticker.NewNano(), ticker.NewManual(0), 3} {
		if ticker.IsNil(v) {
			t.Fatalf("IsNil(%v) = true", v)
		}
	}
}

// Close racing with the first Now (which starts the refresh goroutine):
// readings never go backwards and no goroutine is left (goleak in
// TestMain). Run under -race.
func TestReview3CachedStartCloseRace(t *testing.T) {
	for range 50 {
		c := ticker.NewCached(50 * time.Microsecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				prev := c.Now()
				for range 200 {
					v := c.Now()
					if v < prev {
						t.Errorf("backwards: %d < %d", v, prev)
						return
					}
					prev = v
				}
			})
		}
		wg.Go(func() { c.Close() })
		wg.Wait()
		c.Close()
	}
}
