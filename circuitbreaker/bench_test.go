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

// BenchmarkDoSuccessCountStats: Do's success on the default breaker with
// and without Config.CountStats, serial and from every P at once (each P
// writing its own success counter).
func BenchmarkDoSuccessCountStats(b *testing.B) {
	for _, counted := range []bool{false, true} {
		name := "off"
		if counted {
			name = "on"
		}
		cb, _ := New(Config{CountStats: counted})
		ctx := context.Background()
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if cb.Do(ctx, benchOK) != nil {
					b.Fatal("rejected")
				}
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if cb.Do(ctx, benchOK) != nil {
						b.Error("rejected")
						return
					}
				}
			})
		})
	}
}
