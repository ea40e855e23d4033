package circuitbreaker

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/notify"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
)

// ErrOpen is the sentinel of every rejection by a breaker: open, forced
// open, or half-open with every probe taken. Match it with errors.Is; the
// error a breaker returns also matches rampart.ErrRejected.
var ErrOpen = errors.New("open")

// ErrHalfOpenFull is the sentinel of a rejection in half-open because every
// probe of the period is taken or in flight. It wraps ErrOpen, so
// errors.Is(err, ErrOpen) holds for it too.
var ErrHalfOpenFull error = &halfOpenFull{}

type halfOpenFull struct{}

func (*halfOpenFull) Error() string { return "open (half-open, probes busy)" }
func (*halfOpenFull) Unwrap() error { return ErrOpen }

// The state word packs the state, the half-open probe counters and the
// generation into one uint64, so that every decision is made on one atomic
// load and every change is one CAS:
//
//	 63                  35 34      27 26      19 18      11 10       3 2     0
//	+----------------------+----------+----------+----------+----------+-------+
//	| generation (29 bits) | failed   | slow     | in flight| admitted | state |
//	+----------------------+----------+----------+----------+----------+-------+
//
// The four 8-bit probe counters are those of the current half-open period;
// they are zero in every other state. The probes recorded are admitted -
// in flight (an Ignored probe gives back both), so the successes are
// admitted - in flight - failed; slow counts the slow probes, failed or not
// (always 0 in Consecutive mode, where a slow call is a failure). Every
// transition adds one to the generation and clears the counters, so a
// permit (which carries the word it was admitted under) is current exactly
// when its generation and state still match (keyMask). The generation wraps
// after 2^29 transitions, skipping 0 so that the zero Permit is never
// current; a permit would have to be held across a multiple of that to be
// mistaken.
const (
	stateBits  = 3
	fieldBits  = 8
	fieldMax   = 1<<fieldBits - 1
	admShift   = stateBits
	inflShift  = admShift + fieldBits
	slowShift  = inflShift + fieldBits
	failShift  = slowShift + fieldBits
	genShift   = failShift + fieldBits
	stateMask  = 1<<stateBits - 1
	genMask    = (1<<64 - 1) >> genShift << genShift
	keyMask    = genMask | stateMask
	admOne     = 1 << admShift
	inflOne    = 1 << inflShift
	slowOne    = 1 << slowShift
	failOne    = 1 << failShift
	genOne     = 1 << genShift
	fastNone   = 0
	fastCount  = 1
	fastConsec = 2
)

// nextGen returns the generation bits after w's, skipping generation 0 when
// they wrap so that the zero Permit stays stale. Transitions only.
func nextGen(w uint64) uint64 {
	if g := w&genMask + genOne; g != 0 {
		return g
	}
	return genOne
}

func field(w uint64, shift uint) int { return int(w >> shift & fieldMax) }

// Permit is the admission of one call: the state word it was admitted under
// (generation and state) and the time it started. Pass it back to
// [Breaker.ReleaseAt] (or [Breaker.Release]) exactly once. A permit from an
// older generation (the breaker changed state since) is ignored when
// recorded. The zero Permit is never current.
type Permit struct {
	word  uint64
	start int64
}

// Breaker is a circuit breaker. Create it with [New] and run calls through
// [Breaker.Do] or [Call]; [Breaker.Acquire] then exactly one
// [Breaker.Release] bracket a call by hand, and [Breaker.AcquireAt] /
// [Breaker.ReleaseAt] do the same with a clock reading the caller already
// has.
//
// The state, the generation and the window are atomic words (see the
// package documentation for the algorithm); transitions take a mutex. The
// zero Breaker is not usable. A Breaker is safe for concurrent use.
type Breaker struct {
	breakerCold
	// Fills breakerCold up to a whole number of cache lines, so that hot
	// starts a line: the allocator places an object whose size is a
	// multiple of the line size on a line boundary (its size classes that
	// are multiples of 64 B start at multiples of their size from a page),
	// which TestBreakerLayout checks. That holds where the Breaker gets
	// no malloc header (see alignedByAllocator): amd64, arm64 and the
	// other 64-bit platforms with lines of at most 128 B, not 386, arm
	// and s390x (256 B lines), where hot is on lines of its own only
	// when the allocator happens to align it.
	_   [(pad.LineSize - unsafe.Sizeof(breakerCold{})%pad.LineSize) % pad.LineSize]byte
	hot hotLine // the words the calls' records write; the last line (or lines) of the object
}

// alignedByAllocator reports whether the allocator places every Breaker
// on a cache-line boundary: an object with pointers gets an 8 B malloc
// header before it (the runtime's minSizeForMallocHeader) when it is
// larger than 8 words of pointer bitmap, 512 B on 64-bit platforms and
// 128 B on 32-bit ones.
const alignedByAllocator = unsafe.Sizeof(Breaker{}) <= 8*unsafe.Sizeof(uintptr(0))*unsafe.Sizeof(uintptr(0))

// breakerCold is every field of a Breaker that calls only read (written
// on transitions, the rare path, or never after New).
type breakerCold struct {
	state atomic.Uint64 // the state word (layout above); loaded by every call
	// set is the configuration that calls read, immutable once
	// published: &init until an Update publishes another. A call that
	// reads more than one updatable field loads it once and reads every
	// field from that copy (the closed admission of AcquireAt reads none);
	// the fields fixed at New are read from init, without the load.
	set atomic.Pointer[settings]
	// init is New's configuration; its fixed fields are every
	// configuration's. Its first line, with state and set, holds what the
	// closed paths read (fast, timed, the Ticker): a Breaker starts a line.
	init      settings
	openUntil atomic.Int64 // end of the open period; written by transitions
	probeAt   atomic.Int64 // HalfOpen only: when the newest probe was admitted (MaxHalfOpenDuration counts from it)
	// lines points to the rejection counters of P 1 to P nLines (P 0's
	// is hot.rej), one hotLine each (see perP); nil until the first
	// transition to a rejecting state (Open, HalfOpen, ForcedOpen), which
	// allocates them for the Ps that exist then, and nil for good when
	// Compact or GOMAXPROCS was 1 then. With CountStats, New allocates
	// them (for the Ps that exist at New) and one line more, P 0's
	// successes (see allocCounters): nLines is 0 when GOMAXPROCS was 1 at
	// New, or with Compact, whose one line counts successes only, and no
	// trip adds rejection lines later. Lazy, as the open timer: a breaker
	// that never opens carries no counters (a default one stays under
	// 1 KB at any GOMAXPROCS). An atomic pointer because rejections load
	// it while a trip publishes it (on amd64 and arm64 its load is a plain
	// load); a pointer and a count rather than a slice: 12 B less, which
	// keeps the Breaker at 448 B.
	lines atomic.Pointer[hotLine]
	// Rarely written.
	mu             sync.Mutex // serializes transitions and Updates' publications of set (rare path)
	streak         int32      // trips from half-open since the last close; under mu
	nLines         int32      // the counters lines points to; written once, before lines is published, and read only after loading it non-nil
	pending        atomic.Bool
	hinted         bool // Ticker is a real-time NanoTicker: an open timer hints when an open period is over
	count          countWindow
	tw             timeWindow
	rejected       atomic.Uint64 // rejections on Ps other than P 0 while there are no rejection lines (before the first trip, GOMAXPROCS 1 then, or 1 at New with CountStats)
	transitions    atomic.Uint64
	trips          atomic.Uint64
	stale          atomic.Uint64
	listenerPanics atomic.Uint64
	// hint, with a real-time NanoTicker only, holds the open timer: built
	// at the first transition to an open state (under mu), it fires when
	// an open period should be over. Until then the shorthands reject an
	// Open breaker without reading the clock.
	hint *openHint
	errs *[2]rampart.RejectedError // the preallocated rejections: open (errOpen), half-open full (errHalfOpen)
}

// settings is a breaker's configuration with its defaults filled in,
// and what New derives from it for the hot paths.
type settings struct {
	fast  uint8 // fastCount, fastConsec: the closed success path needs no evaluation
	timed bool  // the shorthands must read the clock before and after every call
	// counted is Config.CountStats, beside fast: the success paths test it
	// on the line they load fast from (in the padding: no byte more).
	counted bool
	Config
}

// derive sets the fields derived from the Config.
func (s *settings) derive() {
	s.counted = s.CountStats
	s.timed = s.measuresCalls()
	s.fast = fastNone
	if s.SlowCallDuration == 0 && s.OnSuccess == nil {
		switch s.Mode {
		case CountWindow:
			s.fast = fastCount
		case Consecutive:
			s.fast = fastConsec
		}
	}
}

// measuresCalls reports whether c needs real start and end times (see
// [Breaker.MeasuresCalls]).
func (c *Config) measuresCalls() bool {
	return c.SlowCallDuration > 0 || c.Mode == TimeWindow || c.OnSuccess != nil || c.OnFailure != nil
}

// openHint is the open timer of a breaker on a real-time NanoTicker. The
// timer stores the Open word it was armed for in expired: until then the
// shorthands reject an Open breaker without reading the clock. The hint
// only decides whether to read the clock; AcquireAt still compares with
// openUntil.
type openHint struct {
	timer   *time.Timer
	word    atomic.Uint64 // the Open word the timer is armed for
	expired atomic.Uint64 // the Open word whose period is over
}

func (h *openHint) fire() { h.store(h.expired.Load(), h.word.Load()) }

// store publishes w, the armed word that a fire loaded after loading old
// from expired. A fire runs on its own goroutine and may be descheduled
// between its loads and its store: the CAS on old fails if a later fire
// stored meanwhile, and the retry reloads both words (expired first), so a
// stale fire never puts back an older word; a word that a later store
// saw armed is at least as new as w.
func (h *openHint) store(old, w uint64) {
	for old != w && !h.expired.CompareAndSwap(old, w) {
		old = h.expired.Load()
		w = h.word.Load()
	}
}

// hotWords are the words that records write: the count window's sequence
// and counters, the failure, slow-call and consecutive-failure counts, and
// the rejections counted on P 0. They fill one cache line (two where the
// line is 32 B), which nothing read on the healthy path shares but the
// window's counters; Compact keeps the same line (the rejections are then
// counted here with an atomic add, rej). On the per-P counter lines only
// rej is used, and seq counts the rejections of the Ps beyond the lines.
type hotWords struct {
	seq       atomic.Uint64 // CountWindow: next sequence number
	total     atomic.Int64  // CountWindow: filled slots
	fails     atomic.Int64  // CountWindow: slots holding a failure
	slows     atomic.Int64  // CountWindow: slots holding a slow call
	failures  atomic.Uint64 // failures recorded since New
	slowCalls atomic.Uint64 // slow calls recorded since New
	consec    atomic.Int64  // Consecutive mode: failures in a row
	rej       uint64        // rejections counted on P 0 (per-P counters), or all of them (Compact); see countRejection
}

// hotLine is hotWords on cache lines of their own: one 64 B line on
// amd64, one 128 B line on arm64, two 32 B lines where x/sys/cpu's pad is
// 32 B (arm, mips): the pad rounds the 64 B of hotWords up to whole lines.
type hotLine struct {
	_ [(pad.LineSize - unsafe.Sizeof(hotWords{})%pad.LineSize) % pad.LineSize]byte
	hotWords
}

// maxLines caps the per-P rejection counters beyond P 0's at 7 hotLines:
// rejections on later Ps are striped over spare words (seq) of those
// lines, with an atomic add (see countRejection).
const maxLines = 7

// unnamedErrs are the rejection errors of every breaker without a Name:
// they are equal, so they are shared.
var unnamedErrs = rejectionErrors("")

// rejectionErrors builds a breaker's two rejection errors in one
// allocation.
func rejectionErrors(name string) *[2]rampart.RejectedError {
	return &[2]rampart.RejectedError{
		*rampart.NewRejectedError("circuitbreaker", name, ErrOpen),
		*rampart.NewRejectedError("circuitbreaker", name, ErrHalfOpenFull),
	}
}

// errOpen is the rejection of an open (or forced-open) breaker.
func (b *Breaker) errOpen() *rampart.RejectedError { return &b.errs[0] }

// errHalfOpen is the rejection of a half-open breaker whose probes are all
// taken or in flight.
func (b *Breaker) errHalfOpen() *rampart.RejectedError { return &b.errs[1] }

// New validates cfg, fills its defaults and returns a closed breaker. An
// invalid field gives a *rampart.ConfigError matching rampart.ErrInvalidConfig.
func New(cfg Config) (*Breaker, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	b := &Breaker{}
	b.init.Config = cfg
	b.init.derive()
	b.set.Store(&b.init)
	b.errs = unnamedErrs
	if cfg.Name != "" {
		b.errs = rejectionErrors(cfg.Name)
	}
	switch cfg.Mode {
	case CountWindow:
		b.count.init(cfg.WindowSize)
	case TimeWindow:
		b.tw = newTimeWindow(int64(cfg.TimeWindow), cfg.Buckets)
	}
	_, b.hinted = cfg.Ticker.(*rampart.NanoTicker)
	if cfg.CountStats {
		b.allocCounters()
	}
	b.state.Store(genOne | uint64(Closed)) // generation 1: the zero Permit is stale
	return b, nil
}

// allocCounters allocates, for CountStats, the per-P lines at New rather
// than at the first trip: the rejection lines of P 1 to P nLines (as the
// first trip would), then one line more for P 0's successes, which must
// not go to the hot line that the healthy paths read (a write there would
// move it between the cores on every success). With Compact: one line, for
// the successes only (its rejections stay on the hot line).
func (b *Breaker) allocCounters() {
	if b.init.Compact {
		b.lines.Store(unsafe.SliceData(make([]hotLine, 1)))
		return
	}
	n := min(runtime.GOMAXPROCS(0), maxLines+1)
	b.nLines = int32(n - 1)
	b.lines.Store(unsafe.SliceData(make([]hotLine, n)))
}

// countSuccess counts one success (CountStats). The word is total, a spare
// of the per-P lines (only rej and seq count rejections there): P p's own
// line for 1 ≤ p ≤ nLines, the line after them for P 0, with a plain add
// while pinned (as countRejection's): no other P writes that word. The Ps
// beyond (more than 8, or GOMAXPROCS raised after New) add atomically to
// the spare word fails of line p mod (nLines+1), which that line's own P
// does not write: the counts stay exact, and those lines are shared
// (false sharing, no lost add). Compact adds atomically to total of its
// one line.
func (b *Breaker) countSuccess() {
	lines := b.lines.Load() // set at New with CountStats, never nil here
	if b.init.Compact {
		unsafe.Slice(lines, 1)[0].total.Add(1)
		return
	}
	n := int(b.nLines)
	ls := unsafe.Slice(lines, n+1)
	switch p := procPin(); {
	case p == 0:
		addOwned((*uint64)(unsafe.Pointer(&ls[n].total)))
	case p <= n:
		addOwned((*uint64)(unsafe.Pointer(&ls[p-1].total)))
	default:
		ls[p%(n+1)].fails.Add(1)
	}
	procUnpin()
}

// successes sums the success counters (see countSuccess).
func (b *Breaker) successes() uint64 {
	lines := b.lines.Load()
	if !b.init.CountStats || lines == nil {
		return 0
	}
	n := 1
	if !b.init.Compact {
		n = int(b.nLines) + 1
	}
	var sum uint64
	ls := unsafe.Slice(lines, n)
	for i := range ls {
		sum += uint64(ls[i].total.Load()) + uint64(ls[i].fails.Load())
	}
	return sum
}

// Config returns the configuration with its defaults filled in.
func (b *Breaker) Config() Config { return b.set.Load().Config }

// MeasuresCalls reports whether results need real start and end times: a
// slow-call threshold, a time window or a per-call listener. When it is
// false, a caller may pass [rampart.NotRead] ("not read") to AcquireAt on a
// closed breaker and to ReleaseAt, as Do does, and read no clock. It is
// fixed at New: Update refuses a change that would flip it, so a caller
// may read it once (package pipeline does, at its New).
func (b *Breaker) MeasuresCalls() bool { return b.set.Load().timed }

// Ticker returns the clock the shorthands read; pass its readings to the
// primitive methods.
func (b *Breaker) Ticker() rampart.Ticker { return b.init.Ticker }

// State returns the current state. An open breaker whose open period has
// passed still reports Open until the next AcquireAt moves it to HalfOpen.
func (b *Breaker) State() State { return State(b.state.Load() & stateMask) }

// AcquireAt asks to admit one call at time now (a reading of the breaker's
// Ticker). It returns a permit to pass to ReleaseAt, or a preallocated
// rejection error matching ErrOpen (and ErrHalfOpenFull for a half-open
// rejection) and rampart.ErrRejected. It never blocks and never allocates.
//
// Closed: one atomic load and a branch. Open: one more load (the end of the
// open period); the first caller after it wins a CAS to HalfOpen and becomes
// the first probe. HalfOpen: a CAS that takes a probe slot.
//
// now may be [rampart.NotRead], meaning "the clock was not read": a closed
// breaker then admits (the permit's duration is unknown, so it is never
// judged slow) and an open one rejects; a caller that gets a rejection this
// way should read the clock and ask again. Such a rejection is not counted
// in Stats nor passed to OnRejected: the second answer is.
func (b *Breaker) AcquireAt(now int64) (Permit, error) {
	// AcquireAt is one call: it does not inline (the call to its
	// out-of-line slow path spends 57 of Go's inlining budget of 80).
	w := b.state.Load() // atomic 1: the state word
	if w&stateMask == uint64(Closed) {
		return Permit{word: w, start: now}, nil
	}
	return b.acquireSlow(b.set.Load(), now)
}

// acquireAt is AcquireAt under the configuration cs that the caller (Do,
// Call) loaded for the whole call.
func (b *Breaker) acquireAt(cs *settings, now int64) (Permit, error) {
	if w := b.state.Load(); w&stateMask == uint64(Closed) {
		return Permit{word: w, start: now}, nil
	}
	return b.acquireSlow(cs, now)
}

// Acquire is [Breaker.AcquireAt] for a caller that has not read the clock:
// it reads the breaker's Ticker only when the decision or the call's
// duration needs it, as [Breaker.Do] does: a Disabled breaker, and a Closed
// or MetricsOnly one that measures no calls (see [Breaker.MeasuresCalls]),
// read none. Release the permit with [Breaker.Release] or
// [Breaker.ReleaseAt] exactly once.
func (b *Breaker) Acquire() (Permit, error) {
	w := b.state.Load() // atomic 1: the state word
	cs := b.set.Load()  // the configuration (timed, and all the slow path reads): one load
	if w&stateMask == uint64(Closed) {
		if !cs.timed {
			return Permit{word: w, start: rampart.NotRead}, nil // nothing needs the time: no clock read
		}
		return Permit{word: w, start: b.init.Ticker.Now()}, nil // clock read: the call's duration is measured
	}
	return b.acquireOther(cs, w)
}

// acquireOther is Acquire for every state but Closed: an Open breaker whose
// open timer has not fired (real-time NanoTicker only) rejects, and a state
// that needs no time (see needsNoClock) admits, without reading the clock;
// every other reads it for the decision.
func (b *Breaker) acquireOther(cs *settings, w uint64) (Permit, error) {
	if w&stateMask == uint64(Open) && b.hinted && b.hint.expired.Load() != w { // the open timer has not fired
		// No decision needs the time: no clock read. rejectOpen's body,
		// written out: one call less.
		b.countRejection()
		if cs.OnRejected != nil {
			b.notifyRejected(cs, Open)
		}
		return Permit{}, b.errOpen()
	}
	if b.needsNoClock(cs, w) {
		return Permit{word: w, start: rampart.NotRead}, nil // no decision, no duration: no clock read
	}
	return b.acquireSlow(cs, b.init.Ticker.Now()) // clock read: the decision or the duration needs it
}

// needsNoClock reports whether a call admitted under w (not Closed, which
// the callers test first) needs no clock reading, neither to be admitted
// nor to be recorded: Disabled (it records nothing), and MetricsOnly when
// no call is measured (a count window or Consecutive mode, no slow-call
// threshold, no per-call listener: outcomes are only counted).
func (b *Breaker) needsNoClock(cs *settings, w uint64) bool {
	s := State(w & stateMask)
	return s == Disabled || s == MetricsOnly && !cs.timed
}

// acquireSlow is the slow path of AcquireAt: every state but Closed.
func (b *Breaker) acquireSlow(cs *settings, now int64) (Permit, error) {
	w := b.state.Load()
	for {
		switch State(w & stateMask) {
		case Closed, Disabled, MetricsOnly:
			return Permit{word: w, start: now}, nil
		case ForcedOpen:
			return Permit{}, b.reject(cs, now, ForcedOpen, b.errOpen())
		case Open:
			until := b.openUntil.Load()
			if now < until {
				return Permit{}, b.reject(cs, now, Open, b.errOpen())
			}
			// The half-open period starts now, not when the open period
			// ended (possibly long ago): MaxHalfOpenDuration counts from
			// this first probe. Stored before the state CAS so that no
			// caller sees the new HalfOpen word with an older period's
			// time; raised, never lowered, so that a caller that read the
			// clock long ago cannot set it back.
			atomicx.Max(&b.probeAt, now)
			// The open period is over: the first CAS moves to HalfOpen and
			// takes the first probe.
			nw := nextGen(w) | uint64(HalfOpen) | admOne | inflOne
			if b.state.CompareAndSwap(w, nw) {
				b.transitions.Add(1)
				if cs.OnStateChange != nil {
					b.notifyProbeStart(cs, nw, now)
				}
				return Permit{word: nw, start: now}, nil
			}
		case HalfOpen:
			if field(w, admShift) >= cs.HalfOpenProbes || field(w, inflShift) >= cs.HalfOpenMaxConcurrent {
				if cs.MaxHalfOpenDuration > 0 && now != rampart.NotRead && now-b.probeAt.Load() >= int64(cs.MaxHalfOpenDuration) {
					// No probe admitted for MaxHalfOpenDuration: every
					// probe in flight has been out that long, stuck.
					// Start a fresh half-open period and compete for its
					// first slot. Probes that keep being admitted (one at
					// a time under HalfOpenMaxConcurrent, say) are
					// progressing and never restart the period.
					b.transition(cs, w, true, HalfOpen, now)
					break
				}
				return Permit{}, b.reject(cs, now, HalfOpen, b.errHalfOpen())
			}
			nw := w + admOne + inflOne
			if b.state.CompareAndSwap(w, nw) {
				// After the CAS: only an admitted probe moves the time
				// forward (a rejected caller must not).
				atomicx.Max(&b.probeAt, now)
				return Permit{word: nw, start: now}, nil
			}
		default:
			return Permit{}, b.reject(cs, now, ForcedOpen, b.errOpen())
		}
		w = b.state.Load()
	}
}

// notifyProbeStart runs OnStateChange(Open, HalfOpen) for the caller that
// took the first probe inside AcquireAt. notify recovers a panic, so only
// runtime.Goexit leaves ok false: the probe, whose permit nobody will ever
// hold, is then given back.
func (b *Breaker) notifyProbeStart(cs *settings, nw uint64, now int64) {
	ok := false
	defer func() {
		if !ok {
			b.recordProbe(cs, nw, now, rampart.Ignored, false)
		}
	}()
	b.notifyState(cs, Open, HalfOpen)
	ok = true
}

// reject counts a rejection (the one atomic add of a rejection) and
// returns err. A rejection of a call made without the time (now is
// [rampart.NotRead]) is neither counted nor notified: its caller asks again with
// a reading (see AcquireAt), and that answer is the one counted.
func (b *Breaker) reject(cs *settings, now int64, s State, err *rampart.RejectedError) error {
	if now == rampart.NotRead {
		return err
	}
	b.countRejection()
	if cs.OnRejected != nil {
		b.notifyRejected(cs, s)
	}
	return err
}

// countRejection counts one rejection. Compact: one atomic add on the hot
// line. Default layout: an add to the counter of the P that runs the
// caller, pinned to it meanwhile so that no other goroutine writes that
// word: a plain add on a line that no other P writes, where an atomic add
// on one shared word costs a locked instruction and moves the line between
// the cores that reject (an open breaker rejects every call of every
// goroutine). Stats sums the counters (see rejections). The Ps beyond the
// counters (more than 8 Ps, or GOMAXPROCS raised after the first trip, or
// after New with CountStats) add atomically to the spare word seq of the
// line of P 1 + (p-1) mod nLines: P 8 + i shares P 1 + i's line, so beyond
// 8 Ps a rejection writes a line that another P writes too, each word
// shared by the Ps beyond, not all of them on one. Before the lines exist
// (a rejection racing the first trip's publication) and when there are
// none (GOMAXPROCS 1 at the first trip, or at New with CountStats, whose
// one line is P 0's successes), the Ps but P 0 add atomically to one
// shared word, b.rejected: counts stay exact either way.
func (b *Breaker) countRejection() {
	if b.init.Compact {
		atomic.AddUint64(&b.hot.rej, 1)
		return
	}
	if p := procPin(); p == 0 {
		addOwned(&b.hot.rej) // P 0 loads no pointer: the old cost
	} else {
		switch lines := b.lines.Load(); {
		case lines == nil:
			b.rejected.Add(1)
		case p <= int(b.nLines):
			addOwned(&unsafe.Slice(lines, b.nLines)[p-1].rej)
		case b.nLines == 0: // CountStats at GOMAXPROCS 1, raised since: no rejection line
			b.rejected.Add(1)
		default:
			unsafe.Slice(lines, b.nLines)[(p-1)%int(b.nLines)].seq.Add(1)
		}
	}
	procUnpin()
}

// rejections sums the rejection counters (see countRejection).
func (b *Breaker) rejections() uint64 {
	n := b.rejected.Load() + atomic.LoadUint64(&b.hot.rej)
	lines := b.perP()
	for i := range lines {
		n += atomic.LoadUint64(&lines[i].rej) + lines[i].seq.Load()
	}
	return n
}

// perP returns the rejection counters of P 1 to P nLines: none before the
// first trip, nor when Compact or GOMAXPROCS was 1 then.
func (b *Breaker) perP() []hotLine {
	lines := b.lines.Load()
	if lines == nil {
		return nil
	}
	return unsafe.Slice(lines, b.nLines)
}

// rejectOpen is the rejection of an Open breaker whose open timer has not
// fired, made without a clock reading (Call; Do and Acquire write its body
// out): counted and notified as reject does.
func (b *Breaker) rejectOpen(cs *settings) error {
	b.countRejection()
	if cs.OnRejected != nil {
		b.notifyRejected(cs, Open)
	}
	return b.errOpen()
}

func (b *Breaker) notifyRejected(cs *settings, s State) {
	notify.Call1(&b.listenerPanics, cs.OnRejected, s)
}

// Classify returns the Result that ReleaseAt gives err: Config.Classify's, or
// DefaultClassify's. With it and [Breaker.ReleaseAt] a caller can run the
// user's classifier and record the result as two steps (package pipeline
// does, so that a listener that calls runtime.Goexit after the result is
// applied does not make it record the call twice).
func (b *Breaker) Classify(err error) rampart.Result { return b.classifyErr(b.set.Load(), err) }

func (b *Breaker) classifyErr(cs *settings, err error) rampart.Result {
	if cs.Classify != nil {
		return cs.Classify(err)
	}
	return DefaultClassify(err)
}

// ReleaseAt records the outcome r of the call that p admitted, ended at now
// (a reading of the breaker's Ticker, or [rampart.NotRead] for a permit
// whose start was not read). r is the caller's own classification, e.g. a
// Failure for an HTTP 503 that came with a nil error; [Breaker.Classify]
// gives an error's. A permit from an older generation is only counted in
// Stats.StaleResults. It never blocks and never allocates.
func (b *Breaker) ReleaseAt(p Permit, now int64, r rampart.Result) {
	// One load of the configuration (inlined into the caller): the fast
	// path's test of fast and every field the slow path reads come from it.
	b.releaseAt(b.set.Load(), p, now, r)
}

// releaseAt is ReleaseAt under the configuration cs of the call.
func (b *Breaker) releaseAt(cs *settings, p Permit, now int64, r rampart.Result) {
	if cs.counted && r == rampart.Success && (p.start == rampart.NotRead || !b.slowFailure(cs, p.start, now)) {
		// CountStats only; off, a test of a byte on the line of cs.fast,
		// which the next line loads anyway. A slow success in Consecutive
		// mode is recorded as a failure (recordSlow counts it in
		// Failures): it is a success here only if it is not recorded
		// (countUnrecorded). The clock-free paths (no start read) skip the
		// test.
		b.countSuccess()
	}
	if r == rampart.Success && cs.fast == fastCount && p.word&stateMask == uint64(Closed) && b.state.Load() == p.word && b.count.allOK(&b.hot.hotWords) {
		return // ReleaseAt's fast path: a success over a healthy count window writes nothing
	}
	w := b.state.Load() // atomic 1: is the permit current?
	if (w^p.word)&keyMask != 0 {
		b.stale.Add(1)
		b.countUnrecorded(cs, p, now, r)
		return
	}
	if w&stateMask == uint64(Closed) && r == rampart.Success {
		switch cs.fast {
		case fastCount:
			// Healthy (the window full of successes): three loads, no
			// write. Otherwise atomic 2 (the sequence add) and a load of
			// the slot; a swap only when the slot held another outcome
			// (+0–3 counter adds). A success cannot raise any rate: no
			// evaluation once the window is warm.
			if b.count.add(&b.hot.hotWords, codeOK) != codeEmpty {
				return
			}
			b.evaluateCount(cs, w, now)
			return
		case fastConsec:
			// Atomic 2, a load; a store only after failures.
			if b.hot.consec.Load() != 0 {
				b.hot.consec.Store(0)
			}
			return
		}
	}
	b.recordSlow(cs, w, p, now, r)
}

// slowFailure reports whether a success that started at start (read)
// and ended at now is one that recordSlow records as a failure: a slow
// call in Consecutive mode.
func (b *Breaker) slowFailure(cs *settings, start, now int64) bool {
	return b.init.Mode == Consecutive && cs.SlowCallDuration > 0 && now != rampart.NotRead && now-start >= int64(cs.SlowCallDuration)
}

// countUnrecorded counts, with CountStats, the success that releaseAt
// left to recordSlow as a failure (see slowFailure) when it is not
// recorded after all (a stale permit, a Disabled breaker): a Success
// released, counted once, as every other.
func (b *Breaker) countUnrecorded(cs *settings, p Permit, now int64, r rampart.Result) {
	if cs.counted && r == rampart.Success && p.start != rampart.NotRead && b.slowFailure(cs, p.start, now) {
		b.countSuccess()
	}
}

// Release is [Breaker.ReleaseAt] for a caller that has not read the clock:
// it reads the breaker's Ticker only for a permit whose start was read (the
// call's duration is measured); otherwise it passes [rampart.NotRead] and
// the breaker reads its Ticker itself if a transition needs the time.
// Classify an error with [Breaker.Classify].
func (b *Breaker) Release(p Permit, r rampart.Result) {
	now := rampart.NotRead
	if p.start != rampart.NotRead {
		now = b.init.Ticker.Now() // clock read: the call's duration is measured
	}
	b.ReleaseAt(p, now, r)
}

// recordSlow is the slow path of ReleaseAt: failures, slow calls,
// listeners, time window, half-open probes, metrics-only.
func (b *Breaker) recordSlow(cs *settings, w uint64, p Permit, now int64, r rampart.Result) {
	if r > rampart.Ignored {
		r = rampart.Failure // not a Result: the conservative reading (see Result)
	}
	st := State(w & stateMask)
	if st == Disabled {
		b.countUnrecorded(cs, p, now, r)
		return
	}
	if r == rampart.Ignored {
		if st == HalfOpen {
			b.recordProbe(cs, w, now, rampart.Ignored, false)
		}
		return
	}
	timed := p.start != rampart.NotRead && now != rampart.NotRead
	var d int64
	if timed {
		d = now - p.start
	}
	slow := cs.SlowCallDuration > 0 && timed && d >= int64(cs.SlowCallDuration)
	failed := r == rampart.Failure
	if slow && b.init.Mode == Consecutive {
		failed = true // in Consecutive mode a slow call is a failure: counted and reported as one
	}
	if failed {
		b.hot.failures.Add(1)
	}
	// The per-call listeners run after the outcome is applied: a Goexit in
	// one must not lose it.
	if failed && cs.OnFailure != nil {
		defer notify.Call1(&b.listenerPanics, cs.OnFailure, time.Duration(d))
	} else if !failed && cs.OnSuccess != nil {
		defer notify.Call1(&b.listenerPanics, cs.OnSuccess, time.Duration(d))
	}
	if slow {
		b.hot.slowCalls.Add(1)
	}
	switch st {
	case HalfOpen:
		// A probe is judged as the closed state judges a call: in a
		// window, a slow success is a success that counts towards the slow
		// rate; in Consecutive mode a slow call is a failure.
		if b.init.Mode == Consecutive && slow {
			r, slow = rampart.Failure, false // failed is already set
		}
		b.recordProbe(cs, w, now, r, slow)
	case Closed, MetricsOnly:
		judge := st == Closed
		switch b.init.Mode {
		case CountWindow:
			old := b.count.add(&b.hot.hotWords, outcomeCode(failed, slow))
			if judge && (failed || slow || old == codeEmpty) {
				b.evaluateCount(cs, w, now)
			}
		case TimeWindow:
			if now == rampart.NotRead {
				now = b.init.Ticker.Now()
			}
			slid := b.tw.add(now, failed, slow)
			if judge && (failed || slow || slid || b.pending.Load()) {
				b.evaluateTime(cs, w, now)
			}
		case Consecutive:
			if failed { // slow calls included
				if n := b.hot.consec.Add(1); judge && n >= int64(cs.ConsecutiveFailures) {
					b.transition(cs, w, true, Open, now)
				}
			} else if b.hot.consec.Load() != 0 {
				b.hot.consec.Store(0)
			}
		}
	}
}

// over reports whether a window's rates reach a threshold.
func (b *Breaker) over(cs *settings, total, fails, slows int64) bool {
	if total <= 0 {
		return false
	}
	t := float64(total)
	return float64(fails)*100 >= cs.FailureRateThreshold*t || (cs.SlowCallDuration > 0 && float64(slows)*100 >= cs.SlowCallRateThreshold*t)
}

func (b *Breaker) evaluateCount(cs *settings, w uint64, now int64) {
	if b.countOver(cs) {
		b.transition(cs, w, true, Open, now)
	}
}

// countOver reports whether the count window holds MinimumCalls of cs and
// reaches one of its thresholds.
func (b *Breaker) countOver(cs *settings) bool {
	total, fails, slows := b.count.snapshot(&b.hot.hotWords)
	return total >= int64(cs.MinimumCalls) && b.over(cs, total, fails, slows)
}

// evaluateTime judges the time window. A success cannot raise a rate, but
// it can complete MinimumCalls while the rate is over a threshold: pending
// remembers that case so that the next success evaluates too. The window
// sliding (old successes leaving it) can raise a rate: the first record of
// each slice evaluates.
func (b *Breaker) evaluateTime(cs *settings, w uint64, now int64) {
	if b.timeOver(cs, now) {
		b.transition(cs, w, true, Open, now)
	}
}

// timeOver reports whether the time window at now holds MinimumCalls of
// cs and reaches one of its thresholds, and keeps pending (see
// evaluateTime).
func (b *Breaker) timeOver(cs *settings, now int64) bool {
	total, fails, slows := b.tw.snapshot(now)
	over := b.over(cs, total, fails, slows)
	if over && total < int64(cs.MinimumCalls) {
		if !b.pending.Load() {
			b.pending.Store(true)
		}
		return false
	}
	if b.pending.Load() {
		b.pending.Store(false)
	}
	return over
}

// recordProbe applies a half-open probe's result with one CAS, then closes
// or reopens when the period is decided (see probeVerdict).
func (b *Breaker) recordProbe(cs *settings, w uint64, now int64, r rampart.Result, slow bool) {
	key := w
	for {
		if (w^key)&keyMask != 0 {
			b.stale.Add(1)
			return // a transition happened meanwhile
		}
		nw := w
		if field(w, inflShift) > 0 {
			nw -= inflOne
		}
		switch r {
		case rampart.Ignored:
			if field(w, admShift) > 0 {
				nw -= admOne // give the probe slot back
			}
		case rampart.Failure:
			nw += failOne
		}
		if slow {
			nw += slowOne
		}
		if b.state.CompareAndSwap(w, nw) {
			w = nw
			break
		}
		w = b.state.Load()
	}
	switch b.probeVerdict(cs, w) {
	case verdictClose:
		b.transition(cs, w, true, Closed, now)
	case verdictReopen:
		b.transition(cs, w, true, Open, now)
	}
}

const (
	verdictUndecided = iota // undecided: the probes still to come can change the outcome
	verdictClose            // the period closes whatever the probes still to come do
	verdictReopen           // the period reopens whatever the probes still to come do
)

// probeVerdict decides a half-open period from its probe counters in w, as
// soon as the probes still to come (HalfOpenProbes minus those recorded)
// can no longer change the outcome: it closes if it would close with all of
// them failed and slow, reopens if it would reopen with all of them fast
// successes. The rules (package doc, "Half-open"):
//
//   - HalfOpenSuccesses = 0, windowed modes: the period closes when the
//     probes' failure rate is below FailureRateThreshold and, with a
//     slow-call threshold, their slow rate below SlowCallRateThreshold:
//     the period reopens exactly when the probes, as a window of
//     HalfOpenProbes calls, would trip a closed breaker (resilience4j's
//     rule).
//   - HalfOpenSuccesses = 0, Consecutive mode: the period reopens when
//     min(ConsecutiveFailures, HalfOpenProbes) probes fail (slow ones
//     included), in any order: probes run concurrently, so their order
//     means nothing.
//   - HalfOpenSuccesses = k > 0: the period closes after k successes
//     (sony/gobreaker's rule) and reopens as soon as that has become
//     impossible. A slow success is a success (in Consecutive mode a slow
//     probe is a failure): the slow rate is not judged in half-open, the
//     closed window judges it again.
func (b *Breaker) probeVerdict(cs *settings, w uint64) int {
	// The period's probes: HalfOpenProbes, or those already admitted when
	// an Update lowered it below them (they are all judged).
	n := max(int64(cs.HalfOpenProbes), int64(field(w, admShift)))
	failed, slow := int64(field(w, failShift)), int64(field(w, slowShift))
	done := int64(field(w, admShift) - field(w, inflShift))
	left := n - done
	switch {
	case cs.HalfOpenSuccesses > 0:
		succ, k := done-failed, int64(cs.HalfOpenSuccesses)
		if succ+left < k {
			return verdictReopen
		}
		if succ >= k {
			return verdictClose
		}
	case b.init.Mode == Consecutive:
		m := min(int64(cs.ConsecutiveFailures), n)
		if failed >= m {
			return verdictReopen
		}
		if failed+left < m {
			return verdictClose
		}
	default:
		if b.over(cs, n, failed, slow) {
			return verdictReopen
		}
		if !b.over(cs, n, failed+left, slow+left) {
			return verdictClose
		}
	}
	return verdictUndecided
}

// transition is the slow path of every state change, serialized by mu.
// With check, it happens only if the breaker is still in expect's
// generation and state (an automatic transition decided on that word);
// without, it happens from whatever state (a manual one). Whatever the next
// state needs (open deadline, empty window) is prepared before the new word
// is published.
func (b *Breaker) transition(cs *settings, expect uint64, check bool, to State, now int64) bool {
	return b.transitionIf(nil, cs, expect, check, to, now)
}

// transitionIf is transition that, when cur is not nil, happens only
// while cur is still the published configuration: Update's judgement
// (see judge) decided by cur's thresholds, and an Update that published
// another configuration since (under mu, which this check holds) has
// judged by its own. A record's transition passes nil: the call ran under
// the configuration it loaded, old or new (see Update).
func (b *Breaker) transitionIf(cur, cs *settings, expect uint64, check bool, to State, now int64) bool {
	if now == rampart.NotRead && (to == Open || to == HalfOpen) {
		now = b.init.Ticker.Now() // a trip decided on a path that read no clock
	}
	b.mu.Lock()
	w := b.state.Load()
	if check && (w^expect)&keyMask != 0 || cur != nil && b.set.Load() != cur {
		b.mu.Unlock()
		return false
	}
	from := State(w & stateMask)
	switch to {
	case Open:
		if check && from == HalfOpen {
			b.streak++
		} else if from != Open {
			b.streak = 0
		}
		b.openUntil.Store(atomicx.SatAdd(now, b.openDuration(cs, int(b.streak))))
	case HalfOpen:
		b.probeAt.Store(now) // the half-open period starts now (see acquireSlow)
	case Closed, MetricsOnly:
		b.resetWindow()
		if to == Closed {
			b.streak = 0
		}
	}
	if (to == Open || to == HalfOpen || to == ForcedOpen) && !b.init.Compact && b.lines.Load() == nil {
		// One rejection counter per P, each on its own line, so that
		// rejections from many goroutines at once write no shared word
		// (see countRejection). P 0's sits in hot; the lines beyond it
		// are allocated here, at the first transition to a state that
		// rejects, for the Ps that exist now (GOMAXPROCS), and published
		// before the state word that makes callers reject.
		if n := min(runtime.GOMAXPROCS(0), maxLines+1); n > 1 {
			b.nLines = int32(n - 1)
			b.lines.Store(unsafe.SliceData(make([]hotLine, n-1)))
		}
	}
	// The open timer runs only where it runs on the ticker's clock: the
	// NanoTicker made and the trip made on the same side of a
	// testing/synctest bubble's edge (a breaker shared across it, a
	// package-level one say, must neither reset a bubble's timer from
	// outside, which the runtime answers with a fatal error, nor arm a
	// real timer with the bubble's readings). Elsewhere the period is
	// marked expired at once, so that the shorthands read the clock. One
	// clock read (SameBubble's), on a trip only.
	armable := false
	if to == Open && b.hinted {
		armable = ticker.SameBubble(b.init.Ticker.(*rampart.NanoTicker))
		if b.hint == nil {
			// Built at the first trip, not in New: a breaker that never
			// opens carries no timer. Published by the state CAS below,
			// so a caller that loads the Open word finds it.
			b.hint = &openHint{}
		}
		if armable && b.hint.timer == nil {
			// The timer is read and written only here, under mu.
			h := b.hint
			h.timer = time.AfterFunc(time.Hour, h.fire)
			h.timer.Stop()
		}
	}
	for {
		nw := nextGen(w) | uint64(to)
		if to == Open && b.hinted {
			// Also when not armable: a fire still pending from an earlier
			// period then stores nw, not an older word.
			b.hint.word.Store(nw)
		}
		if b.state.CompareAndSwap(w, nw) {
			if armable {
				b.hint.timer.Reset(time.Duration(b.openUntil.Load() - now))
			} else if to == Open && b.hinted {
				b.hint.store(b.hint.expired.Load(), nw) // no timer on this clock: the shorthands read it
			}
			break
		}
		w = b.state.Load() // probe counters moved, or Open→HalfOpen won
		if check && (w^expect)&keyMask != 0 {
			b.mu.Unlock()
			return false
		}
		from = State(w & stateMask)
	}
	b.transitions.Add(1)
	if check && to == Open {
		b.trips.Add(1)
	}
	b.mu.Unlock()
	b.notifyState(cs, from, to)
	return true
}

func (b *Breaker) resetWindow() {
	switch b.init.Mode {
	case CountWindow:
		b.count.reset(&b.hot.hotWords)
	case TimeWindow:
		b.tw.reset()
		b.pending.Store(false)
	}
	b.hot.consec.Store(0)
}

// openDuration is OpenDuration × OpenBackoffFactor^streak, capped at
// MaxOpenDuration, shortened by up to OpenJitter of itself.
func (b *Breaker) openDuration(cs *settings, streak int) int64 {
	d := float64(cs.OpenDuration)
	if streak > 0 && int64(cs.MaxOpenDuration) > int64(cs.OpenDuration) {
		d *= math.Pow(cs.OpenBackoffFactor, float64(streak))
		d = min(d, float64(cs.MaxOpenDuration))
	}
	if cs.OpenJitter > 0 {
		d -= d * cs.OpenJitter * rand.Float64()
	}
	if d >= float64(cs.MaxOpenDuration) {
		return int64(cs.MaxOpenDuration) // exact, and no float→int overflow near math.MaxInt64
	}
	return int64(d)
}

func (b *Breaker) notifyState(cs *settings, from, to State) {
	if cs.OnStateChange != nil {
		notify.Call2(&b.listenerPanics, cs.OnStateChange, from, to)
	}
}

// RemainingOpenAt returns how long the breaker will still reject at time now,
// for a Retry-After header: the rest of the open period when Open, the
// configured OpenDuration when ForcedOpen (a hint: it opens only by hand),
// and 0 otherwise.
func (b *Breaker) RemainingOpenAt(now int64) time.Duration {
	switch State(b.state.Load() & stateMask) {
	case Open:
		return time.Duration(max(b.openUntil.Load()-now, 0))
	case ForcedOpen:
		return b.set.Load().OpenDuration
	}
	return 0
}

// RemainingOpen is [Breaker.RemainingOpenAt] at a reading of the breaker's
// Ticker.
func (b *Breaker) RemainingOpen() time.Duration { return b.RemainingOpenAt(b.init.Ticker.Now()) }

// TransitionTo moves the breaker to the state to by hand, reading the
// Ticker, whatever its state: Open starts an open period of the base
// OpenDuration; HalfOpen starts a half-open period; Closed and MetricsOnly
// start with an empty window; Disabled and ForcedOpen stay until the next
// manual transition. Moving to the current state is a no-op that returns
// false (use Reset to restart Closed). It is safe under concurrent calls:
// permits from before the transition become stale.
func (b *Breaker) TransitionTo(to State) bool {
	if to > MetricsOnly {
		return false
	}
	if b.State() == to {
		return false
	}
	return b.transition(b.set.Load(), 0, false, to, b.init.Ticker.Now())
}

// Reset moves the breaker to Closed with an empty window and the open
// backoff reset, whatever its state, even if already Closed.
func (b *Breaker) Reset() {
	b.transition(b.set.Load(), 0, false, Closed, rampart.NotRead)
}

// Stats is a snapshot of a breaker's state and counters.
type Stats struct {
	State      State
	Generation uint64 // transitions since New plus 1, modulo 2^29 (0 is skipped when it wraps)

	// The current window (CountWindow, TimeWindow; also in MetricsOnly).
	WindowCalls     int64
	WindowFailures  int64
	WindowSlowCalls int64
	FailureRate     float64 // percent of WindowCalls; 0 when empty
	SlowCallRate    float64 // percent of WindowCalls; 0 when empty

	// Consecutive mode: failures in a row now.
	ConsecutiveFailures int64

	// The current half-open period.
	HalfOpenAdmitted  int
	HalfOpenInFlight  int
	HalfOpenSucceeded int // slow successes included
	HalfOpenFailed    int
	HalfOpenSlowCalls int // slow probes, failed or not (windowed modes; in Consecutive mode a slow probe is a failure)

	// Since New. Calls is the number of results that entered a
	// CountWindow (its sequence number): every result except a success
	// that found the window full of successes (which changes nothing and
	// is not written, so that a healthy breaker writes nothing). Other
	// modes count no successes on the hot path and report 0.
	Calls     uint64
	Failures  uint64 // failures recorded (closed, half-open, metrics-only; in Consecutive mode slow calls included)
	SlowCalls uint64
	Rejected  uint64 // rejected calls, summed over the per-P counters (see the package doc, Cost)
	// Successes counts every Success released, in any state and with a
	// stale permit too (but a slow success in Consecutive mode recorded
	// as a failure, which is in Failures), only with Config.CountStats (0
	// otherwise): the count the hot path does not keep by default. Failures
	// counts no stale result, so Successes + Failures is the results
	// released but the stale failures and Disabled's (see
	// Config.CountStats). Summed over per-P counters, as Rejected.
	Successes      uint64
	StaleResults   uint64 // results ignored because their permit was from an older generation
	Transitions    uint64
	Trips          uint64 // automatic transitions to Open
	ListenerPanics uint64

	// RemainingOpenAt at the time of the snapshot.
	RemainingOpen time.Duration
}

// Stats returns a snapshot of the breaker. It allocates nothing; it reads
// the Ticker in TimeWindow mode and when Open (not when ForcedOpen, whose
// RemainingOpen is the configured OpenDuration). Fields are read one by
// one, not at one instant.
func (b *Breaker) Stats() Stats {
	w := b.state.Load()
	s := Stats{
		State:               State(w & stateMask),
		Generation:          w >> genShift,
		ConsecutiveFailures: b.hot.consec.Load(),
		HalfOpenAdmitted:    field(w, admShift),
		HalfOpenInFlight:    field(w, inflShift),
		HalfOpenSucceeded:   field(w, admShift) - field(w, inflShift) - field(w, failShift),
		HalfOpenFailed:      field(w, failShift),
		HalfOpenSlowCalls:   field(w, slowShift),
		Failures:            b.hot.failures.Load(),
		SlowCalls:           b.hot.slowCalls.Load(),
		Rejected:            b.rejections(),
		StaleResults:        b.stale.Load(),
		Transitions:         b.transitions.Load(),
		Trips:               b.trips.Load(),
		ListenerPanics:      b.listenerPanics.Load(),
		Successes:           b.successes(),
	}
	switch b.init.Mode {
	case CountWindow:
		s.WindowCalls, s.WindowFailures, s.WindowSlowCalls = b.count.snapshot(&b.hot.hotWords)
		s.Calls = b.hot.seq.Load()
	case TimeWindow:
		s.WindowCalls, s.WindowFailures, s.WindowSlowCalls = b.tw.snapshot(b.init.Ticker.Now())
	}
	if s.WindowCalls > 0 {
		s.FailureRate = float64(s.WindowFailures) * 100 / float64(s.WindowCalls)
		s.SlowCallRate = float64(s.WindowSlowCalls) * 100 / float64(s.WindowCalls)
	}
	switch s.State {
	case Open:
		s.RemainingOpen = b.RemainingOpenAt(b.init.Ticker.Now())
	case ForcedOpen:
		s.RemainingOpen = b.set.Load().OpenDuration // as RemainingOpenAt: no clock needed
	}
	return s
}
