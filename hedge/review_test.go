package hedge

import (
	"math"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// A huge Refresh (which New accepts) means "almost never recompute", not an
// overflow of now+Refresh into the past that recomputes on every sample.
func TestHugeRefreshDoesNotWrap(t *testing.T) {
	tk := rampart.NewManualTicker(1000)
	h, err := New(Config{Percentile: 0.9, Delay: 5 * time.Millisecond, WarmUp: 1,
		Refresh: time.Duration(math.MaxInt64), Ticker: tk})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i := range 10 {
		h.Observe(int64(50*time.Millisecond), tk.Now()+int64(i))
	}
	if d := h.Delay(); d != int64(5*time.Millisecond) {
		t.Fatalf("delay recomputed to %v before Refresh passed", time.Duration(d))
	}
}
