package adaptive

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
)

// ErrThrottled is the sentinel of a [Throttler]'s local rejections. The
// error a Throttler returns matches it and [rampart.ErrRejected].
var ErrThrottled = errors.New("throttled locally")

// ThrottlerConfig configures a [Throttler]. The zero value is valid: K 2, a
// 10 s window of 10 buckets, a cap of 0.9 on the rejection probability, at
// least 10 requests in the window before rejecting.
type ThrottlerConfig struct {
	// Name identifies the throttler in its rejection error.
	Name string
	// K is the multiplier of accepts: the client sends up to K times what
	// the backend accepted before throttling. At least 1; default 2
	// (the SRE book's value). Lower is more aggressive.
	K float64
	// Window is the span of history counted. Default 10 s (the SRE book
	// uses two minutes; a shorter window reacts and recovers faster).
	Window time.Duration
	// Buckets is the number of slices the window is divided into; the
	// window slides by Window/Buckets. 1..1024, default 10.
	Buckets int
	// MaxProbability caps the rejection probability, in (0, 1]. Default
	// 0.9. Without a cap (1) a backend that refused everything is probed
	// by a trickle of 1/(requests+1) of the calls, and since each window
	// can at most double that trickle, recovery takes about
	// log2(requests) windows; the cap keeps at least 10 % of the calls
	// probing, and recovery takes a few windows.
	MaxProbability float64
	// MinRequests is the number of requests the window must hold before
	// anything is rejected locally (the formula gives 1/2 to the first
	// request of a cold window). Default 10; negative means 0.
	MinRequests int
	// Accepted tells Do and the typed helper whether fn's error means
	// that the backend accepted the call. Default: nil and application
	// errors are accepted; context.DeadlineExceeded and rejections
	// (rampart.ErrRejected) are not.
	Accepted func(err error) bool
	// Ticker is the clock of Do. Default rampart.DefaultTicker().
	Ticker rampart.Ticker
}

// ThrottlerStats is a snapshot of a [Throttler].
type ThrottlerStats struct {
	Requests    uint64  // requests counted in the window
	Accepts     uint64  // accepts counted in the window
	Probability float64 // the current rejection probability
	Rejected    uint64  // local rejections since creation
}

// Bucket word layout (one atomic word per bucket, updated by CAS, so a
// bucket's reset and its counts can never tear apart):
//
//	63           40 39           20 19            0
//	+--------------+---------------+--------------+
//	| epoch (24 b) | requests (20) | accepts (20) |
//	+--------------+---------------+--------------+
//
// epoch is now/bucketDuration modulo 2^24; a bucket whose epoch is not
// within the last Buckets epochs is stale and counts as zero. The counts
// saturate at 2^20 − 1 per bucket.
var (
	fEpoch = atomicx.Field{Shift: 40, Width: 24}
	fReq   = atomicx.Field{Shift: 20, Width: 20}
	fAcc   = atomicx.Field{Shift: 0, Width: 20}
)

// Throttler is the SRE book's client-side adaptive throttling ("Handling
// Overload"): a client that sees its backend refuse requests starts refusing
// them itself, before they cost the backend anything. Over a sliding window
// it counts requests (every call the application attempted, including the
// ones rejected locally) and accepts (calls the backend accepted), and
// rejects each new call locally with probability
//
//	p = max(0, (requests − K·accepts) / (requests + 1))
//
// capped at MaxProbability (default 0.9), and zero while the window holds
// fewer than MinRequests requests. While the backend accepts everything,
// requests ≈ accepts and p = 0 (the cost is a CAS and a sum over the
// buckets). When it accepts only a rate X of an offered rate R, the client
// settles at sending 2X (p = 1 − 2X/R): the backend sees twice what it can
// take, enough to notice when it recovers. When it refuses everything, p
// reaches the cap; as accepts return, p falls back to 0 within a few
// windows.
//
// Call Allow before each call and Record after each call that Allow
// admitted. Safe for concurrent use; no lock, no allocation.
type Throttler struct {
	buckets   []atomic.Uint64
	bucketDur int64
	k, maxP   float64
	minReq    uint64
	accepted  func(error) bool
	rejErr    *rampart.RejectedError
	ticker    rampart.Ticker
	rejected  atomic.Uint64
}

// NewThrottler validates c and returns a Throttler.
func NewThrottler(c ThrottlerConfig) (*Throttler, error) {
	const policy = "adaptive"
	if c.K != 0 && !(c.K >= 1) || math.IsInf(c.K, 0) {
		return nil, rampart.NewConfigError(policy, "K", "must be at least 1, got %v", c.K)
	}
	if c.Window < 0 {
		return nil, rampart.NewConfigError(policy, "Window", "must not be negative, got %v", c.Window)
	}
	if c.Buckets < 0 || c.Buckets > 1024 {
		return nil, rampart.NewConfigError(policy, "Buckets", "must be in 1..1024, got %d", c.Buckets)
	}
	if c.MaxProbability != 0 && !(c.MaxProbability > 0 && c.MaxProbability <= 1) {
		return nil, rampart.NewConfigError(policy, "MaxProbability", "must be in (0, 1], got %v", c.MaxProbability)
	}
	n := c.Buckets
	if n == 0 {
		n = 10
	}
	w := durationOr(c.Window, 10*time.Second)
	if w/int64(n) == 0 {
		return nil, rampart.NewConfigError(policy, "Window", "(%v) must be at least one nanosecond per bucket", c.Window)
	}
	t := &Throttler{
		buckets:   make([]atomic.Uint64, n),
		bucketDur: w / int64(n),
		k:         c.K,
		maxP:      c.MaxProbability,
		accepted:  c.Accepted,
		rejErr:    rampart.NewRejectedError(policy, c.Name, ErrThrottled),
		ticker:    c.Ticker,
	}
	if t.k == 0 {
		t.k = 2
	}
	if t.maxP == 0 {
		t.maxP = 0.9
	}
	switch {
	case c.MinRequests == 0:
		t.minReq = 10
	case c.MinRequests > 0:
		t.minReq = uint64(c.MinRequests)
	}
	if t.accepted == nil {
		t.accepted = defaultAccepted
	}
	if t.ticker == nil {
		t.ticker = rampart.DefaultTicker()
	}
	// Mark every bucket stale for the current epoch.
	e := t.epoch(t.ticker.Now())
	for i := range t.buckets {
		t.buckets[i].Store(fEpoch.Set(0, e-uint64(len(t.buckets))))
	}
	return t, nil
}

func defaultAccepted(err error) bool {
	return err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rampart.ErrRejected))
}

func (t *Throttler) epoch(now int64) uint64 {
	return uint64(max(now, 0)/t.bucketDur) & fEpoch.Mask()
}

// add counts dr requests and da accepts in the bucket of now: a CAS loop
// that also resets the bucket when it belongs to an older epoch.
func (t *Throttler) add(now int64, dr, da uint64) {
	e := t.epoch(now)
	b := &t.buckets[e%uint64(len(t.buckets))]
	for {
		w := b.Load()
		var next uint64
		if fEpoch.Get(w) == e {
			next = fReq.Set(w, min(fReq.Get(w)+dr, fReq.Mask()))
			next = fAcc.Set(next, min(fAcc.Get(w)+da, fAcc.Mask()))
		} else {
			next = fAcc.Set(fReq.Set(fEpoch.Set(0, e), dr), da)
		}
		if b.CompareAndSwap(w, next) {
			return
		}
	}
}

// totals sums the buckets that belong to the window ending at now.
func (t *Throttler) totals(now int64) (req, acc uint64) {
	e := t.epoch(now)
	n := uint64(len(t.buckets))
	for i := range t.buckets {
		w := t.buckets[i].Load()
		if age := (e - fEpoch.Get(w)) & fEpoch.Mask(); age < n {
			req += fReq.Get(w)
			acc += fAcc.Get(w)
		}
	}
	return req, acc
}

func (t *Throttler) probability(req, acc uint64) float64 {
	if req < t.minReq {
		return 0
	}
	p := (float64(req) - t.k*float64(acc)) / float64(req+1)
	return min(max(p, 0), t.maxP)
}

// Allow counts a request at time now and reports whether to send it: false
// means reject it locally (return [Throttler.RejectedError]). A call that
// Allow admitted must be followed by [Throttler.Record].
//
// Cost: one CAS on the current bucket and one load per bucket; a random
// draw only while the rejection probability is positive. No allocation.
func (t *Throttler) Allow(now int64) bool {
	t.add(now, 1, 0)
	req, acc := t.totals(now)
	if float64(req) <= t.k*float64(acc) || req < t.minReq {
		return true // p = 0: the backend keeps up (or too little evidence)
	}
	if rand.Float64() < t.probability(req, acc) {
		t.rejected.Add(1)
		return false
	}
	return true
}

// Record reports at time now whether the backend accepted a call that
// Allow admitted. Cost: one CAS when accepted, nothing otherwise.
func (t *Throttler) Record(now int64, accepted bool) {
	if accepted {
		t.add(now, 0, 1)
	}
}

// Probability returns the rejection probability at time now.
func (t *Throttler) Probability(now int64) float64 {
	return t.probability(t.totals(now))
}

// RejectedError returns the preallocated local rejection, matching
// [ErrThrottled] and [rampart.ErrRejected].
func (t *Throttler) RejectedError() error { return t.rejErr }

// Ticker returns the clock of Do and Stats.
func (t *Throttler) Ticker() rampart.Ticker { return t.ticker }

// Stats returns a snapshot (the window as of the ticker's now).
func (t *Throttler) Stats() ThrottlerStats {
	req, acc := t.totals(t.ticker.Now())
	return ThrottlerStats{Requests: req, Accepts: acc, Probability: t.probability(req, acc), Rejected: t.rejected.Load()}
}

// Do runs fn unless the throttler rejects it locally, and records whether
// the backend accepted it (ThrottlerConfig.Accepted). fn's error is
// returned unchanged; a panic in fn records nothing and continues.
func (t *Throttler) Do(ctx context.Context, fn func(context.Context) error) error {
	if !t.Allow(t.ticker.Now()) {
		return t.rejErr
	}
	err := fn(ctx)
	t.Record(t.ticker.Now(), t.accepted(err))
	return err
}

// Throttle is the typed form of [Throttler.Do].
func Throttle[T any](ctx context.Context, t *Throttler, fn func(context.Context) (T, error)) (T, error) {
	if !t.Allow(t.ticker.Now()) {
		var zero T
		return zero, t.rejErr
	}
	v, err := fn(ctx)
	t.Record(t.ticker.Now(), t.accepted(err))
	return v, err
}
