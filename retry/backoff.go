package retry

import (
	"math"
	"math/rand/v2"

	"github.com/rampart-go/rampart/internal/atomicx"
)

// Backoff selects how the delay grows between attempts. The formulas are in
// the package documentation; n is the number of attempts made so far (1
// before the first retry).
type Backoff uint8

const (
	// FullJitter waits uniform[0, exp(n)] (the zero value: AWS's
	// recommendation, it spreads a herd of clients best for the least work).
	FullJitter Backoff = iota
	// Exponential waits exp(n) = min(MaxDelay, BaseDelay × Multiplier^(n-1)).
	Exponential
	// Constant waits BaseDelay.
	Constant
	// Linear waits min(MaxDelay, BaseDelay + (n-1) × Increment).
	Linear
	// EqualJitter waits exp(n)/2 + uniform[0, exp(n)/2].
	EqualJitter
	// DecorrelatedJitter waits min(MaxDelay, uniform[BaseDelay, prev ×
	// Multiplier]), where prev is the previous delay (BaseDelay before the
	// first retry) and Multiplier defaults to 3.
	DecorrelatedJitter
	numBackoffs
)

var backoffNames = [...]string{"full-jitter", "exponential", "constant", "linear",
	"equal-jitter", "decorrelated-jitter"}

// String returns the kind's name ("full-jitter").
func (b Backoff) String() string {
	if b < numBackoffs {
		return backoffNames[b]
	}
	return "invalid"
}

// backoff is the validated, precomputed delay function of a Policy.
// Its kind is kept beside it (settings.kind), in a word that has room.
type backoff struct {
	base int64               // BaseDelay, ns
	max  int64               // MaxDelay, ns (>= base)
	inc  int64               // Linear increment, ns
	mult float64             // multiplier (>= 1)
	rand func(n int64) int64 // Config.Rand; nil = math/rand/v2
}

// between returns a uniform draw in [lo, hi] (lo <= hi).
func (b *backoff) between(lo, hi int64) int64 {
	if hi <= lo {
		return lo
	}
	span := hi - lo
	if span < math.MaxInt64 {
		span++ // inclusive upper bound
	}
	var r int64
	if b.rand != nil {
		r = b.rand(span)
		if r < 0 || r >= span { // a test source out of contract: clamp, never panic
			r = min(max(r, 0), span-1)
		}
	} else {
		r = rand.Int64N(span) // per-P ChaCha8, no lock, no allocation
	}
	return lo + r
}

// exp returns min(max, base × mult^(n-1)) without overflow, for n >= 1.
func (b *backoff) exp(n int) int64 {
	d := b.base
	if n <= 1 || d <= 0 || b.mult == 1 {
		return min(d, b.max)
	}
	if m := int64(b.mult); m >= 2 && m < 1<<62 && float64(m) == b.mult {
		// A whole-number multiplier: repeated multiplication, at most 63
		// rounds, since each at least doubles d until it reaches max.
		for i := 1; i < n; i++ {
			d = atomicx.SatMul(d, m)
			if d >= b.max {
				return b.max
			}
		}
		return d
	}
	// A fractional multiplier: one Pow, compared in float64 before the
	// conversion so that a huge value saturates at max.
	f := float64(d) * math.Pow(b.mult, float64(n-1))
	if !(f < float64(b.max)) { // also catches +Inf and NaN
		return b.max
	}
	return int64(f)
}

// delay returns the delay of kind before the retry that follows attempt n
// (n >= 1); prev is the previous delay (0 when unknown), used by
// DecorrelatedJitter.
func (b *backoff) delay(kind Backoff, n int, prev int64) int64 {
	switch kind {
	case Constant:
		return b.base
	case Linear:
		return min(atomicx.SatAdd(b.base, atomicx.SatMul(int64(n-1), b.inc)), b.max)
	case Exponential:
		return b.exp(n)
	case FullJitter:
		return b.between(0, b.exp(n))
	case EqualJitter:
		e := b.exp(n)
		half := e / 2
		return (e - half) + b.between(0, half)
	case DecorrelatedJitter:
		if prev < b.base {
			prev = b.base
		}
		var hi int64
		if f := float64(prev) * b.mult; f < float64(math.MaxInt64) {
			hi = int64(f)
		} else {
			hi = math.MaxInt64
		}
		return min(b.between(b.base, hi), b.max)
	}
	return b.base
}
