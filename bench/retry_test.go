package bench

import (
	"context"
	"testing"
	"time"

	retrygo "github.com/avast/retry-go/v4"
	"github.com/cenkalti/backoff/v5"
	"github.com/eapache/go-resiliency/retrier"
	"github.com/failsafe-go/failsafe-go"
	fsbudget "github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/retry"
)

// retryPeer is one library's retry wrapper around an operation, configured
// alike: at most 3 attempts, exponential backoff from 100 ms (never reached:
// every case succeeds on the first try). build returns the call as the
// library's users write it; the call reports the operation's error.
type retryPeer struct {
	name  string
	build func(b *testing.B, op func(context.Context) error) func(context.Context) error
}

func retryPeers() []retryPeer {
	return []retryPeer{
		{"rampart", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			p, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Exponential, BaseDelay: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) error { return p.Do(ctx, op) }
		}},
		{"rampart-call", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			// The typed form with a result predicate.
			p, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Exponential, BaseDelay: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			fn := func(ctx context.Context) (int, error) { return 200, op(ctx) }
			is5xx := func(code int) bool { return code >= 500 }
			return func(ctx context.Context) error {
				_, err := retry.CallIf(ctx, p, fn, is5xx)
				return err
			}
		}},
		{"failsafe", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			// The executor is built once, as failsafe's README shows; the
			// call's context is attached per call, as a server with
			// per-request contexts must.
			ex := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxAttempts(3).WithBackoff(100*time.Millisecond, 10*time.Second).Build())
			return func(ctx context.Context) error {
				return ex.WithContext(ctx).Run(func() error { return op(ctx) })
			}
		}},
		{"backoff", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			return func(ctx context.Context) error {
				_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, op(ctx) }, backoff.WithMaxTries(3))
				return err
			}
		}},
		{"retrygo", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			return func(ctx context.Context) error {
				return retrygo.Do(func() error { return op(ctx) }, retrygo.Context(ctx), retrygo.Attempts(3),
					retrygo.Delay(100*time.Millisecond))
			}
		}},
		{"goresiliency", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			r := retrier.New(retrier.ExponentialBackoff(2, 100*time.Millisecond), nil)
			return func(ctx context.Context) error { return r.RunCtx(ctx, op) }
		}},
	}
}

// retryBudgetPeers are the libraries with a retry budget, each with its
// default budget shared by the policy.
func retryBudgetPeers() []retryPeer {
	return []retryPeer{
		{"rampart", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			bud, err := retry.NewTokenBucket(retry.TokenBucketConfig{}) // gRPC A6
			if err != nil {
				b.Fatal(err)
			}
			p, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Exponential, BaseDelay: 100 * time.Millisecond, Budget: bud})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) error { return p.Do(ctx, op) }
		}},
		{"rampart-ratio", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			bud, err := retry.NewRatioBudget(retry.RatioBudgetConfig{}) // SRE ratio: needs a clock read per call
			if err != nil {
				b.Fatal(err)
			}
			p, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Exponential, BaseDelay: 100 * time.Millisecond, Budget: bud})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) error { return p.Do(ctx, op) }
		}},
		{"rampart-ratio-cached", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			// The SRE ratio with a cached clock (one atomic load instead of a
			// clock read; its 1 ms resolution is plenty for 1 s buckets).
			tk := rampart.NewCachedTicker(time.Millisecond)
			b.Cleanup(func() { tk.Close() })
			bud, err := retry.NewRatioBudget(retry.RatioBudgetConfig{})
			if err != nil {
				b.Fatal(err)
			}
			p, err := retry.New(retry.Config{MaxAttempts: 3, Backoff: retry.Exponential, BaseDelay: 100 * time.Millisecond,
				Budget: bud, Ticker: tk})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context) error { return p.Do(ctx, op) }
		}},
		{"failsafe", func(b *testing.B, op func(context.Context) error) func(context.Context) error {
			ex := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxAttempts(3).WithBackoff(100*time.Millisecond, 10*time.Second).
				WithBudget(fsbudget.New()).Build())
			return func(ctx context.Context) error {
				return ex.WithContext(ctx).Run(func() error { return op(ctx) })
			}
		}},
	}
}

// BenchmarkRetry measures a retry wrapper around an operation that succeeds
// at once: the cost every call pays for being retryable.
func BenchmarkRetry(b *testing.B) {
	ctx := context.Background()
	op := func(context.Context) error { sink.Add(1); return nil }
	for _, p := range retryPeers() {
		b.Run("FirstTrySuccess/"+p.name, func(b *testing.B) {
			call := p.build(b, op)
			b.ReportAllocs()
			before := sink.Load()
			for b.Loop() {
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if sink.Load() == before {
				b.Fatal("the operation never ran")
			}
		})
	}
	// In parallel, the operation counts its runs in a per-goroutine counter
	// reached through the context (a shared atomic would dominate the cost
	// of the cheap wrappers with its cache-line contention).
	// The counter is padded: two goroutines' counters on one cache line
	// would make the cost depend on where the allocator put them.
	type counterKey struct{}
	type paddedCount struct {
		_ [128]byte
		n int64
		_ [128]byte
	}
	localOp := func(ctx context.Context) error { ctx.Value(counterKey{}).(*paddedCount).n++; return nil }
	for _, p := range retryPeers() {
		b.Run("FirstTrySuccessParallel/"+p.name, func(b *testing.B) {
			call := p.build(b, localOp)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var calls int64
				runs := new(paddedCount)
				ctx := context.WithValue(ctx, counterKey{}, runs)
				for pb.Next() {
					if err := call(ctx); err != nil {
						b.Error(err)
						return
					}
					calls++
				}
				if runs.n != calls {
					b.Errorf("%d runs of the operation for %d calls", runs.n, calls)
				}
			})
		})
	}
	for _, p := range retryBudgetPeers() {
		b.Run("WithBudget/"+p.name, func(b *testing.B) {
			call := p.build(b, op)
			b.ReportAllocs()
			for b.Loop() {
				if err := call(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
