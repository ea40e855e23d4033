package pipeline_test

import (
	"context"
	"errors"
	"strings"
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

// newCountingTicker returns a manual clock that counts its reads: the
// policies take the counting ticker, the test moves the manual one.
func newCountingTicker() (*testkit.CountingTicker, *rampart.ManualTicker) {
	clock := rampart.NewManualTicker(1_000_000)
	return &testkit.CountingTicker{Base: clock}, clock
}

// readsSince returns a func that counts tick's reads since readsSince was
// called (constructors may read the clock).
func readsSince(tick *testkit.CountingTicker) func() int64 {
	start := tick.Reads()
	return func() int64 { return tick.Reads() - start }
}

var errBoom = errors.New("boom")

func ok(context.Context) error   { return nil }
func fail(context.Context) error { return errBoom }

func newBulkhead(t testing.TB, max int, tick rampart.Ticker) *bulkhead.Bulkhead {
	t.Helper()
	b, err := bulkhead.New(bulkhead.Config{Max: max, Name: "bh", Ticker: tick})
	require.NoError(t, err)
	return b
}

func TestEmptyPipelineCallsFnDirectlyWithoutClock(t *testing.T) {
	tick, _ := newCountingTicker()
	p, err := pipeline.New(pipeline.Config{Ticker: tick})
	require.NoError(t, err)
	require.NoError(t, p.Do(context.Background(), ok))
	require.ErrorIs(t, p.Do(context.Background(), fail), errBoom)
	v, err := pipeline.Call(context.Background(), p, func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	require.Equal(t, 42, v)
	require.Zero(t, tick.Reads(), "no policy needs time: no clock read")
}

func TestBulkheadRejectionAndRelease(t *testing.T) {
	tick, _ := newCountingTicker()
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Ticker: tick, Bulkhead: bh})
	require.NoError(t, err)

	// Hold the only permit from inside fn and try a second call.
	var inner pipeline.Outcome
	o := p.Try(context.Background(), func(ctx context.Context) error {
		inner = p.Try(ctx, ok)
		return nil
	})
	require.Equal(t, pipeline.OK, o.Code)
	require.Equal(t, pipeline.Rejected, inner.Code)
	require.Equal(t, pipeline.Bulkhead, inner.Policy)
	require.ErrorIs(t, inner.Err, bulkhead.ErrFull)
	require.ErrorIs(t, inner.Err, rampart.ErrRejected)
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.Zero(t, tick.Reads(), "a fail-fast bulkhead needs no time")
}

func TestPanicReleasesAndReraises(t *testing.T) {
	bh := newBulkhead(t, 1, nil)
	p, err := pipeline.New(pipeline.Config{Bulkhead: bh})
	require.NoError(t, err)
	type myPanic struct{}
	require.PanicsWithValue(t, myPanic{}, func() {
		_ = p.Do(context.Background(), func(context.Context) error { panic(myPanic{}) })
	})
	require.Equal(t, int64(0), bh.Stats().InFlight)
	require.NoError(t, p.Do(context.Background(), ok))
}

// TestGoexitReleasesEverything: fn calling runtime.Goexit ends the
// caller's goroutine (Do and Call do not return), and every permit is
// released: a bulkhead alone, and every policy but the timeout together,
// after which the pipeline admits again.
func TestGoexitReleasesEverything(t *testing.T) {
	t.Run("bulkhead/Do", func(t *testing.T) {
		bh := newBulkhead(t, 1, nil)
		p, err := pipeline.New(pipeline.Config{Bulkhead: bh})
		require.NoError(t, err)
		_, goexited := testkit.Run(func() {
			_ = p.Do(context.Background(), func(context.Context) error {
				testkit.Goexit()
				return nil
			})
		})
		require.True(t, goexited, "Do returned after runtime.Goexit")
		require.Equal(t, int64(0), bh.Stats().InFlight)
	})
	t.Run("full/Call", func(t *testing.T) {
		f := newFull(t)
		_, goexited := testkit.Run(func() {
			_, _ = pipeline.Call(context.Background(), f.p, func(context.Context) (int, error) {
				testkit.Goexit()
				return 0, nil
			})
		})
		require.True(t, goexited, "Call returned after runtime.Goexit")
		require.Equal(t, 0, f.al.InFlight())
		require.Equal(t, pipeline.OK, f.p.Try(context.Background(), ok).Code)
	})
}

func TestCanceledContextStartsNothing(t *testing.T) {
	bh := newBulkhead(t, 1, nil)
	p, err := pipeline.New(pipeline.Config{Bulkhead: bh})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	o := p.Try(ctx, func(context.Context) error { called = true; return nil })
	require.False(t, called)
	require.Equal(t, pipeline.Canceled, o.Code)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.Equal(t, uint64(0), bh.Stats().Rejected)
}

func TestAllocsBulkhead(t *testing.T) {
	bh := newBulkhead(t, 1, nil)
	p, err := pipeline.New(pipeline.Config{Bulkhead: bh})
	require.NoError(t, err)
	ctx := context.Background()
	testkit.WantAllocs(t, "Do", 0, func() { _ = p.Do(ctx, ok) })
	testkit.WantAllocs(t, "Call", 0, func() {
		_, _ = pipeline.Call(ctx, p, func(context.Context) (int, error) { return 1, nil })
	})
}

func newRateLimit(t testing.TB, rate float64, burst int, tick rampart.Ticker) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(ratelimit.Config{Rate: rate, Burst: burst, Name: "rl", Ticker: tick})
	require.NoError(t, err)
	return l
}

func TestRateLimitRejectionHintAndOneClockRead(t *testing.T) {
	tick, clock := newCountingTicker()
	rl := newRateLimit(t, 10, 1, tick) // one permit per 100 ms
	bh := newBulkhead(t, 4, tick)
	p, err := pipeline.New(pipeline.Config{RateLimit: rl, Bulkhead: bh})
	require.NoError(t, err)
	require.Same(t, tick, p.Ticker(), "the pipeline takes its policies' ticker")
	reads := readsSince(tick)

	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
	require.Equal(t, int64(1), reads(), "a rate limit needs t0 only")

	o := p.Try(context.Background(), ok)
	require.Equal(t, pipeline.Rejected, o.Code)
	require.Equal(t, pipeline.RateLimit, o.Policy)
	require.ErrorIs(t, o.Err, ratelimit.ErrLimited)
	require.Equal(t, 100*time.Millisecond, o.RetryAfter)
	require.Equal(t, int64(2), reads())
	require.Equal(t, int64(0), bh.Stats().InFlight)

	clock.Advance(40 * time.Millisecond)
	require.Equal(t, 60*time.Millisecond, p.Try(context.Background(), ok).RetryAfter)
	clock.Advance(60 * time.Millisecond)
	require.Equal(t, pipeline.OK, p.Try(context.Background(), ok).Code)
}

func TestTickerMismatchIsConfigError(t *testing.T) {
	rl := newRateLimit(t, 10, 1, rampart.NewManualTicker(0))
	_, err := pipeline.New(pipeline.Config{RateLimit: rl, Ticker: rampart.NewManualTicker(0)})
	testkit.RequireConfigError(t, err, "pipeline", "RateLimit")
}

// TestTickerMismatchNamesTheOddPolicy: a ticker mismatch names the policy
// (or policies) that is off and says what to do: the ones built without a
// Ticker (on rampart.DefaultTicker()) when the others or Config.Ticker
// share another; else the one on a Ticker of its own; Config.Ticker itself
// when it is the default and every policy shares another.
func TestTickerMismatchNamesTheOddPolicy(t *testing.T) {
	fields := []string{"Retry", "Breaker", "RateLimit", "Adaptive", "Shed", "Timeout", "Hedge"}
	pkgs := map[string]string{"Retry": "retry", "Breaker": "circuitbreaker", "RateLimit": "ratelimit",
		"Adaptive": "adaptive", "Shed": "shed", "Timeout": "timeout", "Hedge": "hedge"}
	m, m2 := rampart.NewManualTicker(1), rampart.NewManualTicker(1)
	onM, onM2, onDef := validPolicies(t, m), validPolicies(t, m2), validPolicies(t, nil)
	type tc struct {
		name   string
		cfg    pipeline.Config
		field  string // "" for no error
		reason []string
	}
	cases := []tc{
		{name: "all default", cfg: onDef},
		{name: "all default, Config.Ticker default", cfg: func() pipeline.Config { c := onDef; c.Ticker = rampart.DefaultTicker(); return c }()},
		{name: "all manual", cfg: onM},
		{name: "all manual, Config.Ticker same", cfg: func() pipeline.Config { c := onM; c.Ticker = m; return c }()},
		{name: "all manual, Config.Ticker default", cfg: func() pipeline.Config { c := onM; c.Ticker = rampart.DefaultTicker(); return c }(),
			field: "Ticker", reason: []string{"is rampart.DefaultTicker(), but every policy uses a *rampart.ManualTicker", "leave Config.Ticker nil"}},
		{name: "all default, Config.Ticker manual", cfg: func() pipeline.Config { c := onDef; c.Ticker = m; return c }(),
			field: "Retry", reason: []string{"was built without a Ticker (rampart.DefaultTicker()), as were Breaker, RateLimit, Adaptive, Shed, Timeout, Hedge; the pipeline's Config.Ticker is a *rampart.ManualTicker: pass the same Ticker to retry.New, circuitbreaker.New, ratelimit.New, adaptive.New, shed.New, timeout.New, hedge.New"}},
		{name: "Retry and Timeout default", cfg: withPolicies(onM, onDef, "Retry", "Timeout"),
			field: "Retry", reason: []string{"was built without a Ticker (rampart.DefaultTicker()), as was Timeout; the other policies (Breaker, RateLimit, Adaptive, Shed, Hedge) use a *rampart.ManualTicker: pass the same Ticker to retry.New, timeout.New"}},
	}
	for _, f := range fields {
		others := []string{}
		for _, g := range fields {
			if g != f {
				others = append(others, g)
			}
		}
		cases = append(cases,
			tc{name: f + " default", cfg: withPolicies(onM, onDef, f), field: f, reason: []string{
				"was built without a Ticker (rampart.DefaultTicker()); the other policies (" + strings.Join(others, ", ") +
					") use a *rampart.ManualTicker: pass the same Ticker to " + pkgs[f] + ".New"}},
			tc{name: f + " default, Config.Ticker set", cfg: func() pipeline.Config { c := withPolicies(onM, onDef, f); c.Ticker = m; return c }(),
				field: f, reason: []string{"was built without a Ticker (rampart.DefaultTicker()); the pipeline's Config.Ticker is a *rampart.ManualTicker, as are the Tickers of " +
					strings.Join(others, ", ") + ": pass the same Ticker to " + pkgs[f] + ".New"}},
			tc{name: f + " on another", cfg: withPolicies(onM, onM2, f), field: f, reason: []string{
				"uses a different Ticker (a *rampart.ManualTicker) than " + others[0] + " (a *rampart.ManualTicker"}},
			tc{name: f + " on another, Config.Ticker set", cfg: func() pipeline.Config { c := withPolicies(onM, onM2, f); c.Ticker = m; return c }(),
				field: f, reason: []string{"uses a different Ticker (a *rampart.ManualTicker) than the pipeline's Config.Ticker (a *rampart.ManualTicker"}},
			tc{name: f + " alone on the default, Config.Ticker set", cfg: func() pipeline.Config {
				c := withPolicies(pipeline.Config{Idempotent: true}, onDef, f)
				c.Ticker = m
				return c
			}(), field: f, reason: []string{"was built without a Ticker (rampart.DefaultTicker()); the pipeline's Config.Ticker is a *rampart.ManualTicker: pass the same Ticker to " + pkgs[f] + ".New"}},
			tc{name: f + " alone on a manual", cfg: withPolicies(pipeline.Config{Idempotent: true}, onM, f)},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := pipeline.New(c.cfg)
			if c.field == "" {
				require.NoError(t, err)
				require.NotNil(t, p)
				return
			}
			testkit.RequireConfigError(t, err, "pipeline", c.field)
			var ce *rampart.ConfigError
			require.ErrorAs(t, err, &ce)
			for _, r := range c.reason {
				require.Contains(t, ce.Reason, r)
			}
			require.Contains(t, ce.Reason, "readings of different tickers are not comparable")
		})
	}
}

// TestZeroValuePoliciesAreConfigErrors: a policy that its package's New did
// not build (a zero value, &bulkhead.Bulkhead{}) is refused by New with a
// ConfigError naming its field, instead of a pipeline that panics in a call
// (a zero rate limiter or timeout) or returns nil without running fn (a
// zero bulkhead). Every policy field is checked, alone and next to valid
// policies.
func TestZeroValuePoliciesAreConfigErrors(t *testing.T) {
	for field, cfg := range map[string]pipeline.Config{
		"Retry":     {Retry: &retry.Policy{}},
		"Breaker":   {Breaker: &circuitbreaker.Breaker{}},
		"RateLimit": {RateLimit: &ratelimit.Limiter{}},
		"Bulkhead":  {Bulkhead: &bulkhead.Bulkhead{}},
		"Adaptive":  {Adaptive: &adaptive.Limiter{}},
		"Timeout":   {Timeout: &timeout.Timeout{}},
		"Hedge":     {Hedge: &hedge.Hedger{}, Idempotent: true},
		"Shed":      {Shed: &shed.Shedder{}},
	} {
		t.Run(field, func(t *testing.T) {
			p, err := pipeline.New(cfg)
			testkit.RequireConfigError(t, err, "pipeline", field)
			require.Nil(t, p)

			// Next to valid policies on the same ticker, the zero one is
			// still the one named.
			full := withPolicies(validPolicies(t, rampart.NewManualTicker(1)), cfg, field)
			_, err = pipeline.New(full)
			testkit.RequireConfigError(t, err, "pipeline", field)
		})
	}
	// The same policies, built by their New, are accepted together.
	p, err := pipeline.New(validPolicies(t, rampart.NewManualTicker(1)))
	require.NoError(t, err)
	require.NotNil(t, p)
}

// withPolicies returns cfg with the policies named by fields (Config's
// field names) taken from from.
func withPolicies(cfg, from pipeline.Config, fields ...string) pipeline.Config {
	for _, f := range fields {
		switch f {
		case "Retry":
			cfg.Retry = from.Retry
		case "Breaker":
			cfg.Breaker = from.Breaker
		case "RateLimit":
			cfg.RateLimit = from.RateLimit
		case "Bulkhead":
			cfg.Bulkhead = from.Bulkhead
		case "Adaptive":
			cfg.Adaptive = from.Adaptive
		case "Timeout":
			cfg.Timeout = from.Timeout
		case "Hedge":
			cfg.Hedge = from.Hedge
		case "Shed":
			cfg.Shed = from.Shed
		default:
			panic("withPolicies: no policy field " + f)
		}
	}
	return cfg
}

// validPolicies returns a Config with every policy built by its New on tick.
func validPolicies(t *testing.T, tick rampart.Ticker) pipeline.Config {
	t.Helper()
	rt, err := retry.New(retry.Config{Ticker: tick})
	require.NoError(t, err)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Ticker: tick})
	require.NoError(t, err)
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1000, Burst: 10, Ticker: tick})
	require.NoError(t, err)
	al, err := adaptive.New(adaptive.Config{Ticker: tick})
	require.NoError(t, err)
	to := newTimeout(t, tick, time.Second, timeout.ModeDeadline)
	hg, err := hedge.New(hedge.Config{Delay: time.Millisecond, Ticker: tick})
	require.NoError(t, err)
	t.Cleanup(func() { hg.Close() })
	sh, err := shed.New(shed.Config{Ticker: tick, Source: shed.SourceFunc(func(int64, *shed.Signals) {})})
	require.NoError(t, err)
	return pipeline.Config{Retry: rt, Breaker: cb, RateLimit: rl, Bulkhead: newBulkhead(t, 4, tick),
		Adaptive: al, Shed: sh, Timeout: to, Hedge: hg, Idempotent: true}
}
