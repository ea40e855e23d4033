package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
)

// ErrLimited is the sentinel of every rejection by a rate limiter. The
// errors returned match both it and [rampart.ErrRejected] through errors.Is.
var ErrLimited = errors.New("rate limited")

// ErrInvalidN is returned by ReserveN and Wait for n < 1 or n > the burst:
// such a request can never be admitted.
var ErrInvalidN = errors.New("ratelimit: n is below 1 or above the burst")

// Never is the wait returned by AdmitN for an n that can never be
// admitted (n < 1 or n > the burst).
const Never = time.Duration(never)

// never is Never as the int64 the algorithm computes in.
const never = int64(math.MaxInt64)

// retired marks the TAT word of a state replaced by SetRate or SetBurst.
// Every real TAT stays below it (readings are capped at maxUnits, 2⁶² units,
// over 70 years of nanoseconds, plus at most tau and maxReserve, 2⁶⁰ each),
// and retired + tau does not overflow.
const retired = int64(3) << 61

// maxReserve bounds how far ahead of now a reservation may commit, in units.
const maxReserve = int64(1) << 60

// state is one rate epoch: the GCRA theoretical arrival time (TAT) and the
// parameters it is counted in. SetRate and SetBurst retire the state (they
// swap retired into its TAT word) and publish a new one.
type state struct {
	// tat is the theoretical arrival time in units: the instant at which
	// the limiter would be back to a full burst. Written by every admission
	// (one CAS) from every goroutine: unless Config.Compact, the state sits
	// inside a paddedState, so that no other object shares a cache line
	// with it. It only moves forward, except when CancelAt unwinds the
	// latest reservation.
	tat atomic.Int64
	// params share tat's line in the padded layout: every call that reads
	// them reads tat next, from the same line, so they cost no extra miss.
	params
}

// paddedState is a state alone on its cache lines (see package pad): any
// line that holds a byte of s lies inside the struct.
type paddedState struct {
	_ pad.Line
	s state
	_ [pad.LineSize - 8]byte
}

// newState returns a state with parameters p and TAT tat, padded unless
// compact.
func newState(p params, tat int64, compact bool) *state {
	var s *state
	if compact {
		s = &state{params: p}
	} else {
		s = &(&paddedState{s: state{params: p}}).s
	}
	s.tat.Store(tat)
	return s
}

// extras are the parts of a limiter that only some configurations use:
// nil for a limiter without OnRejected and CountStats, which keeps the
// instance small and its hot path to one nil check.
type extras struct {
	onRejected     func(n int, wait time.Duration)
	listenerPanics atomic.Uint64
	// admitted and rejected point into a counts or paddedCounts (Config.Compact)
	// with CountStats, nil without.
	admitted, rejected *atomic.Uint64
}

// counts are the CountStats counters of a compact limiter.
type counts struct{ admitted, rejected atomic.Uint64 }

// paddedCounts are the CountStats counters of a padded limiter: each is
// written by every admission (or rejection), so each has its own line.
type paddedCounts struct{ admitted, rejected pad.Uint64 }

// unnamedRejection is the rejection error of every limiter without a Name:
// they would all build the same one (policy "ratelimit", no name), so they
// share it and an unnamed limiter allocates no error.
var unnamedRejection = rampart.NewRejectedError("ratelimit", "", ErrLimited)

// Limiter is a GCRA rate limiter. Create it with [New] and call
// [Limiter.Allow] (fail fast), [Limiter.Wait] (block until due) or
// [Limiter.Reserve] (schedule ahead) for each call, or run it in
// [Limiter.Do].
//
// Admission is one load and, when admitted, one CAS on the theoretical
// arrival time (see the package documentation). The zero value is not
// usable. All methods are safe for concurrent use.
//
// The primitive methods take the current reading of the limiter's ticker
// (now, in ns) so a pipeline can share one clock read between policies:
// [Limiter.AdmitN] (admit or say how long to wait), [Limiter.AllowN],
// [Limiter.ReserveN]. The shorthands ([Limiter.Allow], [Limiter.WaitN],
// [Limiter.Do]) read the ticker themselves.
//
// A limiter is 256 B (unnamed, whole-ns interval: a 48 B header and its
// state padded to its own cache lines) or 128 B with [Config.Compact]; see
// Compact for what names, listeners and counters add. The first Wait that
// sleeps allocates the Waited counter of [Stats], on its own cache lines
// unless Compact, so that the sleepers' counting never writes the line
// every call reads.
type Limiter struct {
	st       atomic.Pointer[state] // the current epoch; read by every call, written by SetRate/SetBurst
	tk       rampart.Ticker
	rejected *rampart.RejectedError
	ext      *extras // nil without OnRejected and CountStats
	// waited counts the Wait calls that slept. It is a pointer to a
	// counter that the first such Wait allocates (countWaited), not a word
	// of the header: every sleeping Wait writes it, and in the header it
	// would share a cache line with st, which every call reads. A limiter
	// that never sleeps allocates nothing for it.
	waited atomic.Pointer[atomic.Uint64]
	// The setters (SetRate, SetBurst, SetLimit) serialise on the state:
	// the one that swaps retired into the current TAT holds the epoch
	// until it publishes the next (see lockState), so no mutex is needed.
}

// New validates c and returns a limiter whose bucket starts full (Burst
// permits available at once).
func New(c Config) (*Limiter, error) {
	p, err := c.validate()
	if err != nil {
		return nil, err
	}
	l := &Limiter{tk: c.Ticker, rejected: unnamedRejection}
	if c.Name != "" {
		l.rejected = rampart.NewRejectedError("ratelimit", c.Name, ErrLimited)
	}
	if c.OnRejected != nil || c.CountStats {
		l.ext = &extras{onRejected: c.OnRejected}
		if c.CountStats {
			if c.Compact {
				n := new(counts)
				l.ext.admitted, l.ext.rejected = &n.admitted, &n.rejected
			} else {
				n := new(paddedCounts)
				l.ext.admitted, l.ext.rejected = &n.admitted.Uint64, &n.rejected.Uint64
			}
		}
	}
	if l.tk == nil {
		l.tk = rampart.DefaultTicker()
	}
	p.origin = originOf(l.tk.Now()) // a clock read at construction: does this clock read below 0?
	p.compact = c.Compact
	l.st.Store(newState(p, math.MinInt64/2, c.Compact)) // a full bucket at any reading
	return l, nil
}

// validate checks c for New and Update and returns its parameters.
func (c *Config) validate() (params, error) {
	p, err := c.build()
	if err != nil {
		return params{}, err
	}
	if ticker.IsNil(c.Ticker) {
		return params{}, rampart.NewConfigError("ratelimit", "Ticker", ticker.NilReason, c.Ticker)
	}
	return p, nil
}

// countAdmitted counts an admission when CountStats is on.
func (l *Limiter) countAdmitted() {
	if x := l.ext; x != nil && x.admitted != nil {
		x.admitted.Add(1)
	}
}

// AdmitN takes n permits at time now if the rate allows it.
//
// It returns 0 when the permits were taken (two loads, the state pointer
// and its TAT word, and one CAS). Otherwise it returns how many ns after
// now the n permits would be admitted if nobody else took them first; a
// rejection is read-only (no
// CAS, no write to the shared word). For n < 1 or n > the burst it returns
// [Never], and so it does for a wait that would end past the last reading
// the limiter counts (2⁶² units: time stands still there). now is a reading of the limiter's ticker. A now older than other
// callers' readings never creates credit (the state never moves back): it
// counts as an early arrival, which may be rejected.
func (l *Limiter) AdmitN(now int64, n int) (wait time.Duration) {
	s := l.st.Load()                   // the epoch: a read-mostly pointer
	u, ph := s.unitsPhase(now)         // one multiplication, no clock read
	tat := s.tat.Load()                // the hot word: one load
	if uint64(n-1) < uint64(s.burst) { // 1 ≤ n ≤ burst, so n·k cannot overflow
		inc := int64(n) * s.k
		// max(tat, x) + inc − x ≤ tau with x the exact reading, which is
		// tat + inc − floor(x) ≤ tau since inc ≤ tau (no overflow: tat is
		// in [MinInt64/2, retired], inc ≤ 2⁶⁰, u in [0, 2⁶²)); an idle
		// limiter starts its new phase at ph (see params).
		if tat+inc-u <= s.tau {
			if s.tat.CompareAndSwap(tat, max(tat, ph)+inc) { // the one write
				if l.ext != nil {
					l.countAdmitted()
				}
				return 0
			}
		} else if tat < retired && l.ext == nil {
			return time.Duration(s.waitFor(now, tat+inc)) // read-only rejection, nothing to count
		}
	}
	return time.Duration(l.acquireSlow(now, n, true))
}

// Admit is AdmitN for one permit at a reading of the limiter's Ticker.
func (l *Limiter) Admit() time.Duration { return l.AdmitN(l.tk.Now(), 1) }

// AllowN reports whether n permits were taken at time now. It is
// AdmitN without computing the wait of a rejection.
func (l *Limiter) AllowN(now int64, n int) bool {
	s := l.st.Load() // same fast path as AdmitN
	u, ph := s.unitsPhase(now)
	tat := s.tat.Load()
	if uint64(n-1) < uint64(s.burst) {
		inc := int64(n) * s.k
		if tat+inc-u <= s.tau {
			if s.tat.CompareAndSwap(tat, max(tat, ph)+inc) {
				if l.ext != nil {
					l.countAdmitted()
				}
				return true
			}
		} else if tat < retired && l.ext == nil {
			return false // read-only rejection, nothing to count
		}
	}
	return l.acquireSlow(now, n, false) == 0
}

// acquireSlow is the slow path of AdmitN and AllowN: a lost CAS, a
// rejection, an invalid n, or a state being replaced by SetRate. It returns
// 0 (admitted) or the wait (computed only when wantWait or a listener needs
// it; 1 otherwise).
func (l *Limiter) acquireSlow(now int64, n int, wantWait bool) int64 {
	for {
		s := l.st.Load()
		if n < 1 || int64(n) > s.burst {
			return l.reject(n, never)
		}
		tat := s.tat.Load()
		if tat >= retired { // SetRate is publishing the next state
			runtime.Gosched()
			continue
		}
		u, ph := s.unitsPhase(now)
		inc := int64(n) * s.k
		if tat+inc-u > s.tau { // read-only rejection
			if x := l.ext; !wantWait && (x == nil || x.onRejected == nil) {
				if x != nil && x.rejected != nil {
					x.rejected.Add(1)
				}
				return 1
			}
			return l.reject(n, s.waitFor(now, tat+inc))
		}
		if s.tat.CompareAndSwap(tat, max(tat, ph)+inc) {
			l.countAdmitted()
			return 0
		}
	}
}

// reject counts and notifies a rejection and returns wait.
func (l *Limiter) reject(n int, wait int64) int64 {
	x := l.ext
	if x == nil {
		return wait
	}
	if x.rejected != nil {
		x.rejected.Add(1)
	}
	if x.onRejected != nil {
		notify.Call2(&x.listenerPanics, x.onRejected, n, time.Duration(wait))
	}
	return wait
}

// Allow takes one permit now if the rate allows it: one clock read, two
// loads, one CAS.
func (l *Limiter) Allow() bool { return l.AllowN(l.tk.Now(), 1) }

// RejectedError returns the limiter's preallocated rejection error, which
// matches [ErrLimited] and [rampart.ErrRejected].
func (l *Limiter) RejectedError() error { return l.rejected }

// Ticker returns the clock the shorthands read.
func (l *Limiter) Ticker() rampart.Ticker { return l.tk }

// Reservation is a commitment of n permits at a future time, made by
// [Limiter.ReserveN]. It is a small value; keep it in a variable and call
// CancelAt on that variable if the permits go unused.
type Reservation struct {
	l     *Limiter
	s     *state
	start int64 // TAT before the reservation (units)
	end   int64 // TAT after it (units)
	at    int64 // reading at which the permits may be used
	delay int64 // at - now of the ReserveN call
	n     int
}

// OK reports whether the reservation holds permits (false for the zero
// Reservation and after CancelAt).
func (r *Reservation) OK() bool { return r.l != nil }

// Delay returns how long after the ReserveN call the permits may be used (0:
// at once).
func (r *Reservation) Delay() time.Duration { return time.Duration(r.delay) }

// TimeToAct returns the ticker reading at which the permits may be used.
func (r *Reservation) TimeToAct() int64 { return r.at }

// DelayFrom returns how long after now the permits may be used (0 if that
// time has come).
func (r *Reservation) DelayFrom(now int64) time.Duration {
	return time.Duration(max(r.at-now, 0))
}

// N returns the number of permits reserved.
func (r *Reservation) N() int { return r.n }

// CancelAt gives the permits back if they can be given back exactly, and
// reports whether it did. The rule: the permits return only when their time
// has not passed (now ≤ TimeToAct) and the reservation is still the
// latest commitment of the limiter (no admission or reservation was made
// after it, or all those were cancelled first). CancelAt then restores the
// state the limiter had just before ReserveN, so nobody can ever use more
// than the rate would have allowed without the reservation. Otherwise
// nothing is given back: later callers were scheduled behind this
// reservation and giving its permits to someone else would let the
// admissions of some window exceed the rate. CancelAt also gives nothing back
// after SetRate or SetBurst. Cancelling twice is a no-op.
func (r *Reservation) CancelAt(now int64) bool {
	if r.l == nil {
		return false
	}
	l, s := r.l, r.s
	r.l = nil
	if now > r.at || l.st.Load() != s {
		return false
	}
	return s.tat.CompareAndSwap(r.end, r.start)
}

// Cancel is CancelAt at a reading of the limiter's Ticker (false, and no
// clock read, for a reservation that was not granted or is already
// cancelled).
func (r *Reservation) Cancel() bool {
	if r.l == nil {
		return false
	}
	return r.CancelAt(r.l.tk.Now())
}

// ReserveN commits n permits at the earliest time they are available and
// returns the reservation, provided that time is at most maxWait after now.
// If it is later, nothing is committed (read-only, as for AdmitN) and
// the limiter's rejection error is returned, so a negative maxWait is
// always refused; for n < 1 or n > the burst, [ErrInvalidN]. The caller
// must wait r.Delay() before acting, or CancelAt.
func (l *Limiter) ReserveN(now int64, n int, maxWait time.Duration) (Reservation, error) {
	for {
		s := l.st.Load()
		if n < 1 || int64(n) > s.burst {
			return Reservation{}, ErrInvalidN
		}
		tat := s.tat.Load()
		if tat >= retired {
			runtime.Gosched()
			continue
		}
		u, ph := s.unitsPhase(now)
		inc := int64(n) * s.k
		next := max(tat, ph) + inc // the new phase of an idle limiter, as in AdmitN
		var wait int64
		d := tat + inc - u - s.tau
		if d > 0 { // then tat > u, so next = tat + inc
			wait = s.waitFor(now, next)
		}
		// wait ≥ 0, so a negative maxWait (WaitN past its deadline) is refused
		if wait > int64(maxWait) || wait == never || d > maxReserve {
			l.reject(n, wait)
			return Reservation{}, l.rejected
		}
		if s.tat.CompareAndSwap(tat, next) {
			l.countAdmitted()
			return Reservation{l: l, s: s, start: tat, end: next, at: atomicx.SatAdd(now, wait), delay: wait, n: n}, nil
		}
	}
}

// Reserve is ReserveN for one permit at a reading of the limiter's Ticker.
func (l *Limiter) Reserve(maxWait time.Duration) (Reservation, error) {
	return l.ReserveN(l.tk.Now(), 1, maxWait)
}

// WaitN blocks until n permits are taken, and returns nil; or returns
// ctx.Err() if ctx ends first (the reservation is cancelled by the rule of
// [Reservation.CancelAt]); or returns the rejection error at once, without
// waiting, if the permits would come after ctx's deadline; or [ErrInvalidN].
// It sleeps on a time.Timer, so the limiter's ticker must follow real time
// (the default ticker, a cached one, or one made inside a synctest bubble).
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := l.tk.Now()
	maxWait := time.Duration(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		maxWait = time.Until(dl)
	}
	r, err := l.ReserveN(now, n, maxWait)
	if err != nil {
		return err
	}
	if r.delay == 0 {
		return nil
	}
	return l.waitSlow(ctx, &r)
}

// Wait is WaitN for one permit.
func (l *Limiter) Wait(ctx context.Context) error { return l.WaitN(ctx, 1) }

// waitSlow sleeps until the reservation's time or ctx's end (slow path).
func (l *Limiter) waitSlow(ctx context.Context, r *Reservation) error {
	l.countWaited()
	t := time.NewTimer(time.Duration(r.delay))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.CancelAt(l.tk.Now())
		return ctx.Err()
	}
}

// countWaited counts a Wait that sleeps (slow path: it is about to start a
// timer). The first one allocates the counter, padded to its own cache
// lines unless Config.Compact, and publishes it with a CAS; a Wait that
// loses the CAS counts on the winner's counter.
func (l *Limiter) countWaited() {
	c := l.waited.Load()
	if c == nil {
		if l.st.Load().compact {
			c = new(atomic.Uint64)
		} else {
			c = &new(pad.Uint64).Uint64
		}
		if !l.waited.CompareAndSwap(nil, c) {
			c = l.waited.Load()
		}
	}
	c.Add(1)
}

// Do runs fn if one permit is available now, and returns its error
// unchanged; otherwise it returns the rejection error without running fn.
// A panic in fn propagates (a rate permit has nothing to release).
func (l *Limiter) Do(ctx context.Context, fn func(context.Context) error) error {
	if !l.Allow() {
		return l.rejected
	}
	return fn(ctx)
}

// Call runs fn under l like [Limiter.Do] and returns its typed result; on
// rejection it returns the zero T and the rejection error.
func Call[T any](ctx context.Context, l *Limiter, fn func(context.Context) (T, error)) (T, error) {
	if !l.Allow() {
		var zero T
		return zero, l.rejected
	}
	return fn(ctx)
}

// TokensAt returns the number of permits available at time now: at most the
// burst, and negative only when reservations have committed permits ahead
// of time (or now is older than the readings of the admissions made).
func (l *Limiter) TokensAt(now int64) float64 {
	var s *state
	var tat int64
	for {
		s = l.st.Load()
		if tat = s.tat.Load(); tat < retired {
			break
		}
		runtime.Gosched() // SetRate is publishing the next state
	}
	u := s.units(now)
	v := s.tau - (max(tat, u) - u)
	if v == -1 && !s.unitIsNs {
		// A phase that rounded up (see params) puts the TAT one unit
		// above the exact one: a full burst taken at that reading leaves
		// one unit short, no debt. (A reservation only one unit, under
		// 1 ns, ahead reads 0 too; whole-ns intervals never round.)
		v = 0
	}
	return float64(v) / float64(s.k)
}

// Tokens is TokensAt at a reading of the limiter's Ticker.
func (l *Limiter) Tokens() float64 { return l.TokensAt(l.tk.Now()) }

// Stats is a snapshot of a limiter's counters and configuration.
type Stats struct {
	Admitted       uint64        // calls admitted (AdmitN, ReserveN); only with Config.CountStats
	Rejected       uint64        // calls rejected; only with Config.CountStats
	Waited         uint64        // Wait calls that had to sleep (always counted: a slow path)
	ListenerPanics uint64        // panics recovered from OnRejected
	Rate           float64       // admissions per second
	Burst          int           // the bucket size
	Interval       time.Duration // the emission interval, rounded to whole ns
}

// Stats returns the counters and the current rate. It allocates nothing.
func (l *Limiter) Stats() Stats {
	s := l.st.Load()
	st := Stats{
		Rate:     s.ratePerSecond(),
		Burst:    int(s.burst),
		Interval: s.interval(),
	}
	if c := l.waited.Load(); c != nil {
		st.Waited = c.Load()
	}
	if x := l.ext; x != nil {
		st.ListenerPanics = x.listenerPanics.Load()
		if x.admitted != nil {
			st.Admitted, st.Rejected = x.admitted.Load(), x.rejected.Load()
		}
	}
	return st
}

// SetRate is SetRateAt at a reading of the limiter's Ticker, taken while
// the setter holds the epoch (see lockState) so that racing setters apply
// their readings in order.
func (l *Limiter) SetRate(rate float64) error {
	return l.set(rampart.NotRead, func(old *state) (params, error) { return rateParams(rate, old.burst, "Rate") })
}

// SetRateAt changes the rate at time now to rate admissions per second,
// keeping the burst and the permits available at now (capped at the
// burst). Reservations made before keep their times but can no longer be
// cancelled. A now older than the readings of admissions already made
// creates no credit: the new state has none before the old one would.
func (l *Limiter) SetRateAt(now int64, rate float64) error {
	return l.set(now, func(old *state) (params, error) { return rateParams(rate, old.burst, "Rate") })
}

// SetLimit is SetLimitAt at a reading of the limiter's Ticker, taken
// while the setter holds the epoch (as for SetRate).
func (l *Limiter) SetLimit(limit int, period time.Duration) error {
	return l.set(rampart.NotRead, func(old *state) (params, error) { return limitParams(old, limit, period) })
}

// SetLimitAt changes the rate at time now to limit admissions per period
// (exact), keeping the burst and the permits available at now (capped at
// the burst). A now older than the readings of admissions already made
// creates no credit, as for SetRateAt.
func (l *Limiter) SetLimitAt(now int64, limit int, period time.Duration) error {
	return l.set(now, func(old *state) (params, error) { return limitParams(old, limit, period) })
}

// Update changes the limiter's rate and burst while calls run (see "Live
// reconfiguration" in the package documentation). It validates c exactly
// as New does, and refuses with a *rampart.ConfigError naming the field a
// change to a field fixed at construction: Name (an empty Name keeps the
// name New was given, as a registry's create-or-get sets it), Ticker,
// Compact, CountStats, OnRejected (the func value New was given, as
// [Limiter.Config] returns it, is accepted; pass the Config New was given,
// or Config's, with its rate form and Burst changed). Otherwise it publishes the new rate and burst at
// once, as SetLimit or SetRate and SetBurst together would, at a reading
// of the Ticker: the permits available (or committed ahead) carry over,
// capped at the new burst. Any of the three rate forms may replace any
// other: all are the same GCRA state. A c with the rate and burst in force
// changes nothing (reservations stay cancellable); an invalid or refused c
// changes nothing either.
func (l *Limiter) Update(c Config) error {
	return l.UpdateAt(rampart.NotRead, c)
}

// UpdateAt is [Limiter.Update] at time now, a reading of the limiter's
// Ticker, for a caller that shares one reading (as SetRateAt).
func (l *Limiter) UpdateAt(now int64, c Config) error {
	p, err := c.validate()
	if err != nil {
		return err
	}
	if err := l.checkFixed(&c); err != nil {
		return err
	}
	if s := l.st.Load(); s.num == p.num && s.den == p.den && s.burst == p.burst {
		return nil // the configuration in force: keep the epoch
	}
	return l.set(now, func(*state) (params, error) { return p, nil })
}

// Config returns the configuration in force, with its defaults filled
// in: the rate in its exact Limit/Period form (Limit per Period is the
// emission interval num/den ns exactly: Rate, Capacity and RefillRate are
// zero; to set another form, zero Limit and Period), Burst, the Ticker the
// limiter reads, Name, Compact, CountStats and the OnRejected func value
// New was given. Change a field and pass it to [Limiter.Update]; the rate
// and burst may change meanwhile (SetRate, Update), and Config reports one
// published state, never a mix.
func (l *Limiter) Config() Config {
	s := l.st.Load()
	c := Config{
		Name:    l.rejected.Name(),
		Burst:   int(s.burst),
		Ticker:  l.tk,
		Compact: s.compact,
	}
	c.setInterval(s.num, s.den)
	if x := l.ext; x != nil {
		c.OnRejected, c.CountStats = x.onRejected, x.admitted != nil
	}
	return c
}

// setInterval sets c's rate to the interval num/den ns (reduced) as Limit
// per Period, exactly: per second when a second holds a whole number of
// intervals, else den per num ns (den ≤ num ≤ 2⁶¹: a Duration, and an int
// on 64-bit). A den above math.MaxInt (32-bit only) is set as the Rate
// den·1e9/num, the float it came from.
func (c *Config) setInterval(num, den uint64) {
	switch hi, lo := bits.Mul64(den, uint64(time.Second)); {
	case hi == 0 && lo%num == 0 && lo/num <= math.MaxInt:
		c.Limit, c.Period = int(lo/num), time.Second
	case den <= math.MaxInt:
		c.Limit, c.Period = int(den), time.Duration(num)
	default:
		c.Rate = float64(den) * 1e9 / float64(num)
	}
}

// checkFixed returns the *rampart.ConfigError of the first field of c that
// differs from what New fixed.
func (l *Limiter) checkFixed(c *Config) error {
	const fixed = "is fixed at construction: "
	var onRejected func(int, time.Duration)
	countStats := false
	if x := l.ext; x != nil {
		onRejected, countStats = x.onRejected, x.admitted != nil
	}
	switch {
	case c.Name != "" && c.Name != l.rejected.Name(): // "": the name New was given
		return rampart.NewConfigError("ratelimit", "Name", fixed+"New built the rejection error that carries it (got %q, built with %q)", c.Name, l.rejected.Name())
	case !sameTicker(c.Ticker, l.tk):
		return rampart.NewConfigError("ratelimit", "Ticker", fixed+"the theoretical arrival time is counted in readings of the old clock, which another clock's do not compare with")
	case c.Compact != l.st.Load().compact:
		return rampart.NewConfigError("ratelimit", "Compact", fixed+"it chose the memory layout New allocated (got %v)", c.Compact)
	case c.CountStats != countStats:
		return rampart.NewConfigError("ratelimit", "CountStats", fixed+"New allocated the counters, or left them out, and every admission reads that choice from a word New set (got %v)", c.CountStats)
	case !sameptr.Func(c.OnRejected, onRejected):
		return rampart.NewConfigError("ratelimit", "OnRejected", fixed+"the rejection path reads it from a word New set; pass the func value New was given")
	}
	return nil
}

// limitParams are the parameters of limit per period with old's burst.
func limitParams(old *state, limit int, period time.Duration) (params, error) {
	c := Config{Limit: limit, Period: period, Burst: int(old.burst)}
	return c.build()
}

// SetBurst is SetBurstAt at a reading of the limiter's Ticker, taken
// while the setter holds the epoch (as for SetRate).
func (l *Limiter) SetBurst(burst int) error {
	return l.set(rampart.NotRead, func(old *state) (params, error) { return burstParams(old, burst) })
}

// SetBurstAt changes the burst at time now, keeping the rate and the
// permits available at now capped at the new burst: lowering the burst
// never lets the old, larger credit through, and raising it adds no credit
// at once (it fills at the rate). A now older than the readings of
// admissions already made creates no credit, as for SetRateAt.
func (l *Limiter) SetBurstAt(now int64, burst int) error {
	return l.set(now, func(old *state) (params, error) { return burstParams(old, burst) })
}

// burstParams are the parameters of old's rate with burst.
func burstParams(old *state, burst int) (params, error) {
	if burst < 1 {
		return params{}, rampart.NewConfigError("ratelimit", "Burst", "must be at least 1, got %d", burst)
	}
	return newParams(old.num, old.den, int64(burst), "Burst")
}

// set replaces the state with the parameters build returns for it, at
// time now (rampart.NotRead: at a reading of the ticker taken while the
// setter holds the epoch). An invalid value changes nothing: build is
// checked against the current state first, without stopping admissions,
// and again under the epoch if another setter replaced the state
// meanwhile.
//
// Whatever ends the setter while it holds the epoch (an invalid value, a
// Ticker whose Now panics or calls runtime.Goexit) gives the epoch back
// unchanged: the deferred Store puts the TAT back into the old state's
// word, so no admission or setter spins on a retired word forever, and a
// panic reaches the caller as it was. (A slow path: the defer costs the
// admissions nothing.)
func (l *Limiter) set(now int64, build func(old *state) (params, error)) error {
	seen := l.st.Load()
	p, err := build(seen)
	if err != nil {
		return err
	}
	old, tat := l.lockState()
	published := false
	defer func() {
		if !published {
			old.tat.Store(tat) // give the epoch back unchanged
		}
	}()
	if old != seen { // another setter came between: build on its state
		if p, err = build(old); err != nil {
			return err
		}
	}
	if now == rampart.NotRead {
		now = l.tk.Now()
	}
	l.replace(old, tat, p, now)
	published = true
	return nil
}

// lockState retires the current state (it swaps retired into its TAT word)
// and returns it with the TAT it had: from there no admission can use it
// and no other setter can retire it, until replace publishes the next
// state or set gives the epoch back (see set). This serialises the
// setters, as a mutex would, without a mutex in every limiter; admissions
// and other setters meanwhile spin on the retired word (runtime.Gosched),
// as they always did during a replacement.
func (l *Limiter) lockState() (*state, int64) {
	for {
		s := l.st.Load()
		tat := s.tat.Load()
		if tat >= retired { // another setter is publishing the next state
			runtime.Gosched()
			continue
		}
		if s.tat.CompareAndSwap(tat, retired) {
			return s, tat
		}
	}
}

// replace retires old and publishes a state with parameters p holding the
// same number of available permits (capped at the new burst). Slow path:
// old is retired (lockState) and tat is the TAT it had; callers spinning on
// the retired word wait for the Store.
//
// A debt at now (TAT − tau above now) is either permits committed ahead or
// a now older than the readings of the admissions that made it (a stale
// SetRateAt, or an admission with a later reading landing between a
// shorthand's clock read and the Swap): the two look the same. The
// old state is back to 0 permits at its zero point z = earliest(TAT − tau)
// whatever now is, and the new state must not have credit before that, so
// its TAT is at least phase(z) + its tau: refilling the converted debt
// from a stale now at a faster rate would hand out permits the old state
// never had (a bucket drained at 100 s, SetRateAt(0, 10×): full at 100 s).
func (l *Limiter) replace(old *state, tat int64, p params, now int64) {
	p.origin = old.origin   // readings keep their meaning
	p.compact = old.compact // and the layout stays the one New chose
	uo := old.units(now)
	// available permits in old units (negative: committed ahead)
	availOld := old.tau - (max(tat, uo) - uo)
	// the same permits in new units, rounded down, at most the new burst
	a := new(big.Int).Mul(big.NewInt(availOld), big.NewInt(p.k))
	q, m := new(big.Int).DivMod(a, big.NewInt(old.k), new(big.Int))
	_ = m // DivMod is Euclidean: q = floor for a positive divisor
	availNew := p.tau
	switch {
	case !q.IsInt64():
		if q.Sign() < 0 {
			availNew = -maxReserve
		}
	case q.Int64() < availNew:
		availNew = max(q.Int64(), -maxReserve)
	}
	un, ph := p.unitsPhase(now)
	nt := un // a full bucket at now and later
	if availNew < p.tau {
		nt = ph + p.tau - availNew // a phase set by now: see params
		if tat-old.tau > uo {      // a debt at now: no credit before the old state's zero point
			_, zp := p.unitsPhase(old.earliest(tat - old.tau))
			nt = max(nt, zp+p.tau)
		}
	}
	l.st.Store(newState(p, nt, p.compact))
}
