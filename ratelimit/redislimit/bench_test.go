package redislimit

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
)

// BenchmarkDistributed measures decisions against the local test server:
// rampart's direct mode (one EVALSHA per decision) and lease mode (most
// decisions local) at 1, 16 and 64 goroutines, against throttled/v2's GCRA
// with its go-redis v9 store (a GET+TIME round trip, then a compare-and-set
// round trip per decision). The limit is high enough that every call is
// admitted, which each benchmark checks. Beside them, the Semaphore's
// acquire and release of one permit (two round trips, an EVALSHA and a
// ZREM, reported as roundtrips/op) on a budget it never reaches.
// benchTimeout is the benchmarks' Timeout: a round trip on a shared,
// loaded machine at 64 goroutines can pass the default 100 ms, and a
// fallback decision would end the benchmark ("not admitted"); the Timeout
// is not on the measured path.
const benchTimeout = 5 * time.Second

func BenchmarkDistributed(b *testing.B) {
	lim := Limit{Rate: 1_000_000_000, Period: time.Second, Burst: 1_000_000}
	for _, par := range []struct {
		name string
		p    int
	}{{"", 0}, {"16", parallelism(16)}, {"64", parallelism(64)}} {
		b.Run("Direct"+par.name+"/rampart", func(b *testing.B) {
			l, err := New(Config{Client: newClient(b), Limit: lim, Timeout: benchTimeout})
			if err != nil {
				b.Fatal(err)
			}
			runDecisions(b, par.p, func(key string) bool {
				r, err := l.Allow(context.Background(), key)
				return err == nil && r.Allowed && r.Source == SourceRedis
			})
		})
		b.Run("Lease"+par.name+"/rampart", func(b *testing.B) {
			l, err := New(Config{Client: newClient(b), Limit: lim, Lease: 100, LeaseTTL: 50 * time.Millisecond, Timeout: benchTimeout})
			if err != nil {
				b.Fatal(err)
			}
			runDecisions(b, par.p, func(key string) bool {
				r, err := l.Allow(context.Background(), key)
				return err == nil && r.Allowed
			})
		})
		b.Run("Semaphore"+par.name+"/rampart", func(b *testing.B) {
			s, err := NewSemaphore(SemaphoreConfig{Client: newClient(b), Name: uniqueKey(b), Max: 1_000_000, Timeout: benchTimeout})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			runDecisions(b, par.p, func(string) bool {
				p, err := s.Acquire(context.Background())
				if err != nil || p.Source() != SourceRedis {
					return false
				}
				s.Release(p)
				return true
			})
			b.ReportMetric(float64(s.Stats().RoundTrips)/float64(b.N), "roundtrips/op")
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

// parallelism is the b.SetParallelism factor that runs goroutines
// goroutines (RunParallel starts factor × GOMAXPROCS).
func parallelism(goroutines int) int {
	return max(1, goroutines/runtime.GOMAXPROCS(0))
}

// BenchmarkSemaphoreRenewal measures the renewal of 1,000 held leases: one
// iteration is one renewal period's work, which the renewal goroutine does
// once per RenewEvery. It reports the Redis commands one period sends
// (counted by a hook on the client) and what they come to per second at
// the default RenewEvery of 1 s: one script call per 1,024 leases, where
// renewing each lease on its own would send 1,000.
func BenchmarkSemaphoreRenewal(b *testing.B) {
	b.Run("Held1000/rampart", func(b *testing.B) {
		c := newClient(b)
		var cmds atomic.Int64
		c.AddHook(countAllHook{&cmds})
		s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: uniqueKey(b), Max: 1000, TTL: time.Hour, RenewEvery: time.Hour / 3})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for range 1000 {
			if _, err := s.Acquire(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		s.renewOnce() // loads the script
		b.ReportAllocs()
		cmds.Store(0)
		for b.Loop() {
			s.renewOnce()
		}
		if st := s.Stats(); st.Expired != 0 || st.RedisErrors != 0 {
			b.Fatalf("renewal failed: %+v", st)
		}
		perPeriod := float64(cmds.Load()) / float64(b.N)
		b.ReportMetric(perPeriod, "commands/op")
		const defaultRenewEvery = time.Second // the default TTL of 3 s over 3
		b.ReportMetric(perPeriod*float64(time.Second)/float64(defaultRenewEvery), "commands/s/1k-permits")
	})
}

// countAllHook counts every command a client sends.
type countAllHook struct{ n *atomic.Int64 }

func (h countAllHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countAllHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countAllHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
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
