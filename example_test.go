package rampart_test

import (
	"fmt"
	"time"

	"github.com/rampart-go/rampart"
)

// A ManualTicker makes time-dependent tests deterministic: build it in the
// test, hand it to every policy's Config.Ticker (and to the pipeline), and
// move time by hand instead of sleeping.
func ExampleManualTicker() {
	clock := rampart.NewManualTicker(0)
	var tk rampart.Ticker = clock // what a Config.Ticker field holds

	start := tk.Now()
	clock.Advance(1500 * time.Millisecond)
	fmt.Println(time.Duration(tk.Now() - start))
	// Output: 1.5s
}
