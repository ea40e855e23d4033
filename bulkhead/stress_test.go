package bulkhead

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestStress: 64 goroutines × 20,000 calls (4,000 under -race; -short runs
// 1,000 each) mixing successes, errors, panics,
// runtime.Goexit, contexts canceled before or during the wait, and fail-fast
// Acquire calls, against a waiting bulkhead. The callee measures the real
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
		// scaled down five-fold.
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
					if b.Acquire() == nil {
						err = fn(ctx)
						b.Release()
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

// tallyWait counts the outcome of a waiting call whose context has a
// deadline: admitted (nil), or refused by MaxWait (ErrFull) or by the
// deadline; any other error fails the test.
func tallyWait(t *testing.T, err error, admitted, refused *atomic.Int64) {
	switch {
	case err == nil:
		admitted.Add(1)
	case errors.Is(err, ErrFull), errors.Is(err, context.DeadlineExceeded):
		refused.Add(1)
	default:
		t.Errorf("unexpected error %v", err)
	}
}

// TestStressSetMaxWhileWaiting: limits that move while callers queue, give
// up and run. The real concurrency never exceeds the largest Max ever set,
// every waiter ends admitted or refused with the right error, and nothing
// is left in flight or queued.
func TestStressSetMaxWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Max: 2, MaxWait: 3 * time.Millisecond})
		const maxEver = 5
		var running, peak atomic.Int64
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 200 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g+i)%4)*time.Millisecond)
					err := b.Do(ctx, func(context.Context) error {
						atomicx.Max(&peak, running.Add(1))
						time.Sleep(time.Duration(1+(g*7+i)%3) * time.Millisecond)
						running.Add(-1)
						return nil
					})
					cancel()
					tallyWait(t, err, &admitted, &refused)
				}
			})
		}
		wg.Go(func() {
			for i := range 400 {
				if err := b.SetMax(1 + i%maxEver); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		st := b.Stats()
		require.LessOrEqual(t, peak.Load(), int64(maxEver))
		require.LessOrEqual(t, st.PeakInFlight, int64(maxEver))
		require.Equal(t, int64(16*200), admitted.Load()+refused.Load())
		require.Equal(t, uint64(refused.Load()), st.Rejected)
		require.Equal(t, st.Rejected, st.TimedOut+st.Canceled)
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.Waiting)
		require.Positive(t, admitted.Load())
		require.Positive(t, refused.Load())
	})
}

// TestStressUpdateRacingCalls: Update changes Max (1 to 5) and MaxWait
// (1 to 3 ms) while 16 goroutines run waiting calls and fail-fast
// Acquires. The real concurrency never exceeds the largest Max, every
// attempt is admitted or refused exactly once, the counters add up, and
// nothing is left in flight or queued: no permit lost or released twice.
func TestStressUpdateRacingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := mustNew(t, Config{Max: 2, MaxWait: 3 * time.Millisecond})
		const maxEver = 5
		var running, peak atomic.Int64
		var admitted, refused atomic.Int64
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 200 {
					work := func(context.Context) error {
						atomicx.Max(&peak, running.Add(1))
						time.Sleep(time.Duration(1+(g*7+i)%3) * time.Millisecond)
						running.Add(-1)
						return nil
					}
					if g%4 == 0 { // fail-fast
						if b.Acquire() != nil {
							refused.Add(1)
							continue
						}
						admitted.Add(1)
						_ = work(nil)
						b.Release()
						continue
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(g+i)%4)*time.Millisecond)
					err := b.Do(ctx, work)
					cancel()
					tallyWait(t, err, &admitted, &refused)
				}
			})
		}
		wg.Go(func() {
			c := b.Config()
			for i := range 400 {
				c.Max = 1 + i%maxEver
				c.MaxWait = time.Duration(1+i%3) * time.Millisecond
				if err := b.Update(c); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		wg.Wait()
		st := b.Stats()
		require.LessOrEqual(t, peak.Load(), int64(maxEver))
		require.LessOrEqual(t, st.PeakInFlight, int64(maxEver))
		require.Equal(t, int64(16*200), admitted.Load()+refused.Load())
		require.Equal(t, uint64(refused.Load()), st.Rejected)
		require.Zero(t, st.InFlight)
		require.Zero(t, st.Waiting)
		require.Positive(t, admitted.Load())
		require.Positive(t, refused.Load())
		// The last Update holds from the next admission.
		c := b.Config()
		c.Max = 2
		require.NoError(t, b.Update(c))
		require.NoError(t, b.Acquire())
		require.NoError(t, b.Acquire())
		require.ErrorIs(t, b.Acquire(), ErrFull)
		b.Release()
		b.Release()
	})
}

// TestStressCancelRacingGrant: many waiters whose contexts end at the very
// instants permits are freed (same synctest instant), with fail-fast
// Acquire callers mixed in. Afterwards: nothing in flight or queued, the
// real concurrency never exceeded Max, every attempt is either admitted or
// refused exactly once, and the counters add up.
func TestStressCancelRacingGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const Max, G, N = 3, 12, 150
		b := mustNew(t, Config{Max: Max, MaxWait: 2 * time.Millisecond})
		var running, peak, admitted, refused, tryAdmitted, tryRefused atomic.Int64
		body := func() {
			atomicx.Max(&peak, running.Add(1))
			time.Sleep(time.Millisecond)
			running.Add(-1)
		}
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				for i := range N {
					if (g+i)%5 == 0 {
						if b.Acquire() == nil {
							tryAdmitted.Add(1)
							body()
							b.Release()
						} else {
							tryRefused.Add(1)
						}
						continue
					}
					// Deadlines at 1 ms: the instant the running calls exit.
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%2)*time.Millisecond)
					err := b.Do(ctx, func(context.Context) error { body(); return nil })
					cancel()
					tallyWait(t, err, &admitted, &refused)
				}
			})
		}
		wg.Wait()
		st := b.Stats()
		require.LessOrEqual(t, peak.Load(), int64(Max))
		require.LessOrEqual(t, st.PeakInFlight, int64(Max))
		require.Equal(t, int64(G*N), admitted.Load()+refused.Load()+tryAdmitted.Load()+tryRefused.Load())
		require.Equal(t, uint64(refused.Load()+tryRefused.Load()), st.Rejected)
		require.Equal(t, uint64(refused.Load()), st.TimedOut+st.Canceled)
		require.LessOrEqual(t, st.Waited, uint64(admitted.Load()))
		require.Equal(t, int64(0), st.InFlight)
		require.Equal(t, int64(0), st.Waiting)
		require.NoError(t, b.Acquire(), "a permit leaked")
		b.Release()
	})
}

// TestStressRacingUpdatesApplyOneConfig: Updates racing each other leave
// the bulkhead on the configuration of one of them, Max and MaxWait of the
// same Config, and Config, read meanwhile, never reports Max from one and
// MaxWait from the other.
func TestStressRacingUpdatesApplyOneConfig(t *testing.T) {
	b := mustNew(t, Config{Max: 10, MaxWait: time.Second})
	a := b.Config()
	c := a
	c.Max, c.MaxWait = 20, 2*time.Second
	one := func(got Config) bool {
		return got.Max == a.Max && got.MaxWait == a.MaxWait || got.Max == c.Max && got.MaxWait == c.MaxWait
	}
	n := 1000000
	if israce.Enabled {
		n = 100000
	}
	var done atomic.Bool
	var mixed atomic.Pointer[Config]
	var wg sync.WaitGroup
	for _, x := range []Config{a, c} {
		wg.Go(func() {
			y := a
			if x.Max == a.Max {
				y = c
			}
			for range n / 2 {
				if mixed.Load() != nil {
					return
				}
				_ = b.Update(x)
				_ = b.Update(y)
			}
		})
	}
	var observer sync.WaitGroup
	observer.Go(func() {
		for !done.Load() {
			if got := b.Config(); !one(got) {
				mixed.CompareAndSwap(nil, &got)
			}
		}
	})
	wg.Wait()
	done.Store(true)
	observer.Wait()
	if got := b.Config(); !one(got) {
		t.Fatalf("after racing Updates Max %d with MaxWait %v: neither Config", got.Max, got.MaxWait)
	}
	if got := mixed.Load(); got != nil {
		t.Fatalf("Config read during racing Updates: Max %d with MaxWait %v: neither Config", got.Max, got.MaxWait)
	}
}
