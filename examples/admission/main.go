// Command admission shows fail-fast admission on a bulkhead: a
// bulkhead of two permits admits two calls that hold their permits, rejects
// a third at once instead of queueing it, lets both complete, propagates a
// failing call's error unchanged, and ends with every permit back.
//
// It prints exactly:
//
//	admitted=2
//	overload=rejected
//	completed=ok,ok
//	failure=propagated
//	available=2
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/rampart-go/rampart/bulkhead"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		os.Exit(1)
	}
}

// run performs the demonstration, writing its five lines to w.
func run(w io.Writer) error {
	const limit = 2 // for the demonstration, not a setting for 10k RPS
	gate, err := bulkhead.New(bulkhead.Config{Max: limit, Name: "admission"})
	if err != nil {
		return err
	}
	ctx := context.Background()

	var entered sync.WaitGroup // both requests are inside the gate
	entered.Add(2)
	release := make(chan struct{}) // lets them finish
	request := func(ctx context.Context) (string, error) {
		entered.Done()
		<-release
		return "ok", nil
	}

	results := make([]string, 2)
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i := range 2 {
		done.Go(func() { results[i], errs[i] = bulkhead.Call(ctx, gate, request) })
	}

	entered.Wait()
	fmt.Fprintf(w, "admitted=%d\n", gate.Stats().InFlight)

	_, err = bulkhead.Call(ctx, gate, func(context.Context) (string, error) { return "unexpected", nil })
	close(release)
	if !errors.Is(err, bulkhead.ErrFull) {
		return fmt.Errorf("capacity exceeded: third call got %v", err)
	}
	fmt.Fprintln(w, "overload=rejected")

	done.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "completed=%s,%s\n", results[0], results[1])

	demo := errors.New("demonstration")
	if err := gate.Do(ctx, func(context.Context) error { return demo }); err != demo {
		return fmt.Errorf("failure not propagated: %v", err)
	}
	fmt.Fprintln(w, "failure=propagated")

	fmt.Fprintf(w, "available=%d\n", int64(gate.Max())-gate.Stats().InFlight)
	return nil
}
