package retry

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// A Ratio below 0.5 ppm is accepted by NewRatioBudget, then rounded to 0
// ppm: no retry is ever granted, however many requests the window holds
// (TokenBucket rejects the same mistake: values under its 0.001 precision).
// Here 3M requests at Ratio 4e-7 allow 1.2 retries, and none is granted.
func TestReview4RatioBudgetTinyRatioAccepted(t *testing.T) {
	b, err := NewRatioBudget(RatioBudgetConfig{Ratio: 4e-7, Buckets: 1, Window: time.Second})
	if err != nil {
		return // rejecting it at New is a fix too
	}
	b.words[0].Store(3_000_000) // lap 0, 3M requests (and no retry)
	if req, _ := b.Counts(0); req != 3_000_000 {
		t.Fatalf("requests %d", req)
	}
	if !b.AllowRetry(0) {
		t.Fatalf("Ratio 4e-7 × 3M requests = 1.2 retries allowed, none granted (ratioPPM %d)", b.ratioPPM)
	}
}

// A writer whose now is a window (or more) older than the live bucket's
// epoch maps to the same slot, finds a tag that is not its own, takes the
// slot for stale and overwrites it: the live bucket's requests vanish, and
// the budget refuses retries it owes. Under overload (when budgets matter)
// a goroutine preempted for one window between its clock read and
// OnRequest, or a hedger passing an older reading, does this.
func TestReview4RatioBudgetStaleWriteErasesLiveBucket(t *testing.T) {
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

// Guard: every backoff kind stays in [0, MaxDelay] and never panics at the
// extremes (MaxDelay = MaxInt64, huge attempt numbers, huge prev, a
// fractional multiplier near 1 and a huge whole one).
func TestReview4BackoffSaturation(t *testing.T) {
	for kind := range numBackoffs {
		for _, mult := range []float64{1, 1.0000001, 1.5, 2, 3, 1e300} {
			for _, maxD := range []time.Duration{time.Second, math.MaxInt64} {
				p := mustNew(t, Config{Backoff: kind, BaseDelay: time.Nanosecond, MaxDelay: maxD, Multiplier: mult,
					Increment: math.MaxInt64 / 2, MaxAttempts: math.MaxInt})
				for _, n := range []int{1, 2, 62, 63, 64, 1000, math.MaxInt32, math.MaxInt - 1} {
					for _, prev := range []int64{0, 1, int64(maxD), math.MaxInt64} {
						d := p.bo.delay(n, prev)
						if d < 0 || d > int64(maxD) {
							t.Fatalf("%v mult %v max %v n %d prev %d: delay %d", kind, mult, maxD, n, prev, d)
						}
					}
				}
			}
		}
	}
	// Exponential reaches exactly MaxDelay and stays there.
	p := mustNew(t, Config{Backoff: Exponential, BaseDelay: 3, MaxDelay: math.MaxInt64})
	if d := p.bo.delay(1000, 0); d != math.MaxInt64 {
		t.Fatalf("exp(1000) = %d", d)
	}
	if d := p.bo.delay(3, 0); d != 12 {
		t.Fatalf("exp(3) = %d, want 12", d)
	}
}

// Decide computes at = SatAdd(now, delay) and checks at-start >
// MaxDuration: near MaxInt64 (a manual ticker's legal reading) at
// saturates, so a delay of MaxInt64/2 looks like 11 ns and is granted
// although it ends ~146 years after the MaxDuration of one hour.
func TestReview4DecideMaxDurationSaturatedAt(t *testing.T) {
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: math.MaxInt64 / 2, MaxDelay: math.MaxInt64 / 2,
		MaxDuration: time.Hour, MaxAttempts: 5})
	now := int64(math.MaxInt64 - 10)
	if _, stop := p.Decide(1, errBoom, now-1, now, 0, 0); stop != MaxDuration {
		t.Fatalf("stop %v, want max duration", stop)
	}
}

// Guard: the deadline check at a reading near MaxInt64 saturates the
// conservative way (the retry is refused, never granted by a wrap).
func TestReview4DecideDeadlineNearMaxInt64(t *testing.T) {
	now := int64(math.MaxInt64 - 10)
	q := mustNew(t, Config{Backoff: Constant, BaseDelay: math.MaxInt64 / 2, MaxDelay: math.MaxInt64 / 2, MaxAttempts: 5})
	if _, stop := q.Decide(1, errBoom, 0, now, math.MaxInt64, 0); stop != Deadline {
		t.Fatalf("stop %v, want deadline", stop)
	}
}

type review4UserErr struct{ code int }

func (e *review4UserErr) Error() string { return "user" }

// Guard: the give-up error's Is/As chain for each reason: ErrExhausted
// always, the user's error through Unwrap (errors.As reaches its type),
// ErrBudget and rampart.ErrRejected only for a budget refusal, the
// context's error only for Canceled.
func TestReview4ExhaustedErrorChains(t *testing.T) {
	user := &review4UserErr{7}
	wrapped := WithRetryAfter(user, -1) // negative hint: ignored
	p := mustNew(t, Config{Name: "db", Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 2})
	err := p.Do(context.Background(), func(context.Context) error { return wrapped })
	var ue *review4UserErr
	var ee *ExhaustedError
	if !errors.Is(err, ErrExhausted) || !errors.Is(err, user) || !errors.As(err, &ue) || ue != user ||
		!errors.As(err, &ee) || ee.Reason() != MaxAttempts || ee.Attempts() != 2 || ee.Last() != wrapped {
		t.Fatalf("max attempts: %v", err)
	}
	if errors.Is(err, ErrBudget) || errors.Is(err, rampart.ErrRejected) || errors.Is(err, context.Canceled) {
		t.Fatalf("max attempts matches a budget or context sentinel: %v", err)
	}
	if got := err.Error(); got != `retry "db": gave up after 2 attempts (max attempts): user` {
		t.Fatalf("message %q", got)
	}

	b, _ := NewTokenBucket(TokenBucketConfig{MaxTokens: 2})
	pb := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, Budget: b, MaxAttempts: 10})
	err = pb.Do(context.Background(), func(context.Context) error { return user })
	if !errors.Is(err, ErrBudget) || !errors.Is(err, rampart.ErrRejected) || !errors.Is(err, ErrExhausted) ||
		!errors.Is(err, user) || !errors.As(err, &ee) || ee.Reason() != BudgetRefused {
		t.Fatalf("budget: %v", err)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	calls := 0
	err = p.Do(ctx, func(context.Context) error { calls++; cancel(errors.New("why")); return user })
	if calls != 1 || !errors.Is(err, context.Canceled) || !errors.Is(err, ErrExhausted) || !errors.Is(err, user) ||
		!errors.As(err, &ee) || ee.Reason() != Canceled {
		t.Fatalf("canceled: %v after %d calls", err, calls)
	}
}

// Guard: CallIf retries an unwanted result, returns the last result with
// an ExhaustedError whose last error is ErrRetryResult, and a wanted
// result on a retry is returned with nil; the budget sees one failure per
// rejected result and one success.
func TestReview4CallIfRetryResult(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 3, Budget: b})
	n := 0
	v, err := CallIf(context.Background(), p, func(context.Context) (int, error) { n++; return 500 + n, nil },
		func(v int) bool { return v >= 500 })
	var ee *ExhaustedError
	if v != 503 || n != 3 || !errors.Is(err, ErrRetryResult) || !errors.As(err, &ee) || ee.Reason() != MaxAttempts {
		t.Fatalf("got %d, %v after %d calls", v, err, n)
	}
	if b.Tokens() != 7 {
		t.Fatalf("tokens %v after 3 rejected results, want 7", b.Tokens())
	}
	n = 0
	v, err = CallIf(context.Background(), p, func(context.Context) (int, error) {
		n++
		if n == 1 {
			return 503, nil
		}
		return 200, nil
	}, func(v int) bool { return v == 503 })
	if v != 200 || err != nil || n != 2 {
		t.Fatalf("got %d, %v after %d calls", v, err, n)
	}
	if got := b.Tokens(); math.Abs(got-6.1) > 1e-9 {
		t.Fatalf("tokens %v, want 6.1", got)
	}
}

// Guard: under concurrent OnFailure / OnSuccess the token count read by
// Tokens never leaves [0, MaxTokens], and after the storm a run of
// failures alone drains it to exactly 0 and successes alone fill it to
// exactly MaxTokens.
func TestReview4TokenBucketConcurrentBounds(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{MaxTokens: 3, TokenRatio: 0.7})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				if (i+g)%3 == 0 {
					b.OnSuccess(0)
				} else {
					b.OnFailure(0)
				}
				if tk := b.Tokens(); tk < 0 || tk > 3 {
					bad.Add(1)
				}
				_ = b.AllowRetry(0)
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d out-of-bounds readings", bad.Load())
	}
	for range 10 {
		b.OnFailure(0)
	}
	if b.Tokens() != 0 || b.tokens.Load() != 0 || b.AllowRetry(0) {
		t.Fatalf("after failures: %v (raw %d)", b.Tokens(), b.tokens.Load())
	}
	for range 10 {
		b.OnSuccess(0)
	}
	if b.Tokens() != 3 || b.tokens.Load() != 3000 || !b.AllowRetry(0) {
		t.Fatalf("after successes: %v (raw %d)", b.Tokens(), b.tokens.Load())
	}
}

// Guard: the documented concurrency bound of RatioBudget: granted retries
// ≤ Ratio × requests + MinRetries + the number of concurrent checkers.
func TestReview4RatioBudgetConcurrentBound(t *testing.T) {
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
