package bench

// The pinned peers. Each scenario file imports the ones it measures; this
// list keeps every pinned version in go.mod even while a scenario is being
// written, so that two scenario authors never edit go.mod at the same time.
import (
	_ "github.com/avast/retry-go/v4"
	_ "github.com/cenkalti/backoff/v5"
	_ "github.com/eapache/go-resiliency/breaker"
	_ "github.com/failsafe-go/failsafe-go"
	_ "github.com/sony/gobreaker/v2"
	_ "go.uber.org/ratelimit"
	_ "golang.org/x/sync/semaphore"
	_ "golang.org/x/time/rate"
)
