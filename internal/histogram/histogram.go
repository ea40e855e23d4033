// Package histogram is a lock-free log-linear histogram of non-negative
// int64 values (latencies in nanoseconds, in practice), in the style of
// HdrHistogram: recording is one atomic add, a quantile query scans the
// buckets, and every reported quantile is within a fixed relative error of
// the exact one.
//
// # Buckets
//
// Values below 64 have a bucket each. Above, every power-of-two range
// [2^e, 2^(e+1)) is split into 32 equal sub-buckets of width 2^(e-5). With
// shift = max(0, bits.Len64(v) - 6), the bucket index is
//
//	index(v) = shift<<5 + v>>shift
//
// (v>>shift lies in [32, 64) once shift > 0): a leading-zero count, a shift
// and an add, no table and no branch on the range. Bucket i covers
// [lo(i), hi(i)] with, for s = max(0, i>>5 - 1),
//
//	lo(i) = (i - s<<5) << s,   hi(i) = lo(i) + 1<<s - 1.
//
// Values are clamped to [0, [MaxValue]] (2^44-1 ns, about 4.9 hours): a
// negative value counts as 0 and a larger one as MaxValue. There are
// [NumBuckets] = 1280 buckets, 10 KiB of counters per Histogram.
//
// # Error bound
//
// [Histogram.Quantile] returns the highest value of the bucket that holds the
// requested rank (HdrHistogram's "highest equivalent value"). The rank of
// quantile p among n values is r = round(p·n), at least 1 (HdrHistogram's
// rule: with exactly 5 % of slow values, the p95 is the largest fast one). A
// bucket's width is at most 1/32 of its lowest value, so the returned q and
// the exact order statistic x (the r-th smallest recorded value, clamped as
// above) satisfy
//
//	x <= q <= x + x*RelativeError,   RelativeError = 1/32 = 3.125 %
//
// and q == x for x < 64. The result never understates the quantile, which is
// what a hedging delay or a timeout derived from it wants.
//
// # Concurrency
//
// The zero Histogram is empty and ready to use. Record, Quantile, Count,
// Decay and Reset are safe for concurrent use without locks. Recording
// touches one 8-byte counter, so recorders of different values rarely share a
// cache line, while recorders of the same value contend on one word (an
// atomic add each, never a CAS loop). A query that runs while others
// record sees each counter at some moment during the query: it is exact for
// the values recorded before it began and may or may not include those
// recorded during it. Queries and Decay cost a scan of the 1280 counters
// (a few microseconds): call them every few thousand records or every few
// hundred milliseconds, not on every call.
package histogram

import (
	"math"
	"math/bits"
	"sync/atomic"
)

const (
	// subBits is log2 of the number of sub-buckets per power of two.
	subBits = 5
	// subCount is the number of sub-buckets per power of two (32).
	subCount = 1 << subBits
	// maxBits is the bit length of the largest value tracked exactly.
	maxBits = 44

	// MaxValue is the largest value the histogram distinguishes (about 4.9
	// hours in nanoseconds); larger values are recorded as MaxValue.
	MaxValue = 1<<maxBits - 1

	// NumBuckets is the number of counters in a Histogram.
	NumBuckets = (maxBits-subBits-1)<<subBits + 2*subCount // 1280

	// RelativeError bounds how much a reported quantile may exceed the exact
	// one, relative to the exact one (1/32). See the package doc.
	RelativeError = 1.0 / subCount
)

// Histogram counts values in log-linear buckets. The zero value is empty and
// ready to use; a Histogram must not be copied after first use.
type Histogram struct {
	counts [NumBuckets]atomic.Uint64 // atomic.Uint64 makes go vet flag copies
}

// Index returns the bucket index of v, after clamping v to [0, MaxValue].
func Index(v int64) int {
	if v < 0 {
		v = 0
	} else if v > MaxValue {
		v = MaxValue
	}
	u := uint64(v)
	shift := bits.Len64(u) - (subBits + 1)
	if shift < 0 {
		shift = 0
	}
	return shift<<subBits + int(u>>uint(shift))
}

// Bounds returns the lowest and highest value counted by bucket i
// (0 <= i < NumBuckets).
func Bounds(i int) (lo, hi int64) {
	s := i>>subBits - 1
	if s < 0 {
		s = 0
	}
	lo = int64(i-s<<subBits) << uint(s)
	return lo, lo + 1<<uint(s) - 1
}

// Record counts one occurrence of v (clamped to [0, MaxValue]): one atomic
// add on the bucket's counter, nothing else.
func (h *Histogram) Record(v int64) {
	h.counts[Index(v)].Add(1)
}

// RecordN counts n occurrences of v (n > 0) with one atomic add.
func (h *Histogram) RecordN(v int64, n uint64) {
	h.counts[Index(v)].Add(n)
}

// Count returns the number of recorded values (one scan of the counters).
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// BucketCount returns the count of bucket i, for callers that walk the
// buckets themselves (with [Bounds]).
func (h *Histogram) BucketCount(i int) uint64 { return h.counts[i].Load() }

// Quantile returns the value at quantile p (0 <= p <= 1: 0.5 is the median,
// 0.99 the 99th percentile) and the number n of values it was computed from.
// The value is the highest value of the bucket that holds the r-th smallest
// recorded value, r = round(p·n) clamped to [1, n], so it is within
// [RelativeError] above the exact order statistic (see the package doc). It
// returns (0, 0) when the histogram is empty. p outside [0, 1] is clamped; a
// NaN p counts as 1.
//
// It scans the counters twice (one pass to count, one to find the rank):
// query it periodically, not per call.
func (h *Histogram) Quantile(p float64) (value int64, n uint64) {
	n = h.Count()
	if n == 0 {
		return 0, 0
	}
	return h.valueAtRank(rank(p, n)), n
}

// rank converts quantile p of n values into a 1-based rank in [1, n].
func rank(p float64, n uint64) uint64 {
	switch {
	case p != p || p >= 1: // NaN or above 1
		return n
	case p <= 0:
		return 1
	}
	r := uint64(math.Round(p * float64(n)))
	if r < 1 {
		r = 1
	} else if r > n {
		r = n
	}
	return r
}

// valueAtRank returns the highest value of the bucket holding the r-th
// smallest value. If recorders added values since the count (so the scan
// reaches more than r sooner), the result only gets earlier buckets' values,
// still a bucket that holds a recorded value; if a concurrent Decay or Reset
// removed counts so that the scan never reaches r, it returns the highest
// non-empty bucket.
func (h *Histogram) valueAtRank(r uint64) int64 {
	var cum uint64
	last := -1
	for i := range h.counts {
		c := h.counts[i].Load()
		if c == 0 {
			continue
		}
		last = i
		cum += c
		if cum >= r {
			_, hi := Bounds(i)
			return hi
		}
	}
	if last < 0 {
		return 0
	}
	_, hi := Bounds(last)
	return hi
}

// Decay divides every count by 2^shift (shift >= 1), rounding down, so old
// samples weigh less than new ones: calling Decay(1) every period gives an
// exponentially decaying histogram with a half-life of one period, where a
// bucket that saw nothing for a few periods empties. It replaces each count
// with a compare-and-swap, so values recorded during the Decay are never
// lost (a concurrent record may or may not be divided) and concurrent Decays
// compose (two Decay(1) quarter the counts). shift >= 64 empties the
// histogram like Reset.
func (h *Histogram) Decay(shift uint) {
	if shift == 0 {
		return
	}
	for i := range h.counts {
		// A CAS, not a subtraction of what the load saw: two concurrent
		// Decays (or a Decay and a Reset) would both subtract from the
		// same count and wrap it around. A record that lands between the
		// load and the CAS makes the CAS fail and is kept by the retry.
		for {
			c := h.counts[i].Load()
			if c == 0 || h.counts[i].CompareAndSwap(c, c>>shift) {
				break
			}
		}
	}
}

// Reset empties the histogram. Values recorded during a Reset may or may not
// survive it.
func (h *Histogram) Reset() {
	for i := range h.counts {
		if h.counts[i].Load() != 0 {
			h.counts[i].Store(0)
		}
	}
}
