package shed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/shed"
)

func Example() {
	s, err := shed.New(shed.Config{
		Name:       "api",
		Priorities: 2, // 0: interactive, 1: batch, shed first
		// Where the runtime's CPU accounting is known to be wrong (a
		// shared sandbox), ignore it: scheduling latency sees the
		// contention anyway.
		Ignore:     shed.CPU,
		OnOverload: func(on bool) { log.Printf("api overloaded: %v", on) },
	})
	if err != nil {
		panic(err)
	}
	// The convenience forms: fn's error comes back unchanged.
	err = s.Do(context.Background(), func(ctx context.Context) error { return nil })
	fmt.Println("Do:", err)
	err = s.DoPriority(context.Background(), 1, func(ctx context.Context) error { return nil })
	fmt.Println("DoPriority:", err)

	// By hand, for a caller that holds the permit across code it does not
	// own (an HTTP handler's ServeHTTP).
	if p, err := s.Acquire(); err == nil {
		// ... serve the request ...
		s.Release(p, rampart.Success)
	} else if errors.Is(err, shed.ErrOverloaded) {
		// ... answer 503 with a Retry-After ...
	}
	fmt.Println("in flight:", s.InFlight(), "overloaded now:", s.Overloaded())
	// Output:
	// Do: <nil>
	// DoPriority: <nil>
	// in flight: 0 overloaded now: false
}

// A Source of the caller's replaces the runtime's reading, or corrects it:
// here the CPU figure comes from the container (a stand-in function).
func ExampleSource() {
	containerCPU := func() float64 { return 0.95 } // e.g. from cgroup cpu.stat
	rt := shed.NewRuntimeSource()
	tk := rampart.NewManualTicker(0)
	s, err := shed.New(shed.Config{
		Ticker: tk,
		Source: shed.SourceFunc(func(now int64, sig *shed.Signals) {
			rt.Read(now, sig)
			sig.CPU = containerCPU()
		}),
	})
	if err != nil {
		panic(err)
	}
	tk.Advance(100 * time.Millisecond) // the next call samples
	p, _ := s.Acquire()
	s.Release(p, rampart.Success)
	st := s.Stats()
	fmt.Println(st.Overloaded, st.Trigger&shed.CPU != 0)
	// Output: true true
}
