package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The five lines the demo prints: two admitted, one rejected at once, both
// completed, a failure propagated unchanged, every permit back.
func Example() {
	if err := run(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// admitted=2
	// overload=rejected
	// completed=ok,ok
	// failure=propagated
	// available=2
}

func TestRunRepeatedly(t *testing.T) {
	for range 200 {
		if err := run(discard{}); err != nil {
			t.Fatal(err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
