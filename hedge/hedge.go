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
	"github.com/rampart-go/rampart/internal/sameptr"
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
	// its own (it returns its attempts' errors unchanged); New keeps a
	// Name for Config, in the block of its listeners (a named hedger
	// without listeners allocates that 48 B block), and Update refuses
	// to change it.
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
// (10320 B), listeners or a Name a 48 B block, a watchdog of its own
// (Config.Tick or a Ticker other than the default) that watchdog. Each
// goroutine that runs a call through it keeps a pooled per-call state
// (sync.Pool, per P) once it has run one.
type Hedger struct {
	// Read-mostly configuration, grouped and unpadded: no word here is
	// written by every call (the counters count hedges, not calls).
	ticker rampart.Ticker
	wd     *watchdog.Watchdog
	budget rampart.Budget
	fatal  func(error) bool
	// fixed: the fixed delay (ns) when !percentile, -1 with a percentile.
	// Atomic because Update changes it: a plain load on amd64 and arm64's
	// load-acquire, once per call and per hedge, as before.
	fixed atomic.Int64
	// maxHedges: Config.MaxHedges as it applies, read at each hedge's
	// trigger (the hedge path); atomic because Update changes it.
	maxHedges  atomic.Int64
	pct        *percentileDelay // nil with a fixed delay: its histogram is 10 KB
	ext        *extras          // nil without listeners and Name
	percentile bool             // pct != nil, kept as a flag for the hot path's first test
	async      bool
	ownWD      bool
	calls      sync.Pool // *call: reusable per-call state

	// Counters of the hedge path (rare), grouped.
	hedges, won, refused, full atomic.Uint64
}

// updateMu serialises Update, and Config's reads, across all hedgers:
// racing Updates apply one Config each, whole (Delay and MaxHedges of the
// same one). Package-wide rather than a field, so that the Hedger keeps
// its size; Update is rare and the calls never take it.
var updateMu sync.Mutex

// percentileDelay is the state of a percentile delay, allocated by New only
// when Config.Percentile asks for one.
type percentileDelay struct {
	// mu guards q, minDelay, maxDelay and warmUp, which Update changes and
	// the refresh that won nextRefresh's CAS reads together (once per
	// Refresh), and serialises the stores of delay by the two.
	mu       sync.Mutex
	q        float64
	minDelay int64
	maxDelay int64
	warmUp   uint64
	// refresh (ns) is read by the refresh's CAS before it takes mu:
	// atomic, as Update changes it.
	refresh atomic.Int64

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

// extras are a hedger's listeners and its Name, allocated by New only when
// one of them is set: the calls read them only on the hedge path.
type extras struct {
	onHedge, onWon, onRefused func(int)
	panics                    atomic.Uint64
	name                      string
}

// validate returns the *rampart.ConfigError of the first invalid field of
// cfg, for New and Update.
func (cfg *Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return rampart.NewConfigError("hedge", field, format, args...)
	}
	switch {
	case cfg.Delay < 0:
		return bad("Delay", "must not be negative, got %v", cfg.Delay)
	case cfg.Percentile != 0 && !(cfg.Percentile >= 0.5 && cfg.Percentile < 1):
		return bad("Percentile", "must be 0 or in [0.5, 1), got %v", cfg.Percentile)
	case cfg.Percentile == 0 && cfg.Delay == 0:
		return bad("Delay", "must be positive when Percentile is 0")
	case cfg.MinDelay < 0:
		return bad("MinDelay", "must not be negative, got %v", cfg.MinDelay)
	case cfg.MaxDelay < 0:
		return bad("MaxDelay", "must not be negative, got %v", cfg.MaxDelay)
	case cfg.MaxDelay != 0 && cfg.MaxDelay < cfg.MinDelay:
		return bad("MaxDelay", "must be at least MinDelay (%v), got %v", cfg.MinDelay, cfg.MaxDelay)
	case cfg.WarmUp < 0:
		return bad("WarmUp", "must not be negative, got %d", cfg.WarmUp)
	case cfg.Refresh < 0:
		return bad("Refresh", "must not be negative, got %v", cfg.Refresh)
	case cfg.MaxHedges < 0 || cfg.MaxHedges > MaxHedgesLimit:
		return bad("MaxHedges", "must be in [0, %d], got %d", MaxHedgesLimit, cfg.MaxHedges)
	case cfg.Tick < 0:
		return bad("Tick", "must not be negative, got %v", cfg.Tick)
	case ticker.IsNil(cfg.Ticker):
		return bad("Ticker", ticker.NilReason, cfg.Ticker)
	}
	// Package retry's check of its own budget types (a nil or zero
	// retry.TokenBucket or retry.RatioBudget), set by retry's init. This
	// package does not import retry: when retry is not linked in, Reason is
	// nil, no budget of retry's types exists, and there is nothing to check.
	if budgetcheck.Reason != nil && cfg.Budget != nil { // nil is valid, and the check builds its message eagerly (64 B)
		if why := budgetcheck.Reason(cfg.Budget, "retry."); why != "" {
			return bad("Budget", "%s", why)
		}
	}
	return nil
}

// setParams sets the percentile's parameters from a valid cfg, defaults
// filled in (New, and Update under mu).
func (p *percentileDelay) setParams(cfg *Config) {
	p.q = cfg.Percentile
	p.minDelay = int64(cfg.MinDelay)
	p.maxDelay = int64(cfg.MaxDelay)
	if p.maxDelay == 0 {
		p.maxDelay = math.MaxInt64
	}
	p.warmUp = uint64(cfg.WarmUp)
	if p.warmUp == 0 {
		p.warmUp = DefaultWarmUp
	}
	p.refresh.Store(durationOr(cfg.Refresh, DefaultRefresh))
}

// durationOr returns d in nanoseconds, or def when d is zero.
func durationOr(d, def time.Duration) int64 {
	if d == 0 {
		return int64(def)
	}
	return int64(d)
}

// New validates cfg and returns a Hedger, or a [*rampart.ConfigError].
func New(cfg Config) (*Hedger, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Hedger{
		ticker:     cfg.Ticker,
		budget:     cfg.Budget,
		fatal:      cfg.Fatal,
		percentile: cfg.Percentile != 0,
		async:      cfg.AsyncFirst,
	}
	h.fixed.Store(int64(cfg.Delay))
	h.maxHedges.Store(int64(max(cfg.MaxHedges, 1)))
	if cfg.OnHedge != nil || cfg.OnHedgeWon != nil || cfg.OnBudgetRefused != nil || cfg.Name != "" {
		h.ext = &extras{onHedge: cfg.OnHedge, onWon: cfg.OnHedgeWon, onRefused: cfg.OnBudgetRefused, name: cfg.Name}
	}
	if h.percentile {
		p := &percentileDelay{hist: new(histogram.Histogram)}
		p.setParams(&cfg)
		h.fixed.Store(-1)
		if cfg.Delay > 0 {
			p.delay.Store(int64(cfg.Delay))
		} else {
			p.delay.Store(-1)
		}
		h.pct = p
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
		p.nextRefresh.Store(atomicx.SatAdd(h.ticker.Now(), p.refresh.Load())) // a huge Refresh must not wrap into the past
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

// Config returns the configuration in force, its defaults filled in
// (Ticker, MaxHedges, the percentile's WarmUp and Refresh), Tick set
// when the hedger has its own watchdog, and the Name New was given:
// change a field and pass it to [Hedger.Update]. With a percentile,
// Delay is the warm-up delay while the histogram warms up and 0 after.
func (h *Hedger) Config() Config {
	updateMu.Lock() // the fields of one Update
	defer updateMu.Unlock()
	c := Config{
		Delay:      time.Duration(max(h.fixed.Load(), 0)),
		MaxHedges:  int(h.maxHedges.Load()),
		Budget:     h.budget,
		Fatal:      h.fatal,
		AsyncFirst: h.async,
		Ticker:     h.ticker,
	}
	if h.ownWD {
		c.Tick = h.wd.Tick()
	}
	if x := h.ext; x != nil {
		c.Name, c.OnHedge, c.OnHedgeWon, c.OnBudgetRefused = x.name, x.onHedge, x.onWon, x.onRefused
	}
	if p := h.pct; p != nil {
		p.mu.Lock()
		c.Percentile = p.q
		c.MinDelay = time.Duration(p.minDelay)
		if p.maxDelay != math.MaxInt64 {
			c.MaxDelay = time.Duration(p.maxDelay)
		}
		c.WarmUp = int(p.warmUp)
		c.Refresh = time.Duration(p.refresh.Load())
		if p.samples.Load() < p.warmUp {
			c.Delay = time.Duration(max(p.delay.Load(), 0))
		}
		p.mu.Unlock()
	}
	return c
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
		return h.fixed.Load()
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
	if now < next || !p.nextRefresh.CompareAndSwap(next, atomicx.SatAdd(now, p.refresh.Load())) {
		return
	}
	p.mu.Lock() // the CAS's winner only: uncontended but for an Update
	defer p.mu.Unlock()
	v, n := p.hist.Quantile(p.q)
	p.samples.Store(n)
	if n < p.warmUp {
		return
	}
	p.delay.Store(p.clamp(v))
	if n >= 2*p.warmUp {
		p.hist.Decay(1)
	}
}

// clamp bounds a percentile to [MinDelay, MaxDelay], at least 1 ns: a
// delay of 0 means "not hedged" to the callers, and a percentile of 0
// (every call under one tick of a cached ticker) must still hedge the
// tail. mu held.
func (p *percentileDelay) clamp(v int64) int64 { return min(max(v, p.minDelay, 1), p.maxDelay) }

// Update changes the hedger's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates cfg
// exactly as New does, and refuses with a *rampart.ConfigError naming the
// field a change to a field fixed at construction: Name (an empty Name
// keeps the name New was given, as a registry's create-or-get sets it),
// Percentile between 0 and not 0, Ticker, Tick, Budget, Fatal, AsyncFirst
// and the listeners. Otherwise it applies Delay, MaxHedges and the percentile's Percentile,
// MinDelay, MaxDelay, WarmUp and Refresh; the latency histogram is kept.
// A call in flight reads the delay and MaxHedges afresh at each hedge, as
// it does the percentile delay. An invalid or refused cfg changes nothing.
// Racing Updates apply one cfg each, whole: the hedger ends on the fields
// of one of them, and [Hedger.Config] never reports a mix. A warmed-up
// percentile stays in force when the Update raises WarmUp above the
// samples held (it warmed up against the WarmUp it had).
func (h *Hedger) Update(cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	updateMu.Lock()
	defer updateMu.Unlock()
	if err := h.checkFixed(&cfg); err != nil {
		return err
	}
	h.maxHedges.Store(int64(max(cfg.MaxHedges, 1)))
	p := h.pct
	if p == nil {
		h.fixed.Store(int64(cfg.Delay))
		return nil
	}
	p.mu.Lock()
	warm := p.samples.Load() >= p.warmUp // against the WarmUp it warmed up with, before cfg's
	p.setParams(&cfg)
	if d := p.delay.Load(); warm && d > 0 {
		p.delay.Store(p.clamp(d)) // warmed up: the percentile in force, within the new bounds at once
	} else if cfg.Delay > 0 {
		p.delay.Store(int64(cfg.Delay)) // warming up: the new warm-up delay
	} else {
		p.delay.Store(-1)
	}
	p.mu.Unlock()
	// A shorter Refresh brings the next recomputation forward.
	now := h.ticker.Now()
	if next, want := p.nextRefresh.Load(), atomicx.SatAdd(now, p.refresh.Load()); want < next {
		p.nextRefresh.CompareAndSwap(next, want) // lost: a refresh ran meanwhile and used the new period
	}
	return nil
}

// checkFixed returns the *rampart.ConfigError of the first field of cfg
// that differs from what New fixed.
func (h *Hedger) checkFixed(cfg *Config) error {
	const fixed = "is fixed at construction: "
	var onHedge, onWon, onRefused func(int)
	name := ""
	if x := h.ext; x != nil {
		onHedge, onWon, onRefused, name = x.onHedge, x.onWon, x.onRefused, x.name
	}
	bad := func(field, format string, args ...any) error {
		return rampart.NewConfigError("hedge", field, fixed+format, args...)
	}
	switch {
	case cfg.Name != "" && cfg.Name != name: // "": the name New was given
		return bad("Name", "it names the hedger in its Config; a renamed hedger is another hedger (got %q, built with %q)", cfg.Name, name)
	case (cfg.Percentile != 0) != h.percentile:
		return bad("Percentile", "between 0 (a fixed delay) and a percentile: New allocated the latency histogram or not (got %v)", cfg.Percentile)
	case !sameTicker(cfg.Ticker, h.ticker):
		return bad("Ticker", "the watchdog and the calls in flight read the old clock")
	case h.ownWD != (cfg.Tick != 0 || !sameTicker(cfg.Ticker, rampart.DefaultTicker())) || time.Duration(durationOr(cfg.Tick, watchdog.DefaultTick)) != h.wd.Tick():
		return bad("Tick", "New chose the watchdog (shared or the hedger's own) and its sweep (got %v, sweeping every %v)", cfg.Tick, h.wd.Tick())
	case !sameptr.Value(cfg.Budget, h.budget):
		return bad("Budget", "a call notifies it at its start and at its end: a budget swapped between the two would see one without the other")
	case !sameptr.Func(cfg.Fatal, h.fatal):
		return bad("Fatal", "each attempt's error is classified by a word New set; pass the func value New was given")
	case cfg.AsyncFirst != h.async:
		return bad("AsyncFirst", "every call reads it from a word New set to choose its path (got %v)", cfg.AsyncFirst)
	case !sameptr.Func(cfg.OnHedge, onHedge):
		return bad("OnHedge", "New allocated the listeners' block, or not; pass the func value New was given")
	case !sameptr.Func(cfg.OnHedgeWon, onWon):
		return bad("OnHedgeWon", "New allocated the listeners' block, or not; pass the func value New was given")
	case !sameptr.Func(cfg.OnBudgetRefused, onRefused):
		return bad("OnBudgetRefused", "New allocated the listeners' block, or not; pass the func value New was given")
	}
	return nil
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
	if h.ext != nil {
		st.ListenerPanics = h.ext.panics.Load()
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
	if l := h.ext; l != nil && l.onHedge != nil {
		notify.Call1(&l.panics, l.onHedge, attempt)
	}
}

func (h *Hedger) notifyWon(attempt int) {
	if l := h.ext; l != nil && l.onWon != nil {
		notify.Call1(&l.panics, l.onWon, attempt)
	}
}

func (h *Hedger) notifyRefused(attempt int) {
	if l := h.ext; l != nil && l.onRefused != nil {
		notify.Call1(&l.panics, l.onRefused, attempt)
	}
}
