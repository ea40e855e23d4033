package hedge

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/budgetcheck"
	"github.com/rampart-go/rampart/internal/histogram"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// Limits of the configuration.
const (
	// MaxHedgesLimit is the largest Config.MaxHedges (gRPC A6 allows 5
	// attempts in all).
	MaxHedgesLimit = 4
	// DefaultWarmUp is the number of samples before a percentile delay is
	// trusted, when Config.WarmUp is zero.
	DefaultWarmUp = 100
	// DefaultRefresh is the period of the percentile's recomputation when
	// Config.Refresh is zero.
	DefaultRefresh = 100 * time.Millisecond
)

// Config configures a Hedger. Zero fields mean the documented defaults; a
// Config must set Delay or Percentile.
type Config struct {
	// Name identifies the hedger. Optional. A hedger builds no errors of
	// its own (it returns its attempts' errors unchanged), so New does not
	// keep it.
	Name string

	// Delay is the fixed hedging delay: a call that has not finished after
	// Delay starts a hedge. With Percentile set, Delay is the delay used
	// until WarmUp samples have been recorded (0: no hedging until then).
	// Must not be negative; must be positive when Percentile is 0.
	Delay time.Duration

	// Percentile, when not 0, makes the delay the live latency percentile
	// of the first attempts (0.95 for the p95). Must be in [0.5, 1).
	Percentile float64
	// MinDelay and MaxDelay clamp the percentile delay. MaxDelay 0 means no
	// upper clamp. Must not be negative; MaxDelay >= MinDelay when set.
	MinDelay, MaxDelay time.Duration
	// WarmUp is the number of samples the histogram must hold before the
	// percentile replaces Delay. 0 means DefaultWarmUp (100).
	WarmUp int
	// Refresh is how often the percentile is recomputed (and the histogram
	// halved, once it holds 2×WarmUp samples). 0 means DefaultRefresh.
	Refresh time.Duration

	// MaxHedges is the largest number of hedges per call, started one Delay
	// apart. 0 means 1. Must be in [0, MaxHedgesLimit].
	MaxHedges int

	// Budget, when set, must grant every hedge (see [rampart.Budget]; the
	// hedger calls OnRequest once per call, AllowRetry before each hedge,
	// OnSuccess after each attempt that succeeded and OnFailure after each
	// attempt that failed with a non-fatal error). A retry policy that wraps
	// the hedged calls and shares the budget also counts the logical call in
	// OnRequest; for retry.RatioBudget that doubles the request count (the
	// ratio is then relative to twice the calls). Nil means
	// hedges are limited by MaxHedges only. A nil *retry.TokenBucket or
	// *retry.RatioBudget, and one not built by retry.NewTokenBucket or
	// retry.NewRatioBudget (a zero value), is refused.
	Budget rampart.Budget

	// Fatal reports whether an attempt's error ends the race (the error is
	// returned and the other attempts are cancelled) rather than letting
	// another attempt win. Nil means every error is fatal. Errors of the
	// caller's context always end the call.
	Fatal func(err error) bool

	// AsyncFirst runs the first attempt on its own goroutine too, so the
	// call returns as soon as an attempt wins even when the callee ignores
	// cancellation. It costs a goroutine and allocations on every call.
	// Under DoAtHeld (a pipeline) the call still waits for every attempt,
	// the first included: a pipeline abandons nothing.
	AsyncFirst bool

	// Ticker is the clock (nil means rampart.DefaultTicker()). Under
	// testing/synctest, create it inside the bubble and set Tick too.
	Ticker rampart.Ticker

	// Tick, when positive, gives the hedger its own watchdog goroutine that
	// sweeps every Tick (the precision of the hedge trigger); Close stops
	// it. Zero uses the library's shared watchdog (one goroutine, a 1 ms
	// sweep: internal/watchdog.Default) when the ticker is
	// rampart.DefaultTicker(); a hedger with another Ticker gets its own
	// watchdog on that clock, with the 1 ms sweep. Must not be negative.
	Tick time.Duration

	// OnHedge is called when hedge number attempt (1..MaxHedges) starts,
	// on the hedge's goroutine.
	OnHedge func(attempt int)
	// OnHedgeWon is called when hedge number attempt won the race, on the
	// goroutine that decided it.
	OnHedgeWon func(attempt int)
	// OnBudgetRefused is called when the budget refused hedge number
	// attempt, on the watchdog's goroutine: it must not block.
	OnBudgetRefused func(attempt int)
}

// Stats are a Hedger's counters since New. Reading them allocates nothing.
type Stats struct {
	Hedges         uint64 // hedge attempts that ran fn (a hedge whose race was decided before its goroutine ran is skipped)
	HedgesWon      uint64 // races won by a hedge
	BudgetRefused  uint64 // hedges the budget refused
	TriggerFull    uint64 // triggers the watchdog refused (table full, or closed by Close): those calls ran unhedged
	ListenerPanics uint64 // listener panics recovered
	// Delay is the current hedging delay (-1: no hedging yet, a
	// percentile still warming up with Delay 0).
	Delay time.Duration
	// Samples is the number of latencies in the histogram at the last
	// refresh (0 with a fixed delay).
	Samples uint64
}

// Hedger hedges idempotent calls. Create it with [New] and run each call
// that may be repeated through [Hedger.Do] or [Call]; [Hedger.Observe] feeds
// the latency percentile with a call that went around it.
//
// The first attempt runs on the caller's goroutine, and a hedge starts only
// when a shared watchdog finds the delay passed (see the package
// documentation for the algorithm). A Hedger is safe for concurrent use.
//
// The zero value is not usable; build with [New]. A zero Hedger has no
// clock and no watchdog: its first call panics (a nil pointer). Package
// pipeline refuses a zero Hedger at New.
//
// A hedger with a fixed delay is 160 B (on the shared watchdog, without
// listeners); a percentile delay adds its latency histogram and state
// (10320 B), listeners a 32 B block, a watchdog of its own (Config.Tick or
// a Ticker other than the default) that watchdog. Each goroutine that runs a call through it keeps
// a pooled per-call state (sync.Pool, per P) once it has run one.
type Hedger struct {
	// Read-mostly configuration, grouped and unpadded: no word here is
	// written by every call (the counters count hedges, not calls).
	ticker     rampart.Ticker
	wd         *watchdog.Watchdog
	budget     rampart.Budget
	fatal      func(error) bool
	fixed      int64 // fixed delay (ns) when !percentile
	maxHedges  int
	pct        *percentileDelay // nil with a fixed delay: its histogram is 10 KB
	lis        *listeners       // nil without listeners
	percentile bool             // pct != nil, kept as a flag for the hot path's first test
	async      bool
	ownWD      bool
	calls      sync.Pool // *call: reusable per-call state

	// Counters of the hedge path (rare), grouped.
	hedges, won, refused, full atomic.Uint64
}

// percentileDelay is the state of a percentile delay, allocated by New only
// when Config.Percentile asks for one.
type percentileDelay struct {
	q        float64
	minDelay int64
	maxDelay int64
	warmUp   uint64
	refresh  int64

	// delay is the current percentile delay (ns, -1 none): written at each
	// refresh, loaded by every call.
	delay atomic.Int64
	// nextRefresh is loaded by every call's end and CASed once per
	// Refresh: read-mostly, so it is not padded.
	nextRefresh atomic.Int64
	samples     atomic.Uint64

	// hist is the latency histogram: each call adds to one of its counters.
	// A pointer: its 10240 B fill their size class exactly, and the words
	// above would push a struct holding both into the next (10880 B).
	hist *histogram.Histogram
}

// listeners are a hedger's listeners, allocated by New only when one is set.
type listeners struct {
	onHedge, onWon, onRefused func(int)
	panics                    atomic.Uint64
}

// New validates cfg and returns a Hedger, or a [*rampart.ConfigError].
func New(cfg Config) (*Hedger, error) {
	bad := func(field, format string, args ...any) error {
		return rampart.NewConfigError("hedge", field, format, args...)
	}
	switch {
	case cfg.Delay < 0:
		return nil, bad("Delay", "must not be negative, got %v", cfg.Delay)
	case cfg.Percentile != 0 && !(cfg.Percentile >= 0.5 && cfg.Percentile < 1):
		return nil, bad("Percentile", "must be 0 or in [0.5, 1), got %v", cfg.Percentile)
	case cfg.Percentile == 0 && cfg.Delay == 0:
		return nil, bad("Delay", "must be positive when Percentile is 0")
	case cfg.MinDelay < 0:
		return nil, bad("MinDelay", "must not be negative, got %v", cfg.MinDelay)
	case cfg.MaxDelay < 0:
		return nil, bad("MaxDelay", "must not be negative, got %v", cfg.MaxDelay)
	case cfg.MaxDelay != 0 && cfg.MaxDelay < cfg.MinDelay:
		return nil, bad("MaxDelay", "must be at least MinDelay (%v), got %v", cfg.MinDelay, cfg.MaxDelay)
	case cfg.WarmUp < 0:
		return nil, bad("WarmUp", "must not be negative, got %d", cfg.WarmUp)
	case cfg.Refresh < 0:
		return nil, bad("Refresh", "must not be negative, got %v", cfg.Refresh)
	case cfg.MaxHedges < 0 || cfg.MaxHedges > MaxHedgesLimit:
		return nil, bad("MaxHedges", "must be in [0, %d], got %d", MaxHedgesLimit, cfg.MaxHedges)
	case cfg.Tick < 0:
		return nil, bad("Tick", "must not be negative, got %v", cfg.Tick)
	}
	// Package retry's check of its own budget types (a nil or zero
	// retry.TokenBucket or retry.RatioBudget), set by retry's init. This
	// package does not import retry: when retry is not linked in, Reason is
	// nil, no budget of retry's types exists, and there is nothing to check.
	if budgetcheck.Reason != nil && cfg.Budget != nil { // nil is valid, and the check builds its message eagerly (64 B)
		if why := budgetcheck.Reason(cfg.Budget, "retry."); why != "" {
			return nil, bad("Budget", "%s", why)
		}
	}
	h := &Hedger{
		ticker:     cfg.Ticker,
		budget:     cfg.Budget,
		fatal:      cfg.Fatal,
		fixed:      int64(cfg.Delay),
		maxHedges:  cfg.MaxHedges,
		percentile: cfg.Percentile != 0,
		async:      cfg.AsyncFirst,
	}
	if h.maxHedges == 0 {
		h.maxHedges = 1
	}
	if cfg.OnHedge != nil || cfg.OnHedgeWon != nil || cfg.OnBudgetRefused != nil {
		h.lis = &listeners{onHedge: cfg.OnHedge, onWon: cfg.OnHedgeWon, onRefused: cfg.OnBudgetRefused}
	}
	if h.percentile {
		p := &percentileDelay{
			q:        cfg.Percentile,
			minDelay: int64(cfg.MinDelay),
			maxDelay: int64(cfg.MaxDelay),
			warmUp:   uint64(cfg.WarmUp),
			refresh:  int64(cfg.Refresh),
			hist:     new(histogram.Histogram),
		}
		if p.maxDelay == 0 {
			p.maxDelay = math.MaxInt64
		}
		if p.warmUp == 0 {
			p.warmUp = DefaultWarmUp
		}
		if p.refresh == 0 {
			p.refresh = int64(DefaultRefresh)
		}
		h.fixed = -1
		if cfg.Delay > 0 {
			p.delay.Store(int64(cfg.Delay))
		} else {
			p.delay.Store(-1)
		}
		h.pct = p
	}
	if ticker.IsNil(h.ticker) {
		return nil, rampart.NewConfigError("hedge", "Ticker", ticker.NilReason, h.ticker)
	}
	if h.ticker == nil {
		h.ticker = rampart.DefaultTicker()
	}
	if cfg.Tick == 0 && h.ticker == rampart.DefaultTicker() {
		h.wd = watchdog.Default() // the library's shared watchdog, on the same clock
	} else {
		h.wd = watchdog.New(watchdog.Config{Tick: cfg.Tick, Clock: h.ticker})
		h.ownWD = true
	}
	if p := h.pct; p != nil {
		p.nextRefresh.Store(atomicx.SatAdd(h.ticker.Now(), p.refresh)) // a huge Refresh must not wrap into the past
	}
	return h, nil
}

// Close stops the hedger's own watchdog goroutine (Config.Tick > 0 or a
// custom Ticker) and waits for it to exit; later calls run unhedged. It is
// a no-op for a hedger on the shared watchdog. Calls in flight are not
// interrupted.
func (h *Hedger) Close() error {
	if h.ownWD {
		return h.wd.Close()
	}
	return nil
}

// Ticker returns the clock the hedger reads.
func (h *Hedger) Ticker() rampart.Ticker { return h.ticker }

// Delay returns the current hedging delay, or -1 when calls are not hedged
// (a percentile still warming up with Config.Delay 0). One atomic load with
// a percentile delay, none with a fixed one.
func (h *Hedger) Delay() time.Duration { return time.Duration(h.delayNs()) }

// delayNs is Delay in the int64 nanoseconds that readings add to (the hot
// path: Do, Call and each hedge's trigger).
func (h *Hedger) delayNs() int64 {
	if !h.percentile {
		return h.fixed
	}
	return h.pct.delay.Load() // one dependent load more than before pct moved out: read-mostly, cached
}

// ObserveAt records one latency (ns) in the percentile histogram and, when
// the Refresh period has passed at now, recomputes the delay. Do and Call
// call it for every first attempt; call it yourself for calls made around
// the hedger (non-idempotent ones) whose latency should count. No-op with a
// fixed delay. Atomics: one add (histogram), one load (refresh check).
func (h *Hedger) ObserveAt(now int64, latency time.Duration) {
	if !h.percentile {
		return
	}
	p := h.pct
	p.hist.Record(int64(latency))
	if now >= p.nextRefresh.Load() {
		h.refreshSlow(now)
	}
}

// Observe is [Hedger.ObserveAt] at a reading of the hedger's Ticker.
func (h *Hedger) Observe(latency time.Duration) { h.ObserveAt(h.ticker.Now(), latency) }

// refreshSlow is the slow path of ObserveAt: the caller that wins the CAS on
// nextRefresh recomputes the percentile and decays the histogram.
func (h *Hedger) refreshSlow(now int64) {
	p := h.pct
	next := p.nextRefresh.Load()
	if now < next || !p.nextRefresh.CompareAndSwap(next, atomicx.SatAdd(now, p.refresh)) {
		return
	}
	v, n := p.hist.Quantile(p.q)
	p.samples.Store(n)
	if n < p.warmUp {
		return
	}
	// At least 1 ns: a delay of 0 means "not hedged" to the callers, and a
	// percentile of 0 (every call under one tick of a cached ticker) must
	// still hedge the tail.
	p.delay.Store(min(max(v, p.minDelay, 1), p.maxDelay))
	if n >= 2*p.warmUp {
		p.hist.Decay(1)
	}
}

// Stats returns the counters. No allocation.
func (h *Hedger) Stats() Stats {
	st := Stats{
		Hedges:        h.hedges.Load(),
		HedgesWon:     h.won.Load(),
		BudgetRefused: h.refused.Load(),
		TriggerFull:   h.full.Load(),
		Delay:         h.Delay(),
	}
	if h.lis != nil {
		st.ListenerPanics = h.lis.panics.Load()
	}
	if h.pct != nil {
		st.Samples = h.pct.samples.Load()
	}
	return st
}

// isFatal classifies an attempt's error (err != nil).
func (h *Hedger) isFatal(err error) bool {
	return h.fatal == nil || h.fatal(err)
}

func (h *Hedger) notifyHedge(attempt int) {
	if l := h.lis; l != nil && l.onHedge != nil {
		notify.Call1(&l.panics, l.onHedge, attempt)
	}
}

func (h *Hedger) notifyWon(attempt int) {
	if l := h.lis; l != nil && l.onWon != nil {
		notify.Call1(&l.panics, l.onWon, attempt)
	}
}

func (h *Hedger) notifyRefused(attempt int) {
	if l := h.lis; l != nil && l.onRefused != nil {
		notify.Call1(&l.panics, l.onRefused, attempt)
	}
}
