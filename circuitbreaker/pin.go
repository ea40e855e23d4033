package circuitbreaker

import (
	"sync/atomic"
	"unsafe"

	"github.com/rampart-go/rampart/internal/israce"
)

// procPin pins the calling goroutine to its P (no preemption, no
// migration) until procUnpin, and returns the P's id, in [0, GOMAXPROCS).
// It is the runtime's own per-P primitive (sync.Pool's), which the runtime
// source marks as kept, signature unchanged, for the packages that link to
// it.
//
//go:linkname procPin runtime.procPin
func procPin() int

// procUnpin ends procPin.
//
//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// plainAdd is true where a counter that only its pinned P writes may be
// added to with a plain read-modify-write: a 64-bit platform (where
// Stats' concurrent atomic load of a word cannot tear) without the race
// detector (which does not see a P's pinning as an order between the
// goroutines that run on it).
const plainAdd = unsafe.Sizeof(uintptr(0)) == 8 && !israce.Enabled

// addOwned adds one to a counter that only the caller's pinned P writes.
func addOwned(c *uint64) {
	if plainAdd {
		*c++
		return
	}
	atomic.AddUint64(c, 1)
}
