package ticker

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

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

func TestCachedConcurrentReaders(t *testing.T) {
	c := NewCached(100 * time.Microsecond)
	defer c.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			prev := c.Now()
			for range 20000 {
				v := c.Now()
				if v < prev {
					t.Errorf("went backwards: %d < %d", v, prev)
					return
				}
				prev = v
			}
		})
	}
	wg.Go(func() { c.Close() })
	wg.Wait()
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
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Set backwards did not panic")
			}
		}()
		m.Set(1)
	}()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("negative Advance did not panic")
			}
		}()
		m.Advance(-1)
	}()
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
		wg.Go(func() {
			prev := m.Now()
			for range 1000 {
				v := m.Now()
				if v < prev {
					t.Errorf("backwards")
				}
				prev = v
			}
		})
	}
	wg.Wait()
	if m.Now() != 4000 {
		t.Fatalf("got %d", m.Now())
	}
}
