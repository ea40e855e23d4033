package pipeline

import (
	"context"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/ratelimit"
)

// Config lists the policies of a pipeline, one field per kind; a nil field
// is absent. The policies are built by their own packages' New and may be
// shared with other pipelines. See the package doc for the order in which
// they apply; it does not depend on the order of the fields.
type Config struct {
	// Name identifies the pipeline in messages. Optional.
	Name string

	// Ticker is the clock the pipeline reads (at most twice per attempt) and
	// hands to its policies. Nil means: the ticker of the policies, which
	// must then all share one; or rampart.DefaultTicker() when no policy
	// has one. Every policy must use the pipeline's ticker: readings of
	// different tickers are not comparable.
	Ticker rampart.Ticker

	// RateLimit admits attempts at a rate (one permit each), rejecting at
	// once with its wait as the retry-after hint. It needs the time before
	// the call (t0).
	RateLimit *ratelimit.Limiter

	// Bulkhead caps the calls in flight. When its MaxWait is set, an attempt
	// waits for a permit (in FIFO order, bounded by MaxWait and the context)
	// instead of being rejected at once.
	Bulkhead *bulkhead.Bulkhead
}

// Pipeline runs calls through a fixed sequence of policies. Build it with
// [New]; it is immutable and safe for concurrent use.
type Pipeline struct {
	tick rampart.Ticker
	rl   *ratelimit.Limiter
	bh   *bulkhead.Bulkhead

	// needT0 is set when a policy takes the time before the call; needT1
	// when one records a duration after it. Both false: no clock read.
	needT0, needT1 bool

	cfg Config
}

// New validates cfg and returns a pipeline. It returns a *rampart.ConfigError
// (matching rampart.ErrInvalidConfig) when the policies use different
// tickers or the combination is invalid.
func New(cfg Config) (*Pipeline, error) {
	p := &Pipeline{rl: cfg.RateLimit, bh: cfg.Bulkhead, cfg: cfg}
	tick := cfg.Ticker
	type ticked struct {
		field string
		t     rampart.Ticker
	}
	var clocks [8]ticked
	n := 0
	if cfg.RateLimit != nil {
		clocks[n] = ticked{"RateLimit", cfg.RateLimit.Ticker()}
		n++
		p.needT0 = true
	}
	for _, c := range clocks[:n] {
		if c.t == nil {
			continue
		}
		if tick == nil {
			tick = c.t
			continue
		}
		if c.t != tick {
			return nil, rampart.NewConfigError("pipeline", c.field,
				"uses a different Ticker than the pipeline (readings of different tickers are not comparable); build every policy with the pipeline's Ticker")
		}
	}
	if tick == nil {
		tick = rampart.DefaultTicker()
	}
	p.tick = tick
	p.cfg.Ticker = tick
	return p, nil
}

// Config returns the configuration the pipeline was built with, its Ticker
// filled in. Change a field and pass it to [New] to derive a pipeline (the
// policies are shared, not copied).
func (p *Pipeline) Config() Config { return p.cfg }

// Ticker returns the pipeline's clock.
func (p *Pipeline) Ticker() rampart.Ticker { return p.tick }

// Name returns the configured name.
func (p *Pipeline) Name() string { return p.cfg.Name }

// Do calls fn through the pipeline's policies and returns fn's error
// unchanged, or the rejection error of the policy that refused the call, the
// timeout's error, or the context's error. A panic in fn is re-raised after
// every permit is released. Do allocates nothing unless a policy does (the
// timeout's context, a retry's sleep).
func (p *Pipeline) Do(ctx context.Context, fn func(context.Context) error) error {
	_, o := run[struct{}](ctx, p, nil, fn)
	return o.Err
}

// Try is [Pipeline.Do] returning an [Outcome] instead of an error: a code,
// the policy that rejected, and a retry-after hint.
func (p *Pipeline) Try(ctx context.Context, fn func(context.Context) error) Outcome {
	_, o := run[struct{}](ctx, p, nil, fn)
	return o
}

// Call is [Pipeline.Do] for a function that returns a value: it returns
// fn's result and error unchanged, or T's zero value and the error of the
// policy that refused the call.
func Call[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, error) {
	v, o := run(ctx, p, fn, nil)
	return v, o.Err
}

// TryCall is [Call] returning an [Outcome] instead of an error.
func TryCall[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, Outcome) {
	return run(ctx, p, fn, nil)
}
