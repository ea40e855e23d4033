package hedge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/retry"
)

// These tests run outside a synctest bubble on purpose: the failure they
// reproduce leaves a goroutine blocked on a sync.Mutex, which a bubble would
// wait for forever. The hedger runs on a manual ticker with its own watchdog;
// the tests wait on channels only (the watchdog fires the hedge on its first
// sweep after the ticker passed the deadline).

var (
	errReview3First = errors.New("first attempt failed")
	errReview3Hedge = errors.New("hedge failed")
)

// A Config.Fatal that panics on the first attempt's error after a hedge
// started: the classifier runs in race.report with r.mu held, so the panic
// leaves the mutex locked, the race undecided and the hedge running with a
// live context (then blocked forever on r.mu when it reports). Expected, as
// for a panic of the first attempt itself: the hedges are cancelled and the
// panic propagates.
func TestReview3FatalPanicAfterHedgeCancelsHedges(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	h, err := New(Config{Delay: 10 * time.Millisecond, Ticker: tk, Tick: time.Millisecond,
		Fatal: func(err error) bool {
			if errors.Is(err, errReview3First) {
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
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = h.Do(context.Background(), func(ctx context.Context) error {
			if first { // the caller's goroutine: the first attempt
				first = false
				tk.Advance(20 * time.Millisecond)
				hc := <-hedgeCtx // the hedge started
				hedgeCtx <- hc
				return errReview3First
			}
			hedgeCtx <- ctx
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-release:
				return nil
			}
		})
	}()
	if recovered != "classifier" {
		t.Fatalf("recovered %v, want the classifier's panic", recovered)
	}
	hc := <-hedgeCtx
	select {
	case <-hc.Done():
	default:
		t.Fatal("the hedge's context is still live after the caller's panic")
	}
}

// A Config.Fatal that panics on a hedge's error runs in race.report on the
// hedge's goroutine, outside run's recover: the panic kills the process. The
// package doc promises that a panic on a hedge's goroutine is recovered
// there and re-raised on the caller's. Expected: Do panics with the
// classifier's value on the caller's goroutine.
//
// Without the fix this test crashes the test binary (an unrecovered panic on
// the hedge's goroutine).
func TestReview3FatalPanicOnHedgeReachesCaller(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	recovered := panicOnHedge(t, tk, Config{Fatal: func(err error) bool {
		if errors.Is(err, errReview3Hedge) {
			panic("classifier")
		}
		return true
	}}, nil, errReview3Hedge)
	if recovered != "classifier" {
		t.Fatalf("recovered %v, want the classifier's panic re-raised on the caller", recovered)
	}
}

// panicOnHedge runs one call through a hedger built from cfg (Delay 10 ms
// on tk) whose first attempt runs past the delay, calls arm, and waits for
// the race to be decided by the hedge, which returns hedgeErr. It returns
// what the caller recovered.
func panicOnHedge(t *testing.T, tk *rampart.ManualTicker, cfg Config, arm func(), hedgeErr error) (recovered any) {
	t.Helper()
	cfg.Delay, cfg.Ticker, cfg.Tick = 10*time.Millisecond, tk, time.Millisecond
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	first := true
	defer func() { recovered = recover() }()
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
	return nil
}

// A percentile delay computed from latencies that all read 0 (fast calls on
// a coarse clock such as rampart.NewCachedTicker, or a manual ticker) is 0,
// and run treats d <= 0 as "not hedged": hedging silently stops, while
// Delay and Stats.Delay document -1 as the only "no hedging" value. The 10 %
// of calls that are slow are then never hedged. Expected: a percentile
// delay is at least 1 ns (hedge after the next sweep), or Delay reports -1.
func TestReview3ZeroPercentileStillHedges(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	h, err := New(Config{Percentile: 0.9, Delay: 5 * time.Millisecond, WarmUp: 1, Refresh: time.Second, Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tk.Advance(time.Second)
	for range 10 {
		h.Observe(0, tk.Now())
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

// Guard (passes): a hedger whose budget refuses the hedge runs the call to
// the first attempt's end, counts the refusal once, and calls OnRequest and
// OnSuccess once each.
func TestReview3BudgetRefusalLetsFirstAttemptFinish(t *testing.T) {
	tk := rampart.NewManualTicker(1)
	b := &countingBudget{allow: false}
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
	if b.requests != 1 || b.successes != 1 || b.failures != 0 {
		t.Fatalf("budget saw %+v", *b)
	}
}

// countingBudget counts the protocol's calls (single-threaded use: the
// refusal comes from the watchdog goroutine, but only allow is read there).
type countingBudget struct {
	allow                         bool
	requests, successes, failures int
}

func (b *countingBudget) OnRequest(int64)       { b.requests++ }
func (b *countingBudget) OnSuccess(int64)       { b.successes++ }
func (b *countingBudget) OnFailure(int64)       { b.failures++ }
func (b *countingBudget) AllowRetry(int64) bool { return b.allow }

var _ retry.Budget = (*countingBudget)(nil)
