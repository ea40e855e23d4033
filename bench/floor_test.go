package bench

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	//lint:ignore SA1019 measured on purpose: the README explains why jitter does not use it
	exprand "golang.org/x/exp/rand"

	"github.com/rampart-go/rampart"
)

// sink keeps results alive so the compiler cannot delete the measured work.
var sink atomic.Int64

// BenchmarkFloor measures the building blocks every policy is made of, so the
// policies' figures can be read against what they cost at the least.
func BenchmarkFloor(b *testing.B) {
	b.Run("AtomicAdd/direct", func(b *testing.B) {
		b.ReportAllocs()
		var w atomic.Int64
		for b.Loop() {
			w.Add(1)
		}
		sink.Add(w.Load())
	})
	b.Run("AtomicAddParallel/direct", func(b *testing.B) {
		b.ReportAllocs()
		var w atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				w.Add(1)
			}
		})
		sink.Add(w.Load())
	})
	b.Run("AtomicCAS/direct", func(b *testing.B) {
		b.ReportAllocs()
		var w atomic.Int64
		for b.Loop() {
			v := w.Load()
			w.CompareAndSwap(v, v+1)
		}
		sink.Add(w.Load())
	})
	b.Run("AtomicCASParallel/direct", func(b *testing.B) {
		b.ReportAllocs()
		var w atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				for {
					v := w.Load()
					if w.CompareAndSwap(v, v+1) {
						break
					}
				}
			}
		})
		sink.Add(w.Load())
	})
	b.Run("TimeNow/direct", func(b *testing.B) {
		b.ReportAllocs()
		var s int64
		for b.Loop() {
			s += time.Now().UnixNano()
		}
		sink.Add(s)
	})
	b.Run("NanoTicker/rampart", func(b *testing.B) {
		b.ReportAllocs()
		tk := rampart.NewNanoTicker()
		var s int64
		for b.Loop() {
			s += tk.Now()
		}
		sink.Add(s)
	})
	b.Run("CachedTicker/rampart", func(b *testing.B) {
		b.ReportAllocs()
		tk := rampart.NewCachedTicker(time.Millisecond)
		defer tk.Close()
		var s int64
		for b.Loop() {
			s += tk.Now()
		}
		sink.Add(s)
	})
	b.Run("CachedTickerParallel/rampart", func(b *testing.B) {
		b.ReportAllocs()
		tk := rampart.NewCachedTicker(time.Millisecond)
		defer tk.Close()
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += tk.Now()
			}
			sink.Add(s)
		})
	})
	b.Run("ContextWithTimeout/direct", func(b *testing.B) {
		b.ReportAllocs()
		parent := context.Background()
		for b.Loop() {
			ctx, cancel := context.WithTimeout(parent, time.Second)
			if ctx.Err() != nil {
				b.Fatal("context done at once")
			}
			cancel()
		}
	})
	b.Run("ChanSemaphore/chan", func(b *testing.B) {
		b.ReportAllocs()
		sem := make(chan struct{}, 8)
		for b.Loop() {
			select {
			case sem <- struct{}{}:
			default:
				b.Fatal("semaphore full")
			}
			<-sem
		}
	})
	b.Run("Mutex/direct", func(b *testing.B) {
		b.ReportAllocs()
		var mu sync.Mutex
		n := 0
		for b.Loop() {
			mu.Lock()
			n++
			mu.Unlock()
		}
		sink.Add(int64(n))
	})
	b.Run("MutexParallel/direct", func(b *testing.B) {
		b.ReportAllocs()
		var mu sync.Mutex
		n := 0
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
		sink.Add(int64(n))
	})
	// Rand: the jitter source. math/rand/v2's top-level functions use a
	// per-thread ChaCha8 state; golang.org/x/exp/rand's global source sits
	// behind a mutex (and the package is deprecated).
	b.Run("Rand/mathrandv2", func(b *testing.B) {
		b.ReportAllocs()
		var s int64
		for b.Loop() {
			s += rand.Int64N(1 << 40)
		}
		sink.Add(s)
	})
	b.Run("Rand/xexprand", func(b *testing.B) {
		b.ReportAllocs()
		var s int64
		for b.Loop() {
			s += exprand.Int63n(1 << 40)
		}
		sink.Add(s)
	})
	b.Run("RandParallel/mathrandv2", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += rand.Int64N(1 << 40)
			}
			sink.Add(s)
		})
	})
	b.Run("RandParallel/xexprand", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var s int64
			for pb.Next() {
				s += exprand.Int63n(1 << 40)
			}
			sink.Add(s)
		})
	})
}
