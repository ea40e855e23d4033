package hedge

// The calls into user code (Config.Fatal, the listeners, a user Budget)
// that panic or call runtime.Goexit: on the caller's goroutine or on a
// hedge's, the call completes, or the panic reaches the caller's goroutine,
// and the race's books (its mutex, the hedges' contexts) stay straight.

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// Most tests here run outside a synctest bubble: a panic in user code that
// left the race's mutex locked would leave a goroutine blocked on a
// sync.Mutex, which a bubble would wait for forever instead of failing.
// The hedger runs on a manual ticker with its own watchdog; the tests wait
// on channels only (the watchdog fires the hedge on its first sweep after
// the ticker passed the deadline).

var (
	errFirstFailed = errors.New("first attempt failed")
	errHedgeFailed = errors.New("hedge failed")
)

// TestOnHedgeWonGoexitCallerReturns: OnHedgeWon runs on the winning hedge's
// goroutine (notify recovers panics, not runtime.Goexit); a listener that
// calls Goexit there does not keep the race undecided: the caller returns.
func TestOnHedgeWonGoexitCallerReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewManualTicker(1)
		won := make(chan struct{})
		h, err := New(Config{Delay: 10 * time.Millisecond, Ticker: tk, Tick: time.Millisecond,
			OnHedgeWon: func(int) { close(won); runtime.Goexit() }})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var returned atomic.Bool
		go func() {
			first := true
			_ = h.Do(context.Background(), func(ctx context.Context) error {
				if first { // the caller's goroutine
					first = false
					tk.Advance(20 * time.Millisecond)
					select {
					case <-ctx.Done():
					case <-won:
					}
					return errors.New("first attempt")
				}
				return nil // the hedge wins
			})
			returned.Store(true)
		}()
		time.Sleep(time.Second) // the bubble's clock: the watchdog sweeps and fires the hedge
		synctest.Wait()
		if !returned.Load() {
			t.Fatal("Do never returns after a Goexit in OnHedgeWon")
		}
	})
}

// TestBudgetPanicOnHedgeReachesCaller: the winning hedge's goroutine
// reports to the user Budget (OnSuccess here); a panic there is recovered
// on that goroutine and re-raised on the caller's, as the package doc
// promises for every panic on a hedge's goroutine.
func TestBudgetPanicOnHedgeReachesCaller(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	b := &testkit.Budget{}
	recovered := panicOnHedge(t, tk, Config{Budget: b}, func() { b.PanicIn(testkit.CallOnSuccess) }, nil)
	if recovered != "testkit: Budget.OnSuccess" {
		t.Fatalf("recovered %v, want the budget's panic on the caller", recovered)
	}
}

// TestFatalPanicAfterHedgeCancelsHedges: a Config.Fatal that panics on the
// first attempt's error after a hedge started, as a panic of the first
// attempt itself does: the panic reaches the caller and the hedges'
// contexts are cancelled (the race's mutex is not left locked).
func TestFatalPanicAfterHedgeCancelsHedges(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	h, err := New(Config{Delay: 10 * time.Millisecond, Ticker: tk, Tick: time.Millisecond,
		Fatal: func(err error) bool {
			if errors.Is(err, errFirstFailed) {
				panic("classifier")
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	hedgeCtx := make(chan context.Context, 1)
	release := make(chan struct{})
	defer close(release)
	first := true
	recovered, goexited := testkit.Run(func() {
		_ = h.Do(context.Background(), func(ctx context.Context) error {
			if first { // the caller's goroutine: the first attempt
				first = false
				tk.Advance(20 * time.Millisecond)
				hc := <-hedgeCtx // the hedge started
				hedgeCtx <- hc
				return errFirstFailed
			}
			hedgeCtx <- ctx
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				return nil
			}
		})
	})
	if recovered != "classifier" || goexited {
		t.Fatalf("the caller's goroutine ended with panic %v (Goexit %v), want the classifier's panic", recovered, goexited)
	}
	hc := <-hedgeCtx
	select {
	case <-hc.Done():
	default:
		t.Fatal("the hedge's context is still live after the caller's panic")
	}
}

// TestFatalPanicOnHedgeReachesCaller: a Config.Fatal that panics on a
// hedge's error runs on the hedge's goroutine; the panic is recovered there
// and re-raised on the caller's, as the package doc promises.
func TestFatalPanicOnHedgeReachesCaller(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	recovered := panicOnHedge(t, tk, Config{Fatal: func(err error) bool {
		if errors.Is(err, errHedgeFailed) {
			panic("classifier")
		}
		return true
	}}, nil, errHedgeFailed)
	if recovered != "classifier" {
		t.Fatalf("recovered %v, want the classifier's panic re-raised on the caller", recovered)
	}
}

// panicOnHedge runs one call through a hedger built from cfg (Delay 10 ms
// on tk) whose first attempt runs past the delay, calls arm, and waits for
// the race to be decided by the hedge, which returns hedgeErr. It returns
// what the caller's goroutine panicked with, and fails t if that goroutine
// called runtime.Goexit instead.
func panicOnHedge(t *testing.T, tk *rampart.ManualTicker, cfg Config, arm func(), hedgeErr error) (recovered any) {
	t.Helper()
	cfg.Delay, cfg.Ticker, cfg.Tick = 10*time.Millisecond, tk, time.Millisecond
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	first := true
	recovered, goexited := testkit.Run(func() {
		_ = h.Do(context.Background(), func(ctx context.Context) error {
			if first {
				first = false
				if arm != nil {
					arm()
				}
				tk.Advance(20 * time.Millisecond)
				<-ctx.Done() // cancelled when the hedge decides the race
				return ctx.Err()
			}
			return hedgeErr
		})
	})
	if goexited {
		t.Fatal("the caller's goroutine called runtime.Goexit")
	}
	return recovered
}
