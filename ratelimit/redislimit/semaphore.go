package redislimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
)

// ErrSemaphoreFull is the sentinel of a [Semaphore]'s rejection: Max leases
// were held across all processes (and, in waiting mode, stayed held for
// MaxWait). Match it with errors.Is; the error returned also matches
// [rampart.ErrRejected].
var ErrSemaphoreFull = errors.New("full")

// SemaphoreConfig configures a [Semaphore]. Zero fields mean the documented
// defaults.
type SemaphoreConfig struct {
	// Client is the Redis client: a single node, Sentinel or Cluster
	// client. Required.
	Client redis.UniversalClient
	// Name identifies the semaphore across processes: every process that
	// shares the budget uses the same Name (and Prefix and Max). It names
	// the Redis key, Prefix + "{" + Name + "}", and the rejection error.
	// Required.
	Name string
	// Max is the budget: the most permits held at once across every
	// process. Required: at least 1.
	Max int
	// Prefix starts the semaphore's Redis key. Default "rampart:sem:".
	Prefix string
	// TTL is a lease's lifetime without renewal: a process that dies
	// (kill -9, a partition) frees its permits within TTL. Default 3 s; it
	// must be longer than RenewEvery, and should exceed RenewEvery +
	// Timeout so that one late renewal does not lose the leases.
	TTL time.Duration
	// RenewEvery is the renewal period: every RenewEvery one script call
	// per 1,024 held leases renews every lease this process holds. Default
	// TTL/3.
	RenewEvery time.Duration
	// MaxWait is how long AcquireWait, Do and Call wait for a permit when
	// Max are held, at most (the context can end the wait earlier). 0 (the
	// default) means fail-fast. Use time.Duration(math.MaxInt64) to wait
	// as long as the context allows. The wait runs on real timers.
	MaxWait time.Duration
	// PollMin and PollMax bound the wait between two tries of a waiting
	// AcquireWait: it starts at PollMin and doubles up to PollMax, each
	// wait drawn uniformly below the bound (full jitter); a Release in
	// this process wakes one local waiter at once. Defaults 2 ms and 50 ms.
	// Any bounds up to time.Duration(math.MaxInt64) are valid: with
	// PollMin that large, only a local Release, MaxWait, the context or
	// Close ends a wait.
	PollMin, PollMax time.Duration
	// Timeout bounds every Redis call (acquire, release, renewal), whatever
	// the client's own timeouts, and judges Redis for the breaker: an
	// acquire whose caller's deadline comes first returns at that deadline
	// and counts as a failure only if Redis has not answered within
	// Timeout. Default 100 ms.
	Timeout time.Duration
	// Failure is what an acquire does when Redis cannot answer: FailOpen
	// admits (the default), FailClosed rejects with an error matching
	// ErrUnavailable and rampart.ErrRejected, FailLocal admits through a
	// local bulkhead of max(1, Max / replicas) permits.
	Failure FailureMode
	// Replicas is the number of processes sharing the budget, for
	// FailLocal's share when LiveReplicas is nil or has not answered yet.
	// Default 1.
	Replicas int
	// LiveReplicas, when set, gives FailLocal's share as Max divided by its
	// live count (see [Replicas]).
	LiveReplicas *Replicas
	// BreakerFailures is how many consecutive Redis failures open the
	// breaker in front of Redis. Default 5.
	BreakerFailures int
	// BreakerOpen is how long the breaker stays open before a probe.
	// Default 1 s. Renewals do not wait for it: one the breaker refuses is
	// sent past it.
	BreakerOpen time.Duration
	// Ticker is the local clock of the breaker and of wait times. Default
	// rampart.DefaultTicker().
	Ticker rampart.Ticker
	// OnRejected, when set, is called on the rejecting goroutine each time
	// an acquire is refused (full, MaxWait expired, context ended, or
	// FailClosed), with the leases held across all processes that Redis
	// reported (the local bulkhead's in-flight count under FailLocal; -1
	// when unknown) and how long it waited (0 for fail-fast).
	OnRejected func(held int64, waited time.Duration)
	// OnWaitAdmit, when set, is called when an acquire that had to wait is
	// granted a permit, with how long it waited, on the waiting goroutine.
	// If it ends that goroutine (runtime.Goexit) the permit is released.
	OnWaitAdmit func(waited time.Duration)
	// OnExpired, when set, is called from the renewal goroutine with the
	// number of leases a renewal found expired in Redis: their calls were
	// still running, no longer counted in the budget. A panic in it is
	// recovered and counted; a runtime.Goexit ends the renewal goroutine,
	// and another takes over.
	OnExpired func(n int)
	// OnRedisError, if set, is called with every error from Redis (and a
	// panic of the client on the renewal goroutine, as an error), on the
	// goroutine that made the call: the caller's, the renewal goroutine's,
	// or, for a call its caller left at its own deadline, the goroutine
	// that waited for the reply. A panic in it is recovered and counted; a
	// runtime.Goexit on the renewal goroutine ends it, and another takes
	// over.
	OnRedisError func(err error)
}

// SemaphoreStats is a snapshot of a [Semaphore]'s counters, for this
// process.
type SemaphoreStats struct {
	Max            int64         // the budget, across all processes
	InFlight       int64         // permits this process holds now (leases and fallback permits)
	PeakInFlight   int64         // most permits this process held at once
	Waiting        int64         // AcquireWait calls waiting now
	Admitted       uint64        // acquires granted a permit (by Redis or by the Failure mode)
	Rejected       uint64        // acquires refused, for any reason (includes TimedOut and Canceled)
	TimedOut       uint64        // waiting acquires whose MaxWait expired
	Canceled       uint64        // acquires whose context ended first
	Waited         uint64        // acquires admitted after waiting
	WaitTime       time.Duration // total time spent waiting, admitted or not
	Expired        uint64        // leases a renewal found expired while their call ran
	RoundTrips     uint64        // acquire and release calls Redis answered
	Renewals       uint64        // renewal script calls Redis answered
	RedisErrors    uint64        // failed Redis calls (timeouts, connection errors)
	Fallbacks      uint64        // acquires decided by the Failure mode (a waiting one once, by its last try)
	BreakerOpen    bool          // whether the breaker in front of Redis is open now
	ListenerPanics uint64        // listener panics recovered
}

// Permit is one permit of a [Semaphore], returned by Acquire and
// AcquireWait and given back with [Semaphore.Release]. The zero Permit
// holds nothing.
type Permit struct{ h *held }

// Source tells whether the permit is a lease in Redis (SourceRedis) or was
// given by the Failure mode (SourceFallback).
func (p Permit) Source() Source {
	if p.h != nil && p.h.kind == kindLease {
		return SourceRedis
	}
	return SourceFallback
}

type permitKind uint8

const (
	kindLease permitKind = iota // a lease in Redis
	kindLocal                   // a permit of the FailLocal bulkhead
	kindOpen                    // FailOpen: nothing is held
)

// held is a permit this process holds.
type held struct {
	sem      *Semaphore // the semaphore that granted it
	token    string
	kind     permitKind
	released atomic.Bool // set by the first Release: a second one does nothing
}

// maxRenewBatch is how many tokens one renewal script call carries at most:
// a Lua script blocks the Redis server while it runs, and a call that
// renews 1,000 leases takes a few milliseconds end to end
// (BenchmarkSemaphoreRenewal), so larger holdings are split.
const maxRenewBatch = 1024

// maxOrphans bounds the tokens waiting to be removed by the next renewal
// (releases that failed, acquires that timed out); past it a token is
// dropped and its lease, if Redis granted it, expires within TTL.
const maxOrphans = 1 << 12

// Semaphore is a concurrency limit shared by every process that builds one
// with the same Client, Prefix and Name: at most Max permits are held at
// once across all of them. Create it with [NewSemaphore]; run calls
// through [Semaphore.Do] or [Call], or bracket a call with
// [Semaphore.Acquire] (or [Semaphore.AcquireWait]) and exactly one
// [Semaphore.Release]. Call [Semaphore.Close] at shutdown.
//
// Each permit is a lease in a Redis sorted set, scored by its expiry on
// Redis' clock, under a random token: acquire is one script call, release
// one ZREM, and one background goroutine renews every lease the process
// holds with one script call per RenewEvery (see the package
// documentation). The zero Semaphore is not usable. A Semaphore is safe
// for concurrent use.
type Semaphore struct {
	cfg            SemaphoreConfig
	key            string
	keys           []string // {key}: go-redis only reads it, so every call shares it
	maxArg, ttlArg string
	errTimeout     error
	errFull        *rampart.RejectedError
	errUnavailable *rampart.RejectedError
	brk            *breaker
	freed          chan struct{} // a Release wakes one local waiter

	local    *bulkhead.Bulkhead // FailLocal's share
	localMu  sync.Mutex         // serialises changes of the share
	localMax atomic.Int64

	// mu guards held, orphans and renewing, and closed's writes. It is
	// taken once per acquire and once per release of a lease: each makes
	// a round trip to Redis anyway (tens of µs and go-redis' allocations),
	// and the renewal goroutine needs the set of tokens held.
	mu       sync.Mutex
	held     map[*held]struct{}
	orphans  []string
	renewing bool
	closed   atomic.Bool // written under mu; loaded without it before a round trip
	stop     chan struct{}
	wg       sync.WaitGroup

	inFlight, peak, waiting, waitNanos             atomic.Int64
	admitted, rejected, timedOut, canceled, waited atomic.Uint64
	expired, roundTrips, renewals, redisErrors     atomic.Uint64
	fallbacks, listenerPanics                      atomic.Uint64
}

// NewSemaphore validates cfg and returns a Semaphore, or a
// *rampart.ConfigError (matching rampart.ErrInvalidConfig).
func NewSemaphore(cfg SemaphoreConfig) (*Semaphore, error) {
	if cfg.Client == nil {
		return nil, rampart.NewConfigError("redislimit", "SemaphoreConfig.Client", "is required")
	}
	if cfg.Name == "" {
		return nil, rampart.NewConfigError("redislimit", "SemaphoreConfig.Name", "is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "rampart:sem:"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.TTL / 3
	}
	if cfg.PollMin == 0 {
		cfg.PollMin = 2 * time.Millisecond
	}
	if cfg.PollMax == 0 {
		cfg.PollMax = max(50*time.Millisecond, cfg.PollMin)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.BreakerOpen == 0 {
		cfg.BreakerOpen = time.Second
	}
	if cfg.Ticker == nil {
		cfg.Ticker = rampart.DefaultTicker()
	}
	field := func(f string) string { return "SemaphoreConfig." + f }
	switch {
	case cfg.Max < 1:
		return nil, rampart.NewConfigError("redislimit", field("Max"), "must be at least 1, got %d", cfg.Max)
	case cfg.TTL < time.Millisecond:
		return nil, rampart.NewConfigError("redislimit", field("TTL"), "must be at least 1ms, got %v", cfg.TTL)
	case cfg.RenewEvery < 0:
		return nil, rampart.NewConfigError("redislimit", field("RenewEvery"), "must be positive, got %v", cfg.RenewEvery)
	case cfg.TTL <= cfg.RenewEvery:
		return nil, rampart.NewConfigError("redislimit", field("TTL"),
			"must be longer than the renewal period RenewEvery (%v), got %v", cfg.RenewEvery, cfg.TTL)
	case cfg.MaxWait < 0:
		return nil, rampart.NewConfigError("redislimit", field("MaxWait"), "must not be negative, got %v", cfg.MaxWait)
	case cfg.PollMin < 0:
		return nil, rampart.NewConfigError("redislimit", field("PollMin"), "must be positive, got %v", cfg.PollMin)
	case cfg.PollMax < cfg.PollMin:
		return nil, rampart.NewConfigError("redislimit", field("PollMax"), "must be at least PollMin (%v), got %v", cfg.PollMin, cfg.PollMax)
	case cfg.Timeout < 0:
		return nil, rampart.NewConfigError("redislimit", field("Timeout"), "must be positive, got %v", cfg.Timeout)
	case cfg.Failure > FailLocal:
		return nil, rampart.NewConfigError("redislimit", field("Failure"), "unknown mode %d", cfg.Failure)
	case cfg.Replicas < 1:
		return nil, rampart.NewConfigError("redislimit", field("Replicas"), "must be at least 1, got %d", cfg.Replicas)
	case cfg.BreakerFailures < 0:
		return nil, rampart.NewConfigError("redislimit", field("BreakerFailures"), "must be at least 1, got %d", cfg.BreakerFailures)
	case cfg.BreakerOpen < 0:
		return nil, rampart.NewConfigError("redislimit", field("BreakerOpen"), "must be positive, got %v", cfg.BreakerOpen)
	}
	s := &Semaphore{
		cfg: cfg, key: cfg.Prefix + "{" + cfg.Name + "}",
		maxArg:         strconv.Itoa(cfg.Max),
		ttlArg:         strconv.FormatInt(cfg.TTL.Microseconds(), 10),
		errTimeout:     fmt.Errorf("redislimit: no reply from redis within %v: %w", cfg.Timeout, context.DeadlineExceeded),
		errFull:        rampart.NewRejectedError("redislimit.semaphore", cfg.Name, ErrSemaphoreFull),
		errUnavailable: rampart.NewRejectedError("redislimit.semaphore", cfg.Name, ErrUnavailable),
		freed:          make(chan struct{}, 1),
		held:           map[*held]struct{}{},
		stop:           make(chan struct{}),
	}
	s.keys = []string{s.key}
	var err error
	if s.brk, err = newBreaker(cfg.Ticker, cfg.BreakerFailures, cfg.BreakerOpen); err != nil {
		return nil, err
	}
	if cfg.Failure == FailLocal {
		n := max(1, cfg.Max/cfg.Replicas)
		if s.local, err = bulkhead.New(bulkhead.Config{Max: n, Name: cfg.Name, Ticker: cfg.Ticker, Compact: true}); err != nil {
			return nil, err
		}
		s.localMax.Store(int64(n))
	}
	return s, nil
}

// Key returns the semaphore's Redis key, Prefix + "{" + Name + "}".
func (s *Semaphore) Key() string { return s.key }

// RejectedError returns the semaphore's preallocated rejection error, the
// one Acquire and AcquireWait return when Max leases are held. It matches
// [ErrSemaphoreFull] and rampart.ErrRejected.
func (s *Semaphore) RejectedError() error { return s.errFull }

// Acquire takes a permit if fewer than Max are held across all processes,
// in one round trip, and never waits. It returns the permit, to be given
// back with exactly one [Semaphore.Release]; or [Semaphore.RejectedError]
// when Max are held; or ctx's error when ctx ends first; or, when Redis
// cannot answer, what the Failure mode decides (a fallback permit, or with
// FailClosed an error matching ErrUnavailable and rampart.ErrRejected).
func (s *Semaphore) Acquire(ctx context.Context) (Permit, error) {
	p, n, fell, err := s.try(ctx)
	if fell {
		s.fallbacks.Add(1)
	}
	if err != nil && err != ErrClosed {
		s.refuse(err, n, 0)
	}
	return p, err
}

// AcquireWait is [Semaphore.Acquire] that, when Max permits are held,
// waits for one for at most SemaphoreConfig.MaxWait or until ctx ends: it tries
// again after a wait drawn below a bound that starts at PollMin and doubles
// up to PollMax, or at once when a Release in this process frees a permit.
// It returns the rejection error when MaxWait expires, ctx's error when
// ctx ends first, ErrClosed when [Semaphore.Close] ends the wait. Waiters
// are not served in order: across processes the first poll after a release
// wins.
//
// Polling rather than Redis pub/sub: a notification on release would need
// a connection held open per process, wake every waiter of every process
// for each release (a herd that one of them wins), and still never fire
// for a lease that expires (a holder killed): polling is needed anyway,
// and a local release, the common case of contention within one process,
// wakes a local waiter without Redis.
func (s *Semaphore) AcquireWait(ctx context.Context) (Permit, error) {
	p, n, fell, err := s.try(ctx)
	// Fallbacks counts acquires, not tries: the last try decided this one.
	defer func() {
		if fell {
			s.fallbacks.Add(1)
		}
	}()
	if err != s.errFull || s.cfg.MaxWait == 0 {
		if err != nil && err != ErrClosed {
			s.refuse(err, n, 0)
		}
		return p, err
	}
	start := s.cfg.Ticker.Now()
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	var timeout <-chan time.Time
	if s.cfg.MaxWait != math.MaxInt64 {
		t := time.NewTimer(s.cfg.MaxWait)
		defer t.Stop()
		timeout = t.C
	}
	bound := s.cfg.PollMin
	poll := time.NewTimer(jitter(bound))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.giveUp(ctx.Err(), n, start)
		case <-timeout:
			s.timedOut.Add(1)
			return s.giveUp(s.errFull, n, start)
		case <-s.stop: // Close: no permit will come
			return s.giveUp(ErrClosed, n, start)
		case <-poll.C:
			bound = nextPoll(bound, s.cfg.PollMax)
		case <-s.freed: // a permit came back in this process: try now
			poll.Stop()
			bound = s.cfg.PollMin
		}
		p, n, fell, err = s.try(ctx)
		if err == nil {
			return s.waitAdmitted(p, start)
		}
		if err != s.errFull {
			return s.giveUp(err, n, start)
		}
		poll.Reset(jitter(bound))
	}
}

// waitAdmitted counts a waiting acquire's permit and hands it to the
// caller. Until it returns, whatever ends the goroutine (a Ticker that
// panics, an OnWaitAdmit that calls runtime.Goexit: notifyListener
// recovers panics only) gives the permit back: the caller never got it,
// and the renewal goroutine would renew its lease for good. The bulkhead
// guards its own wait the same way.
func (s *Semaphore) waitAdmitted(p Permit, start int64) (Permit, error) {
	handed := false
	defer func() {
		if !handed {
			s.Release(p)
		}
	}()
	waited := s.cfg.Ticker.Now() - start
	s.waited.Add(1)
	s.waitNanos.Add(waited)
	if f := s.cfg.OnWaitAdmit; f != nil {
		notifyListener(&s.listenerPanics, f, time.Duration(waited))
	}
	handed = true
	return p, nil
}

// jitter is a wait drawn uniformly in [0, bound]: full jitter, so that
// waiters of many processes that found the semaphore full together do not
// poll together again.
func jitter(bound time.Duration) time.Duration {
	if bound == math.MaxInt64 { // bound+1 would wrap to MinInt64, which Int64N refuses
		return time.Duration(mrand.Int64N(math.MaxInt64))
	}
	return time.Duration(mrand.Int64N(int64(bound) + 1))
}

// nextPoll is the bound after bound: twice it, at most limit (>= bound),
// without overflowing for bounds past 2^62 ns.
func nextPoll(bound, limit time.Duration) time.Duration {
	if bound > limit/2 {
		return limit
	}
	return 2 * bound
}

// giveUp ends a wait that got no permit.
func (s *Semaphore) giveUp(err error, held, start int64) (Permit, error) {
	waited := s.cfg.Ticker.Now() - start
	s.waitNanos.Add(waited)
	if err != ErrClosed {
		s.refuse(err, held, time.Duration(waited))
	}
	return Permit{}, err
}

// try makes one acquire: a round trip, or the Failure mode when Redis
// cannot answer. It returns the permit (admitted and counted in flight),
// or the leases Redis reported held and the error: s.errFull when full, the
// others final; and whether the Failure mode decided. Refusals and
// fallbacks are counted by the caller, once per acquire.
func (s *Semaphore) try(ctx context.Context) (Permit, int64, bool, error) {
	if err := ctx.Err(); err != nil {
		return Permit{}, -1, false, err // the caller is gone: no round trip, nothing learnt about Redis
	}
	if s.closed.Load() {
		return Permit{}, -1, false, ErrClosed
	}
	tok := rand.Text() // 128 random bits: no other process or Acquire has this lease's token
	// state settles who owns the script's reply when the caller stops
	// waiting for it (Timeout, or its own context): 0 while the script
	// runs, acquireTaken once it returned in time, acquireAbandoned once
	// the caller gave up first, in which case the goroutine that ran it
	// gives back what Redis granted when the late reply comes.
	var state atomic.Int32
	vals, err := s.call(ctx, func(ctx context.Context) ([]int64, error) {
		v, err := semAcquireScript.Run(ctx, s.cfg.Client, s.keys, tok, s.maxArg, s.ttlArg).Int64Slice()
		if err == nil && len(v) != 2 {
			err = fmt.Errorf("redislimit: semaphore script returned %d values", len(v))
		}
		if !state.CompareAndSwap(0, acquireTaken) {
			s.lateAcquire(tok, v, err)
		}
		return v, err
	})
	if err != nil {
		if !errors.Is(err, errBreakerOpen) && !state.CompareAndSwap(0, acquireAbandoned) {
			// The script returned just after the caller stopped waiting:
			// its reply is lost here, so remove the token, granted or
			// not, with the next renewal call (else it expires in TTL).
			s.orphan(tok)
		}
		if ctx.Err() != nil {
			return Permit{}, -1, false, ctx.Err() // the caller's own cancellation or deadline
		}
		p, n, err := s.fallback()
		return p, n, true, err
	}
	s.roundTrips.Add(1)
	if vals[0] != 1 {
		return Permit{}, vals[1], false, s.errFull
	}
	h := &held{sem: s, token: tok}
	s.mu.Lock()
	if s.closed.Load() { // Close ran during the round trip: give the lease back
		s.orphans = append(s.orphans, tok)
		s.mu.Unlock()
		s.removeOrphans()
		return Permit{}, -1, false, ErrClosed
	}
	s.held[h] = struct{}{}
	if !s.renewing { // the first held lease starts the renewal goroutine
		s.renewing = true
		s.wg.Add(1)
		go s.renewLoop()
	}
	s.mu.Unlock()
	return s.admit(h), vals[1], false, nil
}

const (
	acquireTaken     = 1 // the acquire's caller took the script's reply
	acquireAbandoned = 2 // the caller gave up before the reply came
)

// lateAcquire gives back what a late acquire reply granted, on the
// goroutine that ran the script, after its caller gave up: the lease is
// removed right after Redis granted it (a removal sent when the caller gave
// up could reach Redis before the grant, with Redis stalled, and remove
// nothing). A call that failed may still run on Redis (a read that timed
// out in the client, say): its token is queued for the renewal goroutine,
// and the lease expires within TTL if that too comes first.
func (s *Semaphore) lateAcquire(tok string, v []int64, err error) {
	switch {
	case err != nil:
		s.orphan(tok)
	case v[0] == 1:
		if _, err := s.call(context.Background(), func(ctx context.Context) ([]int64, error) {
			return nil, s.cfg.Client.ZRem(ctx, s.key, tok).Err()
		}); err != nil {
			s.orphan(tok)
		}
	}
}

// admit counts a granted permit.
func (s *Semaphore) admit(h *held) Permit {
	s.admitted.Add(1)
	if n := s.inFlight.Add(1); n > s.peak.Load() {
		for old := s.peak.Load(); n > old && !s.peak.CompareAndSwap(old, n); old = s.peak.Load() {
		}
	}
	return Permit{h}
}

// refuse counts a refusal and calls the listener.
func (s *Semaphore) refuse(err error, held int64, waited time.Duration) {
	s.rejected.Add(1)
	if err != s.errFull && err != s.errUnavailable {
		s.canceled.Add(1) // ctx's error
	}
	if f := s.cfg.OnRejected; f != nil {
		notifyListener2(&s.listenerPanics, f, held, waited)
	}
}

// fallback applies the Failure mode after Redis could not answer.
func (s *Semaphore) fallback() (Permit, int64, error) {
	switch s.cfg.Failure {
	case FailClosed:
		return Permit{}, -1, s.errUnavailable
	case FailLocal:
		n := int64(max(1, s.cfg.Max/share(s.cfg.LiveReplicas, s.cfg.Replicas)))
		if n != s.localMax.Load() { // the live count changed: this replica's share too
			s.localMu.Lock()
			if n != s.localMax.Load() {
				_ = s.local.SetMax(int(n)) // n >= 1
				s.localMax.Store(n)
			}
			s.localMu.Unlock()
		}
		if s.local.Acquire() != nil {
			return Permit{}, s.local.Stats().InFlight, s.errFull
		}
		return s.admit(&held{sem: s, kind: kindLocal}), -1, nil
	default:
		return s.admit(&held{sem: s, kind: kindOpen}), -1, nil
	}
}

// direct makes one Redis call within Timeout without the breaker: Close's
// removal of the leases, made once, whatever the breaker's state.
func (s *Semaphore) direct(f func(context.Context) ([]int64, error)) ([]int64, error) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), s.cfg.Timeout, s.errTimeout)
	defer cancel()
	vals, err := within(ctx, f)
	if err != nil {
		s.redisErrors.Add(1)
		if f := s.cfg.OnRedisError; f != nil {
			notifyListener(&s.listenerPanics, f, err)
		}
	}
	return vals, err
}

// call makes one Redis call through the breaker, within Timeout.
func (s *Semaphore) call(ctx context.Context, f func(context.Context) ([]int64, error)) ([]int64, error) {
	now := s.cfg.Ticker.Now() // the breaker's open state is judged against it
	permit, ok := s.brk.acquire(now)
	if !ok {
		return nil, errBreakerOpen
	}
	parent := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, s.cfg.Timeout, s.errTimeout)
	defer cancel()
	// A panic in the client, re-raised by within, must still give the
	// breaker's permit back (in half-open it is the one probe).
	returned := false
	defer func() {
		if !returned {
			s.brk.record(permit, s.cfg.Ticker.Now(), false)
		}
	}()
	var vals []int64
	var err error
	if ownDeadlineFirst(parent, ctx) {
		// A caller's deadline before Timeout's says nothing about Redis:
		// the call is judged by Timeout alone (see withinOwnDeadline), as
		// the Limiter's is.
		cmd, cancelCmd := context.WithTimeoutCause(context.WithoutCancel(parent), s.cfg.Timeout, s.errTimeout)
		var left bool
		vals, err, left = withinOwnDeadline(parent, cmd, cancelCmd, f, func(err error) { s.settle(permit, now, err) })
		if left {
			returned = true
			if errors.Is(parent.Err(), context.Canceled) { // err is the cause, maybe the caller's own
				s.brk.cb.ReleaseAt(permit, s.cfg.Ticker.Now(), rampart.Ignored)
			}
			return nil, err
		}
	} else {
		vals, err = within(ctx, f)
	}
	returned = true
	if err != nil && parent.Err() != nil {
		// The caller cancelled mid-call: not a Redis failure.
		s.brk.cb.ReleaseAt(permit, s.cfg.Ticker.Now(), rampart.Ignored)
		return nil, err
	}
	if !s.settle(permit, now, err) {
		return nil, err
	}
	return vals, nil
}

// settle records a call's outcome with the breaker and the counters, and
// reports whether it succeeded.
func (s *Semaphore) settle(permit circuitbreaker.Permit, start int64, err error) bool {
	if err != nil {
		s.redisErrors.Add(1)
		s.brk.record(permit, s.cfg.Ticker.Now(), false)
		if f := s.cfg.OnRedisError; f != nil {
			notifyListener(&s.listenerPanics, f, err)
		}
		return false
	}
	s.brk.record(permit, start, true)
	return true
}

// Release gives back a permit taken by Acquire or AcquireWait: for a lease,
// one ZREM within Timeout (if it fails, the next renewal removes the
// lease, and otherwise it expires within TTL, since nobody renews it any
// more); for a fallback permit, no round trip. Releasing the zero Permit,
// or a permit a second time, does nothing: a token is released by its
// holder once. Releasing a permit of another Semaphore is a programming
// error that would leave that one's lease renewed for good: it panics.
func (s *Semaphore) Release(p Permit) {
	h := p.h
	if h == nil {
		return
	}
	if h.sem != s {
		panic("redislimit: Release on semaphore " + strconv.Quote(s.cfg.Name) +
			" of a Permit of semaphore " + strconv.Quote(h.sem.cfg.Name))
	}
	if !h.released.CompareAndSwap(false, true) {
		return
	}
	s.inFlight.Add(-1)
	switch h.kind {
	case kindLocal:
		s.local.Release()
	case kindLease:
		s.mu.Lock()
		_, ok := s.held[h] // not when a renewal found it expired, or Close removed it
		delete(s.held, h)
		s.mu.Unlock()
		if ok {
			_, err := s.call(context.Background(), func(ctx context.Context) ([]int64, error) {
				_, err := s.cfg.Client.ZRem(ctx, s.key, h.token).Result()
				return nil, err
			})
			if err != nil {
				s.orphan(h.token)
			} else {
				s.roundTrips.Add(1)
			}
		}
	}
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// orphan queues a token for removal by the next renewal call, and starts
// the renewal goroutine if none runs.
func (s *Semaphore) orphan(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || len(s.orphans) >= maxOrphans {
		return // the lease, if any, expires within TTL
	}
	s.orphans = append(s.orphans, tok)
	if !s.renewing {
		s.renewing = true
		s.wg.Add(1)
		go s.renewLoop()
	}
}

// renewLoop is the renewal goroutine: one per Semaphore, running while
// this process holds a lease or has tokens to remove.
//
// A listener it calls (OnExpired, OnRedisError) may end it with
// runtime.Goexit (notifyListener recovers panics only): it then starts its
// successor, or every lease held would expire while its call runs, with
// renewing still set and no goroutine renewing.
func (s *Semaphore) renewLoop() {
	defer s.wg.Done()
	ended := false // by Close or by renewOnce: anything else is a listener's Goexit
	defer func() {
		if ended {
			return
		}
		// Before wg.Done: Close's Wait counts the successor, which sees
		// stop closed if Close came first.
		s.mu.Lock()
		s.renewing = false
		if !s.closed.Load() && (len(s.held) > 0 || len(s.orphans) > 0) {
			s.renewing = true
			s.wg.Add(1)
			go s.renewLoop()
		}
		s.mu.Unlock()
	}()
	t := time.NewTicker(s.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			ended = true
			return
		case <-t.C:
		}
		if !s.renewOnce() {
			ended = true
			return
		}
	}
}

// renewOnce renews every lease this process holds and removes the queued
// tokens, one script call per maxRenewBatch tokens. It returns false, having
// marked the renewal goroutine stopped, when there is nothing to do.
func (s *Semaphore) renewOnce() bool {
	s.mu.Lock()
	if len(s.held) == 0 && len(s.orphans) == 0 {
		s.renewing = false
		s.mu.Unlock()
		return false
	}
	batch := make([]*held, 0, len(s.held))
	for h := range s.held {
		batch = append(batch, h)
	}
	orphans := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	expired := 0
	for len(batch) > 0 || len(orphans) > 0 {
		nb := min(len(batch), maxRenewBatch)
		no := min(len(orphans), maxRenewBatch-nb)
		lost, err := s.renewInBackground(batch[:nb], orphans[:no])
		if err != nil {
			s.mu.Lock()
			if len(s.orphans) < maxOrphans {
				s.orphans = append(s.orphans, orphans[:min(no, maxOrphans-len(s.orphans))]...)
			}
			s.mu.Unlock()
		} else if len(lost) > 0 {
			n := 0
			s.mu.Lock()
			for _, i := range lost {
				if i >= 1 && int(i) <= nb {
					if _, ok := s.held[batch[i-1]]; ok {
						delete(s.held, batch[i-1])
						n++
					}
				}
			}
			s.mu.Unlock()
			s.expired.Add(uint64(n))
			expired += n
		}
		batch, orphans = batch[nb:], orphans[no:]
	}
	// Once, after every batch: a listener that ends the goroutine loses
	// none of the batches' work.
	if f := s.cfg.OnExpired; f != nil && expired > 0 {
		notifyListener(&s.listenerPanics, f, expired)
	}
	return true
}

// renew makes one renewal script call, through the breaker unless closing.
// A renewal the breaker refuses (open, or its one half-open probe taken by
// an acquire) is sent past it: the breaker spares callers a wait on a
// failing Redis, a renewal has no caller, and renewals skipped for TTL -
// RenewEvery would lose every lease while its call runs (another process
// then gets the permits: Max exceeded), Redis healthy or not.
func (s *Semaphore) renew(renew []*held, remove []string, closing bool) ([]int64, error) {
	args := make([]any, 0, 2+len(renew)+len(remove))
	args = append(args, s.ttlArg, len(renew))
	for _, h := range renew {
		args = append(args, h.token)
	}
	for _, t := range remove {
		args = append(args, t)
	}
	run := func(ctx context.Context) ([]int64, error) {
		return semRenewScript.Run(ctx, s.cfg.Client, s.keys, args...).Int64Slice()
	}
	var lost []int64
	var err error
	if closing {
		lost, err = s.direct(run)
	} else if lost, err = s.call(context.Background(), run); errors.Is(err, errBreakerOpen) {
		lost, err = s.direct(run)
	}
	if err == nil {
		s.renewals.Add(1)
	}
	return lost, err
}

// renewInBackground is renew on the renewal goroutine, where a panic of
// the client (a hook, say) that within re-raises reaches no caller: it is a
// failed renewal, counted in RedisErrors and passed to OnRedisError (call
// has given the breaker's permit back as a failure), not a crash of the
// process.
func (s *Semaphore) renewInBackground(renew []*held, remove []string) (lost []int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			lost, err = nil, fmt.Errorf("redislimit: redis client panicked: %v", p)
			s.redisErrors.Add(1)
			if f := s.cfg.OnRedisError; f != nil {
				notifyListener(&s.listenerPanics, f, err)
			}
		}
	}()
	return s.renew(renew, remove, false)
}

// removeOrphans removes the queued tokens now, in renewal calls that renew
// nothing, past the breaker (after Close).
func (s *Semaphore) removeOrphans() error {
	s.mu.Lock()
	orphans := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	var first error
	for len(orphans) > 0 {
		n := min(len(orphans), maxRenewBatch)
		if _, err := s.renew(nil, orphans[:n], true); err != nil && first == nil {
			first = err
		}
		orphans = orphans[n:]
	}
	return first
}

// Close stops the renewal goroutine and removes every lease this process
// holds (one script call per 1,024 leases, within Timeout each; a lease it
// could not remove expires within TTL). Calls still running under those
// permits are no longer counted: close after they finish. Their Release
// then makes no round trip. Waits under way in AcquireWait end with
// ErrClosed at once, and Acquire after Close returns ErrClosed. Close
// returns the removal's error and is idempotent.
func (s *Semaphore) Close() error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	close(s.stop)
	for h := range s.held {
		s.orphans = append(s.orphans, h.token)
	}
	clear(s.held)
	s.mu.Unlock()
	s.wg.Wait()
	return s.removeOrphans()
}

// Stats returns a snapshot of the counters. The fields are read one by one,
// so they are not one atomic snapshot.
func (s *Semaphore) Stats() SemaphoreStats {
	return SemaphoreStats{
		Max:            int64(s.cfg.Max),
		InFlight:       s.inFlight.Load(),
		PeakInFlight:   s.peak.Load(),
		Waiting:        s.waiting.Load(),
		Admitted:       s.admitted.Load(),
		Rejected:       s.rejected.Load(),
		TimedOut:       s.timedOut.Load(),
		Canceled:       s.canceled.Load(),
		Waited:         s.waited.Load(),
		WaitTime:       time.Duration(s.waitNanos.Load()),
		Expired:        s.expired.Load(),
		RoundTrips:     s.roundTrips.Load(),
		Renewals:       s.renewals.Load(),
		RedisErrors:    s.redisErrors.Load(),
		Fallbacks:      s.fallbacks.Load(),
		BreakerOpen:    s.brk.open(),
		ListenerPanics: s.listenerPanics.Load(),
	}
}

// Do runs fn under a permit: AcquireWait (waiting if MaxWait is set), fn,
// Release. It returns AcquireWait's error without calling fn when refused,
// and otherwise fn's error unchanged. The permit is released on every path
// out of fn, a panic (re-raised) and runtime.Goexit included.
func (s *Semaphore) Do(ctx context.Context, fn func(context.Context) error) error {
	p, err := s.AcquireWait(ctx)
	if err != nil {
		return err
	}
	defer s.Release(p)
	return fn(ctx)
}

// Call is [Semaphore.Do] for a function with a typed result. When
// refused it returns the zero T and AcquireWait's error.
func Call[T any](ctx context.Context, s *Semaphore, fn func(context.Context) (T, error)) (T, error) {
	p, err := s.AcquireWait(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer s.Release(p)
	return fn(ctx)
}
