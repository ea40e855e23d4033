package circuitbreaker

import (
	"context"
	"testing"
	"time"
)

func benchOK(context.Context) error { return nil }

func BenchmarkDoSuccess(b *testing.B) {
	for _, mode := range []Mode{CountWindow, Consecutive, TimeWindow} {
		b.Run(mode.String(), func(b *testing.B) {
			cb, _ := New(Config{Mode: mode})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if cb.Do(ctx, benchOK) != nil {
					b.Fatal("rejected")
				}
			}
		})
	}
}

func BenchmarkPrimitiveSuccess(b *testing.B) {
	cb, _ := New(Config{})
	b.ReportAllocs()
	for b.Loop() {
		p, err := cb.AcquireAt(0)
		if err != nil {
			b.Fatal("rejected")
		}
		cb.ReleaseAt(p, 0, cb.Classify(nil))
	}
}

func BenchmarkDoOpen(b *testing.B) {
	cb, _ := New(Config{OpenDuration: time.Hour})
	cb.TransitionTo(Open)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if cb.Do(ctx, benchOK) == nil {
			b.Fatal("admitted")
		}
	}
}

func BenchmarkDoFailure(b *testing.B) {
	cb, _ := New(Config{FailureRateThreshold: 100, MinimumCalls: 100})
	ctx := context.Background()
	fail := func(context.Context) error { return errBoom }
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if i%100 == 0 {
			_ = cb.Do(ctx, benchOK)
		} else if cb.Do(ctx, fail) != errBoom {
			b.Fatal("rejected")
		}
	}
}
