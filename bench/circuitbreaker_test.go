package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/sony/gobreaker/v2"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
)

// cbKind is what a CircuitBreaker case measures.
type cbKind int

const (
	cbSuccess cbKind = iota // a closed breaker, the call succeeds
	cbFailure               // a closed breaker configured never to trip, the call fails
	cbOpen                  // a tripped breaker with a long open duration: every call is rejected
)

var errCBBoom = errors.New("bench: boom")

// cbPeer is one library's breaker, called the way its users call it.
type cbPeer struct {
	name string
	// build returns a goroutine-safe call for the case (cbFailure calls may
	// keep per-benchmark state: that case is not parallel).
	build    func(b *testing.B, k cbKind) func() error
	rejected func(error) bool
}

func cbOK(context.Context) error   { return nil }
func cbFail(context.Context) error { return errCBBoom }

func rampartCB(b *testing.B, cfg circuitbreaker.Config, k cbKind) func() error {
	cb, err := circuitbreaker.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	switch k {
	case cbSuccess:
		return func() error { return cb.Do(ctx, cbOK) }
	case cbFailure:
		if cfg.Mode == circuitbreaker.Consecutive {
			return func() error { return cb.Do(ctx, cbFail) }
		}
		// A count window at a 100 % threshold trips on 100 failures out
		// of 100, so one call in 100 succeeds: every failure is recorded
		// and evaluated, and the rate stays at 99 %.
		i := 0
		return func() error {
			i++
			if i%100 == 0 {
				return cb.Do(ctx, cbOK)
			}
			return cb.Do(ctx, cbFail)
		}
	default:
		cb.TransitionTo(circuitbreaker.Open)
		return func() error { return cb.Do(ctx, cbOK) }
	}
}

// cbFailsafe is failsafe-go's breaker, added by circuitbreaker_failsafe_test.go.
var cbFailsafe []cbPeer

func cbPeers() []cbPeer {
	peers := cbBasePeers()
	return append(peers[:len(peers):len(peers)], cbFailsafe...)
}

func cbBasePeers() []cbPeer {
	// The checks cost the same for every library: one type assertion or
	// comparison (errors.Is would charge rampart for a method call).
	rampartRejected := func(err error) bool { _, ok := err.(*rampart.RejectedError); return ok }
	return []cbPeer{
		{"rampart", func(b *testing.B, k cbKind) func() error {
			cfg := circuitbreaker.Config{OpenDuration: time.Hour}
			if k == cbFailure {
				cfg.FailureRateThreshold, cfg.MinimumCalls = 100, 100
			}
			return rampartCB(b, cfg, k)
		}, rampartRejected},
		{"rampart-counted", func(b *testing.B, k cbKind) func() error {
			cfg := circuitbreaker.Config{OpenDuration: time.Hour, CountStats: true}
			if k == cbFailure {
				cfg.FailureRateThreshold, cfg.MinimumCalls = 100, 100
			}
			return rampartCB(b, cfg, k)
		}, rampartRejected},
		{"rampart-consecutive", func(b *testing.B, k cbKind) func() error {
			cfg := circuitbreaker.Config{Mode: circuitbreaker.Consecutive, OpenDuration: time.Hour}
			if k == cbFailure {
				cfg.ConsecutiveFailures = math.MaxInt32
			}
			return rampartCB(b, cfg, k)
		}, rampartRejected},
		{"gobreaker", func(b *testing.B, k cbKind) func() error {
			st := gobreaker.Settings{Name: "bench", Timeout: time.Hour}
			if k == cbFailure {
				st.ReadyToTrip = func(gobreaker.Counts) bool { return false }
			}
			cb := gobreaker.NewCircuitBreaker[any](st)
			ok := func() (any, error) { return nil, nil }
			fail := func() (any, error) { return nil, errCBBoom }
			switch k {
			case cbSuccess:
				return func() error { _, err := cb.Execute(ok); return err }
			case cbFailure:
				return func() error { _, err := cb.Execute(fail); return err }
			}
			for range 6 { // the default ReadyToTrip: more than 5 consecutive failures
				_, _ = cb.Execute(fail)
			}
			return func() error { _, err := cb.Execute(ok); return err }
		}, func(err error) bool { return err == gobreaker.ErrOpenState }},
		{"goresiliency", func(b *testing.B, k cbKind) func() error {
			threshold := 5
			if k == cbFailure {
				threshold = math.MaxInt32
			}
			cb := breaker.New(threshold, 1, time.Hour)
			ok := func() error { return nil }
			fail := func() error { return errCBBoom }
			switch k {
			case cbSuccess:
				return func() error { return cb.Run(ok) }
			case cbFailure:
				return func() error { return cb.Run(fail) }
			}
			for range threshold {
				_ = cb.Run(fail)
			}
			return func() error { return cb.Run(ok) }
		}, func(err error) bool { return err == breaker.ErrBreakerOpen }},
		{"rampart-acquire", func(b *testing.B, k cbKind) func() error {
			// The primitives, as a middleware that holds the permit across
			// code it does not own calls them: Acquire, then Release with
			// the outcome. The default count window without a slow-call
			// threshold: no clock read while closed, nor while open (the
			// open timer's hint).
			cfg := circuitbreaker.Config{OpenDuration: time.Hour}
			if k == cbFailure {
				cfg.FailureRateThreshold, cfg.MinimumCalls = 100, 100
			}
			cb, err := circuitbreaker.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			call := func(r rampart.Result) error {
				p, err := cb.Acquire()
				if err != nil {
					return err
				}
				cb.Release(p, r)
				if r == rampart.Failure {
					return errCBBoom
				}
				return nil
			}
			switch k {
			case cbSuccess:
				return func() error { return call(rampart.Success) }
			case cbFailure:
				i := 0 // one success in 100, as for rampart's Do
				return func() error {
					i++
					if i%100 == 0 {
						return call(rampart.Success)
					}
					return call(rampart.Failure)
				}
			}
			cb.TransitionTo(circuitbreaker.Open)
			return func() error { return call(rampart.Success) }
		}, rampartRejected},
		{"gobreaker-twostep", func(b *testing.B, k cbKind) func() error {
			// gobreaker's two-step form: Allow, then done with the outcome.
			st := gobreaker.Settings{Name: "bench", Timeout: time.Hour}
			if k == cbFailure {
				st.ReadyToTrip = func(gobreaker.Counts) bool { return false }
			}
			cb := gobreaker.NewTwoStepCircuitBreaker[any](st)
			call := func(outcome error) error {
				done, err := cb.Allow()
				if err != nil {
					return err
				}
				done(outcome)
				return outcome
			}
			switch k {
			case cbSuccess:
				return func() error { return call(nil) }
			case cbFailure:
				return func() error { return call(errCBBoom) }
			}
			for range 6 { // the default ReadyToTrip: more than 5 consecutive failures
				_ = call(errCBBoom)
			}
			return func() error { return call(nil) }
		}, func(err error) bool { return err == gobreaker.ErrOpenState }},
	}
}

// BenchmarkCircuitBreaker measures one protected call (the function itself
// does nothing) through each library's breaker: Success on a closed breaker
// with the default configuration, Failure on a closed breaker configured
// never to trip, Open on a tripped one. Each iteration checks that the call
// was admitted (Success, Failure) or rejected (Open).
func BenchmarkCircuitBreaker(b *testing.B) {
	// Case-major order: the libraries of one case run back to back, so
	// their ratios suffer less from a shared machine's changing load.
	peers := cbPeers()
	for _, p := range peers {
		b.Run("Success/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			call := p.build(b, cbSuccess)
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatalf("not admitted: %v", err)
				}
			}
		})
	}
	for _, p := range peers {
		b.Run("SuccessParallel/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			call := p.build(b, cbSuccess)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(); err != nil {
						b.Errorf("not admitted: %v", err)
						return
					}
				}
			})
		})
	}
	for _, p := range peers {
		b.Run("Failure/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			call := p.build(b, cbFailure)
			for b.Loop() {
				if err := call(); err != nil && err != errCBBoom {
					b.Fatalf("not admitted: %v", err)
				}
			}
		})
	}
	for _, p := range peers {
		b.Run("Open/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			call := p.build(b, cbOpen)
			for b.Loop() {
				if err := call(); !p.rejected(err) {
					b.Fatalf("not rejected: %v", err)
				}
			}
		})
	}
	for _, p := range peers {
		b.Run("OpenParallel/"+p.name, func(b *testing.B) {
			b.ReportAllocs()
			call := p.build(b, cbOpen)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(); !p.rejected(err) {
						b.Errorf("not rejected: %v", err)
						return
					}
				}
			})
		})
	}
}

// TestCircuitBreakerMinRatios is a cross-check for a noisy shared machine,
// run only with RAMPART_MINRATIO=1: it times 200k calls per library in 15
// interleaved rounds and logs each library's fastest round and its ratio to
// rampart's. Interleaving exposes every library to the same load, and the
// minimum discards the rounds that load slowed down.
func TestCircuitBreakerMinRatios(t *testing.T) {
	if os.Getenv("RAMPART_MINRATIO") == "" {
		t.Skip("set RAMPART_MINRATIO=1 to run")
	}
	const n = 200000
	for _, c := range []struct {
		name string
		k    cbKind
		par  bool
	}{{"Success", cbSuccess, false}, {"SuccessParallel", cbSuccess, true}, {"Failure", cbFailure, false},
		{"Open", cbOpen, false}, {"OpenParallel", cbOpen, true}} {
		peers := cbPeers()
		calls := make([]func() error, len(peers))
		mins := make([]float64, len(peers))
		for i, p := range peers {
			calls[i] = p.build(&testing.B{}, c.k)
		}
		for range 15 {
			for i := range peers {
				call := calls[i]
				start := time.Now()
				if c.par {
					var wg sync.WaitGroup
					for range 2 {
						wg.Go(func() {
							for range n / 2 {
								_ = call()
							}
						})
					}
					wg.Wait()
				} else {
					for range n {
						_ = call()
					}
				}
				ns := float64(time.Since(start).Nanoseconds()) / n
				if mins[i] == 0 || ns < mins[i] {
					mins[i] = ns
				}
			}
		}
		out := c.name + ":"
		for i, p := range peers {
			out += fmt.Sprintf(" %s %.1f ns (×%.1f)", p.name, mins[i], mins[i]/mins[0])
		}
		t.Log(out)
	}
}
