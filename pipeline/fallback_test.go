package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// fbWorld is one pipeline of every policy on a manual clock, for the
// fallback's table: each ending is provoked on it and each policy's Stats
// checked after.
type fbWorld struct {
	tick *rampart.ManualTicker
	bud  *testkit.Budget
	rt   *retry.Policy
	cb   *circuitbreaker.Breaker
	rl   *ratelimit.Limiter
	bh   *bulkhead.Bulkhead
	al   *adaptive.Limiter
	to   *timeout.Timeout
	p    *pipeline.Pipeline
}

var errRetryable = errors.New("retryable")

func newFBWorld(t testing.TB) *fbWorld {
	t.Helper()
	w := &fbWorld{tick: rampart.NewManualTicker(1_000_000), bud: &testkit.Budget{}}
	var err error
	w.rt = newRetry(t, w.tick, func(c *retry.Config) {
		c.MaxAttempts = 2
		c.Budget = w.bud
		c.ShouldRetry = func(err error) bool { return errors.Is(err, errRetryable) || errors.Is(err, timeout.ErrTimeout) }
	})
	w.cb = newBreaker(t, w.tick, func(c *circuitbreaker.Config) { c.ConsecutiveFailures = 100 })
	w.rl, err = ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1000, Ticker: w.tick, CountStats: true})
	require.NoError(t, err)
	w.bh = newBulkhead(t, 1, w.tick)
	w.al = newAdaptive(t, w.tick, 2)
	w.to, err = timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: w.tick})
	require.NoError(t, err)
	w.p, err = pipeline.New(pipeline.Config{Retry: w.rt, Breaker: w.cb, RateLimit: w.rl, Bulkhead: w.bh, Adaptive: w.al, Timeout: w.to})
	require.NoError(t, err)
	return w
}

// stats is every policy's counts that an ending changes.
type fbStats struct {
	cbFailures, cbRejected, rlRejected, bhRejected, alRejected uint64
	retries, giveUps, budgetRefused, timeouts                  uint64
	bhInFlight                                                 int64
	alInFlight                                                 int
}

func (w *fbWorld) stats() fbStats {
	cb, rl, bh, al, rt, to := w.cb.Stats(), w.rl.Stats(), w.bh.Stats(), w.al.Stats(), w.rt.Stats(), w.to.Stats()
	return fbStats{cb.Failures, cb.Rejected, rl.Rejected, bh.Rejected, al.Rejected,
		rt.Retries, rt.GiveUps, rt.BudgetRefused, to.Timeouts, bh.InFlight, al.InFlight}
}

// sub returns the counts since before (in-flight counts as they are).
func (s fbStats) sub(before fbStats) fbStats {
	return fbStats{s.cbFailures - before.cbFailures, s.cbRejected - before.cbRejected, s.rlRejected - before.rlRejected,
		s.bhRejected - before.bhRejected, s.alRejected - before.alRejected, s.retries - before.retries,
		s.giveUps - before.giveUps, s.budgetRefused - before.budgetRefused, s.timeouts - before.timeouts,
		s.bhInFlight, s.alInFlight}
}

// fbEnding provokes one way a call ends.
type fbEnding struct {
	name     string
	provoke  func(w *fbWorld) (ctx context.Context, fn func(context.Context) (string, error), undo func())
	code     pipeline.Code
	policy   pipeline.Kind
	answered bool    // the default When answers it
	panics   bool    // fn panics: re-raised, never answered
	delta    fbStats // each policy's counts after the call (in-flight: 0)
}

var errUser = errors.New("user error")

func fbEndings() []fbEnding {
	bg := context.Background()
	okFn := func(context.Context) (string, error) { return "fresh", nil }
	none := func() {}
	return []fbEnding{
		{name: "success", code: pipeline.OK,
			provoke: func(*fbWorld) (context.Context, func(context.Context) (string, error), func()) { return bg, okFn, none }},
		{name: "user error", code: pipeline.Failed, delta: fbStats{cbFailures: 1},
			provoke: func(*fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				return bg, func(context.Context) (string, error) { return "partial", errUser }, none
			}},
		{name: "breaker open", code: pipeline.Rejected, policy: pipeline.Breaker, answered: true, delta: fbStats{cbRejected: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				require.True(setupT(), w.cb.TransitionTo(circuitbreaker.Open))
				return bg, okFn, func() { w.cb.TransitionTo(circuitbreaker.Closed) }
			}},
		{name: "rate limited", code: pipeline.Rejected, policy: pipeline.RateLimit, answered: true, delta: fbStats{rlRejected: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				for w.rl.Allow() {
				}
				return bg, okFn, func() { w.tick.Advance(time.Hour) }
			}},
		{name: "bulkhead full", code: pipeline.Rejected, policy: pipeline.Bulkhead, answered: true, delta: fbStats{bhRejected: 1, bhInFlight: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				require.NoError(setupT(), w.bh.Acquire())
				return bg, okFn, w.bh.Release
			}},
		{name: "adaptive full", code: pipeline.Rejected, policy: pipeline.Adaptive, answered: true, delta: fbStats{alRejected: 1, alInFlight: 2},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				p1, err1 := w.al.Acquire()
				p2, err2 := w.al.Acquire()
				require.NoError(setupT(), errors.Join(err1, err2))
				return bg, okFn, func() { w.al.Release(p1, rampart.Ignored); w.al.Release(p2, rampart.Ignored) }
			}},
		{name: "retry budget", code: pipeline.Rejected, policy: pipeline.Retry, answered: true,
			delta: fbStats{cbFailures: 1, giveUps: 1, budgetRefused: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				w.bud.SetAllow(false)
				return bg, func(context.Context) (string, error) { return "", errRetryable }, func() { w.bud.SetAllow(true) }
			}},
		{name: "timed out", code: pipeline.TimedOut, policy: pipeline.Timeout, answered: true,
			delta: fbStats{cbFailures: 2, retries: 1, giveUps: 1, timeouts: 2},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				return bg, func(context.Context) (string, error) { w.tick.Advance(2 * time.Second); return "late", nil }, none
			}},
		{name: "retry exhausted", code: pipeline.Failed, policy: pipeline.Retry, answered: true, delta: fbStats{cbFailures: 2, retries: 1, giveUps: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				return bg, func(context.Context) (string, error) { return "", errRetryable }, none
			}},
		{name: "canceled", code: pipeline.Canceled,
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				ctx, cancel := context.WithCancel(bg)
				cancel()
				return ctx, okFn, none
			}},
		{name: "panic", panics: true, delta: fbStats{cbFailures: 1},
			provoke: func(w *fbWorld) (context.Context, func(context.Context) (string, error), func()) {
				return bg, func(context.Context) (string, error) { panic("fn bug") }, none
			}},
	}
}

// setupT is the require.TestingT of the provoke funcs, which run inside a
// subtest's bubble: a failed setup panics, and the subtest reports it.
func setupT() require.TestingT { return panicT{} }

type panicT struct{}

func (panicT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (panicT) FailNow()                          { panic("setup failed") }

// fbKind is a kind of fallback answer, or none.
type fbKind struct {
	name   string
	config func(p *pipeline.Pipeline) pipeline.FallbackConfig[string]
	answer string // what an answered call returns
	stale  bool
}

func fbKinds() []fbKind {
	return []fbKind{
		{name: "none"},
		{name: "value", answer: "fixed", config: func(p *pipeline.Pipeline) pipeline.FallbackConfig[string] {
			return pipeline.FallbackConfig[string]{Pipeline: p, Value: new("fixed")}
		}},
		{name: "func", answer: "func", config: func(p *pipeline.Pipeline) pipeline.FallbackConfig[string] {
			return pipeline.FallbackConfig[string]{Pipeline: p, Func: func(_ context.Context, o pipeline.Outcome) (string, error) {
				if o.Err == nil || o.FellBack {
					return "", errors.New("the func saw no cause")
				}
				return "func", nil
			}}
		}},
		{name: "stale", answer: "fresh", stale: true, config: func(p *pipeline.Pipeline) pipeline.FallbackConfig[string] {
			return pipeline.FallbackConfig[string]{Pipeline: p, Stale: true, MaxAge: time.Minute}
		}},
	}
}

// TestFallbackAnswersEveryEndingItSelects runs every way a call can end
// through every kind of fallback: the default When answers the policies'
// endings (each rejection, a timeout, the retry giving up) and not fn's own
// error, a cancellation or a panic; the answer's value and error, the
// Outcome's FellBack, Stale and Cause, and every policy's Stats, which count
// the real ending whether or not the fallback answered.
func TestFallbackAnswersEveryEndingItSelects(t *testing.T) {
	for _, e := range fbEndings() {
		for _, k := range fbKinds() {
			t.Run(e.name+"/"+k.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { // the retry's sleeps run on the bubble's clock
					w := newFBWorld(t)
					try := func(ctx context.Context, fn func(context.Context) (string, error)) (string, pipeline.Outcome) {
						return pipeline.TryCall(ctx, w.p, fn)
					}
					if k.config != nil {
						fb, err := pipeline.NewFallback(k.config(w.p))
						require.NoError(t, err)
						try = fb.Try
					}
					// A success first: the last good value of the stale kind.
					v, o := try(context.Background(), func(context.Context) (string, error) { return "fresh", nil })
					require.Equal(t, "fresh", v)
					require.Equal(t, pipeline.OK, o.Code)
					w.tick.Advance(time.Second)

					ctx, fn, undo := e.provoke(w)
					before := w.stats()
					if e.panics {
						require.PanicsWithValue(t, "fn bug", func() { try(ctx, fn) })
					} else {
						v, o = try(ctx, fn)
						require.Equal(t, e.code, o.Code, "%v", o.Err)
						require.Equal(t, e.policy, o.Policy)
						if e.answered && k.config != nil {
							require.True(t, o.FellBack)
							require.Equal(t, k.answer, v)
							require.NoError(t, o.Err)
							require.Error(t, o.Cause)
							require.Equal(t, k.stale, o.Stale)
							if e.code == pipeline.Rejected {
								require.ErrorIs(t, o.Cause, rampart.ErrRejected)
							}
						} else {
							require.False(t, o.FellBack)
							require.False(t, o.Stale)
							require.NoError(t, o.Cause)
							if e.code == pipeline.OK {
								require.Equal(t, "fresh", v)
							} else {
								require.Error(t, o.Err)
							}
						}
					}
					got := w.stats().sub(before)
					undo()
					require.Equal(t, e.delta, got)
					require.Zero(t, w.stats().bhInFlight, "a permit leaked")
					require.Zero(t, w.stats().alInFlight, "a permit leaked")
				})
			})
		}
	}
}

// TestFallbackCallReturnsTheAnswer: Call returns the fallback's value and
// error; DoFallback's Do the Func's error.
func TestFallbackCallReturnsTheAnswer(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	p, err := pipeline.New(pipeline.Config{RateLimit: newRateLimit(t, 1e-9, 1, tick)})
	require.NoError(t, err)
	require.True(t, p.Config().RateLimit.Allow())
	errDegraded := errors.New("degraded")
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: p,
		Func: func(_ context.Context, o pipeline.Outcome) (int, error) {
			return 7, fmt.Errorf("%w: %w", errDegraded, o.Err)
		}})
	require.NoError(t, err)
	v, err := fb.Call(context.Background(), func(context.Context) (int, error) { return 1, nil })
	require.Equal(t, 7, v)
	require.ErrorIs(t, err, errDegraded)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	v, err = fb.CallHedged(context.Background(), func(context.Context) (int, error) { return 1, nil })
	require.Equal(t, 7, v)
	require.ErrorIs(t, err, errDegraded)
	v, o := fb.TryHedged(context.Background(), func(context.Context) (int, error) { return 1, nil })
	require.Equal(t, 7, v)
	require.True(t, o.FellBack)
	require.ErrorIs(t, o.Cause, ratelimit.ErrLimited)

	calls := 0
	dfb, err := pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: p,
		Func: func(_ context.Context, o pipeline.Outcome) error { calls++; return nil }})
	require.NoError(t, err)
	require.NoError(t, dfb.Do(context.Background(), ok))
	o = dfb.Try(context.Background(), ok)
	require.Equal(t, pipeline.Rejected, o.Code)
	require.True(t, o.FellBack)
	require.NoError(t, o.Err)
	require.ErrorIs(t, o.Cause, ratelimit.ErrLimited)
	require.Equal(t, 2, calls)
}

// TestFallbackWhenSelects: RejectionsBy answers only the kinds named,
// Failures only the errors Failed accepts, Cancellations only when asked.
func TestFallbackWhenSelects(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 1, tick)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	require.NoError(t, err)
	ctx := context.Background()
	mk := func(cfg pipeline.FallbackConfig[string]) *pipeline.Fallback[string] {
		cfg.Pipeline, cfg.Value = p, new("fb")
		fb, err := pipeline.NewFallback(cfg)
		require.NoError(t, err)
		return fb
	}
	okFn := func(context.Context) (string, error) { return "ok", nil }

	onlyBreaker := mk(pipeline.FallbackConfig[string]{When: pipeline.RejectionsBy(pipeline.Breaker)})
	require.NoError(t, bh.Acquire())
	v, o := onlyBreaker.Try(ctx, okFn)
	require.Equal(t, pipeline.Bulkhead, o.Policy)
	require.False(t, o.FellBack)
	require.Empty(t, v)
	bh.Release()
	require.True(t, cb.TransitionTo(circuitbreaker.Open))
	v, o = onlyBreaker.Try(ctx, okFn)
	require.True(t, o.FellBack)
	require.Equal(t, "fb", v)
	require.True(t, cb.TransitionTo(circuitbreaker.Closed))

	errNotFound := errors.New("not found")
	failures := mk(pipeline.FallbackConfig[string]{Failed: func(err error) bool { return errors.Is(err, errBoom) }})
	v, o = failures.Try(ctx, func(context.Context) (string, error) { return "", errBoom })
	require.True(t, o.FellBack)
	require.Equal(t, "fb", v)
	require.Equal(t, pipeline.Failed, o.Code)
	require.ErrorIs(t, o.Cause, errBoom)
	v, err = failures.Call(ctx, func(context.Context) (string, error) { return "", errNotFound })
	require.ErrorIs(t, err, errNotFound)
	require.Empty(t, v)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, o = mk(pipeline.FallbackConfig[string]{}).Try(canceled, okFn)
	require.False(t, o.FellBack, "a canceled caller is answered only when asked")
	v, o = mk(pipeline.FallbackConfig[string]{When: pipeline.Cancellations}).Try(canceled, okFn)
	require.True(t, o.FellBack)
	require.Equal(t, "fb", v)
	require.Equal(t, pipeline.Canceled, o.Code)

	require.True(t, pipeline.Rejections.Selects(pipeline.Outcome{Code: pipeline.Rejected, Policy: pipeline.Adaptive}))
	require.False(t, pipeline.Timeouts.Selects(pipeline.Outcome{}))
}

// TestFallbackStaleExpires: the last good value is served while it is no
// older than MaxAge on the pipeline's ticker, then no more (the call ends
// as without a fallback, or with Func's answer when set); each success
// renews it, and a success at the same reading keeps the stored value.
func TestFallbackStaleExpires(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	cb := newBreaker(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Breaker: cb})
	require.NoError(t, err)
	ctx := context.Background()
	stale, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Stale: true, MaxAge: 10 * time.Second})
	require.NoError(t, err)
	staleOrFunc, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Stale: true, MaxAge: 10 * time.Second,
		Func: func(context.Context, pipeline.Outcome) (string, error) { return "func", nil }})
	require.NoError(t, err)
	ret := func(s string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return s, nil }
	}

	v, o := stale.Try(ctx, ret("v1"))
	require.Equal(t, "v1", v)
	require.False(t, o.FellBack)
	v, _ = stale.Try(ctx, ret("v1 again"))
	require.Equal(t, "v1 again", v)
	v, _ = staleOrFunc.Try(ctx, ret("w1"))
	require.Equal(t, "w1", v)

	require.True(t, cb.TransitionTo(circuitbreaker.ForcedOpen))
	v, o = stale.Try(ctx, ret("unreached"))
	require.Equal(t, "v1", v, "the value stored first at this reading")
	require.True(t, o.FellBack)
	require.True(t, o.Stale)
	require.ErrorIs(t, o.Cause, circuitbreaker.ErrOpen)

	tick.Advance(10 * time.Second) // exactly MaxAge: still served
	v, o = stale.Try(ctx, ret("unreached"))
	require.Equal(t, "v1", v)
	require.True(t, o.Stale)
	tick.Advance(1) // older than MaxAge: not served
	v, o = stale.Try(ctx, ret("unreached"))
	require.Empty(t, v)
	require.False(t, o.FellBack)
	require.ErrorIs(t, o.Err, circuitbreaker.ErrOpen)
	v, o = staleOrFunc.Try(ctx, ret("unreached"))
	require.Equal(t, "func", v)
	require.True(t, o.FellBack)
	require.False(t, o.Stale)

	require.True(t, cb.TransitionTo(circuitbreaker.Closed))
	v, _ = stale.Try(ctx, ret("v2"))
	require.Equal(t, "v2", v)
	require.True(t, cb.TransitionTo(circuitbreaker.ForcedOpen))
	tick.Advance(5 * time.Second)
	v, o = stale.Try(ctx, ret("unreached"))
	require.Equal(t, "v2", v, "renewed by the latest success")
	require.True(t, o.Stale)
}

// TestFallbackPanicOrGoexitLeaksNothing: a Func that panics or calls
// runtime.Goexit runs after every permit was released; the panic goes on
// unchanged, nothing is released twice, and the policies admit again.
func TestFallbackPanicOrGoexitLeaksNothing(t *testing.T) {
	for _, goexit := range []bool{false, true} {
		t.Run(fmt.Sprint("goexit=", goexit), func(t *testing.T) {
			w := newFBWorld(t)
			fb, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: w.p,
				Func: func(context.Context, pipeline.Outcome) (string, error) {
					if goexit {
						testkit.Goexit()
					}
					panic("fallback bug")
				}})
			require.NoError(t, err)
			dfb, err := pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: w.p,
				Func: func(context.Context, pipeline.Outcome) error {
					if goexit {
						testkit.Goexit()
					}
					panic("fallback bug")
				}})
			require.NoError(t, err)
			require.True(t, w.cb.TransitionTo(circuitbreaker.Open))
			for _, call := range []func(){
				func() { _, _ = fb.Call(context.Background(), func(context.Context) (string, error) { return "", nil }) },
				func() { _ = dfb.Do(context.Background(), ok) },
			} {
				panicked, goexited := testkit.Run(call)
				require.Equal(t, goexit, goexited)
				if !goexit {
					require.Equal(t, "fallback bug", panicked)
				}
			}
			require.True(t, w.cb.TransitionTo(circuitbreaker.Closed))
			// A bulkhead rejection: the breaker's permit was taken and
			// returned before the fallback ran.
			require.NoError(t, w.bh.Acquire())
			panicked, _ := testkit.Run(func() {
				_, _ = fb.Call(context.Background(), func(context.Context) (string, error) { return "", nil })
			})
			require.True(t, panicked != nil || goexit)
			w.bh.Release()
			st := w.stats()
			require.Zero(t, st.bhInFlight)
			require.Zero(t, st.alInFlight)
			require.Zero(t, w.cb.Stats().HalfOpenInFlight)
			require.Equal(t, uint64(2), st.cbRejected)
			require.Equal(t, uint64(1), st.bhRejected)
			v, o := fb.Try(context.Background(), func(context.Context) (string, error) { return "again", nil })
			require.Equal(t, pipeline.OK, o.Code)
			require.Equal(t, "again", v)
		})
	}
}

// TestFallbackConfigErrors: every invalid FallbackConfig and
// DoFallbackConfig is a ConfigError from New.
func TestFallbackConfigErrors(t *testing.T) {
	p, err := pipeline.New(pipeline.Config{})
	require.NoError(t, err)
	fn := func(context.Context, pipeline.Outcome) (int, error) { return 0, nil }
	pred := func(error) bool { return true }
	for _, c := range []struct {
		name, field string
		cfg         pipeline.FallbackConfig[int]
	}{
		{"no pipeline", "FallbackConfig.Pipeline", pipeline.FallbackConfig[int]{Value: new(1)}},
		{"no answer", "FallbackConfig.Value", pipeline.FallbackConfig[int]{Pipeline: p}},
		{"value and func", "FallbackConfig.Func", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), Func: fn}},
		{"negative max age", "FallbackConfig.MaxAge", pipeline.FallbackConfig[int]{Pipeline: p, Stale: true, MaxAge: -1}},
		{"stale without max age", "FallbackConfig.MaxAge", pipeline.FallbackConfig[int]{Pipeline: p, Stale: true}},
		{"max age without stale", "FallbackConfig.MaxAge", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), MaxAge: time.Second}},
		{"failures without predicate", "FallbackConfig.Failed", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), When: pipeline.Failures}},
		{"predicate never asked", "FallbackConfig.Failed", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), When: pipeline.Rejections, Failed: pred}},
		{"timeout is no rejection", "FallbackConfig.When", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), When: pipeline.RejectionsBy(pipeline.Timeout)}},
		{"none is no rejection", "FallbackConfig.When", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), When: pipeline.RejectionsBy(pipeline.None)}},
		{"unknown kind", "FallbackConfig.When", pipeline.FallbackConfig[int]{Pipeline: p, Value: new(1), When: pipeline.RejectionsBy(pipeline.Kind(200))}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fb, err := pipeline.NewFallback(c.cfg)
			require.Nil(t, fb)
			require.ErrorIs(t, err, rampart.ErrInvalidConfig)
			testkit.RequireConfigError(t, err, "pipeline", c.field)
		})
	}
	for _, c := range []struct {
		name, field string
		cfg         pipeline.DoFallbackConfig
	}{
		{"no pipeline", "DoFallbackConfig.Pipeline", pipeline.DoFallbackConfig{Func: func(context.Context, pipeline.Outcome) error { return nil }}},
		{"no func", "DoFallbackConfig.Func", pipeline.DoFallbackConfig{Pipeline: p}},
		{"failures without predicate", "DoFallbackConfig.Failed", pipeline.DoFallbackConfig{Pipeline: p, When: pipeline.Failures,
			Func: func(context.Context, pipeline.Outcome) error { return nil }}},
	} {
		t.Run("Do/"+c.name, func(t *testing.T) {
			fb, err := pipeline.NewDoFallback(c.cfg)
			require.Nil(t, fb)
			testkit.RequireConfigError(t, err, "pipeline", c.field)
		})
	}
}

// TestAllocsFallbackSuccess: a success through a fallback allocates
// nothing, as the same call through the pipeline (a capturing closure
// too); a rejection answered by a value allocates nothing either; Stale
// stores one value per new reading and none at the same reading.
func TestAllocsFallbackSuccess(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb := newBreaker(t, tick, nil)
	bh := newBulkhead(t, 4, tick)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh})
	require.NoError(t, err)
	ctx := context.Background()
	value, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Value: new("fb")})
	require.NoError(t, err)
	fn, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p,
		Func: func(context.Context, pipeline.Outcome) (string, error) { return "fb", nil }})
	require.NoError(t, err)
	stale, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p, Stale: true, MaxAge: time.Minute})
	require.NoError(t, err)
	dfb, err := pipeline.NewDoFallback(pipeline.DoFallbackConfig{Pipeline: p,
		Func: func(context.Context, pipeline.Outcome) error { return nil }})
	require.NoError(t, err)
	n := 0
	capture := func(context.Context) (string, error) { n++; return "ok", nil }
	testkit.WantAllocs(t, "Value.Call", 0, func() { _, _ = value.Call(ctx, capture) })
	testkit.WantAllocs(t, "Value.Call, a capturing closure built per call", 0, func() {
		_, _ = value.Call(ctx, func(context.Context) (string, error) { n++; return "ok", nil })
	})
	testkit.WantAllocs(t, "Func.Try", 0, func() { _, _ = fn.Try(ctx, capture) })
	testkit.WantAllocs(t, "Stale.Call at one reading", 0, func() { _, _ = stale.Call(ctx, capture) })
	testkit.WantAllocs(t, "Stale.Call at a new reading", 1, func() { tick.Advance(1); _, _ = stale.Call(ctx, capture) })
	testkit.WantAllocs(t, "DoFallback.Do", 0, func() { _ = dfb.Do(ctx, func(context.Context) error { n++; return nil }) })
	require.True(t, cb.TransitionTo(circuitbreaker.ForcedOpen))
	testkit.WantAllocs(t, "Value.Call rejected", 0, func() { _, _ = value.Call(ctx, capture) })
	testkit.WantAllocs(t, "Stale.Call rejected", 0, func() { _, _ = stale.Call(ctx, capture) })
}

// TestFallbackBytes: a Fallback[string] and its stale store, padded and
// Compact (64-bit).
func TestFallbackBytes(t *testing.T) {
	if ptrSize := 32 << (^uintptr(0) >> 63); ptrSize != 64 {
		t.Skip("sizes are for 64-bit")
	}
	p, err := pipeline.New(pipeline.Config{})
	require.NoError(t, err)
	mk := func(cfg pipeline.FallbackConfig[string]) func() any {
		cfg.Pipeline = p
		return func() any {
			fb, err := pipeline.NewFallback(cfg)
			if err != nil {
				panic(err)
			}
			return fb
		}
	}
	testkit.WantBytes(t, "Value", 64, mk(pipeline.FallbackConfig[string]{Value: new("fb")}))
	testkit.WantBytes(t, "Stale", 64+2*int64(pad.LineSize), mk(pipeline.FallbackConfig[string]{Stale: true, MaxAge: time.Second}))
	testkit.WantBytes(t, "Stale Compact", 64+16, mk(pipeline.FallbackConfig[string]{Stale: true, MaxAge: time.Second, Compact: true}))
}

// TestFallbackStaleStoreRace: concurrent successes store and concurrent
// rejections serve the last good value without a data race.
func TestFallbackStaleStoreRace(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	bh := newBulkhead(t, 2, tick)
	p, err := pipeline.New(pipeline.Config{Bulkhead: bh, Ticker: tick})
	require.NoError(t, err)
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[[]int]{Pipeline: p, Stale: true, MaxAge: time.Hour})
	require.NoError(t, err)
	_, _ = fb.Call(context.Background(), func(context.Context) ([]int, error) { return []int{-1, -1}, nil })
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				tick.Advance(1)
				v, o := fb.Try(context.Background(), func(context.Context) ([]int, error) { return []int{g, i}, nil })
				if o.Code == pipeline.Rejected {
					require.True(t, o.Stale)
				}
				require.Len(t, v, 2)
			}
		})
	}
	wg.Wait()
	require.Zero(t, bh.Stats().InFlight)
}

// TestFallbackLeavesACanceledCallerDuringAnOverrun: the caller's context
// ends during an attempt that then overruns the timeout: a fallback with
// the default When does not answer (the call is Canceled), and its Func
// never runs with a done context.
func TestFallbackLeavesACanceledCallerDuringAnOverrun(t *testing.T) {
	tick := rampart.NewManualTicker(1_000_000)
	to, err := timeout.New(timeout.Config{Duration: time.Second, Mode: timeout.ModeSoft, Ticker: tick})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Timeout: to})
	require.NoError(t, err)
	called := false
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[string]{Pipeline: p,
		Func: func(context.Context, pipeline.Outcome) (string, error) {
			called = true
			return "fallback", nil
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	v, o := fb.Try(ctx, func(ctx context.Context) (string, error) {
		cancel()                      // the caller leaves
		tick.Advance(2 * time.Second) // the attempt overruns
		return "", ctx.Err()
	})
	require.False(t, called, "Func ran for a caller that left")
	require.False(t, o.FellBack, "%+v", o)
	require.Equal(t, pipeline.Canceled, o.Code)
	require.Empty(t, v)
}

// TestFallbackLeavesANestedGiveUpToFailures: fn's own error that carries
// another pipeline's retry give-up (a nested pipeline, an HTTP client's
// transport) is fn's failure in a pipeline without a retry (Code Failed,
// Policy None): not RetriesExhausted, so a default fallback does not
// answer it. This pipeline's own retry giving up is (Policy Retry).
func TestFallbackLeavesANestedGiveUpToFailures(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	always := func(error) bool { return true }
	inner, err := pipeline.New(pipeline.Config{Retry: newRetry(t, tick, func(c *retry.Config) { c.MaxAttempts, c.ShouldRetry = 2, always })})
	require.NoError(t, err)
	outer, err := pipeline.New(pipeline.Config{Ticker: tick}) // no retry
	require.NoError(t, err)
	fb, err := pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: outer, Value: new(-1)})
	require.NoError(t, err)
	down := errors.New("db down")
	nested := func(ctx context.Context) (int, error) {
		return 0, inner.Do(ctx, func(context.Context) error { return down })
	}
	v, o := fb.Try(context.Background(), nested)
	require.False(t, o.FellBack, "fn's failure answered: %d, %+v", v, o)
	require.ErrorIs(t, o.Err, retry.ErrExhausted, "the inner give-up, unchanged")
	require.Equal(t, pipeline.Failed, o.Code)
	require.Equal(t, pipeline.None, o.Policy)
	require.False(t, pipeline.RetriesExhausted.Selects(o))
	require.True(t, pipeline.Failures.Selects(o))

	// The outer pipeline's own retry gives up on the same error: its
	// ending, answered by default.
	outer, err = pipeline.New(pipeline.Config{Retry: newRetry(t, tick, func(c *retry.Config) { c.MaxAttempts, c.ShouldRetry = 2, always })})
	require.NoError(t, err)
	fb, err = pipeline.NewFallback(pipeline.FallbackConfig[int]{Pipeline: outer, Value: new(-1)})
	require.NoError(t, err)
	v, o = fb.Try(context.Background(), nested)
	require.Equal(t, pipeline.Failed, o.Code)
	require.Equal(t, pipeline.Retry, o.Policy)
	require.True(t, o.FellBack)
	require.Equal(t, -1, v)
	require.True(t, pipeline.RetriesExhausted.Selects(o))
}
