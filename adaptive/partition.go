package adaptive

import (
	"math"
	"sync/atomic"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/pad"
)

// Partition is one priority's share of a [Limiter]'s limit (Netflix's
// partitioned limiter): e.g. {Name: "critical", Share: 0.8}, {Name: "batch",
// Share: 0.2}. See [Limiter.AcquirePartitionAt].
type Partition struct {
	Name  string  // for humans; unused by the limiter
	Share float64 // fraction of the limit reserved for this priority, in [0, 1]
}

type partition struct {
	inflight pad.Int64    // calls of this partition in flight
	share    atomic.Int64 // floor(limit · frac), republished with the limit
	frac     float64
}

func newPartitions(ps []Partition) ([]partition, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	if len(ps) > math.MaxInt16-1 {
		return nil, rampart.NewConfigError("adaptive", "Partitions", "must hold at most %d entries, got %d", math.MaxInt16-1, len(ps))
	}
	out := make([]partition, len(ps))
	total := 0.0
	for i, p := range ps {
		if !(p.Share >= 0 && p.Share <= 1) {
			return nil, rampart.NewConfigError("adaptive", "Partitions", "[%d].Share must be in [0, 1], got %v", i, p.Share)
		}
		total += p.Share
		out[i].frac = p.Share
	}
	if total > 1+1e-9 {
		return nil, rampart.NewConfigError("adaptive", "Partitions", "shares must sum to at most 1, got %v", total)
	}
	return out, nil
}

// AcquirePartitionAt admits a call of partition p (an index into
// Config.Partitions) and returns its Permit, or (Permit{}, [Limiter.RejectedError]). This is
// Netflix's partitioned limiter:
//
//   - a call of p is admitted while p has fewer calls in flight than its
//     share, floor(limit · Share), whatever the other partitions do: the
//     share is guaranteed;
//   - beyond its share, p borrows: the call is admitted while the total in
//     flight is below the limit, so an idle partition's share is used by
//     whoever needs it.
//
// A partition reclaiming its share while others have borrowed it is still
// admitted, so the total in flight may exceed the limit, by at most the
// borrowed calls, until they finish; a low priority can therefore delay a
// high one by no more than one call duration. An out-of-range p is treated
// as the last partition; on a limiter without partitions AcquirePartitionAt is
// AcquireAt.
//
// Cost: two atomic adds and two loads when admitted; no allocation.
func (l *Limiter) AcquirePartitionAt(now int64, p int) (Permit, error) {
	if len(l.parts) == 0 {
		return l.AcquireAt(now)
	}
	if p < 0 || p >= len(l.parts) {
		p = len(l.parts) - 1
	}
	n, _, ok := l.admitPriority(p)
	if !ok {
		l.unstallAt(now)
		return Permit{}, l.rejErr
	}
	return Permit{start: now, inflight: n, part: int16(p + 1), state: weight1}, nil
}

// admitPriority takes a slot of partition p (already in range) and of the
// total, or gives both back and counts a rejection. It returns the calls in
// flight after the admission and its sequence number (for Acquire's
// sampling). Cost: two atomic adds and two loads when admitted.
func (l *Limiter) admitPriority(p int) (n int32, seq uint32, ok bool) {
	pt := &l.parts[p]
	own := pt.inflight.Add(1)  // atomic 1: the partition's slot
	w := l.slots.Add(admitOne) // atomic 2: the total slot, numbered
	total := inFlightOf(w)
	if own > pt.share.Load() && total > l.limit.Load() { // beyond the share and no room to borrow
		pt.inflight.Add(-1)
		l.slots.Add(-admitOne)
		l.rejected.Add(1)
		return 0, 0, false
	}
	return int32(total), seqOf(w), true
}

// PartitionInFlight returns the calls of partition p in flight (0 for an
// out-of-range p).
func (l *Limiter) PartitionInFlight(p int) int {
	if p < 0 || p >= len(l.parts) {
		return 0
	}
	return int(l.parts[p].inflight.Load())
}
