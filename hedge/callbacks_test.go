package hedge

// Audit of the calls into user code (callbacks): reproductions of the bugs
// found (skipped with "BUG: ..." until fixed) and guards that pass.

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
)

// TestCallbacksWonListenerGoexitHangsCaller: race.report calls OnHedgeWon
// (notify recovers panics, not runtime.Goexit) on the winning hedge's
// goroutine before close(r.done) and before the first attempt's context is
// cancelled. A listener that calls Goexit there leaves r.done open: the
// caller blocks in result() for ever (and the first attempt is never
// cancelled).
func TestCallbacksWonListenerGoexitHangsCaller(t *testing.T) {
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

// cbBudget is a user Budget whose OnSuccess panics when armed.
type cbBudget struct{ armed atomic.Bool }

func (b *cbBudget) OnRequest(int64) {}
func (b *cbBudget) OnSuccess(int64) {
	if b.armed.Load() {
		panic("budget")
	}
}
func (b *cbBudget) OnFailure(int64)       {}
func (b *cbBudget) AllowRetry(int64) bool { return true }

// TestCallbacksBudgetPanicOnHedgeReachesCaller: race.report, on the
// winning hedge's goroutine, calls the user Budget's OnSuccess (and
// OnFailure, and the Ticker for both) after run set returned = true, so
// outside run's guard: a panic there is an unrecovered panic on a goroutine
// the caller does not own and kills the process (as the Fatal classifier's
// did before 6dc59d4). Expected: the panic reaches the caller's goroutine,
// or the hedger records nothing more and the call completes.
//
// Without the fix this test crashes the test binary.
func TestCallbacksBudgetPanicOnHedgeReachesCaller(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	b := &cbBudget{}
	recovered := panicOnHedge(t, tk, Config{Budget: b}, func() { b.armed.Store(true) }, nil)
	if recovered != "budget" {
		t.Fatalf("recovered %v, want the budget's panic on the caller", recovered)
	}
}
