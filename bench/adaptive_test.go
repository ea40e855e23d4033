package bench

import (
	"testing"
	"time"

	fsal "github.com/failsafe-go/failsafe-go/adaptivelimiter"
	fsat "github.com/failsafe-go/failsafe-go/adaptivethrottler"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
)

// BenchmarkAdaptive measures the adaptive concurrency limiter's admission
// plus completion and the SRE client-side throttler's allow plus record,
// against failsafe-go's adaptivelimiter and adaptivethrottler.
//
// rampart's cases:
//   - rampart: Acquire/Release on the default (nano) ticker, the form a user
//     calls (Do and Call use it too): the clock is read only for the calls
//     sampled for their RTT (about one in 64 here, once the first window's
//     samples have raised the stride: see adaptive.Limiter.Acquire).
//   - rampart-every: the same with Config.MaxSampleStride = 1, every call
//     timed (two nano-ticker reads per call, as failsafe reads time.Now
//     twice per call).
//   - rampart-cached: Acquire/Release with a cached ticker's readings: the
//     limiter itself, every call a sample.
//
// failsafe times every call. The tables divide failsafe's rows by both
// rampart's (sampled) and rampart-every's (every call timed, like for like):
// a limiter sees the sampled cost only above a few hundred calls per window
// (every call is timed below 2T calls, 256 at the defaults; the stride
// reaches 64 at 8192 calls per window; see adaptive/sampling.go).
func BenchmarkAdaptive(b *testing.B) {
	newRampart := func(b *testing.B, maxStride int) *adaptive.Limiter {
		l, err := adaptive.New(adaptive.Config{InitialLimit: 1 << 20, MinLimit: 1 << 20, MaxLimit: 1 << 20, MaxSampleStride: maxStride})
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	newFailsafe := func() fsal.AdaptiveLimiter[any] {
		return fsal.NewBuilder[any]().WithLimits(1<<20, 1<<20, 1<<20).Build()
	}
	b.Run("Admit/rampart", func(b *testing.B) { benchAcquireRelease(b, newRampart(b, 0), false) })
	b.Run("Admit/rampart-every", func(b *testing.B) { benchAcquireRelease(b, newRampart(b, 1), false) })
	b.Run("Admit/rampart-cached", func(b *testing.B) {
		// The cached ticker (1 ms resolution, one atomic load per reading):
		// adequate RTTs for dependencies slower than ~10 ms, and the cost of
		// the limiter itself without the two clock reads.
		b.ReportAllocs()
		tk := rampart.NewCachedTicker(time.Millisecond)
		defer tk.Close()
		l, err := adaptive.New(adaptive.Config{InitialLimit: 1 << 20, MinLimit: 1 << 20, MaxLimit: 1 << 20, Ticker: tk})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			tok, err := l.AcquireAt(tk.Now())
			if err != nil {
				b.Fatal("rejected")
			}
			l.ReleaseAt(tok, tk.Now(), rampart.Success)
		}
		sink.Add(int64(l.Limit()))
	})
	b.Run("Admit/failsafe", func(b *testing.B) {
		b.ReportAllocs()
		l := newFailsafe()
		for b.Loop() {
			p, ok := l.TryAcquirePermit()
			if !ok {
				b.Fatal("rejected")
			}
			p.Record()
		}
		sink.Add(int64(l.Limit()))
	})
	b.Run("AdmitParallel/rampart", func(b *testing.B) { benchAcquireRelease(b, newRampart(b, 0), true) })
	b.Run("AdmitParallel/rampart-every", func(b *testing.B) { benchAcquireRelease(b, newRampart(b, 1), true) })
	b.Run("AdmitParallel/failsafe", func(b *testing.B) {
		b.ReportAllocs()
		l := newFailsafe()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, ok := l.TryAcquirePermit()
				if !ok {
					b.Fatal("rejected")
				}
				p.Record()
			}
		})
		sink.Add(int64(l.Limit()))
	})
	b.Run("Throttler/rampart", func(b *testing.B) {
		b.ReportAllocs()
		t, err := adaptive.NewThrottler(adaptive.ThrottlerConfig{Ticker: rampart.DefaultTicker()})
		if err != nil {
			b.Fatal(err)
		}
		tk := rampart.DefaultTicker()
		for b.Loop() {
			now := tk.Now()
			if !t.AllowAt(now) {
				b.Fatal("throttled")
			}
			t.RecordAt(now, true)
		}
		sink.Add(int64(t.Stats().Rejected))
	})
	b.Run("Throttler/failsafe", func(b *testing.B) {
		b.ReportAllocs()
		t := fsat.NewWithDefaults[any]()
		for b.Loop() {
			if !t.TryAcquirePermit() {
				b.Fatal("throttled")
			}
			t.RecordSuccess()
		}
		sink.Add(int64(t.RejectionRate()))
	})
}

// benchAcquireRelease measures Acquire + Release(Success) on l, from one goroutine or
// from GOMAXPROCS, and reports the sampling stride the limiter reached.
func benchAcquireRelease(b *testing.B, l *adaptive.Limiter, parallel bool) {
	b.ReportAllocs()
	one := func() {
		tok, err := l.Acquire()
		if err != nil {
			b.Fatal("rejected")
		}
		l.Release(tok, rampart.Success)
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				one()
			}
		})
	} else {
		for b.Loop() {
			one()
		}
	}
	sink.Add(int64(l.Limit()))
	b.ReportMetric(float64(l.Stats().Stride), "stride")
}
