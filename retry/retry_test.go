package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

var errBoom = errors.New("boom")

type codeError struct{ code int }

func (e *codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestNewValidation(t *testing.T) {
	for _, c := range []struct {
		cfg   Config
		field string // the ConfigError's Field
	}{
		{Config{MaxAttempts: -1}, "MaxAttempts"},
		{Config{MaxDuration: -1}, "MaxDuration"},
		{Config{BaseDelay: -time.Second}, "BaseDelay"},
		{Config{MaxDelay: -1}, "MaxDelay"},
		{Config{Increment: -1}, "Increment"},
		{Config{Multiplier: 0.5}, "Multiplier"},
		{Config{Multiplier: math.Inf(1)}, "Multiplier"},
		{Config{Multiplier: math.NaN()}, "Multiplier"},
		{Config{BaseDelay: time.Second, MaxDelay: time.Millisecond}, "MaxDelay"},
		{Config{Backoff: numBackoffs}, "Backoff"},
		{Config{Budget: (*TokenBucket)(nil)}, "Budget"},
		{Config{Budget: (*RatioBudget)(nil)}, "Budget"},
	} {
		p, err := New(c.cfg)
		if p != nil {
			t.Errorf("New(%+v) = %v, %v; want no policy", c.cfg, p, err)
		}
		testkit.RequireConfigError(t, err, "retry", c.field)
		if !errors.Is(err, rampart.ErrInvalidConfig) || err.Error() == "" {
			t.Errorf("New(%+v): %q does not match ErrInvalidConfig or is empty", c.cfg, err)
		}
	}
	// A typed-nil budget is named in the error, not met as a panic in the
	// first call.
	if _, err := New(Config{Budget: (*TokenBucket)(nil)}); err == nil || !strings.Contains(err.Error(), "Budget") || !strings.Contains(err.Error(), "*retry.TokenBucket") {
		t.Errorf("nil *TokenBucket: %v", err)
	}
	p := mustNew(t, Config{})
	if p.MaxAttempts() != 3 || p.cur.Load().bo.base != int64(100*time.Millisecond) || p.cur.Load().bo.max != int64(10*time.Second) || p.cur.Load().bo.mult != 2 || p.cur.Load().kind != FullJitter {
		t.Fatalf("defaults: %+v", p.cur.Load().bo)
	}
	if p := mustNew(t, Config{BaseDelay: time.Minute}); p.cur.Load().bo.max != int64(time.Minute) {
		t.Fatalf("MaxDelay default below BaseDelay: %d", p.cur.Load().bo.max)
	}
	if p := mustNew(t, Config{Backoff: DecorrelatedJitter}); p.cur.Load().bo.mult != 3 {
		t.Fatalf("decorrelated default multiplier %v", p.cur.Load().bo.mult)
	}
}

// TestDoExactDelays checks, under testing/synctest's fake clock, that the
// attempts start exactly at the backoff's instants.
func TestDoExactDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker()
		var retried []time.Duration
		p := mustNew(t, Config{Backoff: Exponential, BaseDelay: 100 * time.Millisecond, MaxAttempts: 5, Ticker: tk,
			OnRetry: func(attempt int, d time.Duration, err error) { retried = append(retried, d) }})
		var at []time.Duration
		t0 := time.Now()
		err := p.Do(context.Background(), func(context.Context) error {
			at = append(at, time.Since(t0))
			return errBoom
		})
		want := []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond, 1500 * time.Millisecond}
		if fmt.Sprint(at) != fmt.Sprint(want) {
			t.Fatalf("attempts at %v, want %v", at, want)
		}
		if fmt.Sprint(retried) != "[100ms 200ms 400ms 800ms]" {
			t.Fatalf("OnRetry delays %v", retried)
		}
		var ex *ExhaustedError
		if !errors.As(err, &ex) || ex.Attempts() != 5 || ex.Reason() != MaxAttempts || !errors.Is(err, errBoom) || !errors.Is(err, ErrExhausted) {
			t.Fatalf("err = %v", err)
		}
		if errors.Is(err, ErrBudget) || errors.Is(err, rampart.ErrRejected) {
			t.Fatalf("attempt exhaustion matched a budget sentinel: %v", err)
		}
		if st := p.Stats(); st.Retries != 4 || st.GiveUps != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

func TestDoSuccessAfterRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Second, MaxAttempts: 5, Ticker: rampart.NewNanoTicker()})
		n := 0
		t0 := time.Now()
		err := p.Do(context.Background(), func(context.Context) error {
			if n++; n < 3 {
				return errBoom
			}
			return nil
		})
		if err != nil || n != 3 || time.Since(t0) != 2*time.Second {
			t.Fatalf("err=%v n=%d elapsed=%v", err, n, time.Since(t0))
		}
	})
}

func TestGiveUpErrorKeepsUserError(t *testing.T) {
	p := mustNew(t, Config{MaxAttempts: 1, Name: "db"})
	user := &codeError{503}
	err := p.Do(context.Background(), func(context.Context) error { return fmt.Errorf("get: %w", user) })
	var ce *codeError
	if !errors.As(err, &ce) || ce != user || !errors.Is(err, ErrExhausted) {
		t.Fatalf("err = %v", err)
	}
	if got := err.Error(); got != `retry "db": gave up after 1 attempt (max attempts): get: code 503` {
		t.Fatalf("message %q", got)
	}
}

// TestGiveUpMessageReadsOnce: a give-up error's message names the attempts,
// one reason (the context's error when the context ended the retries) and
// the last error, each once; errors.Is and errors.As reach the same errors
// as before.
func TestGiveUpMessageReadsOnce(t *testing.T) {
	p := mustNew(t, Config{Name: "db"})
	anon := mustNew(t, Config{})
	for _, c := range []struct {
		p           *Policy
		reason      Stop
		attempts    int
		last, cause error
		want        string
	}{
		{p, MaxAttempts, 3, errBoom, nil, `retry "db": gave up after 3 attempts (max attempts): boom`},
		{p, BudgetRefused, 1, errBoom, nil, `retry "db": gave up after 1 attempt (budget refused): boom`},
		{p, Canceled, 2, errBoom, context.Canceled, `retry "db": gave up after 2 attempts (context canceled): boom`},
		{anon, Canceled, 3, fmt.Errorf("get: %w", context.DeadlineExceeded), context.DeadlineExceeded,
			`retry: gave up after 3 attempts (context deadline exceeded): get: context deadline exceeded`},
		// The last error is the context's own (a callee that returns
		// ctx.Err(), retried by a custom classifier): said once.
		{anon, Canceled, 3, context.DeadlineExceeded, context.DeadlineExceeded, `retry: gave up after 3 attempts (context deadline exceeded)`},
	} {
		err := c.p.GiveUp(c.reason, c.attempts, c.last, c.cause)
		if got := err.Error(); got != c.want {
			t.Errorf("message %q, want %q", got, c.want)
		}
		ex, ok := errors.AsType[*ExhaustedError](err)
		if !ok || !errors.Is(err, ErrExhausted) || !errors.Is(err, c.last) || ex.Last() != c.last || ex.Reason() != c.reason {
			t.Errorf("%q: errors.Is/As lost the give-up or the last error", c.want)
		}
		if c.cause != nil && !errors.Is(err, c.cause) {
			t.Errorf("%q: does not match the context's error", c.want)
		}
		if budget := errors.Is(err, ErrBudget) && errors.Is(err, rampart.ErrRejected); budget != (c.reason == BudgetRefused) {
			t.Errorf("%q: matches the budget sentinels: %v", c.want, budget)
		}
	}
}

// TestExhaustedErrorChains: the give-up error's Is/As chain for each
// reason: ErrExhausted always, the user's error through Unwrap (errors.As
// reaches its type, a negative retry-after hint is ignored), ErrBudget and
// rampart.ErrRejected only for a budget refusal, the context's error only
// for Canceled.
func TestExhaustedErrorChains(t *testing.T) {
	user := &codeError{7}
	wrapped := WithRetryAfter(user, -1) // negative hint: ignored
	p := mustNew(t, Config{Name: "db", Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 2})
	err := p.Do(context.Background(), func(context.Context) error { return wrapped })
	var ue *codeError
	var ee *ExhaustedError
	if !errors.Is(err, ErrExhausted) || !errors.Is(err, user) || !errors.As(err, &ue) || ue != user ||
		!errors.As(err, &ee) || ee.Reason() != MaxAttempts || ee.Attempts() != 2 || ee.Last() != wrapped {
		t.Fatalf("max attempts: %v", err)
	}
	if errors.Is(err, ErrBudget) || errors.Is(err, rampart.ErrRejected) || errors.Is(err, context.Canceled) {
		t.Fatalf("max attempts matches a budget or context sentinel: %v", err)
	}
	if got := err.Error(); got != `retry "db": gave up after 2 attempts (max attempts): code 7` {
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

// TestPermanentAndCallerContextErrorsNotRetried: a Permanent error, and the
// caller's own context error once that context is done, come back as they
// are after one attempt; a context error while the caller is live (the
// callee's own deadline) is retried like any other error.
func TestPermanentAndCallerContextErrorsNotRetried(t *testing.T) {
	p := mustNew(t, Config{MaxAttempts: 10, BaseDelay: time.Nanosecond})
	user := errors.New("bad request")
	n := 0
	err := p.Do(context.Background(), func(context.Context) error { n++; return Permanent(user) })
	if err != user || n != 1 {
		t.Fatalf("permanent: err=%v n=%d", err, n)
	}
	wrapped := fmt.Errorf("x: %w", Permanent(user))
	n = 0
	err = p.Do(context.Background(), func(context.Context) error { n++; return wrapped })
	if err != wrapped || n != 1 || !IsPermanent(err) {
		t.Fatalf("wrapped permanent: err=%v n=%d", err, n)
	}
	for _, wrap := range []bool{false, true} {
		n = 0
		var ce error
		ctx, cancel := context.WithCancel(context.Background())
		err = p.Do(ctx, func(ctx context.Context) error {
			n++
			cancel() // the caller gives up during the attempt
			ce = ctx.Err()
			if wrap {
				ce = fmt.Errorf("op: %w", ce)
			}
			return ce
		})
		if err != ce || n != 1 {
			t.Fatalf("caller's context error (wrapped %v): err=%v n=%d", wrap, err, n)
		}
	}
	for _, ce := range []error{context.Canceled, fmt.Errorf("op: %w", context.DeadlineExceeded)} {
		n = 0
		err = p.Do(context.Background(), func(context.Context) error { n++; return ce })
		if !errors.Is(err, ErrExhausted) || !errors.Is(err, ce) || n != 10 {
			t.Fatalf("context error with a live caller: err=%v n=%d, want 10 attempts", err, n)
		}
	}
	if Permanent(nil) != nil || WithRetryAfter(nil, time.Second) != nil {
		t.Fatal("nil wrappers")
	}
	// A custom classifier cannot make a Permanent error retryable.
	p2 := mustNew(t, Config{MaxAttempts: 10, BaseDelay: time.Nanosecond, ShouldRetry: func(error) bool { return true }})
	n = 0
	if err = p2.Do(context.Background(), func(context.Context) error { n++; return Permanent(user) }); n != 1 || err != user {
		t.Fatalf("classifier overrode Permanent: n=%d", n)
	}
	// A classifier that refuses.
	p3 := mustNew(t, Config{MaxAttempts: 10, ShouldRetry: func(err error) bool { return !errors.Is(err, user) }})
	n = 0
	if err = p3.Do(context.Background(), func(context.Context) error { n++; return user }); n != 1 || err != user {
		t.Fatalf("classifier: n=%d err=%v", n, err)
	}
}

// TestNotRetryableErrorsUnchangedAndUncounted: a non-retryable error (a
// Permanent one, or the caller's own context error once that context is
// done, by cancellation or by its deadline) comes back unchanged (the very
// same value, or the error under an outermost Permanent marker) after one
// attempt, from Do and from Call (with the attempt's value), and touches
// neither the budget's tokens (it is no failure of the dependency for A6)
// nor the policy's counters.
func TestNotRetryableErrorsUnchangedAndUncounted(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	p := mustNew(t, Config{Budget: b, Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 5})
	user := errors.New("bad request")
	// Each fn ends its call's context (or not) and returns its error.
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, cancel func()) error
		want func(ctx context.Context) error
	}{
		{"permanent", func(context.Context, func()) error { return Permanent(user) },
			func(context.Context) error { return user }},
		{"caller canceled", func(ctx context.Context, cancel func()) error { cancel(); return ctx.Err() },
			context.Context.Err},
		{"caller's deadline", func(ctx context.Context, _ func()) error { <-ctx.Done(); return ctx.Err() },
			context.Context.Err},
	} {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			calls := 0
			err := p.Do(ctx, func(ctx context.Context) error { calls++; return tc.fn(ctx, cancel) })
			if want := tc.want(ctx); err != want || calls != 1 {
				t.Fatalf("%s: Do = %v after %d calls, want %v after 1", tc.name, err, calls, want)
			}
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			v, err := Call(ctx, p, func(ctx context.Context) (int, error) { return 7, tc.fn(ctx, cancel) })
			if want := tc.want(ctx); err != want || v != 7 {
				t.Fatalf("%s: Call = %d, %v; want %v", tc.name, v, err, want)
			}
		})
	}
	if b.Tokens() != 10 {
		t.Fatalf("tokens %v, want 10: non-retryable errors are not failures for A6", b.Tokens())
	}
	if st := p.Stats(); st.GiveUps != 0 || st.Retries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestNeverSleepsPastDeadline: with a deadline at 250 ms and 100 ms delays,
// the third retry would start at 300 ms, so the policy gives up at 200 ms
// without sleeping.
func TestNeverSleepsPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: 100 * time.Millisecond, MaxAttempts: math.MaxInt, Ticker: rampart.NewNanoTicker()})
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		n := 0
		err := p.Do(ctx, func(context.Context) error { n++; return errBoom })
		var ex *ExhaustedError
		if !errors.As(err, &ex) || ex.Reason() != Deadline || n != 3 || time.Since(t0) != 200*time.Millisecond {
			t.Fatalf("err=%v n=%d elapsed=%v", err, n, time.Since(t0))
		}
		if ctx.Err() != nil {
			t.Fatal("returned after the deadline")
		}
	})
}

func TestMaxDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: 100 * time.Millisecond, MaxAttempts: math.MaxInt,
			MaxDuration: 350 * time.Millisecond, Ticker: rampart.NewNanoTicker()})
		t0 := time.Now()
		n := 0
		err := p.Do(context.Background(), func(context.Context) error { n++; return errBoom })
		var ex *ExhaustedError
		if !errors.As(err, &ex) || ex.Reason() != MaxDuration || n != 4 || time.Since(t0) != 300*time.Millisecond {
			t.Fatalf("err=%v n=%d elapsed=%v", err, n, time.Since(t0))
		}
	})
}

func TestCancelStopsSleepAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Hour, MaxDelay: time.Hour, Ticker: rampart.NewNanoTicker()})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		t0 := time.Now()
		err := p.Do(ctx, func(context.Context) error { return errBoom })
		if time.Since(t0) != 50*time.Millisecond || !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) || !errors.Is(err, ErrExhausted) {
			t.Fatalf("err=%v elapsed=%v", err, time.Since(t0))
		}
		// Already canceled: Sleep returns at once.
		if err := p.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep on a canceled ctx: %v", err)
		}
		if err := p.Sleep(context.Background(), time.Millisecond); err != nil || time.Since(t0) != 51*time.Millisecond {
			t.Fatalf("Sleep without Done: %v", err)
		}
	})
}

func TestRetryAfterHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: 10 * time.Millisecond, MaxDelay: 5 * time.Second, MaxAttempts: 5, Ticker: rampart.NewNanoTicker()})
		var at []time.Duration
		t0 := time.Now()
		hints := []time.Duration{2 * time.Second, -1, 6 * time.Second}
		err := p.Do(context.Background(), func(context.Context) error {
			at = append(at, time.Since(t0))
			return fmt.Errorf("wrapped: %w", WithRetryAfter(errBoom, hints[len(at)-1]))
		})
		var ex *ExhaustedError
		if !errors.As(err, &ex) || ex.Reason() != HintTooLong || fmt.Sprint(at) != "[0s 2s 2.01s]" {
			t.Fatalf("err=%v at=%v", err, at)
		}
		var h RetryAfterHint
		if !errors.As(err, &h) || h.RetryAfter() != 6*time.Second {
			t.Fatal("hint not reachable")
		}
	})
}

// TestDecideHintBoundaries: a retry-after hint of exactly MaxDelay is
// honoured, one nanosecond more gives up with HintTooLong, and a hint whose
// sleep would end exactly at the deadline gives up with Deadline (one that
// ends a nanosecond before it is honoured).
func TestDecideHintBoundaries(t *testing.T) {
	p := mustNew(t, Config{BaseDelay: time.Millisecond, MaxDelay: time.Second, MaxAttempts: 3})
	d, stop := p.Decide(1, WithRetryAfter(errBoom, time.Second), 0, 100, 0, 0)
	if stop != Continue || d != time.Second {
		t.Fatalf("hint = MaxDelay: %v %v", d, stop)
	}
	if _, stop = p.Decide(1, WithRetryAfter(errBoom, time.Second+1), 0, 100, 0, 0); stop != HintTooLong {
		t.Fatalf("hint > MaxDelay: %v", stop)
	}
	if _, stop = p.Decide(1, WithRetryAfter(errBoom, 50), 0, 100, 150, 0); stop != Deadline {
		t.Fatalf("hint ending at the deadline: %v", stop)
	}
	if d, stop = p.Decide(1, WithRetryAfter(errBoom, 49), 0, 100, 150, 0); stop != Continue || d != 49 {
		t.Fatalf("hint ending before the deadline: %v %v", d, stop)
	}
}

// TestCallIfRetriesOnResult: CallIf retries an unwanted result and returns
// a wanted one with nil; when every result is unwanted it returns the last
// one with an ExhaustedError (MaxAttempts) whose last error is
// ErrRetryResult; Call returns fn's value with its error. The budget sees
// one failure per rejected result and one success per wanted one.
func TestCallIfRetriesOnResult(t *testing.T) {
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 5})
	codes := []int{503, 503, 200}
	i := 0
	v, err := CallIf(context.Background(), p, func(context.Context) (int, error) { i++; return codes[i-1], nil },
		func(code int) bool { return code >= 500 })
	if v != 200 || err != nil || i != 3 {
		t.Fatalf("v=%d err=%v i=%d", v, err, i)
	}
	i = 0
	p2 := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 2})
	v, err = CallIf(context.Background(), p2, func(context.Context) (int, error) { i++; return 503, nil },
		func(code int) bool { return code >= 500 })
	if v != 503 || !errors.Is(err, ErrExhausted) || !errors.Is(err, ErrRetryResult) || i != 2 {
		t.Fatalf("v=%d err=%v i=%d", v, err, i)
	}
	s, err := Call(context.Background(), p, func(context.Context) (string, error) { return "ok", nil })
	if s != "ok" || err != nil {
		t.Fatal(s, err)
	}
	i = 0
	s, err = Call(context.Background(), p2, func(context.Context) (string, error) { i++; return fmt.Sprint(i), errBoom })
	if s != "2" || !errors.Is(err, errBoom) {
		t.Fatal(s, err)
	}

	// With a budget: the give-up's reason, and the tokens.
	b, _ := NewTokenBucket(TokenBucketConfig{})
	pb := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 3, Budget: b})
	n := 0
	v, err = CallIf(context.Background(), pb, func(context.Context) (int, error) { n++; return 500 + n, nil },
		func(v int) bool { return v >= 500 })
	var ee *ExhaustedError
	if v != 503 || n != 3 || !errors.Is(err, ErrRetryResult) || !errors.As(err, &ee) || ee.Reason() != MaxAttempts {
		t.Fatalf("got %d, %v after %d calls", v, err, n)
	}
	if b.Tokens() != 7 {
		t.Fatalf("tokens %v after 3 rejected results, want 7", b.Tokens())
	}
	n = 0
	v, err = CallIf(context.Background(), pb, func(context.Context) (int, error) {
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

func TestListenersAndPanics(t *testing.T) {
	var retries, giveUps, refused atomic.Int64
	var lastReason atomic.Int64
	b, _ := NewTokenBucket(TokenBucketConfig{MaxTokens: 2, TokenRatio: 1})
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 10, Budget: b,
		OnRetry:         func(int, time.Duration, error) { retries.Add(1); panic("listener") },
		OnGiveUp:        func(_ int, r Stop, _ error) { giveUps.Add(1); lastReason.Store(int64(r)) },
		OnBudgetRefused: func(int, error) { refused.Add(1) },
	})
	err := p.Do(context.Background(), func(context.Context) error { return errBoom })
	// Tokens: 2 -> 1 (first failure) -> retry refused since 1 > 1 is false.
	if !errors.Is(err, ErrBudget) || !errors.Is(err, rampart.ErrRejected) || !errors.Is(err, errBoom) {
		t.Fatalf("err=%v", err)
	}
	if retries.Load() != 0 || refused.Load() != 1 || giveUps.Load() != 1 || Stop(lastReason.Load()) != BudgetRefused {
		t.Fatalf("retries=%d refused=%d giveUps=%d", retries.Load(), refused.Load(), giveUps.Load())
	}
	b2, _ := NewTokenBucket(TokenBucketConfig{})
	p2 := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Nanosecond, MaxAttempts: 3, Budget: b2,
		OnRetry: func(int, time.Duration, error) { retries.Add(1); panic("listener") }})
	_ = p2.Do(context.Background(), func(context.Context) error { return errBoom })
	if retries.Load() != 2 || p2.Stats().ListenerPanics != 2 {
		t.Fatalf("retries=%d stats=%+v", retries.Load(), p2.Stats())
	}
}

// panicHint is a user error whose RetryAfter method panics.
type panicHint struct{}

func (panicHint) Error() string             { return "hinted" }
func (panicHint) RetryAfter() time.Duration { panic("hint") }

// TestPanicOrGoexitRecordsOneFailure: an attempt that ends in a panic or a
// runtime.Goexit of user code (fn itself, in Do or Call; the error's
// RetryAfter method, which Decide reads after recording the failure;
// Config.Rand; a custom Budget's AllowRetry; an OnRetry listener, whose
// recover does not stop a Goexit) records exactly one failure in the budget
// (one token of an A6 bucket), and the panic or the Goexit reaches the
// caller's goroutine as it was.
func TestPanicOrGoexitRecordsOneFailure(t *testing.T) {
	fail := func(context.Context) error { return errBoom }
	for _, c := range []struct {
		name      string
		cfg       Config
		panicIn   testkit.BudgetCall // the methods of the budget that panic
		call      func(p *Policy)
		wantPanic any // nil: the caller's goroutine Goexits
	}{
		{"fn panics in Do", Config{}, 0, func(p *Policy) {
			_ = p.Do(context.Background(), func(context.Context) error { panic("user") })
		}, "user"},
		{"fn panics in Call", Config{}, 0, func(p *Policy) {
			_, _ = Call(context.Background(), p, func(context.Context) (int, error) { panic("user") })
		}, "user"},
		{"RetryAfter panics", Config{}, 0, func(p *Policy) {
			_ = p.Do(context.Background(), func(context.Context) error { return panicHint{} })
		}, "hint"},
		{"Rand panics", Config{Backoff: FullJitter, Rand: func(int64) int64 { panic("rand") }}, 0, func(p *Policy) {
			_ = p.Do(context.Background(), fail)
		}, "rand"},
		{"AllowRetry panics", Config{}, testkit.CallAllowRetry, func(p *Policy) {
			_ = p.Do(context.Background(), fail)
		}, "testkit: Budget.AllowRetry"},
		{"OnRetry Goexits", Config{OnRetry: func(int, time.Duration, error) { runtime.Goexit() }}, 0, func(p *Policy) {
			_ = p.Do(context.Background(), fail)
		}, nil},
	} {
		bucket, _ := NewTokenBucket(TokenBucketConfig{})
		b := &testkit.Budget{Base: bucket}
		b.PanicIn(c.panicIn)
		c.cfg.Budget = b
		if c.cfg.Rand == nil {
			c.cfg.Backoff = Constant // FullJitter, the default, draws from Rand
		}
		c.cfg.BaseDelay = time.Nanosecond
		p := mustNew(t, c.cfg)
		panicked, goexited := testkit.Run(func() { c.call(p) })
		if panicked != c.wantPanic || goexited != (c.wantPanic == nil) {
			t.Errorf("%s: the caller's goroutine ended with panic %v (Goexit %v), want panic %v (Goexit %v)",
				c.name, panicked, goexited, c.wantPanic, c.wantPanic == nil)
		}
		if got := bucket.Tokens(); got != 9 || b.Failures() != 1 {
			t.Errorf("%s: %v tokens and %d failures recorded after one failed attempt, want 9 and 1", c.name, got, b.Failures())
		}
	}
}

// TestDecideOrder checks Decide's primitive contract with explicit values.
func TestDecideOrder(t *testing.T) {
	ms := int64(time.Millisecond)
	p := mustNew(t, Config{Backoff: Constant, BaseDelay: 100 * time.Millisecond, MaxAttempts: 3, MaxDuration: time.Second})
	cases := []struct {
		attempt        int
		err            error
		start, now, dl int64
		wantDelay      int64
		wantStop       Stop
	}{
		{1, errBoom, 0, 0, 0, 100 * ms, Continue},
		{1, nil, 0, 0, 0, 0, NotRetryable},
		{1, Permanent(errBoom), 0, 0, 0, 0, NotRetryable},
		{1, context.Canceled, 0, 0, 0, 100 * ms, Continue}, // Decide does not see the context: the caller checks it
		{3, errBoom, 0, 0, 0, 0, MaxAttempts},
		{1, errBoom, 0, 900 * ms, 0, 100 * ms, Continue}, // starts exactly at the limit
		{1, errBoom, 0, 901 * ms, 0, 0, MaxDuration},     // would start after it
		{1, errBoom, 0, 0, 101 * ms, 100 * ms, Continue}, // ends before the deadline
		{1, errBoom, 0, 0, 100 * ms, 0, Deadline},        // ends at the deadline
		{2, ErrRetryResult, 0, 0, 0, 100 * ms, Continue},
		{1, WithRetryAfter(errBoom, 0), 0, 0, 0, 0, Continue},
		{1, WithRetryAfter(errBoom, 20*time.Second), 0, 0, 0, 0, HintTooLong},
		{1, WithRetryAfter(errBoom, 300*time.Millisecond), 0, 0, 250 * ms, 0, Deadline},
	}
	for i, c := range cases {
		d, s := p.Decide(c.attempt, c.err, c.start, c.now, c.dl, 0)
		if int64(d) != c.wantDelay || s != c.wantStop {
			t.Errorf("case %d: Decide = %v, %v; want %v, %v", i, time.Duration(d), s, time.Duration(c.wantDelay), c.wantStop)
		}
	}
	if err := p.GiveUp(NotRetryable, 1, Permanent(errBoom), nil); err != errBoom {
		t.Fatalf("GiveUp(NotRetryable) = %v", err)
	}
	for s := Continue; s <= Canceled+1; s++ {
		if s.String() == "" {
			t.Fatal("empty Stop name")
		}
	}
}

// TestDecideNearMaxInt64RefusesOverlongRetry: at a clock reading near
// MaxInt64 (a manual ticker's legal reading) the sums Decide makes
// saturate the conservative way: a retry whose delay (MaxInt64/2) ends far
// past MaxDuration, or past the deadline, is refused, never granted by a
// sum that wrapped or saturated into a short one.
func TestDecideNearMaxInt64RefusesOverlongRetry(t *testing.T) {
	now := int64(math.MaxInt64 - 10)
	for _, c := range []struct {
		name            string
		maxDuration     time.Duration
		start, deadline int64
		want            Stop
	}{
		{"max duration", time.Hour, now - 1, 0, MaxDuration},
		{"deadline", 0, 0, math.MaxInt64, Deadline},
	} {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: math.MaxInt64 / 2, MaxDelay: math.MaxInt64 / 2,
			MaxDuration: c.maxDuration, MaxAttempts: 5})
		if _, stop := p.Decide(1, errBoom, c.start, now, c.deadline, 0); stop != c.want {
			t.Errorf("%s: stop %v, want %v", c.name, stop, c.want)
		}
	}
}

func TestDeadlineConversion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{})
		if p.Deadline(context.Background(), 5) != 0 {
			t.Fatal("deadline without one")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if got := p.Deadline(ctx, 1000); got != 1000+int64(time.Second) {
			t.Fatalf("deadline %d", got)
		}
	})
}

// TestDeadlineBelowZeroClockStopsRetry: a ticker's epoch is arbitrary, so
// the context's deadline on the policy's clock may be a negative reading.
// Deadline returns it as it is (it used to clamp it to 1, later than every
// reading below 0), and Decide stops with Deadline a retry whose delay (7 s)
// would end after it (5 s away), with the clock at -10 s.
func TestDeadlineBelowZeroClockStopsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewManualTicker(-10 * int64(time.Second))
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: 7 * time.Second, MaxDelay: 7 * time.Second, Ticker: tk})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		now := tk.Now()
		dl := p.Deadline(ctx, now)
		if want := now + int64(5*time.Second); dl != want {
			t.Fatalf("Deadline = %d, want %d (now %d + 5 s)", dl, want, now)
		}
		if d, stop := p.Decide(1, errBoom, now, now, dl, 0); stop != Deadline || d != 0 {
			t.Fatalf("Decide with a 7 s delay and a 5 s deadline = (%v, %v), want (0, Deadline)", d, stop)
		}
		// A delay that ends before the deadline is still granted.
		if d, stop := p.Decide(1, errBoom, now, now-int64(3*time.Second), dl, 0); stop != Continue || d != 7*time.Second {
			t.Fatalf("Decide with a 7 s delay 8 s before the deadline = (%v, %v), want (7s, Continue)", d, stop)
		}
	})
}

// TestDeadlineAtReadingZeroAndBeforeEveryReading: Deadline's two edge
// cases on a clock that reads below 0. A deadline that falls on reading 0
// (which means "no deadline" to Decide) is returned as -1, 1 ns early, never
// late: Decide stops a retry that would start at it. One before every
// reading (the sum saturates at NotRead) is returned as NotRead+1, never
// NotRead (the retry loops' "not computed yet"), and Decide stops a retry
// at the lowest reading.
func TestDeadlineAtReadingZeroAndBeforeEveryReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Second, MaxDelay: time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		now := -int64(time.Second)
		dl := p.Deadline(ctx, now)
		if dl != -1 {
			t.Fatalf("Deadline at reading 0 = %d, want -1", dl)
		}
		if _, stop := p.Decide(1, errBoom, now, now, dl, 0); stop != Deadline {
			t.Fatalf("Decide for a retry at the deadline (reading 0) = %v, want Deadline", stop)
		}
		if _, stop := p.Decide(1, errBoom, now, now-2, dl, 0); stop != Continue {
			t.Fatalf("Decide for a retry ending 1 ns before the returned deadline = %v, want Continue", stop)
		}

		past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Hour))
		defer cancelPast()
		low := rampart.NotRead + 1 // the lowest real reading
		if dl := p.Deadline(past, low); dl != rampart.NotRead+1 {
			t.Fatalf("Deadline an hour before reading NotRead+1 = %d, want NotRead+1", dl)
		}
		if _, stop := p.Decide(1, errBoom, low, low, p.Deadline(past, low), 0); stop != Deadline {
			t.Fatalf("Decide at the lowest reading past the deadline = %v, want Deadline", stop)
		}
	})
}

// shiftedTicker is a ticker whose readings are those of t plus off: a
// clock whose epoch is arbitrary (below 0 with off < 0).
type shiftedTicker struct {
	t   rampart.Ticker
	off int64
}

func (s shiftedTicker) Now() int64 { return s.t.Now() + s.off }

// deadlineCountingCtx counts the calls of its Deadline method.
type deadlineCountingCtx struct {
	context.Context
	calls *int
}

func (c deadlineCountingCtx) Deadline() (time.Time, bool) {
	*c.calls++
	return c.Context.Deadline()
}

// TestDoBelowZeroClockConvertsDeadlineOnce: Do and CallIf on a clock that
// reads below 0 (its epoch 10 s ahead) convert the context's deadline once
// per call, however many retries (a negative deadline is a computed one,
// not the loops' "not computed yet"), and stop with Deadline rather than
// sleep past it: with a deadline at 250 ms and 100 ms delays, 3 attempts
// in 200 ms.
func TestDoBelowZeroClockConvertsDeadlineOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := shiftedTicker{rampart.NewNanoTicker(), -10 * int64(time.Second)}
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: 100 * time.Millisecond, MaxAttempts: math.MaxInt, Ticker: tk})
		for _, name := range []string{"Do", "CallIf"} {
			c, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
			calls := 0
			ctx := deadlineCountingCtx{c, &calls}
			t0 := time.Now()
			n := 0
			var err error
			if name == "Do" {
				err = p.Do(ctx, func(context.Context) error { n++; return errBoom })
			} else {
				_, err = CallIf(ctx, p, func(context.Context) (int, error) { n++; return 0, errBoom }, nil)
			}
			cancel()
			var ex *ExhaustedError
			if !errors.As(err, &ex) || ex.Reason() != Deadline || n != 3 || time.Since(t0) != 200*time.Millisecond {
				t.Fatalf("%s: err=%v n=%d elapsed=%v, want Deadline after 3 attempts in 200ms", name, err, n, time.Since(t0))
			}
			if calls != 1 {
				t.Fatalf("%s: ctx.Deadline called %d times for %d attempts, want once", name, calls, n)
			}
		}
	})
}

// FuzzDecide runs the decision loop on a simulated clock for arbitrary
// configurations and checks the limits: attempts ≤ MaxAttempts, every
// attempt starts within MaxDuration of the first and before the deadline,
// delays are never negative and never exceed MaxDelay.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), 3, int64(100e6), int64(10e9), 2.0, int64(0), int64(0), int64(0), uint64(1))
	f.Add(uint8(5), 50, int64(1e6), int64(1e9), 3.0, int64(5e9), int64(2e9), int64(1), uint64(2))
	f.Add(uint8(1), 1000, int64(1), int64(math.MaxInt64), 1.5, int64(0), int64(math.MaxInt64/2), int64(0), uint64(3))
	f.Add(uint8(3), 7, int64(3e6), int64(0), 1.0, int64(1e8), int64(0), int64(7e6), uint64(4))
	f.Fuzz(func(t *testing.T, kind uint8, maxAttempts int, base, maxD int64, mult float64, maxDur, deadline, attemptCost int64, seed uint64) {
		c := Config{Backoff: Backoff(kind % uint8(numBackoffs)), MaxAttempts: maxAttempts % 2000, BaseDelay: time.Duration(base),
			MaxDelay: time.Duration(maxD), Multiplier: mult, MaxDuration: time.Duration(maxDur), Rand: seeded(seed)}
		p, err := New(c)
		if err != nil {
			return // invalid configurations are New's business (tested elsewhere)
		}
		attemptCost = max(attemptCost, 0) % int64(time.Second)
		start := int64(1000)
		if deadline != 0 {
			deadline = atomicSat(start, max(deadline, 1))
		}
		now, prev, attempts := start, int64(0), 0
		for {
			attempts++
			if attempts > p.MaxAttempts() {
				t.Fatalf("attempt %d > MaxAttempts %d", attempts, p.MaxAttempts())
			}
			if c.MaxDuration > 0 && now-start > int64(c.MaxDuration) {
				t.Fatalf("attempt at %d past MaxDuration %d", now-start, c.MaxDuration)
			}
			if deadline != 0 && now >= deadline {
				t.Fatalf("attempt at %d at or past the deadline %d", now, deadline)
			}
			now = atomicSat(now, attemptCost)
			dd, s := p.Decide(attempts, errBoom, start, now, deadline, time.Duration(prev))
			d := int64(dd)
			if s != Continue {
				if d != 0 {
					t.Fatalf("stop %v with delay %d", s, d)
				}
				if s == MaxAttempts && attempts != p.MaxAttempts() {
					t.Fatalf("MaxAttempts after %d attempts", attempts)
				}
				return
			}
			if d < 0 || d > p.cur.Load().bo.max {
				t.Fatalf("delay %d outside [0, %d]", d, p.cur.Load().bo.max)
			}
			now, prev = atomicSat(now, d), d
			if attempts > 5000 {
				t.Fatal("no limit stopped the loop")
			}
		}
	})
}

func atomicSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

func TestAllocsFirstTrySuccess(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	okInt := func(context.Context) (int, error) { return 200, nil }
	is5xx := func(c int) bool { return c >= 500 }
	bucket, _ := NewTokenBucket(TokenBucketConfig{})
	ratio, _ := NewRatioBudget(RatioBudgetConfig{})
	for name, c := range map[string]Config{
		"plain":       {},
		"maxDuration": {MaxDuration: time.Second},
		"bucket":      {Budget: bucket},
		"ratio":       {Budget: ratio},
		"listeners":   {OnRetry: func(int, time.Duration, error) {}, OnGiveUp: func(int, Stop, error) {}},
	} {
		p := mustNew(t, c)
		testkit.WantAllocs(t, name+": Do, first-try success", 0, func() {
			if p.Do(ctx, ok) != nil {
				t.Fatal("failed")
			}
		})
		testkit.WantAllocs(t, name+": CallIf, first-try success", 0, func() {
			if v, err := CallIf(ctx, p, okInt, is5xx); v != 200 || err != nil {
				t.Fatal("failed")
			}
		})
		testkit.WantAllocs(t, name+": Call, first-try success", 0, func() {
			if v, err := Call(ctx, p, okInt); v != 200 || err != nil {
				t.Fatal("failed")
			}
		})
	}
}

func TestAllocsDecide(t *testing.T) {
	bucket, _ := NewTokenBucket(TokenBucketConfig{MaxTokens: 1000, TokenRatio: 1})
	p := mustNew(t, Config{Budget: bucket, MaxAttempts: 5})
	hinted := WithRetryAfter(errBoom, time.Millisecond)
	testkit.WantAllocs(t, "Decide", 0, func() {
		if _, s := p.Decide(1, errBoom, 0, 0, 0, 0); s != Continue {
			t.Fatal(s)
		}
		if _, s := p.Decide(1, hinted, 0, 0, 0, 0); s != Continue {
			t.Fatal(s)
		}
		bucket.OnSuccess(0)
		bucket.OnSuccess(0)
	})
}

// TestDoneContextRunsNothing: Do, Call and CallIf with a context that is
// already done (cancelled, or past its deadline) do not run fn and return
// ctx.Err() itself, unwrapped, as a pipeline does for a call whose context
// ended before its first attempt; the budget, the counters and the
// listeners see nothing.
func TestDoneContextRunsNothing(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancelExpired()
	for cname, ctx := range map[string]context.Context{"canceled": canceled, "expired": expired} {
		bucket, _ := NewTokenBucket(TokenBucketConfig{})
		ratio, _ := NewRatioBudget(RatioBudgetConfig{MinRetries: 1})
		counting := &testkit.Budget{}
		for name, c := range map[string]Config{
			"plain":       {},
			"maxDuration": {MaxDuration: time.Second},
			"bucket":      {Budget: bucket},
			"ratio":       {Budget: ratio, Ticker: rampart.NewManualTicker(0)},
			"counting":    {Budget: counting},
		} {
			var heard atomic.Int64
			c.OnRetry = func(int, time.Duration, error) { heard.Add(1) }
			c.OnGiveUp = func(int, Stop, error) { heard.Add(1) }
			c.BaseDelay = time.Nanosecond
			p := mustNew(t, c)
			var runs int
			fail := func(context.Context) error { runs++; return errBoom }
			failInt := func(context.Context) (int, error) { runs++; return 7, errBoom }
			for entry, call := range map[string]func() (int, error){
				"Do":     func() (int, error) { return 0, p.Do(ctx, fail) },
				"Call":   func() (int, error) { return Call(ctx, p, failInt) },
				"CallIf": func() (int, error) { return CallIf(ctx, p, failInt, func(int) bool { return true }) },
			} {
				runs = 0
				if v, err := call(); runs != 0 || v != 0 || err != ctx.Err() {
					t.Errorf("%s %s/%s: fn ran %d times, got %d, %v; want 0 runs, 0, %v", cname, name, entry, runs, v, err, ctx.Err())
				}
			}
			if st := p.Stats(); st != (Stats{}) || heard.Load() != 0 {
				t.Errorf("%s %s: stats %+v, %d listener calls; want none", cname, name, st, heard.Load())
			}
		}
		if req, ret := ratio.Counts(0); bucket.Tokens() != 10 || req != 0 || ret != 0 ||
			counting.Requests()+counting.Successes()+counting.Failures()+counting.Asks() != 0 {
			t.Errorf("%s: budgets touched: tokens %v, ratio %d/%d, counting %d %d %d %d", cname, bucket.Tokens(), req, ret,
				counting.Requests(), counting.Successes(), counting.Failures(), counting.Asks())
		}
	}
}

// endingCtx is a context that has ended at end (on the runtime's clock, a
// synctest bubble's) but whose Done channel is not closed yet: the instant
// inside context.cancelCtx's cancel between storing the error and closing
// the channel.
type endingCtx struct {
	context.Context
	end  time.Time
	done chan struct{}
}

func (c *endingCtx) Done() <-chan struct{} { return c.done }
func (c *endingCtx) Err() error {
	if !time.Now().Before(c.end) {
		return context.Canceled
	}
	return nil
}

// TestSleepReportsContextEndedAsDelayRanOut: when the context ends as the
// delay runs out, Sleep reports the context's error (the next attempt must
// not start on a done context), and Do gives up on the last error without
// running fn again.
func TestSleepReportsContextEndedAsDelayRanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{Backoff: Constant, BaseDelay: time.Second, MaxAttempts: 5})
		ctx := &endingCtx{Context: context.Background(), end: time.Now().Add(time.Second), done: make(chan struct{})}
		if err := p.Sleep(ctx, time.Second); err != context.Canceled {
			t.Fatalf("Sleep = %v, want context.Canceled", err)
		}
		ctx.end = time.Now().Add(time.Second)
		runs := 0
		err := p.Do(ctx, func(context.Context) error { runs++; return errBoom })
		var ex *ExhaustedError
		if runs != 1 || !errors.As(err, &ex) || ex.Reason() != Canceled || !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) {
			t.Fatalf("runs %d, err %v; want 1 run and a give-up (canceled) on boom", runs, err)
		}
	})
}

// TestCalleeDeadlineRetriedCallerDeadlineFinal: a callee whose own
// context.WithTimeout fires is retried by the default classifier (the
// caller's context is live), in Do and in CallIf; when the caller's context
// ends during an attempt, the retries stop at once and the attempt's error
// (the context's) comes back as it is, with no budget failure recorded.
func TestCalleeDeadlineRetriedCallerDeadlineFinal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := NewTokenBucket(TokenBucketConfig{MaxTokens: 100})
		if err != nil {
			t.Fatal(err)
		}
		p := mustNew(t, Config{MaxAttempts: 10, Backoff: Constant, BaseDelay: time.Millisecond, Budget: b,
			Ticker: rampart.NewNanoTicker()}) // inside the bubble: follows its fake clock
		// fn runs its own 10 ms deadline; attempt 3 succeeds when ok3.
		var n int
		fn := func(ok3 bool) func(context.Context) error {
			return func(ctx context.Context) error {
				n++
				if ok3 && n == 3 {
					return nil
				}
				ictx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
				defer cancel()
				<-ictx.Done()
				return fmt.Errorf("query: %w", ictx.Err())
			}
		}
		start := time.Now()
		if err := p.Do(context.Background(), fn(true)); err != nil || n != 3 {
			t.Fatalf("Do = %v after %d attempts, want nil after 3", err, n)
		}
		if d := time.Since(start); d != 22*time.Millisecond {
			t.Fatalf("took %v, want 2 × (10 ms + 1 ms)", d)
		}
		n = 0
		v, err := CallIf(context.Background(), p, func(ctx context.Context) (int, error) { err := fn(true)(ctx); return n, err }, nil)
		if err != nil || v != 3 || n != 3 {
			t.Fatalf("CallIf = %d, %v after %d attempts, want 3, nil after 3", v, err, n)
		}
		tokens := b.Tokens()

		// The caller's 25 ms deadline ends attempt 3 (started at 22 ms).
		for _, call := range []string{"Do", "CallIf"} {
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Millisecond)
			n, start = 0, time.Now()
			if call == "Do" {
				err = p.Do(ctx, fn(false))
			} else {
				_, err = CallIf(ctx, p, func(ctx context.Context) (int, error) { return 0, fn(false)(ctx) }, nil)
			}
			cancel()
			if n != 3 || time.Since(start) != 25*time.Millisecond {
				t.Fatalf("%s: %d attempts in %v, want 3 in 25 ms", call, n, time.Since(start))
			}
			if _, ok := errors.AsType[*ExhaustedError](err); ok || !errors.Is(err, context.DeadlineExceeded) || err.Error() != "query: context deadline exceeded" {
				t.Fatalf("%s = %v, want the attempt's error as it is", call, err)
			}
		}
		// Two retried failures per call (Decide's), none for the last one.
		if got, want := b.Tokens(), tokens-4; got != want {
			t.Fatalf("tokens %v, want %v", got, want)
		}
	})
}

// TestPolicyBytes gates the heap bytes of one live Policy with the default
// Config (and a Budget, which New checks without building a message for a
// usable one): New allocates the Policy and nothing it lets go.
func TestPolicyBytes(t *testing.T) {
	bud, err := NewTokenBucket(TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := testkit.Bytes(t, func() any {
		p, err := New(Config{Budget: bud})
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	// 192 B on 64-byte lines: the configuration on two lines, the retry
	// path's counters and the name on the third (size class 192). Was 288
	// with a line of padding between them, 352 with the budget check's
	// advice built for every New.
	if want := int64(192); pad.LineSize == 64 && got != want {
		t.Fatalf("a retry.Policy: got %d B, want %d", got, want)
	}
}

// TestPolicyLayout: the counters that the retry path writes start a cache
// line after the configuration that every call reads, and the allocator
// places every Policy on a line boundary (192 B, a size class whose
// objects start at multiples of their size from a page; no malloc header
// below 512 B), so that no write of a counter touches a line the
// configuration is on.
func TestPolicyLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is for 64-bit platforms")
	}
	var p Policy
	cfgEnd := unsafe.Offsetof(p.init) + unsafe.Sizeof(p.init)
	if off := unsafe.Offsetof(p.retries); off%pad.LineSize != 0 || off < cfgEnd {
		t.Fatalf("counters at %d: want a line boundary at or after the configuration's end, %d", off, cfgEnd)
	}
	if size := unsafe.Sizeof(p); size%pad.LineSize != 0 {
		t.Fatalf("a Policy is %d B, not whole lines", size)
	}
	for range 100 {
		p := mustNew(t, Config{})
		if a := uintptr(unsafe.Pointer(p)); a%pad.LineSize != 0 {
			t.Fatalf("a Policy at %#x: not on a line boundary", a)
		}
	}
}

// TestUpdateRefusals: Update refuses, with a *rampart.ConfigError naming
// the field, a change to each field fixed at construction and each value
// New refuses (with New's error), and then changes nothing.
func TestUpdateRefusals(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	bud, err := NewTokenBucket(TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	base := Config{Name: "db", Ticker: tk, Budget: bud, MaxAttempts: 4, MaxDuration: time.Second}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	other, _ := NewTokenBucket(TokenBucketConfig{})
	for _, c := range []struct {
		field string
		cfg   Config
		fixed bool
	}{
		{"Name", with(func(c *Config) { c.Name = "other" }), true},
		{"Ticker", with(func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }), true},
		{"Ticker", with(func(c *Config) { c.Ticker = nil }), true}, // the default clock, not tk
		{"Budget", with(func(c *Config) { c.Budget = other }), true},
		{"Budget", with(func(c *Config) { c.Budget = nil }), true},
		{"MaxDuration", with(func(c *Config) { c.MaxDuration = 0 }), true},
		{"MaxAttempts", with(func(c *Config) { c.MaxAttempts = -1 }), false},
		{"MaxDelay", with(func(c *Config) { c.BaseDelay, c.MaxDelay = time.Second, time.Millisecond }), false},
		{"Multiplier", with(func(c *Config) { c.Multiplier = math.NaN() }), false},
		{"Budget", with(func(c *Config) { c.Budget = (*TokenBucket)(nil) }), false},
	} {
		p := mustNew(t, base)
		err := p.Update(c.cfg)
		var ce *rampart.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) || ce.Field != c.field {
			t.Fatalf("%s: got %v", c.field, err)
		}
		if got := strings.Contains(ce.Reason, "fixed at construction"); got != c.fixed {
			t.Fatalf("%s: %v: fixed %v, want %v", c.field, err, got, c.fixed)
		}
		if _, nerr := New(c.cfg); !c.fixed && nerr.Error() != err.Error() {
			t.Fatalf("%s: Update's %v is not New's %v", c.field, err, nerr)
		}
		if p.MaxAttempts() != 4 || p.cur.Load().maxDur != int64(time.Second) {
			t.Fatalf("%s: a refused Update changed the policy", c.field)
		}
	}
	// Between positive values MaxDuration may change.
	p := mustNew(t, base)
	if err := p.Update(with(func(c *Config) { c.MaxDuration = time.Minute })); err != nil {
		t.Fatal(err)
	}
	if p.cur.Load().maxDur != int64(time.Minute) {
		t.Fatal("MaxDuration not updated")
	}
}

// TestUpdateAppliesFromTheNextCall: the next call runs under an Update's
// configuration (its attempts, its backoff, its listeners), its zero
// fields mean New's defaults, and a call keeps the one it loaded at its
// first retry.
func TestUpdateAppliesFromTheNextCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustNew(t, Config{MaxAttempts: 2, Backoff: Constant, BaseDelay: time.Millisecond})
		attempts := func() int {
			n := 0
			_ = p.Do(context.Background(), func(context.Context) error { n++; return errBoom })
			return n
		}
		if n := attempts(); n != 2 {
			t.Fatalf("%d attempts, want 2", n)
		}
		var retried []time.Duration
		if err := p.Update(Config{MaxAttempts: 4, Backoff: Constant, BaseDelay: 5 * time.Millisecond,
			OnRetry: func(_ int, d time.Duration, _ error) { retried = append(retried, d) }}); err != nil {
			t.Fatal(err)
		}
		if n := attempts(); n != 4 || len(retried) != 3 || retried[0] != 5*time.Millisecond {
			t.Fatalf("%d attempts, retries %v: want 4 attempts, 3 retries of 5ms", n, retried)
		}
		if err := p.Update(Config{}); err != nil {
			t.Fatal(err)
		}
		if p.MaxAttempts() != 3 || p.cur.Load().bo.base != int64(100*time.Millisecond) || p.cur.Load().onRetry != nil {
			t.Fatalf("zero fields are New's defaults: %+v", *p.cur.Load())
		}

		// A call loads its configuration when its first attempt fails
		// (the first reads only fixed fields), and keeps it: an Update
		// during its first attempt applies to all its retries, one during
		// a retry to none of them.
		updateOn := func(at, maxAttempts int) int {
			n := 0
			_ = p.Do(context.Background(), func(context.Context) error {
				if n++; n == at {
					if err := p.Update(Config{MaxAttempts: maxAttempts, Backoff: Constant, BaseDelay: time.Millisecond}); err != nil {
						t.Error(err)
					}
				}
				return errBoom
			})
			return n
		}
		if n := updateOn(1, 6); n != 6 {
			t.Fatalf("an Update during the first attempt: %d attempts, want 6", n)
		}
		if n := updateOn(2, 2); n != 6 {
			t.Fatalf("an Update during a retry: %d attempts, want the 6 the call loaded", n)
		}
		if n := attempts(); n != 2 {
			t.Fatalf("the next call made %d attempts, want 2", n)
		}
	})
}

// TestStressUpdatesRacingCalls: goroutines retry failing calls while
// another keeps switching the policy between two configurations (2 and
// 4 attempts, different backoffs and listeners): every call runs wholly
// under one of them (exactly 2 or 4 attempts, never a mix), and the
// counters add up (each call's retries and its give-up counted once).
func TestStressUpdatesRacingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfgs := []Config{
			{MaxAttempts: 2, Backoff: Constant, BaseDelay: time.Millisecond},
			{MaxAttempts: 4, Backoff: FullJitter, BaseDelay: 2 * time.Millisecond, OnGiveUp: func(int, Stop, error) {}},
		}
		p := mustNew(t, cfgs[0])
		const G, N = 8, 200
		var calls, retries, mixed, fours atomic.Int64
		done, updaterExited := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(updaterExited)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := p.Update(cfgs[i%2]); err != nil {
					t.Error(err)
				}
				time.Sleep(time.Millisecond / 3)
			}
		}()
		finished := make(chan struct{}, G)
		for range G {
			go func() {
				defer func() { finished <- struct{}{} }()
				for range N {
					n := int64(0)
					err := p.Do(context.Background(), func(context.Context) error { n++; return errBoom })
					if !errors.Is(err, ErrExhausted) {
						t.Errorf("got %v", err)
					}
					switch n {
					case 2:
					case 4:
						fours.Add(1)
					default:
						mixed.Add(1)
					}
					calls.Add(1)
					retries.Add(n - 1)
				}
			}()
		}
		for range G {
			<-finished
		}
		close(done)
		<-updaterExited
		if mixed.Load() != 0 {
			t.Fatalf("%d calls ran under a mix of two configurations", mixed.Load())
		}
		if f := fours.Load(); f == 0 || f == calls.Load() {
			t.Fatalf("%d calls of %d under the second configuration: the updates did not race the calls", f, calls.Load())
		}
		s := p.Stats()
		if s.Retries != uint64(retries.Load()) || s.GiveUps != uint64(calls.Load()) {
			t.Fatalf("stats %+v, want %d retries and %d give-ups", s, retries.Load(), calls.Load())
		}
	})
}

// TestZeroPolicyHasNoTicker: a zero Policy's Ticker is nil, without a
// panic: package pipeline refuses a zero Policy by it.
func TestZeroPolicyHasNoTicker(t *testing.T) {
	if tk := (&Policy{}).Ticker(); tk != nil {
		t.Fatalf("a zero Policy's Ticker: %v", tk)
	}
}

// TestUpdateWithoutNameKeepsTheName: an empty Name in Update keeps the
// name New was given (a registry's create-or-get sets it on the caller's
// behalf, and the caller's own Config, changed, must be accepted back):
// Config and the give-up errors still carry it.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	p := mustNew(t, Config{Name: "db", MaxAttempts: 2})
	if err := p.Update(Config{MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	if got := p.Config().Name; got != "db" {
		t.Fatalf("Config().Name = %q, want db", got)
	}
	if p.MaxAttempts() != 3 {
		t.Fatalf("MaxAttempts %d, want 3", p.MaxAttempts())
	}
	if err := p.GiveUp(MaxAttempts, 3, errBoom, nil); !strings.Contains(err.Error(), `retry "db"`) {
		t.Fatalf("give-up error %q does not carry the name", err)
	}
}

// TestUpdateOfConfigRoundTrips: Config returns the configuration in force
// with its defaults filled in, and Update(Config()) is accepted and changes
// nothing: with the zero Config, and with every field set (listeners, a
// budget, an uncomparable Rand and ShouldRetry).
func TestUpdateOfConfigRoundTrips(t *testing.T) {
	bud, err := NewTokenBucket(TokenBucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{
		{},
		{Name: "db", MaxAttempts: 5, MaxDuration: time.Second, Backoff: Linear, BaseDelay: time.Millisecond,
			MaxDelay: time.Second, Multiplier: 1.5, Increment: 2 * time.Millisecond, Budget: bud,
			Ticker: rampart.NewManualTicker(0), ShouldRetry: func(error) bool { return true },
			Rand: func(n int64) int64 { return 0 }, OnRetry: func(int, time.Duration, error) {},
			OnGiveUp: func(int, Stop, error) {}, OnBudgetRefused: func(int, error) {}},
	} {
		p := mustNew(t, c)
		before := p.Config()
		if err := p.Update(before); err != nil {
			t.Fatalf("Update(Config()): %v", err)
		}
		if got, want := fmt.Sprint(p.Config()), fmt.Sprint(before); got != want {
			t.Fatalf("Update(Config()) changed it:\n%s\n%s", got, want)
		}
		if got, want := *p.cur.Load(), p.init; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Update(Config()) settings %v, New's %v", got, want)
		}
	}
	d := mustNew(t, Config{}).Config()
	if d.MaxAttempts != 3 || d.BaseDelay != 100*time.Millisecond || d.MaxDelay != 10*time.Second || d.Multiplier != 2 ||
		d.Increment != 100*time.Millisecond || d.Ticker != rampart.DefaultTicker() {
		t.Fatalf("defaults not filled in: %+v", d)
	}
}
