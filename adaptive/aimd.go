package adaptive

import (
	"fmt"
	"math"
	"time"
)

// AIMD is the loss-based algorithm: additive increase, multiplicative
// decrease, as TCP Reno. Per window, with r = Drops / (Drops + Count) the
// window's drop rate ([Sample.DropRate]):
//
//	if r > DropThreshold or (Timeout > 0 and AvgRTT > Timeout):  L ← L · Backoff
//	else if MaxInFlight · 2 ≥ L:                                  L ← L + Increase
//	else:                                                          L unchanged (app-limited)
//
// A loss is a drop rate above DropThreshold (default 5 %), not one drop:
// Netflix's AIMDLimit backs off on any drop in a window, so one timeout in
// thousands of calls every window, lost whatever the load, holds the limit
// near its minimum. Overload drops grow with the queue and cross the
// threshold within a window or two.
//
// AIMD never looks at latency below Timeout, so it only backs off once calls
// fail or time out: it fills the server's queue up to the point of loss and
// then oscillates below L*, the limit at which losses start: each lossy
// window multiplies the limit by Backoff, so the band is [Backoff^k · L*, L*]
// where k is the longest run of lossy windows (in the simulation,
// TestSimAIMDBand, with a timeout of twice the unloaded latency, L* ≈ 1.9 ×
// capacity and the limit stayed within [1.68, 1.92] × capacity, with 1.4 %
// of the calls timing out; reacting to any drop, DropThreshold 1e-9, it
// stayed within [1.46, 1.86] × capacity with 0.03 % timing out, but one
// call lost in two thousand whatever the load held it near the minimum).
// Choose it when the dependency's latency is too noisy to carry a signal,
// or when only failures are observable.
//
// The zero value is valid: Backoff 0.9, Increase 1, no Timeout.
type AIMD struct {
	// Backoff multiplies the limit after a window with a loss, in (0, 1).
	// Default 0.9.
	Backoff float64
	// Increase is added to the limit after a window without loss whose
	// in-flight count reached half the limit. Default 1.
	Increase float64
	// Timeout, when positive, treats a window whose mean RTT exceeds it as
	// a loss. Default 0 (only Failure releases are losses).
	Timeout time.Duration
	// DropThreshold is the drop rate (Failure calls as a fraction of the
	// window's Failure and successful calls: [Sample.DropRate]) above
	// which a window is a loss, in [0, 1]. Default (0) 0.05. Any value
	// below one drop in a window's calls, such as 1e-9, backs off on any
	// drop (Netflix's AIMDLimit); 1 never does (only Timeout is a loss).
	DropThreshold float64
}

// Validate reports an invalid field. [New] calls it.
func (a AIMD) Validate() error {
	if a.Backoff != 0 && !(a.Backoff > 0 && a.Backoff < 1) {
		return fmt.Errorf("AIMD.Backoff must be in (0, 1), got %v", a.Backoff)
	}
	if !(a.Increase >= 0) || math.IsInf(a.Increase, 0) {
		return fmt.Errorf("AIMD.Increase must be finite and not negative, got %v", a.Increase)
	}
	if a.Timeout < 0 {
		return fmt.Errorf("AIMD.Timeout must not be negative, got %v", a.Timeout)
	}
	return validDropThreshold("AIMD", a.DropThreshold)
}

// Start implements [Algorithm].
func (a AIMD) Start(initial, minLimit, maxLimit float64) Controller {
	c := &aimd{backoff: a.Backoff, increase: a.Increase, timeout: int64(a.Timeout), dropThreshold: dropThresholdOr(a.DropThreshold)}
	if c.backoff == 0 {
		c.backoff = 0.9
	}
	if c.increase == 0 {
		c.increase = 1
	}
	return c
}

type aimd struct {
	backoff, increase, dropThreshold float64
	timeout                          int64
}

func (c *aimd) Update(s Sample) float64 {
	if lossy(s, c.dropThreshold) || (c.timeout > 0 && s.Count > 0 && int64(s.AvgRTT) > c.timeout) {
		return s.Limit * c.backoff
	}
	if s.AppLimited() || s.Count == 0 {
		// Not using the limit, or no call completed (a window closed
		// while every call in flight was stalled): no evidence to grow on.
		return s.Limit
	}
	return s.Limit + c.increase
}
