
package bench

import (
	"math"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	fscircuitbreaker "github.com/failsafe-go/failsafe-go/circuitbreaker"
)

// failsafe-go's circuitbreaker package needs github.com/bits-and-blooms/bitset,
// which bench/go.mod does not list yet; this file joins the CircuitBreaker
// scenario with -tags failsafecb (and a go.mod that lists it). Once
// `go mod tidy` has added it, drop the build tag.
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
}
