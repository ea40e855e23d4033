package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

// TestBudgetValidation: each invalid budget configuration is refused by
// its constructor with a ConfigError naming the field (TokenBucket for the
// precision of MaxTokens and TokenRatio together). A Ratio that would round
// to no retry per million requests (its precision) is one of them; the
// smallest Ratio accepted grants its share: 1e-6 of 3M requests is 3
// retries.
func TestBudgetValidation(t *testing.T) {
	for _, c := range []struct {
		cfg   TokenBucketConfig
		field string
	}{
		{TokenBucketConfig{MaxTokens: -1}, "MaxTokens"},
		{TokenBucketConfig{TokenRatio: -0.1}, "TokenRatio"},
		{TokenBucketConfig{TokenRatio: 1.5}, "TokenRatio"},
		{TokenBucketConfig{MaxTokens: math.NaN()}, "MaxTokens"},
		{TokenBucketConfig{MaxTokens: 2e9}, "MaxTokens"},
		{TokenBucketConfig{MaxTokens: 0.0001}, "TokenBucket"},
		{TokenBucketConfig{TokenRatio: 0.0001}, "TokenBucket"},
	} {
		b, err := NewTokenBucket(c.cfg)
		if b != nil || !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Errorf("NewTokenBucket(%+v) = %v, %v", c.cfg, b, err)
		}
		testkit.RequireConfigError(t, err, "retry", c.field)
	}
	for _, c := range []struct {
		cfg   RatioBudgetConfig
		field string
	}{
		{RatioBudgetConfig{Ratio: -0.1}, "Ratio"},
		{RatioBudgetConfig{Ratio: 1.01}, "Ratio"},
		{RatioBudgetConfig{Ratio: math.Inf(1)}, "Ratio"},
		{RatioBudgetConfig{Ratio: 4e-7}, "Ratio"}, // 0.4 ppm rounds to 0: would never grant a retry
		{RatioBudgetConfig{Window: -time.Second}, "Window"},
		{RatioBudgetConfig{Buckets: -1}, "Buckets"},
		{RatioBudgetConfig{Buckets: 2000}, "Buckets"},
		{RatioBudgetConfig{Window: 5, Buckets: 10}, "Window"},
		{RatioBudgetConfig{MinRetries: -1}, "MinRetries"},
	} {
		b, err := NewRatioBudget(c.cfg)
		if b != nil || !errors.Is(err, rampart.ErrInvalidConfig) {
			t.Errorf("NewRatioBudget(%+v) = %v, %v", c.cfg, b, err)
		}
		testkit.RequireConfigError(t, err, "retry", c.field)
	}
	if _, err := NewRatioBudget(RatioBudgetConfig{Ratio: 1}); err != nil {
		t.Fatal(err)
	}
	tiny, err := NewRatioBudget(RatioBudgetConfig{Ratio: 1e-6, Buckets: 1, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tiny.words[0].Store(3_000_000) // lap 0, 3M requests (and no retry)
	if req, _ := tiny.Counts(0); req != 3_000_000 {
		t.Fatalf("requests %d", req)
	}
	var grants []bool
	for range 4 {
		grants = append(grants, tiny.AllowRetry(0))
	}
	if fmt.Sprint(grants) != "[true true true false]" {
		t.Fatalf("Ratio 1e-6 × 3M requests: grants %v, want 3 (ratioPPM %d)", grants, tiny.ratioPPM)
	}
}

func TestTokenBucketA6(t *testing.T) {
	b, err := NewTokenBucket(TokenBucketConfig{}) // 10 tokens, ratio 0.1
	if err != nil {
		t.Fatal(err)
	}
	if b.Tokens() != 10 || !b.AllowRetry(0) {
		t.Fatal("not full")
	}
	for i := range 4 {
		b.OnFailure(0)
		if !b.AllowRetry(0) {
			t.Fatalf("refused after %d failures (tokens %v)", i+1, b.Tokens())
		}
	}
	b.OnFailure(0) // 5 tokens: not > 5
	if b.AllowRetry(0) || b.Tokens() != 5 {
		t.Fatalf("allowed at %v tokens", b.Tokens())
	}
	for range 20 {
		b.OnFailure(0)
	}
	if b.Tokens() != 0 || b.tokens.Load() != 0 {
		t.Fatalf("below zero: %v", b.tokens.Load())
	}
	for range 51 { // 0 -> 5.1
		b.OnSuccess(0)
	}
	if !b.AllowRetry(0) || math.Abs(b.Tokens()-5.1) > 1e-9 {
		t.Fatalf("tokens %v", b.Tokens())
	}
	for range 1000 {
		b.OnSuccess(0)
	}
	if b.Tokens() != 10 || b.tokens.Load() != 10*milli {
		t.Fatalf("above max: %v", b.tokens.Load())
	}
	b.OnRequest(0) // no-op
}

// TestTokenBucketConcurrent hammers the bucket from many goroutines with
// mixes of successes and failures and checks that the readers' view never
// leaves [0, MaxTokens]; after the storm, failures alone drain the raw word
// to exactly 0 (retries refused) and successes alone fill it to exactly
// MaxTokens (retries allowed).
func TestTokenBucketConcurrent(t *testing.T) {
	for _, c := range []struct {
		ratio        float64
		iterations   int
		failureFirst bool // the (i+g)%3 == 0 calls fail (else they succeed)
	}{
		{0.5, 3000, true},
		{0.7, 2000, false},
	} {
		b, _ := NewTokenBucket(TokenBucketConfig{MaxTokens: 3, TokenRatio: c.ratio})
		var wg sync.WaitGroup
		var bad atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range c.iterations {
					if ((i+g)%3 == 0) == c.failureFirst {
						b.OnFailure(0)
					} else {
						b.OnSuccess(0)
					}
					if v := b.Tokens(); v < 0 || v > 3 {
						bad.Add(1)
					}
					b.AllowRetry(0)
				}
			})
		}
		wg.Wait()
		if bad.Load() != 0 {
			t.Fatalf("ratio %v: %d out-of-bounds readings", c.ratio, bad.Load())
		}
		for range 10 {
			b.OnFailure(0)
		}
		if b.Tokens() != 0 || b.tokens.Load() != 0 || b.AllowRetry(0) {
			t.Fatalf("ratio %v: after failures: %v (raw %d)", c.ratio, b.Tokens(), b.tokens.Load())
		}
		for range 10 {
			b.OnSuccess(0)
		}
		if b.Tokens() != 3 || b.tokens.Load() != 3*milli || !b.AllowRetry(0) {
			t.Fatalf("ratio %v: after successes: %v (raw %d), want %d", c.ratio, b.Tokens(), b.tokens.Load(), 3*milli)
		}
	}
}

// TestA6BoundAtFullFailure: with a dependency that always fails, many
// goroutines calling through policies that share one A6 bucket make at most
// 1.2 × requests + 3 attempts (in fact requests + about MaxTokens/2 +
// goroutines).
func TestA6BoundAtFullFailure(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	pols := []*Policy{
		mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 5, Budget: b}),
		mustNew(t, Config{Backoff: FullJitter, BaseDelay: time.Nanosecond, MaxAttempts: 4, Budget: b}),
	}
	var attempts, requests, budgetErrs atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			p := pols[g%2]
			for range 200 {
				requests.Add(1)
				err := p.Do(context.Background(), func(context.Context) error { attempts.Add(1); return errBoom })
				if !errors.Is(err, errBoom) || !errors.Is(err, ErrExhausted) {
					t.Errorf("err %v", err)
					return
				}
				if errors.Is(err, ErrBudget) {
					budgetErrs.Add(1)
				}
			}
		})
	}
	wg.Wait()
	a, r := attempts.Load(), requests.Load()
	if float64(a) > 1.2*float64(r)+3 {
		t.Fatalf("%d attempts for %d requests: budget did not hold", a, r)
	}
	if budgetErrs.Load() == 0 || b.Tokens() != 0 {
		t.Fatalf("budget never refused (tokens %v)", b.Tokens())
	}
	t.Logf("%d attempts for %d requests", a, r)
}

func TestRatioBudgetSequential(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	b, _ := NewRatioBudget(RatioBudgetConfig{Ratio: 0.1, Window: time.Second, Buckets: 10})
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 3, Budget: b, Ticker: tk})
	var attempts, requests int
	for range 1000 {
		requests++
		_ = p.Do(context.Background(), func(context.Context) error { attempts++; return errBoom })
		tk.Advance(time.Millisecond / 2)
	}
	// Every window of 1 s holds ≤ 10 % retries: over the whole run (500 ms
	// < window), retries ≤ 0.1 × requests.
	if retries := attempts - requests; retries > requests/10 || retries < requests/10-1 {
		t.Fatalf("%d retries for %d requests, want about 10 %%", retries, requests)
	}
	req, ret := b.Counts(tk.Now())
	if req != 1000 || ret != uint64(attempts-requests) {
		t.Fatalf("Counts = %d, %d", req, ret)
	}
	// The window slides: 1 s later everything has expired.
	tk.Advance(time.Second)
	if req, ret := b.Counts(tk.Now()); req != 0 || ret != 0 {
		t.Fatalf("after the window: %d, %d", req, ret)
	}
	if b.AllowRetry(tk.Now()) {
		t.Fatal("retry allowed with no request and MinRetries 0")
	}
}

func TestRatioBudgetMinRetriesAndSliding(t *testing.T) {
	b, _ := NewRatioBudget(RatioBudgetConfig{Ratio: 0.5, Window: 10 * time.Second, Buckets: 10, MinRetries: 2})
	s := int64(time.Second)
	for i := range 2 {
		if !b.AllowRetry(0) {
			t.Fatalf("MinRetries: retry %d refused", i)
		}
	}
	if b.AllowRetry(0) {
		t.Fatal("third retry allowed with no request")
	}
	for range 4 {
		b.OnRequest(3 * s)
	}
	// 4 requests × 0.5 + 2 = 4 retries in the window; 2 used.
	// AllowRetry spends a retry when it allows one, so the three calls differ.
	if first, second, third := b.AllowRetry(3*s), b.AllowRetry(3*s), b.AllowRetry(3*s); !first || !second || third {
		t.Fatal("ratio not applied")
	}
	// At 10.5 s, bucket 0 (the first two retries) has left the window.
	if first, second, third := b.AllowRetry(10*s+s/2), b.AllowRetry(10*s+s/2), b.AllowRetry(10*s+s/2); !first || !second || third {
		t.Fatal("window did not slide")
	}
	// At 13.5 s the requests of bucket 3 are gone too.
	if req, _ := b.Counts(13*s + s/2); req != 0 {
		t.Fatalf("requests %d", req)
	}
	b.OnSuccess(0)
	b.OnFailure(0)
	b.OnRequest(-5) // a negative reading counts in its own epoch (-1)
}

func TestRatioBudgetSaturates(t *testing.T) {
	b, _ := NewRatioBudget(RatioBudgetConfig{Buckets: 1})
	w := &b.words[0]        // bucket 0's requests
	w.Store(rbCountMax - 1) // tag 0, requests almost full
	b.OnRequest(0)
	b.OnRequest(0)
	if req, _ := b.Counts(0); req != rbCountMax {
		t.Fatalf("requests %d, want saturation at %d", req, rbCountMax)
	}
}

// TestRatioBudgetConcurrent: many goroutines, 100 % failure, ManualTicker
// moved by the goroutines themselves. Retries stay within Ratio × requests
// plus one per goroutine (the check-then-add race the docs describe).
func TestRatioBudgetConcurrent(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	b, _ := NewRatioBudget(RatioBudgetConfig{Ratio: 0.2, Window: time.Hour, Buckets: 8})
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 4, Budget: b, Ticker: tk})
	const G, N = 16, 300
	var attempts atomic.Int64
	var wg sync.WaitGroup
	for range G {
		wg.Go(func() {
			for range N {
				_ = p.Do(context.Background(), func(context.Context) error { attempts.Add(1); return errBoom })
				tk.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
	retries := attempts.Load() - G*N
	if limit := int64(0.2*G*N) + G; retries > limit {
		t.Fatalf("%d retries for %d requests, limit %d", retries, G*N, limit)
	}
	if retries < int64(0.2*G*N)/2 {
		t.Fatalf("only %d retries: budget too strict", retries)
	}
	t.Logf("%d retries for %d requests", retries, G*N)
}

// TestRatioBudgetConcurrentGrantsBound: the documented concurrency bound
// of RatioBudget, on AllowRetry alone: granted retries ≤ Ratio × requests +
// MinRetries + the number of concurrent checkers, and every grant is
// counted.
func TestRatioBudgetConcurrentGrantsBound(t *testing.T) {
	b, _ := NewRatioBudget(RatioBudgetConfig{Ratio: 0.1, Buckets: 4, Window: time.Second, MinRetries: 2})
	for range 1000 {
		b.OnRequest(0)
	}
	const G = 8
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range G {
		wg.Go(func() {
			for range 500 {
				if b.AllowRetry(0) {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	req, ret := b.Counts(0)
	if req != 1000 || ret != uint64(granted.Load()) {
		t.Fatalf("counts %d/%d, granted %d", req, ret, granted.Load())
	}
	if g := granted.Load(); g < 102 || g > 102+G {
		t.Fatalf("granted %d retries, want 102 (+ at most %d)", g, G)
	}
}

// TestRatioBudgetStaleWriteKeepsLiveBucket: a writer whose now is a window
// (or more) older than the live bucket's epoch maps to the same slot; its
// write does not take the live slot for stale, and the live bucket's
// requests stay counted (a goroutine preempted for one window between its
// clock read and OnRequest, or a hedger passing an older reading, does
// this under overload, when budgets matter).
func TestRatioBudgetStaleWriteKeepsLiveBucket(t *testing.T) {
	b, err := NewRatioBudget(RatioBudgetConfig{Ratio: 0.5, Buckets: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	live := int64(10 * time.Second) // epoch 100, slot 0
	for range 100 {
		b.OnRequest(live)
	}
	b.OnRequest(live - int64(time.Second)) // epoch 90, slot 0: outside every current window
	if req, _ := b.Counts(live); req != 100 {
		t.Fatalf("the live window holds %d requests after a stale write, want 100", req)
	}
}

func TestAllocsBudgets(t *testing.T) {
	tb, _ := NewTokenBucket(TokenBucketConfig{})
	rb, _ := NewRatioBudget(RatioBudgetConfig{MinRetries: 1 << 20})
	now := int64(0)
	testkit.WantAllocs(t, "budgets", 0, func() {
		now += int64(time.Millisecond)
		for _, b := range []rampart.Budget{tb, rb} {
			b.OnRequest(now)
			b.OnFailure(now)
			b.AllowRetry(now)
			b.OnSuccess(now)
		}
	})
}

// FuzzTokenBucket applies a sequence of successes and failures and checks
// the bucket against a float model: count in [0, MaxTokens], AllowRetry iff
// count > MaxTokens/2.
func FuzzTokenBucket(f *testing.F) {
	f.Add(10.0, 0.1, []byte{0, 0, 0, 0, 0, 1, 1, 1})
	f.Add(3.0, 1.0, []byte{1, 0, 1, 0, 0, 0, 0})
	f.Add(0.5, 0.001, []byte{0, 1})
	f.Fuzz(func(t *testing.T, maxTok, ratio float64, ops []byte) {
		b, err := NewTokenBucket(TokenBucketConfig{MaxTokens: maxTok, TokenRatio: ratio})
		if err != nil {
			return
		}
		model := b.max // milli-tokens
		for _, op := range ops {
			if op&1 == 0 {
				b.OnFailure(0)
				model = max(model-milli, 0)
			} else {
				b.OnSuccess(0)
				model = min(model+b.ratio, b.max)
			}
			if got := b.tokens.Load(); got != model {
				t.Fatalf("tokens %d, model %d", got, model)
			}
			if b.AllowRetry(0) != (model > b.max/2) {
				t.Fatalf("AllowRetry at %d of %d", model, b.max)
			}
		}
	})
}

// FuzzRatioBudget drives a RatioBudget with requests and retry requests at
// non-decreasing times and checks, sequentially, that every grant kept the
// window's retries within Ratio × requests + MinRetries.
func FuzzRatioBudget(f *testing.F) {
	f.Add(0.1, 4, 3, []byte{0, 0, 0, 1, 1, 2, 1, 0, 1})
	f.Add(1.0, 1, 0, []byte{0, 1, 1, 3, 0, 1})
	f.Fuzz(func(t *testing.T, ratio float64, buckets, minRetries int, ops []byte) {
		b, err := NewRatioBudget(RatioBudgetConfig{Ratio: ratio, Window: time.Second, Buckets: buckets, MinRetries: minRetries})
		if err != nil {
			return
		}
		if ratio == 0 {
			ratio = 0.1 // the documented default of a zero Ratio
		}
		now := int64(0)
		for _, op := range ops {
			switch op % 4 {
			case 0:
				b.OnRequest(now)
			case 1:
				req, ret := b.Counts(now)
				if b.AllowRetry(now) {
					if float64(ret+1) > ratio*float64(req)+float64(minRetries)+1e-6 {
						t.Fatalf("granted retry %d with %d requests (ratio %v, min %d)", ret+1, req, ratio, minRetries)
					}
					if _, ret2 := b.Counts(now); ret2 != ret+1 {
						t.Fatalf("grant not counted: %d -> %d", ret, ret2)
					}
				}
			default:
				now += int64(op) * int64(time.Millisecond) * 7
			}
		}
	})
}

// TestBudgetProtocol: the calls a Policy makes to its budget, one OnRequest
// per call and one OnSuccess or OnFailure per attempt (a Permanent error is
// neither), and one AllowRetry per retry considered; a Goexit in fn counts
// as a failure and ends the caller's goroutine.
func TestBudgetProtocol(t *testing.T) {
	cb := &testkit.Budget{}
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 3, Budget: cb})
	ctx := context.Background()
	check := func(what string, req, succ, fail, asks int64) {
		t.Helper()
		if cb.Requests() != req || cb.Successes() != succ || cb.Failures() != fail || cb.Asks() != asks {
			t.Fatalf("%s: requests %d successes %d failures %d asks %d; want %d %d %d %d", what,
				cb.Requests(), cb.Successes(), cb.Failures(), cb.Asks(), req, succ, fail, asks)
		}
	}
	_ = p.Do(ctx, func(context.Context) error { return nil })
	check("first-try success", 1, 1, 0, 0)
	n := 0
	_ = p.Do(ctx, func(context.Context) error {
		if n++; n < 2 {
			return errBoom
		}
		return nil
	})
	check("success on retry", 2, 2, 1, 1)
	_ = p.Do(ctx, func(context.Context) error { return errBoom })
	check("exhausted", 3, 2, 4, 3) // 3 failures, 2 retries asked
	_ = p.Do(ctx, func(context.Context) error { return Permanent(errBoom) })
	check("permanent", 4, 2, 4, 3) // not a failure of the dependency
	cb.SetAllow(false)
	_, err := Call(ctx, p, func(context.Context) (int, error) { return 0, errBoom })
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("err %v", err)
	}
	check("refused", 5, 2, 5, 4)
	_, _ = CallIf(ctx, p, func(context.Context) (int, error) { return 1, nil }, func(int) bool { return false })
	check("typed success", 6, 3, 5, 4)
	// runtime.Goexit in fn counts as a failure.
	if panicked, goexited := testkit.Run(func() {
		_ = p.Do(ctx, func(context.Context) error { testkit.Goexit(); return nil })
	}); panicked != nil || !goexited {
		t.Fatalf("fn's Goexit: the caller's goroutine ended with panic %v, Goexit %v; want a Goexit", panicked, goexited)
	}
	check("goexit", 7, 3, 6, 4)
	// A context canceled after a failure records the failure too.
	cctx, cancel := context.WithCancel(ctx)
	_ = p.Do(cctx, func(context.Context) error { cancel(); return errBoom })
	check("canceled", 8, 3, 7, 4)
}

// TestRatioBudgetCountsAcrossEpochWraps: a RatioBudget counts requests and
// retries, and applies its ratio, at every reading of the clock: before, at
// and after 2^19 and 2^20 buckets (where a 20-bit epoch tag would take the
// never-written slots for newer ones, and alias stale ones), several such
// wraps later, and around 2^39 and 2^40 laps of the ring (the range of the
// 40-bit lap tag) with 1 ns buckets. Each reading is checked on a fresh
// budget (created late in the clock's life) and on budgets last used some
// distance earlier (idle since): just outside the window, and 2^19 or 2^20
// buckets earlier, or 2^39 laps.
func TestRatioBudgetCountsAcrossEpochWraps(t *testing.T) {
	const w19, w20 = int64(1) << 19, int64(1) << 20
	const l39, l40 = int64(1) << 39, int64(1) << 40
	wraps := []int64{0, w19 - 1, w19, w19 + 1, w20 - 1, w20, w20 + 1, 3*w20 - 1, 3*w20 + 7, 5*w20 + w19 + 1, 11*w20 + 3}
	idle := []int64{w19 - 1, w19, w19 + 1, w20 - 1, w20, w20 + 1, 3 * w20, 3*w20 + 1}
	var laps []int64 // 10 buckets of 1 ns: the lap tag's own wraps
	for _, lap := range []int64{l39 - 1, l39, l39 + 1, l40 - 1, l40, l40 + 1, 3*l40 + l39 + 1, 5*l40 + 2} {
		laps = append(laps, lap*10, lap*10+9)
	}
	for _, c := range []struct {
		window  time.Duration
		buckets int
		epochs  []int64 // readings, in buckets since the clock's zero
		idle    []int64 // distances, in buckets, to an earlier use
	}{
		{0, 0, wraps, append([]int64{10}, idle...)},                           // 10 s in 10 buckets of 1 s
		{time.Second, 10, wraps, append([]int64{10}, idle...)},                // 100 ms buckets
		{10 * time.Second, 1, wraps, append([]int64{1, 2}, idle...)},          // one bucket: the lap is the epoch
		{10, 10, laps, []int64{10, 11, 19, 10*l39 - 1, 10 * l39, 10*l39 + 9}}, // 1 ns buckets
	} {
		cfg := RatioBudgetConfig{Ratio: 0.1, Window: c.window, Buckets: c.buckets}
		for _, e := range c.epochs {
			for _, ago := range append([]int64{-1}, c.idle...) {
				if ago > e {
					continue
				}
				checkCountsAfterIdle(t, cfg, e, ago)
			}
		}
	}
}

// checkCountsAfterIdle checks, on a fresh RatioBudget of cfg, that a window
// ending at bucket e counts nothing before any request, then 12 requests and
// the one retry its ratio of 0.1 grants; first at bucket e-ago when ago >=
// 0 (a budget last used ago buckets earlier, idle since).
func checkCountsAfterIdle(t *testing.T, cfg RatioBudgetConfig, e, ago int64) {
	t.Helper()
	b, err := NewRatioBudget(cfg)
	if err != nil {
		t.Fatal(err)
	}
	first := e
	if ago >= 0 {
		first = e - ago
	}
	tk := rampart.NewManualTicker(first * b.bucketNs) // readings below 0 too
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 2, Budget: b, Ticker: tk})
	use := func(at int64) {
		t.Helper()
		tk.Set(at * b.bucketNs)
		if req, ret := b.Counts(tk.Now()); req != 0 || ret != 0 {
			t.Fatalf("window %v/%d, bucket %d, last used %d buckets earlier: %d requests and %d retries before any, want 0, 0",
				cfg.Window, cfg.Buckets, at, ago, req, ret)
		}
		for range 10 {
			if err := p.Do(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		// 12 requests in all: 1.2 retries allowed, one granted.
		var runs [2]int
		for i := range runs {
			_ = p.Do(context.Background(), func(context.Context) error { runs[i]++; return errBoom })
		}
		if req, ret := b.Counts(tk.Now()); runs != [2]int{2, 1} || req != 12 || ret != 1 {
			t.Fatalf("window %v/%d, bucket %d, last used %d buckets earlier: attempts %v, Counts %d, %d; want [2 1], 12, 1",
				cfg.Window, cfg.Buckets, at, ago, runs, req, ret)
		}
	}
	if ago >= 0 {
		use(e - ago)
	}
	use(e)
}

// TestRatioBudgetMinRetriesAcrossEpochWraps: MinRetries grants that many
// retries per window, no more, at every reading around the epoch wraps
// (where a 20-bit epoch tag would leave a budget between 2^19 and 2^20
// buckets counting none of its grants, granting every retry).
func TestRatioBudgetMinRetriesAcrossEpochWraps(t *testing.T) {
	const w19, w20 = int64(1) << 19, int64(1) << 20
	for _, e := range []int64{0, w19 - 1, w19, w19 + 1, w19 + 2, w20 - 1, w20, w20 + 1, 7*w20 + w19 + 5} {
		b, _ := NewRatioBudget(RatioBudgetConfig{MinRetries: 2})
		tk := rampart.NewManualTicker(e * b.bucketNs)
		var grants []bool
		for range 3 {
			grants = append(grants, b.AllowRetry(tk.Now()))
		}
		if grants[0] != true || grants[1] != true || grants[2] != false {
			t.Fatalf("bucket %d: grants %v, want [true true false] (MinRetries 2, no request)", e, grants)
		}
	}
}

// TestRatioBudgetWindowSlidesBelowZero: a ticker's epoch is arbitrary, so
// a RatioBudget's clock may read below 0; its window slides there as it
// does above 0: 1000 requests at -200 s have left the window 100 s later
// (Counts is 0, 0 and no retry is granted on them), as at +200 s. (Every
// reading below 0 used to fall into bucket 0, so the window never moved.)
func TestRatioBudgetWindowSlidesBelowZero(t *testing.T) {
	for _, base := range []int64{200 * int64(time.Second), -200 * int64(time.Second)} {
		b, err := NewRatioBudget(RatioBudgetConfig{Ratio: 0.1, Window: 10 * time.Second, Buckets: 10})
		if err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			b.OnRequest(base)
		}
		if req, ret := b.Counts(base); req != 1000 || ret != 0 {
			t.Fatalf("base %d: Counts = (%d, %d), want (1000, 0)", base, req, ret)
		}
		later := base + 100*int64(time.Second) // ten windows later
		if req, ret := b.Counts(later); req != 0 || ret != 0 {
			t.Errorf("base %d: Counts 100 s later = (%d, %d), want (0, 0): the window did not slide", base, req, ret)
		}
		if b.AllowRetry(later) {
			t.Errorf("base %d: AllowRetry granted on requests that left the window 90 s ago", base)
		}
	}
}

// TestRatioBudgetSlotRoundsDown: epoch and slot round down for readings
// and epochs below 0 as above it (checked against exact arithmetic at
// both ends of int64, around 0 and around multiples of the divisor): the
// bucket is in [0, Buckets) and the lap tag is the lap modulo 2^40 in two's
// complement, so lap -1 is the tag just before lap 0's.
func TestRatioBudgetSlotRoundsDown(t *testing.T) {
	floor := func(a, d int64) (q, r *big.Int) {
		q, r = new(big.Int), new(big.Int)
		q.DivMod(big.NewInt(a), big.NewInt(d), r) // Euclidean: r in [0, d) for d > 0
		return q, r
	}
	mask := new(big.Int).SetUint64(rbTagMask)
	for _, c := range []struct {
		window  time.Duration
		buckets int
	}{{10, 10}, {time.Second, 10}, {10 * time.Second, 1}, {7 * time.Millisecond, 3}, {time.Hour, 1024}} {
		b, err := NewRatioBudget(RatioBudgetConfig{Window: c.window, Buckets: c.buckets})
		if err != nil {
			t.Fatal(err)
		}
		var xs []int64
		for _, m := range []int64{0, 1, b.bucketNs, b.n, b.n * b.bucketNs, 1 << 40, 5 << 40} {
			for _, d := range []int64{-1, 0, 1} {
				xs = append(xs, m+d, -m+d, 7*m+d, -7*m+d)
			}
		}
		xs = append(xs, math.MinInt64, math.MinInt64+1, math.MaxInt64, math.MaxInt64-1)
		for _, x := range xs {
			if q, _ := floor(x, b.bucketNs); b.epoch(x) != q.Int64() {
				t.Fatalf("window %v/%d: epoch(%d) = %d, want %v", c.window, c.buckets, x, b.epoch(x), q)
			}
			lap, r := floor(x, b.n)
			i, tag := b.slot(x)
			if i != 2*r.Int64() || tag != new(big.Int).And(lap, mask).Uint64() {
				t.Fatalf("window %v/%d: slot(%d) = (%d, %#x), want (%d, %#x)", c.window, c.buckets, x, i, tag, 2*r.Int64(), new(big.Int).And(lap, mask))
			}
		}
	}
}

// TestRatioBudgetCountsAtNegativeReadingsAndAcrossZero is
// TestRatioBudgetCountsAcrossEpochWraps below 0: a RatioBudget counts
// requests and retries, and applies its ratio, at readings around 0, at
// the negative 2^19 and 2^20 buckets, and around -2^39 and -2^40 laps of
// the ring (where the 40-bit lap tag wraps) with 1 ns buckets; on fresh
// budgets and on budgets last used some distance earlier, across 0 too
// (a use at bucket -5 then one at 5).
func TestRatioBudgetCountsAtNegativeReadingsAndAcrossZero(t *testing.T) {
	const w19, w20 = int64(1) << 19, int64(1) << 20
	const l39, l40 = int64(1) << 39, int64(1) << 40
	zero := []int64{-21, -20, -19, -11, -10, -9, -2, -1, 0, 1, 5, 9, 10, 11}
	wraps := append([]int64{-w19 - 1, -w19, -w19 + 1, -w20 - 1, -w20, -w20 + 1, -3*w20 - 1, -5*w20 - w19 - 1}, zero...)
	idle := []int64{10, 11, 15, 20, w19 - 1, w19, w19 + 1, w20 - 1, w20, w20 + 1, 3 * w20} // outside a window of 10 buckets
	laps := append([]int64(nil), zero...)                                                  // 10 buckets of 1 ns: the lap tag's own wraps
	for _, lap := range []int64{-1, -l39 + 1, -l39, -l39 - 1, -l40 + 1, -l40, -l40 - 1, -3*l40 - l39 - 1, -5*l40 - 2} {
		laps = append(laps, lap*10, lap*10+9)
	}
	for _, c := range []struct {
		window  time.Duration
		buckets int
		epochs  []int64 // readings, in buckets since the clock's zero
		idle    []int64 // distances, in buckets, to an earlier use
	}{
		{0, 0, wraps, idle},            // 10 s in 10 buckets of 1 s
		{time.Second, 10, wraps, idle}, // 100 ms buckets
		{10 * time.Second, 1, wraps, append([]int64{1, 2, 5}, idle...)},           // one bucket: the lap is the epoch
		{10, 10, laps, []int64{10, 11, 15, 19, 10*l39 - 1, 10 * l39, 10*l39 + 9}}, // 1 ns buckets
	} {
		cfg := RatioBudgetConfig{Ratio: 0.1, Window: c.window, Buckets: c.buckets}
		for _, e := range c.epochs {
			for _, ago := range append([]int64{-1}, c.idle...) {
				checkCountsAfterIdle(t, cfg, e, ago)
			}
		}
	}
}

// TestRatioBudgetStaleWriteAcrossZeroKeepsLiveBucket is
// TestRatioBudgetStaleWriteKeepsLiveBucket across 0 and below it: a write a
// window older than the live bucket, in the same slot, is dropped when the
// live bucket is in lap 0 and the stale write in lap -1 (tags 0 and
// 2^40-1: the wrap of the tag), and when both are below 0 (laps -1 and -2).
func TestRatioBudgetStaleWriteAcrossZeroKeepsLiveBucket(t *testing.T) {
	for _, live := range []int64{int64(500 * time.Millisecond), -int64(500 * time.Millisecond), int64(50 * time.Millisecond)} {
		b, err := NewRatioBudget(RatioBudgetConfig{Ratio: 0.5, Buckets: 10, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			b.OnRequest(live)
		}
		b.OnRequest(live - int64(time.Second)) // the same slot, one lap earlier: outside every current window
		if req, _ := b.Counts(live); req != 100 {
			t.Fatalf("live bucket at %d: the window holds %d requests after a stale write, want 100", live, req)
		}
		if req, _ := b.Counts(live - int64(time.Second)); req != 0 {
			t.Fatalf("live bucket at %d: the stale write's window holds %d requests, want 0 (its lap's tag was never written)", live, req)
		}
	}
}

// TestBudgetsUnderRandomFailures checks the figures of the package doc
// ("Choosing a budget"): with MaxAttempts 3 and attempts failing at random
// (a seeded generator, 100 000 calls 1 ms apart), the default A6 bucket
// grants most retries well below 1/11 of attempts failing, few at 10 %, and
// none at 20 %; a RatioBudget of 0.25 grants them all at 20 % (0.24 wanted
// per call) and caps them at 0.25 per call at 30 %; a bucket with
// TokenRatio 0.5 (cut-off 1/3) grants most of them at 20 %.
func TestBudgetsUnderRandomFailures(t *testing.T) {
	for _, c := range []struct {
		name     string
		budget   func() rampart.Budget
		p        float64 // failure rate of an attempt
		min, max float64 // retries granted per call
	}{
		{"A6 defaults at 5 %", defaultBucket, 0.05, 0.0525 * 0.95, 0.0525},
		{"A6 defaults at 10 %", defaultBucket, 0.10, 0, 0.11 / 3},
		{"A6 defaults at 20 %", defaultBucket, 0.20, 0, 0.001},
		{"ratio 0.25 at 20 %", ratioBudget(0.25), 0.20, 0.24 * 0.98, 0.24 * 1.02},
		{"ratio 0.25 at 30 %", ratioBudget(0.25), 0.30, 0.245, 0.25},
		{"ratio 0.1 at 30 %", ratioBudget(0.1), 0.30, 0.098, 0.1},
		{"token ratio 0.5 at 20 %", func() rampart.Budget {
			b, _ := NewTokenBucket(TokenBucketConfig{TokenRatio: 0.5})
			return b
		}, 0.20, 0.24 * 0.9, 0.24 * 1.02},
	} {
		tk := rampart.NewManualTicker(0)
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, Budget: c.budget(), Ticker: tk})
		r := rand.New(rand.NewPCG(1, 2))
		const calls = 100_000
		attempts := 0
		fn := func(context.Context) error {
			attempts++
			if r.Float64() < c.p {
				return errBoom
			}
			return nil
		}
		for range calls {
			_ = p.Do(context.Background(), fn)
			tk.Advance(time.Millisecond)
		}
		if got := float64(attempts-calls) / calls; got < c.min || got > c.max {
			t.Errorf("%s: %.4f retries per call, want [%.4f, %.4f]", c.name, got, c.min, c.max)
		}
	}
}

func defaultBucket() rampart.Budget {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	return b
}

func ratioBudget(ratio float64) func() rampart.Budget {
	return func() rampart.Budget {
		b, _ := NewRatioBudget(RatioBudgetConfig{Ratio: ratio})
		return b
	}
}

// TestTokenBucketAtItsBounds: the bucket's one word holds its count in
// milli-tokens, at most 1e12 (MaxTokens 1e9), far from any wrap of the
// int64; at its largest size, and at its smallest (0.001 tokens), the count
// stays in [0, MaxTokens] and the threshold is exact (retries allowed while
// the count is above MaxTokens/2).
func TestTokenBucketAtItsBounds(t *testing.T) {
	big, err := NewTokenBucket(TokenBucketConfig{MaxTokens: 1e9, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	big.OnSuccess(0) // full: stays full
	if big.Tokens() != 1e9 || big.tokens.Load() != 1e12 {
		t.Fatalf("full bucket: %v tokens (word %d)", big.Tokens(), big.tokens.Load())
	}
	big.tokens.Store(big.half + milli) // one token above the threshold
	if !big.AllowRetry(0) {
		t.Fatal("retry refused one token above half")
	}
	big.OnFailure(0)
	if big.AllowRetry(0) || big.tokens.Load() != big.half {
		t.Fatalf("at half: AllowRetry %v, word %d", big.AllowRetry(0), big.tokens.Load())
	}
	big.tokens.Store(milli / 2) // half a token: a failure empties it, no lower
	big.OnFailure(0)
	big.OnFailure(0)
	if big.tokens.Load() != 0 || big.Tokens() != 0 {
		t.Fatalf("empty bucket: word %d", big.tokens.Load())
	}
	tiny, err := NewTokenBucket(TokenBucketConfig{MaxTokens: 0.001, TokenRatio: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	tiny.OnFailure(0)
	if tiny.tokens.Load() != 0 || tiny.AllowRetry(0) {
		t.Fatalf("tiny bucket after a failure: word %d", tiny.tokens.Load())
	}
	tiny.OnSuccess(0)
	tiny.OnSuccess(0)
	if tiny.tokens.Load() != 1 || !tiny.AllowRetry(0) {
		t.Fatalf("tiny bucket refilled: word %d, AllowRetry %v", tiny.tokens.Load(), tiny.AllowRetry(0))
	}
}

// TestTokenBucketBytes gates the heap bytes of one live TokenBucket on
// 64-byte lines: one line in the default layout (the count and the three
// constants, filled to the line), 32 B Compact. Was 160 B, the count
// padded on lines of its own (pad.Int64) and the constants after it.
func TestTokenBucketBytes(t *testing.T) {
	if pad.LineSize != 64 {
		t.Skipf("the figures are for 64-byte lines, not %d", pad.LineSize)
	}
	for _, c := range []struct {
		compact bool
		want    int64
	}{{false, 64}, {true, 32}} {
		testkit.WantBytes(t, fmt.Sprintf("Compact %v", c.compact), c.want, func() any {
			b, err := NewTokenBucket(TokenBucketConfig{Compact: c.compact})
			if err != nil {
				t.Fatal(err)
			}
			return b
		})
	}
}

// TestTokenBucketLayout: in the default layout the allocator places every
// TokenBucket at the start of a block of whole cache lines, so the line of
// the token count holds nothing but the bucket.
func TestTokenBucketLayout(t *testing.T) {
	if unsafe.Sizeof(paddedBucket{})%pad.LineSize != 0 {
		t.Fatalf("a padded TokenBucket is %d B, not whole lines", unsafe.Sizeof(paddedBucket{}))
	}
	for range 100 {
		b, err := NewTokenBucket(TokenBucketConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if a := uintptr(unsafe.Pointer(b)); a%pad.LineSize != 0 {
			t.Fatalf("a TokenBucket at %#x: not on a line boundary", a)
		}
	}
}
