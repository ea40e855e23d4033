package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/timeout"
)

func Example() {
	t, err := timeout.New(timeout.Config{Duration: 20 * time.Millisecond, Name: "db"})
	if err != nil {
		panic(err)
	}
	defer t.Close()

	// A callee that honours its context returns at the deadline.
	err = t.Do(context.Background(), func(ctx context.Context) error {
		select {
		case <-time.After(time.Second): // the slow query
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, timeout.ErrTimeout), errors.Is(err, context.DeadlineExceeded))

	// A fast call returns its own result.
	n, err := timeout.Call(context.Background(), t, func(ctx context.Context) (int, error) { return 42, nil })
	fmt.Println(n, err)
	// Output:
	// timeout "db": deadline exceeded (20ms)
	// true true
	// 42 <nil>
}

// DoAbandon, for a callee that ignores its context, with a bulkhead-style
// permit: the caller gets its time back at the deadline, and the permit
// goes back only when the abandoned work has really ended. The Timeout is
// an ordinary (deadline-mode) one: abandoning is chosen at the call site.
func ExampleTimeout_DoAbandon() {
	t, _ := timeout.New(timeout.Config{Duration: 10 * time.Millisecond, MaxAbandoned: 100})
	defer t.Close()
	permits := make(chan struct{}, 1)
	permits <- struct{}{}

	<-permits // take the permit
	hung := make(chan struct{})
	released := make(chan struct{})
	err := t.DoAbandon(context.Background(), func(ctx context.Context) error {
		<-hung // a callee that ignores its context
		return nil
	}, func() { permits <- struct{}{}; close(released) })
	fmt.Println(err, "- abandoned:", t.Stats().Abandoned, "- permit back:", len(permits))

	close(hung) // the hung work finally ends
	<-released
	fmt.Println("permit back:", len(permits))
	// Output:
	// timeout: deadline exceeded (10ms) - abandoned: 1 - permit back: 0
	// permit back: 1
}

// The primitives, as package pipeline uses them: the caller reads the clock
// and hands the readings in; FinishAt classifies with the end reading.
func ExampleTimeout_StartAt() {
	clock := rampart.NewManualTicker(0) // a test clock; use the pipeline's ticker
	t, _ := timeout.New(timeout.Config{Duration: 100 * time.Millisecond, Ticker: clock})
	defer t.Close()

	ctx, h := t.StartAt(context.Background(), clock.Now())
	clock.Advance(30 * time.Millisecond) // the call takes 30 ms
	fmt.Println(t.FinishAt(h, clock.Now(), nil), ctx.Err())

	_, h = t.StartAt(context.Background(), clock.Now())
	clock.Advance(150 * time.Millisecond) // this one takes 150 ms
	fmt.Println(t.FinishAt(h, clock.Now(), nil))
	// Output:
	// <nil> context canceled
	// timeout: deadline exceeded (100ms)
}
