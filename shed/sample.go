package shed

import (
	"math"
	"math/bits"
	"time"

	"github.com/rampart-go/rampart/internal/atomicx"
)

// sampleAt takes the sample due at or before now, if this caller wins the
// CAS on the due time: it closes the current bucket, recomputes the cap from
// the window, reads the Source, and moves the overload state. Slow path:
// once per SampleInterval, by one caller.
func (s *Shedder) sampleAt(now int64) {
	due := s.next.Load()
	if now < due || due == lockedSample || len(s.ring) == 0 || !s.next.CompareAndSwap(due, lockedSample) { // no ring: the zero Shedder
		return // not due, or another caller is sampling or has sampled
	}
	var notify int8 // +1: engaged, -1: released; the listener runs under the sample lock
	done := false
	defer func() {
		if !done {
			// The Source panicked or called runtime.Goexit: keep the
			// shedder alive, with the state it had, and count the panic
			// (a Goexit goes on from here).
			if r := recover(); r != nil {
				s.panics.Add(1)
			}
		}
		// Gives the sample lock back in every case, after the listener
		// too (which may call runtime.Goexit): OnOverload calls never
		// overlap and come in the order of the changes.
		s.next.Store(s.dueAfter(now))
	}()
	s.closeBucket(now)
	sig := &s.sig // the Shedder's: a local would escape to the heap through the interface call
	*sig = Signals{SchedLatency: -1, CPU: -1, Runnable: -1}
	s.src.Read(now, sig)
	b := &s.ring[(s.head+len(s.ring)-1)%len(s.ring)] // the bucket just closed
	hot, cold := s.judge(sig, b)
	switch {
	case !s.on && hot != 0:
		s.on = true
		s.phase = 0
		s.overloads.Add(1)
		notify = 1
	case s.on && hot == 0 && cold && now >= atomicx.SatAdd(s.lastDrop.Load(), s.coolOff):
		s.on = false
		notify = -1
	}
	s.publish()
	s.trigger.Store(uint32(hot))
	s.sigSched.Store(int64(sig.SchedLatency))
	s.sigCPU.Store(math.Float64bits(sig.CPU))
	s.sigRun.Store(math.Float64bits(sig.Runnable))
	s.samples.Add(1)
	done = true
	if notify != 0 {
		s.notifyOverload(notify > 0) // under the sample lock: see the deferred Store
	}
}

// closeBucket ends the current bucket at now, puts it in the ring, and
// counts the admissions since the previous sample into s.admitted.
func (s *Shedder) closeBucket(now int64) {
	// The counts before the latency sum, the reverse of ReleaseAt's adds:
	// see there.
	passes := s.passes.Swap(0)
	timed := s.timed.Swap(0)
	rtSum := s.rtSum.Swap(0)
	b := bucket{end: now, dur: max(now-s.last, 1), passes: passes, meanRT: -1}
	if timed > 0 {
		b.meanRT = rtSum / timed
	}
	s.ring[s.head] = b
	s.head = (s.head + 1) % len(s.ring)
	s.last = now
	s.setStride(&b)
	a := s.admitted.Load()
	s.admitted.Store(admittedAt(a, s.slots.Load()))
}

// judge returns the signals at or above their thresholds (hot) and whether
// every known signal is below its release level (cold), for the signals
// read into sig and the bucket b just closed.
func (s *Shedder) judge(sig *Signals, b *bucket) (hot Signal, cold bool) {
	cold = true
	check := func(k Signal, v, th float64) {
		if s.ignore&k != 0 || v < 0 {
			return // ignored, or unknown
		}
		if v >= th {
			hot |= k
		}
		if v >= th*s.release {
			cold = false
		}
	}
	check(SchedLatency, float64(sig.SchedLatency), float64(s.schedTh))
	check(CPU, sig.CPU, s.cpuTh)
	check(Runnable, sig.Runnable, s.runTh)
	check(InFlight, float64(inFlightOf(s.slots.Load())), float64(s.inflightTh))
	check(Latency, float64(b.meanRT), float64(s.latencyTh))
	return hot, cold
}

// publish computes the cap from the window (maxPass × minRT, BBR's
// bandwidth-delay product) and stores it, with the priority step, in capw
// while the shedder is on; 0 while off.
func (s *Shedder) publish() {
	maxPass, minRT := 0.0, int64(math.MaxInt64)
	from := s.last - s.window // buckets that ended within the window
	for i := range s.ring {
		b := &s.ring[i]
		if b.passes == 0 || b.end <= from {
			continue
		}
		maxPass = max(maxPass, float64(b.passes)*1e9/float64(b.dur))
		if b.meanRT >= 0 {
			minRT = min(minRT, b.meanRT)
		}
	}
	if minRT == math.MaxInt64 {
		maxPass = 0 // completions but none timed (a stride above the rate): no estimate
	}
	capf := float64(maxCap)
	if maxPass > 0 {
		// Rounded: truncating turns a cap measured at 1.98 into 1 (go-zero
		// truncates, and so does Kratos's BBR, whose + 0.5 comes after its
		// floor), and a ceiling turns 2.02 into 3.
		capf = min(max(math.Floor(maxPass*float64(minRT)/1e9+0.5), 1), maxCap)
		s.lastCap = capf
	} else {
		// No call completed in the window: the calls in flight take
		// longer than it (or none came). Keep the last cap measured, which
		// is when one matters most; before any completion there is none.
		capf = s.lastCap
		minRT = 0
	}
	s.maxPass.Store(math.Float64bits(maxPass))
	s.minRT.Store(minRT)
	if !s.on {
		s.capBase.Store(0)
		s.capw.Store(0)
		return
	}
	s.capBase.Store(int64(capf))
	if capf < maxCap {
		// The admission limit and the gain cycle of BBR's ProbeBW. The
		// shedder rejects instead of queueing, so a slot freed by a
		// completion stays idle until the next arrival: a limit of
		// exactly maxPass × minRT leaves a core idle that long after every
		// call (a third of the time at a cap of 1 under a 2× overload),
		// and each bucket's completions per second times its mean latency,
		// its mean calls in flight, then measure below the cap, which
		// confirms itself or falls. So the limit admits one call more
		// than the cap, which waits for a core and starts as one ends
		// (Kratos's BBR admits while the calls in flight before the new
		// one are at most its estimate). By Little's law maxPass × minRT
		// never exceeds the most calls in flight of the window, so a cap
		// measured too low (while other work took the cores) rises only
		// through calls admitted beyond it: the extra call, and one sample
		// in probeCycle a quarter more (at least that one call more). One
		// measured too high would hold the queue it let in (every
		// bucket's latency then includes it, the extra call's too), so
		// the next sample admits a quarter fewer, and none beyond: a
		// bucket without the queue, whose latency lowers minRT; the
		// window (ten samples at the defaults) holds one such bucket at
		// every sample, and the cap is the cores' product again.
		switch s.phase % probeCycle {
		case probeUp:
			capf = min(math.Ceil(capf*1.25), maxCap) // a count of calls in flight: an int32; at least capf + 1
		case probeDown:
			capf = max(math.Floor(capf*0.75), 1)
		default:
			capf = min(capf+1, maxCap)
		}
		s.phase++
	}
	c := int64(capf)
	step := int64(0)
	if s.prios > 1 && c < maxCap {
		// Of the cap, not of the limit: the levels keep their shares
		// through the gain cycle, and the extra call is priority 0's.
		step = int64(math.Ceil(float64(s.capBase.Load()) * s.reserve))
	}
	s.capw.Store(step<<32 | c)
}

// The gain cycle of the cap while engaged, in samples: six at the
// measured cap, one a quarter above it (probeUp), one a quarter below
// (probeDown), as BBR's ProbeBW cycles its pacing gain (1.25, 0.75, then
// six times 1; Cardwell et al., 2016). probeUp comes after the engagement's
// first six samples, so a shedder that engages starts at the measured cap.
const (
	probeCycle = 8 // divides 256: Shedder.phase wraps
	probeUp    = 6
	probeDown  = 7
)

// setStride sets Acquire's sampling stride from the bucket b just closed:
// the greatest power of two at or below both passes/32 (a bucket keeps 32
// timed calls or more) and the completions of 10 ms at b's rate (a timed
// call, which is what takes a due sample, comes every 10 ms or sooner),
// within [1, Config.MaxSampleStride].
func (s *Shedder) setStride(b *bucket) {
	n := min(b.passes/32, b.passes*int64(10*time.Millisecond)/b.dur, int64(s.maxStride))
	stride := uint32(1)
	if n > 1 {
		stride = 1 << (bits.Len64(uint64(n)) - 1)
	}
	s.stride.Store(stride - 1)
}
