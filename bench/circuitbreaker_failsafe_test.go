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
	cbPrimitivesFailsafe = append(cbPrimitivesFailsafe, cbPrimitive{"failsafe", func(b *testing.B, open bool) func() bool {
		// Its direct calls, no executor: TryAcquirePermit, then
		// RecordSuccess when admitted.
		cb := fscircuitbreaker.NewBuilder[any]().WithDelay(time.Hour).Build()
		if open {
			cb.Open()
		}
		return func() bool {
			if !cb.TryAcquirePermit() {
				return false
			}
			cb.RecordSuccess()
			return true
		}
	}})
}
