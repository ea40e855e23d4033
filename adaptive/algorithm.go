package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Algorithm computes a [Limiter]'s concurrency limit from what the last
// window observed. It is the limiter's pluggable seam: [AIMD], [Vegas] and
// [Gradient2] implement it, and so may user code.
//
// An Algorithm value is a configuration: [New] calls Start once to create the
// per-limiter [Controller] that holds the algorithm's state, so one Algorithm
// value may configure many limiters. [Limiter.Update] calls Start again,
// at the limiter's current limit, only when given an Algorithm other than
// the one in force (not an equal value).
type Algorithm interface {
	// Start returns a fresh controller for one limiter whose limit starts
	// at initial and is kept within [min, max].
	Start(initial, min, max float64) Controller
}

// Controller is one limiter's running instance of an [Algorithm].
//
// The limiter calls Update once per window, from the goroutine that crossed
// the window boundary; calls never overlap, so a Controller needs no
// synchronisation. A window normally closes on a release; one that stays
// due for a whole window more while calls are rejected (every call in
// flight is stalled, as when a long call holds the one slot of a baseline
// probe) is closed by a rejection instead, and its Sample may then hold no
// completed call (Count and Drops 0): no evidence, on which the built-in
// algorithms keep the limit (their probes move on). Update returns the new limit (a fraction is fine: the
// limiter keeps the fraction and publishes the floor). The limiter clamps the
// result to [MinLimit, MaxLimit]; a NaN result leaves the limit unchanged.
type Controller interface {
	Update(s Sample) float64
}

// Sample is what one window observed, handed to [Controller.Update].
//
// Drops and Count give the window's drop rate ([Sample.DropRate]): the
// built-in algorithms react to that rate, not to one drop ([Vegas] and
// [AIMD] above their DropThreshold, default 5 %; [Gradient2] not at all).
//
// RTTs are in nanoseconds, measured from [Limiter.AcquireAt] to
// [Limiter.ReleaseAt] (or from [Limiter.Acquire] to [Limiter.Release]). AvgRTT,
// MinRTT, Count and Samples are those of calls released with [rampart.Success].
// Calls released with [rampart.Failure] count in Drops, and the timed ones' RTT
// (every one with AcquireAt/ReleaseAt, a sample with Acquire/Release) in DropRTT;
// calls released with [rampart.Ignored] appear nowhere.
//
// With Acquire/Release (and Do, Call) only a sample of the calls is timed (see
// [Limiter.Acquire]): a call timed at stride s stands for s calls, so Count
// and AvgRTT are estimates over every success of the window (weighted by
// stride, unbiased even when the stride changes within the window), Samples
// is the number of timed calls behind them, and MinRTT is the least of the
// timed calls, at or above the true least. With AcquireAt/ReleaseAt every
// success is timed and Count equals Samples.
type Sample struct {
	Now         int64         // the time of the release (or, for a stalled window, the rejection) that closed the window
	Limit       float64       // the current (unclamped-fraction) limit
	Count       int64         // successful calls completed in the window (estimated under sampling: Σ stride of the timed ones)
	Samples     int64         // timed successes behind AvgRTT and MinRTT
	Drops       int64         // calls released as Failure (timeouts, overload errors), every one
	AvgRTT      time.Duration // mean RTT of the successful calls, stride-weighted (0 when Count is 0)
	DropRTT     time.Duration // mean RTT of the timed Failure calls, stride-weighted (0 when none was timed)
	MinRTT      time.Duration // least RTT of the timed successful calls (0 when Count is 0)
	MaxInFlight int64         // the most calls in flight seen by any call of the window, itself included
	InFlight    int64         // calls in flight when the window closed
}

// DropRate returns the fraction of the window's calls with an outcome that
// were Failure: Drops / (Drops + Count), 0 for a window with neither. Drops
// is exact; under Acquire/Release's RTT sampling Count is the stride-weighted
// estimate, so the rate is an estimate too (about ±1/√Samples relative).
// Ignored calls count in neither term.
func (s Sample) DropRate() float64 {
	if s.Drops <= 0 {
		return 0
	}
	d := float64(s.Drops)
	return d / (d + float64(max(s.Count, 0)))
}

// defaultDropThreshold is the drop rate ([Sample.DropRate]) above which
// [Vegas] and [AIMD] treat a window as a loss when their DropThreshold is 0:
// 5 %, so that a few calls lost whatever the load (a network timeout, a
// restarted instance, 1 % or less in the simulation) are not read as
// overload, while a real overload, whose drops grow with the queue, crosses
// it within a window or two.
const defaultDropThreshold = 0.05

// validDropThreshold checks a DropThreshold field: in [0, 1], NaN refused.
func validDropThreshold(alg string, v float64) error {
	if !(v >= 0 && v <= 1) {
		return fmt.Errorf("%s.DropThreshold must be in [0, 1] (0: default %v), got %v", alg, defaultDropThreshold, v)
	}
	return nil
}

// dropThresholdOr returns v, or defaultDropThreshold when v is 0.
func dropThresholdOr(v float64) float64 {
	if v == 0 {
		return defaultDropThreshold
	}
	return v
}

// lossy reports whether s counts as a loss for a drop threshold: its drop
// rate exceeds it (strictly, so that a threshold of 1 never fires).
func lossy(s Sample, threshold float64) bool {
	return s.Drops > 0 && s.DropRate() > threshold
}

// AppLimited reports whether the window never used half of the limit: then
// latency says nothing about whether the limit is too low, and growing it
// would only inflate it without evidence (Netflix's rule inflight*2 < limit).
func (s Sample) AppLimited() bool { return float64(s.MaxInFlight)*2 < s.Limit }

// log10 returns log10(x), at least 1, so that additive steps never vanish at
// small limits: with a plain log10 a limit of 1 grows by log10(1) = 0 and
// stays at the minimum forever (go-concurrency-limits#117).
func log10(x float64) float64 { return max(1, math.Log10(max(x, 1))) }

// prober re-measures the no-load RTT, Envoy-style: after a warm-up of 10
// windows and then every `every` windows it holds the limit at a low value
// while three things happen: the calls in flight drain to that value (up to
// 20 windows, or until a window sees less than a quarter of the excess
// finish: the rest are stuck, and the probe's limit is raised by their
// number so that fresh calls are still admitted), one window lets the last
// calls admitted under the old limit finish, and one window measures calls
// that were all admitted at low concurrency. Then it restores the limit it had. Without it a baseline
// learnt once can only ratchet down (Vegas) or drift with the load it
// measures (Gradient2), and a limit that starts far too high is never
// recognised as such by Gradient2 (its long-term average starts queued).
type prober struct {
	every  int // windows between probes; 0 disables probing
	limit  float64
	count  int // windows since the last probe
	phase  int // 0 normal, 1 draining, 2 settling, 3 measuring
	drain  int // windows spent draining
	probes int
	saved  float64 // the limit before the probe
	prevIn int64   // calls in flight when the current drain window began
	stuck  float64 // calls in flight when draining stalled, held on top of limit
}

// step is called at the start of Update. When handled is true the caller
// returns limit without computing anything; measured is then true on the
// window that completes a probe, and the caller takes its new baseline from s
// before returning limit (the limit restored from before the probe).
func (p *prober) step(s Sample) (limit float64, handled, measured bool) {
	if p.every <= 0 {
		return 0, false, false
	}
	switch p.phase {
	case 1: // draining
		p.drain++
		excess := p.prevIn - int64(p.limit) // above the probe's limit when this window began
		switch {
		case s.InFlight <= int64(p.limit):
			p.phase, p.stuck = 2, 0
		case (p.prevIn-s.InFlight)*4 < excess || p.drain >= 20:
			// Draining stalled: the window saw less than a quarter of
			// the excess finish, so the calls still in flight are far
			// slower than the window (hung calls waiting out a long
			// timeout). Waiting longer would only hold the limit low;
			// instead the probe counts them as stuck and admits its
			// ProbeLimit fresh calls on top of them.
			p.phase, p.stuck = 2, float64(s.InFlight)
		}
		p.prevIn = s.InFlight
		return p.limit + p.stuck, true, false
	case 2: // settling: the last old calls finish
		p.phase = 3
		return p.limit + p.stuck, true, false
	case 3: // measuring window ended: restore
		p.phase = 0
		p.count = 0
		return p.saved, true, s.Count > 0
	}
	p.count++
	due := p.every
	if p.probes == 0 {
		due = min(due, 10)
	}
	if p.count >= due && !s.AppLimited() && s.Limit > p.limit {
		p.phase, p.drain, p.prevIn, p.stuck = 1, 0, s.InFlight, 0
		p.probes++
		p.saved = s.Limit
		return p.limit, true, false
	}
	return 0, false, false
}

// durationOr returns d in nanoseconds, or def when d is zero.
func durationOr(d, def time.Duration) int64 {
	if d == 0 {
		return int64(def)
	}
	return int64(d)
}
