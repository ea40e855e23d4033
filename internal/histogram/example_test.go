package histogram_test

import (
	"fmt"

	"github.com/rampart-go/rampart/internal/histogram"
)

func Example() {
	var h histogram.Histogram // the zero value is ready
	for i := 1; i <= 1000; i++ {
		h.Record(int64(i) * 1000) // 1 µs .. 1 ms, in ns
	}
	p95, n := h.Quantile(0.95)
	fmt.Println(n, p95, float64(p95) <= 950_000*(1+histogram.RelativeError))
	// Output: 1000 950271 true
}
