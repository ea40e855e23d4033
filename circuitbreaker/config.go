package circuitbreaker

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
)

// State is a breaker state. The first three are the automatic states; the
// last three are entered only by hand ([Breaker.TransitionTo]) and left only
// by hand.
type State uint8

const (
	// Closed admits every call and judges their results.
	Closed State = iota
	// Open rejects every call until the open duration has passed.
	Open
	// HalfOpen admits a limited number of probe calls whose results decide
	// whether to close or to open again.
	HalfOpen
	// Disabled admits every call and records nothing.
	Disabled
	// ForcedOpen rejects every call until another manual transition.
	ForcedOpen
	// MetricsOnly admits every call and records results into the window (so
	// Stats shows the rates), but never trips.
	MetricsOnly
)

var stateNames = [...]string{"closed", "open", "half-open", "disabled", "forced-open", "metrics-only"}

// String returns the state's name, e.g. "half-open".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// Mode selects how health is judged in the closed state.
type Mode uint8

const (
	// CountWindow judges the failure and slow-call rates of the last
	// WindowSize calls (the default).
	CountWindow Mode = iota
	// TimeWindow judges the rates of the calls of the last TimeWindow,
	// kept in Buckets buckets.
	TimeWindow
	// Consecutive trips after ConsecutiveFailures failures in a row. It has
	// no time decay: a slow trickle of failures with no success in between
	// still trips.
	Consecutive
)

var modeNames = [...]string{"count", "time", "consecutive"}

// String returns the mode's name, e.g. "count".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "invalid"
}

// Config configures a [Breaker]. Every zero field means its documented
// default: the zero Config is a count-window breaker over the last 100
// calls that opens when at least 10 calls were seen and half of them
// failed, for 5 s after the first trip and twice as long after each
// half-open period that fails again, up to 60 s; it then admits 5 probes and
// closes when fewer than half of them fail (at most 2 of the 5), reopening
// as soon as 3 have failed.
type Config struct {
	// Name appears in the rejection error's message. Optional.
	Name string
	// Ticker is the clock the shorthand methods (Do, Call, TransitionTo,
	// Stats) read. Default rampart.DefaultTicker().
	Ticker rampart.Ticker
	// Compact lays the instance out without cache-line padding but for
	// its hot line: smaller once it has tripped (512 B instead of up to
	// 960 B with the default count window: the default layout adds 64 B
	// per P after the first, up to 448 B, at its first trip; both are
	// 512 B until then, 768 B with the default time window), for the many
	// cold instances (per-tenant, per-route keys) where goroutines do not
	// contend on one instance; the default pads the words that many
	// goroutines write on every call. Exactly, Compact changes one thing:
	// rejections are counted with one atomic add on the hot line instead
	// of in per-P counters (a counter line per P after the first, up to 7,
	// allocated at the first transition to Open, HalfOpen or ForcedOpen;
	// 64 B a line on amd64, 128 B on arm64). Both layouts keep the words
	// that records write (the window's sequence and counters, the failure
	// counts) on a cache line of their own, away from the state word that
	// every call reads, and pack a window's slots and buckets (see the
	// package documentation, Memory).
	Compact bool
	// CountStats turns on the Successes counter of Stats: every Success
	// released (Release, ReleaseAt, Do, Call), in every state and with a
	// stale permit too, but for a slow success in Consecutive mode that is
	// recorded as a failure (counted in Failures instead). Failures counts
	// only the failures recorded (the current generation, not Disabled),
	// so the two are not symmetric: a stale Success is in Successes (and
	// StaleResults), a stale Failure in StaleResults only. Successes
	// answers "how many calls went well", which a stale or unjudged
	// success did; Successes + Failures is every Success and Failure
	// released but the stale failures and Disabled's. Off by default: a healthy breaker then
	// writes nothing on a success. On, a success adds one to a counter of
	// the P that runs the caller, allocated at New: one 64 B line per P
	// up to 8 (128 B on arm64), for the Ps that exist at New (GOMAXPROCS),
	// one line with Compact. A P with a line of its own adds to its word
	// there with a plain add, pinned meanwhile, as no other P writes that
	// word; the Ps beyond the lines (more than 8, or GOMAXPROCS raised
	// after New) add atomically to a spare word of one of those lines,
	// which the line's own P does not write: exact counts, and false
	// sharing of that line only. Compact: one atomic add on a line of its
	// own. Fixed at construction.
	CountStats bool

	// Mode selects the health judgement: CountWindow (default), TimeWindow
	// or Consecutive.
	Mode Mode
	// WindowSize is the number of calls a CountWindow judges. Default 100;
	// at most 1<<20.
	WindowSize int
	// TimeWindow is the span a TimeWindow judges. Default 10 s.
	TimeWindow time.Duration
	// Buckets is the number of buckets a TimeWindow is kept in; the window
	// slides by TimeWindow/Buckets. Default 10; at most 1024.
	Buckets int
	// ConsecutiveFailures is the number of failures in a row that trips a
	// Consecutive breaker. Default 5.
	ConsecutiveFailures int

	// FailureRateThreshold trips a windowed breaker when the failure rate
	// reaches it (percent, in (0, 100]). Default 50.
	FailureRateThreshold float64
	// SlowCallDuration is the duration from which a call counts as slow.
	// Default 0: no slow-call detection, and no clock read on a closed
	// breaker's success path (count window and consecutive mode).
	SlowCallDuration time.Duration
	// SlowCallRateThreshold trips a windowed breaker when the rate of slow
	// calls (successful or not) reaches it (percent, in (0, 100]). Default
	// 100. Used only with SlowCallDuration > 0. In Consecutive mode a slow
	// call counts as a failure (in Stats.Failures and for OnFailure too).
	SlowCallRateThreshold float64
	// MinimumCalls is the number of calls a window must hold before any rate
	// is judged. Default 10 (capped at WindowSize).
	MinimumCalls int

	// OpenDuration is how long the breaker stays open after a trip from
	// Closed. Default 5 s (Polly's break duration, Hystrix's sleep window):
	// short, because a trip caused by chance (a window of calls that failed
	// together at a steady rate below the threshold) costs OpenDuration of
	// rejections; MaxOpenDuration keeps a real outage at bay.
	OpenDuration time.Duration
	// MaxOpenDuration caps the open duration as it grows with repeated
	// trips: each half-open period that reopens multiplies it by
	// OpenBackoffFactor, and a close brings it back to OpenDuration.
	// Default 60 s, or OpenDuration when that is longer; set it to
	// OpenDuration for a fixed open duration.
	MaxOpenDuration time.Duration
	// OpenBackoffFactor multiplies the open duration after each trip from
	// half-open, up to MaxOpenDuration. Default 2; at least 1.
	OpenBackoffFactor float64
	// OpenJitter, in [0, 1), shortens each open duration by a random
	// fraction of at most OpenJitter, so that many breakers that tripped
	// together do not probe together. Default 0.
	OpenJitter float64

	// HalfOpenProbes is the number of calls admitted in one half-open
	// period. Default 5; at most 255.
	HalfOpenProbes int
	// HalfOpenMaxConcurrent limits the probes in flight at once. Default
	// HalfOpenProbes.
	HalfOpenMaxConcurrent int
	// HalfOpenSuccesses, when set, is the number of successful probes that
	// closes the breaker (sony/gobreaker's rule): it opens again as soon as
	// closing has become impossible (more than
	// HalfOpenProbes-HalfOpenSuccesses probes failed). A slow success is a
	// success under this rule, except in Consecutive mode, where a slow call
	// is a failure.
	// Default 0: the probes are judged by the thresholds that trip the
	// breaker, as a window of HalfOpenProbes calls: it closes when their
	// failure rate is below FailureRateThreshold (and their slow rate below
	// SlowCallRateThreshold); in Consecutive mode, when fewer than
	// min(ConsecutiveFailures, HalfOpenProbes) probes fail. See the package
	// documentation, "Half-open".
	HalfOpenSuccesses int
	// MaxHalfOpenDuration bounds how long a half-open period waits on its
	// probes: a caller rejected in half-open (every probe taken, or
	// HalfOpenMaxConcurrent in flight) when no probe has been admitted for
	// this long, so that every probe in flight has been out that long,
	// starts a fresh half-open period. A probe that never returns cannot
	// block recovery, and probes that keep being admitted (one at a time
	// under HalfOpenMaxConcurrent 1, say) are never cut off. Default 0: no
	// bound.
	MaxHalfOpenDuration time.Duration

	// Classify maps a call's error to Success, Failure or Ignored. Default:
	// nil is Success, an error matching context.Canceled is Ignored, every
	// other error is Failure. It is called for every recorded error (nil
	// included) when set.
	Classify func(err error) rampart.Result

	// OnStateChange is called after every transition, on the goroutine that
	// made it. Optional.
	OnStateChange func(from, to State)
	// OnSuccess is called for every success recorded in the current
	// generation (in Consecutive mode a slow success is a failure instead), with the call's duration, after the success is applied
	// (so after any transition it caused). Setting it makes the shorthands
	// read the clock twice per call. Optional.
	OnSuccess func(d time.Duration)
	// OnFailure is called for every failure recorded in the current
	// generation (in Consecutive mode slow calls included), with the call's duration, after the failure is applied
	// (so after the OnStateChange of a trip it caused). Setting it makes
	// the shorthands read the clock twice per call. Optional.
	OnFailure func(d time.Duration)
	// OnRejected is called for every rejected call with the state that
	// rejected it (Open, HalfOpen or ForcedOpen). Optional.
	OnRejected func(s State)
}

// DefaultClassify is the classification used when Config.Classify is nil:
// nil is Success, context.Canceled is Ignored, anything else is Failure.
func DefaultClassify(err error) rampart.Result {
	if err == nil {
		return rampart.Success
	}
	if isCanceled(err) {
		return rampart.Ignored
	}
	return rampart.Failure
}

// isCanceled is errors.Is(err, context.Canceled) without its reflection
// on the common path: a plain error that wraps nothing is settled by one
// comparison and two type assertions.
func isCanceled(err error) bool {
	for err != nil {
		if err == context.Canceled {
			return true
		}
		switch u := err.(type) {
		case interface{ Is(error) bool }:
			return errors.Is(err, context.Canceled)
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			return errors.Is(err, context.Canceled)
		default:
			return false
		}
	}
	return false
}

const (
	defaultWindowSize    = 100
	defaultTimeWindow    = 10 * time.Second
	defaultBuckets       = 10
	defaultConsecutive   = 5
	defaultFailureRate   = 50
	defaultSlowRate      = 100
	defaultMinimumCalls  = 10
	defaultOpenDuration  = 5 * time.Second
	defaultMaxOpen       = 60 * time.Second
	defaultBackoffFactor = 2
	defaultProbes        = 5
	maxProbes            = fieldMax
	maxWindowSize        = 1 << 20
	maxBuckets           = 1024
)

func cfgErr(field, format string, args ...any) error {
	return rampart.NewConfigError("circuitbreaker", field, format, args...)
}

// normalize fills the defaults into c and validates it.
func (c *Config) normalize() error {
	if ticker.IsNil(c.Ticker) {
		return rampart.NewConfigError("circuitbreaker", "Ticker", ticker.NilReason, c.Ticker)
	}
	if c.Ticker == nil {
		c.Ticker = rampart.DefaultTicker()
	}
	switch c.Mode {
	case CountWindow, TimeWindow, Consecutive:
	default:
		return cfgErr("Mode", "must be CountWindow, TimeWindow or Consecutive, got %d", c.Mode)
	}
	if c.WindowSize < 0 || c.WindowSize > maxWindowSize {
		return cfgErr("WindowSize", "must be in [1, %d] (0 = default %d), got %d", maxWindowSize, defaultWindowSize, c.WindowSize)
	}
	if c.WindowSize == 0 {
		c.WindowSize = defaultWindowSize
	}
	if c.TimeWindow < 0 {
		return cfgErr("TimeWindow", "must not be negative, got %v", c.TimeWindow)
	}
	if c.TimeWindow == 0 {
		c.TimeWindow = defaultTimeWindow
	}
	if c.Buckets < 0 || c.Buckets > maxBuckets {
		return cfgErr("Buckets", "must be in [1, %d] (0 = default %d), got %d", maxBuckets, defaultBuckets, c.Buckets)
	}
	if c.Buckets == 0 {
		c.Buckets = defaultBuckets
	}
	if c.Mode == TimeWindow && int64(c.TimeWindow) < int64(c.Buckets) {
		return cfgErr("TimeWindow", "must be at least Buckets (%d) ns, got %v", c.Buckets, c.TimeWindow)
	}
	if c.ConsecutiveFailures < 0 {
		return cfgErr("ConsecutiveFailures", "must be at least 1 (0 = default %d), got %d", defaultConsecutive, c.ConsecutiveFailures)
	}
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = defaultConsecutive
	}
	if err := percent("FailureRateThreshold", &c.FailureRateThreshold, defaultFailureRate); err != nil {
		return err
	}
	if err := percent("SlowCallRateThreshold", &c.SlowCallRateThreshold, defaultSlowRate); err != nil {
		return err
	}
	if c.SlowCallDuration < 0 {
		return cfgErr("SlowCallDuration", "must not be negative, got %v", c.SlowCallDuration)
	}
	if c.MinimumCalls < 0 {
		return cfgErr("MinimumCalls", "must be at least 1 (0 = default %d), got %d", defaultMinimumCalls, c.MinimumCalls)
	}
	if c.MinimumCalls == 0 {
		c.MinimumCalls = min(defaultMinimumCalls, c.WindowSize)
		if c.Mode != CountWindow {
			c.MinimumCalls = defaultMinimumCalls
		}
	}
	if c.Mode == CountWindow && c.MinimumCalls > c.WindowSize {
		return cfgErr("MinimumCalls", "must not exceed WindowSize (%d), got %d", c.WindowSize, c.MinimumCalls)
	}
	if c.OpenDuration < 0 {
		return cfgErr("OpenDuration", "must not be negative, got %v", c.OpenDuration)
	}
	if c.OpenDuration == 0 {
		c.OpenDuration = defaultOpenDuration
	}
	if c.MaxOpenDuration < 0 {
		return cfgErr("MaxOpenDuration", "must not be negative, got %v", c.MaxOpenDuration)
	}
	if c.MaxOpenDuration != 0 && c.MaxOpenDuration < c.OpenDuration {
		return cfgErr("MaxOpenDuration", "must be 0 or at least OpenDuration (%v), got %v", c.OpenDuration, c.MaxOpenDuration)
	}
	if c.MaxOpenDuration == 0 {
		c.MaxOpenDuration = max(defaultMaxOpen, c.OpenDuration)
	}
	if math.IsNaN(c.OpenBackoffFactor) || c.OpenBackoffFactor < 0 || (c.OpenBackoffFactor > 0 && c.OpenBackoffFactor < 1) || math.IsInf(c.OpenBackoffFactor, 0) {
		return cfgErr("OpenBackoffFactor", "must be at least 1 (0 = default %d), got %v", defaultBackoffFactor, c.OpenBackoffFactor)
	}
	if c.OpenBackoffFactor == 0 {
		c.OpenBackoffFactor = defaultBackoffFactor
	}
	if math.IsNaN(c.OpenJitter) || c.OpenJitter < 0 || c.OpenJitter >= 1 {
		return cfgErr("OpenJitter", "must be in [0, 1), got %v", c.OpenJitter)
	}
	if c.HalfOpenProbes < 0 || c.HalfOpenProbes > maxProbes {
		return cfgErr("HalfOpenProbes", "must be in [1, %d] (0 = default %d), got %d", maxProbes, defaultProbes, c.HalfOpenProbes)
	}
	if c.HalfOpenProbes == 0 {
		c.HalfOpenProbes = defaultProbes
	}
	if c.HalfOpenMaxConcurrent < 0 || c.HalfOpenMaxConcurrent > c.HalfOpenProbes {
		return cfgErr("HalfOpenMaxConcurrent", "must be in [1, HalfOpenProbes=%d] (0 = HalfOpenProbes), got %d", c.HalfOpenProbes, c.HalfOpenMaxConcurrent)
	}
	if c.HalfOpenMaxConcurrent == 0 {
		c.HalfOpenMaxConcurrent = c.HalfOpenProbes
	}
	if c.HalfOpenSuccesses < 0 || c.HalfOpenSuccesses > c.HalfOpenProbes {
		return cfgErr("HalfOpenSuccesses", "must be in [1, HalfOpenProbes=%d] (0 = judge the probes by the thresholds), got %d", c.HalfOpenProbes, c.HalfOpenSuccesses)
	}
	if c.MaxHalfOpenDuration < 0 {
		return cfgErr("MaxHalfOpenDuration", "must not be negative, got %v", c.MaxHalfOpenDuration)
	}
	return nil
}

func percent(field string, v *float64, def float64) error {
	if math.IsNaN(*v) || *v < 0 || *v > 100 {
		return cfgErr(field, "must be a percentage in (0, 100] (0 = default %v), got %v", def, *v)
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

// Update changes the breaker's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates c exactly
// as New does (zero fields mean the same defaults), and refuses with a
// *rampart.ConfigError naming the field a change to a field fixed at
// construction: Name (an empty Name keeps the name New was given, as a
// registry's create-or-get sets it on the caller's behalf), Ticker,
// Compact, CountStats, Mode, WindowSize, TimeWindow, Buckets (pass the
// Config New was given, or Config(), with the other fields changed); and,
// because a pipeline reads them once, at its New: Classify from or to nil,
// and SlowCallDuration from or to 0, OnSuccess or OnFailure from or to nil
// where the change would flip [Breaker.MeasuresCalls]. An invalid or
// refused c changes nothing. Updates may run concurrently: they
// publish one at a time, the one published last is the configuration in
// force, and an Update's judgement of the current state (below) moves the
// breaker only while its configuration is still the published one.
//
// Otherwise it publishes the new configuration at once: every call reads
// the configuration once, so it runs wholly under the old one or wholly
// under the new one. The state, the window, the counters, the open period
// in progress and a half-open period's probes are kept. The thresholds
// hold from the next admission: Update judges the current window (or the
// consecutive failures, or the half-open probes recorded so far) by the
// new ones, and trips, closes or reopens the breaker there if they decide
// it, as the next record would. It allocates the new configuration (one
// object); calls still allocate nothing.
func (b *Breaker) Update(c Config) error {
	if err := c.normalize(); err != nil {
		return err
	}
	if err := b.checkFixed(&c); err != nil {
		return err
	}
	c.Name = b.init.Name // an empty Name keeps it: Config returns it
	cs := &settings{Config: c}
	cs.derive()
	// Published under mu, which transitionIf holds while it checks that
	// the configuration it judged by is still the published one: of two
	// Updates racing, the one published last decides, and the other's
	// judgement, however late it runs, changes nothing.
	b.mu.Lock()
	b.set.Store(cs)
	b.mu.Unlock()
	b.judge(cs)
	return nil
}

// checkFixed returns the *rampart.ConfigError of the first field of c
// (normalized) that differs from what New fixed.
func (b *Breaker) checkFixed(c *Config) error {
	const fixed = "is fixed at construction: "
	old := &b.init.Config
	switch {
	case c.Name != "" && c.Name != old.Name: // "": the name New was given
		return cfgErr("Name", fixed+"New built the rejection errors that carry it (got %q, built with %q)", c.Name, old.Name)
	case !sameptr.Value(c.Ticker, old.Ticker):
		return cfgErr("Ticker", fixed+"the open period's end, the half-open period's start and the permits' starts are readings of the old clock, which another clock's do not compare with")
	case c.Compact != old.Compact:
		return cfgErr("Compact", fixed+"it chose where rejections are counted, which New laid out (got %v)", c.Compact)
	case c.CountStats != old.CountStats:
		return cfgErr("CountStats", fixed+"New allocated the success counters, or none (got %v)", c.CountStats)
	case c.Mode != old.Mode:
		return cfgErr("Mode", fixed+"the window New allocated (or none) is the judgement's, and the window holds the calls judged so far (got %v, built with %v)", c.Mode, old.Mode)
	case c.WindowSize != old.WindowSize:
		return cfgErr("WindowSize", fixed+"New allocated the slots, and a call's slot is its sequence number modulo the size: another size would scramble the window (got %d, built with %d)", c.WindowSize, old.WindowSize)
	case c.TimeWindow != old.TimeWindow:
		return cfgErr("TimeWindow", fixed+"each bucket counts one slice of TimeWindow/Buckets, tagged with its tick: another span would misread them (got %v, built with %v)", c.TimeWindow, old.TimeWindow)
	case c.Buckets != old.Buckets:
		return cfgErr("Buckets", fixed+"New allocated the buckets, each counting one slice of TimeWindow/Buckets (got %d, built with %d)", c.Buckets, old.Buckets)
	case (c.Classify == nil) != (old.Classify == nil):
		return cfgErr("Classify", fixed+"from or to nil: a pipeline reads it once, at its New, to decide whether its successes are classified (got %s, built with %s)", nilOrSet(c.Classify == nil), nilOrSet(old.Classify == nil))
	case c.measuresCalls() != b.init.timed:
		// Mode is the same: one of these three changed from or to unset.
		const why = "while no other setting makes the breaker time calls, it decides MeasuresCalls: a pipeline reads it once, at its New, to decide whether its calls read the clock before and after fn"
		switch {
		case (c.SlowCallDuration > 0) != (old.SlowCallDuration > 0):
			return cfgErr("SlowCallDuration", fixed+"from or to 0 "+why+"; between positive values, or beside a per-call listener, it may change (got %v, built with %v)", c.SlowCallDuration, old.SlowCallDuration)
		case (c.OnSuccess == nil) != (old.OnSuccess == nil):
			return cfgErr("OnSuccess", fixed+"from or to nil "+why+"; from one func to another it may change (got %s, built with %s)", nilOrSet(c.OnSuccess == nil), nilOrSet(old.OnSuccess == nil))
		default:
			return cfgErr("OnFailure", fixed+"from or to nil "+why+"; from one func to another it may change (got %s, built with %s)", nilOrSet(c.OnFailure == nil), nilOrSet(old.OnFailure == nil))
		}
	}
	return nil
}

// nilOrSet names a func field's value in an Update's refusal.
func nilOrSet(isNil bool) string {
	if isNil {
		return "nil"
	}
	return "a func"
}

// judge applies the thresholds of cs, just published, to the state they
// find: a closed breaker's window (or consecutive failures) over them
// trips, a half-open period that they decide closes or reopens, as the
// next record would have decided. The transitions check the state word
// judged, as every automatic transition does (a record that moved it
// meanwhile made the decision itself), and that cs is still the published
// configuration (transitionIf): an Update that published another since
// judges by its own.
func (b *Breaker) judge(cs *settings) {
	// A judgement refused because another Update published since is
	// made again by the configuration now in force, on the state and
	// window as they are now: that Update's own judgement may have run
	// before a record under an older configuration moved the window.
	for b.judgeOnce(cs) {
		cs = b.set.Load()
	}
}

// judgeOnce is one judgement by cs; it reports whether a transition it
// decided was refused because cs is no longer the published configuration.
func (b *Breaker) judgeOnce(cs *settings) bool {
	w := b.state.Load()
	to, now := State(0), rampart.NotRead
	switch State(w & stateMask) {
	case Closed:
		trip := false
		switch cs.Mode {
		case CountWindow:
			trip = b.countOver(cs)
		case TimeWindow:
			now = b.init.Ticker.Now()
			trip = b.timeOver(cs, now)
		case Consecutive:
			trip = b.hot.consec.Load() >= int64(cs.ConsecutiveFailures)
		}
		if !trip {
			return false
		}
		to = Open
	case HalfOpen:
		switch b.probeVerdict(cs, w) {
		case verdictClose:
			to = Closed
		case verdictReopen:
			to = Open
		default:
			return false
		}
	default:
		return false
	}
	return !b.transitionIf(cs, cs, w, true, to, now) && b.set.Load() != cs
}
