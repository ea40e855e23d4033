package timeout

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/lazyctx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// ErrTimeout matches, through errors.Is, every error a Timeout returns
// because a call overran its deadline. It also matches
// context.DeadlineExceeded, so code that checks for the standard error keeps
// working.
var ErrTimeout error = &sentinelError{"timeout: deadline exceeded"}

// ErrTooManyAbandoned is the reason of the rejection returned by
// [Timeout.DoAbandon] and [CallAbandon] when MaxAbandoned functions are
// already abandoned and still running. The rejection matches it and
// rampart.ErrRejected.
var ErrTooManyAbandoned = errors.New("too many abandoned calls")

type sentinelError struct{ msg string }

func (e *sentinelError) Error() string { return e.msg }

// Is makes ErrTimeout match context.DeadlineExceeded.
func (e *sentinelError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true (the net.Error convention).
func (e *sentinelError) Timeout() bool { return true }

// Error is the error a Timeout instance returns when a call overran its
// deadline. Each instance builds one at construction and returns that same
// pointer: a timeout allocates and formats nothing. It matches ErrTimeout
// and context.DeadlineExceeded through errors.Is.
type Error struct {
	name string
	d    time.Duration
	msg  string
}

// Error returns e.g. `timeout "db": deadline exceeded (100ms)`.
func (e *Error) Error() string { return e.msg }

// Unwrap returns ErrTimeout.
func (e *Error) Unwrap() error { return ErrTimeout }

// Timeout reports true (the net.Error convention).
func (e *Error) Timeout() bool { return true }

// Name returns the configured name of the Timeout.
func (e *Error) Name() string { return e.name }

// Duration returns the configured timeout.
func (e *Error) Duration() time.Duration { return e.d }

// Mode selects how a Timeout enforces its deadline on the caller's
// goroutine ([Timeout.Do], [Call], [Timeout.StartAt] and [Timeout.FinishAt]).
// Abandoning a callee that ignores its context is not a mode but a choice
// at the call site: [Timeout.DoAbandon] and [CallAbandon], on a Timeout of
// either mode.
type Mode uint8

const (
	// ModeDeadline (the default) hands the function a context that is done
	// at the deadline (or when the parent is done) and returns ErrTimeout
	// when the call ended after the deadline. The function runs on the
	// caller's goroutine; the caller returns when the function does, so the
	// function must honour the context. Costs one allocation per call (the
	// context) and no goroutine; a function that asks for Done adds its
	// channel, and under a cancellable parent the registration on the
	// parent (three allocations in all: see the package doc, Reading
	// Done). Do and Call keep the caller's closure on its stack (see the
	// package doc, Allocations).
	ModeDeadline Mode = iota
	// ModeSoft only classifies: the function gets the parent context
	// unchanged and nothing cancels it; the call returns ErrTimeout when it
	// ended after the deadline. No allocation, no watchdog; Do and Call
	// keep the caller's closure on its stack (see the package doc,
	// Allocations).
	ModeSoft
)

// String returns "deadline" or "soft".
func (m Mode) String() string {
	switch m {
	case ModeDeadline:
		return "deadline"
	case ModeSoft:
		return "soft"
	}
	return "Mode(invalid)"
}

// DefaultMaxAbandoned is the bound on abandoned functions (of DoAbandon
// and CallAbandon) when Config.MaxAbandoned is zero.
const DefaultMaxAbandoned = 1000

// Watchdog is the shared deadline timer: one goroutine that sweeps a table
// of armed deadlines every tick and fires the due ones. Timeouts (and hedges)
// that use the same ticker can share one. See NewWatchdog.
type Watchdog = watchdog.Watchdog

// NewWatchdog returns a Watchdog sweeping every tick (1 ms when tick <= 0)
// against tk (rampart.DefaultTicker() when nil, or a nil pointer of one of
// rampart's ticker types, which could not be read), to share between the
// policies of a pipeline. Its goroutine starts on first use and exits when
// idle for a second; Close it when done (tests under testing/synctest must,
// before the bubble ends).
func NewWatchdog(tick time.Duration, tk rampart.Ticker) *Watchdog {
	var clk watchdog.Clock
	if tk != nil && !ticker.IsNil(tk) {
		clk = tk
	}
	return watchdog.New(watchdog.Config{Tick: tick, Clock: clk})
}

// Config configures a Timeout. Only Duration is required.
type Config struct {
	// Duration is the timeout, measured from the start of the call. It must
	// be positive.
	Duration time.Duration
	// Mode is ModeDeadline (zero value) or ModeSoft; New refuses any other
	// value.
	Mode Mode
	// Name names the instance in its errors.
	Name string
	// Ticker is the clock (nil: rampart.DefaultTicker()). With a Watchdog it
	// must be the Watchdog's clock (nil then means the Watchdog's clock).
	Ticker rampart.Ticker
	// Watchdog fires the deadlines. Nil means: the process-wide watchdog
	// (1 ms tick) when Tick is zero and Ticker is nil or
	// rampart.DefaultTicker(); otherwise a watchdog of this Timeout's own,
	// stopped by Close.
	Watchdog *Watchdog
	// Tick is the sweep period of the Timeout's own watchdog, and so the
	// precision of the deadline: a deadline fires at most one Tick after it
	// passed. Zero means 1 ms. Must be zero, or equal to Watchdog.Tick(),
	// when Watchdog is set.
	Tick time.Duration
	// MaxAbandoned bounds the functions that DoAbandon and CallAbandon
	// abandoned and that are still running; while it is reached, those
	// calls are rejected without starting anything. Zero means
	// DefaultMaxAbandoned. Do, Call and StartAt never abandon.
	MaxAbandoned int
	// Workers bounds, for DoAbandon and CallAbandon, the worker goroutines
	// the Timeout keeps for reuse: busy, abandoned and idle ones together.
	// A call hands its function to an idle worker instead of starting a
	// goroutine; a call that finds every worker busy starts a goroutine of
	// its own. An idle worker exits after one to two seconds without a
	// call, and at Close. The table of workers (about 192 bytes each) is
	// allocated on the first DoAbandon. Zero means DefaultWorkers.
	Workers int
	// OnTimeout is called when a call is classified as timed out, with its
	// duration up to the moment it was classified (nil: not called).
	OnTimeout func(elapsed time.Duration)
	// OnAbandon is called when a DoAbandon or CallAbandon call is
	// abandoned, with the number of abandoned functions still running, this
	// one included.
	OnAbandon func(abandoned int64)
	// OnRejected is called when a call is rejected because MaxAbandoned
	// functions are abandoned, with that number.
	OnRejected func(abandoned int64)
}

// Timeout bounds the duration of calls. Create it with [New] and run calls
// through [Timeout.Do] or [Call] (the callee honours its context) or
// [Timeout.DoAbandon] / [CallAbandon] (it may not); [Timeout.Start] and then
// exactly one [Timeout.Finish] bracket a call by hand.
//
// In deadline mode a shared watchdog fires the deadlines, with no goroutine
// or runtime timer per call; soft mode only classifies (see the package
// documentation for the modes). A Timeout is safe for concurrent use.
//
// The zero value is not usable; build with New. (Its clock, watchdog and
// configuration are set there: on a zero Timeout every call panics, and
// Ticker returns nil, by which package pipeline refuses it.)
type Timeout struct {
	// cur is the configuration that calls read (Duration, the error, the
	// listeners, MaxAbandoned), immutable once published; New's is
	// allocated with the timeout error it holds, so it costs no
	// allocation of its own. A call loads it once, at its start, and
	// keeps it to its end, in its context (soft mode: its Handle) or job.
	cur atomic.Pointer[settings]

	// Read-only after New.
	mode     Mode
	ownWd    bool
	nWorkers int32 // Config.Workers, defaults filled in
	tk       rampart.Ticker
	wd       *watchdog.Watchdog
	// epoch is the instant at which the ticker read 0 (time.Now() minus a
	// reading, taken in New): converts ticker deadlines to time.Time.
	epoch time.Time

	// workers is DoAbandon's machinery (worker slots, the pool of jobs,
	// the abandon counters and the named rejection), built by its first
	// call: a Timeout that never abandons carries one nil pointer.
	workers atomic.Pointer[workerPool]

	// Words written on rare events only (timeouts, fallbacks, listener
	// panics), never on the success path, so nothing here is padded: a
	// storm of timeouts writes this line, but so it would the timeout
	// counter's.
	timeouts       atomic.Uint64
	fallbacks      atomic.Uint64
	listenerPanics atomic.Uint64
}

// settings is what a call reads of a Timeout's configuration: the timeout
// error (which holds the name and the Duration), MaxAbandoned and the
// listeners. Immutable once published in Timeout.cur.
type settings struct {
	t          *Timeout // whose they are: a call's context reaches the Timeout's epoch through them
	err        Error
	maxAband   int64
	onTimeout  func(time.Duration)
	onAbandon  func(int64)
	onRejected func(int64)
}

// d is the configured Duration in nanoseconds.
func (s *settings) d() int64 { return int64(s.err.d) }

// New validates cfg and returns a Timeout.
func New(cfg Config) (*Timeout, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	t := &Timeout{mode: cfg.Mode, nWorkers: int32(cfg.workers())}
	var plan wdPlan
	t.tk, plan = cfg.plan()
	switch plan {
	case wdGiven:
		t.wd = cfg.Watchdog
	case wdDefault:
		t.wd = watchdog.Default()
	case wdOwn:
		t.wd = watchdog.New(watchdog.Config{Tick: cfg.Tick, Clock: t.tk})
		t.ownWd = true
	}
	t.epoch = time.Now().Add(-time.Duration(t.tk.Now()))
	t.cur.Store(newSettings(t, &cfg))
	return t, nil
}

// check validates cfg: the errors New (and Update) returns.
func (cfg *Config) check() error {
	if cfg.Duration <= 0 {
		return rampart.NewConfigError("timeout", "Duration", "must be positive, got %v", cfg.Duration)
	}
	if cfg.Mode > ModeSoft {
		return rampart.NewConfigError("timeout", "Mode", "must be ModeDeadline or ModeSoft, got %d", cfg.Mode)
	}
	if cfg.Tick < 0 {
		return rampart.NewConfigError("timeout", "Tick", "must not be negative, got %v", cfg.Tick)
	}
	if cfg.MaxAbandoned < 0 {
		return rampart.NewConfigError("timeout", "MaxAbandoned", "must not be negative, got %d", cfg.MaxAbandoned)
	}
	if cfg.Workers < 0 || cfg.Workers > maxWorkers {
		return rampart.NewConfigError("timeout", "Workers", "must be in [0, %d], got %d", maxWorkers, cfg.Workers)
	}
	if ticker.IsNil(cfg.Ticker) {
		return rampart.NewConfigError("timeout", "Ticker", ticker.NilReason, cfg.Ticker)
	}
	if wd := cfg.Watchdog; wd != nil {
		if cfg.Tick != 0 && cfg.Tick != wd.Tick() {
			return rampart.NewConfigError("timeout", "Tick", "is %v but the Watchdog ticks every %v", cfg.Tick, wd.Tick())
		}
		if cfg.Ticker != nil {
			if same, ok := ticker.Equal(watchdog.Clock(cfg.Ticker), wd.Clock()); !ok {
				return rampart.NewConfigError("timeout", "Ticker", ticker.UncomparableReason, cfg.Ticker)
			} else if !same {
				return rampart.NewConfigError("timeout", "Ticker", "must be the Watchdog's clock (readings of two clocks are not comparable)")
			}
		}
	}
	return nil
}

// workers is Config.Workers with its default filled in.
func (cfg *Config) workers() int {
	if cfg.Workers == 0 {
		return DefaultWorkers
	}
	return cfg.Workers
}

// wdPlan is the watchdog a checked Config asks for.
type wdPlan uint8

const (
	wdNone    wdPlan = iota // soft mode: none
	wdGiven                 // Config.Watchdog
	wdDefault               // the process-wide one
	wdOwn                   // the Timeout's own, ticking every Config.Tick
)

// plan returns the clock and the watchdog a checked cfg asks for (see
// Config.Watchdog), without building a watchdog.
func (cfg *Config) plan() (rampart.Ticker, wdPlan) {
	tk := cfg.Ticker
	switch {
	case cfg.Watchdog != nil:
		if tk == nil {
			tk = cfg.Watchdog.Clock()
		}
		return tk, wdGiven
	case cfg.Tick == 0 && (tk == nil || tk == rampart.DefaultTicker()):
		tk = rampart.DefaultTicker()
		if cfg.Mode == ModeSoft {
			return tk, wdNone
		}
		return tk, wdDefault
	default:
		if tk == nil {
			tk = rampart.DefaultTicker()
		}
		if cfg.Mode == ModeSoft {
			return tk, wdNone
		}
		return tk, wdOwn
	}
}

// Update changes the Timeout's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates c exactly
// as New does, and refuses with a *rampart.ConfigError naming the field a
// change to a field fixed at construction: Name (an empty Name keeps the
// name New was given, as a registry's create-or-get sets it on the
// caller's behalf), Mode, Ticker, Watchdog, Tick (ignored in soft mode, as
// by New) and Workers (pass the Config New was given, or
// [Timeout.Config]'s, with Duration, MaxAbandoned or the listeners
// changed). An
// invalid or refused c changes nothing. Otherwise the calls that start
// after it use c; a call in progress keeps the configuration it started
// under to its end (its deadline, its timeout error, its listeners), so
// it never mixes the two. Err and Duration return the new values: the
// error of a new Duration is a new *Error (its message states the
// Duration). It allocates the new configuration (one object, and the
// error's message); calls still allocate what they did.
func (t *Timeout) Update(c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	const fixed = "is fixed at construction: "
	old := t.cur.Load()
	tk, plan := c.plan()
	switch {
	case c.Name != "" && c.Name != old.err.name: // "": the name New was given
		return rampart.NewConfigError("timeout", "Name", fixed+"the timeout and rejection errors carry it, and callers hold those already returned (got %q, built with %q)", c.Name, old.err.name)
	case c.Mode != t.mode:
		return rampart.NewConfigError("timeout", "Mode", fixed+"New chose from it whether calls get a context the watchdog ends (got %v, built with %v)", c.Mode, t.mode)
	case !sameptr.Value(tk, t.tk):
		return rampart.NewConfigError("timeout", "Ticker", fixed+"the deadlines of the calls in flight are readings of the old clock, which the watchdog compares with its own")
	case plan != t.plan() && (c.Watchdog != nil || t.plan() == wdGiven):
		return rampart.NewConfigError("timeout", "Watchdog", fixed+"the calls in flight are armed on the watchdog New chose")
	case plan != t.plan():
		return rampart.NewConfigError("timeout", "Tick", fixed+"it chose between the shared watchdog and one of the Timeout's own, on which the calls in flight are armed (got %v)", c.Tick)
	case plan == wdGiven && c.Watchdog != t.wd:
		return rampart.NewConfigError("timeout", "Watchdog", fixed+"the calls in flight are armed on the watchdog New was given")
	case plan == wdOwn && watchdogTick(c.Tick) != t.wd.Tick():
		return rampart.NewConfigError("timeout", "Tick", fixed+"the Timeout's own watchdog sweeps every %v, and the calls in flight are armed on it (got %v)", t.wd.Tick(), c.Tick)
	case c.workers() != int(t.nWorkers):
		return rampart.NewConfigError("timeout", "Workers", fixed+"the first DoAbandon allocates the table of workers at that size (got %d, built with %d)", c.Workers, t.nWorkers)
	}
	c.Name = old.err.name // an empty Name keeps it
	t.cur.Store(newSettings(t, &c))
	return nil
}

// Config returns the configuration in force (the last Update's, or New's)
// with its defaults filled in: the Ticker and MaxAbandoned, Workers, and
// Tick of the watchdog the Timeout fires its deadlines on (its own, or the
// Watchdog it was given; 0 on the process-wide one and in soft mode
// without a Watchdog). Update accepts it back, changed or not.
func (t *Timeout) Config() Config {
	s := t.cur.Load()
	c := Config{
		Duration:     s.err.d,
		Mode:         t.mode,
		Name:         s.err.name,
		Ticker:       t.tk,
		MaxAbandoned: int(s.maxAband),
		Workers:      int(t.nWorkers),
		OnTimeout:    s.onTimeout,
		OnAbandon:    s.onAbandon,
		OnRejected:   s.onRejected,
	}
	switch t.plan() {
	case wdGiven:
		c.Watchdog, c.Tick = t.wd, t.wd.Tick()
	case wdOwn:
		c.Tick = t.wd.Tick()
	}
	return c
}

// plan returns the watchdog New chose (see Config.plan).
func (t *Timeout) plan() wdPlan {
	switch {
	case t.wd == nil:
		return wdNone
	case t.ownWd:
		return wdOwn
	case t.wd == watchdog.Default():
		return wdDefault
	}
	return wdGiven
}

// watchdogTick is the sweep period of a watchdog built with Tick tick
// (see NewWatchdog: 1 ms when tick <= 0).
func watchdogTick(tick time.Duration) time.Duration {
	if tick <= 0 {
		return time.Millisecond
	}
	return tick
}

// newSettings builds the settings of a validated cfg: one allocation
// with the error, and its message in one concatenation (a temporary
// string would count against every instance).
func newSettings(t *Timeout, cfg *Config) *settings {
	var msg string
	if cfg.Name == "" {
		msg = "timeout: deadline exceeded (" + cfg.Duration.String() + ")"
	} else {
		msg = "timeout \"" + cfg.Name + "\": deadline exceeded (" + cfg.Duration.String() + ")"
	}
	s := &settings{
		t:          t,
		err:        Error{name: cfg.Name, d: cfg.Duration, msg: msg},
		maxAband:   int64(cfg.MaxAbandoned),
		onTimeout:  cfg.OnTimeout,
		onAbandon:  cfg.OnAbandon,
		onRejected: cfg.OnRejected,
	}
	if s.maxAband == 0 {
		s.maxAband = DefaultMaxAbandoned
	}
	return s
}

// rejection returns the rejection error of DoAbandon for a Timeout named
// name: built for a named one (when its pool is), shared by unnamed ones.
func rejection(name string) *rampart.RejectedError {
	if name == "" {
		return unnamedRejected
	}
	return rampart.NewRejectedError("timeout", name, ErrTooManyAbandoned)
}

// unnamedRejected is the rejection error of every unnamed Timeout: built
// once, shared (it holds no instance state).
var unnamedRejected = rampart.NewRejectedError("timeout", "", ErrTooManyAbandoned)

// Close stops the Timeout's DoAbandon workers and its own watchdog, if
// it has one (see Config.Watchdog), and waits for their goroutines to exit:
// the idle workers and the watchdog's goroutine; a worker busy with a call
// (abandoned or not) exits as soon as its function returns. Calls in flight
// and calls made after Close still time out, each with a runtime timer
// when the watchdog was the Timeout's own; DoAbandon and CallAbandon calls
// after Close start a goroutine each. Close is idempotent; on a Timeout on a shared
// watchdog that never ran DoAbandon it does nothing.
func (t *Timeout) Close() error {
	for {
		if p := t.workers.Load(); p != nil {
			p.close()
			break
		}
		if t.workers.CompareAndSwap(nil, t.closedWorkers()) {
			break
		}
	}
	if t.ownWd {
		// The calls in flight keep their deadlines (runtime timers).
		return t.wd.CloseHandOff()
	}
	return nil
}

// Duration returns the configured timeout.
func (t *Timeout) Duration() time.Duration { return t.cur.Load().err.d }

// Mode returns the configured mode.
func (t *Timeout) Mode() Mode { return t.mode }

// Ticker returns the clock the primitive methods' now arguments come from.
func (t *Timeout) Ticker() rampart.Ticker { return t.tk }

// Err returns the instance's timeout error (the value FinishAt returns for a
// call that overran).
func (t *Timeout) Err() *Error { return &t.cur.Load().err }

// Handle is one call in progress between StartAt and FinishAt. It is a small
// value; pass it back to FinishAt exactly once.
//
// It is four words, returned and copied on every call: a fifth would make
// the compiler copy it with 16-byte loads that straddle the 8-byte stores
// that filled it, which stalls the CPU (store forwarding fails).
type Handle struct {
	// ref is the call's *ctx in deadline mode (which holds the
	// configuration the call started under), that configuration's
	// *settings in soft mode; nil in a zero Handle. (See Timeout.callOf.)
	ref      unsafe.Pointer
	deadline int64           // ticker reading
	wh       watchdog.Handle // the watch (zero when a fallback timer is used)
	tm       *time.Timer     // the fallback timer, when the watchdog refused
}

// Deadline returns the call's deadline as a ticker reading.
func (h Handle) Deadline() int64 { return h.deadline }

// StartAt begins a call at now (a reading of t.Ticker()) and returns the
// context to hand to the callee and the Handle to pass to FinishAt.
//
// In ModeDeadline the context is a fresh object, done at
// now+Duration (within one watchdog tick), when parent is done, or at
// FinishAt; it costs one allocation, a slot in the watchdog (no allocation)
// and no goroutine. In ModeSoft the context is parent itself: nothing is
// allocated or scheduled.
//
// Every StartAt must be followed by exactly one FinishAt, on every path (a
// panic included), or the watch slot stays armed until the deadline.
func (t *Timeout) StartAt(parent context.Context, now int64) (context.Context, Handle) {
	s := t.cur.Load()                      // one load: the call keeps this configuration to its end
	deadline := atomicx.SatAdd(now, s.d()) // a huge Duration must not wrap into the past
	if t.mode == ModeSoft {
		return parent, Handle{ref: unsafe.Pointer(s), deadline: deadline}
	}
	c := newCtx(parent, s, deadline)
	wh, tm := t.watch((*fireTarget)(c), deadline, now)
	return c, Handle{ref: unsafe.Pointer(c), deadline: deadline, wh: wh, tm: tm}
}

// Start is [Timeout.StartAt] at a reading of the timeout's Ticker. End the
// call with [Timeout.Finish] or [Timeout.FinishAt] exactly once.
func (t *Timeout) Start(parent context.Context) (context.Context, Handle) {
	return t.StartAt(parent, t.tk.Now())
}

// watch arms the watchdog for target, falling back to a runtime timer
// when the watchdog refuses (closed, or its table is full).
func (t *Timeout) watch(target watchdog.Target, deadline, now int64) (watchdog.Handle, *time.Timer) {
	if h, ok := t.wd.Schedule(deadline, target, 0); ok {
		return h, nil
	}
	return watchdog.Handle{}, t.watchSlow(target, deadline, now)
}

// watchSlow is the slow path of watch: one runtime timer for this call
// (it costs the timer and the closure).
func (t *Timeout) watchSlow(target watchdog.Target, deadline, now int64) *time.Timer {
	t.fallbacks.Add(1)
	return time.AfterFunc(time.Duration(deadline-now), func() { target.Fire(0) })
}

// unwatch disarms a watch: the watchdog's slot wh, or else the fallback
// timer tm. It reports whether the watch had not fired.
func (t *Timeout) unwatch(wh watchdog.Handle, tm *time.Timer) bool {
	if wh.Valid() {
		return t.wd.Cancel(wh)
	}
	return tm != nil && tm.Stop()
}

// FinishAt ends the call started with h at now (a reading of t.Ticker()) and
// classifies it. It returns t.Err() (matching ErrTimeout and
// context.DeadlineExceeded) when the call overran: now is at or past the
// deadline, or the deadline fired before FinishAt. Otherwise it returns err
// unchanged, including when the parent context's own deadline or
// cancellation ended the call (that is not this Timeout's doing).
//
// A call that overran is a timeout whatever the function returned: a
// result (even a success) that arrives after the deadline is discarded by
// FinishAt (Call still hands the value back next to the error), so that the
// caller's budget and the upstream policies (a breaker's failure rate, a
// retry) see one consistent outcome. A callee that wants its late success
// kept must finish before the deadline.
//
// In deadline mode FinishAt also releases the watch slot and ends the context
// with context.Canceled if it is still live (like the cancel func of
// context.WithTimeout); a context the callee kept stays done with that error
// forever. Costs: one CAS to disarm the watch, one to cache its slot for
// the next call and one to end the context; soft mode costs a comparison.
//
// now may be [rampart.NotRead] when the caller has no end reading and needs none
// for itself (package pipeline, when no other policy takes the end time):
// deadline mode then classifies as [Timeout.Do] does, by the watchdog alone
// (a timeout when the deadline fired before FinishAt: the verdict agrees with
// what the callee's context said, and is as precise as the watchdog, one
// tick), which saves a clock read; soft mode, which has no watchdog, reads
// the ticker.
func (t *Timeout) FinishAt(h Handle, now int64, err error) error {
	if t.mode == ModeSoft && now != rampart.NotRead && now < h.deadline {
		// Soft mode, in time: small enough to be inlined into the caller.
		return err
	}
	return t.finish(h, now, err)
}

// Finish is [Timeout.FinishAt] without an end reading: it passes
// [rampart.NotRead], as [Timeout.Do] does, and the timeout reads its
// Ticker only when the verdict needs it.
func (t *Timeout) Finish(h Handle, err error) error { return t.FinishAt(h, rampart.NotRead, err) }

// finish is FinishAt after its soft-mode fast path.
func (t *Timeout) finish(h Handle, now int64, err error) error {
	if now == rampart.NotRead {
		return t.end(h, err)
	}
	c, s := t.callOf(h)
	if c == nil {
		if now >= h.deadline {
			return t.timedOut(s, now-(h.deadline-s.d()))
		}
		return err
	}
	t.unwatch(h.wh, h.tm)
	return t.classify(s, c, h.deadline, now, err)
}

// callOf returns h's context (nil in soft mode) and the configuration its
// call started under: the current one for a zero Handle (FinishAt on a
// soft-mode Timeout accepts one: its deadline is 0).
func (t *Timeout) callOf(h Handle) (*ctx, *settings) {
	if h.ref == nil {
		return nil, t.cur.Load()
	}
	if t.mode == ModeSoft {
		return nil, (*settings)(h.ref)
	}
	c := (*ctx)(h.ref)
	return c, c.s
}

// classify ends c (Canceled if still live) and classifies the call: a
// timeout if our deadline fired or the clock says it passed.
func (t *Timeout) classify(s *settings, c *ctx, deadline, now int64, err error) error {
	c.end(lazyctx.Finished)
	if now >= deadline || c.code() == lazyctx.Fired {
		return t.timedOut(s, now-(deadline-s.d()))
	}
	return err
}

// timedOut is the slow path of FinishAt: count, notify, return the
// preallocated error of the call's configuration s.
func (t *Timeout) timedOut(s *settings, elapsed int64) error {
	t.timeouts.Add(1)
	if s.onTimeout != nil {
		notify.Call1(&t.listenerPanics, s.onTimeout, time.Duration(elapsed))
	}
	return &s.err
}

// end is FinishAt for Do and Call, which read the clock only at the start: in
// deadline mode the call is a timeout when the watchdog fired before it
// returned (so the classification agrees with what the callee's context
// said, and is as precise as the watchdog: one tick); soft mode has no
// watchdog and reads the clock.
func (t *Timeout) end(h Handle, err error) error {
	c, s := t.callOf(h)
	if c == nil {
		return t.FinishAt(h, t.tk.Now(), err)
	}
	t.unwatch(h.wh, h.tm)
	return t.endFired(s, c, h.deadline, err)
}

// endFired ends c (Canceled if still live) and classifies the call,
// started under s, by the fire alone: a timeout when the deadline fired
// first.
func (t *Timeout) endFired(s *settings, c *ctx, deadline int64, err error) error {
	if !c.end(lazyctx.Finished) && c.code() == lazyctx.Fired {
		elapsed := s.d() // at least the duration; the clock tells how much more
		if s.onTimeout != nil {
			elapsed = t.tk.Now() - (deadline - s.d()) // only a listener needs it
		}
		return t.timedOut(s, elapsed)
	}
	return err
}

// abort ends a call whose function panicked or called runtime.Goexit:
// release the watch and end the context, classify nothing.
func (t *Timeout) abort(h Handle) {
	if c, _ := t.callOf(h); c != nil {
		t.unwatch(h.wh, h.tm)
		c.end(lazyctx.Finished)
	}
}

// Do calls fn under the timeout, in the configured mode, on the caller's
// goroutine: it returns when fn does, so fn must honour its context (use
// DoAbandon for a callee that does not). It returns fn's error unchanged,
// or t.Err() when the call overran. A panic in fn releases the watch and is
// re-raised; so does runtime.Goexit.
//
// In deadline mode Do reads the ticker once, at the start, and the call
// overran when the watchdog fired its deadline before fn returned: the
// classification agrees with what fn's context said, and is as precise as
// the watchdog (a call that returns less than one tick after its deadline,
// before the sweep, counts as in time). Soft mode reads the ticker at the
// start and at the end and compares (exact). Use StartAt/FinishAt with your own
// end reading for an exact classification in deadline mode.
//
// Do does not keep fn: a closure that captures variables stays on the
// caller's stack, so Do costs what StartAt and FinishAt cost (one allocation in
// deadline mode, the context; none in soft mode; see the package doc,
// Allocations).
func (t *Timeout) Do(ctx context.Context, fn func(context.Context) error) error {
	c, h := t.StartAt(ctx, t.tk.Now())
	ok := false
	defer func() {
		if !ok {
			t.abort(h)
		}
	}()
	err := fn(c)
	ok = true
	return t.end(h, err)
}

// Call is the typed form of Do (same goroutine, clock reads,
// classification and allocations: fn is not kept): it returns fn's
// value with fn's error, or with t.Err() when the call overran (the value
// is whatever fn returned, usually to be ignored). CallAbandon is the typed
// form of DoAbandon.
func Call[T any](ctx context.Context, t *Timeout, fn func(context.Context) (T, error)) (T, error) {
	c, h := t.StartAt(ctx, t.tk.Now())
	ok := false
	defer func() {
		if !ok {
			t.abort(h)
		}
	}()
	v, err := fn(c)
	ok = true
	return v, t.end(h, err)
}

// CallAbandon is the typed form of [Timeout.DoAbandon], for a callee that
// may ignore its context: fn runs on another goroutine and the call returns
// when fn does, at t's deadline, or when ctx is done, whichever comes
// first, in either mode. onDone (if not nil) runs exactly once, after fn
// has truly ended (or at once when the call is rejected). Errors, panics
// and runtime.Goexit are DoAbandon's. It returns fn's value when fn
// returned before CallAbandon did (next to t.Err() if that was after the
// deadline); the value of an abandoned call is lost: the zero T comes back
// with the error, and the value fn returns later is dropped.
//
// fn runs on another goroutine and may outlive the call, so a closure that
// captures variables is allocated, and CallAbandon adds a
// result box and the closure that fills it to DoAbandon's allocations (see
// the package doc, Allocations).
func CallAbandon[T any](ctx context.Context, t *Timeout, fn func(context.Context) (T, error), onDone func()) (T, error) {
	var r callResult[T]
	err := t.DoAbandon(ctx, r.wrap(fn), onDone)
	if r.ok.Load() {
		return r.v, err
	}
	var zero T
	return zero, err
}

// callResult is CallAbandon's box for fn's value: written by fn's
// goroutine, read by the caller only when ok says that the write came
// before DoAbandon returned (an abandoned fn may write it later, unread).
type callResult[T any] struct {
	v  T
	ok atomic.Bool // v was written before DoAbandon returned
}

func (r *callResult[T]) wrap(fn func(context.Context) (T, error)) func(context.Context) error {
	return func(c context.Context) error {
		v, err := fn(c)
		r.v = v
		r.ok.Store(true)
		return err
	}
}

// Stats are the counters of a Timeout.
type Stats struct {
	Timeouts       uint64 // calls classified as timed out
	Abandoned      int64  // functions abandoned (DoAbandon, CallAbandon) and still running
	AbandonedTotal uint64 // functions ever abandoned
	Rejected       uint64 // calls rejected because MaxAbandoned was reached
	Fallbacks      uint64 // calls timed by a runtime timer: the watchdog refused, or DoAbandon on a soft-mode Timeout (which has none)
	ListenerPanics uint64 // listener calls that panicked (recovered)
	Workers        int64  // DoAbandon worker goroutines alive now (busy, abandoned or idle)
}

// Stats returns the counters. It allocates nothing.
func (t *Timeout) Stats() Stats {
	s := Stats{
		Timeouts:       t.timeouts.Load(),
		Fallbacks:      t.fallbacks.Load(),
		ListenerPanics: t.listenerPanics.Load(),
	}
	if p := t.workers.Load(); p != nil { // nil until the first DoAbandon or Close: all zero
		s.Abandoned, s.AbandonedTotal, s.Rejected = p.abandoned.Load(), p.abandonedTotal.Load(), p.rejected.Load()
		s.Workers = p.live.Load()
	}
	return s
}
