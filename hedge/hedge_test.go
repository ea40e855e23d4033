package hedge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/bubble"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/retry"
)

// newBubbleHedger builds a hedger for a synctest bubble: a ticker created
// inside it and the hedger's own watchdog (Tick), closed at the end.
func newBubbleHedger(t *testing.T, cfg Config) *Hedger {
	t.Helper()
	cfg.Ticker = rampart.NewNanoTicker()
	if cfg.Tick == 0 {
		cfg.Tick = 50 * time.Microsecond
	}
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// sleepCtx waits d or until ctx is done (a callee that honours cancellation).
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// quantile returns the ceil(q·n)-th smallest latency.
func quantile(lat []time.Duration, q float64) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[max(int(math.Ceil(q*float64(len(s))))-1, 0)]
}

func p99(lat []time.Duration) time.Duration { return quantile(lat, 0.99) }

// tailScenario runs workers×perWorker calls of a service whose latency is
// 1 ms, with every 20th attempt (5 %) a straggler at 50 ms, through do, and
// returns the calls' latencies and the number of attempts.
func tailScenario(do func(ctx context.Context, fn func(context.Context) error) error) (lat []time.Duration, attempts int64) {
	const workers, perWorker = 4, 500
	var seq atomic.Int64
	service := func(ctx context.Context) error {
		d := time.Millisecond
		if seq.Add(1)%20 == 0 {
			d = 50 * time.Millisecond
		}
		return sleepCtx(ctx, d)
	}
	lats := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range perWorker {
				t0 := time.Now()
				if err := do(context.Background(), service); err != nil {
					panic(err)
				}
				lats[w] = append(lats[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	synctest.Wait() // cancelled losers have ended
	return slices.Concat(lats...), seq.Load()
}

// TestTailLatency is the tail-at-scale scenario: 1 ms with 5 % stragglers at
// 50 ms. Unhedged, the p99 is 50 ms; hedged at the live p95, the p99 is at
// most 3 ms and the extra attempts at most 10 % of the calls.
func TestTailLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		direct := func(ctx context.Context, fn func(context.Context) error) error { return fn(ctx) }
		latD, _ := tailScenario(direct)
		pD := p99(latD)

		h := newBubbleHedger(t, Config{Percentile: 0.95, WarmUp: 100, Refresh: 100 * time.Millisecond})
		var mu sync.Mutex
		delays := map[time.Duration]int{} // the delay each call started with
		latH, attempts := tailScenario(func(ctx context.Context, fn func(context.Context) error) error {
			mu.Lock()
			delays[h.Delay()]++
			mu.Unlock()
			return h.Do(ctx, fn)
		})
		pH := p99(latH)
		calls := int64(len(latH))
		extra := attempts - calls
		st := h.Stats()
		t.Logf("unhedged p99 = %v; hedged at live p95: p99 = %v, extra attempts %d/%d = %.1f%%, hedges won %d; calls per delay %v",
			pD, pH, extra, calls, 100*float64(extra)/float64(calls), st.HedgesWon, delays)
		if pD < 50*time.Millisecond {
			t.Errorf("unhedged p99 %v, want ~50ms", pD)
		}
		if pH > 3*time.Millisecond {
			t.Errorf("hedged p99 %v > 3ms", pH)
		}
		if extra*10 > calls {
			t.Errorf("extra attempts %d > 10%% of %d calls", extra, calls)
		}
		for _, q := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
			t.Logf("p%v: unhedged %v, hedged %v", q*100, quantile(latD, q), quantile(latH, q))
		}
		if uint64(extra) != st.Hedges || st.HedgesWon == 0 {
			t.Errorf("stats %+v, extra %d", st, extra)
		}
	})
}

// TestLoserCancelled: the first attempt hangs until cancelled, the hedge
// wins; the first attempt sees context.Canceled, the caller gets the
// hedge's result, and the listeners and stats say so.
func TestLoserCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var started, won atomic.Int64
		h := newBubbleHedger(t, Config{
			Delay:      10 * time.Millisecond,
			OnHedge:    func(i int) { started.Add(int64(i)) },
			OnHedgeWon: func(i int) { won.Add(int64(i)) },
		})
		var firstErr error
		var attempt atomic.Int32
		t0 := time.Now()
		v, err := Call(context.Background(), h, func(ctx context.Context) (string, error) {
			if attempt.Add(1) == 1 {
				<-ctx.Done()
				firstErr = ctx.Err()
				return "", ctx.Err()
			}
			return "hedge", sleepCtx(ctx, time.Millisecond)
		})
		el := time.Since(t0)
		if v != "hedge" || err != nil {
			t.Fatalf("got %q, %v", v, err)
		}
		if !errors.Is(firstErr, context.Canceled) {
			t.Fatalf("first attempt saw %v, want Canceled", firstErr)
		}
		if el < 11*time.Millisecond || el > 12*time.Millisecond {
			t.Fatalf("took %v, want delay + 1ms", el)
		}
		st := h.Stats()
		if st.Hedges != 1 || st.HedgesWon != 1 || started.Load() != 1 || won.Load() != 1 {
			t.Fatalf("stats %+v, listeners %d %d", st, started.Load(), won.Load())
		}
	})
}

// TestHedgeCancelledWhenFirstWins: the first attempt wins after the delay;
// the hedge's context is cancelled and its result dropped.
func TestHedgeCancelledWhenFirstWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: 5 * time.Millisecond})
		var attempt atomic.Int32
		hedgeErr := make(chan error, 1)
		v, err := Call(context.Background(), h, func(ctx context.Context) (int, error) {
			if attempt.Add(1) == 1 {
				return 1, sleepCtx(ctx, 8*time.Millisecond)
			}
			err := sleepCtx(ctx, time.Hour)
			hedgeErr <- err
			return 2, err
		})
		if v != 1 || err != nil {
			t.Fatalf("got %d, %v", v, err)
		}
		if err := <-hedgeErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("hedge saw %v", err)
		}
		if st := h.Stats(); st.Hedges != 1 || st.HedgesWon != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestWinnerOnce: many concurrent calls whose attempts all succeed at about
// the same time; each call returns exactly one attempt's token, no token is
// returned twice, and every losing attempt saw its context cancelled or
// finished.
func TestWinnerOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond, MaxHedges: 3})
		var tokens atomic.Int64
		var attempts atomic.Int64
		const calls = 200
		got := make([]int64, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				v, err := Call(context.Background(), h, func(ctx context.Context) (int64, error) {
					attempts.Add(1)
					tok := tokens.Add(1)
					// 0.5–3.5 ms: some calls win first, some by a hedge.
					if err := sleepCtx(ctx, time.Duration(500+int(tok*7919%3000))*time.Microsecond); err != nil {
						return 0, err
					}
					return tok, nil
				})
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
				got[i] = v
			})
		}
		wg.Wait()
		synctest.Wait() // the losers' goroutines have ended
		slices.Sort(got)
		if len(slices.Compact(slices.Clone(got))) != calls || got[0] == 0 {
			t.Fatalf("tokens not unique or missing: %v", got[:10])
		}
		st := h.Stats()
		if int64(st.Hedges)+calls != attempts.Load() {
			t.Fatalf("hedges %d + calls %d != attempts %d", st.Hedges, calls, attempts.Load())
		}
		t.Logf("attempts %d, hedges %d, won by hedges %d", attempts.Load(), st.Hedges, st.HedgesWon)
	})
}

var errDown = errors.New("dependency down")

// TestBudgetRefusesHedgesInFailureStorm: every attempt fails slowly with a
// non-fatal error; the gRPC A6 token bucket shared with retry stops the
// hedges after a few failures, so the storm is not doubled.
func TestBudgetRefusesHedgesInFailureStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var refusedL atomic.Int64
		h := newBubbleHedger(t, Config{
			Delay:           2 * time.Millisecond,
			Budget:          budget,
			Fatal:           func(error) bool { return false },
			OnBudgetRefused: func(int) { refusedL.Add(1) },
		})
		var attempts atomic.Int64
		const calls = 100
		for range calls {
			err := h.Do(context.Background(), func(ctx context.Context) error {
				attempts.Add(1)
				if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
					return err
				}
				return errDown
			})
			if !errors.Is(err, errDown) {
				t.Fatalf("got %v, want the user's error unchanged", err)
			}
		}
		st := h.Stats()
		t.Logf("failure storm: %d calls, %d attempts, hedges %d, refused %d, tokens %.1f",
			calls, attempts.Load(), st.Hedges, st.BudgetRefused, budget.Tokens())
		if st.Hedges > 6 || st.BudgetRefused < calls-6 || refusedL.Load() != int64(st.BudgetRefused) {
			t.Fatalf("stats %+v", st)
		}
		if attempts.Load() != calls+int64(st.Hedges) {
			t.Fatalf("attempts %d", attempts.Load())
		}
	})
}

// TestRatioBudget: with the SRE ratio budget (10 %), at most ~10 % of the
// calls are hedged even when every call is slow.
func TestRatioBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget, err := retry.NewRatioBudget(retry.RatioBudgetConfig{Ratio: 0.1, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		h := newBubbleHedger(t, Config{Delay: time.Millisecond, Budget: budget})
		const calls = 200
		for range calls {
			_ = h.Do(context.Background(), func(ctx context.Context) error { return sleepCtx(ctx, 3*time.Millisecond) })
		}
		if st := h.Stats(); st.Hedges > calls/10 || st.Hedges < calls/10-1 || st.BudgetRefused == 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestBudgetRefusalLetsFirstAttemptFinish: a hedger whose budget refuses
// the hedge runs the call to the first attempt's end, counts the refusal
// once (in Stats and in OnBudgetRefused, for attempt 1), and calls the
// budget's OnRequest, OnSuccess and AllowRetry once each.
func TestBudgetRefusalLetsFirstAttemptFinish(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	b := &testkit.Budget{}
	b.SetAllow(false)
	refused := make(chan int, 1)
	h, err := New(Config{Delay: 10 * time.Millisecond, Ticker: tk, Tick: time.Millisecond, Budget: b,
		OnBudgetRefused: func(attempt int) { refused <- attempt }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	calls := 0
	err = h.Do(context.Background(), func(ctx context.Context) error {
		calls++
		tk.Advance(20 * time.Millisecond)
		if a := <-refused; a != 1 {
			t.Errorf("refused attempt %d, want 1", a)
		}
		return nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("err %v, calls %d", err, calls)
	}
	st := h.Stats()
	if st.BudgetRefused != 1 || st.Hedges != 0 {
		t.Fatalf("stats %+v", st)
	}
	if b.Requests() != 1 || b.Successes() != 1 || b.Failures() != 0 || b.Asks() != 1 || b.Allowed() != 0 {
		t.Fatalf("budget saw %d requests, %d successes, %d failures, %d asks (%d allowed); want 1, 1, 0, 1 (0)",
			b.Requests(), b.Successes(), b.Failures(), b.Asks(), b.Allowed())
	}
}

// TestFatalErrorEndsRace: a hedge that fails fatally decides the race; a
// non-fatal one lets the first attempt win; when all fail non-fatally the
// last error is returned; a non-fatal failure before the delay returns at
// once, unhedged.
func TestFatalErrorEndsRace(t *testing.T) {
	errFatal, errSoft := errors.New("fatal"), errors.New("soft")
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond, Fatal: func(err error) bool { return err == errFatal }})
		for _, c := range []struct {
			name         string
			first, hedge func(ctx context.Context) error
			want         error
		}{
			// The hedge fails fatally at 2 ms while the first attempt runs to 10 ms.
			{"fatal", func(ctx context.Context) error { return sleepCtx(ctx, 10*time.Millisecond) },
				func(ctx context.Context) error { _ = sleepCtx(ctx, time.Millisecond); return errFatal }, errFatal},
			// The hedge fails softly; the first attempt's success wins.
			{"soft", func(ctx context.Context) error { return sleepCtx(ctx, 5*time.Millisecond) },
				func(context.Context) error { return errSoft }, nil},
			// Both fail softly: the last error comes back.
			{"all soft", func(ctx context.Context) error { _ = sleepCtx(ctx, 5*time.Millisecond); return errSoft },
				func(context.Context) error { return fmt.Errorf("hedge: %w", errSoft) }, errSoft},
		} {
			var n atomic.Int32
			err := h.Do(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					return c.first(ctx)
				}
				return c.hedge(ctx)
			})
			if err != c.want {
				t.Fatalf("%s: %v, want %v", c.name, err, c.want)
			}
		}
		before := h.Stats().Hedges
		if err := h.Do(context.Background(), func(context.Context) error { return errSoft }); err != errSoft || h.Stats().Hedges != before {
			t.Fatalf("early failure: %v", err)
		}
	})
}

// TestParentCancelled: the caller's context ends while both attempts run;
// the call ends with the context's error.
func TestParentCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond, Fatal: func(error) bool { return false }})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		err := h.Do(ctx, func(ctx context.Context) error { return sleepCtx(ctx, time.Hour) })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
	})
}

// TestHedgeWinAfterTheCallersContextEndedKeepsTheFirstAttemptsErr: the
// caller's context expires while the first attempt, which saw its Done
// closed, cleans up; a hedge then wins. The first attempt's context was
// ended by the caller's: its Err stays context.DeadlineExceeded (a hedge's
// win does not turn it into Canceled).
func TestHedgeWinAfterTheCallersContextEndedKeepsTheFirstAttemptsErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond})
		parent, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		var n atomic.Int32
		var firstErr error
		err := h.Do(parent, func(ctx context.Context) error {
			if n.Add(1) > 1 {
				time.Sleep(6 * time.Millisecond) // ignores ctx: wins after the parent expired
				return nil
			}
			<-ctx.Done()
			time.Sleep(10 * time.Millisecond) // cleanup, past the hedge's win
			firstErr = ctx.Err()
			return firstErr
		})
		if err != nil {
			t.Fatalf("Do = %v, want the hedge's nil", err)
		}
		if firstErr != context.DeadlineExceeded {
			t.Fatalf("the first attempt's Err = %v, want the caller's context.DeadlineExceeded", firstErr)
		}
	})
}

// TestFirstAttemptPanicReleasesItsParentRegistration: a first attempt
// that asks for Done (net/http does) and panics leaves nothing registered
// on the caller's context (the context.WithCancel child that Done
// registered on it), and its context is ended.
func TestFirstAttemptPanicReleasesItsParentRegistration(t *testing.T) {
	h, err := New(Config{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var kept context.Context
	for range 3 {
		if r, _ := testkit.Run(func() {
			_ = h.Do(parent, func(ctx context.Context) error {
				kept = ctx
				_ = ctx.Done()
				panic("boom")
			})
		}); r != "boom" {
			t.Fatalf("recovered %v, want the first attempt's panic", r)
		}
	}
	if n := reflect.ValueOf(parent).Elem().FieldByName("children").Len(); n != 0 {
		t.Errorf("%d registrations left on the caller's context after 3 panicking calls", n)
	}
	if kept.Err() != context.Canceled {
		t.Errorf("the panicked first attempt's context: Err = %v, want context.Canceled", kept.Err())
	}
}

// TestPanics: a first attempt's panic propagates and cancels the hedge; a
// hedge's panic that decides the race is re-raised on the caller.
func TestPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond})
		hedgeErr := make(chan error, 1)
		var n atomic.Int32
		if r, goexited := testkit.Run(func() {
			_ = h.Do(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					_ = sleepCtx(ctx, 2*time.Millisecond)
					panic("first")
				}
				hedgeErr <- sleepCtx(ctx, time.Hour)
				return nil
			})
		}); r != "first" || goexited {
			t.Fatalf("the caller's goroutine ended with panic %v (Goexit %v), want the first attempt's", r, goexited)
		}
		if err := <-hedgeErr; !errors.Is(err, context.Canceled) {
			t.Fatalf("hedge after the first attempt's panic: %v", err)
		}
		n.Store(0)
		if r, goexited := testkit.Run(func() {
			_ = h.Do(context.Background(), func(ctx context.Context) error {
				if n.Add(1) == 1 {
					return sleepCtx(ctx, time.Hour)
				}
				panic("hedge")
			})
		}); r != "hedge" || goexited {
			t.Fatalf("the caller's goroutine ended with panic %v (Goexit %v), want the hedge's", r, goexited)
		}
		// A panic before the delay disarms the trigger: no hedge later.
		before := h.Stats().Hedges
		if r, _ := testkit.Run(func() {
			_ = h.Do(context.Background(), func(context.Context) error { panic("early") })
		}); r != "early" {
			t.Fatalf("recovered %v, want the early panic", r)
		}
		time.Sleep(10 * time.Millisecond)
		if h.Stats().Hedges != before {
			t.Fatal("a hedge started after the first attempt panicked")
		}
	})
}

// TestAsyncFirst: a callee that ignores cancellation keeps a sync caller
// until it returns; with AsyncFirst the caller returns when the hedge wins.
func TestAsyncFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		run := func(async bool) time.Duration {
			h := newBubbleHedger(t, Config{Delay: 5 * time.Millisecond, AsyncFirst: async})
			var n atomic.Int32
			t0 := time.Now()
			v, err := Call(context.Background(), h, func(ctx context.Context) (int32, error) {
				i := n.Add(1)
				if i == 1 {
					time.Sleep(50 * time.Millisecond) // ignores ctx
				} else {
					time.Sleep(time.Millisecond)
				}
				return i, nil
			})
			if v != 2 || err != nil {
				t.Fatalf("async=%v: got %d, %v", async, v, err)
			}
			return time.Since(t0)
		}
		if d := run(false); d != 50*time.Millisecond {
			t.Fatalf("sync with a callee that ignores cancellation: %v, want 50ms", d)
		}
		if d := run(true); d > 7*time.Millisecond {
			t.Fatalf("AsyncFirst: %v, want ~6ms", d)
		}
		time.Sleep(time.Second) // let the abandoned first attempt end
	})
}

// TestContextContract checks the first attempt's context: values and
// deadline pass through, Err and Done agree once cancelled, Err never goes
// back to nil, and a child derived from it is cancelled when a hedge wins
// without a goroutine per child.
func TestContextContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		h := newBubbleHedger(t, Config{Delay: time.Millisecond})
		parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
		defer cancel()
		var kept context.Context
		var childErr error
		var n atomic.Int32
		_ = h.Do(parent, func(ctx context.Context) error {
			if n.Add(1) > 1 {
				return nil // the hedge wins at once
			}
			kept = ctx
			if ctx.Value(key{}) != "v" {
				t.Error("value lost")
			}
			if dl, ok := ctx.Deadline(); !ok || dl.IsZero() {
				t.Error("deadline lost")
			}
			if ctx.Err() != nil {
				t.Error("Err before cancel")
			}
			child, cc := context.WithCancel(ctx)
			defer cc()
			<-child.Done()
			childErr = child.Err()
			return ctx.Err()
		})
		if !errors.Is(childErr, context.Canceled) {
			t.Fatalf("child: %v", childErr)
		}
		for range 3 {
			if !errors.Is(kept.Err(), context.Canceled) || kept.Value(key{}) != "v" {
				t.Fatal("kept context changed after the call")
			}
			select {
			case <-kept.Done():
			default:
				t.Fatal("Done open while Err is set")
			}
		}
		// Err freezes on the parent's error, and a later hedge win does not change it.
		pctx, pcancel := context.WithCancel(context.Background())
		c := h.newCall(pctx).ctx
		pcancel()
		if c.Err() != context.Canceled {
			t.Fatal(c.Err())
		}
		c.cancel()
		if c.Err() != context.Canceled || c.Done() == nil {
			t.Fatal("after cancel")
		}
		// AfterFunc on an already-done context runs f.
		ran := make(chan struct{})
		c.AfterFunc(func() { close(ran) })
		<-ran
		// stop before the end reports true.
		c2 := h.newCall(context.Background()).ctx
		stop := c2.AfterFunc(func() { t.Error("stopped AfterFunc ran") })
		if !stop() || stop() {
			t.Fatal("stop")
		}
		c2.cancel()
		synctest.Wait()
	})
}

// TestStress hedges many concurrent calls with random latencies and
// failures under -race, and checks the invariants afterwards.
func TestStress(t *testing.T) {
	testkit.LeakCheck(t)
	// In a bubble so that synctest.Wait can wait for the losers; the
	// goroutines still run in parallel.
	synctest.Test(t, stress)
}

func stress(t *testing.T) {
	h, err := New(Config{Percentile: 0.9, WarmUp: 20, Refresh: time.Millisecond, MinDelay: 50 * time.Microsecond,
		MaxHedges: 2, Tick: 100 * time.Microsecond, Ticker: rampart.NewNanoTicker(), Fatal: func(err error) bool { return err != errDown }})
	if err != nil {
		t.Fatal(err)
	}
	var attempts, results atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				v, err := Call(context.Background(), h, func(ctx context.Context) (int, error) {
					a := attempts.Add(1)
					if a%13 == 0 {
						return 0, errDown
					}
					if a%17 == 0 {
						_ = sleepCtx(ctx, time.Millisecond)
					}
					return g*1000 + i, nil
				})
				if err == nil {
					if v != g*1000+i {
						t.Errorf("wrong result %d", v)
					}
					results.Add(1)
				} else if !errors.Is(err, errDown) {
					t.Errorf("err %v", err)
				}
			}
		})
	}
	wg.Wait()
	synctest.Wait()
	st := h.Stats()
	if attempts.Load() != 8*300+int64(st.Hedges) || st.HedgesWon > st.Hedges {
		t.Fatalf("attempts %d, stats %+v", attempts.Load(), st)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string // the ConfigError's Field
	}{
		{Config{}, "Delay"},
		{Config{Delay: -1}, "Delay"},
		{Config{Percentile: 0.3}, "Percentile"},
		{Config{Percentile: 1}, "Percentile"},
		{Config{Delay: 1, MinDelay: -1}, "MinDelay"},
		{Config{Delay: 1, MaxDelay: -1}, "MaxDelay"},
		{Config{Percentile: 0.9, MinDelay: 2, MaxDelay: 1}, "MaxDelay"},
		{Config{Delay: 1, WarmUp: -1}, "WarmUp"},
		{Config{Delay: 1, Refresh: -1}, "Refresh"},
		{Config{Delay: 1, MaxHedges: MaxHedgesLimit + 1}, "MaxHedges"},
		{Config{Delay: 1, Tick: -1}, "Tick"},
		{Config{Delay: 1, Budget: (*retry.TokenBucket)(nil)}, "Budget"},
		{Config{Delay: 1, Budget: (*retry.RatioBudget)(nil)}, "Budget"},
	} {
		_, err := New(c.cfg)
		if !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Errorf("%+v: %v does not match ErrInvalidConfig", c.cfg, err)
		}
		testkit.RequireConfigError(t, err, "hedge", c.field)
	}
	h, err := New(Config{Percentile: 0.95})
	if err != nil || h.Delay() != -1 {
		t.Fatalf("%v %d", err, h.Delay())
	}
	// Warming up without Delay: fn runs once with the caller's context.
	ctx := context.Background()
	_ = h.Do(ctx, func(c context.Context) error {
		if c != ctx {
			t.Error("warm-up call got another context")
		}
		return nil
	})
}

// TestPercentileRefresh drives the delay with a manual ticker: warm-up,
// percentile, clamps.
func TestPercentileRefresh(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	h, err := New(Config{Percentile: 0.5, Delay: 7 * time.Millisecond, WarmUp: 10, Refresh: time.Second,
		MinDelay: 2 * time.Millisecond, MaxDelay: 40 * time.Millisecond, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for range 5 {
		h.ObserveAt(tk.Now(), 10*time.Millisecond)
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), 10*time.Millisecond)
	if h.Delay() != 7*time.Millisecond {
		t.Fatalf("warming up: %d", h.Delay())
	}
	for range 10 {
		h.ObserveAt(tk.Now(), 10*time.Millisecond)
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), 10*time.Millisecond)
	if d := h.Delay(); d < 10*time.Millisecond || d > time.Duration(10.4*float64(time.Millisecond)) {
		t.Fatalf("p50: %d", d)
	}
	for range 100 {
		h.ObserveAt(tk.Now(), time.Second)
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), time.Second)
	if d := h.Delay(); d != 40*time.Millisecond {
		t.Fatalf("clamped to MaxDelay: %d", d)
	}
	for range 1000 {
		h.ObserveAt(tk.Now(), time.Duration(1000))
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), time.Duration(1000))
	if d := h.Delay(); d != 2*time.Millisecond {
		t.Fatalf("clamped to MinDelay: %d", d)
	}
	if st := h.Stats(); st.Samples == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestUpdateFixedDelayAndMaxHedges: Update applies a fixed Delay and
// MaxHedges from the next hedge on.
func TestUpdateFixedDelayAndMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: 10 * time.Millisecond})
		c := h.Config()
		c.Delay, c.MaxHedges = 2*time.Millisecond, 2
		if err := h.Update(c); err != nil {
			t.Fatal(err)
		}
		if h.Delay() != 2*time.Millisecond {
			t.Fatalf("Delay %v", h.Delay())
		}
		var n atomic.Int32
		t0 := time.Now()
		v, err := Call(context.Background(), h, func(ctx context.Context) (int32, error) {
			if i := n.Add(1); i < 3 {
				return 0, sleepCtx(ctx, time.Hour)
			} else {
				return i, sleepCtx(ctx, time.Millisecond)
			}
		})
		if v != 3 || err != nil {
			t.Fatalf("got %d, %v", v, err)
		}
		if el := time.Since(t0); el < 5*time.Millisecond || el > 6*time.Millisecond {
			t.Fatalf("took %v, want 2 new delays + 1 ms", el)
		}
		synctest.Wait()
		if st := h.Stats(); st.Hedges != 2 || st.HedgesWon != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestUpdatePercentileKeepsTheHistogram: Update of a percentile hedger
// keeps the latencies it learnt; new bounds apply to the delay in force at
// once, a new Percentile at the next refresh, and a new warm-up Delay
// only while the histogram warms up.
func TestUpdatePercentileKeepsTheHistogram(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	c := Config{Percentile: 0.5, Delay: 7 * time.Millisecond, WarmUp: 100, Refresh: time.Second, Ticker: tk}
	h, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c.Delay = 3 * time.Millisecond // warming up: the new warm-up delay holds
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	if h.Delay() != 3*time.Millisecond {
		t.Fatalf("warm-up delay %v", h.Delay())
	}
	for i := range 100 {
		h.ObserveAt(tk.Now(), time.Duration(i+1)*time.Millisecond) // 1 to 100 ms
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), 50*time.Millisecond)
	if d := h.Delay(); d < 49*time.Millisecond || d > 53*time.Millisecond {
		t.Fatalf("p50 %v", d)
	}
	c.MaxDelay = 20 * time.Millisecond // at once, on the delay in force
	c.Percentile = 0.9
	c.Delay = time.Hour // warmed up: ignored
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	if h.Delay() != 20*time.Millisecond {
		t.Fatalf("clamped at once: %v", h.Delay())
	}
	c.MaxDelay = 0
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	tk.Advance(time.Second)
	h.ObserveAt(tk.Now(), 50*time.Millisecond)
	if d := h.Delay(); d < 89*time.Millisecond || d > 95*time.Millisecond {
		t.Fatalf("p90 of the kept histogram: %v (samples %d)", d, h.Stats().Samples)
	}
	// A shorter Refresh brings the next refresh forward.
	c.Refresh = time.Hour
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	tk.Advance(time.Second)
	for range 2000 {
		h.ObserveAt(tk.Now(), time.Millisecond)
	}
	tk.Advance(time.Second) // an hour has not passed: no refresh
	h.ObserveAt(tk.Now(), time.Millisecond)
	if d := h.Delay(); d < 89*time.Millisecond {
		t.Fatalf("refreshed before Refresh: %v", d)
	}
	c.Refresh = time.Millisecond
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	tk.Advance(time.Millisecond)
	h.ObserveAt(tk.Now(), time.Millisecond)
	if d := h.Delay(); d > 2*time.Millisecond {
		t.Fatalf("not refreshed after the shorter Refresh: %v", d)
	}
}

// TestUpdateOfConfigWithRaisedWarmUpKeepsHedging: a warmed-up hedger
// given its own Config with WarmUp raised above the samples it holds keeps
// hedging at the percentile in force (it warmed up against the WarmUp it
// had; Config reports Delay 0 once warmed up), and its refreshes keep that
// delay until the new WarmUp is reached.
func TestUpdateOfConfigWithRaisedWarmUpKeepsHedging(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	h, err := New(Config{Percentile: 0.9, Delay: 50 * time.Millisecond, WarmUp: 10, Refresh: time.Millisecond, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 20 {
		tk.Advance(time.Millisecond)
		h.ObserveAt(tk.Now(), time.Duration(i+1)*time.Millisecond)
	}
	warm := h.Delay()
	if warm <= 0 || warm == 50*time.Millisecond {
		t.Fatalf("not warmed up: delay %v", warm)
	}
	c := h.Config()
	c.WarmUp = 1000
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	if d := h.Delay(); d != warm {
		t.Fatalf("after Update(Config() with WarmUp raised) Delay() = %v, want the percentile in force %v", d, warm)
	}
	tk.Advance(time.Millisecond)
	h.ObserveAt(tk.Now(), time.Millisecond)
	if d := h.Delay(); d != warm {
		t.Fatalf("a refresh below the new WarmUp changed the delay to %v, want %v", d, warm)
	}
	if err := h.Update(h.Config()); err != nil {
		t.Fatal(err)
	}
	if d := h.Delay(); d <= 0 {
		t.Fatalf("a second Update(Config()) turned hedging off: %v", d)
	}
}

// TestStressRacingUpdatesApplyOneConfig: Updates racing each other leave
// the hedger on Delay and MaxHedges of one Config, and Config, read
// meanwhile, never reports the Delay of one and the MaxHedges of the
// other.
func TestStressRacingUpdatesApplyOneConfig(t *testing.T) {
	h, err := New(Config{Delay: time.Millisecond, MaxHedges: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	a := h.Config()
	b := a
	b.Delay, b.MaxHedges = 2*time.Millisecond, 2
	one := func(got Config) bool {
		return got.Delay == a.Delay && got.MaxHedges == a.MaxHedges || got.Delay == b.Delay && got.MaxHedges == b.MaxHedges
	}
	n := 1000000
	if israce.Enabled {
		n = 100000
	}
	var done atomic.Bool
	var mixed atomic.Pointer[Config]
	var wg sync.WaitGroup
	for _, xy := range [][2]Config{{a, b}, {b, a}} {
		wg.Go(func() {
			for range n / 2 {
				if mixed.Load() != nil {
					return
				}
				_ = h.Update(xy[0])
				_ = h.Update(xy[1])
			}
		})
	}
	var observer sync.WaitGroup
	observer.Go(func() {
		for !done.Load() {
			if got := h.Config(); !one(got) {
				mixed.CompareAndSwap(nil, &got)
			}
		}
	})
	wg.Wait()
	done.Store(true)
	observer.Wait()
	if got := h.Config(); !one(got) {
		t.Fatalf("after racing Updates Delay %v with MaxHedges %d: neither Config", got.Delay, got.MaxHedges)
	}
	if got := mixed.Load(); got != nil {
		t.Fatalf("Config read during racing Updates: Delay %v with MaxHedges %d: neither Config", got.Delay, got.MaxHedges)
	}
}

// TestUpdateRefusesFixedFields: Update validates as New does, and a change
// to a field fixed at construction is a ConfigError naming it; a refused
// Update changes nothing.
func TestUpdateRefusesFixedFields(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	fatal := func(error) bool { return true }
	onHedge := func(int) {}
	base := Config{Name: "profile", Delay: time.Second, MaxHedges: 2, Ticker: tk, Tick: time.Millisecond, Budget: budget, Fatal: fatal, OnHedge: onHedge}
	other, _ := retry.NewTokenBucket(retry.TokenBucketConfig{})
	for _, tc := range []struct {
		field  string
		change func(*Config)
	}{
		{"Name", func(c *Config) { c.Name = "other" }},
		{"Percentile", func(c *Config) { c.Percentile = 0.9 }},
		{"Ticker", func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }},
		{"Ticker", func(c *Config) { c.Ticker = (*rampart.ManualTicker)(nil) }},
		{"Tick", func(c *Config) { c.Tick = 2 * time.Millisecond }},
		{"Budget", func(c *Config) { c.Budget = nil }},
		{"Budget", func(c *Config) { c.Budget = other }},
		{"Fatal", func(c *Config) { c.Fatal = nil }},
		{"AsyncFirst", func(c *Config) { c.AsyncFirst = true }},
		{"OnHedge", func(c *Config) { c.OnHedge = nil }},
		{"OnHedgeWon", func(c *Config) { c.OnHedgeWon = func(int) {} }},
		{"OnBudgetRefused", func(c *Config) { c.OnBudgetRefused = func(int) {} }},
		{"Delay", func(c *Config) { c.Delay = 0 }},
		{"MaxHedges", func(c *Config) { c.MaxHedges = MaxHedgesLimit + 1 }},
		{"Tick", func(c *Config) { c.Tick = -1 }},
	} {
		h, err := New(base)
		if err != nil {
			t.Fatal(err)
		}
		c := base
		c.MaxHedges = 3 // a valid change that must not be applied beside the refused one
		tc.change(&c)
		err = h.Update(c)
		var ce *rampart.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) || ce.Field != tc.field {
			t.Errorf("%s: Update = %v", tc.field, err)
		}
		if got := h.Config(); got.MaxHedges != 2 || got.Delay != time.Second {
			t.Errorf("%s: a refused Update applied something: %+v", tc.field, got)
		}
		_ = h.Close()
	}
	// The shared watchdog: Tick 0 and the default ticker, as New was given
	// them (nil) or as Config fills them in.
	h, err := New(Config{Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := h.Config()
	c.Delay = time.Minute
	if err := h.Update(c); err != nil {
		t.Fatal(err)
	}
	if err := h.Update(Config{Delay: time.Hour}); err != nil || h.Delay() != time.Hour {
		t.Fatalf("Update = %v, Delay %v", err, h.Delay())
	}
	if err := h.Update(Config{Delay: time.Hour, Tick: time.Millisecond}); err == nil {
		t.Fatal("a Tick that asks for a watchdog of its own was accepted")
	}
}

// TestUpdateWithoutNameKeepsTheName: New keeps the Name (Config returns
// it), an empty Name in Update keeps it (a registry names the hedgers it
// builds), and another Name is refused, whether or not the hedger has
// listeners.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	for _, c := range []Config{
		{Name: "profile", Delay: time.Second},
		{Name: "profile", Delay: time.Second, OnHedge: func(int) {}},
	} {
		h, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Config().Name; got != "profile" {
			t.Fatalf("Config().Name = %q", got)
		}
		u := c
		u.Name, u.Delay = "", time.Minute
		if err := h.Update(u); err != nil {
			t.Fatalf("Update without a Name: %v", err)
		}
		if got := h.Config(); got.Name != "profile" || got.Delay != time.Minute {
			t.Fatalf("after the Update: Name %q, Delay %v", got.Name, got.Delay)
		}
		u.Name, u.Delay = "other", time.Hour
		var ce *rampart.ConfigError
		if err := h.Update(u); !errors.As(err, &ce) || ce.Field != "Name" || h.Delay() != time.Minute {
			t.Fatalf("Update renaming the hedger = %v, Delay %v", err, h.Delay())
		}
	}
	h, err := New(Config{Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Update(Config{Delay: time.Minute}); err != nil || h.Config().Name != "" {
		t.Fatalf("unnamed: Update = %v, Name %q", err, h.Config().Name)
	}
}

// TestUpdateRacingCalls: Updates of the delay and MaxHedges race with
// hedged calls under -race; every call returns its winner's result, every
// hedge that ran is counted, and the last MaxHedges bounds the hedges of
// the calls that follow.
func TestUpdateRacingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond, MaxHedges: 2})
		var wg sync.WaitGroup
		var attempts atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 50 {
					err := h.Do(context.Background(), func(ctx context.Context) error {
						attempts.Add(1)
						return sleepCtx(ctx, time.Duration(1+(g+i)%4)*time.Millisecond)
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Go(func() {
			c := h.Config()
			for i := range 100 {
				c.Delay = time.Duration(1+i%3) * time.Millisecond
				c.MaxHedges = 1 + i%MaxHedgesLimit
				if err := h.Update(c); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
		wg.Wait()
		synctest.Wait()
		st := h.Stats()
		if uint64(attempts.Load()) != 8*50+st.Hedges {
			t.Fatalf("attempts %d, calls %d + hedges %d", attempts.Load(), 8*50, st.Hedges)
		}
		if st.Hedges == 0 || st.HedgesWon > st.Hedges {
			t.Fatalf("stats %+v", st)
		}
		c := h.Config()
		c.Delay, c.MaxHedges = time.Millisecond, 1
		if err := h.Update(c); err != nil {
			t.Fatal(err)
		}
		before := h.Stats().Hedges
		var n atomic.Int32
		_ = h.Do(context.Background(), func(ctx context.Context) error {
			n.Add(1)
			return sleepCtx(ctx, 10*time.Millisecond)
		})
		synctest.Wait()
		if n.Load() != 2 || h.Stats().Hedges-before != 1 {
			t.Fatalf("MaxHedges 1: %d attempts, %d hedges", n.Load(), h.Stats().Hedges-before)
		}
	})
}

// TestZeroPercentileDelayStillHedges: a percentile delay computed from
// latencies that all read 0 (fast calls on a coarse clock such as
// rampart.NewCachedTicker, or a manual ticker) is still a delay (at least
// 1 ns: hedge after the next sweep), and the calls are hedged: -1 is the
// only "no hedging" value of Delay and Stats.Delay.
func TestZeroPercentileDelayStillHedges(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	h, err := New(Config{Percentile: 0.9, Delay: 5 * time.Millisecond, WarmUp: 1, Refresh: time.Second, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tk.Advance(time.Second)
	for range 10 {
		h.ObserveAt(tk.Now(), time.Duration(0))
	}
	d := h.Delay()
	if d == 0 {
		t.Errorf("Delay() = 0: documented as a delay, but calls are not hedged")
	}
	hedged := false
	_ = h.Do(context.Background(), func(ctx context.Context) error {
		_, hedged = ctx.(*firstCtx) // only the hedged path wraps the context
		return nil
	})
	if d != -1 && !hedged {
		t.Errorf("Delay() = %d but the call ran unhedged", d)
	}
}

// TestHugeRefreshKeepsDelayUntilRefresh: a huge Refresh (which New
// accepts) means "almost never recompute": now+Refresh saturates instead of
// wrapping into the past, so the samples do not recompute the delay.
func TestHugeRefreshKeepsDelayUntilRefresh(t *testing.T) {
	tk := rampart.NewManualTicker(1000)
	h, err := New(Config{Percentile: 0.9, Delay: 5 * time.Millisecond, WarmUp: 1,
		Refresh: time.Duration(math.MaxInt64), Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 10 {
		h.ObserveAt(tk.Now()+int64(i), 50*time.Millisecond)
	}
	if d := h.Delay(); d != 5*time.Millisecond {
		t.Fatalf("delay recomputed to %v before Refresh passed", time.Duration(d))
	}
}

func TestAllocsNoHedge(t *testing.T) {
	for _, pct := range []float64{0, 0.95} {
		h, err := New(Config{Delay: time.Second, Percentile: pct})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		fn := func(context.Context) error { return nil }
		fnT := func(context.Context) (int, error) { return 1, nil }
		for range 1000 { // warm the pool and the watchdog table
			_ = h.Do(ctx, fn)
		}
		// AllocsPerRun rounds down: the slab (one per 64 calls) shows as 0.
		name := fmt.Sprintf(" (p=%v)", pct)
		testkit.WantAllocs(t, "Do"+name, 0, func() { _ = h.Do(ctx, fn) })
		testkit.WantAllocs(t, "Call"+name, 0, func() { _, _ = Call(ctx, h, fnT) })
		tk := h.Ticker()
		testkit.WantAllocs(t, "DoAtHeld"+name, 0, func() { _ = h.DoAtHeld(ctx, tk.Now(), fn) })
		testkit.WantAllocs(t, "CallAtHeld"+name, 0, func() { _, _ = CallAtHeld(ctx, h, tk.Now(), fnT) })
		if st := h.Stats(); st.Hedges != 0 {
			t.Fatalf("hedged: %+v", st)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add(int64(time.Millisecond), 0.0, int64(0), int64(0), 0, 1, false)
	f.Add(int64(0), 0.95, int64(time.Microsecond), int64(time.Second), 10, 2, true)
	f.Add(int64(-1), 2.0, int64(-1), int64(-5), -1, 9, false)
	f.Fuzz(func(t *testing.T, delay int64, pct float64, minD, maxD int64, warm, hedges int, async bool) {
		h, err := New(Config{Delay: time.Duration(delay), Percentile: pct, MinDelay: time.Duration(minD),
			MaxDelay: time.Duration(maxD), WarmUp: warm, MaxHedges: hedges, AsyncFirst: async,
			Ticker: rampart.NewManualTicker(0)})
		if err != nil {
			if !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
			return
		}
		defer h.Close()
		if err := h.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHugeDelay: a delay near the largest Duration never wraps around into
// an immediate hedge.
func TestHugeDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Duration(1<<63 - 1)})
		_ = h.Do(context.Background(), func(ctx context.Context) error { return sleepCtx(ctx, 10*time.Millisecond) })
		if st := h.Stats(); st.Hedges != 0 {
			t.Fatalf("hedged: %+v", st)
		}
	})
}

// TestMaxHedges: hedges start one delay apart, up to MaxHedges; the third
// hedge wins and the others are cancelled; a panicking listener is counted.
func TestMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: 2 * time.Millisecond, MaxHedges: 3,
			OnHedge: func(int) { panic("listener") }})
		var n atomic.Int32
		var cancelled atomic.Int32
		t0 := time.Now()
		v, err := Call(context.Background(), h, func(ctx context.Context) (int32, error) {
			i := n.Add(1)
			if i < 4 {
				err := sleepCtx(ctx, time.Hour)
				cancelled.Add(1)
				return 0, err
			}
			return i, sleepCtx(ctx, time.Millisecond)
		})
		el := time.Since(t0)
		synctest.Wait()
		if v != 4 || err != nil || cancelled.Load() != 3 {
			t.Fatalf("got %d, %v; cancelled %d", v, err, cancelled.Load())
		}
		if el < 7*time.Millisecond || el > 8*time.Millisecond {
			t.Fatalf("took %v, want 3 delays + 1ms", el)
		}
		if st := h.Stats(); st.Hedges != 3 || st.HedgesWon != 1 || st.ListenerPanics != 3 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestNoGoroutineNoHedge: calls that finish before the delay start no
// goroutine (the hedger's own watchdog goroutine aside).
func TestNoGoroutineNoHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: time.Millisecond})
		var maxG int
		fn := func(context.Context) error {
			maxG = max(maxG, bubble.Goroutines())
			return nil
		}
		_ = h.Do(context.Background(), fn) // starts the watchdog goroutine
		synctest.Wait()                    // the count is exact once every goroutine is blocked
		base := bubble.Goroutines()
		for range 1000 {
			if err := h.Do(context.Background(), fn); err != nil {
				t.Fatal(err)
			}
		}
		if maxG > base || h.Stats().Hedges != 0 {
			t.Fatalf("goroutines %d > %d, stats %+v", maxG, base, h.Stats())
		}
	})
}

// TestAt: DoAtHeld and CallAtHeld take the start from the caller; a start in the
// past brings the hedge forward.
func TestAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newBubbleHedger(t, Config{Delay: 10 * time.Millisecond})
		var n atomic.Int32
		slowFirst := func(ctx context.Context) (int32, error) {
			i := n.Add(1)
			if i == 1 {
				return i, sleepCtx(ctx, time.Hour)
			}
			return i, nil
		}
		t0 := time.Now()
		// Started 8 ms ago by the caller's reading: the hedge fires 2 ms from now.
		v, err := CallAtHeld(context.Background(), h, h.Ticker().Now()-int64(8*time.Millisecond), slowFirst)
		if el := time.Since(t0); v != 2 || err != nil || el < 2*time.Millisecond || el > 2*time.Millisecond+100*time.Microsecond {
			t.Fatalf("CallAtHeld: %d, %v after %v", v, err, time.Since(t0))
		}
		n.Store(0)
		if err := h.DoAtHeld(context.Background(), h.Ticker().Now(), func(ctx context.Context) error {
			_, err := slowFirst(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDoneContextRunsNothing: every entry point (Do, DoAtHeld, Call, CallAtHeld,
// DoAtHeld, CallAtHeld), with a fixed delay, AsyncFirst or a percentile
// still warming up, given a context that is already done (cancelled, or
// past its deadline), runs no attempt and returns ctx.Err() itself, as
// package pipeline does; the budget and the histogram see nothing.
func TestDoneContextRunsNothing(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancelExpired()
	for cname, ctx := range map[string]context.Context{"canceled": canceled, "expired": expired} {
		for name, cfg := range map[string]Config{
			"fixed":      {Delay: time.Hour},
			"async":      {Delay: time.Hour, AsyncFirst: true},
			"warming up": {Percentile: 0.95, WarmUp: 1},
		} {
			b := &testkit.Budget{}
			b.KeepLog()
			cfg.Budget = b
			cfg.Ticker = rampart.NewManualTicker(0)
			h, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var runs int
			ok := func(context.Context) error { runs++; return nil }
			okInt := func(context.Context) (int, error) { runs++; return 7, nil }
			for entry, call := range map[string]func() (int, error){
				"Do":         func() (int, error) { return 0, h.Do(ctx, ok) },
				"DoAtHeld":   func() (int, error) { return 0, h.DoAtHeld(ctx, 0, ok) },
				"Call":       func() (int, error) { return Call(ctx, h, okInt) },
				"CallAtHeld": func() (int, error) { return CallAtHeld(ctx, h, 0, okInt) },
			} {
				runs = 0
				if v, err := call(); runs != 0 || v != 0 || err != ctx.Err() {
					t.Errorf("%s %s/%s: fn ran %d times, got %d, %v; want 0 runs, 0, %v", cname, name, entry, runs, v, err, ctx.Err())
				}
			}
			if b.Requests()+b.Successes()+b.Failures()+b.Asks() != 0 {
				t.Errorf("%s %s: budget saw %q", cname, name, b)
			}
			if st := h.Stats(); st.Samples != 0 || st.Hedges != 0 {
				t.Errorf("%s %s: stats %+v", cname, name, st)
			}
			_ = h.Close()
		}
	}
}

// stallBudget grants every hedge, but its first AllowRetry waits until
// release is closed.
type stallBudget struct {
	entered, release chan struct{}
	once             sync.Once
	granted          atomic.Int64
	first            atomic.Bool
}

func (b *stallBudget) OnRequest(int64) {}
func (b *stallBudget) OnSuccess(int64) {}
func (b *stallBudget) OnFailure(int64) { b.unstall() }
func (b *stallBudget) AllowRetry(int64) bool {
	if b.first.CompareAndSwap(false, true) {
		close(b.entered)
		<-b.release
	}
	b.granted.Add(1)
	return true
}
func (b *stallBudget) unstall() { b.once.Do(func() { close(b.release) }) }

// hookTicker is a ManualTicker whose reads, once armed, release the
// stallBudget.
type hookTicker struct {
	*rampart.ManualTicker
	armed atomic.Bool
	b     *stallBudget
}

func (t *hookTicker) Now() int64 {
	if t.armed.Load() {
		t.b.unstall()
	}
	return t.ManualTicker.Now()
}

// TestBudgetGrantStartsHedge: the budget is asked for a hedge only while
// the race is undecided, and a grant always starts the hedge. Here the
// first attempt fails (non-fatally) while the trigger is inside
// AllowRetry: the first attempt's outcome waits for the budget's answer,
// the granted hedge runs and wins, and the budget counted exactly the
// hedges that ran (it is never charged for a hedge that does not start).
func TestBudgetGrantStartsHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &stallBudget{entered: make(chan struct{}), release: make(chan struct{})}
		tk := &hookTicker{ManualTicker: rampart.NewManualTicker(1), b: b}
		h, err := New(Config{Delay: 10 * time.Millisecond, Ticker: tk, Tick: time.Millisecond, Budget: b,
			Fatal: func(error) bool { return false }})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var calls atomic.Int64
		err = h.Do(context.Background(), func(ctx context.Context) error {
			if calls.Add(1) > 1 {
				return nil // the hedge
			}
			tk.Advance(20 * time.Millisecond)
			<-b.entered // the trigger fired and is inside AllowRetry
			// The budget is released by the caller's next clock read or
			// budget report, once this attempt has returned.
			tk.armed.Store(true)
			return errDown
		})
		synctest.Wait()
		g, st := b.granted.Load(), h.Stats()
		if g != int64(st.Hedges) || err != nil || calls.Load() != 2 {
			t.Fatalf("the budget granted %d hedges, %d started (%d calls of fn); Do returned %v", g, st.Hedges, calls.Load(), err)
		}
	})
}

// TestHedgerBytes gates the heap bytes of one live hedger: 160 B with a
// fixed delay (the latency histogram is allocated only for a percentile
// delay, which adds it and its state: 10240 + 80 B), a 48 B block more
// with listeners or a Name (the Name's bytes are the caller's string).
// New builds nothing for a nil Budget.
func TestHedgerBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	mk := func(c Config) func() any {
		return func() any {
			h, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
	}
	testkit.WantBytes(t, "fixed delay", 160, mk(Config{Delay: 10 * time.Millisecond}))
	testkit.WantBytes(t, "fixed delay, listeners", 160+48, mk(Config{Delay: 10 * time.Millisecond, OnHedge: func(int) {}}))
	testkit.WantBytes(t, "fixed delay, Name", 160+48, mk(Config{Delay: 10 * time.Millisecond, Name: "profile"}))
	testkit.WantBytes(t, "percentile delay", 160+10240+80, mk(Config{Percentile: 0.95}))
}
