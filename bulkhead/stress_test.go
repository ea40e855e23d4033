package bulkhead

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestStress: 64 goroutines × 20,000 calls (4,000 under -race; -short runs
// 1,000 each) mixing successes, errors, panics,
// runtime.Goexit, contexts canceled before or during the wait, and fail-fast
// TryEnter calls, against a waiting bulkhead. The callee measures the real
// concurrency itself. Afterwards nothing is in flight or queued, admitted +
// refused equals the calls, the bulkhead's Rejected equals the refusals the
// callers saw, and the peak reached Max without ever exceeding it.
func TestStress(t *testing.T) {
	const (
		goroutines = 64
		max        = 8
	)
	per := 20000
	if israce.Enabled {
		// Under the race detector the full count took 16 s on an idle
		// 2-core machine and over 3 minutes on the shared one CI uses:
		// scaled down, as the issue allows past 30 s.
		per = 4000
	}
	if testing.Short() {
		per = 1000
	}
	maxWait := 200 * time.Microsecond
	if israce.Enabled {
		maxWait = 2 * time.Millisecond // the race detector slows wake-ups ~10×
	}
	b := mustNew(t, Config{Max: max, MaxWait: maxWait})
	var cur, peak, admitted, refused, over atomic.Int64
	errUser := errors.New("user")

	callee := func(ctx context.Context, kind int) error {
		admitted.Add(1)
		c := cur.Add(1)
		if c > max {
			over.Add(1)
		}
		atomicx.Max(&peak, c)
		runtime.Gosched() // let the others pile up against the limit
		cur.Add(-1)
		switch kind {
		case 1:
			return errUser
		case 2:
			panic(errUser)
		case 3:
			runtime.Goexit()
		}
		return ctx.Err()
	}

	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range per {
				kind := (g + i) % 8
				ctx := context.Background()
				release := func() {}
				switch kind {
				case 4: // canceled before the call: refused if it has to wait
					ctx = canceled
				case 5: // a deadline that may end the wait
					ctx, release = context.WithTimeout(ctx, 50*time.Microsecond)
				}
				ran := false
				fn := func(ctx context.Context) error { ran = true; return callee(ctx, kind) }
				var err error
				switch kind {
				case 2: // panic: Do must release, then re-raise
					if r, _ := testkit.Run(func() { err = b.Do(ctx, fn) }); ran && r != errUser {
						t.Errorf("recovered %v", r)
					}
				case 3: // Goexit ends the goroutine: run the call on its own
					if _, goexited := testkit.Run(func() { err = b.Do(ctx, fn) }); ran && !goexited {
						t.Errorf("Do returned %v after its fn called runtime.Goexit", err)
					}
				case 6: // fail-fast primitive
					if b.TryEnter() {
						err = fn(ctx)
						b.Exit()
					} else {
						err = b.RejectedError()
					}
				default:
					err = b.Do(ctx, fn)
				}
				release()
				if !ran {
					if !errors.Is(err, ErrFull) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("refused with %v", err)
					}
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := b.Stats()
	calls := int64(goroutines * per)
	require.Zero(t, over.Load(), "more than Max calls ran at once")
	require.Zero(t, s.InFlight)
	require.Zero(t, s.Waiting)
	require.Equal(t, calls, admitted.Load()+refused.Load())
	require.Equal(t, uint64(refused.Load()), s.Rejected)
	require.Equal(t, int64(max), peak.Load(), "the callers never reached Max")
	require.Equal(t, int64(max), s.PeakInFlight)
	require.LessOrEqual(t, s.TimedOut+s.Canceled, s.Rejected)
	t.Logf("calls %d admitted %d refused %d (timed out %d, canceled %d) waited %d overshoots %d",
		calls, admitted.Load(), refused.Load(), s.TimedOut, s.Canceled, s.Waited, s.Overshoots)
}
