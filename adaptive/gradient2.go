package adaptive

import (
	"fmt"
	"math"
)

// Gradient2 is Netflix's Gradient2 algorithm: it compares a short-term RTT
// (this window's mean) with a long-term one (an exponential moving average
// of the window means over LongWindow windows) and scales the limit by their
// ratio, plus a constant headroom that lets it grow. Per window:
//
//	rtt      = mean RTT of the window's successes and timed drops
//	long     ← long + (rtt − long) · 2/(LongWindow+1)
//	if long / rtt > 2:      long ← long · 0.95   (recover fast after a spike)
//	MaxInFlight · 2 < L:    L unchanged (app-limited)
//	gradient = clamp(Tolerance · long / rtt, 0.5, 1)
//	L'       = L · gradient + QueueSize
//	L        ← (1 − Smoothing) · L + Smoothing · L'
//
// While the short-term RTT stays within Tolerance of the long-term one the
// gradient is 1 and the limit grows by QueueSize·Smoothing per window; once
// queueing pushes the RTT past that, the gradient shrinks the limit
// multiplicatively (never by more than half per window). It tracks changes
// of the dependency's latency better than [Vegas], because its reference
// (the long-term average) moves with them.
//
// Gradient2 has no drop rule, as Netflix's Gradient2Limit has none: the
// gradient of the RTT is its only signal, and a Failure call counts only
// through its RTT. rtt above is the mean over the window's successes
// and its timed drops (Sample.DropRTT, weighted by Sample.Drops, each
// drop's RTT bounded at 2·long), as in Netflix's window average, so calls
// that time out under a queue raise the short-term RTT and shrink the
// limit, while a few calls lost whatever the load move the mean by their
// share of the calls only, however long their timeout (unbounded, one 30 s
// timeout among two thousand 10 ms calls per window weighed as 3000 calls
// and took the limit from 116 to 13). (Halving the gradient on any
// drop in a window held the limit at 2·QueueSize = 8 under one timeout in
// two thousand calls per window; ignoring drops outright, RTTs included,
// left the simulation's limit at 55 when the server's capacity fell from 50
// to 10 and 99 % of the calls timed out: TestSimRealOverloadStillBacksOff.) A window whose drops were
// none of them timed (Acquire/Release samples some) and which has no success
// leaves the limit unchanged.
//
// Its weakness is drift: under a standing queue the long-term average
// slowly rises to meet the short-term one. Every ProbeInterval windows rampart
// therefore re-measures the no-load RTT as Envoy's gradient controller does,
// after 10 windows and then every ProbeInterval windows: the limit drops to
// ProbeLimit until the calls in flight drain to it (or, for calls hung until
// a long timeout, on top of them), one more window lets the last old calls
// finish, the mean RTT of the next window (calls all admitted
// at low concurrency) becomes the long-term average, and the previous limit
// is restored. The first probe also rescues a limit that started far too
// high, whose long-term average was learnt from queued calls.
//
// The zero value is valid: Tolerance 1.05, QueueSize 4, Smoothing 0.2,
// LongWindow 600, ProbeInterval 100, ProbeLimit 1. (Netflix defaults to a
// Tolerance of 1.5, which lets the RTT rise about 50 % above the long-term
// average, i.e. a standing queue of about half the capacity; with 1.05 the
// limit settles 10–20 % above the simulated server's capacity.)
type Gradient2 struct {
	// Tolerance is the ratio of short- to long-term RTT accepted before the
	// limit shrinks, at least 1. Default 1.05.
	Tolerance float64
	// QueueSize is the headroom added every window. Default 4.
	QueueSize float64
	// Smoothing is the weight of the new limit, in (0, 1]. Default 0.2.
	Smoothing float64
	// LongWindow is the number of windows the long-term average spans.
	// Default 600 (Netflix's default).
	LongWindow int
	// ProbeInterval is the number of windows between re-measurements of
	// the no-load RTT; negative disables them. Default 100.
	// A probe holds the whole limit low, so for about four windows
	// nearly every call is rejected, partitions included (about 3–4 % of
	// calls at the defaults in the simulation); negative disables probes
	// where that matters more than baseline drift.
	ProbeInterval int
	// ProbeLimit is the limit held during a re-measurement. Default 1 (the
	// limiter's MinLimit applies).
	ProbeLimit int
}

// Validate reports an invalid field. [New] calls it.
func (g Gradient2) Validate() error {
	switch {
	case g.Tolerance != 0 && !(g.Tolerance >= 1) || math.IsInf(g.Tolerance, 0):
		return fmt.Errorf("Gradient2.Tolerance must be at least 1, got %v", g.Tolerance)
	case g.QueueSize < 0 || math.IsNaN(g.QueueSize) || math.IsInf(g.QueueSize, 0):
		return fmt.Errorf("Gradient2.QueueSize must not be negative, got %v", g.QueueSize)
	case g.Smoothing != 0 && !(g.Smoothing > 0 && g.Smoothing <= 1):
		return fmt.Errorf("Gradient2.Smoothing must be in (0, 1], got %v", g.Smoothing)
	case g.LongWindow < 0:
		return fmt.Errorf("Gradient2.LongWindow must not be negative, got %v", g.LongWindow)
	case g.ProbeLimit < 0:
		return fmt.Errorf("Gradient2.ProbeLimit must not be negative, got %v", g.ProbeLimit)
	}
	return nil
}

// Start implements [Algorithm].
func (g Gradient2) Start(initial, minLimit, maxLimit float64) Controller {
	c := &gradient2{tolerance: g.Tolerance, queue: g.QueueSize, smoothing: g.Smoothing}
	if c.tolerance == 0 {
		c.tolerance = 1.05
	}
	if c.queue == 0 {
		c.queue = 4
	}
	if c.smoothing == 0 {
		c.smoothing = 0.2
	}
	n := g.LongWindow
	if n == 0 {
		n = 600
	}
	c.alpha = 2 / float64(n+1)
	c.probe.every = g.ProbeInterval
	if c.probe.every == 0 {
		c.probe.every = 100
	}
	c.probe.limit = max(float64(g.ProbeLimit), 1, minLimit)
	return c
}

type gradient2 struct {
	tolerance, queue, smoothing float64
	alpha                       float64 // EMA weight of a new window
	long                        float64 // long-term mean RTT, ns; 0 = none yet
	probe                       prober
}

func (c *gradient2) Update(s Sample) float64 {
	if lim, handled, measured := c.probe.step(s); handled {
		if measured {
			c.long = float64(s.AvgRTT)
		}
		return lim
	}
	l := s.Limit
	gradient := 1.0
	n, mean := rttOfAll(s, c.long)
	if n > 0 {
		short := max(mean, 1)
		if c.long == 0 {
			c.long = short
		} else {
			c.long += (short - c.long) * c.alpha
		}
		if c.long/short > 2 {
			c.long *= 0.95
		}
		gradient = max(0.5, min(1, c.tolerance*c.long/short))
	}
	if s.AppLimited() || n == 0 { // no drop rule: see Gradient2
		return l
	}
	next := l*gradient + c.queue
	return (1-c.smoothing)*l + c.smoothing*next
}

// rttOfAll returns the number of calls behind Gradient2's short-term RTT
// and that RTT: the mean over the successes and, when some Failure call
// was timed, the drops too, weighted by their counts (Netflix's window
// average takes every sample, dropped or not). Each drop counts as one
// call whose RTT is DropRTT bounded by dropCap: twice the long-term
// average long (twice the successes' mean before there is one). Netflix
// needs no bound because its timeouts are the client's, a small multiple
// of the RTT; rampart's drops are whatever the caller classified as a
// Failure, and a 30 s client timeout among 10 ms calls would otherwise
// weigh as 3000 calls. With the bound a window whose fraction f of calls
// timed out has a short-term RTT of at most long·(1+f): a few drops move
// the gradient by their share of the calls, and a window mostly dropped
// reaches about 2·long, the gradient's floor of 0.5.
func rttOfAll(s Sample, long float64) (n, mean float64) {
	n, sum := float64(max(s.Count, 0)), float64(max(s.Count, 0))*float64(s.AvgRTT)
	if s.DropRTT > 0 && s.Drops > 0 {
		rtt := float64(s.DropRTT)
		ref := long
		if ref == 0 && s.Count > 0 {
			ref = float64(s.AvgRTT)
		}
		if ref > 0 {
			rtt = min(rtt, dropCap*ref)
		}
		n += float64(s.Drops)
		sum += float64(s.Drops) * rtt
	}
	if n == 0 {
		return 0, 0
	}
	return n, sum / n
}

// dropCap bounds a timed drop's RTT in Gradient2's short-term mean, as a
// multiple of the long-term average (see rttOfAll).
const dropCap = 2
