package adaptive

import (
	"math/bits"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
)

// RTT sampling of the clock-reading forms (Acquire/Release, Do, Call).
//
// Timing a call costs two clock reads (about 20–40 ns each with the nano
// ticker, more on a loaded VM), several times what the limiter itself costs
// (about 15 ns for an admission and a release). High-rate
// systems time a subset of the calls; so do Acquire and Release, with the rule:
//
//   - Every admission gets a sequence number from the same atomic add that
//     takes its slot (the slot word's high half: see admitOne), so deciding
//     costs no shared write. Acquire times the call when
//     mix32(seq ^ seed) & (stride − 1) == 0: about one call in stride, picked
//     by a hash of the number rather than by its value, so a periodic
//     workload (alternating kinds of request on one goroutine) is not aliased.
//   - Each window aims at T samples, the least power of two at or above
//     max(8·MinWindowSamples, 4·MaxInFlight of the last window): 128 at the
//     defaults while at most 32 calls are in flight. The in-flight term keeps
//     the noise of Vegas's queue estimate L·(1 − baseline/AvgRTT), about
//     L·σ/√n calls for n samples of relative spread σ, below σ·√L/2.
//   - When a window closes, the stride of the next one becomes the greatest
//     power of two at or below calls/T (calls: the admissions of the closed
//     window), within [1, MaxSampleStride] (default 64). So at a steady rate a
//     window carries T to 2T samples, and a slow or low-rate dependency (fewer
//     than 2T calls per window) has every call timed.
//   - Within a window, each time its sample count reaches a multiple of T
//     beyond the second, the stride doubles (up to the cap): the first window
//     of a fast service, or a jump in rate, reaches stride s after about T·s
//     calls instead of waiting for the window to end.
//   - When a sampled release finds the window past its end without the
//     samples it needs to close (min(MinWindowSamples, limit)), the stride
//     drops to 1 until it closes: after a sudden fall in rate a window
//     overruns its end by about stride calls plus MinWindowSamples calls.
//   - Drops are never sampled away: an unsampled Failure release counts the
//     drop and reads the clock to close a due window (a loss is the failure
//     path). The most calls in flight is taken from every release.
//
// Effect on the algorithms: a sample picked at stride s weighs s calls
// (Permit.state carries log2 s), so AvgRTT is the stride-weighted mean of a
// pseudo-random subset of at least about T calls and Count the weighted
// count: unbiased estimates over every success of the window even when the
// stride changed within it while latency trended (unweighted, such a window
// read about half its true mean in the simulation). The standard error of
// AvgRTT grows by about √stride over timing every call and stays near σ/√T.
// Sample.Samples and Stats.Samples count the timed successes. MinRTT is the
// least of the subset, at or above the true least (no built-in algorithm
// uses it: Vegas's baseline is the least window mean). Drops, MaxInFlight
// and InFlight are exact.
const (
	defaultMaxStride = 64   // Config.MaxSampleStride default
	maxMaxStride     = 1024 // Config.MaxSampleStride bound
	samplesPerMin    = 8    // T ≥ samplesPerMin · MinWindowSamples
	samplesPerSlot   = 4    // T ≥ samplesPerSlot · MaxInFlight
)

// sampleTarget returns T, the least power of two at or above
// max(8·minSamples, 4·maxIn).
func sampleTarget(minSamples, maxIn int64) uint32 {
	// Each operand capped before its product: a huge MinWindowSamples or
	// in-flight count must not wrap the target negative.
	t := min(max(samplesPerMin*min(minSamples, 1<<30), samplesPerSlot*min(maxIn, 1<<30), 1), 1<<30)
	return 1 << bits.Len64(uint64(t-1))
}

// setStride sets the sample target and the stride of the next window from
// the closed one's admissions and most calls in flight. Window lock held.
func (l *Limiter) setStride(calls, maxIn int64) {
	target := sampleTarget(l.minSamples.Load(), maxIn)
	stride := uint64(1)
	if q := calls / int64(target); q > 1 {
		stride = 1 << (bits.Len64(uint64(q)) - 1) // the greatest power of two ≤ q
	}
	stride = min(stride, uint64(l.maxStride.Load())+1)
	l.target.Store(target - 1)
	l.stride.Store(uint32(stride - 1))
}

// grow doubles the stride, up to the cap: the window's sample count reached
// another multiple of the target beyond the second. Slow path, once per
// target samples at most; a CAS, so that it never undoes a concurrent
// setStride or reset with a stale value twice.
func (l *Limiter) grow() {
	s := l.stride.Load()
	if s < l.maxStride.Load() {
		l.stride.CompareAndSwap(s, s<<1|1)
	}
}

// mix32 is a 32-bit integer hash (Chris Wellons' lowbias32): a bijection
// whose low bits depend on every input bit. Five register operations.
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// weight returns Permit.state for a sample picked under stride mask m: the
// sample stands for stride = m+1 calls.
func weight(m uint32) uint8 { return weight1 + uint8(bits.Len32(m)) }

// Acquire admits a call like [Limiter.AcquireAt] but takes no time argument: it
// reads the limiter's ticker itself, and only for the calls it picks as RTT
// samples. Release the Permit with [Limiter.Release] exactly once. It returns
// (Permit{}, [Limiter.RejectedError]) and counts a rejection when the limit is reached.
//
// Which calls are timed: about one in Stats().Stride, picked by a hash of the
// admission's sequence number; the stride adapts per window so that each
// window still carries at least 8·MinWindowSamples and 4·MaxInFlight samples
// (powers of two, at most Config.MaxSampleStride, default 64), so a slow or
// low-rate dependency has every call timed. See the package documentation.
// Config.MaxSampleStride = 1 times every call.
//
// Cost: one atomic add when admitted (the slot, which also numbers the
// admission), one load of the limit and one of the stride (same cache line),
// a five-operation hash; a clock read for a sampled call only. A rejection
// adds one more atomic add (undo) and a counter increment. No allocation,
// no lock.
func (l *Limiter) Acquire() (Permit, error) {
	// Each return builds its Permit whole: filling fields of a Permit after
	// building it made the compiler spill it field by field and reload it in
	// one wide load, a store-forwarding stall that cost more than the hash.
	w := l.slots.Add(admitOne) // atomic 1: take a slot and number the admission
	n := inFlightOf(w)
	if n > l.limit.Load() {
		return l.reject()
	}
	if m := l.stride.Load(); mix32(seqOf(w)^l.seed)&m == 0 { // a load of the limit's line, a hash
		return Permit{start: l.sampledNow(0), inflight: int32(n), state: weight(m)}, nil // clock read: sampled calls only
	}
	return Permit{inflight: int32(n), state: unsampled}, nil
}

// tryBegin is Acquire without counting a rejection (Do with a queue).
func (l *Limiter) tryBegin() (Permit, bool) {
	w := l.slots.Add(admitOne)
	n := inFlightOf(w)
	if n > l.limit.Load() {
		l.slots.Add(-admitOne)
		return Permit{}, false
	}
	if m := l.stride.Load(); mix32(seqOf(w)^l.seed)&m == 0 {
		return Permit{start: l.sampledNow(0), inflight: int32(n), state: weight(m)}, true
	}
	return Permit{inflight: int32(n), state: unsampled}, true
}

// AcquirePartition is [Limiter.AcquirePartitionAt] with Acquire's sampled clock
// reads: it admits a call of partition p (see AcquirePartitionAt for the rule)
// and reads the ticker only for a call picked as an RTT sample. Release with
// [Limiter.Release]. On a limiter without partitions it is Acquire.
//
// Cost: two atomic adds and three loads when admitted, the hash, and a clock
// read for a sampled call only.
func (l *Limiter) AcquirePartition(p int) (Permit, error) {
	if len(l.parts) == 0 {
		return l.Acquire()
	}
	if p < 0 || p >= len(l.parts) {
		p = len(l.parts) - 1
	}
	n, seq, ok := l.admitPriority(p)
	if !ok {
		l.clocklessRejected(l.rejected.Load()) // admitPriority counted it
		return Permit{}, l.rejErr
	}
	if m := l.stride.Load(); mix32(seq^l.seed)&m == 0 {
		return Permit{start: l.sampledNow(int16(p + 1)), inflight: n, part: int16(p + 1), state: weight(m)}, nil // clock read: sampled calls only
	}
	return Permit{inflight: n, part: int16(p + 1), state: unsampled}, nil
}

// sampledNow is the clock read of a sampled admission or release. The Ticker
// may be user code: if it panics or calls runtime.Goexit, the call's slot
// (and its partition's, part > 0) is given back before the panic goes on,
// so that it does not stay taken for ever.
func (l *Limiter) sampledNow(part int16) int64 {
	read := false
	defer func() {
		if !read {
			l.slots.Add(-1)
			if part > 0 {
				l.parts[part-1].inflight.Add(-1)
			}
		}
	}()
	now := l.ticker.Now()
	read = true
	return now
}

// Release releases a call admitted by [Limiter.Acquire] or AcquirePartition (any
// Permit is accepted) with outcome o, reading the limiter's ticker only when
// the call is an RTT sample ([Permit.Sampled]): then it is ReleaseAt(t, now, o),
// which adds the RTT to the window and closes a window that is due. An
// unsampled call frees its slot and updates the window's most calls in
// flight; an unsampled Failure call also counts its loss and reads the clock
// to close a due window (losses are never sampled away), and so does any
// release while calls wait in the queue (to hand them the slot).
//
// Cost of an unsampled Success or Ignored: one atomic add (the slot) and one
// load (most in flight; a CAS only for a new maximum), plus one add on a
// partition's counter for a token from AcquirePartition and one load of the
// waiter count when a queue is configured. No clock read, no allocation, no
// lock. A sampled call costs a clock read plus ReleaseAt.
func (l *Limiter) Release(t Permit, o rampart.Result) {
	if t.state >= weight1 {
		l.ReleaseAt(t, l.sampledNow(t.part), o) // clock read: a sampled call
		return
	}
	l.slots.Add(-1) // atomic 1: free the slot
	if t.part > 0 {
		l.parts[t.part-1].inflight.Add(-1) // the partition's slot
	}
	atomicx.Max(&l.win.maxIn, int64(t.inflight)) // a load; a CAS only for a new maximum
	// A loss is anything but Success and Ignored (rampart.Result's doc: an
	// unknown value counts as Failure); a Success decides in one compare.
	if loss := o != rampart.Success && o != rampart.Ignored; loss || (l.queue != nil && l.queue.waiting.Load() > 0) {
		l.endSlow(loss)
	}
}

// endSlow is the rest of an unsampled Release that needs the time: a loss
// (counted, and it may close the window) or waiters to hand the slot to.
func (l *Limiter) endSlow(loss bool) {
	now := l.ticker.Now() // clock read: failure or waiting path
	if loss {
		l.win.drops.Add(oneDrop) // the loss counts; an unsampled token has no RTT
		if now >= l.windowEnd.Load() {
			l.closeWindow(now)
		}
	}
	if l.queue != nil && l.queue.waiting.Load() > 0 { // after closeWindow: a raised limit frees more slots
		l.queue.handoff(l, now)
	}
}
