package watchdog_test

import (
	"fmt"

	"github.com/rampart-go/rampart/internal/ticker"
	"github.com/rampart-go/rampart/internal/watchdog"
)

// alarm is a Target: any existing object with a Fire method.
type alarm struct{ name string }

func (a *alarm) Fire(arg uint64) { fmt.Println(a.name, "fired, arg", arg) }

func Example() {
	clk := ticker.NewManual(0)
	// Manual: no goroutine, Sweep is driven by hand (a real one uses the
	// default config and sweeps every millisecond on its own goroutine).
	w := watchdog.New(watchdog.Config{Clock: clk, Manual: true})
	defer w.Close()

	a := &alarm{name: "a"}
	b := &alarm{name: "b"}
	w.Schedule(100, a, 1)
	hb, _ := w.Schedule(100, b, 2)
	fmt.Println("cancelled b:", w.Cancel(hb)) // the call finished in time

	clk.Set(100)
	w.Sweep()
	// Output:
	// cancelled b: true
	// a fired, arg 1
}
