package rampart

import (
	"time"

	"github.com/rampart-go/rampart/internal/ticker"
)

// Ticker is a monotonic clock read as int64 nanoseconds from an arbitrary
// epoch. Readings never decrease. Policies take a Ticker in their Config
// (nil means [DefaultTicker]) for their shorthand methods; their primitive
// methods take the reading itself.
//
// Implementations must be safe for concurrent use. The ones in this package
// are [NanoTicker] (the default), [CachedTicker] (one atomic load, refreshed
// about every millisecond) and [ManualTicker] (tests).
type Ticker interface {
	// Now returns the current reading in nanoseconds.
	Now() int64
}

// NanoTicker reads the monotonic clock: the nanoseconds since it was
// created, one clock read per Now. Create it with [NewNanoTicker].
type NanoTicker = ticker.Nano

// CachedTicker returns a reading that one background goroutine refreshes
// every interval, so Now costs one atomic load. The goroutine starts on the
// first Now and stops with Close. A reading lags real time by at most one
// interval plus scheduling delay. Create it with [NewCachedTicker].
type CachedTicker = ticker.Cached

// ManualTicker moves only when Set or Advance is called: the clock for
// deterministic tests. It is safe for concurrent use. Create it with
// [NewManualTicker].
type ManualTicker = ticker.Manual

// NewNanoTicker returns a monotonic clock whose epoch is now.
func NewNanoTicker() *NanoTicker { return ticker.NewNano() }

// NewCachedTicker returns a cached clock refreshed every interval (1 ms when
// interval <= 0). Close it when done.
func NewCachedTicker(interval time.Duration) *CachedTicker { return ticker.NewCached(interval) }

// NewManualTicker returns a manual clock that reads start.
func NewManualTicker(start int64) *ManualTicker { return ticker.NewManual(start) }

// DefaultTicker returns the process-wide [NanoTicker] that policies and
// pipelines use when their Config leaves Ticker nil, so that their readings
// are comparable. It is created on first use. Under testing/synctest, give
// policies a ticker created inside the bubble instead: the default one was
// created outside it.
func DefaultTicker() Ticker { return ticker.Default() }
