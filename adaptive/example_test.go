package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
)

func Example() {
	l, err := adaptive.New(adaptive.Config{
		Name:         "db",
		Algorithm:    adaptive.Vegas{},
		InitialLimit: 2,
		MinLimit:     1,
		MaxLimit:     100,
		Window:       time.Second,
	})
	if err != nil {
		panic(err)
	}
	// The convenience form.
	err = l.Do(context.Background(), func(ctx context.Context) error { return nil })
	fmt.Println("Do:", err)

	// Acquire and Release: the limiter reads its clock itself, only for the
	// calls it samples for their RTT (every call while the rate is low).
	if tok, err := l.Acquire(); err == nil {
		// ... call the dependency ...
		l.Release(tok, rampart.Success)
	}

	// The primitives, for a caller that reads the clock anyway (package
	// pipeline): every call is timed with the caller's readings.
	now := l.Ticker().Now()
	a, _ := l.AcquireAt(now)
	b, _ := l.AcquireAt(now)
	if _, err := l.AcquireAt(now); err != nil {
		err := l.RejectedError()
		fmt.Println(err, errors.Is(err, adaptive.ErrLimited), errors.Is(err, rampart.ErrRejected))
	}
	l.ReleaseAt(a, l.Ticker().Now(), rampart.Success)
	l.ReleaseAt(b, l.Ticker().Now(), rampart.Failure) // a timeout: a loss
	fmt.Println("in flight:", l.InFlight(), "limit:", l.Limit())

	// Client-side throttling of a backend that refuses work.
	th, _ := adaptive.NewThrottler(adaptive.ThrottlerConfig{K: 2})
	t0 := time.Now()
	now = int64(time.Since(t0))
	if th.AllowAt(now) {
		th.RecordAt(now, true) // the backend accepted the call
	}
	fmt.Println("throttle probability:", th.ProbabilityAt(now))
	// Output:
	// Do: <nil>
	// adaptive "db": concurrency limit reached true true
	// in flight: 0 limit: 2
	// throttle probability: 0
}
