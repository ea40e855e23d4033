package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	resiliency "github.com/eapache/go-resiliency/semaphore"
	"github.com/failsafe-go/failsafe-go"
	fsbulkhead "github.com/failsafe-go/failsafe-go/bulkhead"
	"golang.org/x/sync/semaphore"

	"github.com/rampart-go/rampart/bulkhead"
)

// bulkheadPeer is one library's concurrency limit seen as try-acquire and
// release. Admit measures a pair on a bulkhead with room to spare; Reject
// measures a refused try on a full one. Two forms are measured, and the
// tables divide only like by like: the primitives (rampart's Acquire and
// Release, failsafe-permit, goresiliency, xsync, chan) and the executors,
// which run the function (rampart-do, failsafe).
type bulkheadPeer struct {
	name string
	// build returns, for a limit of max, acquire (reports admission) and
	// release as the library's users call them, and hold/unhold, which take
	// and give back one permit through the library's primitive (to fill the
	// bulkhead for Reject).
	build func(b *testing.B, max int) peerOps
}

type peerOps struct {
	acquire func() bool
	release func()
	hold    func() bool
	unhold  func()
}

// plain is a peer whose users acquire and release directly.
func plain(acquire func() bool, release func()) peerOps {
	return peerOps{acquire, release, acquire, release}
}

var errNotAdmitted = errors.New("bench: not admitted")

func bulkheadPeers() []bulkheadPeer {
	return []bulkheadPeer{
		{"rampart", func(b *testing.B, max int) peerOps {
			bh, err := bulkhead.New(bulkhead.Config{Max: max})
			if err != nil {
				b.Fatal(err)
			}
			return plain(func() bool { return bh.Acquire() == nil }, bh.Release)
		}},
		{"rampart-do", func(b *testing.B, max int) peerOps {
			// The convenience form, the counterpart of failsafe's executor:
			// acquire runs the whole call; release is a no-op.
			bh, err := bulkhead.New(bulkhead.Config{Max: max})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			fn := func(context.Context) error { return nil }
			return peerOps{func() bool { return bh.Do(ctx, fn) == nil }, func() {}, func() bool { return bh.Acquire() == nil }, bh.Release}
		}},
		{"failsafe", func(b *testing.B, max int) peerOps {
			// failsafe-go's bulkhead through its executor, as users call it.
			bh := fsbulkhead.New[any](uint(max))
			ex := failsafe.With[any](bh)
			fn := func() error { return nil }
			return peerOps{func() bool { return ex.Run(fn) == nil }, func() {}, bh.TryAcquirePermit, bh.ReleasePermit}
		}},
		{"failsafe-permit", func(b *testing.B, max int) peerOps {
			// failsafe-go's bulkhead primitive, the counterpart of rampart's
			// Acquire and Release.
			bh := fsbulkhead.New[any](uint(max))
			return plain(bh.TryAcquirePermit, bh.ReleasePermit)
		}},
		{"goresiliency", func(b *testing.B, max int) peerOps {
			// Its only acquire takes a timeout and starts a timer. With a
			// timeout of 0 (its fail-fast form, used for Reject, limit 1) an
			// acquire with room loses the select against the already-fired
			// timer about half of the time, so Admit uses a long timeout.
			timeout := time.Hour
			if max == 1 {
				timeout = 0
			}
			s := resiliency.New(max, timeout)
			acquire := func() bool { return s.Acquire() == nil }
			hold := func() bool {
				for range 1000 {
					if acquire() {
						return true
					}
				}
				return false
			}
			return peerOps{acquire, s.Release, hold, s.Release}
		}},
		{"xsync", func(b *testing.B, max int) peerOps {
			s := semaphore.NewWeighted(int64(max))
			return plain(func() bool { return s.TryAcquire(1) }, func() { s.Release(1) })
		}},
		{"chan", func(b *testing.B, max int) peerOps {
			ch := make(chan struct{}, max)
			return plain(func() bool {
				select {
				case ch <- struct{}{}:
					return true
				default:
					return false
				}
			}, func() { <-ch })
		}},
	}
}

// BenchmarkBulkhead compares admission and rejection of a concurrency limit.
//
//	Admit          acquire + release, one goroutine, limit 1024
//	AdmitParallel  the same from GOMAXPROCS goroutines on one bulkhead
//	Reject         a refused acquire on a full bulkhead (limit 1, held)
func BenchmarkBulkhead(b *testing.B) {
	for _, p := range bulkheadPeers() {
		b.Run("Admit/"+p.name, func(b *testing.B) {
			ops := p.build(b, 1024)
			b.ReportAllocs()
			for b.Loop() {
				if !ops.acquire() {
					b.Fatal(errNotAdmitted)
				}
				ops.release()
			}
		})
	}
	for _, p := range bulkheadPeers() {
		b.Run("AdmitParallel/"+p.name, func(b *testing.B) {
			ops := p.build(b, 1024)
			var refused atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !ops.acquire() {
						refused.Add(1)
						continue
					}
					ops.release()
				}
			})
			if refused.Load() != 0 {
				b.Fatalf("%d calls refused", refused.Load())
			}
		})
	}
	for _, p := range bulkheadPeers() {
		b.Run("Reject/"+p.name, func(b *testing.B) {
			ops := p.build(b, 1)
			if !ops.hold() {
				b.Fatal("could not fill the bulkhead")
			}
			defer ops.unhold()
			b.ReportAllocs()
			for b.Loop() {
				if ops.acquire() {
					b.Fatal("admitted by a full bulkhead")
				}
			}
		})
	}
}
