package redislimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
)

// lease is one key's locally held capacity.
//
// tokens is the number of events left to spend; expires is the local ticker
// reading after which they may no longer be spent (they were granted by
// Redis no earlier than expires - LeaseTTL). refill serialises the slow path:
// one caller takes a new lease while the others wait for it and then spend
// from it, instead of each making a round trip of its own. It is never taken
// while a lease has tokens left.
//
// refills counts the refill attempts finished and failed is the last one's
// error (nil when it took a lease, or when it failed through its own
// caller's cancellation or deadline): a caller that waited on refill while
// an attempt failed takes the Failure mode's decision with that error instead
// of a round trip of its own, so that it waits for at most one Timeout.
type lease struct {
	tokens  atomic.Int64
	expires atomic.Int64
	refill  sync.Mutex
	refills atomic.Uint64 // written under refill, read before taking it
	failed  error         // guarded by refill
}

// maxLeaseKeys bounds the memory of the lease map: one entry per key ever
// seen would grow without end with per-client keys. Past it the map starts
// over; the leases dropped only lose their unspent events (under-admission,
// never over-admission: every event spent was granted by Redis). A var so
// that a test can lower it.
var maxLeaseKeys int64 = 1 << 16

// dropLeases empties the lease map. Slow path: once per maxLeaseKeys new keys.
func (l *Limiter) dropLeases() {
	l.leases.Clear()
	l.leaseKeys.Store(0)
}

// allowLeased is AllowN in lease mode. The fast path is two loads and one
// CAS on the key's lease, with no round trip.
func (l *Limiter) allowLeased(ctx context.Context, key, full string, n int) (Decision, error) {
	now := l.cfg.Ticker.Now() // the lease's age decides whether it may be spent
	v, ok := l.leases.Load(full)
	if !ok {
		var loaded bool
		v, loaded = l.leases.LoadOrStore(full, new(lease))
		if !loaded && l.leaseKeys.Add(1) > maxLeaseKeys {
			l.dropLeases()
		}
	}
	ls := v.(*lease)
	if ls.spend(now, int64(n)) {
		l.leaseHits.Add(1)
		l.allowed.Add(1)
		return Decision{Allowed: true, Remaining: int(ls.tokens.Load()), Source: SourceLease}, nil
	}
	return l.refillLease(ctx, key, full, ls, n, now)
}

// refillLease is the slow path of lease mode: take a new lease of up to
// Lease events (at least n, spent at once) in one round trip.
func (l *Limiter) refillLease(ctx context.Context, key, full string, ls *lease, n int, now int64) (Decision, error) {
	// One atomic load, on the slow path only: it tells below whether a
	// refill attempt finished while this caller waited for the lock.
	seen := ls.refills.Load()
	ls.refill.Lock()
	defer ls.refill.Unlock()
	// Whoever held the lock before may have taken a fresh lease: spend from it.
	if ls.spend(now, int64(n)) {
		l.leaseHits.Add(1)
		l.allowed.Add(1)
		return Decision{Allowed: true, Remaining: int(ls.tokens.Load()), Source: SourceLease}, nil
	}
	if ls.refills.Load() != seen && ls.failed != nil {
		// The refill this caller waited for failed (Redis did not answer
		// within Timeout, or the breaker is open): decide now, as that
		// caller did, rather than wait for one more Timeout.
		return l.fallback(key, n, l.cfg.Limit, ls.failed)
	}
	want := max(l.cfg.Lease, n)
	granted, res, err := l.run(ctx, full, l.ivArg, l.burstArg, want, n)
	ls.failed = nil
	if err != nil && ctx.Err() == nil {
		ls.failed = err // Redis' failure, not this caller's own cancellation or deadline
	}
	ls.refills.Add(1)
	if err != nil {
		return l.fallback(key, n, l.cfg.Limit, err)
	}
	if res.Allowed {
		l.leasesTaken.Add(1)
		l.leaseEvents.Add(uint64(granted))
		// Publish the tokens before the expiry that makes them spendable;
		// events left from the previous lease are dropped (never returned).
		ls.tokens.Store(int64(granted - n))
		ls.expires.Store(expiry(now, l.leaseNs))
		res.Remaining = granted - n
	}
	l.count(res.Allowed)
	return res, nil
}

// spend takes n events from the lease if it has not expired at now and holds
// at least n: one load of expires, then a CAS loop on tokens that never
// takes it below zero.
func (ls *lease) spend(now, n int64) bool {
	if now >= ls.expires.Load() {
		return false
	}
	for {
		cur := ls.tokens.Load()
		if cur < n {
			return false
		}
		if ls.tokens.CompareAndSwap(cur, cur-n) {
			return true
		}
	}
}

// expiry is now+ttl (ttl > 0), saturated at math.MaxInt64: a huge LeaseTTL
// must not wrap into the past.
func expiry(now, ttl int64) int64 {
	if now > math.MaxInt64-ttl {
		return math.MaxInt64
	}
	return now + ttl
}
