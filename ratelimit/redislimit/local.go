package redislimit

import (
	"math"
	"sync"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/ratelimit"
)

// localLimits is FailLocal's in-process GCRA per key, with this replica's
// share of each limit: Rate/Replicas per Period and a burst of
// max(1, Burst/Replicas). With every replica falling back at once, the
// shares add up to the shared limit.
type localLimits struct {
	replicas int
	ticker   ratelimitTicker
	mu       sync.Mutex // guards byKey; taken only while Redis is unavailable
	byKey    map[localKey]*ratelimit.Limiter
}

type ratelimitTicker = interface{ Now() int64 }

type localKey struct {
	key   string
	limit Limit
}

// maxLocalKeys bounds the fallback's memory during a long outage; past it
// the map starts over (a fresh GCRA cell only admits its burst, so starting
// over can admit at most one extra burst per key).
const maxLocalKeys = 1 << 16

func newLocalLimits(cfg Config) (*localLimits, error) {
	ll := &localLimits{replicas: cfg.Replicas, ticker: cfg.Ticker, byKey: map[localKey]*ratelimit.Limiter{}}
	if _, err := ll.limiter(localKey{limit: cfg.Limit}); err != nil { // validate the share once
		return nil, err
	}
	return ll, nil
}

func (ll *localLimits) limiter(k localKey) (*ratelimit.Limiter, error) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if rl, ok := ll.byKey[k]; ok {
		return rl, nil
	}
	if len(ll.byKey) >= maxLocalKeys {
		clear(ll.byKey)
	}
	if k.limit.Period > time.Duration(math.MaxInt64)/time.Duration(ll.replicas) {
		return nil, rampart.NewConfigError("redislimit", "Replicas",
			"%d: the share of %d per %v, for FailLocal, needs a period of %d × %v, which overflows", ll.replicas, k.limit.Rate, k.limit.Period, ll.replicas, k.limit.Period)
	}
	period := k.limit.Period * time.Duration(ll.replicas)
	rl, err := ratelimit.New(ratelimit.Config{
		Name:   "redislimit-fallback",
		Limit:  k.limit.Rate,
		Period: period,
		Burst:  max(1, k.limit.Burst/ll.replicas),
		Ticker: ll.ticker,
	})
	if err != nil {
		return nil, err
	}
	ll.byKey[k] = rl
	return rl, nil
}

// allow decides n events for key locally.
func (ll *localLimits) allow(key string, n int, lim Limit, now int64) Decision {
	rl, err := ll.limiter(localKey{key, lim})
	if err != nil {
		return Decision{Remaining: -1, Source: SourceFallback}
	}
	if wait := rl.AdmitN(now, n); wait > 0 {
		return Decision{RetryAfter: wait, Remaining: -1, Source: SourceFallback}
	}
	return Decision{Allowed: true, Remaining: -1, Source: SourceFallback}
}
