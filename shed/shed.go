package shed

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
)

// ErrOverloaded is the sentinel of every rejection by a [Shedder]: the
// process is overloaded and the calls in flight reached the cap (see the
// package documentation). The error a Shedder returns matches it and
// [rampart.ErrRejected] through errors.Is.
var ErrOverloaded = errors.New("overloaded")

// Permit is an admitted call's permit, returned by [Shedder.AcquireAt] (or
// [Shedder.Acquire], [Shedder.AcquirePriorityAt]) and handed back exactly
// once to [Shedder.ReleaseAt] (or [Shedder.Release]). It carries the
// admission time of a call whose latency is measured. The zero Permit is
// not a permit: never release it.
type Permit struct {
	start  int64  // the now given to AcquireAt, or read by Acquire for a sampled call
	state  uint8  // 0: not a permit; unsampled; sampled
	weight uint16 // a sampled call stands for weight+1 calls: the stride − 1 it was picked at (0 when every call is timed)
}

// Permit states.
const (
	unsampled = 1 // a permit whose latency is not measured (start unset)
	sampled   = 2 // a permit whose latency is measured from start
)

// Valid reports whether p is a permit (false for the zero Permit).
func (p Permit) Valid() bool { return p.state != 0 }

// Sampled reports whether the call's latency is measured: always for a
// Permit from AcquireAt or AcquirePriorityAt; for one from Acquire or
// AcquirePriority, only when it was picked as a latency sample (see
// [Shedder.Acquire]).
func (p Permit) Sampled() bool { return p.state == sampled }

// Signal names one overload signal, for [Config.Ignore] and
// [Stats.Trigger]. The values are bits: Config.Ignore takes several, or'ed.
type Signal uint8

const (
	// SchedLatency is the runtime's goroutine scheduling latency: the 99th
	// percentile of the time goroutines spent runnable before running,
	// since the previous sample ([Signals.SchedLatency]).
	SchedLatency Signal = 1 << iota
	// CPU is the share of GOMAXPROCS busy running Go code and the runtime
	// since the previous sample ([Signals.CPU]).
	CPU
	// Runnable is the goroutines ready to run and not running, per P
	// ([Signals.Runnable]).
	Runnable
	// InFlight is the shedder's own count of calls in flight
	// ([Config.InFlightThreshold]).
	InFlight
	// Latency is the mean latency of the calls completed since the previous
	// sample ([Config.LatencyThreshold]).
	Latency
)

var signalNames = [...]string{"sched-latency", "cpu", "runnable", "in-flight", "latency"}

// String returns the signal's name ("sched-latency", "cpu", ...), or "none"
// for 0 and "signals" for a combination.
func (s Signal) String() string {
	if s == 0 {
		return "none"
	}
	for i, n := range signalNames {
		if s == 1<<i {
			return n
		}
	}
	return "signals"
}

// Config configures a [Shedder]. The zero value is valid: runtime signals
// sampled every 100 ms, overloaded at a 10 ms p99 scheduling latency, 90 %
// CPU or 4 runnable goroutines per P, a 1 s window, a 1 s cool-off, 20 %
// hysteresis, one priority.
type Config struct {
	// Name identifies the shedder in its rejection error.
	Name string

	// Source reads the runtime's signals. Default: a [RuntimeSource] of the
	// shedder's own. Give a Source of your own where the runtime's view is
	// wrong (a sandbox whose CPU is shared with other processes, a cgroup
	// quota the runtime does not see), or wrap a RuntimeSource and
	// overwrite the signals you know better (see [Source]).
	Source Source
	// SampleInterval is the least time between two samples, which read the
	// Source, close a bucket of the window and decide whether the process
	// is overloaded. The first call at or after the due time that has a
	// clock reading (every AcquireAt; Acquire's latency samples) samples:
	// there is no background goroutine. At least 1 ms; default 100 ms.
	SampleInterval time.Duration
	// Window is the span of the buckets (one per sample) from which the
	// cap is computed: the most calls completed per second in a bucket
	// (maxPass) and the least mean latency of a bucket (minRT). At least
	// SampleInterval and at most 1024 SampleIntervals; default 1 s.
	Window time.Duration
	// CoolOff is how long the shedder stays overloaded after its last
	// rejection once the signals have fallen below their release levels
	// (go-zero's cool-off). Not negative; 0 is the default, 1 s, so no
	// cool-off at all cannot be set: 1 ns is the least, which releases at
	// the first sample with cold signals after the last rejection.
	CoolOff time.Duration
	// Hysteresis is the fraction below its threshold that a signal must
	// fall to to count as released: a signal engages at its threshold and
	// releases below threshold·(1 − Hysteresis). In [0, 1); default (0)
	// 0.2. A tiny value such as 1e-9 leaves no band.
	Hysteresis float64

	// SchedLatencyThreshold engages the shedder when the p99 scheduling
	// latency since the previous sample reaches it. At least 1 µs; default
	// 10 ms.
	SchedLatencyThreshold time.Duration
	// CPUThreshold engages the shedder when the share of GOMAXPROCS busy
	// reaches it. In (0, 1]; default 0.9 (go-zero's 900‰).
	CPUThreshold float64
	// RunnableThreshold engages the shedder when the runnable goroutines
	// per P reach it. Default 4; not negative.
	RunnableThreshold float64
	// InFlightThreshold, when positive, engages the shedder when the calls
	// in flight at a sample reach it. Default 0: the signal is off.
	InFlightThreshold int
	// LatencyThreshold, when positive, engages the shedder when the mean
	// latency of the calls completed since the previous sample (of the
	// timed ones: see MaxSampleStride) reaches it.
	// Default 0: the signal is off.
	LatencyThreshold time.Duration
	// Ignore turns signals off, e.g. CPU where the runtime's CPU
	// accounting is known to be wrong. Ignoring every signal leaves a
	// shedder that never engages.
	Ignore Signal

	// Priorities is the number of priority levels of
	// [Shedder.AcquirePriorityAt], 0 the most important. At most 64;
	// default 1.
	Priorities int
	// PriorityReserve is the fraction of the cap that each priority level
	// keeps from the level below it (trunk reservation): while overloaded,
	// level p is admitted while at most max(1, limit − p·⌈cap·PriorityReserve⌉)
	// calls are in flight, so the least important level is shed first and
	// the most important has the whole limit (the cap and one call more:
	// see the package documentation). In [0, 1), with
	// (Priorities − 1)·PriorityReserve < 1; default (0) 0.1 when Priorities
	// > 1.
	PriorityReserve float64

	// MaxSampleStride bounds the latency sampling of Acquire, Release, Do
	// and Call (see [Shedder.Acquire]): about one call in a stride is
	// timed, the stride set at each sample so that a bucket holds at least
	// 32 timed calls and a timed call comes every 10 ms or sooner at the
	// last bucket's rate, and never above MaxSampleStride. 1 times every
	// call (two clock reads per call). A power of two from 1 to 1024;
	// default (0) 64. AcquireAt and AcquirePriorityAt take the time as an
	// argument and are always samples.
	MaxSampleStride int

	// Classify maps the error of a function run by Do or Call to an
	// outcome. Default [DefaultClassify].
	Classify func(ctx context.Context, err error) rampart.Result
	// OnOverload is called with true when the shedder engages (a signal
	// reached its threshold) and with false when it releases. It runs on
	// the goroutine that sampled, while it holds the sample: the calls
	// never overlap and come in the order of the changes, but one that
	// blocks delays the next sample until it returns (admissions go on,
	// at the cap of the last sample). A panic is recovered
	// (Stats.ListenerPanics).
	OnOverload func(on bool)
	// Ticker is the clock of the shorthands (Acquire, Release, Do, Call)
	// and of the first sample. Default rampart.DefaultTicker().
	Ticker rampart.Ticker

	// Compact lays the instance out without cache-line padding: smaller
	// (384 B instead of 448 B), for the many cold instances (per-tenant,
	// per-route keys) where goroutines do not contend on one instance; the
	// default pads the words that many goroutines write on every call.
	Compact bool
}

// DefaultClassify is the default Config.Classify: nil is a
// [rampart.Success]; context.Canceled while ctx is cancelled is
// [rampart.Ignored] (the caller gave up); context.DeadlineExceeded and
// rejections by rampart policies ([rampart.ErrRejected]) are
// [rampart.Failure]; any other error is a [rampart.Success] (the handler ran
// to its end, and its latency and completion are evidence of capacity).
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

// Stats is a snapshot of a [Shedder], returned by value.
type Stats struct {
	Admitted       uint64        // calls admitted
	Rejected       uint64        // calls refused while overloaded
	InFlight       int           // calls admitted and not yet released
	Overloaded     bool          // the shedder is engaged now
	Overloads      uint64        // times it engaged
	Trigger        Signal        // the signals at or above their thresholds at the last sample
	Cap            int           // the cap while overloaded: maxPass × minRT, rounded, or the last one measured when no call completed in the window (0 before any completion, or when not overloaded)
	Limit          int           // the calls in flight admitted now at priority 0: Cap + 1 (a call that waits for a core), or the probe (⌈1.25 × Cap⌉, or max(1, ⌊0.75 × Cap⌋) with no extra call, one sample in eight each)
	MaxPass        float64       // the most calls completed per second in a bucket of the window, at the last sample (0: none completed)
	MinRT          time.Duration // the least mean latency of a bucket of the window, at the last sample (0: none completed)
	Signals        Signals       // the Source's last reading
	Samples        uint64        // samples taken
	Stride         int           // Acquire's latency sampling stride now: about one call in Stride is timed
	ListenerPanics uint64        // panics of OnOverload or the Source recovered
}

// bucket is one sample's completions: the Success releases between two
// samples and the mean latency of the timed ones.
type bucket struct {
	end    int64 // the sample that closed it
	dur    int64 // its length, > 0
	passes int64 // Success releases
	meanRT int64 // the mean latency of the timed Success releases; -1: none timed
}

// Slot word layout (s.slots), as adaptive's: one atomic add takes a slot
// and counts the admission, so Admitted costs no word of its own.
//
//	63                   32 31                    0
//	+----------------------+----------------------+
//	| admissions (wrapping)|  calls in flight     |
//	+----------------------+----------------------+
//
// A release subtracts 1; an undone admission subtracts admitOne.
const admitOne = 1<<32 | 1

// inFlightOf returns the calls in flight held in a slot word.
func inFlightOf(w int64) int64 { return int64(int32(w)) }

// seqOf returns the admissions counted in a slot word (wrapping).
func seqOf(w int64) uint32 { return uint32(uint64(w) >> 32) }

// admittedAt returns the admissions counted up to slot word w, from the
// count a at the last sample, whose low 32 bits were the slot word's count
// then. The difference is signed: an admission being undone (a rejection)
// counts in the slot word between its add and its undo, so a sample may
// count one that w no longer holds.
func admittedAt(a uint64, w int64) uint64 {
	return a + uint64(int64(int32(seqOf(w)-uint32(a))))
}

// lockedSample in next marks a sample being taken: no reading reaches it
// (due times are capped below it), so no other caller samples meanwhile.
const lockedSample = math.MaxInt64

// maxCap is the cap before the window holds a completed call: no limit.
const maxCap = math.MaxInt32

// Shedder sheds calls while the process is overloaded. Create it with [New]
// and run calls through [Shedder.Do] or [Call]; [Shedder.Acquire] and then
// exactly one [Shedder.Release] bracket a call by hand, and the XAt forms do
// the same with the caller's clock readings.
//
// It is a counter of calls in flight, checked against a cap only while the
// process is overloaded; the first call after each SampleInterval reads the
// signals and recomputes the cap (see the package documentation). Admission
// and release take no lock and allocate nothing. A Shedder is safe for
// concurrent use.
//
// The zero value is not usable; build with [New]. A zero Shedder has no
// window, no Source and no Ticker: AcquireAt admits every call and never
// samples, and its shorthands (Acquire, Do, ...) panic.
//
// A Shedder is 384 B (448 B unless [Config.Compact]) on 64 B cache lines
// (amd64; 512 B and 640 B on arm64's 128 B lines, which pad its groups a
// line apart), plus its window's
// buckets (32 B each: 10 at the defaults, 320 B) and, with the default
// Source, a [RuntimeSource] (see there); a Name adds its rejection error
// (unnamed shedders share one).
type Shedder struct {
	// The layout keeps the words every call writes (the hot group) and the
	// words every call reads (the read-mostly group) at least a line minus
	// a word apart, with the sampler's atomics between them; unless
	// Config.Compact, New allocates the Shedder in a paddedShedder, whose
	// leading line keeps the object before it off the hot words, and the
	// sampler's plain fields after the read-mostly group keep the object
	// after it away. A test checks the distances.

	// Hot: written by every admission (slots), every Success release
	// (slots, passes; rtSum and timed for a timed one) and every rejection
	// (slots, rejected and, at most once per dropGrain, lastDrop): 48
	// bytes, one line (a Shedder's size class is a multiple of 64 B, so
	// the padded layout starts them on a line).
	slots    atomic.Int64 // in flight (low 32 bits) and admissions (high 32): see admitOne
	rtSum    atomic.Int64 // Σ latency of the timed Success releases of the current bucket
	timed    atomic.Int64 // timed Success releases of the current bucket
	passes   atomic.Int64 // Success releases of the current bucket
	rejected atomic.Uint64
	lastDrop atomic.Int64 // the reading of a recent rejection: the cool-off counts from it

	// Written by the sampler (once per sample) and read by Stats only.
	admitted  atomic.Uint64 // admissions counted up to the last sample; its low 32 bits are the slot word's count then
	overloads atomic.Uint64
	samples   atomic.Uint64
	panics    atomic.Uint64
	trigger   atomic.Uint32 // the Signal bits at or above threshold at the last sample
	maxPass   atomic.Uint64 // math.Float64bits of Stats.MaxPass
	minRT     atomic.Int64
	capBase   atomic.Int64  // Stats.Cap: the cap before the probe's gain; 0 when not engaged
	sigSched  atomic.Int64  // Signals.SchedLatency
	sigCPU    atomic.Uint64 // math.Float64bits of Signals.CPU
	sigRun    atomic.Uint64 // math.Float64bits of Signals.Runnable
	_         [lineGap]byte // none on 64 B lines; keeps the groups a line apart on 128 and 256 B ones

	// Read-mostly: read by every call, written once per sample (next,
	// capw) or never.
	next     atomic.Int64 // the reading at which the next sample is due; lockedSample while one is taken
	capw     atomic.Int64 // 0: not overloaded; else the cap (low 32 bits) and the priority step (high 32)
	ticker   rampart.Ticker
	classify func(context.Context, error) rampart.Result
	rejErr   *rampart.RejectedError
	prios    int32         // Config.Priorities
	stride   atomic.Uint32 // Acquire's sampling stride − 1 (a mask): a call is timed when its random draw & stride == 0

	_ [lineGap]byte // as above, between the read-mostly words and the object after the Shedder

	// The sampler's: read and written only by the goroutine that holds
	// the sample lock (next == lockedSample), published through the CAS
	// and Store on next.
	src        Source
	sig        Signals // the Source's reading, filled at each sample
	onOverload func(bool)
	ring       []bucket
	head       int
	last       int64   // the reading of the previous sample
	lastCap    float64 // the last cap measured from a window with completions; maxCap before any
	interval   int64
	window     int64
	coolOff    int64
	dropGrain  int64 // lastDrop is stored when it is older than this (CoolOff/16)
	release    float64
	schedTh    int64
	cpuTh      float64
	runTh      float64
	inflightTh int64
	latencyTh  int64
	reserve    float64
	ignore     Signal
	on         bool
	phase      uint8  // samples since the engagement, wrapping (a multiple of probeCycle): the gain cycle's position
	maxStride  uint16 // Config.MaxSampleStride
}

// lineGap is the padding the Shedder adds after the sampler's atomics and
// after the read-mostly group, beyond the 88 B and 192 B (on 64-bit
// platforms) that those fields already put between the groups: the line
// size beyond 64 B (64 B on arm64's 128 B lines, 192 B on s390x's 256 B
// ones; none on amd64 and on the 32 B lines of arm and mips), so that the
// groups are a line apart on every line size (TestLayoutSeparatesWrittenWords).
const lineGap = max(pad.LineSize, 64) - 64

// paddedShedder is the default layout: a line of padding before the
// Shedder keeps the object before it off the hot words' line.
type paddedShedder struct {
	_ pad.Line
	s Shedder
}

// unnamedRejection is the rejection error of every Shedder without a Name.
var unnamedRejection = rampart.NewRejectedError("shed", "", ErrOverloaded)

// New validates c and returns a Shedder. An invalid field gives a
// *rampart.ConfigError (matching rampart.ErrInvalidConfig).
func New(c Config) (*Shedder, error) {
	const policy = "shed"
	interval := durationOr(c.SampleInterval, 100*time.Millisecond)
	if c.SampleInterval < 0 || interval < time.Millisecond {
		return nil, rampart.NewConfigError(policy, "SampleInterval", "must be at least 1ms (0: default 100ms), got %v", c.SampleInterval)
	}
	window := durationOr(c.Window, time.Second)
	if c.Window < 0 || window < interval || window/interval > 1024 {
		return nil, rampart.NewConfigError(policy, "Window", "must be from SampleInterval (%v) to 1024 of them (0: default 1s), got %v", interval, c.Window)
	}
	if c.CoolOff < 0 {
		return nil, rampart.NewConfigError(policy, "CoolOff", "must not be negative, got %v", c.CoolOff)
	}
	if !(c.Hysteresis >= 0 && c.Hysteresis < 1) {
		return nil, rampart.NewConfigError(policy, "Hysteresis", "must be in [0, 1), got %v", c.Hysteresis)
	}
	if c.SchedLatencyThreshold < 0 || (c.SchedLatencyThreshold > 0 && c.SchedLatencyThreshold < time.Microsecond) {
		return nil, rampart.NewConfigError(policy, "SchedLatencyThreshold", "must be at least 1µs (0: default 10ms), got %v", c.SchedLatencyThreshold)
	}
	if !(c.CPUThreshold >= 0 && c.CPUThreshold <= 1) {
		return nil, rampart.NewConfigError(policy, "CPUThreshold", "must be in (0, 1] (0: default 0.9), got %v", c.CPUThreshold)
	}
	if !(c.RunnableThreshold >= 0 && c.RunnableThreshold <= math.MaxInt32) {
		return nil, rampart.NewConfigError(policy, "RunnableThreshold", "must be in [0, %d] (0: default 4), got %v", math.MaxInt32, c.RunnableThreshold)
	}
	if c.InFlightThreshold < 0 || c.InFlightThreshold > math.MaxInt32 {
		return nil, rampart.NewConfigError(policy, "InFlightThreshold", "must be in [0, %d] (0: off), got %d", math.MaxInt32, c.InFlightThreshold)
	}
	if c.LatencyThreshold < 0 {
		return nil, rampart.NewConfigError(policy, "LatencyThreshold", "must not be negative (0: off), got %v", c.LatencyThreshold)
	}
	if c.Ignore >= 1<<len(signalNames) {
		return nil, rampart.NewConfigError(policy, "Ignore", "holds an unknown signal bit: %#x", uint8(c.Ignore))
	}
	prios := c.Priorities
	if prios == 0 {
		prios = 1
	}
	if prios < 1 || prios > 64 {
		return nil, rampart.NewConfigError(policy, "Priorities", "must be from 1 to 64 (0: default 1), got %d", c.Priorities)
	}
	reserve := c.PriorityReserve
	if !(reserve >= 0 && reserve < 1) {
		return nil, rampart.NewConfigError(policy, "PriorityReserve", "must be in [0, 1), got %v", c.PriorityReserve)
	}
	if reserve == 0 {
		reserve = 0.1
	}
	if prios > 1 && float64(prios-1)*reserve >= 1 {
		return nil, rampart.NewConfigError(policy, "PriorityReserve", "times Priorities − 1 (%d) must be below 1, got %v", prios-1, reserve)
	}
	maxStride := c.MaxSampleStride
	if maxStride == 0 {
		maxStride = 64
	}
	if maxStride < 1 || maxStride > 1024 || maxStride&(maxStride-1) != 0 {
		return nil, rampart.NewConfigError(policy, "MaxSampleStride", "must be a power of two from 1 to 1024 (0: default 64), got %d", c.MaxSampleStride)
	}
	if ticker.IsNil(c.Ticker) {
		return nil, rampart.NewConfigError(policy, "Ticker", ticker.NilReason, c.Ticker)
	}
	if isNilSource(c.Source) {
		return nil, rampart.NewConfigError(policy, "Source", "is a nil %T: leave it nil for the runtime's signals", c.Source)
	}
	var s *Shedder
	if c.Compact {
		s = new(Shedder)
	} else {
		s = &new(paddedShedder).s
	}
	s.interval = int64(interval)
	s.window = int64(window)
	s.ring = make([]bucket, (window+interval-1)/interval)
	s.coolOff = int64(durationOr(c.CoolOff, time.Second))
	s.dropGrain = max(s.coolOff/16, 1)
	h := c.Hysteresis
	if h == 0 {
		h = 0.2
	}
	s.release = 1 - h
	s.schedTh = int64(durationOr(c.SchedLatencyThreshold, 10*time.Millisecond))
	s.cpuTh = floatOr(c.CPUThreshold, 0.9)
	s.runTh = floatOr(c.RunnableThreshold, 4)
	s.inflightTh = int64(c.InFlightThreshold)
	s.latencyTh = int64(c.LatencyThreshold)
	if s.inflightTh == 0 {
		c.Ignore |= InFlight
	}
	if s.latencyTh == 0 {
		c.Ignore |= Latency
	}
	s.ignore = c.Ignore
	s.prios = int32(prios)
	s.maxStride = uint16(maxStride)
	s.reserve = reserve
	s.rejErr = unnamedRejection
	if c.Name != "" {
		s.rejErr = rampart.NewRejectedError(policy, c.Name, ErrOverloaded)
	}
	s.classify = c.Classify
	if s.classify == nil {
		s.classify = DefaultClassify
	}
	s.onOverload = c.OnOverload
	s.src = c.Source
	if s.src == nil {
		s.src = NewRuntimeSource()
	}
	s.ticker = c.Ticker
	if s.ticker == nil {
		s.ticker = rampart.DefaultTicker()
	}
	s.lastDrop.Store(math.MinInt64) // no rejection yet: the cool-off is long over (sums with it saturate)
	s.sigSched.Store(-1)
	s.sigCPU.Store(math.Float64bits(-1))
	s.sigRun.Store(math.Float64bits(-1))
	now := s.ticker.Now()
	s.last = now
	s.lastCap = maxCap
	s.next.Store(s.dueAfter(now))
	return s, nil
}

// dueAfter is the due time of the sample after one at now: saturated, and
// below lockedSample.
func (s *Shedder) dueAfter(now int64) int64 {
	return min(atomicx.SatAdd(now, s.interval), lockedSample-1)
}

// AcquireAt admits a call of the most important priority (0): see
// [Shedder.AcquirePriorityAt].
func (s *Shedder) AcquireAt(now int64) (Permit, error) { return s.AcquirePriorityAt(now, 0) }

// AcquirePriorityAt admits a call of priority p (0 the most important,
// Config.Priorities − 1 the least; an out-of-range p is treated as the
// least) at time now, from the shedder's ticker, and returns its Permit, or
// (Permit{}, [Shedder.RejectedError]) while the process is overloaded and
// the calls in flight have reached p's share of the cap:
// max(1, limit − p·⌈cap·PriorityReserve⌉), the limit being the cap and one
// call more (see the package documentation). An admitted call must be released
// exactly once with [Shedder.ReleaseAt].
//
// If now is at or past the due sample, the caller first takes the sample
// (one winner of a CAS; see the package documentation). Cost otherwise:
// one atomic add and two loads (the due time and the cap) when admitted; a
// rejection adds one add to undo, one counter increment and a load of the
// last rejection's time (a store at most once per CoolOff/16). No
// allocation, no lock, no clock read.
func (s *Shedder) AcquirePriorityAt(now int64, p int) (Permit, error) {
	if now >= s.next.Load() { // one load of the read-mostly line
		s.sampleAt(now) // slow path: once per SampleInterval
	}
	w := s.slots.Add(admitOne) // atomic 1: take a slot and count the admission
	if c := s.capw.Load(); c != 0 && inFlightOf(w) > s.limitOf(c, p) {
		return s.rejectAt(now)
	}
	return Permit{start: now, state: sampled}, nil
}

// limitOf returns priority p's share of the cap packed in c (an
// out-of-range p is the least important level's).
func (s *Shedder) limitOf(c int64, p int) int64 {
	if uint(p) >= uint(s.prios) {
		p = int(s.prios) - 1
	}
	return max(c&0xffffffff-int64(p)*(c>>32), 1)
}

// rejectAt undoes an admission at now and counts the rejection. Slow path.
func (s *Shedder) rejectAt(now int64) (Permit, error) {
	s.slots.Add(-admitOne) // atomic 2: give the slot and the admission back
	s.rejected.Add(1)      // atomic 3: stats
	// The cool-off counts from the last rejection; storing every one would
	// write the line on every rejection of a flood, so store only when the
	// stored one is a sixteenth of the cool-off old.
	if now >= atomicx.SatAdd(s.lastDrop.Load(), s.dropGrain) {
		s.lastDrop.Store(now)
	}
	return Permit{}, s.rejErr
}

// ReleaseAt ends the call of p at time now with outcome r, freeing its
// slot. A [rampart.Success] is a completed call: it counts toward the
// bucket's completions (maxPass) and adds its latency now − start (minRT).
// A [rampart.Failure] or [rampart.Ignored] call only frees the slot: a call
// that failed or was abandoned says nothing of the capacity (go-zero's
// Fail). Any other value counts as a Failure, as [rampart.Result]
// documents.
//
// A Permit from Acquire that was not picked as a latency sample
// ([Permit.Sampled] false) contributes no latency: its Success counts as a
// completion only. One that was picked at a stride n counts its latency
// n times, for the n calls it stands for (see [Shedder.AcquirePriority]).
//
// Cost: one atomic add; a Success adds one more, and two for a sampled
// call, on the same line. No allocation, no lock, no clock read.
func (s *Shedder) ReleaseAt(p Permit, now int64, r rampart.Result) {
	s.slots.Add(-1) // atomic 1: free the slot
	if r == rampart.Success {
		if p.state == sampled {
			// The latency before its count, which the sampler swaps in
			// the reverse order, so that a release torn by a sample
			// leaves at most its latency in the closing bucket and its
			// count in the next: one bucket's mean one call's share high
			// and the next one's one call's share low, a sample's worth
			// of error accepted to keep releases lock-free (as adaptive's
			// windows do). The tear is a few nanoseconds wide, once per
			// SampleInterval.
			// Weighted by the stride the call was picked at: one picked
			// at stride 64 stands for 64 calls, so that a bucket whose
			// timed calls were picked at several strides (the stride
			// fell while they ran) has the mean of its completions, not
			// of the calls of the lowest stride (adaptive's limiter
			// weighs its samples the same way).
			w := int64(p.weight) + 1
			s.rtSum.Add(max(now-p.start, 0) * w) // atomic 2
			s.timed.Add(w)                       // atomic 3
		}
		s.passes.Add(1) // atomic 2 (4 for a timed call)
	}
}

// Acquire admits a call of the most important priority: see
// [Shedder.AcquirePriority].
func (s *Shedder) Acquire() (Permit, error) { return s.AcquirePriority(0) }

// AcquirePriority is [Shedder.AcquirePriorityAt] reading the shedder's
// ticker only for the calls it picks as latency samples, as high-rate
// systems do: about one call in a stride, picked at random (the runtime's
// per-thread generator: no shared word), so a timed call comes every few
// milliseconds whatever the rate. The stride is set at each sample from
// the last bucket's completions (see Config.MaxSampleStride): 1, every
// call timed, at low rates. A sampled call reads the clock for its start,
// the due sample and the cool-off; an unsampled one reads none, and its
// rejection does not move the cool-off (the sampled ones among a flood of
// rejections do). A picked call's latency stands for the stride's calls
// (see [Shedder.ReleaseAt]).
//
// While the shedder is engaged, every admitted call is timed: one clock
// read at admission (and one at its Success release), which also takes a
// due sample, so that an engaged shedder samples, and releases, as soon
// as its traffic falls, whatever stride the traffic before it set. The
// calls admitted while engaged are at most the cap's in flight;
// rejections read no clock unless picked.
func (s *Shedder) AcquirePriority(p int) (Permit, error) {
	if m := s.stride.Load(); rand.Uint32()&m == 0 { // a latency sample: the clock is read for it, the due sample and the cool-off
		pm, err := s.AcquirePriorityAt(s.ticker.Now(), p)
		if err == nil && s.capw.Load() == 0 {
			// Not engaged: it stands for the stride of calls it was
			// picked from. Engaged, every admitted call is timed: it
			// stands for itself.
			pm.weight = uint16(m)
		}
		return pm, err
	}
	w := s.slots.Add(admitOne) // atomic 1: take a slot and count the admission
	if c := s.capw.Load(); c != 0 {
		if inFlightOf(w) > s.limitOf(c, p) {
			s.slots.Add(-admitOne) // atomic 2: give it back
			s.rejected.Add(1)      // atomic 3: stats
			return Permit{}, s.rejErr
		}
		// Engaged and admitted (at most the cap's calls in flight): a
		// clock read, so that the call is timed and takes a due sample.
		// The stride was set by the traffic before; were only the picked
		// calls to sample, a fall in the traffic (an upstream that stops
		// sending to a shedding node) would hold the shedder engaged for
		// about a stride of arrivals instead of its cool-off.
		now := s.ticker.Now()
		if now >= s.next.Load() {
			s.sampleAt(now)
		}
		return Permit{start: now, state: sampled}, nil
	}
	return Permit{state: unsampled}, nil
}

// Release is [Shedder.ReleaseAt] reading the shedder's ticker only for a
// sampled Permit's Success (its latency); a Failure, an Ignored call or an
// unsampled Permit needs no reading.
func (s *Shedder) Release(p Permit, r rampart.Result) {
	s.ReleaseAt(p, s.releaseNow(p, r), r)
}

// releaseNow returns the release time of p with outcome r: a reading of
// the ticker for a sampled Permit's Success, else 0 (unused).
func (s *Shedder) releaseNow(p Permit, r rampart.Result) int64 {
	if r == rampart.Success && p.state == sampled {
		return s.ticker.Now()
	}
	return 0
}

// RejectedError returns the shedder's preallocated rejection error, which
// matches [ErrOverloaded] and [rampart.ErrRejected]: what callers of
// AcquireAt return when it refuses.
func (s *Shedder) RejectedError() error { return s.rejErr }

// Classify returns the outcome Config.Classify (default [DefaultClassify])
// gives err, for callers of the primitives (a pipeline) that release with
// the same classification as Do.
func (s *Shedder) Classify(ctx context.Context, err error) rampart.Result {
	return s.classify(ctx, err)
}

// Ticker returns the clock of the shedder's shorthands.
func (s *Shedder) Ticker() rampart.Ticker { return s.ticker }

// InFlight returns the number of calls admitted and not yet released.
func (s *Shedder) InFlight() int { return int(max(inFlightOf(s.slots.Load()), 0)) }

// Overloaded reports whether the shedder is engaged: it rejects the calls
// beyond the cap.
func (s *Shedder) Overloaded() bool { return s.capw.Load() != 0 }

// Stats returns a snapshot of the counters. It allocates nothing; the
// fields are read one by one, so they may be mutually inconsistent by the
// calls that ran meanwhile.
func (s *Shedder) Stats() Stats {
	w := s.slots.Load()
	a := s.admitted.Load()
	c := s.capw.Load()
	st := Stats{
		Admitted:       admittedAt(a, w),
		Rejected:       s.rejected.Load(),
		InFlight:       int(max(inFlightOf(w), 0)),
		Overloaded:     c != 0,
		Overloads:      s.overloads.Load(),
		Trigger:        Signal(s.trigger.Load()),
		MaxPass:        math.Float64frombits(s.maxPass.Load()),
		MinRT:          time.Duration(s.minRT.Load()),
		Samples:        s.samples.Load(),
		Stride:         int(s.stride.Load()) + 1,
		ListenerPanics: s.panics.Load(),
		Signals: Signals{
			SchedLatency: time.Duration(s.sigSched.Load()),
			CPU:          math.Float64frombits(s.sigCPU.Load()),
			Runnable:     math.Float64frombits(s.sigRun.Load()),
		},
	}
	if cp := s.capBase.Load(); c != 0 && cp != maxCap {
		st.Cap = int(cp)
		st.Limit = int(c & 0xffffffff)
	}
	return st
}

// Do runs fn under the shedder at the most important priority: see
// [Shedder.DoPriority].
func (s *Shedder) Do(ctx context.Context, fn func(context.Context) error) error {
	return s.DoPriority(ctx, 0, fn)
}

// DoPriority runs fn under the shedder as a call of priority p: it admits
// with [Shedder.AcquirePriority] (rejecting at once with
// [Shedder.RejectedError] while overloaded and at the cap), runs fn, and
// releases with [Shedder.Release] and the outcome Config.Classify gives
// fn's error. fn's error is returned unchanged. If fn panics or calls
// runtime.Goexit the slot is released as [rampart.Ignored] and the panic
// continues, as it is when Classify or the Ticker panics.
func (s *Shedder) DoPriority(ctx context.Context, p int, fn func(context.Context) error) error {
	pm, err := s.AcquirePriority(p)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done { // fn or Classify panicked or called Goexit
			s.Release(pm, rampart.Ignored)
		}
	}()
	err = fn(ctx)
	o := s.classify(ctx, err)
	now := s.releaseNow(pm, o) // before done: a Ticker that panics leaves the slot to the deferred release
	done = true
	s.ReleaseAt(pm, now, o)
	return err
}

// Call is the typed form of [Shedder.Do]: it runs fn under s and returns its
// result and error unchanged, or the zero T and the rejection.
func Call[T any](ctx context.Context, s *Shedder, fn func(context.Context) (T, error)) (T, error) {
	pm, err := s.Acquire()
	if err != nil {
		var zero T
		return zero, err
	}
	done := false
	defer func() {
		if !done {
			s.Release(pm, rampart.Ignored)
		}
	}()
	v, err := fn(ctx)
	o := s.classify(ctx, err)
	now := s.releaseNow(pm, o) // before done: as in DoPriority
	done = true
	s.ReleaseAt(pm, now, o)
	return v, err
}

// notifyOverload calls the listener, recovering a panic.
func (s *Shedder) notifyOverload(on bool) {
	if s.onOverload != nil {
		notify.Call1(&s.panics, s.onOverload, on)
	}
}

func durationOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func floatOr(f, def float64) float64 {
	if f == 0 {
		return def
	}
	return f
}
