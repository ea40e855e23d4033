// Package watchdog is the shared deadline timer of rampart: one goroutine
// that fires targets whose deadline has passed, instead of one runtime timer
// (and its allocations) per call.
//
// # Algorithm: slot sweep
//
// A Watchdog owns a table of slots, grown in fixed segments of [SegmentSize]
// slots and never shrunk. [Watchdog.Schedule] takes a free slot (its
// shard's one-slot cache, else a pop from a lock-free stack: a Treiber stack
// whose head packs an ABA tag; one stack and one cache per shard, see
// shard, so that cores do not share one), writes the target, its argument
// and the deadline, and publishes the slot as armed. [Watchdog.Cancel]
// disarms it with one CAS and parks it in the shard's cache (or pushes it
// back on the stack when the cache is taken). Every tick the
// watchdog goroutine sweeps the table and fires each armed slot whose
// deadline is at or before the clock's reading: O(slots) per tick, O(1) and
// allocation-free per Schedule/Cancel. Sweeps are cheap when the concurrency
// is bounded (a bulkhead usually bounds it), which is the case the seed
// recommends the sweep for.
//
// Each slot carries a state word (gen<<8 | state). gen is incremented every
// time the slot is claimed, so a [Handle] (slot, gen) never cancels a later
// use of the same slot. The transitions are
//
//	free(g) --Schedule--> armed(g+1) --Cancel (CAS)--> free(g+1)
//	                                 --sweep  (CAS)--> firing(g+1) --Fire returns--> free(g+1)
//
// Exactly one of Cancel and the sweep wins the CAS out of armed, so a target
// fires at most once, and never after Cancel returned true. A fired slot is
// freed by the sweeper itself: the caller does not have to Cancel it (doing
// so is harmless and returns false).
//
// # Precision
//
// A target fires on the first sweep whose clock reading is at or after its
// deadline: no earlier than the deadline and no later than one tick after it
// (plus the scheduling delay of the watchdog goroutine, small on an idle
// machine, unbounded on a saturated one). The default tick is [DefaultTick].
//
// # Lifetime
//
// The goroutine starts lazily, on the first Schedule that finds it stopped
// (never during package initialisation), and exits by itself after
// [Config.IdleTicks] consecutive sweeps found nothing armed; the next
// Schedule starts it again. [Watchdog.Close] stops it for good and waits for
// it to exit. [Default] is the process-wide watchdog (never closed; it only
// idles out). Tests under testing/synctest create their own Watchdog inside
// the bubble (with a clock created inside it too) and Close it before the
// bubble ends. A Watchdog created with [Config.Manual] never starts a
// goroutine: the caller drives it with [Watchdog.Sweep].
//
// # Concurrency
//
// Schedule, Cancel, Sweep and Close are safe for concurrent use. Fire runs on
// the watchdog goroutine (or the goroutine calling Sweep), one target after
// another: it must be short and must not block. A Fire that panics is
// recovered and counted ([Stats].FirePanics); the slot is freed anyway.
package watchdog

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/ticker"
)

// Target is what a Watchdog fires. Implement it on a long-lived or per-call
// object that already exists (a context, a pooled request), so that
// scheduling allocates nothing: storing a pointer in an interface does not
// allocate.
type Target interface {
	// Fire is called once, on the watchdog goroutine, after the deadline
	// passed, with the arg given to Schedule. It must not block.
	Fire(arg uint64)
}

// Clock is the time source of a Watchdog: int64 monotonic nanoseconds.
// rampart.Ticker satisfies it. Deadlines given to Schedule are readings of
// the same clock.
type Clock interface {
	Now() int64
}

// DefaultTick is the sweep period of a Watchdog whose Config.Tick is zero.
const DefaultTick = time.Millisecond

// DefaultIdleTicks is the number of consecutive empty sweeps after which the
// goroutine exits, when Config.IdleTicks is zero (one second at DefaultTick).
const DefaultIdleTicks = 1000

// SegmentSize is the number of slots the table grows by.
const SegmentSize = 256

// MaxSegments bounds the table: at most MaxSegments*SegmentSize targets can
// be armed at once in one Watchdog. Schedule reports false beyond that.
const MaxSegments = 1024

// Config configures a Watchdog. The zero value is valid: a 1 ms tick on the
// process-wide nanosecond clock.
type Config struct {
	// Tick is the sweep period, which is also the precision: a target fires
	// at most one Tick after its deadline. Zero means DefaultTick.
	Tick time.Duration
	// Clock reads the time that deadlines are expressed in. Nil means
	// rampart.DefaultTicker().
	Clock Clock
	// IdleTicks is the number of consecutive sweeps that found nothing armed
	// after which the goroutine exits (it restarts on the next Schedule).
	// Zero means DefaultIdleTicks.
	IdleTicks int
	// Manual, when true, never starts a goroutine: the owner calls Sweep.
	Manual bool
}

// Handle identifies one Schedule. The zero Handle identifies nothing:
// cancelling it returns false.
type Handle struct {
	idx uint32 // slot index + 1; 0 means none
	gen uint32 // the slot's generation when it was armed
}

// Valid reports whether h came from a successful Schedule.
func (h Handle) Valid() bool { return h.idx != 0 }

// Slot states (low 8 bits of slot.state); the generation is in the bits above.
const (
	stFree   = 0
	stArmed  = 1
	stFiring = 2
)

// slot is one entry of the table, alone on its cache line so that callers
// arming neighbouring slots do not bounce each other's lines.
type slot struct {
	// state packs the generation and the state:
	//
	//	 63                          8 7        0
	//	+-----------------------------+----------+
	//	| gen (low 32 bits used)      | st       |  st: stFree, stArmed, stFiring
	//	+-----------------------------+----------+
	//
	// Written by Schedule
	// (store), Cancel (CAS), the sweeper (CAS, store).
	state atomic.Uint64
	// deadline is read by the sweeper while the slot is armed.
	deadline atomic.Int64
	// next links free slots (index+1 of the next free slot, 0 = end).
	next atomic.Uint32
	// target and arg are written by the owner of a claimed slot before it
	// publishes armed (the state store orders them), and read by the sweeper
	// only after it won the armed->firing CAS. Cleared when freed so the
	// table does not keep targets alive.
	target Target
	arg    uint64
	_      [pad.Tail48]byte
}

type segment [SegmentSize]slot

// shard is one shard's free stack and its one-slot cache, alone on a cache
// line (the stack's head and the cache are used by the same calls).
//
// The cache holds (index+1 of) one free slot of the shard, or 0. Cancel
// parks the slot it frees there when the cache is empty, and Schedule takes
// it from there first: a goroutine that arms and disarms in turn (a call
// under a timeout) reuses one slot with a CAS on each side, instead of a
// pop and a push on the stack (a CAS each, plus the link store and the
// loads). A cached slot keeps its last target (cleared when the slot goes
// back on the stack): at most nShards stale targets are kept alive, until
// the slot's next use.
type shard struct {
	head  atomic.Uint64
	cache atomic.Uint32
	_     [pad.LineSize - 12]byte
}

// Run states of the goroutine (Watchdog.run).
const (
	runStopped = 0 // no goroutine; the next Schedule starts one
	runRunning = 1 // a goroutine sweeps
	runClosed  = 2 // closed (or manual): never start one
)

// Watchdog fires targets at their deadlines. Create it with New (or use
// Default); the zero value is not usable.
type Watchdog struct {
	// shards are the free stacks, one per shard, each head packing
	//
	//	 63              32 31               0
	//	+------------------+------------------+
	//	| ABA tag          | top index + 1    |  0 = empty stack
	//	+------------------+------------------+
	//
	// The tag grows on every successful pop and push. Each shard's head
	// shares its line with the shard's one-slot cache (see shard), and with
	// nothing else.
	shards [nShards]shard

	// run is runStopped/runRunning/runClosed. Read by every Schedule (a load
	// of a line that is written only when the goroutine starts or stops).
	run    atomic.Uint32
	clock  Clock
	tick   time.Duration
	idle   int
	manual bool

	nsegs atomic.Int32 // number of published segments
	segs  [MaxSegments]atomic.Pointer[segment]

	mu     sync.Mutex    // serialises growth, start, idle exit and Close
	stop   chan struct{} // closes to stop the current goroutine
	done   chan struct{} // closed by the current goroutine when it exits
	closed bool

	fired      atomic.Uint64
	firePanics atomic.Uint64
	sweeps     atomic.Uint64
	full       atomic.Uint64
}

// New returns a Watchdog. Its goroutine starts on the first Schedule (never
// when Manual is set).
func New(cfg Config) *Watchdog {
	w := &Watchdog{clock: cfg.Clock, tick: cfg.Tick, idle: cfg.IdleTicks, manual: cfg.Manual}
	if w.clock == nil {
		w.clock = ticker.Default() // rampart.DefaultTicker()'s instance
	}
	if w.tick <= 0 {
		w.tick = DefaultTick
	}
	if w.idle <= 0 {
		w.idle = DefaultIdleTicks
	}
	if w.manual {
		w.run.Store(runClosed)
	}
	return w
}

var defaultWatchdog = sync.OnceValue(func() *Watchdog { return New(Config{}) })

// Default returns the process-wide Watchdog: DefaultTick, clocked by
// rampart.DefaultTicker() (a policy using another ticker creates its own
// Watchdog with that Clock). It is created on first use, its goroutine starts
// on the first Schedule and exits after a second without work. Never Close it.
func Default() *Watchdog { return defaultWatchdog() }

// Tick returns the sweep period (the precision).
func (w *Watchdog) Tick() time.Duration { return w.tick }

// Clock returns the clock deadlines are read against.
func (w *Watchdog) Clock() Clock { return w.clock }

// slotAt returns the slot with index i (0-based). The segment is published.
func (w *Watchdog) slotAt(i uint32) *slot {
	return &w.segs[i/SegmentSize].Load()[i%SegmentSize]
}

// Schedule arranges for t.Fire(arg) to be called once after the clock
// reaches deadline (a reading of w.Clock()). It allocates nothing once the
// table has grown to the concurrency in use. It returns false, and schedules
// nothing, when the Watchdog is closed or its table is full
// (MaxSegments*SegmentSize armed targets): the caller falls back to a runtime
// timer. A deadline already passed fires on the next sweep.
//
// Atomics: a load and a CAS to take the shard's cached slot (when the cache
// is empty: two loads and a CAS to pop one, retried under contention), a
// load of the slot's generation, two stores (the deadline, then the state
// that publishes it and the target), one load of the run state.
func (w *Watchdog) Schedule(deadline int64, t Target, arg uint64) (Handle, bool) {
	i, ok := w.take(shardOf(t))
	if !ok {
		return Handle{}, false
	}
	s := w.slotAt(i)
	gen := uint32(s.state.Load()>>8) + 1
	s.target, s.arg = t, arg
	s.deadline.Store(deadline)
	// Publishes target, arg and deadline to the sweeper.
	s.state.Store(uint64(gen)<<8 | stArmed)
	// Read after the arm store: see the idle-exit protocol in loop.
	if w.run.Load() != runRunning {
		if !w.scheduleSlow() {
			w.Cancel(Handle{idx: i + 1, gen: gen})
			return Handle{}, false
		}
	}
	return Handle{idx: i + 1, gen: gen}, true
}

// scheduleSlow is the slow path of Schedule: start the goroutine, or report
// false when closed. A manual watchdog accepts the schedule.
func (w *Watchdog) scheduleSlow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if w.manual {
		return true
	}
	if w.run.Load() == runStopped {
		w.run.Store(runRunning)
		w.stop = make(chan struct{})
		w.done = make(chan struct{})
		go w.loop(w.stop, w.done)
	}
	return true
}

// Cancel disarms h. It returns true when it stopped the target from firing,
// false when the target has fired or is firing (Fire may still be running on
// the watchdog goroutine), or when h was already cancelled or is the zero
// Handle. Cancelling is optional after a fire, and idempotent.
//
// Atomics: one CAS on the slot, then a load and a CAS to park it in its
// shard's cache (when the cache is taken: a load, a store of the link and a
// CAS to push it on the stack).
func (w *Watchdog) Cancel(h Handle) bool {
	if h.idx == 0 {
		return false
	}
	i := h.idx - 1
	s := w.slotAt(i)
	if !s.state.CompareAndSwap(uint64(h.gen)<<8|stArmed, uint64(h.gen)<<8|stFree) {
		return false
	}
	w.release(i, s)
	return true
}

// take takes a free slot for shard sh: the shard's cached slot (a load and
// a CAS), else a pop.
func (w *Watchdog) take(sh uint32) (uint32, bool) {
	c := &w.shards[sh].cache
	if i := c.Load(); i != 0 && c.CompareAndSwap(i, 0) {
		return i - 1, true
	}
	return w.pop(sh)
}

// release frees slot i (s), disarmed by Cancel: into its shard's cache when
// that is empty (a load and a CAS; the stale target stays until the slot's
// next use), else onto the stack with its target cleared.
func (w *Watchdog) release(i uint32, s *slot) {
	c := &w.shards[i%nShards].cache
	if c.Load() == 0 && c.CompareAndSwap(0, i+1) {
		return
	}
	s.target = nil
	w.push(i)
}

// Sharding. Slot i belongs to shard i%nShards and always goes back to
// that shard's free stack. Schedule pops from the shard chosen by the
// target's address divided by the allocator's span size: the objects one P
// allocates in a row (a fresh context per call, a pooled request) come from
// the same span, so a goroutine keeps popping and pushing the same few
// slots, which stay in its core's cache, while another core works another
// shard. Without it every Schedule/Cancel bounces one head and the top
// slots' lines between cores. An empty shard steals from the others before
// the table grows.
const (
	shardBits = 3
	nShards   = 1 << shardBits
)

// shardOf picks the shard for target t (see Sharding): a hash of the
// address its interface points to, in units of 8 KiB.
func shardOf(t Target) uint32 {
	p := uintptr((*[2]unsafe.Pointer)(unsafe.Pointer(&t))[1])
	return uint32((uint64(p>>13) * 0x9E3779B97F4A7C15) >> (64 - shardBits))
}

// pop takes a free slot index, preferably from shard sh.
func (w *Watchdog) pop(sh uint32) (uint32, bool) {
	if i, ok := w.popFrom(sh); ok {
		return i, true
	}
	return w.popSlow(sh)
}

// popFrom pops from one shard's stack; false when it is empty.
func (w *Watchdog) popFrom(sh uint32) (uint32, bool) {
	head := &w.shards[sh].head
	for {
		old := head.Load()
		top := uint32(old)
		if top == 0 {
			return 0, false
		}
		next := w.slotAt(top - 1).next.Load()
		if head.CompareAndSwap(old, (old>>32+1)<<32|uint64(next)) {
			return top - 1, true
		}
	}
}

// popSlow is the slow path of pop: steal from another shard, else grow.
func (w *Watchdog) popSlow(sh uint32) (uint32, bool) {
	for k := uint32(1); k < nShards; k++ {
		if i, ok := w.popFrom((sh + k) % nShards); ok {
			return i, true
		}
	}
	return w.grow(sh)
}

// push returns slot i to its shard's free stack.
func (w *Watchdog) push(i uint32) {
	s := w.slotAt(i)
	head := &w.shards[i%nShards].head
	for {
		old := head.Load()
		s.next.Store(uint32(old))
		if head.CompareAndSwap(old, (old>>32+1)<<32|uint64(i+1)) {
			return
		}
	}
}

// grow is the slow path of pop: under the lock, try every shard again
// (another goroutine may have grown the table while we waited), else
// publish a new segment, keep its first slot of shard sh and push the
// others onto their shards, one chain per shard.
func (w *Watchdog) grow(sh uint32) (uint32, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := uint32(0); k < nShards; k++ {
		if i, ok := w.popFrom((sh + k) % nShards); ok {
			return i, true
		}
	}
	n := w.nsegs.Load()
	if n >= MaxSegments {
		// The last free slots may sit in other shards' caches.
		for k := uint32(0); k < nShards; k++ {
			c := &w.shards[k].cache
			if i := c.Load(); i != 0 && c.CompareAndSwap(i, 0) {
				return i - 1, true
			}
		}
		w.full.Add(1)
		return 0, false
	}
	seg := new(segment)
	base := uint32(n) * SegmentSize
	// Shard h's slots in the segment are base+h, base+h+nShards, ...; link
	// each to the next one of its shard (links are index+1).
	for k := uint32(0); k+nShards < SegmentSize; k++ {
		seg[k].next.Store(base + k + nShards + 1)
	}
	w.segs[n].Store(seg)
	w.nsegs.Store(n + 1)
	for h := uint32(0); h < nShards; h++ {
		first := h // the chain's first slot (offset in the segment)
		if h == sh {
			first += nShards // slot base+sh is the caller's
		}
		last := h + (SegmentSize/nShards-1)*nShards
		if first > last {
			continue
		}
		head := &w.shards[h].head
		for {
			old := head.Load()
			seg[last].next.Store(uint32(old))
			if head.CompareAndSwap(old, (old>>32+1)<<32|uint64(base+first+1)) {
				break
			}
		}
	}
	return base + sh, true
}

// Sweep fires every armed target whose deadline is at or before the clock's
// current reading, on the calling goroutine, and returns how many it fired.
// The watchdog goroutine calls it every tick; a Manual watchdog's owner calls
// it by hand.
func (w *Watchdog) Sweep() int {
	fired, _ := w.sweep(w.clock.Now(), false)
	return fired
}

// sweep fires due targets at reading now; it returns the number fired and
// the number still armed. fromLoop: the caller is the watchdog's goroutine.
func (w *Watchdog) sweep(now int64, fromLoop bool) (fired, armed int) {
	w.sweeps.Add(1)
	n := w.nsegs.Load()
	for si := int32(0); si < n; si++ {
		seg := w.segs[si].Load()
		for k := range seg {
			s := &seg[k]
			st := s.state.Load()
			if st&0xff != stArmed {
				continue
			}
			if s.deadline.Load() > now {
				armed++
				continue
			}
			gen := st &^ 0xff
			if !s.state.CompareAndSwap(st, gen|stFiring) {
				continue // cancelled (and maybe re-armed) meanwhile
			}
			t, arg := s.target, s.arg
			s.target = nil
			w.fire(t, arg, s, gen, uint32(si)*SegmentSize+uint32(k), fromLoop)
			fired++
		}
	}
	if fired > 0 {
		w.fired.Add(uint64(fired))
	}
	return fired, armed
}

// countArmed counts armed slots (used by the idle-exit protocol).
func (w *Watchdog) countArmed() int {
	armed := 0
	n := w.nsegs.Load()
	for si := int32(0); si < n; si++ {
		seg := w.segs[si].Load()
		for k := range seg {
			if seg[k].state.Load()&0xff == stArmed {
				armed++
			}
		}
	}
	return armed
}

// fire runs the target taken from slot s (index i, state gen|stFiring),
// then frees the slot. A panic in Fire is recovered and counted.
// runtime.Goexit in Fire (user code reached through a context's callbacks)
// cannot be stopped: the slot is freed all the same and, when the caller is
// the watchdog's goroutine (fromLoop), a new one takes over the sweeping
// before this one ends.
func (w *Watchdog) fire(t Target, arg uint64, s *slot, gen uint64, i uint32, fromLoop bool) {
	returned := false
	defer func() {
		if r := recover(); r != nil {
			w.firePanics.Add(1)
			returned = true // recovered: the caller goes on
		} else if !returned {
			w.firePanics.Add(1) // runtime.Goexit, counted with the panics
		}
		s.state.Store(gen | stFree)
		w.push(i)
		if !returned && fromLoop {
			w.respawn()
		}
	}()
	t.Fire(arg)
	returned = true
}

// respawn starts a watchdog goroutine in place of the calling one, which
// runtime.Goexit is ending inside a Fire. Close and StopIdle, if they ran
// meanwhile, wait for the old one's done channel, which it still closes.
func (w *Watchdog) respawn() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.run.Load() != runRunning {
		return
	}
	w.stop = make(chan struct{})
	w.done = make(chan struct{})
	go w.loop(w.stop, w.done)
}

// loop is the watchdog goroutine.
//
// Idle exit without losing a Schedule (a Dekker-style handshake on
// sequentially consistent atomics): the goroutine stores runStopped, then
// counts armed slots; Schedule stores armed, then loads the run state. At
// least one of them sees the other's store: either the count finds the slot
// (and the goroutine carries on), or Schedule sees runStopped and starts a
// new goroutine.
func (w *Watchdog) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tk := time.NewTicker(w.tick)
	defer tk.Stop()
	idle := 0
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		if _, armed := w.sweep(w.clock.Now(), true); armed > 0 {
			idle = 0
			continue
		}
		if idle++; idle < w.idle {
			continue
		}
		w.mu.Lock()
		if w.closed || w.done != done {
			// Closed, or stopped by StopIdle (and maybe replaced by a
			// newer goroutine, whose state is not ours to touch).
			w.mu.Unlock()
			return
		}
		w.run.Store(runStopped)
		if w.countArmed() > 0 {
			w.run.Store(runRunning)
			w.mu.Unlock()
			idle = 0
			continue
		}
		w.stop, w.done = nil, nil
		w.mu.Unlock()
		return
	}
}

// Close stops the goroutine and waits for it to exit. Targets still armed
// never fire; later Schedules report false. Close is idempotent. Never Close
// Default().
func (w *Watchdog) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.run.Store(runClosed)
	stop, done := w.stop, w.done
	w.stop, w.done = nil, nil
	w.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return nil
}

// CloseHandOff is Close, except that the targets still armed are not
// dropped: each fires at its deadline on a runtime timer (time.AfterFunc for
// the deadline minus the clock's reading now), unless Cancel disarms it
// first; Cancel keeps its meaning (true: it will not fire). A Timeout uses
// it, so that a context in flight when its watchdog is closed still ends at
// its deadline. A manual watchdog only closes.
func (w *Watchdog) CloseHandOff() error {
	w.mu.Lock()
	already := w.closed
	w.mu.Unlock()
	err := w.Close()
	if already || w.manual {
		return err
	}
	now := w.clock.Now()
	n := w.nsegs.Load()
	for si := int32(0); si < n; si++ {
		seg := w.segs[si].Load()
		for k := range seg {
			st := seg[k].state.Load()
			if st&0xff != stArmed {
				continue
			}
			i := uint32(si)*SegmentSize + uint32(k)
			dl := seg[k].deadline.Load()
			d := dl - now
			if dl > now && d < 0 {
				d = math.MaxInt64 // wrapped: a far deadline against a negative reading
			}
			d = max(d, 0)
			time.AfterFunc(time.Duration(d), func() { w.fireSlot(i, st) })
		}
	}
	return err
}

// fireSlot fires slot i if it is still armed with the state word st, as a
// sweep would (a slot cancelled or re-armed since is left alone).
func (w *Watchdog) fireSlot(i uint32, st uint64) {
	s := w.slotAt(i)
	gen := st &^ 0xff
	if !s.state.CompareAndSwap(st, gen|stFiring) {
		return
	}
	t, arg := s.target, s.arg
	s.target = nil
	w.fired.Add(1)
	w.fire(t, arg, s, gen, i, false)
}

// StopIdle stops the goroutine now if nothing is armed, and waits for it to
// exit; the next Schedule starts it again (unlike Close). It reports whether
// the goroutine is stopped on return. Use it where a goroutine must not
// outlive some work, e.g. before a leak check in a test's TestMain, on
// Default() too.
func (w *Watchdog) StopIdle() bool {
	w.mu.Lock()
	if w.run.Load() != runRunning {
		w.mu.Unlock()
		return true
	}
	// Same handshake as the idle exit in loop.
	w.run.Store(runStopped)
	if w.countArmed() > 0 {
		w.run.Store(runRunning)
		w.mu.Unlock()
		return false
	}
	stop, done := w.stop, w.done
	w.stop, w.done = nil, nil
	w.mu.Unlock()
	close(stop)
	<-done
	return true
}

// Running reports whether the goroutine is running now.
func (w *Watchdog) Running() bool { return w.run.Load() == runRunning }

// Stats are counters of a Watchdog.
type Stats struct {
	Slots      int    // slots in the table (the most ever armed at once, rounded up to a segment)
	Armed      int    // targets armed now (a scan: O(Slots))
	Fired      uint64 // targets fired
	FirePanics uint64 // Fire calls that panicked (recovered)
	Sweeps     uint64 // sweeps done
	Full       uint64 // Schedules refused because the table was full
}

// Stats returns the counters. It scans the table to count armed slots.
func (w *Watchdog) Stats() Stats {
	return Stats{
		Slots:      int(w.nsegs.Load()) * SegmentSize,
		Armed:      w.countArmed(),
		Fired:      w.fired.Load(),
		FirePanics: w.firePanics.Load(),
		Sweeps:     w.sweeps.Load(),
		Full:       w.full.Load(),
	}
}
