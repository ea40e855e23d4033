package redislimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
)

// BenchmarkDistributed measures decisions against the local test server:
// rampart's direct mode (one EVALSHA per decision) and lease mode (most
// decisions local) at 1 and 16 goroutines, against throttled/v2's GCRA with
// its go-redis v9 store (a GET+TIME round trip, then a compare-and-set round
// trip per decision). The limit is high enough that every call is admitted,
// which each benchmark checks.
func BenchmarkDistributed(b *testing.B) {
	lim := Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000}
	for _, par := range []struct {
		name string
		p    int
	}{{"", 0}, {"16", 8}} { // SetParallelism(8) × GOMAXPROCS 2 = 16 goroutines
		b.Run("Direct"+par.name+"/rampart", func(b *testing.B) {
			l, err := New(Config{Client: newClient(b), Limit: lim})
			if err != nil {
				b.Fatal(err)
			}
			runDecisions(b, par.p, func(key string) bool {
				r, err := l.Allow(context.Background(), key)
				return err == nil && r.Allowed && r.Source == SourceRedis
			})
		})
		b.Run("Lease"+par.name+"/rampart", func(b *testing.B) {
			l, err := New(Config{Client: newClient(b), Limit: lim, Lease: 100, LeaseTTL: 50 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			runDecisions(b, par.p, func(key string) bool {
				r, err := l.Allow(context.Background(), key)
				return err == nil && r.Allowed
			})
		})
		b.Run("Direct"+par.name+"/throttled", func(b *testing.B) {
			st, err := goredisstore.NewCtx(newClient(b), "throttled:")
			if err != nil {
				b.Fatal(err)
			}
			rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(1_000_000_000), MaxBurst: 1_000_000})
			if err != nil {
				b.Fatal(err)
			}
			// throttled retries its compare-and-set a bounded number of
			// times and then returns an error: under contention some
			// decisions fail outright. They are counted, not hidden.
			var failed atomic.Int64
			runDecisions(b, par.p, func(key string) bool {
				limited, _, err := rl.RateLimitCtx(context.Background(), key, 1)
				if err != nil {
					failed.Add(1)
					return true
				}
				return !limited
			})
			b.ReportMetric(float64(failed.Load())/float64(b.N), "errors/op")
		})
	}
}

func runDecisions(b *testing.B, parallelism int, decide func(key string) bool) {
	b.ReportAllocs()
	key := uniqueKey(b)
	start := time.Now()
	if parallelism == 0 {
		for b.Loop() {
			if !decide(key) {
				b.Fatal("not admitted")
			}
		}
	} else {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !decide(key) {
					b.Error("not admitted")
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
}
