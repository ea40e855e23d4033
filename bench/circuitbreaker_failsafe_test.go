package bench

import (
	"math"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fscircuitbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// failsafe-go's breaker joins the CircuitBreaker scenario from this file.
func init() {
	cbFailsafe = append(cbFailsafe, cbPeer{"failsafe", func(b *testing.B, k cbKind) func() error {
		// Through its executor, built once, as its README shows.
		bld := fscircuitbreaker.NewBuilder[any]().WithDelay(time.Hour)
		if k == cbFailure {
			bld = bld.WithFailureThreshold(math.MaxUint32)
		}
		ex := failsafe.With[any](bld.Build())
		ok := func() error { return nil }
		fail := func() error { return errCBBoom }
		switch k {
		case cbSuccess:
			return func() error { return ex.Run(ok) }
		case cbFailure:
			return func() error { return ex.Run(fail) }
		}
		_ = ex.Run(fail) // the default threshold: one failure
		return func() error { return ex.Run(ok) }
	}, func(err error) bool { return err == fscircuitbreaker.ErrOpen }})
	cbFailsafe = append(cbFailsafe, cbPeer{"failsafe-window", func(b *testing.B, k cbKind) func() error {
		// Its count window (the like-for-like peer of rampart's default
		// 100-call window, 50 % of it failing), through its executor.
		bld := fscircuitbreaker.NewBuilder[any]().WithDelay(time.Hour).WithFailureThresholdRatio(50, 100)
		if k == cbFailure {
			bld = fscircuitbreaker.NewBuilder[any]().WithDelay(time.Hour).WithFailureThresholdRatio(100, 100)
		}
		cb := bld.Build()
		ex := failsafe.With[any](cb)
		ok := func() error { return nil }
		fail := func() error { return errCBBoom }
		switch k {
		case cbSuccess:
			return func() error { return ex.Run(ok) }
		case cbFailure:
			i := 0 // one success in 100, as for rampart's count window
			return func() error {
				i++
				if i%100 == 0 {
					return ex.Run(ok)
				}
				return ex.Run(fail)
			}
		}
		cb.Open()
		return func() error { return ex.Run(ok) }
	}, func(err error) bool { return err == fscircuitbreaker.ErrOpen }})
	cbFailsafe = append(cbFailsafe, cbPeer{"failsafe-permit", func(b *testing.B, k cbKind) func() error {
		// Its direct calls, no executor: TryAcquirePermit, then
		// RecordSuccess or RecordFailure.
		bld := fscircuitbreaker.NewBuilder[any]().WithDelay(time.Hour)
		if k == cbFailure {
			bld = bld.WithFailureThreshold(math.MaxUint32)
		}
		cb := bld.Build()
		switch k {
		case cbSuccess:
			return func() error {
				if !cb.TryAcquirePermit() {
					return fscircuitbreaker.ErrOpen
				}
				cb.RecordSuccess()
				return nil
			}
		case cbFailure:
			return func() error {
				if !cb.TryAcquirePermit() {
					return fscircuitbreaker.ErrOpen
				}
				cb.RecordFailure()
				return errCBBoom
			}
		}
		cb.Open()
		return func() error {
			if !cb.TryAcquirePermit() {
				return fscircuitbreaker.ErrOpen
			}
			cb.RecordSuccess()
			return nil
		}
	}, func(err error) bool { return err == fscircuitbreaker.ErrOpen }})
}
