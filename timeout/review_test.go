package timeout_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/timeout"
)

// DoAbandon works "whatever t's Mode": a soft-mode Timeout (which has no
// watchdog of its own) must not panic on it.
func TestDoAbandonInSoftMode(t *testing.T) {
	to, err := timeout.New(timeout.Config{Duration: time.Hour, Mode: timeout.ModeSoft})
	if err != nil {
		t.Fatal(err)
	}
	defer to.Close() // stops the worker DoAbandon parked
	ran := false
	if err := to.DoAbandon(context.Background(), func(context.Context) error { ran = true; return nil }, nil); err != nil || !ran {
		t.Fatalf("err %v, ran %v", err, ran)
	}
}

// ... and the deadline still abandons fn (a runtime timer stands in for the
// watchdog).
func TestDoAbandonInSoftModeTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: rampart.NewNanoTicker()})
		if err != nil {
			t.Fatal(err)
		}
		defer to.Close() // before the bubble ends: the pool's idle worker
		release := make(chan struct{})
		start := time.Now()
		err = to.DoAbandon(context.Background(), func(ctx context.Context) error {
			<-release
			return ctx.Err()
		}, nil)
		if !errors.Is(err, timeout.ErrTimeout) || time.Since(start) != time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		close(release)
		synctest.Wait()
		if n := to.Stats().Abandoned; n != 0 {
			t.Fatalf("%d still abandoned", n)
		}
	})
}

// Closing a Timeout's own watchdog does not strand the calls in flight: their
// contexts still end at the deadline, and a DoAbandon call still leaves.
func TestCloseKeepsInFlightDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker()
		to, err := timeout.New(timeout.Config{Duration: time.Second, Tick: time.Millisecond, Ticker: tk})
		if err != nil {
			t.Fatal(err)
		}
		ctx, h := to.Start(context.Background(), tk.Now())
		done := ctx.Done()
		aband := make(chan error, 1)
		release := make(chan struct{})
		go func() {
			aband <- to.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		}()
		synctest.Wait()
		if err := to.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		select {
		case <-done:
		default:
			t.Fatal("the context in flight at Close never reached its deadline")
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("ctx.Err() = %v", ctx.Err())
		}
		if err := to.Finish(h, tk.Now(), nil); !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("Finish = %v", err)
		}
		if err := <-aband; !errors.Is(err, timeout.ErrTimeout) {
			t.Fatalf("DoAbandon = %v", err)
		}
		close(release)
		synctest.Wait()
	})
}
