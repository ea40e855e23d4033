package bulkhead

import (
	"context"
	"testing"
	"time"

	"github.com/rampart-go/rampart/internal/testkit"
)

func TestAllocsAdmit(t *testing.T) {
	b := mustNew(t, Config{Max: 4})
	testkit.WantAllocs(t, "Acquire+Release", 0, func() {
		if b.Acquire() != nil {
			t.Fatal("rejected")
		}
		b.Release()
	})
}

func TestAllocsReject(t *testing.T) {
	b := mustNew(t, Config{Max: 1, OnRejected: func(int64, time.Duration) {}})
	b.Acquire()
	defer b.Release()
	ctx := context.Background()
	testkit.WantAllocs(t, "Acquire+AcquireWait rejected", 0, func() {
		if b.Acquire() == nil || b.AcquireWait(ctx) == nil {
			t.Fatal("admitted")
		}
	})
}

// TestAllocsAcquireWaitNoWait: the waiting mode's admit when a permit is free.
func TestAllocsAcquireWaitNoWait(t *testing.T) {
	b := mustNew(t, Config{Max: 4, MaxWait: time.Second})
	ctx := context.Background()
	testkit.WantAllocs(t, "AcquireWait+Release", 0, func() {
		if b.AcquireWait(ctx) != nil {
			t.Fatal("rejected")
		}
		b.Release()
	})
}

func TestAllocsDoCall(t *testing.T) {
	b := mustNew(t, Config{Max: 4, MaxWait: time.Second})
	ctx := context.Background()
	fn := func(context.Context) error { return nil }
	fnT := func(context.Context) (int, error) { return 1, nil }
	testkit.WantAllocs(t, "Do+Call", 0, func() {
		if b.Do(ctx, fn) != nil {
			t.Fatal("rejected")
		}
		if _, err := Call(ctx, b, fnT); err != nil {
			t.Fatal("rejected")
		}
	})
}

func TestAllocsStats(t *testing.T) {
	b := mustNew(t, Config{Max: 4})
	var s Stats
	testkit.WantAllocs(t, "Stats", 0, func() { s = b.Stats() })
	_ = s
}
