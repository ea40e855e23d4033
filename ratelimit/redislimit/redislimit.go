// Package redislimit holds limits across processes on Redis: a rate limiter
// ([Limiter]: GCRA run as one Lua script, with Redis' own clock, one round
// trip per decision, and an optional local lease that keeps most calls off
// the network), a concurrency limit ([Semaphore]: at most Max calls in
// flight across every process, each permit a lease that its process renews
// and that a dead process's permits lose within one TTL), and a live count
// of the processes ([Replicas]) that both use to share a limit among the
// replicas still alive while Redis is unreachable.
//
// Build a [Limiter] with [New] (a go-redis client and a default [Limit] in
// its [Config]) and ask [Limiter.Allow] with the caller's key before each
// call; [Limiter.AllowN] takes n events, and [Limiter.AllowLimitN] applies
// another limit to a key. The [Decision] says whether the call is admitted,
// how long until it would be, and where the answer came from. Build a
// [Semaphore] with [NewSemaphore] and run calls through [Semaphore.Do] or
// [Call], as with a bulkhead.
//
// It is its own module (github.com/rampart-go/rampart/ratelimit/redislimit)
// so that the core rampart module gains no dependency on go-redis. The
// Semaphore and Replicas live in this package rather than in one of their
// own because they share its failure modes, its breaker in front of Redis,
// its bound on every call's time and its error sentinels, and because the
// Limiter's fallback uses the Replicas count.
//
// # Semantics
//
// Each key is a GCRA cell exactly like the in-process ratelimit.Limiter: a
// limit of Rate events per Period with a Burst admits at most
// Burst + Rate·T/Period events in any window of length T, across every
// process that shares the key. Times come from the Redis server's TIME, so
// replicas' clocks do not matter. A decision is one EVALSHA (the script is
// loaded again on NOSCRIPT). Keys are Prefix + "{" + key + "}": the hash tag
// keeps each limit's key in one Cluster slot. An idle key expires exactly when
// its state becomes identical to a missing key, so nothing is lost.
//
// # Lease mode
//
// With Config.Lease = L > 0, a process takes up to L events of a key's
// capacity in one round trip and spends them locally (one atomic CAS per
// call), asking Redis again only when its lease is spent or older than
// LeaseTTL (callers that find the lease empty while another is refilling it
// wait for that one round trip rather than making their own, and if it fails
// they take the Failure mode's decision with its error, so none waits longer
// than one Timeout for Redis). Leased events count against the shared limit
// when they are taken, not when they are spent, so the bound above shifts by
// at most one LeaseTTL: any window of length T admits at most
// Burst + Rate·(T + LeaseTTL)/Period events across all replicas. Events left in an
// expired lease are dropped, never returned: leases can only under-admit, by
// at most L per replica per LeaseTTL.
//
// # Failures
//
// Every Redis call runs under Config.Timeout, whatever the client's own
// timeouts: the caller gets its decision when Redis has not answered within
// Timeout even with go-redis' default options, which ignore context
// deadlines on socket reads (Options.ContextTimeoutEnabled false). A call
// the client does not abandon at the deadline finishes in the background
// within the client's ReadTimeout and its reply is dropped; events it took
// in Redis are not spent (under-admission, never over-admission). A rampart
// circuit breaker sits in front of Redis: after consecutive failures it
// opens, and while it is open a decision costs no network call. A caller's
// own cancellation is not held against Redis, nor is its own deadline: a
// caller whose deadline comes before Timeout's gets its context's error at
// that deadline (and the Failure mode's decision), while the call it
// started is judged by Timeout alone, on a goroutine of its own: a Redis
// slower than the caller's budget but within Timeout is not a failure, and
// one that does not answer within Timeout is, every caller short of time or
// not. When Redis cannot answer, the Failure mode decides: FailOpen admits, FailClosed
// rejects (with ErrUnavailable), FailLocal admits through an in-process
// limiter with this replica's share of the limit (Limit / Replicas, or
// divided by the live count of Config.LiveReplicas: see Replicas).
//
// # Semaphore
//
// A [Semaphore] is the distributed counterpart of package bulkhead: at
// most SemaphoreConfig.Max permits held at once across every process that
// builds one with the same Client, Prefix and Name. Its state is one Redis
// sorted set of leases, each member a random token (crypto/rand, 128 bits)
// scored by its expiry on Redis' TIME:
//
//   - [Semaphore.Acquire] is one script call: remove the expired leases,
//     count the rest, and add this token with expiry now + TTL if fewer than
//     Max remain. A token is added once (a retried call finds it and is
//     granted again, not counted twice), and an expired lease is gone
//     whether or not anyone purged it, so the set never holds more than Max
//     live leases and a count never includes a dead holder's.
//   - [Semaphore.Release] is one ZREM of the holder's own token: nobody
//     can release a lease it does not hold. Releasing a Permit twice, or
//     the zero Permit, does nothing.
//   - While a process holds leases, one goroutine per Semaphore renews all
//     of them every RenewEvery with one script call per 1,024 leases (it
//     starts with the first held permit and stops when none is held, or at
//     Close). Renewal extends only leases still present: one that expired
//     (a renewal late by more than TTL - RenewEvery) is never revived, since
//     another process may hold its place; it is counted in
//     SemaphoreStats.Expired and reported to OnExpired, and its call runs on
//     uncounted. A process that dies (kill -9) stops renewing: its permits
//     return within TTL of its last renewal, at most TTL after its death.
//
// [Semaphore.AcquireWait] (and Do and Call with MaxWait set) waits for a
// permit by polling: after a refusal it tries again after a wait drawn
// uniformly below a bound that starts at PollMin and doubles up to PollMax
// (full jitter), and at once when a Release in this process frees a permit.
// Pub/sub notification on release was not chosen: it needs a connection
// held per process, wakes every waiter of every process on each release
// (one of them wins), and cannot fire for a lease that expires, so polling
// would be needed beside it anyway. Waiters are not served in FIFO order.
//
// Failures are handled as the Limiter's are: every call (acquire, release,
// renewal) runs under SemaphoreConfig.Timeout whatever the client's
// options, behind the same kind of breaker, and when Redis cannot answer an
// acquire the Failure mode decides: FailOpen admits (no permit is held),
// FailClosed refuses with an error matching ErrUnavailable and
// rampart.ErrRejected, FailLocal admits through a local bulkhead of
// max(1, Max / replicas) permits, where replicas is the live count of
// SemaphoreConfig.LiveReplicas or the static Replicas. A caller whose own
// context ends mid-call gets ctx's error, and Redis is judged as the
// Limiter's calls are (a cancellation counts for nothing, a call cut short
// by the caller's deadline by Timeout). A renewal the breaker refuses is
// sent past it: it has no caller to spare a wait, and renewals skipped for
// TTL - RenewEvery would lose every lease held. An acquire that timed out may still be granted once Redis
// answers: the late reply's lease is removed as soon as it arrives (if no
// reply comes, by the next renewal call; at worst it expires within TTL),
// and a lease whose release failed is removed by the next renewal call.
//
// A Semaphore is usable beside a local bulkhead.Bulkhead: the local cap
// first (this process's share of the dependency's connections, say), then
// the shared one. A pipeline's Bulkhead field takes a *bulkhead.Bulkhead
// only, so put the Semaphore in the function the pipeline runs, and keep
// the breaker from counting its rejections as the dependency's failures:
//
//	cb, _ := circuitbreaker.New(circuitbreaker.Config{Classify: func(err error) rampart.Result {
//		if errors.Is(err, rampart.ErrRejected) { // the shared semaphore refused: not the dependency's failure
//			return rampart.Ignored
//		}
//		return circuitbreaker.DefaultClassify(err)
//	}})
//	p, _ := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: local, Timeout: to})
//	err := p.Do(ctx, func(ctx context.Context) error {
//		return sem.Do(ctx, query) // per attempt, inside the local bulkhead's permit
//	})
//
// # Replicas
//
// A [Replicas] counts the live processes of a group: each heartbeats its ID
// into a sorted set scored by expiry (Redis' TIME + TTL) every Every, and
// the reply is the number of members not expired. [Replicas.Count] returns
// the last reply with one atomic load. Given to Config.LiveReplicas or
// SemaphoreConfig.LiveReplicas, it replaces the static Replicas in
// FailLocal's share: a limit divided among the replicas alive when Redis
// was last reachable, which is what every replica knows when Redis goes
// away. Until its first heartbeat is answered the static Replicas is used.
//
// # Keys and Redis Cluster
//
// Every key carries a hash tag, so that everything one script touches is in
// one Cluster slot: a Limiter's key is Prefix + "{" + key + "}" (default
// prefix "rampart:rl:"), a Semaphore's single key Prefix + "{" + Name + "}"
// (default "rampart:sem:"; all its state, one sorted set), a Replicas
// group's Prefix + "{" + Name + "}" (default "rampart:replicas:"). Each key
// expires with its latest member, so idle ones vanish.
//
// # Zero value and concurrency
//
// The zero Limiter, Semaphore and Replicas are not usable: build them with
// New, NewSemaphore and NewReplicas, which return a *rampart.ConfigError for
// an invalid configuration. They are safe for concurrent use; one Limiter
// per process serves every key.
package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
)

// ErrUnavailable is returned, wrapping the cause, when Redis cannot decide
// and the Failure mode is FailClosed.
var ErrUnavailable = errors.New("redislimit: redis unavailable")

// ErrExceedsBurst is returned when n is larger than the burst: such a request
// can never be admitted.
var ErrExceedsBurst = errors.New("redislimit: n exceeds the burst")

// FailureMode is what a decision does when Redis cannot answer.
type FailureMode uint8

const (
	// FailOpen admits every call while Redis is unavailable (the default):
	// the limit is not enforced, but the service keeps serving.
	FailOpen FailureMode = iota
	// FailClosed rejects every call while Redis is unavailable, with an
	// error matching ErrUnavailable.
	FailClosed
	// FailLocal admits through an in-process GCRA per key with this
	// replica's share of the limit: Rate/Replicas per Period, burst
	// max(1, Burst/Replicas).
	FailLocal
)

// Source tells where a decision was made.
type Source uint8

const (
	SourceRedis    Source = iota // a round trip to Redis decided
	SourceLease                  // a local lease decided, no round trip
	SourceFallback               // Redis was unavailable; the Failure mode decided
)

// Limit is Rate events per Period with a burst of Burst.
//
// The script counts in Lua numbers, which are doubles (53-bit significand),
// so a limit is bounded by what it can count exactly: Burst is at most 2^32,
// and a full burst must come back within 2^52 µs (about 142 years):
// Burst·Period/Rate <= 2^52 µs. With FailLocal, the in-process share of a
// limit (Rate per Period·Replicas, burst max(1, Burst/Replicas)) must also be
// one a ratelimit.Limiter accepts: the share's burst times its interval
// Period·Replicas/Rate at most 2^60 ns (about 36 years), and that interval,
// as a fraction of nanoseconds in lowest terms, with a numerator of at most
// 2^61. New and AllowLimitN refuse larger limits with a
// *rampart.ConfigError.
type Limit struct {
	Rate   int           // events per Period, >= 1
	Period time.Duration // default one second
	Burst  int           // events admitted at once, default 1, at most 2^32
}

// maxBurst bounds Limit.Burst. The script keeps a key's TAT relative to the
// current microsecond, up to Burst emission intervals ahead of it, in a
// double: each decision rounds it by up to 2^-53 of its magnitude, that is by
// up to Burst·2^-53 of an interval, and the interval it adds vanishes
// altogether near Burst = 2^53 (at 2^48 such rounding already admitted 1 %
// more than the rate on a fixed arrival sequence, at 2^53 several times it).
// 2^32 keeps the rounding below 2^-21 of an interval per decision (and
// below the script's own 1 ns storage resolution for intervals up to 1 ms),
// and every count (burst, granted, remaining) an exact integer.
const maxBurst = 1 << 32

// maxTolerance bounds Burst·Period/Rate, the time a full burst takes to come
// back: the script writes the TAT as an integer count of microseconds since
// 1970 plus the tolerance, which a double holds exactly below 2^53 µs; with
// the tolerance at most 2^52 µs that holds until 2112. It also keeps
// RetryAfter (at most the tolerance) and the key's TTL far from overflowing
// an int64 of nanoseconds.
const maxTolerance = time.Duration(1<<52) * time.Microsecond

// normalize fills lim's defaults and validates it; with share >= 1 (the
// Replicas of a FailLocal limiter, else 0) also the local share that
// FailLocal builds from it while Redis is unavailable, so that a limit the
// fallback could not apply is refused up front rather than when Redis is
// down.
func (lim Limit) normalize(share int) (Limit, error) {
	if lim.Period == 0 {
		lim.Period = time.Second
	}
	if lim.Burst == 0 {
		lim.Burst = 1
	}
	switch {
	case lim.Rate < 1:
		return lim, rampart.NewConfigError("redislimit", "Limit.Rate", "must be at least 1, got %d", lim.Rate)
	case lim.Period < 0:
		return lim, rampart.NewConfigError("redislimit", "Limit.Period", "must be positive, got %v", lim.Period)
	case lim.Burst < 1:
		return lim, rampart.NewConfigError("redislimit", "Limit.Burst", "must be at least 1, got %d", lim.Burst)
	case float64(lim.Period)/1e3/float64(lim.Rate) < 1e-3:
		return lim, rampart.NewConfigError("redislimit", "Limit",
			"%d per %v is finer than the script's resolution of 1 ns per event", lim.Rate, lim.Period)
	case int64(lim.Burst) > maxBurst:
		return lim, rampart.NewConfigError("redislimit", "Limit.Burst",
			"must be at most %d (2^32, what the script's doubles count exactly), got %d", int64(maxBurst), lim.Burst)
	case float64(lim.Burst)*float64(lim.Period)/float64(lim.Rate) > float64(maxTolerance):
		return lim, rampart.NewConfigError("redislimit", "Limit",
			"Burst·Period/Rate, the time a burst of %d at %d per %v takes to come back, exceeds 2^52 µs (%v)", lim.Burst, lim.Rate, lim.Period, maxTolerance)
	}
	if share >= 1 {
		if err := checkShare(lim, share); err != nil {
			return lim, err
		}
	}
	return lim, nil
}

func (lim Limit) intervalMicros() float64 { return float64(lim.Period) / 1e3 / float64(lim.Rate) }

// Config configures a Limiter. Zero fields mean the documented defaults.
type Config struct {
	// Client is the Redis client: a single node, Sentinel or Cluster
	// client. Required.
	Client redis.UniversalClient
	// Limit is the default limit of every key (AllowLimitN overrides it per
	// call). Required: Rate >= 1.
	Limit Limit
	// Prefix starts every Redis key. Default "rampart:rl:".
	Prefix string
	// Timeout bounds every Redis call: a decision that Redis has not
	// answered within Timeout is made by the Failure mode, whatever the
	// client's own timeouts (go-redis ignores context deadlines on socket
	// reads unless Options.ContextTimeoutEnabled is set; the Limiter does not
	// rely on it). It also judges Redis for the breaker: a call whose
	// caller's deadline comes first returns at that deadline, and counts as
	// a failure only if Redis has not answered within Timeout. Default
	// 100 ms.
	Timeout time.Duration
	// Failure is what a decision does when Redis cannot answer. Default
	// FailOpen.
	Failure FailureMode
	// Replicas is the number of processes sharing the limit, for FailLocal's
	// share when LiveReplicas is nil or has not answered yet. Default 1.
	Replicas int
	// LiveReplicas, when set, gives FailLocal's share as the limit divided
	// by its live count (the last heartbeat's answer, see [Replicas])
	// instead of by Replicas. A live count whose share the in-process
	// limiter cannot hold (see [Limit]) falls back to Replicas' share.
	LiveReplicas *Replicas
	// Lease, when > 0, is how many events a process takes from a key per
	// round trip and spends locally. It must not exceed the burst. Default 0
	// (every decision is a round trip).
	Lease int
	// LeaseTTL is how long a lease may be spent. Default 50 ms.
	LeaseTTL time.Duration
	// BreakerFailures is how many consecutive Redis failures open the
	// breaker in front of Redis. Default 5.
	BreakerFailures int
	// BreakerOpen is how long the breaker stays open before a probe.
	// Default 1 s.
	BreakerOpen time.Duration
	// Ticker is the local clock for leases and the breaker. Default
	// rampart.DefaultTicker().
	Ticker rampart.Ticker
	// OnRedisError, if set, is called with every error from Redis (a
	// panicking listener is recovered and counted), on the caller's
	// goroutine, or, for a call its caller left at its own deadline, on the
	// goroutine that waited for the reply.
	OnRedisError func(err error)
}

// Decision is a decision.
type Decision struct {
	Allowed    bool          // whether the n events were admitted
	RetryAfter time.Duration // when rejected: the wait until n could be admitted
	Remaining  int           // events that could still be admitted at once (-1: unknown)
	Source     Source        // who decided
}

// Stats is a snapshot of a Limiter's counters.
type Stats struct {
	Admitted, Rejected    uint64 // decisions
	RoundTrips            uint64 // script runs that reached Redis
	LeaseHits             uint64 // decisions served by a local lease
	RedisErrors           uint64 // failed Redis calls (timeouts, connection errors)
	Fallbacks             uint64 // decisions made by the Failure mode
	BreakerOpen           bool   // whether the breaker in front of Redis is open now
	ListenerPanics        uint64 // listener panics recovered
	Leases, LeaseEventsIn uint64 // leases taken and events they carried
}

// Limiter decides admissions against limits kept in Redis. Create it with
// [New] and call [Limiter.Allow] (or [Limiter.AllowN], [Limiter.AllowLimitN])
// with the caller's key before each call.
//
// A decision is one Lua script on Redis, or one CAS on a local lease in
// lease mode (see the package documentation). The zero Limiter is not
// usable. A Limiter is safe for concurrent use.
type Limiter struct {
	cfg      Config
	interval float64 // default limit's emission interval, microseconds
	burstArg string
	ivArg    string

	// errTimeout is the error of a call Redis did not answer within
	// Timeout; built once, it matches context.DeadlineExceeded.
	errTimeout error

	brk    *breaker
	leases sync.Map // full key -> *lease
	// leaseKeys counts the entries added to leases since it was last
	// emptied (see maxLeaseKeys).
	leaseKeys atomic.Int64
	local     *localLimits
	share     int // Replicas with FailLocal, else 0: normalize's share
	leaseNs   int64

	allowed, rejected, roundTrips, leaseHits atomic.Uint64
	redisErrors, fallbacks, listenerPanics   atomic.Uint64
	leasesTaken, leaseEvents                 atomic.Uint64
}

// New validates cfg and returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	if cfg.Client == nil {
		return nil, rampart.NewConfigError("redislimit", "Client", "is required")
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	share := 0
	if cfg.Failure == FailLocal && cfg.Replicas >= 1 { // else refused below
		share = cfg.Replicas
	}
	lim, err := cfg.Limit.normalize(share)
	if err != nil {
		return nil, err
	}
	cfg.Limit = lim
	if cfg.Prefix == "" {
		cfg.Prefix = "rampart:rl:"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 100 * time.Millisecond
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 50 * time.Millisecond
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
	switch {
	case cfg.Timeout < 0:
		return nil, rampart.NewConfigError("redislimit", "Timeout", "must be positive, got %v", cfg.Timeout)
	case cfg.Failure > FailLocal:
		return nil, rampart.NewConfigError("redislimit", "Failure", "unknown mode %d", cfg.Failure)
	case cfg.Replicas < 1:
		return nil, rampart.NewConfigError("redislimit", "Replicas", "must be at least 1, got %d", cfg.Replicas)
	case cfg.Lease < 0 || cfg.Lease > lim.Burst:
		return nil, rampart.NewConfigError("redislimit", "Lease", "must be between 0 and the burst %d, got %d", lim.Burst, cfg.Lease)
	case cfg.LeaseTTL < 0:
		return nil, rampart.NewConfigError("redislimit", "LeaseTTL", "must be positive, got %v", cfg.LeaseTTL)
	case cfg.BreakerFailures < 0:
		return nil, rampart.NewConfigError("redislimit", "BreakerFailures", "must be at least 1, got %d", cfg.BreakerFailures)
	case cfg.BreakerOpen < 0:
		return nil, rampart.NewConfigError("redislimit", "BreakerOpen", "must be positive, got %v", cfg.BreakerOpen)
	}
	l := &Limiter{cfg: cfg, interval: lim.intervalMicros(), share: share, leaseNs: int64(cfg.LeaseTTL),
		errTimeout: fmt.Errorf("redislimit: no reply from redis within %v: %w", cfg.Timeout, context.DeadlineExceeded)}
	l.ivArg = strconv.FormatFloat(l.interval, 'f', -1, 64)
	l.burstArg = strconv.Itoa(lim.Burst)
	l.brk, err = newBreaker(cfg.Ticker, cfg.BreakerFailures, cfg.BreakerOpen)
	if err != nil {
		return nil, err
	}
	if cfg.Failure == FailLocal {
		l.local = newLocalLimits(cfg)
	}
	return l, nil
}

// Allow decides one event for key under the default limit.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides n events for key under the default limit, using a local
// lease when Lease mode is on.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if n < 1 {
		return Decision{}, fmt.Errorf("redislimit: n must be at least 1, got %d", n)
	}
	if n > l.cfg.Limit.Burst {
		return Decision{Remaining: -1}, ErrExceedsBurst
	}
	full := l.cfg.Prefix + "{" + key + "}"
	if l.cfg.Lease > 0 {
		return l.allowLeased(ctx, key, full, n)
	}
	return l.decide(ctx, key, full, l.ivArg, l.burstArg, n, n, l.cfg.Limit)
}

// AllowLimitN decides n events for key under lim instead of the default
// limit (per-client tiers, say). It always makes a round trip. Keys used with
// different limits must differ. A limit New would refuse (see [Limit]; with
// FailLocal, its share too) is refused with a *rampart.ConfigError.
func (l *Limiter) AllowLimitN(ctx context.Context, key string, lim Limit, n int) (Decision, error) {
	lim, err := lim.normalize(l.share)
	if err != nil {
		return Decision{}, err
	}
	if n < 1 {
		return Decision{}, fmt.Errorf("redislimit: n must be at least 1, got %d", n)
	}
	if n > lim.Burst {
		return Decision{Remaining: -1}, ErrExceedsBurst
	}
	iv := strconv.FormatFloat(lim.intervalMicros(), 'f', -1, 64)
	return l.decide(ctx, key, l.cfg.Prefix+"{"+key+"}", iv, strconv.Itoa(lim.Burst), n, n, lim)
}

// decide runs the script for [need, want] events, or the failure mode.
func (l *Limiter) decide(ctx context.Context, key, full, iv, burst string, want, need int, lim Limit) (Decision, error) {
	granted, res, err := l.run(ctx, full, iv, burst, want, need)
	if err != nil {
		return l.fallback(key, need, lim, err)
	}
	_ = granted
	l.count(res.Allowed)
	return res, nil
}

// run makes the round trip through the breaker. It returns how many events
// were granted.
func (l *Limiter) run(ctx context.Context, full, iv, burst string, want, need int) (int, Decision, error) {
	if err := ctx.Err(); err != nil {
		return 0, Decision{}, err // the caller is gone: no round trip, nothing learnt about Redis
	}
	now := l.cfg.Ticker.Now() // the breaker's open state is judged against it
	permit, ok := l.brk.acquire(now)
	if !ok {
		return 0, Decision{}, errBreakerOpen
	}
	parent := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, l.cfg.Timeout, l.errTimeout)
	defer cancel()
	// A panic in the client (a hook, say), re-raised here by roundTrip,
	// must still give the breaker's permit back: in half-open it is the one
	// probe, and a lost probe would keep the breaker half-open for good.
	returned := false
	defer func() {
		if !returned {
			l.brk.record(permit, l.cfg.Ticker.Now(), false)
		}
	}()
	var vals []int64
	var err error
	if ownDeadlineFirst(parent, ctx) {
		// A caller's deadline before Timeout's says nothing about Redis:
		// the round trip is judged by Timeout alone (see withinOwnDeadline).
		cmd, cancelCmd := context.WithTimeoutCause(context.WithoutCancel(parent), l.cfg.Timeout, l.errTimeout)
		var left bool
		vals, err, left = withinOwnDeadline(parent, cmd, cancelCmd, func(ctx context.Context) ([]int64, error) {
			return l.script(ctx, full, iv, burst, want, need)
		}, func(err error) { l.settle(permit, now, err) })
		if left {
			returned = true
			if errors.Is(parent.Err(), context.Canceled) { // err is the cause, maybe the caller's own
				l.brk.cb.ReleaseAt(permit, l.cfg.Ticker.Now(), rampart.Ignored)
			}
			return 0, Decision{}, err
		}
	} else {
		vals, err = l.roundTrip(ctx, full, iv, burst, want, need)
	}
	returned = true
	if err != nil && errors.Is(parent.Err(), context.Canceled) {
		// The caller cancelled mid-call: not a Redis failure.
		l.brk.cb.ReleaseAt(permit, l.cfg.Ticker.Now(), rampart.Ignored)
		return 0, Decision{}, err
	}
	if !l.settle(permit, now, err) {
		return 0, Decision{}, err
	}
	return l.decision(vals)
}

// ownDeadlineFirst reports whether parent's deadline comes no later than
// ctx's, parent with Timeout: the caller's deadline, not Timeout, would end
// the call. Two Deadline reads, no clock read.
func ownDeadlineFirst(parent, ctx context.Context) bool {
	pd, ok := parent.Deadline()
	if !ok {
		return false
	}
	cd, _ := ctx.Deadline()
	return !pd.After(cd)
}

// settle records a round trip's outcome with the breaker and the counters,
// and reports whether it succeeded.
func (l *Limiter) settle(permit circuitbreaker.Permit, start int64, err error) bool {
	if err != nil {
		l.redisErrors.Add(1)
		l.brk.record(permit, l.cfg.Ticker.Now(), false)
		if f := l.cfg.OnRedisError; f != nil {
			l.notify(f, err)
		}
		return false
	}
	l.brk.record(permit, start, true)
	l.roundTrips.Add(1)
	return true
}

// decision is the Decision of the script's reply.
func (l *Limiter) decision(vals []int64) (int, Decision, error) {
	g, wait, rem := vals[0], vals[1], vals[2]
	res := Decision{Allowed: g > 0, Remaining: int(rem), Source: SourceRedis}
	if !res.Allowed {
		if wait < 0 {
			res.RetryAfter = math.MaxInt64
		} else {
			res.RetryAfter = time.Duration(wait) * time.Microsecond
		}
	}
	return int(g), res, nil
}

var errBreakerOpen = errors.New("redislimit: breaker in front of redis is open")

// roundTrip runs the script within ctx (see within for why the client's
// own handling of ctx's deadline is not relied on). Events a late script
// run granted in Redis after the caller's deadline are never spent
// (under-admission only).
func (l *Limiter) roundTrip(ctx context.Context, full, iv, burst string, want, need int) ([]int64, error) {
	return within(ctx, func(ctx context.Context) ([]int64, error) {
		return l.script(ctx, full, iv, burst, want, need)
	})
}

// script runs the GCRA script once and checks its reply's shape.
func (l *Limiter) script(ctx context.Context, full, iv, burst string, want, need int) ([]int64, error) {
	vals, err := gcraScript.Run(ctx, l.cfg.Client, []string{full}, iv, burst, want, need).Int64Slice()
	if err == nil && len(vals) != 3 {
		err = fmt.Errorf("redislimit: script returned %d values", len(vals))
	}
	return vals, err
}

// fallback applies the Failure mode after Redis could not decide.
func (l *Limiter) fallback(key string, n int, lim Limit, cause error) (Decision, error) {
	l.fallbacks.Add(1)
	switch l.cfg.Failure {
	case FailClosed:
		l.rejected.Add(1)
		return Decision{RetryAfter: l.brk.remaining(l.cfg.Ticker.Now()), Remaining: -1, Source: SourceFallback},
			fmt.Errorf("%w: %w", ErrUnavailable, cause)
	case FailLocal:
		replicas := share(l.cfg.LiveReplicas, l.cfg.Replicas)
		if replicas != l.cfg.Replicas && checkShare(lim, replicas) != nil {
			replicas = l.cfg.Replicas // a share the local limiter cannot hold: the static one, which New checked
		}
		res, err := l.local.allow(key, n, lim, replicas, l.cfg.Ticker.Now())
		if err != nil {
			return res, err // a share the local limiter refuses: no decision
		}
		l.count(res.Allowed)
		return res, nil
	default:
		l.allowed.Add(1)
		return Decision{Allowed: true, Remaining: -1, Source: SourceFallback}, nil
	}
}

func (l *Limiter) count(allowed bool) {
	if allowed {
		l.allowed.Add(1)
	} else {
		l.rejected.Add(1)
	}
}

func (l *Limiter) notify(f func(error), err error) {
	notifyListener(&l.listenerPanics, f, err)
}

// Stats returns a snapshot of the counters.
func (l *Limiter) Stats() Stats {
	return Stats{
		Admitted:       l.allowed.Load(),
		Rejected:       l.rejected.Load(),
		RoundTrips:     l.roundTrips.Load(),
		LeaseHits:      l.leaseHits.Load(),
		RedisErrors:    l.redisErrors.Load(),
		Fallbacks:      l.fallbacks.Load(),
		BreakerOpen:    l.brk.open(),
		ListenerPanics: l.listenerPanics.Load(),
		Leases:         l.leasesTaken.Load(),
		LeaseEventsIn:  l.leaseEvents.Load(),
	}
}
