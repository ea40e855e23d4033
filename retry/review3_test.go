package retry

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// panicHint is a user error whose RetryAfter method panics.
type panicHint struct{}

func (panicHint) Error() string             { return "hinted" }
func (panicHint) RetryAfter() time.Duration { panic("hint") }

// One failed attempt is one OnFailure. Decide records the failure in the
// budget before it reads the error's RetryAfterHint; when that user method
// panics, doFull's deferred "fn panicked" handler records the same attempt's
// failure a second time (two tokens for one failure). The same happens
// when Config.Rand panics, or a custom Budget's AllowRetry does.
func TestReview3PanickingHintRecordsOneFailure(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	p := mustNew(t, Config{Budget: b, Backoff: Constant, BaseDelay: time.Nanosecond})
	func() {
		defer func() {
			if r := recover(); r != "hint" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = p.Do(context.Background(), func(context.Context) error { return panicHint{} })
	}()
	if got := b.Tokens(); got != 9 {
		t.Fatalf("tokens %v after one failed attempt, want 9", got)
	}
}

// A listener that calls runtime.Goexit is not stopped by the recover that
// guards listeners: OnRetry runs after Decide recorded the failure, so
// doFull's deferred handler records it again.
func TestReview3GoexitInOnRetryRecordsOneFailure(t *testing.T) {
	b, _ := NewTokenBucket(TokenBucketConfig{})
	p := mustNew(t, Config{Budget: b, Backoff: Constant, BaseDelay: time.Nanosecond,
		OnRetry: func(int, time.Duration, error) { runtime.Goexit() }})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Do(context.Background(), func(context.Context) error { return errBoom })
	}()
	<-done
	if got := b.Tokens(); got != 9 {
		t.Fatalf("tokens %v after one failed attempt, want 9", got)
	}
}

// Guard (passes): a non-retryable error (Permanent, or the caller's own
// context error once that context is done) comes back unchanged (the very
// same value, or the error under an outermost Permanent marker) after one
// attempt, and touches no budget token.
func TestReview3NotRetryableUnchangedAndUncounted(t *testing.T) {
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

// Guard (passes): a retry-after hint of exactly MaxDelay is honoured, one
// nanosecond more gives up with HintTooLong, and a hint whose sleep would
// end exactly at the deadline gives up with Deadline.
func TestReview3HintBoundaries(t *testing.T) {
	p := mustNew(t, Config{BaseDelay: time.Millisecond, MaxDelay: time.Second, MaxAttempts: 3})
	d, stop := p.Decide(1, WithRetryAfter(errBoom, time.Second), 0, 100, 0, 0)
	if stop != Continue || d != int64(time.Second) {
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
