package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/percpu"
)

// Endings is a set of the ways a call through a pipeline can end that are
// not a success: the endings a [Fallback] answers ([FallbackConfig.When]).
// Combine them with |. The zero value means [DefaultEndings] where a Config
// takes an Endings.
type Endings uint16

const (
	// Rejections: a rejection by any policy, as [RejectionsBy] with every
	// kind that rejects (Retry for its budget, Breaker, RateLimit,
	// Bulkhead, Adaptive, Shed). Code Rejected.
	Rejections Endings = 1<<Retry | 1<<Breaker | 1<<RateLimit | 1<<Bulkhead | 1<<Adaptive | 1<<Shed
	// Timeouts: the pipeline's timeout expired during the last attempt
	// (Code TimedOut), retried or not.
	Timeouts Endings = 1 << 8
	// RetriesExhausted: this pipeline's retry gave up on an error it would
	// have retried, at its MaxAttempts, MaxDuration, the context's deadline
	// or a Retry-After longer than its MaxDelay (Code Failed with Policy
	// Retry; the error matches retry.ErrExhausted). It is read from the
	// Outcome, never from the error: fn's own error that carries another
	// pipeline's give-up (a nested pipeline, an httpguard Transport's
	// error) is fn's failure (Failures). A refusal by its budget is a
	// rejection (RejectionsBy(Retry)).
	RetriesExhausted Endings = 1 << 9
	// Failures: fn failed (Code Failed, Policy None) with an error
	// that the fallback's Failed predicate accepts; requires that predicate.
	Failures Endings = 1 << 10
	// Cancellations: the caller's context ended (Code Canceled). Never in
	// the default: a canceled caller wants no answer.
	Cancellations Endings = 1 << 11

	// DefaultEndings is the set a zero When means: every ending that the
	// policies decided (a rejection by any policy, a timeout, the retry
	// giving up), and not fn's own failures (its answer, which a fallback
	// replaces only where the Failed predicate says so) nor a cancellation.
	DefaultEndings = Rejections | Timeouts | RetriesExhausted

	allEndings = Rejections | Timeouts | RetriesExhausted | Failures | Cancellations
)

// RejectionsBy returns the set of the rejections by the given kinds of
// policy (Retry: its budget refused a retry; Breaker, RateLimit, Bulkhead,
// Adaptive, Shed). Other kinds (None, Timeout) are refused by the fallback's New:
// a timeout is not a rejection, see [Timeouts].
func RejectionsBy(kinds ...Kind) Endings {
	var e Endings
	for _, k := range kinds {
		if k < 8 {
			e |= 1 << k
		} else {
			e |= 1 << 15 // refused by New
		}
	}
	return e
}

// ending returns the one member of Endings that o's end belongs to (0 for
// a success), from its Code and Policy alone.
func ending(o *Outcome) Endings {
	switch o.Code {
	case Rejected:
		return 1 << o.Policy
	case TimedOut:
		return Timeouts
	case Canceled:
		return Cancellations
	case Failed:
		if o.Policy == Retry {
			return RetriesExhausted
		}
		return Failures
	}
	return 0
}

// Selects reports whether the way o ended is in e (before any predicate:
// for Failures, the fallback's Failed predicate decides as well). A success
// is in no set. For an outcome a fallback answered, the ending is its
// cause's.
func (e Endings) Selects(o Outcome) bool { return e&ending(&o) != 0 }

// newSelection validates a fallback's When and Failed, and returns When
// with its default filled in. Construction only.
func newSelection(when Endings, failed func(error) bool, cfg string) (Endings, error) {
	if when == 0 {
		when = DefaultEndings
		if failed != nil {
			when |= Failures
		}
	} else if failed != nil && when&Failures == 0 {
		return 0, rampart.NewConfigError("pipeline", cfg+".Failed",
			"is set but When does not include Failures: it would never be called (add pipeline.Failures to When)")
	}
	if when&^allEndings != 0 {
		return 0, rampart.NewConfigError("pipeline", cfg+".When",
			"holds endings that no call has (%#x): RejectionsBy takes the kinds that reject (Retry, Breaker, RateLimit, Bulkhead, Adaptive, Shed); a timeout is pipeline.Timeouts", uint16(when&^allEndings))
	}
	if when&Failures != 0 && failed == nil {
		return 0, rampart.NewConfigError("pipeline", cfg+".Failed",
			"must be set when When includes Failures: it says which of fn's errors the fallback answers")
	}
	return when, nil
}

// selects reports whether a fallback with these When and Failed answers o.
// Failure path.
func selects(when Endings, failed func(error) bool, o *Outcome) bool {
	e := ending(o)
	if when&e == 0 {
		return false
	}
	return e != Failures || failed(o.Err)
}

// FallbackConfig configures a [Fallback] for calls returning T. Exactly one
// answer is required: Value, Func, or Stale (which may be combined with
// Value or Func, the answer when no value is fresh).
type FallbackConfig[T any] struct {
	// Pipeline runs the calls. Required. The fallback is its outermost
	// stage; see the package doc, Fallback.
	Pipeline *Pipeline

	// When selects the endings the fallback answers. Zero means
	// [DefaultEndings] (a rejection by any policy, a timeout, the retry
	// giving up), plus [Failures] when Failed is set. A call that ends
	// otherwise, or a success, is returned as without a fallback. A panic
	// in fn is never answered: it is re-raised, as without a fallback.
	When Endings

	// Failed says which of fn's errors the fallback answers (an ending of
	// [Failures]: Code Failed and not a retry's give-up). Required when
	// When includes Failures; with a zero When, setting it adds Failures.
	Failed func(err error) bool

	// Value, when set, is the answer: the call returns *Value and a nil
	// error. Copied at New (new(v) builds the pointer in Go 1.26).
	Value *T

	// Func, when set, is the answer: the call returns what it returns. o
	// is the outcome of the call through the policies (o.Err says why);
	// ctx is the caller's (done, for a Cancellations ending). It runs on
	// the caller's goroutine after every permit of the call was released:
	// a Func that panics or calls runtime.Goexit releases nothing twice
	// and leaks nothing; the panic goes on. A Func that calls another
	// dependency should do so through that dependency's own pipeline.
	Func func(ctx context.Context, o Outcome) (T, error)

	// Stale answers with the last good value: the value of the latest
	// success through this fallback, when it is no older than MaxAge on
	// the pipeline's Ticker (Outcome.Stale is then set). With no such
	// value the answer is Value or Func when set; otherwise the call ends
	// as without a fallback. Each success stores its value (one
	// allocation of T and a reading, one atomic pointer store, and a
	// clock read: one atomic load with a rampart.CachedTicker), except a
	// success at the same reading as the stored value (equally fresh on
	// the pipeline's clock), so a cached ticker bounds the stores to one
	// per tick: give a Stale fallback's pipeline a rampart.CachedTicker
	// (docs/pipeline.md measures the store at a few ns with one, and about
	// 115 ns of CPU per success on the default ticker, where every success
	// is at a new reading). One value for the whole fallback: use it for calls that
	// take no argument (a configuration, a price list); for keyed calls,
	// keep a cache and answer from it in Func.
	Stale bool

	// MaxAge is how old a stale value may be and still be served. Required
	// with Stale and positive: a stale value with no bound would be served
	// for as long as the dependency is down, however old; set a long
	// MaxAge to say so. Measured on the pipeline's Ticker, from the
	// reading taken when the value's call succeeded.
	MaxAge time.Duration

	// Compact lays the instance out without cache-line padding: smaller
	// (80 B instead of 192 B, a Fallback[string] with Stale on amd64), for
	// the many cold instances (per-tenant, per-route keys) where goroutines
	// do not contend on one instance; the default pads the words that many
	// goroutines write on every call (here the stale value's pointer, which
	// successes store). Without Stale there is nothing to pad: 64 B either
	// way. TestFallbackBytes asserts the sizes. These figures leave out
	// the answer counters of a fallback on a pipeline with
	// [Config.CountStats]: per-P counters of its own, allocated at New
	// with or without Compact (128 B × (max(GOMAXPROCS, NumCPU) + 1) plus
	// a line: 480 B on 2 Ps), since any P may write them.
	Compact bool
}

// Fallback is a pipeline with a fallback stage: its calls go through the
// pipeline, and the endings it selects ([FallbackConfig.When]) are answered
// with a value, a function of the outcome, or the last good value. A
// typed result keeps its type (no interface boxing); a success costs what
// the same call through the pipeline costs (the last good value's store
// when Stale is set). Build it with [NewFallback]; it is safe for
// concurrent use.
type Fallback[T any] struct {
	// Read-only after New.
	p      *Pipeline
	when   Endings
	has    bool // value is an answer
	failed func(error) bool
	fn     func(context.Context, Outcome) (T, error)
	value  T
	// last is the stale store, nil without Stale: a separate allocation,
	// padded unless Compact, since every success writes it.
	last *staleStore[T]
	// stats counts the answers, nil unless the pipeline counts outcomes.
	stats *percpu.Counters
}

// staleStore holds the last good value, and MaxAge (read-only, read on
// the failure path only: here rather than in the Fallback, which without
// Stale has no use for it and stays within its 64-byte size class).
type staleStore[T any] struct {
	atomic.Pointer[staleValue[T]]
	maxAge int64 // ns on the pipeline's ticker
}

// paddedStale is a staleStore alone on its cache line.
type paddedStale[T any] struct {
	_ pad.Line
	staleStore[T]
	_ [pad.LineSize - 16]byte
}

// staleValue is a success's value and the pipeline's reading when it was
// stored.
type staleValue[T any] struct {
	v  T
	at int64
}

// NewFallback validates cfg and returns a fallback around cfg.Pipeline. It
// returns a *rampart.ConfigError (matching rampart.ErrInvalidConfig) for a
// nil Pipeline, no answer (none of Value, Func, Stale), both Value and
// Func, a negative MaxAge, Stale without a MaxAge or a MaxAge without
// Stale, an invalid When, and a Failed predicate missing where When
// includes Failures (or set where it does not).
func NewFallback[T any](cfg FallbackConfig[T]) (*Fallback[T], error) {
	const c = "FallbackConfig"
	if cfg.Pipeline == nil {
		return nil, rampart.NewConfigError("pipeline", c+".Pipeline", "must not be nil")
	}
	switch {
	case cfg.Value != nil && cfg.Func != nil:
		return nil, rampart.NewConfigError("pipeline", c+".Func", "and Value are both set: set one answer (with Stale, the one given when no value is fresh)")
	case cfg.Value == nil && cfg.Func == nil && !cfg.Stale:
		return nil, rampart.NewConfigError("pipeline", c+".Value", "is not set, nor Func, nor Stale: the fallback has no answer")
	case cfg.MaxAge < 0:
		return nil, rampart.NewConfigError("pipeline", c+".MaxAge", "must not be negative, got %v", cfg.MaxAge)
	case cfg.Stale && cfg.MaxAge == 0:
		return nil, rampart.NewConfigError("pipeline", c+".MaxAge",
			"must be set with Stale: a value with no bound on its age would be served however old it is, for as long as the dependency is down (set a long MaxAge to mean it)")
	case !cfg.Stale && cfg.MaxAge != 0:
		return nil, rampart.NewConfigError("pipeline", c+".MaxAge", "is set without Stale: it bounds the age of a stale value")
	}
	when, err := newSelection(cfg.When, cfg.Failed, c)
	if err != nil {
		return nil, err
	}
	f := &Fallback[T]{p: cfg.Pipeline, when: when, failed: cfg.Failed, fn: cfg.Func}
	if cfg.Pipeline.stats != nil {
		f.stats = percpu.New()
	}
	if cfg.Value != nil {
		f.has, f.value = true, *cfg.Value
	}
	if cfg.Stale {
		if cfg.Compact {
			f.last = new(staleStore[T])
		} else {
			f.last = &new(paddedStale[T]).staleStore
		}
		f.last.maxAge = int64(cfg.MaxAge)
	}
	return f, nil
}

// Pipeline returns the pipeline the fallback runs its calls through.
func (f *Fallback[T]) Pipeline() *Pipeline { return f.p }

// Call is [Call] through f's pipeline, with the fallback's answer for the
// endings it selects: the fallback's value and error (nil for Value and a
// stale value), else fn's result and error as Call returns them.
func (f *Fallback[T]) Call(ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	var o Outcome
	v := run(ctx, f.p, fn, nil, &o)
	f.p.counted(&o)
	if o.Code == OK {
		if f.last != nil {
			f.keep(v)
		}
		return v, nil
	}
	v = f.answer(ctx, v, &o)
	return v, o.Err
}

// Try is [TryCall] through f's pipeline, with the fallback's answer: when
// the fallback answered, the Outcome's FellBack is set, Err is the
// fallback's error and Cause the call's (see [Outcome]).
func (f *Fallback[T]) Try(ctx context.Context, fn func(context.Context) (T, error)) (v T, o Outcome) {
	// o is the result itself, filled in place: the Outcome (too large for
	// the result registers) is not copied out of a local on return.
	v = run(ctx, f.p, fn, nil, &o)
	f.p.counted(&o)
	if o.Code == OK {
		if f.last != nil {
			f.keep(v)
		}
		return v, o
	}
	v = f.answer(ctx, v, &o)
	return v, o
}

// CallHedged is [CallHedged] through f's pipeline, with the fallback's
// answer.
func (f *Fallback[T]) CallHedged(ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	v, o := f.TryHedged(ctx, fn)
	return v, o.Err
}

// TryHedged is [TryCallHedged] through f's pipeline, with the fallback's
// answer.
func (f *Fallback[T]) TryHedged(ctx context.Context, fn func(context.Context) (T, error)) (v T, o Outcome) {
	v = runHedged(ctx, f.p, fn, nil, &o) // o filled in place, as in Try
	f.p.counted(&o)
	if o.Code == OK {
		if f.last != nil {
			f.keep(v)
		}
		return v, o
	}
	v = f.answer(ctx, v, &o)
	return v, o
}

// keep stores a success's value for Stale. Success path, Stale only: one
// clock read (the pipeline's engine does not hand its readings out: that
// would cost every call a store or a larger Outcome), one atomic load, and
// unless the stored value has this reading, one allocation and one atomic
// store.
func (f *Fallback[T]) keep(v T) {
	now := f.p.now() // the value's age counts from here
	if e := f.last.Load(); e != nil && e.at == now {
		return // as fresh on this clock: no allocation, no store
	}
	f.last.Store(&staleValue[T]{v: v, at: now})
}

// answer applies the fallback to a call that did not succeed: it fills o
// and returns the value to return. Failure path: every permit of the call
// was released before it runs.
func (f *Fallback[T]) answer(ctx context.Context, v T, o *Outcome) T {
	if !selects(f.when, f.failed, o) {
		return v
	}
	if f.last != nil {
		if e := f.last.Load(); e != nil {
			if f.p.now()-e.at <= f.last.maxAge {
				f.count(o, statStaleServed)
				o.Cause, o.Err, o.FellBack, o.Stale = o.Err, nil, true, true
				return e.v
			}
			if f.stats != nil {
				f.stats.Add(statStaleExpired, 1)
			}
		}
	}
	switch {
	case f.fn != nil:
		f.count(o, -1)          // before Func, which may panic: it was asked to answer
		w, err := f.fn(ctx, *o) // user code: a panic or Goexit goes on, nothing is held
		o.Cause, o.Err, o.FellBack = o.Err, err, true
		return w
	case f.has:
		f.count(o, -1)
		o.Cause, o.Err, o.FellBack = o.Err, nil, true
		return f.value
	}
	return v // Stale alone, and no fresh value: the call's own ending
}

// DoFallbackConfig configures a [DoFallback], the fallback of calls that
// return only an error ([Pipeline.Do]).
type DoFallbackConfig struct {
	// Pipeline runs the calls. Required.
	Pipeline *Pipeline

	// When selects the endings the fallback answers, as
	// [FallbackConfig.When].
	When Endings

	// Failed says which of fn's errors the fallback answers, as
	// [FallbackConfig.Failed].
	Failed func(err error) bool

	// Func is the answer, required: the call returns its error (nil: the
	// call is answered). o is the outcome of the call through the
	// policies; ctx is the caller's. It runs on the caller's goroutine
	// after every permit was released, as [FallbackConfig.Func].
	Func func(ctx context.Context, o Outcome) error
}

// DoFallback is [Fallback] for calls that return only an error: its Do and
// Try are [Pipeline.Do] and [Pipeline.Try] with the fallback's answer for
// the endings it selects. Build it with [NewDoFallback]; it is safe for
// concurrent use.
type DoFallback struct {
	p      *Pipeline
	when   Endings
	failed func(error) bool
	fn     func(context.Context, Outcome) error
	stats  *percpu.Counters // the answers, nil unless the pipeline counts outcomes
}

// NewDoFallback validates cfg and returns a fallback around cfg.Pipeline,
// or a *rampart.ConfigError for a nil Pipeline or Func, an invalid When, or
// a Failed predicate missing where When includes Failures (or set where it
// does not).
func NewDoFallback(cfg DoFallbackConfig) (*DoFallback, error) {
	const c = "DoFallbackConfig"
	if cfg.Pipeline == nil {
		return nil, rampart.NewConfigError("pipeline", c+".Pipeline", "must not be nil")
	}
	if cfg.Func == nil {
		return nil, rampart.NewConfigError("pipeline", c+".Func", "must not be nil: it is the fallback's answer")
	}
	when, err := newSelection(cfg.When, cfg.Failed, c)
	if err != nil {
		return nil, err
	}
	f := &DoFallback{p: cfg.Pipeline, when: when, failed: cfg.Failed, fn: cfg.Func}
	if cfg.Pipeline.stats != nil {
		f.stats = percpu.New()
	}
	return f, nil
}

// Pipeline returns the pipeline the fallback runs its calls through.
func (f *DoFallback) Pipeline() *Pipeline { return f.p }

// Do is [Pipeline.Do] with the fallback's answer: nil on a success, the
// Func's error for an ending the fallback selects, else Do's error.
//
//go:noinline
func (f *DoFallback) Do(ctx context.Context, fn func(context.Context) error) error {
	// Out of line for the reason Pipeline.Do is: inlined, its call to the
	// generic engine would make a closure passed to it escape.
	var o Outcome
	run[struct{}](ctx, f.p, nil, fn, &o)
	f.p.counted(&o)
	if o.Code != OK {
		f.answer(ctx, &o)
	}
	return o.Err
}

// Try is [Pipeline.Try] with the fallback's answer (see [Outcome.FellBack]).
//
//go:noinline
func (f *DoFallback) Try(ctx context.Context, fn func(context.Context) error) (o Outcome) {
	run[struct{}](ctx, f.p, nil, fn, &o) // o filled in place, as in Fallback.Try
	f.p.counted(&o)
	if o.Code != OK {
		f.answer(ctx, &o)
	}
	return o
}

// answer applies the fallback to a call that did not succeed. Failure
// path.
func (f *DoFallback) answer(ctx context.Context, o *Outcome) {
	if selects(f.when, f.failed, o) {
		if f.stats != nil {
			f.stats.Add(answeredIndex(o), 1) // before Func, which may panic
		}
		err := f.fn(ctx, *o) // user code: a panic or Goexit goes on, nothing is held
		o.Cause, o.Err, o.FellBack = o.Err, err, true
	}
}

// FallbackStats counts a fallback's answers, when its pipeline was built
// with [Config.CountStats] (all zeros otherwise): [Fallback.Stats],
// [DoFallback.Stats]. The pipeline's own [Stats] count the same calls by
// how they ended before the fallback answered.
type FallbackStats struct {
	// Answered counts the calls the fallback answered (Outcome.FellBack),
	// the sum of the Answered fields below; a Func that panicked is
	// counted, as it was asked.
	Answered uint64
	// AnsweredRejected counts the answered rejections by the rejecting
	// policy's Kind (AnsweredRejected[pipeline.Shed], ...).
	AnsweredRejected [8]uint64
	// AnsweredTimedOut counts the answered timeouts ([Timeouts]).
	AnsweredTimedOut uint64
	// AnsweredExhausted counts the answered give-ups of the retry
	// ([RetriesExhausted]).
	AnsweredExhausted uint64
	// AnsweredFailed counts the answered failures of fn ([Failures]).
	AnsweredFailed uint64
	// AnsweredCanceled counts the answered cancellations ([Cancellations]).
	AnsweredCanceled uint64
	// StaleServed counts the answers with the last good value
	// (Outcome.Stale), within Answered.
	StaleServed uint64
	// StaleExpired counts the endings the fallback selected while its
	// last good value was older than MaxAge: answered by Value or Func
	// when set (and counted in Answered), else not answered.
	StaleExpired uint64
}

// The fallback counters' indexes: answeredIndex's (a rejection's Kind, then
// the other endings), then the stale ones.
const (
	statAnsweredTimedOut = 8 + iota
	statAnsweredExhausted
	statAnsweredFailed
	statAnsweredCanceled
	statStaleServed
	statStaleExpired
)

// answeredIndex is the counter of o's ending. Failure path.
func answeredIndex(o *Outcome) int {
	switch e := ending(o); e {
	case Timeouts:
		return statAnsweredTimedOut
	case RetriesExhausted:
		return statAnsweredExhausted
	case Failures:
		return statAnsweredFailed
	case Cancellations:
		return statAnsweredCanceled
	}
	return int(o.Policy & 7) // a rejection
}

// count counts an answer of o's ending, and a second counter (also) unless
// it is negative. Failure path.
func (f *Fallback[T]) count(o *Outcome, also int) {
	if f.stats == nil {
		return
	}
	if also < 0 {
		f.stats.Add(answeredIndex(o), 1)
		return
	}
	f.stats.Add2(answeredIndex(o), 1, also, 1)
}

// fallbackStats sums c into FallbackStats.
func fallbackStats(c *percpu.Counters) FallbackStats {
	var s FallbackStats
	if c == nil {
		return s
	}
	var w [percpu.Width]uint64
	c.Snapshot(&w)
	copy(s.AnsweredRejected[:], w[:8])
	for _, n := range s.AnsweredRejected {
		s.Answered += n
	}
	s.AnsweredTimedOut, s.AnsweredExhausted = w[statAnsweredTimedOut], w[statAnsweredExhausted]
	s.AnsweredFailed, s.AnsweredCanceled = w[statAnsweredFailed], w[statAnsweredCanceled]
	s.Answered += s.AnsweredTimedOut + s.AnsweredExhausted + s.AnsweredFailed + s.AnsweredCanceled
	s.StaleServed, s.StaleExpired = w[statStaleServed], w[statStaleExpired]
	return s
}

// Stats returns the fallback's answer counts: see [FallbackStats]. All
// zeros unless the pipeline counts outcomes ([Config.CountStats]).
func (f *Fallback[T]) Stats() FallbackStats { return fallbackStats(f.stats) }

// Stats returns the fallback's answer counts: see [FallbackStats]. All
// zeros unless the pipeline counts outcomes ([Config.CountStats]);
// DoFallback has no stale value, so StaleServed and StaleExpired stay 0.
func (f *DoFallback) Stats() FallbackStats { return fallbackStats(f.stats) }
