package bubble

import (
	"testing"
	"testing/synctest"
)

func TestGoroutines(t *testing.T) {
	// Goroutines outside the bubble are not counted.
	stop := make(chan struct{})
	defer close(stop)
	for range 5 {
		go func() { <-stop }()
	}
	synctest.Test(t, func(t *testing.T) {
		base := Goroutines() // the bubble's own goroutines (synctest.Test runs a few)
		done := make(chan struct{})
		for range 3 {
			go func() { <-done }()
		}
		synctest.Wait()
		if n := Goroutines(); n != base+3 {
			t.Fatalf("got %d, want %d", n, base+3)
		}
		close(done)
		synctest.Wait()
		if n := Goroutines(); n != base {
			t.Fatalf("after exit: %d, want %d", n, base)
		}
	})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic outside a bubble")
		}
	}()
	Goroutines()
}
