package adaptive

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
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
	Accepted    uint64  // accepts counted in the window
	Probability float64 // the current rejection probability
	Rejected    uint64  // local rejections since creation
}

// Bucket word layout (one atomic word per bucket, so one Add counts a
// request or an accept):
//
//	63              32 31               0
//	+-----------------+-----------------+
//	|  requests (32)  |   accepts (32)  |
//	+-----------------+-----------------+
const (
	oneRequest = 1 << 32
	oneAccept  = 1
)

// Throttler is the SRE book's client-side adaptive throttling ("Handling
// Overload"): a client that sees its backend refuse requests starts refusing
// them itself, before they cost the backend anything. Create it with
// [NewThrottler] and run calls through [Throttler.Do] or [Throttle];
// [Throttler.Allow] before a call and [Throttler.Record] after each call it
// allowed do the same by hand.
//
// Over a sliding window
// it counts requests (every call the application attempted, including the
// ones rejected locally) and accepts (calls the backend accepted), and
// rejects each new call locally with probability
//
//	p = max(0, (requests − K·accepts) / (requests + 1))
//
// capped at MaxProbability (default 0.9), and zero while the window holds
// fewer than MinRequests requests. While the backend accepts everything,
// requests ≈ accepts and p = 0. When it accepts only a rate X of an offered rate R, the client
// settles at sending 2X (p = 1 − 2X/R): the backend sees twice what it can
// take, enough to notice when it recovers. When it refuses everything, p
// reaches the cap; as accepts return, p falls back to 0 within a few
// windows.
//
// It is drop-based by design, as the SRE book's is, and on a ratio already:
// p is 0 while the backend accepts more than 1/K of the requests (half at
// K = 2), so a few timeouts or refusals (1 %, or 40 %, of the calls) never
// throttle. It has no drop threshold of its own and does not use the
// [Limiter]'s; K is that threshold.
//
// The XAt forms (AllowAt, RecordAt) take the caller's clock reading. The
// zero Throttler is not usable. A Throttler is safe for concurrent use; no
// lock, no allocation.
type Throttler struct {
	// The window's totals, kept equal to the sum of the live buckets: each
	// count is added to its bucket and to the total, and a bucket that
	// expires is swapped to zero and subtracted. Written by every call:
	// alone on their line (written together, so sharing it is fine).
	_      pad.Line
	reqSum atomic.Int64
	accSum atomic.Int64
	_      pad.Line
	cur    atomic.Int64 // the newest bucket epoch (now / bucketDur); read by every call
	_      pad.Line

	buckets   []atomic.Uint64 // written by every call (the current one)
	bucketDur int64
	k, maxP   float64
	minReq    int64
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
		t.minReq = int64(c.MinRequests)
	}
	if t.accepted == nil {
		t.accepted = defaultAccepted
	}
	if ticker.IsNil(t.ticker) {
		return nil, rampart.NewConfigError("adaptive", "Ticker", ticker.NilReason, t.ticker)
	}
	if t.ticker == nil {
		t.ticker = rampart.DefaultTicker()
	}
	t.cur.Store(max(t.ticker.Now(), 0) / t.bucketDur)
	return t, nil
}

func defaultAccepted(err error) bool {
	return err == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rampart.ErrRejected))
}

// bucket returns the bucket of now, first expiring the buckets that now's
// epoch pushes out of the window, or nil when now is older than the window
// (a reading taken long before the call reached here).
func (t *Throttler) bucket(now int64) *atomic.Uint64 {
	e := max(now, 0) / t.bucketDur // the only division on the path
	if c := t.cur.Load(); e > c {
		t.advance(c, e)
	} else if e <= c-int64(len(t.buckets)) {
		return nil
	}
	return &t.buckets[e%int64(len(t.buckets))]
}

// advance moves the window from epoch c to e: the goroutine whose CAS wins
// empties the buckets of the epochs in (c, e] (they hold counts from a
// previous turn of the ring) and subtracts their counts from the totals.
// Slow path: once per bucket duration. A count added to a bucket just before
// it is emptied is lost from both the bucket and the totals, so they stay
// consistent.
func (t *Throttler) advance(c, e int64) {
	if !t.cur.CompareAndSwap(c, e) {
		return // another goroutine advanced it (to e or further)
	}
	n := int64(len(t.buckets))
	// Counted by i, not by k <= e: e may be math.MaxInt64 (a reading at the
	// end of the range with 1 ns buckets), where k++ would wrap.
	lo := max(c+1, e-n+1)
	for i := int64(0); i <= e-lo; i++ {
		k := lo + i
		old := t.buckets[k%n].Swap(0)
		if old != 0 {
			t.reqSum.Add(-int64(old >> 32))
			t.accSum.Add(-int64(old & (oneRequest - 1)))
		}
	}
}

func (t *Throttler) probability(req, acc int64) float64 {
	if req < t.minReq {
		return 0
	}
	p := (float64(req) - t.k*float64(acc)) / float64(req+1)
	return min(max(p, 0), t.maxP)
}

// AllowAt counts a request at time now and reports whether to send it: false
// means reject it locally (return [Throttler.RejectedError]). A call that
// AllowAt admitted must be followed by [Throttler.RecordAt].
//
// Cost: a load and a division to find the bucket, two atomic adds (the
// bucket and the window total) and a load; a random draw only while the
// rejection probability is positive. No allocation.
func (t *Throttler) AllowAt(now int64) bool {
	var req int64
	if b := t.bucket(now); b != nil {
		b.Add(oneRequest)     // atomic 1: the bucket
		req = t.reqSum.Add(1) // atomic 2: the window total
	} else {
		req = t.reqSum.Load()
	}
	acc := t.accSum.Load() // same line as reqSum
	if float64(req) <= t.k*float64(acc) || req < t.minReq {
		return true // p = 0: the backend keeps up (or too little evidence)
	}
	if rand.Float64() < t.probability(req, acc) {
		t.rejected.Add(1)
		return false
	}
	return true
}

// Allow is [Throttler.AllowAt] at a reading of the throttler's Ticker.
func (t *Throttler) Allow() bool { return t.AllowAt(t.ticker.Now()) }

// RecordAt reports at time now whether the backend accepted a call that
// AllowAt admitted. Cost: two atomic adds when accepted, nothing otherwise.
func (t *Throttler) RecordAt(now int64, accepted bool) {
	if accepted {
		if b := t.bucket(now); b != nil {
			b.Add(oneAccept)
			t.accSum.Add(1)
		}
	}
}

// Record is [Throttler.RecordAt] at a reading of the throttler's Ticker.
func (t *Throttler) Record(accepted bool) { t.RecordAt(t.ticker.Now(), accepted) }

// ProbabilityAt returns the rejection probability at time now.
func (t *Throttler) ProbabilityAt(now int64) float64 {
	req, acc := t.totals(now)
	return t.probability(req, acc)
}

// Probability is [Throttler.ProbabilityAt] at a reading of the throttler's
// Ticker.
func (t *Throttler) Probability() float64 { return t.ProbabilityAt(t.ticker.Now()) }

// totals returns the window's counts as of now (expiring old buckets).
func (t *Throttler) totals(now int64) (req, acc int64) {
	t.bucket(now)
	return max(t.reqSum.Load(), 0), max(t.accSum.Load(), 0)
}

// RejectedError returns the preallocated local rejection, matching
// [ErrThrottled] and [rampart.ErrRejected].
func (t *Throttler) RejectedError() error { return t.rejErr }

// Ticker returns the clock of Do and Stats.
func (t *Throttler) Ticker() rampart.Ticker { return t.ticker }

// Stats returns a snapshot (the window as of the ticker's now).
func (t *Throttler) Stats() ThrottlerStats {
	req, acc := t.totals(t.ticker.Now())
	return ThrottlerStats{Requests: uint64(req), Accepted: uint64(acc), Probability: t.probability(req, acc), Rejected: t.rejected.Load()}
}

// Do runs fn unless the throttler rejects it locally, and records whether
// the backend accepted it (ThrottlerConfig.Accepted). fn's error is
// returned unchanged; a panic in fn records nothing and continues.
func (t *Throttler) Do(ctx context.Context, fn func(context.Context) error) error {
	if !t.AllowAt(t.ticker.Now()) {
		return t.rejErr
	}
	err := fn(ctx)
	t.RecordAt(t.ticker.Now(), t.accepted(err))
	return err
}

// Throttle is the typed form of [Throttler.Do].
func Throttle[T any](ctx context.Context, t *Throttler, fn func(context.Context) (T, error)) (T, error) {
	if !t.AllowAt(t.ticker.Now()) {
		var zero T
		return zero, t.rejErr
	}
	v, err := fn(ctx)
	t.RecordAt(t.ticker.Now(), t.accepted(err))
	return v, err
}
