package adaptive

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/sameptr"
	"github.com/rampart-go/rampart/internal/ticker"
)

// ErrLimited is the sentinel of every rejection by a [Limiter]: the calls in
// flight reached the adaptive limit (or a waiting call was shed by the
// queue). The error a Limiter returns matches it and [rampart.ErrRejected]
// through errors.Is.
var ErrLimited = errors.New("concurrency limit reached")

// Permit is an admitted call's permit, returned by [Limiter.AcquireAt] (or
// [Limiter.Acquire]) and handed back exactly once to [Limiter.ReleaseAt] (or
// [Limiter.Release]). It is a small value with no pointer, carrying the
// admission time. The zero Permit is not a permit: never release it.
type Permit struct {
	start    int64 // the now given to AcquireAt, or read by Acquire for a sampled call
	inflight int32 // calls in flight right after this one was admitted
	part     int16 // 1 + the priority partition; 0 when none
	state    uint8 // 0: not a permit; 1: a permit, no RTT sample (start unset); k ≥ 2: an RTT sample of weight 2^(k−2) (the stride it was picked at)
}

// Permit states. Permit has at most four fields, so that the compiler keeps it
// in registers (a fifth made callers spill it field by field and reload it
// in one wide load, a store-forwarding stall that cost ~10 ns per call).
const (
	unsampled = 1 // Permit.state of a permit whose RTT is not measured
	weight1   = 2 // Permit.state of an RTT sample of weight 1 (AcquireAt's); +k: weight 2^k
)

// Sampled reports whether the call's RTT is measured: always for a Permit
// from AcquireAt, AcquirePartitionAt and AcquireWaitAt; for one from Acquire or
// AcquirePartition, only when it was picked as an RTT sample (see
// [Limiter.Acquire]).
func (t Permit) Sampled() bool { return t.state >= weight1 }

// Valid reports whether t is a permit (false for the zero Permit).
func (t Permit) Valid() bool { return t.state != 0 }

// Config configures a [Limiter]. The zero value is valid: Vegas, limits
// 20 initial / 1 min / 1000 max, 1 s windows of at least 10 samples.
type Config struct {
	// Name identifies the limiter in its rejection error.
	Name string
	// Algorithm computes the limit once per window. Default Vegas{}.
	Algorithm Algorithm
	// InitialLimit is the limit before the first window ends. Default 20
	// (clamped to [MinLimit, MaxLimit]).
	InitialLimit int
	// MinLimit is the least limit, at least 1. Default 1.
	MinLimit int
	// MaxLimit is the greatest limit. Default 1000.
	MaxLimit int
	// Window is the least duration of an aggregation window. Default 1 s.
	// Pick several times the dependency's typical latency.
	Window time.Duration
	// MinWindowSamples is the least number of successful calls a window
	// must hold before it ends, counting the timed ones (RTT samples: see
	// [Limiter.Acquire]); a window with a drop ends regardless, and a limit
	// below MinWindowSamples lowers the requirement to the limit, so that
	// windows at a low limit, such as a baseline probe's, do not stretch
	// for many call durations. (A window with no success at all that is
	// overdue by a whole window while calls are rejected is closed by a
	// rejection: see [Controller].) Default 10.
	MinWindowSamples int
	// Partitions, when set, divide the limit between priorities: see
	// [Limiter.AcquirePartitionAt]. Shares must sum to at most 1.
	Partitions []Partition
	// Queue configures the optional waiting queue used by
	// [Limiter.AcquireWait] and Do. Zero MaxLength: no queue, a full
	// limiter rejects at once.
	Queue QueueConfig
	// Classify maps the error of a function run by Do or Call to an
	// outcome. Default [DefaultClassify].
	Classify func(ctx context.Context, err error) rampart.Result
	// OnLimitChange is called with the old and new limit when a window
	// changes the published limit. It runs on the goroutine that closed
	// the window.
	OnLimitChange func(oldLimit, newLimit int)
	// Ticker is the clock of Acquire, Release, Do and Call, and of the first
	// window. Default rampart.DefaultTicker().
	Ticker rampart.Ticker
	// MaxSampleStride bounds the RTT sampling of Acquire/Release, Do and Call
	// (see [Limiter.Acquire]): the stride adapts so that each window carries
	// enough samples, but never exceeds MaxSampleStride, so at least one
	// call in MaxSampleStride is timed. 1 times every call (two clock reads
	// per call, as AcquireAt/Release with the caller's readings). A power of
	// two from 1 to 1024; default (0) 64. AcquireAt, AcquirePartitionAt and
	// AcquireWaitAt take the time as an argument and are always samples.
	MaxSampleStride int

	// Compact lays the instance out without cache-line padding: smaller
	// (288 B instead of 352 B), for the many cold instances (per-tenant,
	// per-route keys) where goroutines do not contend on one instance; the
	// default pads the words that many goroutines write on every call.
	Compact bool
}

// DefaultClassify is the default Config.Classify: nil is a [rampart.Success];
// context.Canceled while ctx is cancelled is [rampart.Ignored] (the caller gave up);
// context.DeadlineExceeded and rejections by other rampart policies
// (rampart.ErrRejected) are [rampart.Failure]; any other error is a [rampart.Success] (the
// dependency answered, and its latency is a sample).
func DefaultClassify(ctx context.Context, err error) rampart.Result {
	switch {
	case err == nil:
		return rampart.Success
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return rampart.Ignored
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rampart.ErrRejected):
		return rampart.Failure
	}
	return rampart.Success
}

// Stats is a snapshot of a [Limiter], returned by value.
type Stats struct {
	Limit          int    // the published limit
	InFlight       int    // calls admitted and not yet released
	PeakInFlight   int    // the most calls in flight seen at an admission (recorded when that call is released)
	Rejected       uint64 // calls refused (including those shed from the queue)
	Samples        uint64 // RTT samples (timed Success releases) counted in closed windows
	Drops          uint64 // Failure releases counted in closed windows
	Windows        uint64 // windows closed (limit recomputations)
	Stride         int    // Acquire's RTT sampling stride now: about one call in Stride is timed (1 to MaxSampleStride; AcquireAt's calls are all timed, and their samples count toward raising it)
	Queued         int    // calls waiting in the queue now
	Shed           uint64 // waiting calls shed by CoDel or a full queue
	ListenerPanics uint64 // listener panics recovered
}

// window holds the aggregates of the current window, written lock-free by
// every release and swapped out by the goroutine that closes the window.
type window struct {
	sum    atomic.Int64 // Σ weight·RTT of sampled Success releases; written by each
	counts atomic.Int64 // samples (high 32 bits) and Σ weight (low 32: see oneSample); same line as sum: written together
	min    atomic.Int64 // least RTT; read by each sampled success, written only when lower
	maxIn  atomic.Int64 // most in flight; read by each sampled success, written only when higher
	// The loss words, written on the failure path only (a Failure
	// release); the admission path and Success releases never write them.
	// drops costs one add per drop, which counts it (high half) and sums
	// the weight of a timed one (low half). dropSum costs one more add, by
	// a timed Failure release only (AcquireAt's, or a sampled Acquire's), one
	// Swap per window, and 8 bytes on this line, which the drops add
	// dirties anyway: it gives Gradient2 the RTT of the calls that timed
	// out, to average with the others as Netflix's window average does. The
	// drop rate (Sample.DropRate) needs no word of its own: drops and the
	// weights in counts are its terms.
	drops   atomic.Int64 // Failure releases (high 32 bits: see oneDrop) and Σ weight of the timed ones (low 32)
	dropSum atomic.Int64 // Σ weight·RTT of timed Failure releases
}

// Slot word layout (l.slots): one atomic add both takes a slot and numbers
// the admission, so Acquire gets a sequence number for its sampling decision
// without a second shared counter.
//
//	63                   32 31                    0
//	+----------------------+----------------------+
//	| admissions (wrapping)|  calls in flight (s) |
//	+----------------------+----------------------+
//
// The low half is a signed 32-bit count (MaxLimit ≤ 2^31−1; Permit keeps it in
// an int32 too); a release subtracts 1 from it only, an undone admission
// subtracts admitOne, so the high half counts admissions net of rejections.
const admitOne = 1<<32 | 1

// oneSample is one RTT sample in window.counts, whose high half counts the
// samples (for MinWindowSamples and the stride) and whose low half sums
// their weights (the estimated successes, Sample.Count): one atomic add
// records both. A window holds at most 2^32−1 successes.
const oneSample = 1 << 32

// oneDrop is one Failure release in window.drops, whose high half counts
// the drops (every one, timed or not: Sample.Drops) and whose low half sums
// the weights of the timed ones (behind Sample.DropRTT): one atomic add
// records both. A window holds at most 2^32−1 drops, and the weights of its
// timed drops sum to at most 2^32−1, as window.counts's.
const oneDrop = 1 << 32

// inFlightOf returns the calls in flight held in a slot word.
func inFlightOf(w int64) int64 { return int64(int32(w)) }

// seqOf returns the admission sequence number held in a slot word.
func seqOf(w int64) uint32 { return uint32(uint64(w) >> 32) }

// Limiter is an adaptive concurrency limiter. Create it with [New] and run
// calls through [Limiter.Do] or [Call]; [Limiter.Acquire] (or
// [Limiter.AcquirePartition]) and then exactly one [Limiter.Release]
// bracket a call by hand, and the XAt forms do the same with the caller's
// clock readings.
//
// It is a counter of calls in flight checked against a limit that an
// [Algorithm] recomputes once per window from the RTTs and losses the calls
// report (see the package documentation); admission and release take no
// lock (only the optional queue of AcquireWaitAt has one). A Limiter is
// safe for concurrent use.
//
// The zero value is not usable; build with [New]. A zero Limiter has no
// limit, no algorithm and no clock: AcquireAt and AcquireWaitAt refuse
// every call with a zero Permit and an error that is a nil
// *rampart.RejectedError inside a non-nil error interface: err != nil
// holds and errors.Is(err, rampart.ErrRejected) reports true, but its
// Error method dereferences nil and panics.
// Package pipeline refuses a zero Limiter at New.
//
// A Limiter is 288 B (352 B unless [Config.Compact]), its Algorithm's state
// (Vegas: 112 B) besides; a Name adds its rejection error (unnamed limiters
// share one).
type Limiter struct {
	// The layout keeps the two groups of words written by calls (the slot
	// word with rejected; the window) at least a line minus a word apart,
	// with the words only the window's closer touches between them, so no
	// cache line holds both without padding; unless Config.Compact, New
	// allocates the Limiter in a paddedLimiter, whose leading line keeps
	// the object before it off the slot word's line (the words after the
	// window fill its last line). A test checks the distances.

	slots atomic.Int64 // in flight (low 32 bits) and admissions (high 32): see admitOne
	// rejected: +1 by every rejection, which has just added to and
	// subtracted from slots: the same line, already held.
	rejected atomic.Uint64

	// Read by every call, written about once per window (limit, windowEnd,
	// stride, target, rejectedAtClose) or never: on the slot word's line,
	// which every call writes anyway.
	limit     atomic.Int64  // the published limit
	windowEnd atomic.Int64  // time the current window may end; lockedWindow while it is being closed
	stride    atomic.Uint32 // sampling stride − 1 (a mask): Acquire times a call when mix(seq) & stride == 0
	target    atomic.Uint32 // sample target − 1 (a power of two − 1): see sampling.go
	// The rejection count when the last window closed, for countRejected's
	// choice of which rejections read the clock: stored by the goroutine
	// that closes a window, loaded by clockless rejections.
	rejectedAtClose atomic.Uint64
	ticker          rampart.Ticker
	classify        func(context.Context, error) rampart.Result
	rejErr          *rampart.RejectedError
	queue           *queue // nil without Config.Queue
	parts           []partition
	// maxStride: Config.MaxSampleStride − 1 (a mask). Atomic because
	// Update changes it while grow reads it (a release's slow path, once
	// per sample target at most); setStride reads it under the window lock.
	maxStride atomic.Uint32
	seed      uint32 // per-limiter key of the sampling hash

	// Read and written only when a window closes (and by Update, which
	// takes the window lock): they keep the window off the slot word's
	// line.
	minLimit, maxLimit int32 // Config.MinLimit and MaxLimit as they apply (MaxLimit ≤ MaxInt32)
	// Owned by the goroutine that holds the window lock (windowEnd ==
	// lockedWindow); published through the CAS and Store on windowEnd.
	alg  Algorithm // what ctrl was started from (Vegas{} for a nil Config.Algorithm), for Update
	ctrl Controller
	est  float64
	// minSamples: Config.MinWindowSamples as it applies. Atomic because
	// Update changes it while a due window's releases and an overdue
	// window's rejections read it (slow paths); never read per call.
	minSamples atomic.Int64
	lastSeq    uint32 // admission sequence number when the previous window closed
	compact    bool   // Config.Compact, which Update refuses to change
	_          [pad.Tail64]byte

	win window
	_   [pad.Tail64]byte

	// Totals of closed windows and other rare counters, and read-only
	// words of the window's closer: after the window, they fill its line.
	samples, drops, windows, panics atomic.Uint64
	peak                            atomic.Int64
	onLimit                         func(int, int)
	// window: Config.Window as it applies. Atomic because Update changes
	// it: a plain load on amd64 and arm64's load-acquire, read by the
	// window's closer and by rejections (unstallAt; clocklessRejected on
	// the few rejections that read the clock).
	window atomic.Int64
}

// paddedLimiter is the default layout: a line of padding before the Limiter
// keeps the object before it off the slot word's line.
type paddedLimiter struct {
	_ pad.Line
	l Limiter
}

// unnamedRejection is the rejection error of every Limiter without a Name:
// they would all build the same one, so they share it.
var unnamedRejection = rampart.NewRejectedError("adaptive", "", ErrLimited)

// lockedWindow in windowEnd marks a window being closed: no time reaches it
// (window ends are capped below it by windowAfter, and closeWindow never
// takes it for an end), so no other goroutine closes the window meanwhile.
const lockedWindow = math.MaxInt64

// windowAfter is the end of a window that starts at now: saturated, and
// below lockedWindow even for a reading at the end of the int64 range.
func (l *Limiter) windowAfter(now int64) int64 {
	return min(atomicx.SatAdd(now, l.window.Load()), lockedWindow-1)
}

// settings are a validated Config as it applies: defaults filled in,
// partitions and queue built.
type settings struct {
	minL, maxL, initL int
	window            int64
	minSamples        int64
	maxStride         int
	alg               Algorithm
	parts             []partition
	q                 *queue
}

// validate checks c for New and Update and returns its settings, or the
// *rampart.ConfigError of its first invalid field.
func (c *Config) validate() (settings, error) {
	const policy = "adaptive"
	if c.MinLimit < 0 {
		return settings{}, rampart.NewConfigError(policy, "MinLimit", "must not be negative, got %d", c.MinLimit)
	}
	if c.MaxLimit < 0 {
		return settings{}, rampart.NewConfigError(policy, "MaxLimit", "must not be negative, got %d", c.MaxLimit)
	}
	if c.InitialLimit < 0 {
		return settings{}, rampart.NewConfigError(policy, "InitialLimit", "must not be negative, got %d", c.InitialLimit)
	}
	minL, maxL, initL := max(c.MinLimit, 1), c.MaxLimit, c.InitialLimit
	if maxL == 0 {
		maxL = max(1000, minL)
	}
	if maxL > math.MaxInt32 {
		return settings{}, rampart.NewConfigError(policy, "MaxLimit", "must be at most %d, got %d", math.MaxInt32, maxL)
	}
	if maxL < minL {
		return settings{}, rampart.NewConfigError(policy, "MaxLimit", "(%d) must be at least MinLimit (%d)", maxL, minL)
	}
	if initL == 0 {
		initL = 20
	}
	initL = min(max(initL, minL), maxL)
	if c.Window < 0 {
		return settings{}, rampart.NewConfigError(policy, "Window", "must not be negative, got %v", c.Window)
	}
	if c.MinWindowSamples < 0 {
		return settings{}, rampart.NewConfigError(policy, "MinWindowSamples", "must not be negative, got %d", c.MinWindowSamples)
	}
	maxStride := c.MaxSampleStride
	if maxStride == 0 {
		maxStride = defaultMaxStride
	}
	if maxStride < 1 || maxStride > maxMaxStride || maxStride&(maxStride-1) != 0 {
		return settings{}, rampart.NewConfigError(policy, "MaxSampleStride", "must be a power of two from 1 to %d (0: default %d), got %d", maxMaxStride, defaultMaxStride, c.MaxSampleStride)
	}
	alg := c.Algorithm
	if alg == nil {
		alg = Vegas{}
	}
	if v, ok := alg.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return settings{}, rampart.NewConfigError(policy, "Algorithm", "%v", err)
		}
	}
	parts, err := newPartitions(c.Partitions)
	if err != nil {
		return settings{}, err
	}
	q, err := newQueue(c.Queue)
	if err != nil {
		return settings{}, err
	}
	if ticker.IsNil(c.Ticker) {
		return settings{}, rampart.NewConfigError(policy, "Ticker", ticker.NilReason, c.Ticker)
	}
	minSamples := int64(c.MinWindowSamples)
	if minSamples == 0 {
		minSamples = 10
	}
	return settings{
		minL: minL, maxL: maxL, initL: initL,
		window:     durationOr(c.Window, time.Second),
		minSamples: minSamples,
		maxStride:  maxStride,
		alg:        alg,
		parts:      parts,
		q:          q,
	}, nil
}

// New validates c and returns a Limiter. An invalid field gives a
// *rampart.ConfigError (matching rampart.ErrInvalidConfig).
func New(c Config) (*Limiter, error) {
	v, err := c.validate()
	if err != nil {
		return nil, err
	}
	var l *Limiter
	if c.Compact {
		l = new(Limiter)
	} else {
		l = &new(paddedLimiter).l
	}
	l.compact = c.Compact
	l.minLimit = int32(v.minL)
	l.maxLimit = int32(v.maxL)
	l.window.Store(v.window)
	l.minSamples.Store(v.minSamples)
	l.parts = v.parts
	l.rejErr = unnamedRejection
	if c.Name != "" {
		l.rejErr = rampart.NewRejectedError("adaptive", c.Name, ErrLimited)
	}
	l.ticker = c.Ticker
	l.classify = c.Classify
	l.onLimit = c.OnLimitChange
	l.queue = v.q
	l.maxStride.Store(uint32(v.maxStride - 1))
	l.seed = rand.Uint32()
	l.est = float64(v.initL)
	if l.ticker == nil {
		l.ticker = rampart.DefaultTicker()
	}
	if l.classify == nil {
		l.classify = DefaultClassify
	}
	l.alg = v.alg
	l.ctrl = v.alg.Start(l.est, float64(l.minLimit), float64(l.maxLimit))
	if l.ctrl == nil {
		return nil, rampart.NewConfigError("adaptive", "Algorithm", "Start returned a nil Controller")
	}
	l.win.min.Store(math.MaxInt64)
	l.target.Store(sampleTarget(v.minSamples, 0) - 1) // stride 1: the first window times every call until it has plenty
	l.publish(int64(v.initL))
	l.windowEnd.Store(l.windowAfter(l.ticker.Now()))
	return l, nil
}

// AcquireAt admits a call if fewer calls than the limit are in flight, and
// returns its Permit; otherwise it returns the preallocated
// rejection ([Limiter.RejectedError]) and counts a
// rejection. now is the current time from the limiter's ticker (it becomes
// the start of the call's RTT). An admitted call must be released exactly
// once with [Limiter.ReleaseAt]. Every call admitted by AcquireAt is an RTT
// sample; callers that read the clock only for the limiter's sake should
// use [Limiter.Acquire] and [Limiter.Release], which time a sample of the calls.
//
// Cost: one atomic add when admitted; a rejection adds one more (undo), a
// counter increment and a load of the window end (a window overdue by a whole
// window is closed here: see [Controller]). No allocation, no lock, no clock
// read. AcquireAt does not
// look at partitions or the queue: see AcquirePartitionAt and AcquireWaitAt.
//
// In flight never exceeds the limit because of admissions: a transient
// excess, at most one per goroutine concurrently inside AcquireAt, exists only
// between an over-limit add and its undo, and is never admitted. When a
// window lowers the limit, the calls already in flight above it finish
// normally.
func (l *Limiter) AcquireAt(now int64) (Permit, error) {
	n := int32(l.slots.Add(admitOne)) // atomic 1: take a slot (the low half is the in-flight count, see inFlightOf)
	if int64(n) > l.limit.Load() {
		return l.rejectAt(now)
	}
	return Permit{start: now, inflight: n, state: weight1}, nil
}

// rejectAt undoes an admission attempt at time now. Slow path. (With its
// stall check AcquireAt no longer inlines, cost 107 > 80; the admitted
// path measured within noise of the inlined one, Adaptive/Admit/rampart-cached
// 37 → 39 ns, p = 0.57.)
func (l *Limiter) rejectAt(now int64) (Permit, error) {
	l.slots.Add(-admitOne) // atomic 2: give the slot (and the sequence number) back
	l.rejected.Add(1)      // atomic 3: stats
	l.unstallAt(now)
	return Permit{}, l.rejErr
}

// reject undoes an admission attempt that read no clock (Acquire). Slow
// path.
func (l *Limiter) reject() (Permit, error) {
	l.slots.Add(-admitOne) // atomic 2: give the slot (and the sequence number) back
	l.clocklessRejected(l.rejected.Add(1))
	return Permit{}, l.rejErr
}

// clocklessRejected is told the rejection count r after a rejection by a
// path that read no clock, and reads the ticker for unstallAt on a few of
// them: the 1st, 2nd, 4th, ... 64th rejection since the last window closed,
// then every 64th. So a low rate of calls still ends a stalled window
// within a few of them (ten calls a second: a probe held by a hung call
// ends in about 10 s), and a flood of rejections reads the clock on one in
// 64 (amortised, about a nanosecond each). The slot is given back before:
// a Ticker that panics leaks nothing.
func (l *Limiter) clocklessRejected(r uint64) {
	n := r - l.rejectedAtClose.Load()                                    // rejections since the last close (one load)
	if (n&63 == 0 || (n <= 64 && n&(n-1) == 0)) && l.window.Load() > 0 { // window 0: the zero Limiter, which has no Ticker
		l.unstallAt(l.ticker.Now())
	}
}

// unstallAt closes a window that has been due for a whole window more
// without closing: calls are being rejected while none of those in flight
// finishes, so no release comes to close it (windows close on releases).
// It is what ends a baseline probe whose one slot a long call holds: its
// windows go on closing, with no completed call in them (Count and Drops
// 0: no evidence, on which the built-in algorithms keep the limit), and
// the probe restores the limit it saved. A window that holds some
// successes, fewer than MinWindowSamples asks, is left to the releases that
// will bring the rest. One load of the read-mostly line per rejection; the
// close itself at most once per window, and then, as after a release, the
// freed slots go to queued waiters (a raised limit frees more).
func (l *Limiter) unstallAt(now int64) {
	end := l.windowEnd.Load()
	if w := l.window.Load(); end != lockedWindow && now >= atomicx.SatAdd(end, w) && w > 0 && l.stalledEvidence() { // window 0: the zero Limiter, which has no Controller
		l.closeDue(now, end) // slow path: once per stalled window
		if l.queue != nil && l.queue.waiting.Load() > 0 {
			l.queue.handoff(l, now)
		}
	}
}

// stalledEvidence reports whether an overdue window may be closed by a
// rejection: it holds no success, or enough of them, or a drop (the rule
// closeWindow applies to a release). Slow path: the window is overdue.
func (l *Limiter) stalledEvidence() bool {
	c := l.win.counts.Load() >> 32
	return c == 0 || c >= min(l.minSamples.Load(), l.limit.Load()) || l.win.drops.Load() != 0
}

// tryAcquire is AcquireAt without counting a rejection (the waiting path).
func (l *Limiter) tryAcquire(now int64) (Permit, bool) {
	n := inFlightOf(l.slots.Add(admitOne))
	if n > l.limit.Load() {
		l.slots.Add(-admitOne)
		return Permit{}, false
	}
	return Permit{start: now, inflight: int32(n), state: weight1}, true
}

// ReleaseAt ends the call of t at time now with outcome o, freeing its slot.
// A Success contributes the RTT now − t.Start() to the window; a Failure call
// counts as a loss; an Ignored one only frees the slot. Any other value
// counts as a Failure, as [rampart.Result] documents. If now is past the
// end of the window, the caller closes it: it swaps the aggregates out and
// runs the algorithm (once per window). A Permit
// from Acquire that was not picked as a sample ([Permit.Sampled] false)
// contributes no RTT: its Success only frees the slot.
//
// Cost on Success: three atomic adds (slot, weighted RTT sum, samples and
// weights in one word; the last two share a line) and four loads (least RTT, most in flight, window end,
// sample target; nothing else is written unless this RTT is the window's
// least or its in-flight count the greatest). A Failure release adds to the
// drop word instead of sum and count, and a timed one (every AcquireAt token,
// a sampled Acquire token) also to the drops' RTT sum: one more add, on the
// failure path only; an Ignored one only frees the slot.
// Plus one add on a partition's counter for a token from AcquirePartitionAt,
// and one load of the waiter count when a queue is configured. No
// allocation, no lock, no clock read.
func (l *Limiter) ReleaseAt(t Permit, now int64, o rampart.Result) {
	l.slots.Add(-1) // atomic 1: free the slot
	if t.part > 0 {
		l.parts[t.part-1].inflight.Add(-1) // the partition's slot
	}
	atomicx.Max(&l.win.maxIn, int64(t.inflight)) // a load; a CAS only for a new maximum
	switch o {
	case rampart.Success:
		if t.state < weight1 {
			break // an Acquire token not picked as a sample: no RTT
		}
		// A sample picked at stride s stands for s calls (weight s; 1
		// for AcquireAt's): the window mean stays unbiased when the stride
		// changes while latency trends (Horvitz–Thompson).
		sh := t.state - weight1
		rtt := max(now-t.start, 0)
		l.win.sum.Add(rtt << sh)                     // atomic 2: weighted RTT sum
		n := l.win.counts.Add(oneSample|1<<sh) >> 32 // atomic 3: samples and weights, one word
		// One load of the read-mostly line: has the window's sample count
		// reached another multiple of the target beyond the second?
		if m := int64(l.target.Load()); n&m == 0 && n > m+1 {
			l.grow() // slow path: Acquire's stride doubles (sampling.go)
		}
		atomicx.Min(&l.win.min, rtt) // a load; a CAS only for a new minimum
	case rampart.Ignored:
		// Only the slot: the call says nothing about the dependency.
	default: // rampart.Failure, and any other value (rampart.Result's doc)
		if t.state < weight1 {
			l.win.drops.Add(oneDrop) // atomic 2: count the loss (no RTT: an unsampled Acquire token)
			break
		}
		// The weight before the RTT, which closeWindow swaps in the
		// reverse order: see there.
		sh := t.state - weight1
		l.win.drops.Add(oneDrop | 1<<sh)             // atomic 2: count the loss and its weight, one word
		l.win.dropSum.Add(max(now-t.start, 0) << sh) // atomic 3: the loss's weighted RTT (failure path only)
	}
	if now >= l.windowEnd.Load() { // a load of the read-mostly line
		l.closeWindow(now)
	}
	if l.queue != nil && l.queue.waiting.Load() > 0 { // after closeWindow: a raised limit frees more slots
		l.queue.handoff(l, now) // slow path: waiters may take the freed slots
	}
}

// closeWindow ends the window if it is due and holds enough evidence, and
// recomputes the limit. Slow path: once per window (plus two loads per
// release while a due window waits for samples).
func (l *Limiter) closeWindow(now int64) {
	end := l.windowEnd.Load()
	if now < end || end == lockedWindow {
		return // another goroutine closed it, or is closing it (end == lockedWindow)
	}
	if l.win.counts.Load()>>32 < min(l.minSamples.Load(), l.limit.Load()) && l.win.drops.Load() == 0 {
		// Not enough evidence yet: keep aggregating, and time every call
		// of Acquire until the window closes (the rate fell since the
		// stride was set; without this a window at stride 64 would wait
		// for 64 × MinWindowSamples calls).
		if l.stride.Load() != 0 {
			l.stride.Store(0)
		}
		return
	}
	l.closeDue(now, end)
}

// closeDue closes the window that ends at end, which is due at now, and
// recomputes the limit (closeWindow when the window holds enough evidence,
// unstallAt when it is overdue). Slow path.
func (l *Limiter) closeDue(now, end int64) {
	if !l.windowEnd.CompareAndSwap(end, lockedWindow) { // the window epoch CAS: one winner
		return
	}
	next := l.windowAfter(now)
	l.rejectedAtClose.Store(l.rejected.Load()) // clocklessRejected counts from here
	closed := false
	defer func() {
		if !closed {
			// The user's Controller panicked or called runtime.Goexit,
			// which goes on from here: keep the limiter alive. The window
			// reopens, and a slot freed by the release that got here
			// still reaches a queued waiter (the caller's handoff does
			// not run).
			l.windowEnd.Store(next)
			if l.queue != nil && l.queue.waiting.Load() > 0 {
				l.queue.handoff(l, now)
			}
		}
	}()
	// Swap the aggregates out. A release racing with these swaps may put
	// its sum in one window and its count in the next: a sample's worth of
	// error, accepted to keep releases lock-free.
	sum := l.win.sum.Swap(0)
	counts := l.win.counts.Swap(0)
	samples, count := counts>>32, int64(uint32(counts))
	mn := l.win.min.Swap(math.MaxInt64)
	maxIn := l.win.maxIn.Swap(0)
	// The drops' RTT sum before their weights, the reverse of ReleaseAt's
	// adds (weight, then RTT): a Failure release torn by these swaps can
	// leave its weight in this window and its RTT in the next, never its
	// RTT here without its weight, so this window's DropRTT can only
	// under-count. (In the opposite order one release of weight 64 caught
	// in between put a 64-call RTT sum into a window of weight 1.) The
	// orphan RTT that the next window then holds without its weight is
	// one release's sum; Gradient2 bounds each drop's RTT at twice its
	// long-term average (rttOfAll), AIMD and Vegas read only the counts.
	dropSum := l.win.dropSum.Swap(0)
	dropWord := l.win.drops.Swap(0)
	drops, dropWeight := dropWord>>32, int64(uint32(dropWord))
	w := l.slots.Load()
	seq := seqOf(w)
	l.setStride(int64(seq-l.lastSeq), maxIn) // sampling.go: the stride of the next window
	l.lastSeq = seq
	s := Sample{Now: now, Limit: l.est, Count: count, Samples: samples, Drops: drops, MaxInFlight: maxIn, InFlight: inFlightOf(w)}
	if count > 0 {
		s.AvgRTT = time.Duration(sum / count)
		s.MinRTT = time.Duration(mn)
	}
	if dropWeight > 0 {
		s.DropRTT = time.Duration(dropSum / dropWeight)
	}
	est := l.ctrl.Update(s)
	if est != est { // NaN: keep the limit
		est = l.est
	}
	est = min(max(est, float64(l.minLimit)), float64(l.maxLimit))
	l.est = est
	l.samples.Add(uint64(samples))
	l.drops.Add(uint64(drops))
	l.windows.Add(1)
	atomicx.Max(&l.peak, maxIn)
	old := l.limit.Load()
	nl := int64(est)
	if nl != old {
		l.publish(nl)
	}
	closed = true
	l.windowEnd.Store(next) // releases the window lock
	if nl != old && l.onLimit != nil {
		notify.Call2(&l.panics, l.onLimit, int(old), int(nl))
	}
}

// publish stores a new limit and the partitions' shares of it.
func (l *Limiter) publish(n int64) {
	l.limit.Store(n)
	for i := range l.parts {
		l.parts[i].share.Store(max(int64(float64(n)*l.parts[i].frac), 0))
	}
}

// Limit returns the current limit.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Config returns the configuration in force, its defaults filled in
// (Algorithm, Ticker, Classify, MinLimit, MaxLimit, Window,
// MinWindowSamples, MaxSampleStride, the Queue's durations), with
// InitialLimit set to the current limit and the Partitions' shares without
// their names (the limiter keeps none): change a field and pass it to
// [Limiter.Update]. It takes the window lock (as Update does) to read a
// consistent configuration, so it must not be called from a Controller.
func (l *Limiter) Config() Config {
	end := l.lockWindow()
	defer l.windowEnd.Store(end)
	c := Config{
		Name:             l.rejErr.Name(),
		Algorithm:        l.alg,
		InitialLimit:     int(l.limit.Load()),
		MinLimit:         int(l.minLimit),
		MaxLimit:         int(l.maxLimit),
		Window:           time.Duration(l.window.Load()),
		MinWindowSamples: int(l.minSamples.Load()),
		Classify:         l.classify,
		OnLimitChange:    l.onLimit,
		Ticker:           l.ticker,
		MaxSampleStride:  int(l.maxStride.Load()) + 1,
		Compact:          l.compact,
	}
	if len(l.parts) > 0 {
		c.Partitions = make([]Partition, len(l.parts))
		for i := range l.parts {
			c.Partitions[i].Share = l.parts[i].frac
		}
	}
	if q := l.queue; q != nil {
		q.mu.Lock()
		c.Queue = QueueConfig{MaxLength: q.maxLen, Target: time.Duration(q.target), Interval: time.Duration(q.interval), FIFO: !q.lifo}
		q.mu.Unlock()
	}
	return c
}

// Update changes the limiter's configuration while calls run (see "Live
// reconfiguration" in the package documentation). It validates c exactly
// as New does and refuses with a *rampart.ConfigError naming the field a
// change to a field fixed at construction (Name, Ticker, Compact,
// Classify, OnLimitChange, the number of Partitions, and Queue.MaxLength
// between 0 and positive; an empty Name keeps the name New was given, as
// a registry's create-or-get sets it); otherwise it applies the rest under the window
// lock, so that no window closes on a mix of the old and new settings:
// the current limit is kept, clamped to the new MinLimit and MaxLimit
// (OnLimitChange is told if that moves it, and queued calls get the slots
// a raised limit frees); the running Controller and its state are kept
// when c's Algorithm is the one in force (equal values, a nil Algorithm
// being Vegas{}), and another Algorithm is started at the kept limit.
// InitialLimit is validated and not applied: it is the limit before the
// first window. An invalid or refused c changes nothing. Update must not
// be called from the Algorithm's Controller, which runs under the window
// lock.
func (l *Limiter) Update(c Config) error {
	v, err := c.validate()
	if err != nil {
		return err
	}
	if err := l.checkFixed(&c, &v); err != nil {
		return err
	}
	old, nl, err := l.applyLocked(&v)
	if err != nil {
		return err
	}
	if nl != old {
		if l.onLimit != nil {
			notify.Call2(&l.panics, l.onLimit, int(old), int(nl))
		}
		if l.queue != nil && l.queue.waiting.Load() > 0 {
			l.queue.handoff(l, l.ticker.Now()) // a raised limit frees slots for the waiters
		}
	}
	return nil
}

// applyLocked applies v under the window lock and returns the limit before
// and after. The lock is given back on every path, a panicking or
// Goexiting Algorithm.Start included, which then changes nothing.
func (l *Limiter) applyLocked(v *settings) (old, nl int64, err error) {
	end := l.lockWindow()
	defer l.windowEnd.Store(end) // the current window keeps its end
	est := min(max(l.est, float64(v.minL)), float64(v.maxL))
	alg, ctrl := l.alg, l.ctrl
	if !sameptr.Value(v.alg, l.alg) {
		alg, ctrl = v.alg, v.alg.Start(est, float64(v.minL), float64(v.maxL))
		if ctrl == nil {
			return 0, 0, rampart.NewConfigError("adaptive", "Algorithm", "Start returned a nil Controller")
		}
	}
	l.alg, l.ctrl = alg, ctrl
	l.minLimit, l.maxLimit = int32(v.minL), int32(v.maxL)
	l.est = est
	l.window.Store(v.window)
	l.minSamples.Store(v.minSamples)
	ms := uint32(v.maxStride - 1)
	l.maxStride.Store(ms)
	if l.stride.Load() > ms {
		l.stride.Store(ms) // a lower cap holds from the next admission
	}
	for i := range l.parts {
		l.parts[i].frac = v.parts[i].frac
	}
	if q := l.queue; q != nil {
		q.mu.Lock()
		q.maxLen, q.target, q.interval, q.lifo = v.q.maxLen, v.q.target, v.q.interval, v.q.lifo
		q.mu.Unlock()
	}
	old, nl = l.limit.Load(), int64(est)
	l.publish(nl) // also when nl == old: the partitions' shares may have changed
	return old, nl, nil
}

// lockWindow takes the window lock (windowEnd = lockedWindow), waiting
// for a window's closer or another Update to give it back, and returns the
// window end it held. Slow path.
func (l *Limiter) lockWindow() int64 {
	for {
		end := l.windowEnd.Load()
		if end != lockedWindow && l.windowEnd.CompareAndSwap(end, lockedWindow) {
			return end
		}
		runtime.Gosched()
	}
}

// checkFixed returns the *rampart.ConfigError of the first field of c (v
// its settings) that differs from what New fixed.
func (l *Limiter) checkFixed(c *Config, v *settings) error {
	const policy, fixed = "adaptive", "is fixed at construction: "
	classify := c.Classify
	if classify == nil {
		classify = DefaultClassify
	}
	switch {
	case c.Name != "" && c.Name != l.rejErr.Name(): // "": the name New was given
		return rampart.NewConfigError(policy, "Name", fixed+"New built the rejection error that carries it (got %q, built with %q)", c.Name, l.rejErr.Name())
	case !sameTicker(c.Ticker, l.ticker):
		return rampart.NewConfigError(policy, "Ticker", fixed+"the calls in flight and the window end are readings of the old clock, which another clock's do not compare with")
	case c.Compact != l.compact:
		return rampart.NewConfigError(policy, "Compact", fixed+"it chose the memory layout New allocated (got %v)", c.Compact)
	case !sameptr.Func(classify, l.classify):
		return rampart.NewConfigError(policy, "Classify", fixed+"Do and pipelines read it from a word New set on every call; pass the func value New was given")
	case !sameptr.Func(c.OnLimitChange, l.onLimit):
		return rampart.NewConfigError(policy, "OnLimitChange", fixed+"the window's closer reads it from a word New set after giving the window lock back; pass the func value New was given")
	case len(v.parts) != len(l.parts):
		return rampart.NewConfigError(policy, "Partitions", fixed+"their number (%d, got %d): callers hold partition indices and permits name them", len(l.parts), len(v.parts))
	case (v.q == nil) != (l.queue == nil):
		return rampart.NewConfigError(policy, "Queue.MaxLength", fixed+"between 0 (no queue) and positive: New allocated the queue or not, and a pipeline chose its path by MayWait (got %d)", c.Queue.MaxLength)
	}
	return nil
}

// MayWait reports whether AcquireWaitAt can queue (Config.Queue is set). A
// pipeline uses it to re-read the clock after admission, so that a deadline
// does not count the time spent queueing.
func (l *Limiter) MayWait() bool { return l.queue != nil }

// InFlight returns the number of calls admitted and not yet released.
func (l *Limiter) InFlight() int { return int(max(inFlightOf(l.slots.Load()), 0)) }

// RejectedError returns the limiter's preallocated rejection error, which
// matches [ErrLimited] and [rampart.ErrRejected]: what callers of AcquireAt
// return when it refuses.
func (l *Limiter) RejectedError() error { return l.rejErr }

// Classify returns the outcome Config.Classify (default [DefaultClassify])
// gives err, for callers of the primitives (package pipeline) that release
// with the same classification as Do.
func (l *Limiter) Classify(ctx context.Context, err error) rampart.Result {
	return l.classify(ctx, err)
}

// Ticker returns the clock of the limiter's shorthands.
func (l *Limiter) Ticker() rampart.Ticker { return l.ticker }

// Stats returns a snapshot of the counters. It allocates nothing; the
// fields are read one by one, so they may be mutually inconsistent by the
// calls that ran meanwhile.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Limit:          int(l.limit.Load()),
		InFlight:       l.InFlight(),
		PeakInFlight:   int(max(l.peak.Load(), l.win.maxIn.Load())),
		Rejected:       l.rejected.Load(),
		Samples:        l.samples.Load(),
		Drops:          l.drops.Load(),
		Windows:        l.windows.Load(),
		Stride:         int(l.stride.Load()) + 1,
		ListenerPanics: l.panics.Load(),
	}
	if l.queue != nil {
		s.Queued = int(l.queue.waiting.Load())
		s.Shed = l.queue.shed.Load()
	}
	return s
}

// Do runs fn under the limiter: it admits with [Limiter.Acquire] (waiting in
// the queue when one is configured and the limit is reached, else rejecting
// at once with [Limiter.RejectedError]), runs fn, and releases with
// [Limiter.Release] and the outcome Config.Classify gives fn's error, so it reads
// the clock only for the calls sampled for their RTT (and for losses and
// waits). fn's error is returned unchanged. If fn panics or calls
// runtime.Goexit the slot is released as [rampart.Ignored] and the panic continues.
func (l *Limiter) Do(ctx context.Context, fn func(context.Context) error) error {
	t, err := l.admit(ctx)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done { // fn panicked or called Goexit
			l.Release(t, rampart.Ignored)
		}
	}()
	err = fn(ctx)
	o := l.classify(ctx, err) // user code: a panic or Goexit here releases as Ignored
	done = true               // before Release: a panicking Controller must not release twice
	l.Release(t, o)
	return err
}

// Call is the typed form of [Limiter.Do]: it runs fn under l and returns its
// result and error unchanged, or the zero T and the rejection.
func Call[T any](ctx context.Context, l *Limiter, fn func(context.Context) (T, error)) (T, error) {
	t, err := l.admit(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	done := false
	defer func() {
		if !done {
			l.Release(t, rampart.Ignored)
		}
	}()
	v, err := fn(ctx)
	o := l.classify(ctx, err) // as in Do
	done = true
	l.Release(t, o)
	return v, err
}

// admit is the acquisition of Do and Call: Acquire, or, when the limit is
// reached and a queue is configured, AcquireWaitAt (which reads the clock and
// returns a sampled Permit).
func (l *Limiter) admit(ctx context.Context) (Permit, error) {
	if l.queue == nil {
		if t, err := l.Acquire(); err == nil {
			return t, nil
		}
		return Permit{}, l.rejErr
	}
	if t, ok := l.tryBegin(); ok {
		return t, nil
	}
	return l.AcquireWaitAt(ctx, l.ticker.Now()) // slow path: may wait
}
