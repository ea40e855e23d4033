// Package ticker provides monotonic clocks that read as int64 nanoseconds.
//
// Every policy takes the current time as an int64 ("now") measured from an
// arbitrary epoch. Readings from one clock never decrease. Readings from two
// different clocks are not comparable: everything that exchanges times (a
// pipeline and its policies) must share one clock.
//
// Three implementations:
//   - Nano: time.Since of an epoch taken at construction. It costs one
//     monotonic clock read (about as much as a linknamed runtime.nanotime;
//     docs/design-principles.md gives the figure) and follows the fake clock of testing/synctest when
//     it is created inside a bubble.
//   - Cached: a load of an atomic word that one goroutine refreshes every
//     interval (1 ms by default); for policies whose decisions are coarse.
//   - Manual: a clock that moves only when told to, for tests.
package ticker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/internal/atomicx"
	"github.com/rampart-go/rampart/internal/pad"
)

// Nano reads the monotonic clock: Now returns the nanoseconds elapsed since
// the Nano was created. The zero value is not usable; call NewNano.
// It is safe for concurrent use.
type Nano struct {
	epoch time.Time // carries a monotonic reading; time.Since uses it
}

// NewNano returns a clock whose epoch is the current instant. Its first
// reading is 0 or a little more.
func NewNano() *Nano { return &Nano{epoch: time.Now()} }

// Now returns the nanoseconds since n was created: one monotonic clock read.
func (n *Nano) Now() int64 { return int64(time.Since(n.epoch)) }

// DefaultInterval is the refresh period of a Cached clock created with a
// non-positive interval.
const DefaultInterval = time.Millisecond

// Cached is a clock whose reading is a single atomic load. One goroutine,
// started by the first call to Now, stores a fresh reading of an underlying
// Nano every interval.
//
// Staleness bound: a reading lags the true monotonic time by at most one
// interval plus the refresh goroutine's scheduling delay (which is small on
// an idle machine and unbounded on a saturated one; under heavy load prefer
// Nano for decisions finer than a few milliseconds). Readings never go
// backwards, including across Close: after Close, Now reads the underlying
// clock directly, which is always ahead of the last cached value.
//
// Create it with NewCached and stop its goroutine with Close. Create it inside
// a testing/synctest bubble and Close it before the bubble ends when a test
// needs one.
type Cached struct {
	// now is the cached reading, written by the refresh goroutine every
	// interval and read by every caller, hence alone on its line.
	// 0 means "not started" and -1 means "closed".
	now pad.Int64

	src      *Nano
	interval time.Duration

	mu   sync.Mutex // serialises start and Close; never taken by a started Now
	stop chan struct{}
	done chan struct{}
}

var defaultNano = sync.OnceValue(NewNano)

// Default returns the process-wide Nano, created on first use: the clock of
// rampart.DefaultTicker and of the process-wide watchdog, which must be the
// same instance for their readings to be comparable.
func Default() *Nano { return defaultNano() }

const (
	cachedIdle   = 0
	cachedClosed = -1
)

// NewCached returns a cached clock refreshed every interval (DefaultInterval
// when interval <= 0). Its goroutine starts on the first call to Now.
func NewCached(interval time.Duration) *Cached {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Cached{src: NewNano(), interval: interval}
}

// Now returns the cached reading: one atomic load once started.
func (c *Cached) Now() int64 {
	if v := c.now.Load(); v > 0 {
		return v
	}
	return c.nowSlow()
}

// Reading returns the word that holds c's cached reading: positive once its
// goroutine runs, 0 before the first Now and -1 after Close (then call Now).
// Loading it is Now's fast path, for callers that inline it (package
// pipeline); a function rather than a method so that it stays off the
// public rampart.CachedTicker. Callers only load it.
func Reading(c *Cached) *atomic.Int64 { return &c.now.Int64 }

// Interval returns the refresh period.
func (c *Cached) Interval() time.Duration { return c.interval }

// nowSlow is the slow path of Now: it starts the refresh goroutine on first
// use and reads the source directly once closed.
func (c *Cached) nowSlow() int64 {
	if c.now.Load() == cachedClosed {
		return max(c.src.Now(), 1) // at least 1, as the cached readings: never backwards
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch v := c.now.Load(); {
	case v == cachedClosed:
		return max(c.src.Now(), 1)
	case v > 0:
		return v
	}
	// Readings are stored as at least 1 so that 0 keeps meaning "not started".
	c.now.Store(max(c.src.Now(), 1))
	c.stop = make(chan struct{})
	c.done = make(chan struct{})
	go c.refresh(c.stop, c.done)
	return c.now.Load()
}

func (c *Cached) refresh(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			// Publishes a reading; Max keeps it from going backwards if a
			// Close raced with this store (Close stores -1 only after this
			// goroutine has exited, so the race cannot resurrect it).
			atomicx.Max(&c.now.Int64, max(c.src.Now(), 1))
		case <-stop:
			return
		}
	}
}

// Close stops the refresh goroutine and waits for it to exit. Later reads go
// to the underlying clock directly. Close is idempotent.
func (c *Cached) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.Load() == cachedClosed {
		return nil
	}
	if c.stop != nil {
		close(c.stop)
		<-c.done
	}
	c.now.Store(cachedClosed)
	return nil
}

// Manual is a clock that moves only when Set or Advance is called. It is
// safe for concurrent use: readers never see time go backwards.
// The zero value reads 0.
type Manual struct {
	now atomic.Int64
}

// NewManual returns a manual clock reading start.
func NewManual(start int64) *Manual {
	m := &Manual{}
	m.now.Store(start)
	return m
}

// Now returns the current reading.
func (m *Manual) Now() int64 { return m.now.Load() }

// Set moves the clock to t. It panics if t is earlier than the current
// reading: a manual clock is a test tool, and a test that moves time
// backwards has a bug that must not go unnoticed.
func (m *Manual) Set(t int64) {
	for {
		cur := m.now.Load()
		if t < cur {
			panic("ticker: Manual.Set would move time backwards")
		}
		if m.now.CompareAndSwap(cur, t) {
			return
		}
	}
}

// Advance moves the clock forward by d and returns the new reading, which
// stops at math.MaxInt64 rather than wrapping into the past. It panics if d
// is negative.
func (m *Manual) Advance(d time.Duration) int64 {
	if d < 0 {
		panic("ticker: Manual.Advance with a negative duration")
	}
	for {
		cur := m.now.Load()
		next := atomicx.SatAdd(cur, int64(d))
		if m.now.CompareAndSwap(cur, next) {
			return next
		}
	}
}

// IsNil reports whether t is a nil pointer of one of this package's clock
// types: a non-nil rampart.Ticker interface whose Now would panic in the
// middle of a call. Policies refuse it at New (NilReason).
func IsNil(t any) bool {
	switch t := t.(type) {
	case *Cached:
		return t == nil
	case *Nano:
		return t == nil
	case *Manual:
		return t == nil
	}
	return false
}

// NilReason is the ConfigError reason for a Ticker that IsNil; its verb
// takes the ticker.
const NilReason = "is a nil %T: leave it nil for rampart.DefaultTicker(), or pass a ticker made by rampart.NewNanoTicker, NewCachedTicker or NewManualTicker"

// Equal reports whether a and b are the same clock (==). ok is false when
// they cannot be compared: both hold the same uncomparable dynamic type (a
// func or a struct with a slice, say), where == would panic.
func Equal(a, b any) (equal, ok bool) {
	defer func() {
		if recover() != nil {
			equal, ok = false, false
		}
	}()
	return a == b, true
}

// UncomparableReason is the ConfigError reason for a Ticker that Equal
// cannot compare; its verb takes the ticker.
const UncomparableReason = "is of type %T, which cannot be compared to tell whether two policies share one clock: use a pointer type"

// SameBubble reports whether n runs on the caller's clock: n made and the
// caller running outside any testing/synctest bubble, or both inside one.
// Inside a bubble time.Now carries no monotonic reading (the runtime
// omits it there), nor does an epoch taken there. It reads the clock once:
// for rare paths (a breaker's trip), not for every call.
func SameBubble(n *Nano) bool {
	now := time.Now()
	return (n.epoch == n.epoch.Round(0)) == (now == now.Round(0))
}
