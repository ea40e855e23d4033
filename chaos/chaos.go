package chaos

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
)

// ErrInjected is the error an injected error fault returns when
// [Config.Error] is nil. It is a dependency's failure, not a rejection: it
// does not match [rampart.ErrRejected].
var ErrInjected = errors.New("chaos: injected error")

// ErrInjectedPanic is the value an injected panic panics with when
// [Config.PanicValue] is nil.
var ErrInjectedPanic = errors.New("chaos: injected panic")

// Fault names a kind of fault, for [Config.OnInject].
type Fault uint8

// The kinds of fault.
const (
	// FaultLatency: the call waited an injected latency before going on.
	FaultLatency Fault = iota + 1
	// FaultPanic: the call panicked with Config.PanicValue instead of
	// running.
	FaultPanic
	// FaultError: the call returned Config.Error instead of running.
	FaultError
	// FaultResult: the call returned a substitute result instead of running.
	FaultResult
)

// String returns the fault's name: "latency", "panic", "error", "result".
func (f Fault) String() string {
	switch f {
	case FaultLatency:
		return "latency"
	case FaultPanic:
		return "panic"
	case FaultError:
		return "error"
	case FaultResult:
		return "result"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Config configures an [Injector]. The zero value of every field is its
// documented default; the zero Config injects nothing.
type Config struct {
	// LatencyRate is the share of calls, in [0, 1], that wait an injected
	// latency before going on (to the function, or to another fault drawn
	// for the same call). 0, the default, injects no latency.
	LatencyRate float64

	// Latency is the injected latency, or the low end of its range when
	// LatencyMax is set. It must not be negative, and it or LatencyMax
	// must be positive when LatencyRate is set.
	Latency time.Duration

	// LatencyMax, when set, makes each injected latency uniform in
	// [Latency, LatencyMax] (to the nanosecond). 0, the default, means
	// exactly Latency. It must not be below Latency.
	LatencyMax time.Duration

	// PanicRate is the share of calls, in [0, 1], that panic with
	// PanicValue instead of running. 0, the default, injects no panic.
	PanicRate float64

	// PanicValue is what an injected panic panics with. nil means
	// [ErrInjectedPanic].
	PanicValue any

	// ErrorRate is the share of calls, in [0, 1], that return Error
	// instead of running. 0, the default, injects no error.
	ErrorRate float64

	// Error is the error an injected error fault returns, unchanged (give
	// the error the real dependency returns, io.ErrUnexpectedEOF or a
	// driver's error, so that every policy classifies it as it would the
	// real one). nil means [ErrInjected].
	Error error

	// ResultRate is the share of calls, in [0, 1], whose result is
	// substituted instead of running: [Call] returns its [Substitute],
	// the RoundTripper returns a response with Status, the Handler writes
	// Status. [Injector.Do], and Call without a Substitute, have no result
	// to substitute: their share of ResultRate runs the function as usual.
	// 0, the default, substitutes nothing.
	//
	// A call gets at most one of the panic, the error and the substitute,
	// so PanicRate + ErrorRate + ResultRate must not exceed 1.
	ResultRate float64

	// Status is the status code of a substituted HTTP response, in
	// [200, 599]. 0 means 503 (Service Unavailable).
	Status int

	// RetryAfter, when positive, is sent with a substituted HTTP response
	// as a Retry-After header, in whole seconds rounded up. 0, the
	// default, sends none; negative is invalid.
	RetryAfter time.Duration

	// Seed seeds the random source that decides, call by call, which
	// faults to inject: two injectors with the same Seed and Config inject
	// the same faults into their n-th calls. 0 means a seed drawn at
	// random in New; Injector.Config().Seed reports it, so that a run can
	// be replayed.
	Seed uint64

	// Disabled makes the injector start switched off (see
	// [Injector.SetEnabled]). The default is on.
	Disabled bool

	// Sleep waits out an injected latency: it returns nil after d, or
	// ctx's error as soon as ctx ends, whichever comes first (the call
	// then returns that error without running). nil means a real timer,
	// which under testing/synctest follows the bubble's fake clock.
	// [ManualSleep] moves a [rampart.ManualTicker] instead of waiting, so
	// that policies reading that ticker see the latency.
	Sleep func(ctx context.Context, d time.Duration) error

	// OnInject, when set, is called on the caller's goroutine each time a
	// fault is injected, before it takes effect (before the wait, before
	// the panic), with the fault and, for FaultLatency, the latency drawn
	// (0 for the others). A panic in it is recovered and counted in
	// Stats.ListenerPanics; the fault is injected all the same.
	OnInject func(fault Fault, latency time.Duration)

	// Compact lays the instance out without cache-line padding: smaller
	// (352 B instead of 480 B on amd64), for the many cold instances
	// (per-tenant, per-route keys) where goroutines do not contend on one
	// instance; the default pads the words that many goroutines write on
	// every call.
	Compact bool
}

// Substitute is the result [Call] returns instead of running the function,
// on the share [Config.ResultRate] of its calls: Value and Err, as they
// are. It is typed, so substituting boxes nothing.
type Substitute[T any] struct {
	Value T
	Err   error
}

// Stats is a snapshot of an injector's counters, returned by value. Each
// counter is read on its own: a snapshot taken while calls run may be a
// call apart between counters.
type Stats struct {
	Calls          uint64        // calls seen while enabled (a disabled injector counts nothing)
	Delayed        uint64        // calls that got an injected latency
	DelayTime      time.Duration // the latencies injected, in all (the ones cut short counted in full), saturating at the largest Duration
	Interrupted    uint64        // delayed calls whose context ended during the latency (they returned its error without running)
	Panicked       uint64        // calls that panicked with PanicValue
	Errored        uint64        // calls that returned Error
	Substituted    uint64        // calls whose result was substituted
	ListenerPanics uint64        // OnInject panics recovered
}

// counters are the words that calls write: Calls on every enabled call,
// the others on every injection. They fill one cache line; unless
// Config.Compact, they sit alone on it, off the read-mostly configuration
// that every call reads.
type counters struct {
	calls          atomic.Uint64
	delayed        atomic.Uint64
	delayNanos     atomic.Int64
	interrupted    atomic.Uint64
	panicked       atomic.Uint64
	errored        atomic.Uint64
	substituted    atomic.Uint64
	listenerPanics atomic.Uint64
}

type paddedCounters struct {
	_ pad.Line
	counters
	_ pad.Line
}

// unit is the resolution of a rate: a draw is 53 random bits, compared
// with rate × 2⁵³ (the resolution of a float64 in [0, 1)).
const unit = 1 << 53

// Injector injects faults into the calls it runs at configured rates.
// Create it with [New]; run calls through [Injector.Do] or [Call], or wrap
// an HTTP client's transport ([Injector.RoundTripper]) or a server's
// handler ([Injector.Handler]). The zero Injector is not usable. An
// Injector is safe for concurrent use.
type Injector struct {
	// enabled is read by every call, written by SetEnabled only.
	enabled atomic.Bool
	active  bool // some rate is positive: calls draw from the random source

	c *counters // written by calls; see counters

	seed uint64
	// Thresholds out of unit: latency on its own draw; panic, error and
	// substitute share one draw, cumulatively, so that each gets its own
	// share of calls.
	latencyThr, panicThr, errorThr, resultThr uint64
	latency                                   int64
	latencySpan                               uint64 // LatencyMax - Latency, 0 for a fixed latency

	err        error
	panicValue any
	sleep      func(context.Context, time.Duration) error
	onInject   func(Fault, time.Duration)

	// Substituted HTTP responses.
	status     int
	retryAfter string // Retry-After value, "" for none

	cfg Config
}

// New validates cfg, fills in its defaults and returns the injector. An
// invalid value (a rate outside [0, 1] or NaN, panic, error and result
// rates adding up to more than 1, a negative latency, a latency range
// whose maximum is below its minimum, a latency rate with no latency, a
// status outside [200, 599], a negative RetryAfter) is a
// [*rampart.ConfigError] matching [rampart.ErrInvalidConfig].
func New(cfg Config) (*Injector, error) {
	rates := []struct {
		field string
		rate  float64
	}{{"LatencyRate", cfg.LatencyRate}, {"PanicRate", cfg.PanicRate}, {"ErrorRate", cfg.ErrorRate}, {"ResultRate", cfg.ResultRate}}
	for _, r := range rates {
		if !(r.rate >= 0 && r.rate <= 1) { // NaN fails both
			return nil, rampart.NewConfigError("chaos", r.field, "must be in [0, 1], got %v", r.rate)
		}
	}
	// A little slack for sums of decimal shares that float64 rounds up
	// (0.1 + 0.2 + 0.7 is 1.0000000000000002).
	if sum := cfg.PanicRate + cfg.ErrorRate + cfg.ResultRate; sum > 1+1e-9 {
		field := "ResultRate" // the field that pushed the sum over 1: the last non-zero one
		if cfg.ResultRate == 0 {
			field = "ErrorRate"
		}
		return nil, rampart.NewConfigError("chaos", field, "PanicRate + ErrorRate + ResultRate must not exceed 1 (a call gets at most one of the three), got a sum of %v", sum)
	}
	switch {
	case cfg.Latency < 0:
		return nil, rampart.NewConfigError("chaos", "Latency", "must not be negative, got %v", cfg.Latency)
	case cfg.LatencyMax < 0:
		return nil, rampart.NewConfigError("chaos", "LatencyMax", "must not be negative, got %v", cfg.LatencyMax)
	case cfg.LatencyMax != 0 && cfg.LatencyMax < cfg.Latency:
		return nil, rampart.NewConfigError("chaos", "LatencyMax", "must be 0 or at least Latency (%v), got %v", cfg.Latency, cfg.LatencyMax)
	case cfg.LatencyRate > 0 && cfg.Latency == 0 && cfg.LatencyMax == 0:
		return nil, rampart.NewConfigError("chaos", "Latency", "must be positive (or LatencyMax set) when LatencyRate is set, got 0")
	case cfg.Status != 0 && (cfg.Status < 200 || cfg.Status > 599):
		return nil, rampart.NewConfigError("chaos", "Status", "must be 0 (503) or in [200, 599], got %d", cfg.Status)
	case cfg.RetryAfter < 0:
		return nil, rampart.NewConfigError("chaos", "RetryAfter", "must not be negative, got %v", cfg.RetryAfter)
	}
	if cfg.Error == nil {
		cfg.Error = ErrInjected
	}
	if cfg.PanicValue == nil {
		cfg.PanicValue = ErrInjectedPanic
	}
	if cfg.Status == 0 {
		cfg.Status = http.StatusServiceUnavailable
	}
	for cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	inj := &Injector{
		seed:       cfg.Seed,
		latencyThr: threshold(cfg.LatencyRate),
		panicThr:   threshold(cfg.PanicRate),
		errorThr:   threshold(cfg.PanicRate + cfg.ErrorRate),
		resultThr:  threshold(cfg.PanicRate + cfg.ErrorRate + cfg.ResultRate),
		latency:    int64(cfg.Latency),
		err:        cfg.Error,
		panicValue: cfg.PanicValue,
		sleep:      cfg.Sleep,
		onInject:   cfg.OnInject,
		status:     cfg.Status,
		cfg:        cfg,
	}
	if cfg.LatencyMax != 0 {
		inj.latencySpan = uint64(cfg.LatencyMax - cfg.Latency)
	}
	if inj.sleep == nil {
		inj.sleep = sleep
	}
	if cfg.RetryAfter > 0 {
		secs := int64(cfg.RetryAfter / time.Second)
		if cfg.RetryAfter%time.Second > 0 {
			secs++ // rounded up without adding to RetryAfter, which could overflow
		}
		inj.retryAfter = strconv.FormatInt(secs, 10)
	}
	inj.active = inj.latencyThr > 0 || inj.resultThr > 0
	if cfg.Compact {
		inj.c = new(counters)
	} else {
		inj.c = &new(paddedCounters).counters
	}
	inj.enabled.Store(!cfg.Disabled)
	return inj, nil
}

// threshold maps a rate in [0, 1] (a sum of rates may exceed 1 by a
// rounding error) to a count out of unit.
func threshold(rate float64) uint64 {
	return uint64(math.Min(rate, 1) * unit)
}

// SetEnabled switches the injector on or off at run time. Off, every call
// runs as if there were no injector, at the cost of one atomic load, and
// counts in no stat. Calls already past the switch finish as they were
// decided.
func (inj *Injector) SetEnabled(on bool) { inj.enabled.Store(on) }

// Enabled reports whether the injector is on.
func (inj *Injector) Enabled() bool { return inj.enabled.Load() }

// Config returns the configuration with its defaults filled in: Seed is
// the seed in use (the one drawn when Config.Seed was 0), Error,
// PanicValue and Status are never zero. Disabled is the starting state,
// not the current one (see [Injector.Enabled]).
func (inj *Injector) Config() Config { return inj.cfg }

// Stats returns a snapshot of the counters.
func (inj *Injector) Stats() Stats {
	c := inj.c
	return Stats{
		Calls:          c.calls.Load(),
		Delayed:        c.delayed.Load(),
		DelayTime:      time.Duration(c.delayNanos.Load()),
		Interrupted:    c.interrupted.Load(),
		Panicked:       c.panicked.Load(),
		Errored:        c.errored.Load(),
		Substituted:    c.substituted.Load(),
		ListenerPanics: c.listenerPanics.Load(),
	}
}

// Do runs fn, or instead of it the faults drawn for this call: a latency
// first (returning ctx's error, without running fn, when ctx ends during
// it), then a panic with Config.PanicValue or Config.Error returned as is.
// Do has no result to substitute (see Config.ResultRate). fn's own error
// comes back unchanged, and a panic in fn propagates.
//
// Disabled, Do is one atomic load and the call of fn; enabled with every
// rate 0, one atomic add more (the Calls count); neither allocates. An
// injected latency allocates the timer it waits on when ctx can end.
func (inj *Injector) Do(ctx context.Context, fn func(context.Context) error) error {
	if !inj.enabled.Load() {
		return fn(ctx)
	}
	switch act, err := inj.inject(ctx, false); act {
	case run:
		return fn(ctx)
	case panicking:
		panic(inj.panicValue)
	default:
		return err
	}
}

// Call is [Injector.Do] for a function that returns a value. With a
// Substitute (only the first one counts), the share Config.ResultRate of
// calls returns its Value and Err instead of running fn; without one, that
// share runs fn. An injected error or an interrupted latency returns the
// zero T with the error.
func Call[T any](ctx context.Context, inj *Injector, fn func(context.Context) (T, error), sub ...Substitute[T]) (T, error) {
	if !inj.enabled.Load() {
		return fn(ctx)
	}
	switch act, err := inj.inject(ctx, len(sub) > 0); act {
	case run:
		return fn(ctx)
	case panicking:
		panic(inj.panicValue)
	case substituting:
		return sub[0].Value, sub[0].Err
	default:
		var zero T
		return zero, err
	}
}

// action is what inject decided for one call.
type action uint8

const (
	run          action = iota // run the function
	failing                    // return the error: an injected one, or the context's during a latency
	interrupted                // the context ended during the latency: return its error
	panicking                  // panic with panicValue (the caller panics, after its own cleanup)
	substituting               // return the substitute
)

// inject counts an enabled call, draws its faults and waits out its
// latency. canSubstitute says whether the caller has a result to
// substitute.
func (inj *Injector) inject(ctx context.Context, canSubstitute bool) (action, error) {
	// The call's index: the Calls count and the random source's position
	// in one atomic add, the one the enabled path pays for.
	k := inj.c.calls.Add(1)
	if !inj.active {
		return run, nil
	}
	// The random source of call k: a PCG seeded from the injector's seed
	// and k (scrambled by SplitMix64's finalizer), on the stack. The
	// draws of call k depend on (Seed, k) only: no lock, no shared
	// generator state, and a run is the same run whichever goroutines
	// make the calls.
	r := rand.NewPCG(inj.seed, splitmix(k))
	ul, uf := r.Uint64()>>11, r.Uint64()>>11
	if ul < inj.latencyThr {
		d := inj.latency
		if inj.latencySpan > 0 {
			hi, _ := bits.Mul64(r.Uint64(), inj.latencySpan+1)
			d += int64(hi)
		}
		inj.c.delayed.Add(1)
		if inj.c.delayNanos.Add(d) < 0 { // d >= 0: the total wrapped (a latency of MaxInt64, "hang until cancelled")
			inj.c.delayNanos.Store(math.MaxInt64) // saturates
		}
		inj.notify(FaultLatency, time.Duration(d))
		if err := inj.sleep(ctx, time.Duration(d)); err != nil {
			inj.c.interrupted.Add(1)
			return interrupted, err
		}
	}
	switch {
	case uf < inj.panicThr:
		inj.c.panicked.Add(1)
		inj.notify(FaultPanic, 0)
		return panicking, nil
	case uf < inj.errorThr:
		inj.c.errored.Add(1)
		inj.notify(FaultError, 0)
		return failing, inj.err
	case uf < inj.resultThr && canSubstitute:
		inj.c.substituted.Add(1)
		inj.notify(FaultResult, 0)
		return substituting, nil
	}
	return run, nil
}

func (inj *Injector) notify(f Fault, d time.Duration) {
	if inj.onInject != nil {
		notify.Call2(&inj.c.listenerPanics, inj.onInject, f, d)
	}
}

// splitmix is SplitMix64's output function for state x·γ (Steele, Lea and
// Flood, "Fast splittable pseudorandom number generators", 2014): distinct
// call indexes give unrelated seeds.
func splitmix(x uint64) uint64 {
	z := x * 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// sleep is the default Config.Sleep: a real timer, or the context's end.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := ctx.Done()
	if done == nil {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
		// The context may have ended as the timer fired: a dependency
		// this slow would have failed the call too.
		return ctx.Err()
	case <-done:
		t.Stop()
		return ctx.Err()
	}
}

// ManualSleep returns a [Config.Sleep] that moves tk forward by each
// injected latency at once instead of waiting, so that a test whose
// policies share tk sees the latency (a slow call to a breaker, a latency
// sample to an adaptive limiter) without waiting for it. It returns ctx's
// error, without moving tk, when ctx has ended before the latency, and
// ctx's error after moving it, when ctx has ended by then. Calls on
// several goroutines each move tk by their own latency: use it from one
// goroutine at a time to keep the readings meaningful. A nil tk panics
// here, at setup, not in the calls.
func ManualSleep(tk *rampart.ManualTicker) func(ctx context.Context, d time.Duration) error {
	if tk == nil {
		panic("chaos: ManualSleep of a nil ticker")
	}
	return func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		tk.Advance(d)
		return ctx.Err()
	}
}
