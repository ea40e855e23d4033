package bench

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/eapache/go-resiliency/deadline"
	"github.com/failsafe-go/failsafe-go"
	fstimeout "github.com/failsafe-go/failsafe-go/timeout"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/timeout"
)

// BenchmarkTimeout measures the path every call under a timeout pays: the
// call succeeds well before its deadline (1 h), so nothing fires.
//
//   - rampart: ModeDeadline (default): a fresh 48-byte context per call,
//     armed on the shared watchdog, two clock reads (start, end).
//   - rampart-soft: ModeSoft, classification only: two clock reads.
//   - rampart-abandon: DoAbandon on a deadline-mode Timeout: the function
//     runs on a parked worker goroutine (handed over and back: two
//     wake-ups, as in handoff-floor).
//   - rampart-cached: ModeDeadline on a rampart.CachedTicker (clock reads
//     become atomic loads; the Timeout gets its own watchdog).
//   - failsafe: failsafe-go's timeout policy through an executor (a runtime
//     timer and a cancellable execution per call).
//   - goresiliency: go-resiliency's deadline (a goroutine, a channel and a
//     timer per call).
//   - direct: context.WithTimeout + cancel around the call, the floor to
//     beat (no classification, no clock read at the end).
//   - handoff-floor: not a timeout at all: one round trip over unbuffered
//     channels between the caller and a parked goroutine (hand the call
//     over, wake the other goroutine, wait for its answer), the least that
//     any mode running the function on another goroutine can cost (see
//     benchHandoffFloor).
func BenchmarkTimeout(b *testing.B) {
	ctx := context.Background()
	const limit = time.Hour
	fn := func(context.Context) error { return nil }

	type lib struct {
		name string
		do   func(b *testing.B) func() error
	}
	rampartLib := func(cfg timeout.Config, abandon bool) func(b *testing.B) func() error {
		return func(b *testing.B) func() error {
			cfg.Duration = limit
			t, err := timeout.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				t.Close()
				if st := t.Stats(); st.Timeouts != 0 || st.Rejected != 0 {
					b.Fatalf("stats %+v", st)
				}
			})
			if abandon {
				return func() error { return t.DoAbandon(ctx, fn, nil) }
			}
			return func() error { return t.Do(ctx, fn) }
		}
	}
	libs := []lib{
		{"rampart", rampartLib(timeout.Config{}, false)},
		{"rampart-soft", rampartLib(timeout.Config{Mode: timeout.ModeSoft}, false)},
		{"rampart-abandon", rampartLib(timeout.Config{}, true)},
		{"rampart-cached", func(b *testing.B) func() error {
			tk := rampart.NewCachedTicker(0)
			b.Cleanup(func() { tk.Close() })
			return rampartLib(timeout.Config{Ticker: tk}, false)(b)
		}},
		{"failsafe", func(b *testing.B) func() error {
			ex := failsafe.With[any](fstimeout.New[any](limit)).WithContext(ctx)
			return func() error { return ex.Run(func() error { return nil }) }
		}},
		{"goresiliency", func(b *testing.B) func() error {
			d := deadline.New(limit)
			return func() error { return d.Run(func(<-chan struct{}) error { return nil }) }
		}},
		{"direct", func(b *testing.B) func() error {
			return func() error {
				c, cancel := context.WithTimeout(ctx, limit)
				err := fn(c)
				cancel()
				return err
			}
		}},
	}
	for _, l := range libs {
		b.Run("Success/"+l.name, func(b *testing.B) {
			call := l.do(b)
			b.ReportAllocs()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Success/handoff-floor", func(b *testing.B) { benchHandoffFloor(b, false) })
	for _, l := range libs {
		b.Run("SuccessParallel/"+l.name, func(b *testing.B) {
			call := l.do(b)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
	b.Run("SuccessParallel/handoff-floor", func(b *testing.B) { benchHandoffFloor(b, true) })
}

// benchHandoffFloor measures a bare two-goroutine round trip: the caller
// sends a request on an unbuffered channel to a parked server goroutine and
// blocks on its own reply channel until the server answers. That is two
// goroutine wake-ups and two parks per call, with nothing else (no context,
// no deadline, no job state): the physical floor of any timeout that runs
// the function on another goroutine. Parallel: one server per GOMAXPROCS,
// each caller with its own reply channel.
func benchHandoffFloor(b *testing.B, parallel bool) {
	req := make(chan chan struct{})
	servers := 1
	if parallel {
		servers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	for range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for reply := range req {
				reply <- struct{}{}
			}
		}()
	}
	defer wg.Wait()
	defer close(req)
	b.ReportAllocs()
	if !parallel {
		reply := make(chan struct{})
		for b.Loop() {
			req <- reply
			<-reply
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		reply := make(chan struct{})
		for pb.Next() {
			req <- reply
			<-reply
		}
	})
}
