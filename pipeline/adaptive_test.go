package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/timeout"
)

// classifyLog records the outcomes a limiter's classifier returned.
type classifyLog struct {
	mu  sync.Mutex
	out []rampart.Result
}

func (c *classifyLog) wrap(f func(context.Context, error) rampart.Result) func(context.Context, error) rampart.Result {
	return func(ctx context.Context, err error) rampart.Result {
		o := f(ctx, err)
		c.mu.Lock()
		c.out = append(c.out, o)
		c.mu.Unlock()
		return o
	}
}

func (c *classifyLog) take() []rampart.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.out
	c.out = nil
	return o
}

// newClassifiedAdaptive is a fixed-limit adaptive limiter whose Config.Classify
// is adaptive.DefaultClassify, except that errBoom is a drop, and whose
// verdicts are logged.
func newClassifiedAdaptive(t *testing.T, tick rampart.Ticker) (*adaptive.Limiter, *classifyLog) {
	t.Helper()
	log := &classifyLog{}
	l, err := adaptive.New(adaptive.Config{
		Name: "al", Ticker: tick, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
		Classify: log.wrap(func(ctx context.Context, err error) rampart.Result {
			if errors.Is(err, errBoom) {
				return rampart.Failure
			}
			return adaptive.DefaultClassify(ctx, err)
		}),
	})
	require.NoError(t, err)
	return l, log
}

func TestAdaptiveUsesTheLimitersClassify(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	al, log := newClassifiedAdaptive(t, tick)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	p, err := pipeline.New(pipeline.Config{Adaptive: al, Timeout: to})
	require.NoError(t, err)

	// A success is released as Success without asking the classifier.
	require.NoError(t, p.Do(context.Background(), ok))
	require.Empty(t, log.take())

	// An error from fn that the limiter's Classify calls a drop.
	require.ErrorIs(t, p.Do(context.Background(), fail), errBoom)
	require.Equal(t, []rampart.Result{rampart.Failure}, log.take())

	// An attempt that overran the timeout: the timeout's error, a drop.
	o := p.Try(context.Background(), func(context.Context) error {
		tick.Advance(2 * time.Second)
		return nil
	})
	require.Equal(t, pipeline.TimedOut, o.Code)
	require.Equal(t, []rampart.Result{rampart.Failure}, log.take())

	// The caller cancelled: ignored (it says nothing about the dependency).
	ctx, cancel := context.WithCancel(context.Background())
	o = p.Try(ctx, func(ctx context.Context) error {
		cancel()
		return ctx.Err()
	})
	require.Equal(t, pipeline.Canceled, o.Code)
	require.Equal(t, []rampart.Result{rampart.Ignored}, log.take())
	require.Zero(t, al.InFlight(), "every token released")
}

func TestAdaptiveClassifyOverridesTheLimiters(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	al, log := newClassifiedAdaptive(t, tick)
	var got []rampart.Result
	p, err := pipeline.New(pipeline.Config{Adaptive: al,
		AdaptiveClassify: func(ctx context.Context, err error) rampart.Result {
			got = append(got, rampart.Ignored)
			return rampart.Ignored
		}})
	require.NoError(t, err)
	require.ErrorIs(t, p.Do(context.Background(), fail), errBoom)
	require.Empty(t, log.take(), "the override replaces the limiter's classifier")
	require.Equal(t, []rampart.Result{rampart.Ignored}, got)
	require.Zero(t, al.InFlight())
}

// TestPanickingClassifierReleasesEverything: a classifier is user code; if
// the adaptive or the breaker classifier panics while an attempt is being
// released, every permit still comes back and the panic reaches the caller.
func TestPanickingClassifierReleasesEverything(t *testing.T) {
	for _, which := range []string{"adaptive", "breaker", "breaker-on-success"} {
		t.Run(which, func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			var healed atomic.Bool // set: the classifiers stop panicking
			panicky := func(ctx context.Context, err error) rampart.Result {
				if !healed.Load() {
					panic("classifier bug")
				}
				return adaptive.DefaultClassify(ctx, err)
			}
			cfg := pipeline.Config{Bulkhead: newBulkhead(t, 1, tick)}
			al, err := adaptive.New(adaptive.Config{Name: "al", Ticker: tick, InitialLimit: 1, MinLimit: 1, MaxLimit: 1})
			require.NoError(t, err)
			cfg.Adaptive = al
			if which == "adaptive" {
				cfg.AdaptiveClassify = panicky
				cfg.Breaker = newBreaker(t, tick, nil)
			} else {
				// breaker-on-success: the breaker's Classify is consulted
				// on a success too, released by run's fast first attempt.
				onSuccess := which == "breaker-on-success"
				cfg.Breaker = newBreaker(t, tick, func(c *circuitbreaker.Config) {
					c.Classify = func(err error) rampart.Result {
						if (err != nil) != onSuccess && !healed.Load() {
							panic("classifier bug")
						}
						return circuitbreaker.DefaultClassify(err)
					}
				})
			}
			p, err := pipeline.New(cfg)
			require.NoError(t, err)
			fnErr := errBoom
			if which == "breaker-on-success" {
				fnErr = nil
			}
			require.PanicsWithValue(t, "classifier bug", func() {
				_ = p.Do(context.Background(), func(context.Context) error { return fnErr })
			})
			healed.Store(true) // the classifier behaves from now on
			require.Zero(t, cfg.Bulkhead.Stats().InFlight, "bulkhead permit leaked")
			require.Zero(t, al.InFlight(), "adaptive token leaked")
			require.EqualValues(t, 1, cfg.Breaker.Stats().Failures, "the failure was not recorded")
			// The pipeline still admits: nothing is stuck.
			require.NoError(t, p.Do(context.Background(), func(context.Context) error { return nil }))
		})
	}
}

// panicAlgorithm's controller panics whenever a window closes.
type panicAlgorithm struct{}

func (panicAlgorithm) Start(initial, lo, hi float64) adaptive.Controller { return panicController{} }

type panicController struct{}

func (panicController) Update(adaptive.Sample) float64 { panic("controller bug") }

// TestPanickingControllerReleasesOnce: a user Controller that panics when a
// release closes the adaptive window (in end after a success, in abort
// after a panicking fn) neither releases the adaptive token twice (which
// would let one call too many in) nor leaks the other permits.
func TestPanickingControllerReleasesOnce(t *testing.T) {
	for _, path := range []string{"end", "abort"} {
		t.Run(path, func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			al, err := adaptive.New(adaptive.Config{Name: "al", Algorithm: panicAlgorithm{}, Ticker: tick,
				InitialLimit: 1, MinLimit: 1, MaxLimit: 1, Window: time.Second, MinWindowSamples: 1})
			require.NoError(t, err)
			bh := newBulkhead(t, 1, tick)
			p, err := pipeline.New(pipeline.Config{Breaker: newBreaker(t, tick, nil), Bulkhead: bh, Adaptive: al})
			require.NoError(t, err)
			// One recorded success, so that the next release finds a due
			// window with enough samples.
			require.NoError(t, p.Do(context.Background(), func(context.Context) error { return nil }))
			if path == "end" {
				require.PanicsWithValue(t, "controller bug", func() {
					_ = p.Do(context.Background(), func(context.Context) error { tick.Advance(2 * time.Second); return nil })
				})
			} else {
				require.Panics(t, func() {
					_ = p.Do(context.Background(), func(context.Context) error { tick.Advance(2 * time.Second); panic("fn") })
				})
			}
			require.Zero(t, bh.Stats().InFlight, "bulkhead permit leaked")
			require.Zero(t, al.InFlight(), "adaptive slot")
			// Exactly one slot at limit 1: one admission, not two.
			_, err1 := al.AcquireAt(tick.Now())
			_, err2 := al.AcquireAt(tick.Now())
			require.NoError(t, err1)
			require.Error(t, err2, "the token was released twice: two admitted at limit 1")
		})
	}
}

// armedPanicTicker is a ManualTicker whose Now panics while armed.
type armedPanicTicker struct {
	m     *rampart.ManualTicker
	armed atomic.Bool
}

func (p *armedPanicTicker) Now() int64 {
	if p.armed.Load() {
		panic("ticker down")
	}
	return p.m.Now()
}

// TestAbortAfterTickerPanicHandsSlotToWaiter: when fn panics and the Ticker
// then panics too, abort has no end reading; it releases the adaptive
// permit at t0 (as it finishes the timeout), not at rampart.NotRead, which
// the limiter's queue took for now: MinInt64 − enq wrapped to a huge wait
// and every waiter was shed as stale although the slot was free. The queued
// waiter gets the freed slot and nothing is shed.
func TestAbortAfterTickerPanicHandsSlotToWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := &armedPanicTicker{m: rampart.NewManualTicker(1_000_000)}
		al, err := adaptive.New(adaptive.Config{Algorithm: adaptive.AIMD{}, InitialLimit: 1, MinLimit: 1, MaxLimit: 1,
			Ticker: tk, Queue: adaptive.QueueConfig{MaxLength: 4}})
		require.NoError(t, err)
		p, err := pipeline.New(pipeline.Config{Adaptive: al})
		require.NoError(t, err)

		got := make(chan error, 1)
		func() {
			defer func() { _ = recover() }()
			_ = p.Do(context.Background(), func(context.Context) error {
				// The only slot is held: queue a waiter behind it.
				go func() {
					permit, err := al.AcquireWaitAt(context.Background(), tk.m.Now())
					if err == nil {
						al.ReleaseAt(permit, tk.m.Now(), rampart.Success)
					}
					got <- err
				}()
				synctest.Wait()
				require.Equal(t, 1, al.Stats().Queued)
				tk.armed.Store(true)
				panic("boom")
			})
		}()
		tk.armed.Store(false)
		err = <-got
		require.NoError(t, err, "the waiter was shed although the slot was freed and it waited 0 ns")
		require.Zero(t, al.Stats().Shed)
	})
}
