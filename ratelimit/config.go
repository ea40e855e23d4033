package ratelimit

import (
	"math"
	"math/bits"
	"time"

	"github.com/rampart-go/rampart"
)

// Config configures a [Limiter]. Set exactly one of the three rate forms:
//
//   - Rate (admissions per second) with Burst;
//   - Limit admissions per Period (Burst defaults to Limit);
//   - a token bucket: Capacity tokens, refilled at RefillRate tokens per
//     second (refilled continuously, not in steps).
//
// All three are translated to the same GCRA state. Limit/Period is exact for
// any integers; Rate and RefillRate are floats, converted to the closest
// fraction p/q with q ≤ 2³¹ (exact for every integer rate and every rate
// with a short decimal expansion, e.g. 0.1 or 2.5 per second).
type Config struct {
	// Name identifies the limiter in its rejection error. Optional.
	Name string

	// Rate is the sustained rate in admissions per second, 1e-9 to 1e9.
	Rate float64
	// Burst is how many admissions may happen back to back after an idle
	// period, i.e. the bucket size. 0 means 1 for Rate, Limit for
	// Limit/Period, Capacity for the token bucket. Negative is invalid.
	Burst int

	// Limit is the number of admissions allowed per Period (with Burst
	// defaulting to Limit, a full Period's worth may come at once).
	Limit int
	// Period is the window of Limit. 0 means one second.
	Period time.Duration

	// Capacity is the token bucket's size: the most tokens it holds.
	Capacity int
	// RefillRate is the token bucket's refill rate in tokens per second.
	RefillRate float64

	// Ticker is the clock of the shorthands (Allow, Wait). nil means
	// [rampart.DefaultTicker].
	Ticker rampart.Ticker

	// CountStats turns on the Admitted and Rejected counters of [Stats].
	// Off by default because counting costs an atomic add on a shared word
	// per call, which on the reject path turns a read into a write.
	CountStats bool

	// Compact lays the instance out without cache-line padding: smaller
	// (128 B instead of 256 B), for the many cold instances (per-tenant,
	// per-route keys) where goroutines do not contend on one instance; the
	// default pads the words that many goroutines write on every call. The
	// figures are for an unnamed limiter whose interval is a whole number of
	// ns (1000 per second, 10 per 100 ms: 1e9·Period/Limit ns is whole); any
	// other interval adds a 32 B multiplier block; a Name its rejection
	// error, which New allocates with its message (96 to 112 B for a name
	// of up to 20 bytes, 176 B at 24, 224 B at 32; every unnamed limiter
	// shares one); OnRejected or CountStats a 32 B block, and CountStats
	// its two counters (16 B compact, a padded cache line pair each by
	// default); the first Wait that sleeps its Waited counter (8 B
	// compact, a padded cache line pair by default).
	Compact bool

	// OnRejected, when not nil, is called on every rejection with the
	// number of permits asked for and the wait in nanoseconds until they
	// would be admitted ([Never] for an n that can never be admitted). It
	// runs on the caller's goroutine; a panic in it is recovered and
	// counted in Stats().ListenerPanics.
	OnRejected func(n int, wait time.Duration)
}

// Rate limits of the configuration.
const (
	// MaxRate is the largest accepted rate: one admission per nanosecond.
	MaxRate = 1e9
	// maxNum bounds the interval numerator (ns) so that every product of
	// the unit conversions fits in 128 bits and every state word stays
	// below retired.
	maxNum = 1 << 61
	// maxTau bounds burst × units per interval.
	maxTau = 1 << 60
	// maxUnits is the largest reading in units: later readings count as it.
	maxUnits = 1<<62 - 1
)

// params is a rate and burst translated to GCRA, in "units": the emission
// interval T = num/den ns is held as the whole number k of units, so the
// unit is num/(den·k) ns, between 0.5 and 1 ns. Counting time in units makes
// every increment exact: nothing is rounded per admission.
//
// A reading t is at x = t·c units (c = den·k/num), usually not a whole
// number. Comparing a TAT with a reading uses floor(x), which is exact: for
// a whole TAT, floor(x) ≥ TAT exactly when x ≥ TAT. But a reading that
// starts a new phase (an idle limiter: TAT ≤ x) must put the TAT itself on
// the unit grid, and no grid point is right for every later admission. All
// exact instants are multiples of 1/den ns, so the phase may sit anywhere
// above x − c/den (the grid position of the instant 1/den ns earlier)
// without any admission coming early, and nowhere above x without some
// coming late. phase(t) is the least grid point above x − c/den:
// floor(x) when frac(x) < c/den = k/num (then exact), else floor(x)+1 (less
// than one unit late, never early). Whole-ns intervals (c = 1) are exact.
type params struct {
	k     int64 // units per emission interval, ≥ 1
	tau   int64 // burst·k: the tolerance, the most a TAT may lead now
	burst int64 // the most permits one call may take
	// origin is the reading that counts as unit 0: 0, or the first
	// reading of a clock that read below 0 when the limiter was built (a
	// ManualTicker started negative, a user Ticker with a later epoch),
	// so that its negative readings still move time (originOf). A
	// replacement state keeps its predecessor's.
	origin int64
	num    uint64 // interval numerator (ns)
	den    uint64 // interval denominator
	denK   uint64 // den·k
	// frac holds the ns → units multipliers of an interval that is not a
	// whole number of ns; nil for the common whole-ns intervals, where
	// units(t) = t: a pointer instead of 32 B in every state, since most
	// limiters never use them.
	frac     *fracParams
	unitIsNs bool // c = 1 (a whole-ns interval, frac == nil): units(t) = t, no multiplication
	compact  bool // the limiter's Config.Compact: the layout of the states it publishes
}

// fracParams are the multipliers of an interval of num/den ns that is not a
// whole number of ns (den ≥ 2).
type fracParams struct {
	// ns → units: units(t) = floor(t·c) with c = den·k/num ∈ [1, 2),
	// computed as floor(t·M / 2¹²⁷) with the 128-bit M = ceil(c·2¹²⁷) =
	// mulHi·2⁶⁴ + mulLo. Exact for every t < 2⁶³: t·c has a denominator
	// below 2⁶¹, so it is either an integer or at least 2⁻⁶¹ below the
	// next one, and the excess of M adds less than t·2⁻¹²⁷ < 2⁻⁶⁴.
	mulHi, mulLo uint64
	// upFrac: the phase of a reading rounds up when the fraction bits of
	// t·M/2¹²⁷ (as a 64-bit fraction) are ≥ upFrac, i.e. frac(x) ≥ k/num:
	// upFrac = floor(k·2⁶⁴/num) − 2. Exact: the computed fraction is within
	// (−2⁻⁶³, 2⁻⁶⁴) of frac(x), a multiple of 1/num ≥ 2⁻⁶¹ apart from the
	// next, so the threshold separates i/num ≥ k/num from i/num < k/num.
	upFrac uint64
	inv    uint64 // units → ns, approximately: inv = ceil(2⁶³·num/(den·k)) ≤ 2⁶³
}

// originOf is the origin for a clock whose reading at construction is now:
// 0 for the usual clocks, which never read below 0; else that reading.
// Readings before the origin count as unit 0.
func originOf(now int64) int64 { return min(now, 0) }

// newParams builds params for an interval of num/den ns and burst.
func newParams(num, den uint64, burst int64, field string) (params, error) {
	if g := gcd(num, den); g > 1 {
		num, den = num/g, den/g
	}
	if num > maxNum {
		return params{}, rampart.NewConfigError("ratelimit", field, "gives an interval of %d/%d ns, longer than %d ns", num, den, uint64(maxNum))
	}
	if num < den {
		return params{}, rampart.NewConfigError("ratelimit", field, "gives an interval of %d/%d ns, which rounds to 0 (at most %g per second)", num, den, MaxRate)
	}
	k := (num + den - 1) / den // ceil(num/den) ≥ 1
	hi, lo := bits.Mul64(den, k)
	if hi != 0 || lo > 2*num { // den·k < num+den ≤ 2·num; checked for safety
		return params{}, rampart.NewConfigError("ratelimit", field, "interval %d/%d ns cannot be represented", num, den)
	}
	denK := lo
	if burst < 1 {
		return params{}, rampart.NewConfigError("ratelimit", "Burst", "must be at least 1, got %d", burst)
	}
	if uint64(burst) > maxTau/k {
		return params{}, rampart.NewConfigError("ratelimit", "Burst", "%d times an interval of %d ns overflows", burst, k)
	}
	p := params{k: int64(k), tau: burst * int64(k), burst: burst, num: num, den: den, denK: denK, unitIsNs: denK == num}
	if denK == num { // a whole-ns interval: units are ns, no multipliers
		return p, nil
	}
	// den ≥ 2, so k < num. M = ceil(denK·2¹²⁷ / num) < 2¹²⁸ since
	// denK < 2·num: a long division of the 192-bit denK·2¹²⁷ (words
	// denK>>1, (denK&1)<<63, 0; the top word is below num) by num, without
	// allocating (every byte New allocates stays with the instance).
	mulHi, r := bits.Div64(denK>>1, (denK&1)<<63, num)
	mulLo, r := bits.Div64(r, 0, num)
	if r != 0 {
		var c uint64
		mulLo, c = bits.Add64(mulLo, 1, 0)
		mulHi += c
	}
	// inv = ceil(num·2⁶³ / denK); num ≤ denK so it is at most 2⁶³.
	inv, rem := bits.Div64(num>>1, num<<63, denK)
	if rem != 0 {
		inv++
	}
	q, _ := bits.Div64(k, 0, num) // floor(k·2⁶⁴/num) ≥ 2⁶⁴/num ≥ 8
	p.frac = &fracParams{mulHi: mulHi, mulLo: mulLo, upFrac: q - 2, inv: inv}
	return p, nil
}

// units converts a clock reading to units, exactly floor((now-origin)·c)
// where c = den·k/num ∈ [1, 2): two multiplications, no division. A reading
// before the origin counts as 0; one beyond maxUnits units as maxUnits.
func (p *params) units(now int64) int64 {
	if p.origin != 0 { // predictable: 0 for every clock that starts at 0 or later
		now = p.shift(now)
	}
	return p.unitsOf(now)
}

// unitsPhase returns units(now) and phase(now): where a TAT set by this
// reading starts (see params). The comparison uses the first, the new phase
// the second; they differ by at most one unit, only for intervals that are
// not a whole number of ns.
func (p *params) unitsPhase(now int64) (u, phase int64) {
	if p.origin != 0 { // predictable, as in units
		now = p.shift(now)
	}
	if p.unitIsNs { // predictable: the common whole-ns intervals
		u = min(max(now, 0), maxUnits)
		return u, u
	}
	f := p.frac
	uu := uint64(max(now, 0))
	h1, l1 := bits.Mul64(uu, f.mulHi)
	h2, _ := bits.Mul64(uu, f.mulLo)
	lo, carry := bits.Add64(l1, h2, 0)
	u = int64(min((h1+carry)<<1|lo>>63, maxUnits))
	// Up one unit when frac(x) ≥ k/num (the grid point below would admit
	// some later permit early): no borrow. Branch-free, since the
	// fraction of a reading is random.
	_, below := bits.Sub64(lo<<1, f.upFrac, 0)
	return u, min(u+1-int64(below), maxUnits)
}

// shift is now - origin (origin < 0), saturated.
func (p *params) shift(now int64) int64 {
	if t := now - p.origin; t >= now {
		return t
	}
	return math.MaxInt64 // wrapped
}

// unitsOf is units for a reading already taken from the origin.
func (p *params) unitsOf(t int64) int64 {
	if p.unitIsNs { // predictable branch: the common whole-ns intervals
		return min(max(t, 0), maxUnits)
	}
	f := p.frac
	u := uint64(max(t, 0))
	h1, l1 := bits.Mul64(u, f.mulHi)
	h2, _ := bits.Mul64(u, f.mulLo)
	lo, carry := bits.Add64(l1, h2, 0) // floor(u·M / 2⁶⁴) = (h1+carry)·2⁶⁴ + lo
	return int64(min((h1+carry)<<1|lo>>63, maxUnits))
}

// earliest returns the least reading t ≥ origin with units(t) ≥ target:
// the exact instant at which a TAT of target+tau admits.
func (p *params) earliest(target int64) int64 {
	return p.earliestOf(target) + p.origin // origin ≤ 0 and the result ≥ 0: no overflow
}

// earliestOf is earliest for readings taken from the origin.
func (p *params) earliestOf(target int64) int64 {
	if target <= 0 {
		return 0
	}
	if target > maxUnits {
		return math.MaxInt64 / 2
	}
	if p.unitIsNs { // c = 1: the reading is the target
		return target
	}
	hi, lo := bits.Mul64(uint64(target), p.frac.inv) // ≈ target/c, within a unit
	t := int64(hi<<1 | lo>>63)
	// Both multipliers are within a unit of exact: a step or two at most.
	for p.unitsOf(t) < target {
		t++
	}
	for t > 0 && p.unitsOf(t-1) >= target {
		t--
	}
	return t
}

// waitFor returns how many ns after now a TAT of next admits (≥ 1), or
// Never when that is past the last reading the limiter counts (maxUnits:
// time stands still there, so the wait would never end).
func (p *params) waitFor(now, next int64) int64 {
	if next-p.tau > maxUnits {
		return never
	}
	return waitUntil(p.earliest(next-p.tau), now)
}

// waitUntil returns the ns from now to the reading at (≥ 1), saturated
// at the largest finite wait, Never−1: from a reading far below the origin
// (any int64 is a reading, math.MinInt64 too) at−now overflows, and a
// wrapped sum would say "retry at once" to a caller admitted no sooner.
// One compare, on rejection paths only.
func waitUntil(at, now int64) int64 {
	if now < 0 && at >= now+math.MaxInt64 { // at−now ≥ Never: it would wrap or say Never
		return never - 1
	}
	return max(at-now, 1)
}

// interval returns the emission interval rounded to whole ns.
func (p *params) interval() time.Duration {
	return time.Duration((p.num + p.den/2) / p.den)
}

// ratePerSecond returns the rate as a float.
func (p *params) ratePerSecond() float64 {
	return float64(p.den) * 1e9 / float64(p.num)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// rational returns p/q ≈ r with q ≤ 2³¹, the last continued-fraction
// convergent within that bound (exact when r is such a fraction).
func rational(r float64) (p, q uint64) {
	const maxQ = 1 << 31 // so that 1e9·q stays below maxNum
	// Convergents h/k of the continued fraction of r.
	h0, h1 := uint64(0), uint64(1)
	k0, k1 := uint64(1), uint64(0)
	x := r
	for range 64 {
		a := math.Floor(x)
		if a > 1<<62 {
			break
		}
		ai := uint64(a)
		h2 := ai*h1 + h0
		k2 := ai*k1 + k0
		if k2 > maxQ || h2 > 1<<62 {
			break
		}
		h0, h1, k0, k1 = h1, h2, k1, k2
		frac := x - a
		if frac < 1e-12*max(1, x) || float64(h1)/float64(k1) == r {
			break
		}
		x = 1 / frac
	}
	return h1, k1
}

// rateParams translates a per-second float rate and a burst.
func rateParams(rate float64, burst int64, field string) (params, error) {
	if math.IsNaN(rate) || math.IsInf(rate, 0) || rate <= 0 {
		return params{}, rampart.NewConfigError("ratelimit", field, "must be a positive finite number, got %v", rate)
	}
	if rate > MaxRate {
		return params{}, rampart.NewConfigError("ratelimit", field, "%v per second gives an interval that rounds to 0 ns (at most %g)", rate, MaxRate)
	}
	p, q := rational(rate)
	if p == 0 || q == 0 {
		return params{}, rampart.NewConfigError("ratelimit", field, "%v per second gives an interval longer than %d ns", rate, uint64(maxNum))
	}
	// T = 1e9·q/p ns.
	hi, num := bits.Mul64(q, 1e9)
	if hi != 0 || num > maxNum {
		return params{}, rampart.NewConfigError("ratelimit", field, "%v per second gives an interval longer than %d ns", rate, uint64(maxNum))
	}
	return newParams(num, p, burst, field)
}

// build validates c and returns its GCRA parameters.
func (c *Config) build() (params, error) {
	forms := 0
	if c.Rate != 0 {
		forms++
	}
	if c.Limit != 0 || c.Period != 0 {
		forms++
	}
	if c.Capacity != 0 || c.RefillRate != 0 {
		forms++
	}
	if forms != 1 {
		return params{}, rampart.NewConfigError("ratelimit", "Rate", "set exactly one of Rate, Limit/Period, Capacity/RefillRate (%d set)", forms)
	}
	if c.Burst < 0 {
		return params{}, rampart.NewConfigError("ratelimit", "Burst", "must be at least 1, got %d", c.Burst)
	}
	switch {
	case c.Rate != 0:
		burst := int64(c.Burst)
		if burst == 0 {
			burst = 1
		}
		return rateParams(c.Rate, burst, "Rate")
	case c.Limit != 0 || c.Period != 0:
		if c.Limit < 1 {
			return params{}, rampart.NewConfigError("ratelimit", "Limit", "must be at least 1, got %d", c.Limit)
		}
		period := c.Period
		if period == 0 {
			period = time.Second
		}
		if period < 0 {
			return params{}, rampart.NewConfigError("ratelimit", "Period", "must be positive, got %v", period)
		}
		burst := int64(c.Burst)
		if burst == 0 {
			burst = int64(c.Limit)
		}
		return newParams(uint64(period), uint64(c.Limit), burst, "Period")
	default:
		if c.Capacity < 1 {
			return params{}, rampart.NewConfigError("ratelimit", "Capacity", "must be at least 1, got %d", c.Capacity)
		}
		if c.Burst != 0 && c.Burst != c.Capacity {
			return params{}, rampart.NewConfigError("ratelimit", "Burst", "must be 0 or equal Capacity for a token bucket, got %d", c.Burst)
		}
		return rateParams(c.RefillRate, int64(c.Capacity), "RefillRate")
	}
}
