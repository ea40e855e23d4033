package adaptive

import (
	"fmt"
	"math"
)

// Vegas is the delay-based algorithm of TCP Vegas as Netflix's
// concurrency-limits adapts it. It keeps a baseline RTT (the latency
// without queueing) and estimates how many calls are queued at the
// dependency from Little's law:
//
//	queue = L · (1 − baseline / AvgRTT)
//
// The baseline is the least window mean RTT seen. (Netflix compares a
// sample with the least single RTT; comparing a mean with a minimum reads
// service-time jitter as queueing, and comparing two minima misses most of
// the queue: in the simulation both left the limit 20–25 % above capacity.)
//
// With α = Alpha·log10(L), β = Beta·log10(L) and t = log10(L) (each log10
// taken as at least 1, so that steps never vanish at L = 1), per window:
//
//	DropRate > DropThreshold:  L ← L − log10(L)
//	MaxInFlight · 2 < L:       L unchanged (app-limited: no evidence)
//	queue ≤ t:                 L ← L + β          (far from saturation)
//	queue < α:                 L ← L + log10(L)   (approaching it)
//	queue > β:                 L ← L − max(log10(L), (queue − β)/2)
//	otherwise:                 L unchanged        (α ≤ queue ≤ β: the target)
//	then                       L ← (1 − Smoothing) · L_old + Smoothing · L
//
// (DropRate is Drops / (Drops + Count), [Sample.DropRate]; DropThreshold
// defaults to 5 %. Netflix's VegasLimit decreases on any drop in a window,
// so one timeout in thousands of calls, lost whatever the load, every
// window holds the limit near its minimum; a window whose drops stay under
// the threshold is judged by its latency like any other.)
//
// So the limit settles where a few calls (between α and β) wait at the
// dependency: the capacity plus a small queue. Alpha and Beta default to 2
// and 4 (Netflix: 3 and 6), a smaller standing queue. The decrease term
// (queue − β)/2 is rampart's: Netflix subtracts only log10(L), so a limit
// ten times too high takes hundreds of windows to come down; with the
// larger step it halves its excess each window.
//
// The baseline is re-measured after 10 windows and then every ProbeInterval
// windows (Envoy's rule): the limit drops to ProbeLimit until the calls in
// flight drain to it (calls that do not drain, hung until a long timeout,
// are counted as stuck and ProbeLimit is held on top of them), one more
// window lets the last old calls finish, the
// mean RTT of the next window becomes the baseline, and the previous limit
// is restored.
// Between probes the baseline only decreases.
//
// The zero value is valid: Alpha 2, Beta 4, Smoothing 1, ProbeInterval 100,
// ProbeLimit 1.
type Vegas struct {
	Alpha     float64 // lower queue target, times log10(L). Default 2 (Netflix: 3).
	Beta      float64 // upper queue target, times log10(L). Default 4 (Netflix: 6); must exceed Alpha.
	Smoothing float64 // weight of the new limit, in (0, 1]. Default 1.
	// ProbeInterval is the number of windows between baseline
	// re-measurements; negative disables them. Default 100.
	// A probe holds the whole limit low, so for about four windows
	// nearly every call is rejected, partitions included (about 3–4 % of
	// calls at the defaults in the simulation); negative disables probes
	// where that matters more than baseline drift.
	ProbeInterval int
	// ProbeLimit is the limit held during a re-measurement. Default 1 (the
	// limiter's MinLimit applies).
	ProbeLimit int
	// DropThreshold is the drop rate (Failure calls as a fraction of the
	// window's Failure and successful calls: [Sample.DropRate]) above
	// which a window decreases the limit whatever its latency, in [0, 1].
	// Default (0) 0.05. Any value below one drop in a window's calls, such
	// as 1e-9, decreases on any drop (Netflix's VegasLimit); 1 never does
	// (latency alone drives the limit).
	DropThreshold float64
}

// Validate reports an invalid field. [New] calls it.
func (v Vegas) Validate() error {
	a, b := v.defaults()
	switch {
	case !(v.Alpha >= 0) || math.IsInf(v.Alpha, 0):
		return fmt.Errorf("Vegas.Alpha must be finite and not negative, got %v", v.Alpha)
	case !(v.Beta >= 0) || math.IsInf(v.Beta, 0):
		// +Inf would never see a queue: a limit that only grows.
		return fmt.Errorf("Vegas.Beta must be finite and not negative, got %v", v.Beta)
	case b <= a:
		return fmt.Errorf("Vegas.Beta (%v) must exceed Alpha (%v)", b, a)
	case v.Smoothing != 0 && !(v.Smoothing > 0 && v.Smoothing <= 1):
		return fmt.Errorf("Vegas.Smoothing must be in (0, 1], got %v", v.Smoothing)
	case v.ProbeLimit < 0:
		return fmt.Errorf("Vegas.ProbeLimit must not be negative, got %v", v.ProbeLimit)
	}
	return validDropThreshold("Vegas", v.DropThreshold)
}

func (v Vegas) defaults() (alpha, beta float64) {
	alpha, beta = v.Alpha, v.Beta
	if alpha == 0 {
		alpha = 2
	}
	if beta == 0 {
		beta = 4
	}
	return alpha, beta
}

// Start implements [Algorithm].
func (v Vegas) Start(initial, minLimit, maxLimit float64) Controller {
	c := &vegas{smoothing: v.Smoothing, dropThreshold: dropThresholdOr(v.DropThreshold)}
	c.alpha, c.beta = v.defaults()
	if c.smoothing == 0 {
		c.smoothing = 1
	}
	c.probe.every = v.ProbeInterval
	if c.probe.every == 0 {
		c.probe.every = 100
	}
	c.probe.limit = max(float64(v.ProbeLimit), 1, minLimit)
	return c
}

type vegas struct {
	alpha, beta, smoothing float64
	dropThreshold          float64
	baseline               int64 // least window mean RTT since the last probe; 0 = none yet
	probe                  prober
}

func (c *vegas) Update(s Sample) float64 {
	if lim, handled, measured := c.probe.step(s); handled {
		if measured {
			c.baseline = int64(s.AvgRTT)
		}
		return lim
	}
	if s.Count > 0 && (c.baseline == 0 || int64(s.AvgRTT) < c.baseline) {
		c.baseline = int64(s.AvgRTT)
	}
	l := s.Limit
	lg := log10(l)
	var next float64
	switch {
	case lossy(s, c.dropThreshold):
		next = l - lg
	case s.AppLimited() || s.Count == 0 || c.baseline == 0:
		return l
	default:
		queue := l * (1 - float64(c.baseline)/float64(max(s.AvgRTT, 1)))
		alpha, beta := c.alpha*lg, c.beta*lg
		switch {
		case queue <= lg:
			next = l + beta
		case queue < alpha:
			next = l + lg
		case queue > beta:
			next = l - max(lg, (queue-beta)/2)
		default:
			return l
		}
	}
	return (1-c.smoothing)*l + c.smoothing*next
}
