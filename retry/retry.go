package retry

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
)

// Config configures a [Policy]. The zero value is valid: 3 attempts, full
// jitter over 100 ms × 2^(n-1) capped at 10 s, every error but [Permanent]
// ones retried while the caller's context is live, no duration limit, no
// budget.
type Config struct {
	// Name identifies the policy in its give-up errors.
	Name string

	// MaxAttempts is the number of attempts in all, the first included.
	// 0 means 3; 1 means no retry. Must not be negative; a value above
	// 2^31-1 counts as 2^31-1.
	MaxAttempts int
	// MaxDuration bounds the time from the start of the first attempt to the
	// start of the last one: a retry that would start later is not made.
	// 0 means no limit. Must not be negative. Setting it costs one clock
	// read per call, even when the first attempt succeeds.
	MaxDuration time.Duration

	// Backoff selects the delay formula; the zero value is [FullJitter].
	Backoff Backoff
	// BaseDelay is the first delay (the scale of every kind). 0 means
	// 100 ms. Must not be negative.
	BaseDelay time.Duration
	// MaxDelay caps every delay and every retry-after hint (a longer hint
	// gives up). 0 means max(10 s, BaseDelay). Must not be below BaseDelay.
	MaxDelay time.Duration
	// Multiplier is the growth factor of Exponential, FullJitter,
	// EqualJitter and DecorrelatedJitter. 0 means 2 (3 for
	// DecorrelatedJitter). Must be at least 1 and finite.
	Multiplier float64
	// Increment is Linear's step. 0 means BaseDelay. Must not be negative.
	Increment time.Duration

	// ShouldRetry classifies a failed attempt's error: true retries it,
	// false returns it at once. nil means: retry every error. Errors
	// marked [Permanent] are never retried, whatever ShouldRetry says, and
	// nothing is retried once the caller's context is done: the loop
	// checks it, not ShouldRetry (see "What is retried" in the package
	// documentation). A context error from an attempt whose caller is
	// still live (a per-attempt timeout, a callee's own
	// context.WithTimeout) is retried by default, as Polly retries its
	// TimeoutRejectedException and resilience4j its TimeLimiter's
	// TimeoutException.
	// It may be called more than once for the same error (Do and a
	// pipeline check before deciding, and Decide checks again): keep it a
	// pure function of the error, without side effects.
	ShouldRetry func(err error) bool

	// Budget, when set, limits retries together with every other policy that
	// shares it; see [Budget]. A nil *TokenBucket or *RatioBudget, and one
	// not built by [NewTokenBucket] or [NewRatioBudget] (a zero value), is
	// refused.
	Budget rampart.Budget

	// Ticker is the clock for MaxDuration, deadlines and budgets. nil means
	// [rampart.DefaultTicker]. Share it with the budget's other users. The
	// sleeps between attempts use the runtime's timers (which
	// testing/synctest fakes), not this clock.
	Ticker rampart.Ticker

	// Rand, when set, replaces math/rand/v2's per-thread generator for the
	// jitter: it must return a uniform int64 in [0, n) for n > 0 and be safe
	// for concurrent use if the policy is. For deterministic tests, e.g.
	// rand.New(rand.NewPCG(1, 2)).Int64N behind a mutex, or a single
	// goroutine.
	Rand func(n int64) int64

	// OnRetry is called before each retry's sleep with the number of
	// attempts made so far, the delay and the error being retried.
	OnRetry func(attempt int, delay time.Duration, err error)
	// OnGiveUp is called when the policy gives up on a retryable error
	// (not for [NotRetryable]): attempts made, why, and the last error.
	OnGiveUp func(attempts int, reason Stop, err error)
	// OnBudgetRefused is called when the budget refuses a retry, with the
	// attempts made so far and the error that would have been retried.
	OnBudgetRefused func(attempt int, err error)
}

// Stats are a Policy's counters since New. First-try successes are not
// counted (that would cost the fast path an atomic).
type Stats struct {
	Retries        uint64 // retries granted (Decide returned Continue)
	GiveUps        uint64 // give-up errors built
	BudgetRefused  uint64 // retries the budget refused
	ListenerPanics uint64 // listener panics recovered
}

// Policy retries failed operations. Create it with [New] and run calls
// through [Policy.Do], [Call] or [CallIf]; [Policy.Decide], [Policy.Sleep]
// and [Policy.GiveUp] are the steps of a retry loop the caller writes
// itself.
//
// The attempt count and backoff state live in the caller (see the package
// documentation for the algorithm): a Policy holds no per-call state and is
// safe for concurrent use.
//
// The zero value is not usable; build with [New]. A zero Policy has no
// configuration: its calls panic, and Ticker returns nil (package pipeline
// refuses a zero Policy at New by it).
type Policy struct {
	// cur is the configuration calls read: init until an Update publishes
	// another. A call loads it once, when its first attempt failed (one
	// load on a line nobody writes), and reads every field from that copy,
	// so it never mixes two configurations. The first attempt reads only
	// fields fixed at construction (full, needStart, the clock, the
	// budget), from init, without that load.
	cur  atomic.Pointer[settings]
	init settings // the configuration New built: 120 B, so cur and init fill two lines on 64-bit platforms
	_    [(pad.LineSize - (unsafe.Sizeof(atomic.Pointer[settings]{})+unsafe.Sizeof(settings{}))%pad.LineSize) % pad.LineSize]byte

	// Counters written on the retry path only, never on a first-try
	// success, on a line of their own (the Policy is 192 B on amd64, a
	// size class the allocator places on a line boundary, which
	// TestPolicyLayout checks) with the name, read only by give-ups:
	// their writes (frequent during an outage) stay off the lines of the
	// configuration, which every call reads.
	retries, giveUps, refusals, panics atomic.Uint64
	name                               string
	_                                  [pad.Tail48]byte
}

// delay is the backoff's delay of the configured kind (see backoff.delay).
func (s *settings) delay(n int, prev int64) int64 { return s.bo.delay(s.kind, n, prev) }

// settings is a Policy's validated configuration, immutable once
// published in cur.
type settings struct {
	maxAttempts int32
	kind        Backoff
	needStart   bool // read the clock before the first attempt (MaxDuration or a time-keeping budget)
	full        bool // needStart || budget != nil: the first attempt needs more than a call
	maxDur      int64
	budget      rampart.Budget
	ticker      rampart.Ticker
	shouldRetry func(error) bool
	bo          backoff

	onRetry   func(int, time.Duration, error)
	onGiveUp  func(int, Stop, error)
	onRefused func(int, error)
}

// New validates c and returns a Policy, or a [*rampart.ConfigError] (which
// matches [rampart.ErrInvalidConfig]).
func New(c Config) (*Policy, error) {
	p := &Policy{name: c.Name}
	if err := c.settings(&p.init); err != nil {
		return nil, err
	}
	p.cur.Store(&p.init)
	return p, nil
}

// Update changes the policy's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates c exactly
// as New does (zero fields mean the same defaults), and refuses with a
// *rampart.ConfigError naming the field a change to a field fixed at
// construction: Name (an empty Name keeps the name New was given, as a
// registry's create-or-get sets it on the caller's behalf), Ticker,
// Budget, and MaxDuration from or to 0 (between positive values it is
// updatable); pass the Config New was given, or [Policy.Config]'s, with
// the other fields changed. An invalid or refused c
// changes nothing. Otherwise the next calls (and the next Decide, GiveUp,
// Retryable, MaxAttempts, NeedsTime) use c: a call of Do, Call or CallIf
// reads the configuration once, when its first attempt fails (the first
// attempt reads only fields fixed at construction), and runs every retry
// under it. It allocates the new configuration (one object); calls still
// allocate nothing.
func (p *Policy) Update(c Config) error {
	s := new(settings)
	if err := c.settings(s); err != nil {
		return err
	}
	const fixed = "is fixed at construction: "
	old := p.cur.Load()
	switch {
	case c.Name != "" && c.Name != p.name: // "": the name New was given
		return rampart.NewConfigError("retry", "Name", fixed+"it names the instance in the give-up errors already returned and to whoever observes them; a renamed policy is another policy (got %q, built with %q)", c.Name, p.name)
	case !sameptr.Value(s.ticker, old.ticker):
		return rampart.NewConfigError("retry", "Ticker", fixed+"the calls in flight measure MaxDuration and the deadline in readings of the old clock, and the budget shares it")
	case !sameptr.Value(s.budget, old.budget):
		return rampart.NewConfigError("retry", "Budget", fixed+"a call's request, outcomes and retries are charged to one budget, which callers of the primitives (package pipeline) hold across the call; the budget is shared with other policies")
	case (s.maxDur > 0) != (old.maxDur > 0):
		return rampart.NewConfigError("retry", "MaxDuration", fixed+"from or to 0: it decides whether a call reads the clock at its start (NeedsTime), which callers of the primitives read once per call; between positive values it may change (got %v, built with %v)", c.MaxDuration, time.Duration(old.maxDur))
	}
	p.cur.Store(s)
	return nil
}

// Config returns the configuration in force (the last Update's, or New's)
// with its defaults filled in: MaxAttempts (capped at 2^31-1), BaseDelay,
// MaxDelay, Multiplier, Increment and the Ticker. Update accepts it back,
// changed or not.
func (p *Policy) Config() Config {
	s := p.cur.Load()
	return Config{
		Name:            p.name,
		MaxAttempts:     int(s.maxAttempts),
		MaxDuration:     time.Duration(s.maxDur),
		Backoff:         s.kind,
		BaseDelay:       time.Duration(s.bo.base),
		MaxDelay:        time.Duration(s.bo.max),
		Multiplier:      s.bo.mult,
		Increment:       time.Duration(s.bo.inc),
		ShouldRetry:     s.shouldRetry,
		Budget:          s.budget,
		Ticker:          s.ticker,
		Rand:            s.bo.rand,
		OnRetry:         s.onRetry,
		OnGiveUp:        s.onGiveUp,
		OnBudgetRefused: s.onRefused,
	}
}

// settings validates c and fills s with it, its defaults filled in.
func (c *Config) settings(s *settings) error {
	cfgErr := func(field, format string, args ...any) error {
		return rampart.NewConfigError("retry", field, format, args...)
	}
	switch {
	case c.MaxAttempts < 0:
		return cfgErr("MaxAttempts", "must be at least 1 (0 means the default 3), got %d", c.MaxAttempts)
	case c.MaxDuration < 0:
		return cfgErr("MaxDuration", "must not be negative, got %v", c.MaxDuration)
	case c.Backoff >= numBackoffs:
		return cfgErr("Backoff", "unknown kind %d", c.Backoff)
	case c.BaseDelay < 0:
		return cfgErr("BaseDelay", "must not be negative, got %v", c.BaseDelay)
	case c.MaxDelay < 0:
		return cfgErr("MaxDelay", "must not be negative, got %v", c.MaxDelay)
	case c.Increment < 0:
		return cfgErr("Increment", "must not be negative, got %v", c.Increment)
	case c.Multiplier != 0 && !(c.Multiplier >= 1 && c.Multiplier <= math.MaxFloat64):
		return cfgErr("Multiplier", "must be at least 1 and finite (0 means the default), got %v", c.Multiplier)
	}
	if why := budgetReason(c.Budget, ""); why != "" {
		return cfgErr("Budget", "%s", why)
	}
	if ticker.IsNil(c.Ticker) {
		return rampart.NewConfigError("retry", "Ticker", ticker.NilReason, c.Ticker)
	}
	*s = settings{
		maxAttempts: int32(min(c.MaxAttempts, math.MaxInt32)), // 2^31-1 attempts: unlimited in practice
		kind:        c.Backoff,
		maxDur:      int64(c.MaxDuration),
		budget:      c.Budget,
		ticker:      c.Ticker,
		shouldRetry: c.ShouldRetry,
		onRetry:     c.OnRetry,
		onGiveUp:    c.OnGiveUp,
		onRefused:   c.OnBudgetRefused,
	}
	if s.maxAttempts == 0 {
		s.maxAttempts = 3
	}
	if s.ticker == nil {
		s.ticker = rampart.DefaultTicker()
	}
	base := int64(c.BaseDelay)
	if base == 0 {
		base = int64(100 * time.Millisecond)
	}
	maxD := int64(c.MaxDelay)
	if maxD == 0 {
		maxD = max(int64(10*time.Second), base)
	}
	if maxD < base {
		return cfgErr("MaxDelay", "must not be below BaseDelay (%v), got %v", time.Duration(base), c.MaxDelay)
	}
	mult := c.Multiplier
	if mult == 0 {
		mult = 2
		if c.Backoff == DecorrelatedJitter {
			mult = 3
		}
	}
	inc := int64(c.Increment)
	if inc == 0 {
		inc = base
	}
	s.bo = backoff{base: base, max: maxD, inc: inc, mult: mult, rand: c.Rand}
	_, bucket := c.Budget.(*TokenBucket) // the A6 bucket ignores time
	s.needStart = s.maxDur > 0 || (c.Budget != nil && !bucket)
	s.full = s.needStart || c.Budget != nil
	return nil
}

// Budget returns the configured budget, or nil. Callers of the primitives
// call its OnRequest and OnSuccess themselves; [Policy.Decide] calls
// OnFailure and AllowRetry.
func (p *Policy) Budget() rampart.Budget { return p.cur.Load().budget }

// NeedsTime reports whether the policy uses the start of a call: true when
// Config.MaxDuration is set or the budget keeps time (a [RatioBudget]'s
// window, or any Budget other than a [*TokenBucket], whose use of the time
// is unknown). [Policy.Do] reads the clock before the first attempt only
// when it is true.
//
// When it is false, a caller of the primitives may skip that read: the
// start passed to [Policy.Decide] and the now passed to the budget's
// OnRequest, OnSuccess and OnFailure are ignored, so any value (0) will do.
// Decide's now is used whatever NeedsTime says (the delay is checked
// against the deadline): pass a real reading there.
func (p *Policy) NeedsTime() bool { return p.cur.Load().needStart }

// Ticker returns the policy's clock.
func (p *Policy) Ticker() rampart.Ticker { return p.init.ticker } // fixed: New's is every configuration's (nil on a zero Policy)

// MaxAttempts returns the effective maximum number of attempts.
func (p *Policy) MaxAttempts() int { return int(p.cur.Load().maxAttempts) }

// Stats returns the policy's counters.
func (p *Policy) Stats() Stats {
	return Stats{Retries: p.retries.Load(), GiveUps: p.giveUps.Load(),
		BudgetRefused: p.refusals.Load(), ListenerPanics: p.panics.Load()}
}

// Retryable reports whether err would be retried if limits allowed and the
// caller's context were live: it is not nil, not [Permanent], and
// Config.ShouldRetry accepts it (nil ShouldRetry: every error).
// [ErrRetryResult] is always retryable.
func (p *Policy) Retryable(err error) bool { return p.cur.Load().retryable(err) }

func (s *settings) retryable(err error) bool {
	if err == nil {
		return false
	}
	if err == ErrRetryResult {
		return true
	}
	return !IsPermanent(err) && (s.shouldRetry == nil || s.shouldRetry(err))
}

// callerEnded is the loops' rule once the caller's context is done (cerr,
// its error) after a failed attempt: true when the attempt's error is that
// context error (the attempt ended because the caller did), which is then
// returned as it is, like a non-retryable one; otherwise the loop gives up
// with [Canceled]. Failure path only: errors.Is walks err's chain.
func callerEnded(err, cerr error) bool { return errors.Is(err, cerr) }

// Decide is the retry decision for the pipeline, with all per-call state in
// the caller's locals. Call it once after each failed attempt:
//
//   - attempt: attempts made so far (1 after the first attempt failed);
//   - err: the attempt's error (pass [ErrRetryResult] to retry an unwanted
//     result);
//   - start: the clock reading when the first attempt started (used only
//     with Config.MaxDuration);
//   - now: the current reading of the policy's ticker;
//   - deadline: the context's deadline on the same clock, as
//     [Policy.Deadline] returns it (negative when the clock reads below 0),
//     or 0 for none;
//   - prev: the previous delay Decide returned (0 before the first retry),
//     used by DecorrelatedJitter.
//
// It returns the delay to sleep and [Continue], or a reason to stop (the
// delay is then 0); hand the reason to [Policy.GiveUp] to get the error to
// return.
//
// Decide does not see the context: check ctx.Err() before calling it, as
// [Policy.Do] and package pipeline do. When the context is done, make no
// retry: return the attempt's error as it is (GiveUp with [NotRetryable])
// when it matches ctx.Err() through errors.Is (the attempt ended because
// the caller did), otherwise record the failure in the budget (OnFailure)
// and return GiveUp([Canceled], attempts, err, ctx.Err()). A context error
// while the context is live (a per-attempt timeout) is an ordinary
// retryable error.
//
// Checks, in order: the error is retryable ([NotRetryable]); the
// failure is recorded in the budget (OnFailure); attempts < MaxAttempts
// ([MaxAttempts]); the delay (the error's [RetryAfterHint] if any, at most
// MaxDelay, else the backoff) ends before start+MaxDuration ([MaxDuration])
// and before the deadline ([Deadline]); the budget allows the retry
// ([BudgetRefused]). On Continue it calls OnRetry; on a budget refusal,
// OnBudgetRefused.
//
// Decide allocates nothing and takes no lock.
func (p *Policy) Decide(attempt int, err error, start, now, deadline int64, prev time.Duration) (delay time.Duration, stop Stop) {
	d, stop := p.decide(p.cur.Load(), attempt, err, start, now, deadline, int64(prev))
	return time.Duration(d), stop
}

// decide is Decide in the int64 nanoseconds that readings add to (the
// retry loops).
func (p *Policy) decide(s *settings, attempt int, err error, start, now, deadline, prev int64) (delay int64, stop Stop) {
	if !s.retryable(err) {
		return 0, NotRetryable
	}
	if s.budget != nil {
		s.budget.OnFailure(now)
	}
	if attempt >= int(s.maxAttempts) {
		return 0, MaxAttempts
	}
	hint := time.Duration(-1)
	if h, ok := errors.AsType[RetryAfterHint](err); ok {
		hint = h.RetryAfter() // user code: called once
	}
	if hint >= 0 {
		delay = int64(hint)
		if delay > s.bo.max {
			return 0, HintTooLong
		}
	} else {
		delay = s.delay(max(attempt, 1), prev)
	}
	at := atomicx.SatAdd(now, delay) // when the next attempt would start
	// Compared without the sum, which saturates near the end of the range
	// (a manual clock): elapsed + delay > MaxDuration.
	if s.maxDur > 0 && (now-start > s.maxDur || delay > s.maxDur-(now-start)) {
		return 0, MaxDuration
	}
	if deadline != 0 && at >= deadline {
		return 0, Deadline
	}
	if s.budget != nil && !s.budget.AllowRetry(now) {
		p.refusals.Add(1)
		if s.onRefused != nil {
			notify.Call2(&p.panics, s.onRefused, attempt, err)
		}
		return 0, BudgetRefused
	}
	p.retries.Add(1)
	if s.onRetry != nil {
		notify.Call3(&p.panics, s.onRetry, attempt, time.Duration(delay), err)
	}
	return delay, Continue
}

// GiveUp returns the error a caller returns when [Policy.Decide] (or the
// sleep) stopped the retries: for [NotRetryable], last itself (without its
// [Permanent] marker, when the marker is the outermost error); otherwise a
// new [*ExhaustedError] that matches [ErrExhausted] and unwraps to last.
// cause is the context's error for [Canceled] (nil otherwise). It calls
// OnGiveUp for every reason but NotRetryable. It allocates only the
// ExhaustedError.
func (p *Policy) GiveUp(reason Stop, attempts int, last, cause error) error {
	return p.giveUp(p.cur.Load(), reason, attempts, last, cause)
}

// giveUp is GiveUp under the configuration s of the call.
func (p *Policy) giveUp(s *settings, reason Stop, attempts int, last, cause error) error {
	if reason == NotRetryable || reason == Continue {
		if pe, ok := last.(*permanentError); ok {
			return pe.err
		}
		return last
	}
	p.giveUps.Add(1)
	if s.onGiveUp != nil {
		notify.Call3(&p.panics, s.onGiveUp, attempts, reason, last)
	}
	return &ExhaustedError{name: p.name, attempts: attempts, reason: reason, last: last, cause: cause}
}

// Deadline returns ctx's deadline on the policy's clock, given now read
// from it, or 0 when ctx has none. It reads the wall clock once (time.Until).
// The deadline is a reading like any other, below 0 too when the clock reads
// below 0 (a ticker's epoch is arbitrary); one that falls on reading 0 is
// returned as -1 (0 means none), 1 ns early, never late. It is never
// [rampart.NotRead] (a deadline before every reading is returned as
// NotRead+1, as far in the past for [Policy.Decide]).
func (p *Policy) Deadline(ctx context.Context, now int64) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	dl := atomicx.SatAdd(now, int64(time.Until(d)))
	if dl == 0 {
		return -1 // 0 means none
	}
	return max(dl, rampart.NotRead+1)
}

// Sleep waits for delay, or until ctx is done, whichever comes
// first; it returns ctx's error in the second case (at once when ctx is
// already done, and when it ended as the delay ran out). It allocates one timer when ctx can be canceled.
func (p *Policy) Sleep(ctx context.Context, delay time.Duration) error {
	return p.sleep(ctx, int64(delay))
}

// sleep is Sleep in nanoseconds (the retry loops).
func (p *Policy) sleep(ctx context.Context, delay int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if delay <= 0 {
		return nil
	}
	done := ctx.Done()
	if done == nil {
		time.Sleep(time.Duration(delay))
		return nil
	}
	t := time.NewTimer(time.Duration(delay))
	select {
	case <-t.C:
		// The context may have ended as the timer fired (select picks
		// either): the next attempt must not start on a done context.
		return ctx.Err()
	case <-done:
		t.Stop()
		return ctx.Err()
	}
}

// Do calls fn until it succeeds, returns a non-retryable error, or a limit
// stops the retries. It returns nil, fn's non-retryable error unchanged, or
// an [*ExhaustedError] wrapping fn's last error. A first attempt that
// succeeds costs a ctx.Err() and one comparison, allocates nothing and reads
// no clock unless MaxDuration or a RatioBudget needs it.
//
// A context that is already done runs nothing: Do returns ctx.Err() as it
// is (not an [*ExhaustedError]) and the budget records nothing, as a
// pipeline does.
//
// A panic in fn (or runtime.Goexit) is recorded as a budget failure and
// propagates; nothing else is held.
func (p *Policy) Do(ctx context.Context, fn func(context.Context) error) error {
	// A context already done starts nothing: one interface call (an atomic
	// load for the standard library's contexts). Done() would allocate a
	// cancelCtx's channel.
	if err := ctx.Err(); err != nil {
		return err
	}
	// full is fixed at construction (see Update), as are all that the
	// first attempt reads: they come from New's configuration, without a
	// load of the current one, which the retry path loads once.
	if p.init.full { // one load and a branch
		return p.doFull(ctx, fn)
	}
	err := fn(ctx)
	if err == nil {
		return nil
	}
	var pending bool // no budget: nothing to record
	return p.doRetry(p.cur.Load(), ctx, fn, err, 0, &pending)
}

// doFull is Do with a clock read for the start and the budget protocol.
//
// The clock, the budget and whether the start is read are fixed at
// construction: read from New's configuration (init).
func (p *Policy) doFull(ctx context.Context, fn func(context.Context) error) (err error) {
	var start int64
	if p.init.needStart {
		start = p.init.ticker.Now() // the only clock read of a first-try success
	}
	if tb, ok := p.init.budget.(*TokenBucket); ok {
		// The A6 bucket, devirtualised: OnRequest is a no-op and OnSuccess
		// one load on a healthy dependency.
		pending := true // the attempt's outcome has not reached the budget
		defer func() {
			if pending { // fn, or user code before Decide, panicked or called runtime.Goexit
				tb.OnFailure(start)
			}
		}()
		if err = fn(ctx); err == nil {
			pending = false
			tb.OnSuccess(start)
			return nil
		}
		return p.doRetry(p.cur.Load(), ctx, fn, err, start, &pending)
	}
	b := p.init.budget
	if b == nil {
		if err = fn(ctx); err == nil {
			return nil
		}
		var pending bool // no budget: nothing to record
		return p.doRetry(p.cur.Load(), ctx, fn, err, start, &pending)
	}
	b.OnRequest(start)
	pending := true // as above
	defer func() {
		if pending {
			b.OnFailure(start)
		}
	}()
	if err = fn(ctx); err == nil {
		pending = false
		b.OnSuccess(start)
		return nil
	}
	return p.doRetry(p.cur.Load(), ctx, fn, err, start, &pending)
}

// doRetry is the retry loop of Do (slow path) under the configuration s,
// loaded once when the first attempt failed: err is the first attempt's
// error. *pending is true while the current attempt's outcome has not
// reached the budget: the caller's guard records a failure for it if user
// code (fn, ShouldRetry, the ticker) panics or calls runtime.Goexit before;
// once Decide has recorded the failure, a panic in the user code it calls
// (a RetryAfter hint, Rand, OnRetry) records nothing more.
func (p *Policy) doRetry(s *settings, ctx context.Context, fn func(context.Context) error, err error, start int64, pending *bool) error {
	attempt, prev, deadline := 1, int64(0), rampart.NotRead // deadline: not computed yet
	for {
		if !s.retryable(err) {
			*pending = false // a non-retryable failure is not the budget's
			return p.giveUp(s, NotRetryable, attempt, err, nil)
		}
		now := s.ticker.Now()
		if deadline == rampart.NotRead {
			deadline = p.Deadline(ctx, now)
		}
		if cerr := ctx.Err(); cerr != nil {
			*pending = false
			if callerEnded(err, cerr) {
				// The caller's own context error: returned as it is, not
				// the budget's (as a non-retryable error).
				return p.giveUp(s, NotRetryable, attempt, err, nil)
			}
			if s.budget != nil {
				s.budget.OnFailure(now) // Decide, which would record it, is skipped
			}
			return p.giveUp(s, Canceled, attempt, err, cerr)
		}
		*pending = false // Decide records the failure
		delay, stop := p.decide(s, attempt, err, start, now, deadline, prev)
		if stop != Continue {
			return p.giveUp(s, stop, attempt, err, nil)
		}
		if cerr := p.sleep(ctx, delay); cerr != nil {
			return p.giveUp(s, Canceled, attempt, err, cerr)
		}
		prev = delay
		attempt++
		*pending = true
		if err = fn(ctx); err == nil {
			*pending = false
			if s.budget != nil {
				s.budget.OnSuccess(s.budgetNow())
			}
			return nil
		}
	}
}

// budgetNow is the time handed to the budget after a retry succeeded.
func (s *settings) budgetNow() int64 {
	if s.needStart {
		return s.ticker.Now()
	}
	return 0
}

// Call is [Policy.Do] for a function with a typed result: it returns fn's
// result of the successful attempt, or of the last one with the error.
func Call[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error)) (T, error) {
	return CallIf(ctx, p, fn, nil)
}

// CallIf is [Call] with a predicate on successful results: when fn returns
// no error but retryResult(result) is true (an HTTP 503 response, say),
// the attempt is retried like a failure. If the limits stop the retries
// then, CallIf returns the last result with an [*ExhaustedError] whose last
// error is [ErrRetryResult]. retryResult may be nil. The first-try success
// costs one comparison plus one call of retryResult. A context that is
// already done runs nothing, as in [Policy.Do]: CallIf returns T's zero
// value and ctx.Err().
func CallIf[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error), retryResult func(T) bool) (T, error) {
	if err := ctx.Err(); err != nil { // as in Do
		var zero T
		return zero, err
	}
	if p.init.full { // one load and a branch; fixed, as in Do
		return callFull(ctx, p, fn, retryResult)
	}
	v, err := fn(ctx)
	if err == nil && (retryResult == nil || !retryResult(v)) {
		return v, nil
	}
	var pending bool // no budget: nothing to record
	return callRetry(p.cur.Load(), ctx, p, fn, retryResult, v, err, 0, &pending)
}

// callFull is CallIf with a clock read for the start and the budget
// protocol, reading the fixed fields from New's configuration as doFull.
func callFull[T any](ctx context.Context, p *Policy, fn func(context.Context) (T, error), retryResult func(T) bool) (v T, err error) {
	var start int64
	if p.init.needStart {
		start = p.init.ticker.Now()
	}
	b := p.init.budget
	if b == nil {
		v, err = fn(ctx)
		if err == nil && (retryResult == nil || !retryResult(v)) {
			return v, nil
		}
		var pending bool // no budget: nothing to record
		return callRetry(p.cur.Load(), ctx, p, fn, retryResult, v, err, start, &pending)
	}
	b.OnRequest(start)
	pending := true // as in doFull
	defer func() {
		if pending {
			b.OnFailure(start)
		}
	}()
	v, err = fn(ctx)
	if err == nil && (retryResult == nil || !retryResult(v)) {
		pending = false
		b.OnSuccess(start)
		return v, nil
	}
	return callRetry(p.cur.Load(), ctx, p, fn, retryResult, v, err, start, &pending)
}

// callRetry is the retry loop of CallIf (slow path).
// *pending is as in doRetry.
func callRetry[T any](s *settings, ctx context.Context, p *Policy, fn func(context.Context) (T, error), retryResult func(T) bool, v T, err error, start int64, pending *bool) (T, error) {
	attempt, prev, deadline := 1, int64(0), rampart.NotRead // deadline: not computed yet
	for {
		if err == nil {
			err = ErrRetryResult
		}
		if !s.retryable(err) {
			*pending = false
			return v, p.giveUp(s, NotRetryable, attempt, err, nil)
		}
		now := s.ticker.Now()
		if deadline == rampart.NotRead {
			deadline = p.Deadline(ctx, now)
		}
		if cerr := ctx.Err(); cerr != nil {
			*pending = false
			if callerEnded(err, cerr) { // as in doRetry
				return v, p.giveUp(s, NotRetryable, attempt, err, nil)
			}
			if s.budget != nil {
				s.budget.OnFailure(now)
			}
			return v, p.giveUp(s, Canceled, attempt, err, cerr)
		}
		*pending = false // Decide records the failure
		delay, stop := p.decide(s, attempt, err, start, now, deadline, prev)
		if stop != Continue {
			return v, p.giveUp(s, stop, attempt, err, nil)
		}
		if cerr := p.sleep(ctx, delay); cerr != nil {
			return v, p.giveUp(s, Canceled, attempt, err, cerr)
		}
		prev = delay
		attempt++
		*pending = true
		v, err = fn(ctx)
		if err == nil && (retryResult == nil || !retryResult(v)) {
			*pending = false
			if s.budget != nil {
				s.budget.OnSuccess(s.budgetNow())
			}
			return v, nil
		}
	}
}
