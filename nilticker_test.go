package rampart_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// TestNilPointerTickerIsAConfigError: a Config.Ticker holding a nil pointer
// of one of rampart's ticker types is refused at New with a ConfigError
// naming the field, by every policy and the pipeline, instead of panicking
// in the first call that reads it.
func TestNilPointerTickerIsAConfigError(t *testing.T) {
	nils := []rampart.Ticker{(*rampart.NanoTicker)(nil), (*rampart.CachedTicker)(nil), (*rampart.ManualTicker)(nil)}
	news := map[string]func(rampart.Ticker) error{
		"adaptive": func(tk rampart.Ticker) error { _, err := adaptive.New(adaptive.Config{Ticker: tk}); return err },
		"throttler": func(tk rampart.Ticker) error {
			_, err := adaptive.NewThrottler(adaptive.ThrottlerConfig{Ticker: tk})
			return err
		},
		"bulkhead": func(tk rampart.Ticker) error { _, err := bulkhead.New(bulkhead.Config{Max: 1, Ticker: tk}); return err },
		"circuitbreaker": func(tk rampart.Ticker) error {
			_, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tk})
			return err
		},
		"hedge": func(tk rampart.Ticker) error {
			_, err := hedge.New(hedge.Config{Delay: time.Millisecond, Ticker: tk})
			return err
		},
		"pipeline": func(tk rampart.Ticker) error { _, err := pipeline.New(pipeline.Config{Ticker: tk}); return err },
		"ratelimit": func(tk rampart.Ticker) error {
			_, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk})
			return err
		},
		"keyed": func(tk rampart.Ticker) error {
			_, err := ratelimit.NewKeyed(ratelimit.KeyedConfig{Config: ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk}})
			return err
		},
		"sharded": func(tk rampart.Ticker) error {
			_, err := ratelimit.NewSharded(ratelimit.ShardedConfig{Config: ratelimit.Config{Rate: 8, Burst: 8, Ticker: tk}, Shards: 2})
			return err
		},
		"retry": func(tk rampart.Ticker) error { _, err := retry.New(retry.Config{Ticker: tk}); return err },
		"timeout": func(tk rampart.Ticker) error {
			_, err := timeout.New(timeout.Config{Duration: time.Second, Ticker: tk})
			return err
		},
		"shed": func(tk rampart.Ticker) error { _, err := shed.New(shed.Config{Ticker: tk}); return err },
	}
	// The policy each ConfigError names, where it is not the entry's name.
	policyOf := map[string]string{"throttler": "adaptive", "keyed": "ratelimit", "sharded": "ratelimit"}
	for name, newFn := range news {
		policy := name
		if p, ok := policyOf[name]; ok {
			policy = p
		}
		for _, tk := range nils {
			err := newFn(tk)
			require.ErrorIs(t, err, rampart.ErrInvalidConfig, "%s with a nil %T", name, tk)
			testkit.RequireConfigError(t, err, policy, "Ticker")
		}
	}
	// NewWatchdog has no error to return: a nil pointer means the default.
	wd := timeout.NewWatchdog(time.Millisecond, (*rampart.NanoTicker)(nil))
	require.Same(t, rampart.DefaultTicker(), wd.Clock())
	require.NoError(t, wd.Close())
}

// TestNilAndZeroBudgetsAreConfigErrors: a Config.Budget that is a nil
// pointer or a zero value of package retry's budget types (not built by
// NewTokenBucket or NewRatioBudget: a zero TokenBucket never grants a
// retry, a zero RatioBudget divides by zero) is refused at New with a
// ConfigError on the Budget field, by every policy that takes a budget;
// budgets built by their constructors are accepted.
func TestNilAndZeroBudgetsAreConfigErrors(t *testing.T) {
	news := map[string]func(rampart.Budget) error{
		"retry": func(b rampart.Budget) error { _, err := retry.New(retry.Config{Budget: b}); return err },
		"hedge": func(b rampart.Budget) error {
			h, err := hedge.New(hedge.Config{Delay: time.Millisecond, Budget: b})
			if h != nil {
				require.NoError(t, h.Close())
			}
			return err
		},
	}
	bad := []rampart.Budget{(*retry.TokenBucket)(nil), (*retry.RatioBudget)(nil), &retry.TokenBucket{}, &retry.RatioBudget{}}
	tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	require.NoError(t, err)
	rb, err := retry.NewRatioBudget(retry.RatioBudgetConfig{})
	require.NoError(t, err)
	for name, newFn := range news {
		for _, b := range bad {
			err := newFn(b)
			require.ErrorIs(t, err, rampart.ErrInvalidConfig, "%s with a nil or zero %T", name, b)
			testkit.RequireConfigError(t, err, name, "Budget")
		}
		for _, b := range []rampart.Budget{nil, tb, rb} {
			require.NoError(t, newFn(b), "%s with %T", name, b)
		}
	}
}
