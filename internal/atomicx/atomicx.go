// Package atomicx holds the small lock-free helpers the policies share:
// CAS-max and CAS-min, bounded and saturating arithmetic, and bit fields of a
// packed 64-bit word.
//
// Every helper that loops does so only while another goroutine changed the
// word between its load and its CAS, so each is lock-free: some caller always
// makes progress.
package atomicx

import (
	"math"
	"sync/atomic"
)

// Max raises a to at least v and returns the value a holds afterwards. It
// performs no write when a already holds v or more, so a word that is mostly
// up to date is only read.
func Max(a *atomic.Int64, v int64) int64 {
	for {
		cur := a.Load()
		if cur >= v {
			return cur
		}
		if a.CompareAndSwap(cur, v) {
			return v
		}
	}
}

// Min lowers a to at most v and returns the value a holds afterwards. It
// performs no write when a already holds v or less.
func Min(a *atomic.Int64, v int64) int64 {
	for {
		cur := a.Load()
		if cur <= v {
			return cur
		}
		if a.CompareAndSwap(cur, v) {
			return v
		}
	}
}

// AddBelow adds delta (> 0) to a only if the result stays at or below limit,
// and reports whether it did. Unlike Add-then-undo, a refused add never makes
// the word overshoot, so concurrent readers never see a value above limit.
func AddBelow(a *atomic.Int64, delta, limit int64) bool {
	for {
		cur := a.Load()
		if cur > limit-delta {
			return false
		}
		if a.CompareAndSwap(cur, cur+delta) {
			return true
		}
	}
}

// SubAbove subtracts delta (> 0) from a only if the result stays at or above
// floor, and reports whether it did.
func SubAbove(a *atomic.Int64, delta, floor int64) bool {
	for {
		cur := a.Load()
		if cur < floor+delta {
			return false
		}
		if a.CompareAndSwap(cur, cur-delta) {
			return true
		}
	}
}

// AddClamped adds delta to a, clamping the result to [lo, hi], and returns
// the new value.
func AddClamped(a *atomic.Int64, delta, lo, hi int64) int64 {
	for {
		cur := a.Load()
		next := min(max(SatAdd(cur, delta), lo), hi)
		if next == cur || a.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// SatAdd returns x+y, saturated at math.MaxInt64 and math.MinInt64 instead of
// wrapping around.
func SatAdd(x, y int64) int64 {
	s := x + y
	// Overflow happened iff x and y have the same sign and s has the other.
	if (x >= 0) == (y >= 0) && (s >= 0) != (x >= 0) {
		if x >= 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// SatMul returns x*y for x, y >= 0, saturated at math.MaxInt64. Negative
// inputs are treated as 0.
func SatMul(x, y int64) int64 {
	if x <= 0 || y <= 0 {
		return 0
	}
	if x > math.MaxInt64/y {
		return math.MaxInt64
	}
	return x * y
}

// Field is a bit field of a packed uint64 word: Width bits starting at bit
// Shift. Fields let a policy update several small values with one CAS, the
// way sync.WaitGroup packs its counter and waiter count:
//
//	63         Shift+Width   Shift          0
//	+---------+-------------+--------------+
//	| others  |    field    |    others    |
//	+---------+-------------+--------------+
type Field struct {
	Shift uint8 // position of the field's lowest bit
	Width uint8 // number of bits, 1..64
}

// Mask returns the largest value the field holds.
func (f Field) Mask() uint64 {
	if f.Width >= 64 {
		return math.MaxUint64
	}
	return 1<<f.Width - 1
}

// Get extracts the field from w.
func (f Field) Get(w uint64) uint64 { return w >> f.Shift & f.Mask() }

// Set returns w with the field replaced by v (truncated to the field width).
func (f Field) Set(w, v uint64) uint64 {
	m := f.Mask() << f.Shift
	return w&^m | v<<f.Shift&m
}

// Pack32 packs two 32-bit halves into one word: hi in bits 63..32, lo in
// bits 31..0.
func Pack32(hi, lo uint32) uint64 { return uint64(hi)<<32 | uint64(lo) }

// Unpack32 splits a word made by Pack32.
func Unpack32(w uint64) (hi, lo uint32) { return uint32(w >> 32), uint32(w) }
