package redislimit

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rampart-go/rampart/internal/atomicx"
)

// lease is one key's locally held capacity.
//
// tokens is the number of events left to spend; expires is the local ticker
// reading after which they may no longer be spent (they were granted by
// Redis no earlier than expires - LeaseTTL). refill serialises the slow path:
// one caller takes a new lease while the others wait for it and then spend
// from it, instead of each making a round trip of its own. It is never taken
// while a lease has tokens left.
type lease struct {
	tokens  atomic.Int64
	expires atomic.Int64
	refill  sync.Mutex
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
func (l *Limiter) allowLeased(ctx context.Context, key, full string, n int) (Result, error) {
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
	if now < ls.expires.Load() && atomicx.SubAbove(&ls.tokens, int64(n), 0) {
		l.leaseHits.Add(1)
		l.allowed.Add(1)
		return Result{Allowed: true, Remaining: int(ls.tokens.Load()), Source: SourceLease}, nil
	}
	return l.refillLease(ctx, key, full, ls, n, now)
}

// refillLease is the slow path of lease mode: take a new lease of up to
// Lease events (at least n, spent at once) in one round trip.
func (l *Limiter) refillLease(ctx context.Context, key, full string, ls *lease, n int, now int64) (Result, error) {
	ls.refill.Lock()
	defer ls.refill.Unlock()
	// Whoever held the lock before may have taken a fresh lease: spend from it.
	if now < ls.expires.Load() && atomicx.SubAbove(&ls.tokens, int64(n), 0) {
		l.leaseHits.Add(1)
		l.allowed.Add(1)
		return Result{Allowed: true, Remaining: int(ls.tokens.Load()), Source: SourceLease}, nil
	}
	want := max(l.cfg.Lease, n)
	granted, res, err := l.run(ctx, full, l.ivArg, l.burstArg, want, n)
	if err != nil {
		return l.fallback(key, n, l.cfg.Limit, err)
	}
	if res.Allowed {
		l.leasesTaken.Add(1)
		l.leaseEvents.Add(uint64(granted))
		// Publish the tokens before the expiry that makes them spendable;
		// events left from the previous lease are dropped (never returned).
		ls.tokens.Store(int64(granted - n))
		ls.expires.Store(atomicx.SatAdd(now, l.leaseNs)) // saturating: a huge LeaseTTL must not wrap
		res.Remaining = granted - n
	}
	l.count(res.Allowed)
	return res, nil
}
