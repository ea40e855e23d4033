package timeout

import (
	"context"
	"testing"
	"time"
)

// BenchmarkStartFinish measures the deadline-mode primitives alone (no clock
// read): the context allocation, the watchdog's Schedule and Cancel, the
// context's end.
func BenchmarkStartFinish(b *testing.B) {
	tm, err := New(Config{Duration: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer tm.Close()
	parent := context.Background()
	b.ReportAllocs()
	now := int64(1)
	for b.Loop() {
		_, h := tm.StartAt(parent, now)
		if err := tm.FinishAt(h, now, nil); err != nil {
			b.Fatal(err)
		}
	}
}
