package pipeline

import (
	"context"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/internal/percpu"
	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// Config lists the policies of a pipeline, one field per kind; a nil field
// is absent. The policies are built by their own packages' New and may be
// shared with other pipelines. See the package doc for the order in which
// they apply; it does not depend on the order of the fields.
type Config struct {
	// Name identifies the pipeline in messages. Optional.
	Name string

	// Ticker is the clock the pipeline reads (at most twice per attempt; a
	// third time at admission when a queue can wait) and
	// hands to its policies. Nil means: the ticker of the policies, which
	// must then all share one; or rampart.DefaultTicker() when no policy
	// has one. Every policy that takes the time must use the pipeline's
	// ticker: readings of different tickers are not comparable.
	Ticker rampart.Ticker

	// Retry, outermost, runs the attempts again after a retryable failure,
	// with its backoff, limits and budget (retry.Policy.Decide). Rejections
	// by the other policies are not retried. When it gives up on a
	// retryable error, the error is its *retry.ExhaustedError, which
	// unwraps to the last error; a non-retryable error comes back as is.
	Retry *retry.Policy

	// Breaker admits or rejects each attempt and records its outcome
	// (classified by its own Config.Classify). A rejection's retry-after
	// hint is its remaining open time.
	Breaker *circuitbreaker.Breaker

	// RateLimit admits attempts at a rate (one permit each), rejecting at
	// once with its wait as the retry-after hint.
	RateLimit *ratelimit.Limiter

	// Bulkhead caps the attempts in flight. When its MaxWait is set, an
	// attempt waits for a permit (in FIFO order, bounded by MaxWait and the
	// context) instead of being rejected at once.
	Bulkhead *bulkhead.Bulkhead

	// Adaptive caps the attempts in flight with a limit that tunes itself
	// from their latency and drops. With a queue configured, an attempt
	// waits in it (adaptive.Limiter.AcquireWait).
	Adaptive *adaptive.Limiter

	// Shed, the last admission, protects this process from overload: while
	// its runtime signals say the process is overloaded it admits only
	// the attempts in flight up to the capacity the process has shown
	// (see package shed), and rejects the rest at once with its
	// preallocated error (Outcome.Policy [Shed], matching shed.ErrOverloaded
	// and rampart.ErrRejected; no retry-after hint: the shedder gives
	// none). It comes after every other admission, so a call that the
	// breaker, the rate limiter, the bulkhead or the adaptive limit refused,
	// or that waits in their queues, is never counted in flight by it; its
	// slot is held until fn has returned, and the latency it learns from is
	// the attempt's own, from admission (t0, read again after a queue) to
	// fn's return (t1): a shedder makes the pipeline read both. The
	// attempt is released with shed.Shedder.Classify of fn's error (a
	// success as rampart.Success without calling it; a panic or Goexit as
	// rampart.Ignored; a rejection by the shedder releases nothing it did
	// not take). Hedged attempts share the attempt's one slot.
	Shed *shed.Shedder

	// ShedPriority, when set, gives each attempt's priority for Shed
	// (shed.Shedder.AcquirePriorityAt: 0 the most important; the
	// shedder's Config.Priorities sets how many levels it has, and an
	// out-of-range value is its least important level). It is called with
	// the caller's context once per attempt, before the shedder is asked:
	// a server reads the priority that an earlier middleware put in the
	// request's context (a tenant's tier, a health check, a batch job).
	// Nil means priority 0 for every attempt, at no cost. Requires Shed.
	// A panic or runtime.Goexit in it ends the call as one in fn does:
	// the permits taken are released, nothing is recovered, and
	// [Stats.Panicked] counts it.
	ShedPriority func(ctx context.Context) int

	// Timeout bounds each attempt (each retry gets a fresh deadline) in
	// deadline mode (fn gets a context done at the deadline; one
	// allocation per attempt, the context) or soft mode (classification
	// only, no allocation). An attempt that overran fails with the
	// timeout's error (timeout.ErrTimeout, which also matches
	// context.DeadlineExceeded), seen by the breaker and the adaptive limit
	// as a failure and a drop. Overran means: in soft mode (and in deadline
	// mode when another policy reads the end time) it ended at or after the
	// deadline; in deadline mode otherwise, its deadline fired before it
	// returned (the watchdog's verdict, within one tick: see package doc).
	// The retry's default classifier retries a timed-out attempt (the
	// caller's context is still live); a ShouldRetry that refuses
	// context.DeadlineExceeded or timeout.ErrTimeout does not. A pipeline never abandons
	// an attempt (it uses the timeout's Start and Finish, on the caller's
	// goroutine), whatever the Timeout's abandon settings: abandoning would
	// release the concurrency permit while the abandoned work still runs.
	// Abandoning is not available inside a pipeline: for a callee that
	// ignores its context, call timeout.DoAbandon outside one, with a
	// bulkhead's Release as onDone.
	Timeout *timeout.Timeout

	// Hedge, innermost, starts extra attempts of a slow call (after its
	// fixed or percentile delay) and keeps the first success; the losers'
	// contexts are cancelled. Hedging applies to the hedged entry points
	// only ([Pipeline.DoHedged], [Pipeline.TryHedged], [CallHedged],
	// [TryCallHedged]); Do, Try, Call and TryCall run fn once per attempt.
	// The hedged attempts share the attempt's admission (one breaker
	// permit, one rate-limit permit, one bulkhead slot) and its timeout.
	// The hedger counts from the attempt's t0 when the pipeline read it
	// and no bulkhead MaxWait or adaptive queue can make the admission
	// wait, else from a fresh reading; with a percentile delay it reads the
	// end itself. The attempt ends when every hedge has returned (the
	// losers are cancelled at the decision; hedge.Hedger.DoAtHeld), so its
	// permits are never released while a loser runs. Give the hedger the
	// retry's budget so that hedges and retries draw from one pool: the
	// request and each attempt's outcome are counted once, by the
	// pipeline; the hedger asks AllowRetry before each hedge. Requires
	// Idempotent.
	Hedge *hedge.Hedger

	// Idempotent is the promise that fn may run more than once, even
	// concurrently: running it twice, or abandoning one run half way, is
	// harmless. New refuses a Hedge without it.
	Idempotent bool

	// AdaptiveClassify, when set, overrides the adaptive limit's own
	// classification of an attempt's error for this pipeline. Nil means
	// the limiter's (adaptive.Limiter.Classify: its Config.Classify,
	// default adaptive.DefaultClassify, which releases a timeout or a
	// rejection as Failure and the caller's cancellation as Ignored), the
	// same classification as its Do. A success is always released as
	// rampart.Success without calling either; an attempt that panics is
	// released as rampart.Ignored.
	AdaptiveClassify func(ctx context.Context, err error) rampart.Result

	// CountStats, when set, counts every call by how it ended (its
	// Code, and for a rejection the rejecting policy's Kind), its attempts,
	// the calls that panicked, and the answers of the fallbacks built on
	// the pipeline: [Pipeline.Stats] and [Fallback.Stats] return them, for
	// an operator's metrics. The counters are striped per P (the
	// runtime's processor: each core adds to its own cache line, no lock,
	// no allocation; a few ns per call) and New allocates them:
	// 128 B per P, max(GOMAXPROCS, NumCPU) of them, one more for the Ps
	// past them (GOMAXPROCS raised after New: they share it, adding
	// atomically, and lose no count), plus a line: 480 B on 2 Ps. Each
	// [Fallback] or [DoFallback] built on a counting pipeline allocates
	// counters of its own for its answers, the same size again. Zero
	// (off): nothing is counted and a call pays one branch on a field set
	// at New. A pipeline built from another's [Pipeline.Config] with
	// CountStats still set counts into the other's counters, so that
	// the pipelines an adapter derives (httpguard's server drops the
	// retry; its client builds one per route and host) add to the Stats
	// of the pipeline the application built.
	CountStats bool

	// stats are the counters of the pipeline whose Config this is, for a
	// pipeline derived from it: see CountStats.
	stats *percpu.Counters
}

// Pipeline runs calls through a fixed sequence of policies. Build it with
// [New] and run calls through [Pipeline.Do] or [Call] ([Pipeline.Try] and
// [TryCall] return an [Outcome]; the Hedged forms also hedge).
//
// Each attempt reads the clock at most twice and takes every permit in the
// package's fixed order (see the package documentation). The zero Pipeline
// is not usable. A Pipeline is immutable after New and safe for concurrent
// use.
type Pipeline struct {
	// Read-only after New, read by every call: the policies (nil = absent)
	// and the clock flags.
	tick rampart.Ticker
	rt   *retry.Policy
	bud  rampart.Budget
	cb   *circuitbreaker.Breaker
	rl   *ratelimit.Limiter
	bh   *bulkhead.Bulkhead
	al   *adaptive.Limiter
	to   *timeout.Timeout
	sh   *shed.Shedder
	hg   *hedge.Hedger

	alClassify func(context.Context, error) rampart.Result // Config.AdaptiveClassify; nil: al.Classify
	shPrio     func(context.Context) int                   // Config.ShedPriority; nil: priority 0
	cbClassify bool                                        // the breaker has a Classify: consulted on a success too (fixed: its Update refuses nil ↔ non-nil)

	// needT0: a policy takes the time before the call (rate limiter,
	// adaptive limit, timeout, a breaker that times calls). needT1: a
	// policy records a duration after it (adaptive limit, a soft-mode
	// timeout, a breaker that times calls).
	// Both false: no clock read on a success.
	needT0, needT1 bool

	// rtNeedsStart: the retry uses the call's start (retry.Policy.NeedsTime:
	// MaxDuration, or a budget that keeps time), so the first attempt reads
	// t0. The retry reads the current time when it decides, on failures.
	rtNeedsStart bool

	// mayWait: the bulkhead (MaxWait) or the adaptive limit (a queue) can
	// make an attempt wait after t0, so t0 is read again after admission:
	// the timeout's deadline and the hedger's delay count from admission,
	// not from the start of the queueing.
	mayWait bool

	// fast: run's fast first attempt applies (no policy can queue, see
	// mayWait). held: the heldX bits of the policies present, which the
	// fast path stores at once.
	fast bool
	held uint8

	idempotent bool // Config.Idempotent, for Config

	// stats holds the outcome counts, nil unless Config.CountStats.
	stats *percpu.Counters

	// cached is the reading of tick when it is a *rampart.CachedTicker,
	// loaded directly instead of through the interface (see now); else
	// &notCached.
	cached *atomic.Int64

	// name is Config.Name, for Config: the rest of the Config is in the
	// fields above (no copy of it, which would be 104 B more per pipeline).
	name string
}

// New validates cfg and returns a pipeline. It returns a *rampart.ConfigError
// (matching rampart.ErrInvalidConfig) when a policy was not built by its
// package's New (a zero value such as &bulkhead.Bulkhead{}), when the
// policies use different tickers, or when the combination is invalid. A
// ticker mismatch names the policy that is off and what to do: the
// policies built without a Ticker (on rampart.DefaultTicker()) when
// Config.Ticker or the other policies share another one, else the policy
// on a Ticker of its own.
func New(cfg Config) (*Pipeline, error) {
	if err := refuseZeroPolicies(cfg); err != nil {
		return nil, err
	}
	p := &Pipeline{
		rt:         cfg.Retry,
		cb:         cfg.Breaker,
		rl:         cfg.RateLimit,
		bh:         cfg.Bulkhead,
		al:         cfg.Adaptive,
		to:         cfg.Timeout,
		sh:         cfg.Shed,
		hg:         cfg.Hedge,
		alClassify: cfg.AdaptiveClassify,
		shPrio:     cfg.ShedPriority,
		idempotent: cfg.Idempotent,
		name:       cfg.Name,
	}
	if p.rt != nil {
		p.bud = p.rt.Budget()
	}
	var clocks [7]ticked
	n := 0
	add := func(field string, t rampart.Ticker) {
		clocks[n] = ticked{field, t}
		n++
	}
	if cfg.Retry != nil {
		add("Retry", cfg.Retry.Ticker())
		p.rtNeedsStart = cfg.Retry.NeedsTime()
	}
	if cfg.Breaker != nil {
		add("Breaker", cfg.Breaker.Ticker())
		// Read once: the breaker's Update refuses a Classify from or to
		// nil and a change that flips MeasuresCalls (reading them per call
		// would load the breaker's configuration on every success).
		p.cbClassify = cfg.Breaker.Config().Classify != nil
		// A breaker that measures calls (a slow-call threshold, a time
		// window, per-call listeners) needs both readings; one that does
		// not decides without the time while closed.
		if cfg.Breaker.MeasuresCalls() {
			p.needT0, p.needT1 = true, true
		}
	}
	if cfg.RateLimit != nil {
		add("RateLimit", cfg.RateLimit.Ticker())
		p.needT0 = true
	}
	if cfg.Adaptive != nil {
		add("Adaptive", cfg.Adaptive.Ticker())
		p.needT0, p.needT1 = true, true
	}
	if cfg.Shed != nil {
		add("Shed", cfg.Shed.Ticker())
		// Its latency signal: admission (t0) to fn's return (t1).
		p.needT0, p.needT1 = true, true
	} else if cfg.ShedPriority != nil {
		return nil, rampart.NewConfigError("pipeline", "ShedPriority", "is set without Shed: it gives the shedder's priority of each attempt")
	}
	p.mayWait = (cfg.Bulkhead != nil && cfg.Bulkhead.MayWait()) || (cfg.Adaptive != nil && cfg.Adaptive.MayWait())
	if cfg.Timeout != nil {
		add("Timeout", cfg.Timeout.Ticker())
		p.needT0 = true // the deadline counts from t0
		// Soft mode classifies with the end reading. Deadline mode takes
		// the watchdog's verdict when no other policy reads t1 (Finish
		// with rampart.NotRead, as Timeout.Do does): a return after the
		// deadline that the watchdog has not yet seen (at most one tick)
		// is in time, which saves a clock read per attempt.
		if cfg.Timeout.Mode() == timeout.ModeSoft {
			p.needT1 = true
		}
	}
	if cfg.Hedge != nil {
		if !cfg.Idempotent {
			return nil, rampart.NewConfigError("pipeline", "Idempotent",
				"must be true when Hedge is set: hedging runs fn more than once, concurrently, and abandons the losers")
		}
		add("Hedge", cfg.Hedge.Ticker())
	}
	if ticker.IsNil(cfg.Ticker) {
		return nil, rampart.NewConfigError("pipeline", "Ticker", ticker.NilReason, cfg.Ticker)
	}
	var err error
	tick, ok := oneTicker(cfg.Ticker, clocks[:n])
	if !ok {
		if tick, err = sharedTicker(cfg.Ticker, clocks[:n]); err != nil {
			return nil, err
		}
	}
	if tick == nil {
		tick = rampart.DefaultTicker()
	}
	p.tick = tick
	p.cached = &notCached
	if c, ok := tick.(*ticker.Cached); ok {
		p.cached = ticker.Reading(c)
	}
	p.fast = !p.mayWait
	if cfg.CountStats {
		p.stats = cfg.stats
		if p.stats == nil {
			p.stats = percpu.New()
		}
	}
	for _, h := range [...]struct {
		present bool
		bit     uint8
	}{{p.cb != nil, heldBreaker}, {p.bh != nil, heldBulkhead}, {p.al != nil, heldAdaptive}, {p.sh != nil, heldShed}, {p.to != nil, heldTimeout}} {
		if h.present {
			p.held |= h.bit
		}
	}
	return p, nil
}

// oneTicker returns the policies' ticker when they all share one that
// can be compared, and Config.Ticker is nil or that one: the common case,
// decided without building the lists of sharedTicker's error messages (an
// allocation per New, which every pipeline would keep paying for in its
// bytes). ok is false otherwise, and sharedTicker decides.
func oneTicker(cfgTicker rampart.Ticker, clocks []ticked) (t rampart.Ticker, ok bool) {
	if len(clocks) == 0 {
		return nil, false
	}
	t = clocks[0].t
	if _, ok := ticker.Equal(t, t); !ok {
		return nil, false
	}
	for _, c := range clocks[1:] {
		if eq, _ := ticker.Equal(t, c.t); !eq {
			return nil, false
		}
	}
	if cfgTicker != nil {
		if eq, _ := ticker.Equal(cfgTicker, t); !eq {
			return nil, false
		}
	}
	return t, true
}

// refuseZeroPolicies returns a ConfigError naming the first policy of cfg
// that its package's New did not build. The zero value of every policy type
// is unusable (its errors, limits and clock are set by New): a zero rate
// limiter, timeout, retry, breaker or hedger would panic in a call, and a
// zero bulkhead or adaptive limit would reject every call with its unset
// rejection error: a nil *rampart.RejectedError inside a non-nil error,
// so that Do failed without running fn with an error whose Error method
// dereferences nil and panics. Each New sets the policy's
// ticker (rampart.DefaultTicker() when the Config has none), so a nil
// Ticker() marks a zero value; the bulkhead, which has no Ticker accessor,
// has a limit of at least 1 from New on (New and SetMax refuse less).
func refuseZeroPolicies(cfg Config) error {
	for _, f := range [...]struct {
		field, typ string
		zero       bool
	}{
		{"Retry", "retry.Policy", cfg.Retry != nil && cfg.Retry.Ticker() == nil},
		{"Breaker", "circuitbreaker.Breaker", cfg.Breaker != nil && cfg.Breaker.Ticker() == nil},
		{"RateLimit", "ratelimit.Limiter", cfg.RateLimit != nil && cfg.RateLimit.Ticker() == nil},
		{"Bulkhead", "bulkhead.Bulkhead", cfg.Bulkhead != nil && cfg.Bulkhead.Max() < 1},
		{"Adaptive", "adaptive.Limiter", cfg.Adaptive != nil && cfg.Adaptive.Ticker() == nil},
		{"Timeout", "timeout.Timeout", cfg.Timeout != nil && cfg.Timeout.Ticker() == nil},
		{"Shed", "shed.Shedder", cfg.Shed != nil && cfg.Shed.Ticker() == nil},
		{"Hedge", "hedge.Hedger", cfg.Hedge != nil && cfg.Hedge.Ticker() == nil},
	} {
		if f.zero {
			return rampart.NewConfigError("pipeline", f.field,
				"is a zero %s, not built by its package's New (the zero value is not usable)", f.typ)
		}
	}
	return nil
}

// now reads the pipeline's clock. A running cached ticker is read directly,
// one atomic load inlined here instead of an interface call.
func (p *Pipeline) now() int64 {
	if v := p.cached.Load(); v > 0 {
		return v
	}
	return p.tick.Now()
}

// notCached stands in for p.cached when the ticker is not a cached one: it
// stays 0, so now falls back to the ticker.
var notCached atomic.Int64

// Config returns the configuration the pipeline was built with, its Ticker
// filled in. Change a field and pass it to [New] to derive a pipeline (the
// policies are shared, not copied, and so are the outcome counters while
// CountStats stays set).
func (p *Pipeline) Config() Config {
	return Config{
		Name:             p.name,
		Ticker:           p.tick,
		Retry:            p.rt,
		Breaker:          p.cb,
		RateLimit:        p.rl,
		Bulkhead:         p.bh,
		Adaptive:         p.al,
		Timeout:          p.to,
		Shed:             p.sh,
		ShedPriority:     p.shPrio,
		Hedge:            p.hg,
		Idempotent:       p.idempotent,
		AdaptiveClassify: p.alClassify,
		CountStats:       p.stats != nil,
		stats:            p.stats,
	}
}

// Ticker returns the pipeline's clock.
func (p *Pipeline) Ticker() rampart.Ticker { return p.tick }

// Do calls fn through the pipeline's policies. It returns nil, fn's error
// unchanged (or the retry's give-up error wrapping it), the preallocated
// rejection error of the policy that refused the call, or the context's
// error. A panic in fn is re-raised after every permit is released. Do
// allocates nothing unless a policy does (a retry's sleep and give-up
// error).
//
//go:noinline
func (p *Pipeline) Do(ctx context.Context, fn func(context.Context) error) error {
	// Do is kept out of line on purpose: inlined, its call to the generic
	// engine would make the compiler assume that fn escapes, and a closure
	// passed to Do would then be allocated on every call.
	var o Outcome
	run[struct{}](ctx, p, nil, fn, &o)
	p.counted(&o)
	return o.Err
}

// Try is [Pipeline.Do] returning an [Outcome] instead of an error: a code,
// the policy that rejected, and a retry-after hint.
//
//go:noinline
func (p *Pipeline) Try(ctx context.Context, fn func(context.Context) error) Outcome {
	var o Outcome
	run[struct{}](ctx, p, nil, fn, &o)
	p.counted(&o)
	return o
}

// Call is [Pipeline.Do] for a function that returns a value: it returns
// fn's result and error unchanged, or T's zero value and the error of the
// policy that refused the call. After retries it returns the last attempt's
// value.
func Call[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, error) {
	var o Outcome
	v := run(ctx, p, fn, nil, &o)
	p.counted(&o)
	return v, o.Err
}

// TryCall is [Call] returning an [Outcome] instead of an error.
func TryCall[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, Outcome) {
	var o Outcome
	v := run(ctx, p, fn, nil, &o)
	p.counted(&o)
	return v, o
}

// DoHedged is [Pipeline.Do] with the call hedged by Config.Hedge (plain Do
// when the pipeline has none). Calling it is the caller's promise that fn is
// idempotent. fn runs on other goroutines too, so a closure passed to
// DoHedged lives on the heap (one allocation per call for a closure that
// captures variables); the hedger's own costs are in package hedge.
//
//go:noinline
func (p *Pipeline) DoHedged(ctx context.Context, fn func(context.Context) error) error {
	var o Outcome
	runHedged[struct{}](ctx, p, nil, fn, &o)
	p.counted(&o)
	return o.Err
}

// TryHedged is [Pipeline.DoHedged] returning an [Outcome].
//
//go:noinline
func (p *Pipeline) TryHedged(ctx context.Context, fn func(context.Context) error) Outcome {
	// DoHedged and TryHedged are kept out of line, like Do: inlined, their
	// Outcome would escape to the heap.
	var o Outcome
	runHedged[struct{}](ctx, p, nil, fn, &o)
	p.counted(&o)
	return o
}

// CallHedged is [Call] with the call hedged; see [Pipeline.DoHedged]. The
// hedger does not cancel the winning attempt's context when it returns, so
// a result that reads through it (an HTTP response body) stays readable —
// unless the pipeline has a deadline-mode Timeout, whose context (the
// winner's parent) ends when the attempt is released, as
// context.WithTimeout's cancel would. For such results use a soft-mode
// Timeout, or bound the attempt inside fn.
func CallHedged[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, error) {
	var o Outcome
	v := runHedged(ctx, p, fn, nil, &o)
	p.counted(&o)
	return v, o.Err
}

// TryCallHedged is [CallHedged] returning an [Outcome].
func TryCallHedged[T any](ctx context.Context, p *Pipeline, fn func(context.Context) (T, error)) (T, Outcome) {
	var o Outcome
	v := runHedged(ctx, p, fn, nil, &o)
	p.counted(&o)
	return v, o
}
