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
//   - rampart: ModeDeadline (default): a fresh 64-byte context per call,
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
//
// Besides ns/op, each case of this file's loops reports cpu-ns/op, the
// process's CPU time per operation (see reportCPU).
//
// CalleeReadsDone and CancellableParent are the realistic cases (see
// benchTimeoutRealistic): the callee reads its context's Done and Err, and
// the parent may be cancellable.
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
			defer reportCPU(b, cpuTime())
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
	benchTimeoutRealistic(b)
}

// calleeReadsDone is a callee as real ones are: it polls its context's Done
// channel (as a select on Done beside other work does, or a library that
// checks before a blocking call) and returns its Err.
func calleeReadsDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	return ctx.Err()
}

// benchTimeoutRealistic runs BenchmarkTimeout's realistic cases: the call still succeeds well before
// its deadline, but the callee reads its context and the parent may be
// cancellable, as a server request's context is.
//
//   - CalleeReadsDone: the parent is context.Background(); the callee
//     reads Done and Err (calleeReadsDone), so the Done channel must exist.
//   - CancellableParent: the parent comes from context.WithCancel (made
//     once, as one request's context serving many calls) and the callee
//     reads Done and Err: the timeout's context must also close its Done
//     channel when the parent is cancelled, so it registers with it.
//
// The contenders are those of Success: rampart (ModeDeadline), failsafe-go's
// timeout (the callee reads the execution's context) and direct
// (context.WithTimeout + cancel) cancel the function's context at the
// deadline; rampart-abandon (DoAbandon) and goresiliency return at the
// deadline with the function on another goroutine. CancellableParent's
// cancel-floor row is no timeout: the registration on the parent alone.
func benchTimeoutRealistic(b *testing.B) {
	const limit = time.Hour
	type lib struct {
		name string
		do   func(b *testing.B, parent context.Context) func() error
	}
	rampartLib := func(abandon bool) func(b *testing.B, parent context.Context) func() error {
		return func(b *testing.B, parent context.Context) func() error {
			t, err := timeout.New(timeout.Config{Duration: limit})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				t.Close()
				if st := t.Stats(); st.Timeouts != 0 || st.Rejected != 0 || st.Fallbacks != 0 {
					b.Fatalf("stats %+v", st)
				}
			})
			if abandon {
				return func() error { return t.DoAbandon(parent, calleeReadsDone, nil) }
			}
			return func() error { return t.Do(parent, calleeReadsDone) }
		}
	}
	libs := []lib{
		{"rampart", rampartLib(false)},
		{"rampart-abandon", rampartLib(true)},
		{"failsafe", func(b *testing.B, parent context.Context) func() error {
			ex := failsafe.With[any](fstimeout.New[any](limit)).WithContext(parent)
			return func() error {
				return ex.RunWithExecution(func(e failsafe.Execution[any]) error { return calleeReadsDone(e.Context()) })
			}
		}},
		// go-resiliency hands the function a stop channel, not a context:
		// the function reads it and the parent's Done and Err.
		{"goresiliency", func(b *testing.B, parent context.Context) func() error {
			d := deadline.New(limit)
			return func() error {
				return d.Run(func(stop <-chan struct{}) error {
					select {
					case <-stop:
						return deadline.ErrTimedOut
					default:
					}
					return calleeReadsDone(parent)
				})
			}
		}},
		{"direct", func(b *testing.B, parent context.Context) func() error {
			return func() error {
				c, cancel := context.WithTimeout(parent, limit)
				err := calleeReadsDone(c)
				cancel()
				return err
			}
		}},
	}
	cases := []struct {
		name   string
		parent func(b *testing.B) context.Context
	}{
		{"CalleeReadsDone", func(*testing.B) context.Context { return context.Background() }},
		{"CancellableParent", func(b *testing.B) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			return ctx
		}},
	}
	for _, c := range cases {
		for _, l := range libs {
			b.Run(c.name+"/"+l.name, func(b *testing.B) {
				call := l.do(b, c.parent(b))
				b.ReportAllocs()
				defer reportCPU(b, cpuTime())
				for b.Loop() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	// The least that a context closing a Done channel of its own when a
	// *context.cancelCtx parent is cancelled can cost through the context
	// package's API: its children set takes only the package's own
	// contexts, so one child (context.WithCancel: the child, its cancel
	// func, its channel) is registered and removed per call. No timeout.
	b.Run("CancellableParent/cancel-floor", func(b *testing.B) {
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		b.ReportAllocs()
		defer reportCPU(b, cpuTime())
		for b.Loop() {
			c, cancel := context.WithCancel(parent)
			err := calleeReadsDone(c)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
		}
	})
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
