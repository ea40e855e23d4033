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
// max(1, Burst/Replicas), where Replicas is Config.LiveReplicas' count when
// it has one. With every replica falling back at once, the shares add up
// to the shared limit. A key whose share changes (the live count did) gets
// a fresh cell for the new share.
type localLimits struct {
	ticker ratelimitTicker
	mu     sync.Mutex // guards byKey; taken only while Redis is unavailable
	byKey  map[localKey]*ratelimit.Limiter
}

type ratelimitTicker = interface{ Now() int64 }

type localKey struct {
	key      string
	limit    Limit
	replicas int // the share's divisor: Replicas, or the live count
}

// maxLocalKeys bounds the fallback's memory during a long outage; past it
// the map starts over (a fresh GCRA cell only admits its burst, so starting
// over can admit at most one extra burst per key).
const maxLocalKeys = 1 << 16

func newLocalLimits(cfg Config) *localLimits {
	return &localLimits{ticker: cfg.Ticker, byKey: map[localKey]*ratelimit.Limiter{}}
}

// The bounds of ratelimit.New on a Limit/Period configuration (its maxNum
// and maxTau): the interval Period/Limit ns, in lowest terms num/den, needs
// num <= 2^61 and num >= den, and burst·ceil(num/den) <= 2^60 (so with any
// burst the interval is at most 2^60 ns).
// TestFailLocalShareBounds checks checkShare against ratelimit.New itself.
const (
	shareMaxNum = 1 << 61
	shareMaxTau = 1 << 60
)

// checkShare returns the *rampart.ConfigError of a limit whose FailLocal
// share across replicas, Rate per Period·replicas with a burst of
// max(1, Burst/replicas), ratelimit.New would refuse (lim is normalized,
// replicas >= 1). It allocates nothing unless it fails.
func checkShare(lim Limit, replicas int) error {
	if lim.Period > time.Duration(math.MaxInt64)/time.Duration(replicas) {
		return rampart.NewConfigError("redislimit", "Replicas",
			"%d: the share of %d per %v, for FailLocal, needs a period of %d × %v, which overflows", replicas, lim.Rate, lim.Period, replicas, lim.Period)
	}
	num, den := uint64(lim.Period)*uint64(replicas), uint64(lim.Rate)
	if g := gcd(num, den); g > 1 {
		num, den = num/g, den/g
	}
	switch burst := uint64(max(1, lim.Burst/replicas)); {
	case num > shareMaxNum:
		return rampart.NewConfigError("redislimit", "Limit",
			"%d per %v: its FailLocal share with Replicas %d, %d per %v, has an interval of %d/%d ns in lowest terms, above the local limiter's bound of 2^61 ns",
			lim.Rate, lim.Period, replicas, lim.Rate, lim.Period*time.Duration(replicas), num, den)
	case num < den:
		return rampart.NewConfigError("redislimit", "Limit",
			"%d per %v: its FailLocal share with Replicas %d, %d per %v, has an interval of %d/%d ns, which rounds to 0",
			lim.Rate, lim.Period, replicas, lim.Rate, lim.Period*time.Duration(replicas), num, den)
	case burst > shareMaxTau/((num+den-1)/den):
		return rampart.NewConfigError("redislimit", "Limit",
			"%d per %v, burst %d: its FailLocal share with Replicas %d, %d per %v with a burst of %d, takes more than the local limiter's bound of 2^60 ns (burst × interval) to come back",
			lim.Rate, lim.Period, lim.Burst, replicas, lim.Rate, lim.Period*time.Duration(replicas), burst)
	}
	return nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (ll *localLimits) limiter(k localKey) (*ratelimit.Limiter, error) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if rl, ok := ll.byKey[k]; ok {
		return rl, nil
	}
	// normalize has checked the share already; checked again here, where
	// a wrapped period would admit too much, before building it.
	if err := checkShare(k.limit, k.replicas); err != nil {
		return nil, err
	}
	if len(ll.byKey) >= maxLocalKeys {
		clear(ll.byKey)
	}
	rl, err := ratelimit.New(ratelimit.Config{
		Name:   "redislimit-fallback",
		Limit:  k.limit.Rate,
		Period: k.limit.Period * time.Duration(k.replicas),
		Burst:  max(1, k.limit.Burst/k.replicas),
		Ticker: ll.ticker,
	})
	if err != nil {
		return nil, err
	}
	ll.byKey[k] = rl
	return rl, nil
}

// allow decides n events for key locally with the share of lim across
// replicas. Its error, a share that ratelimit.New refuses, is returned
// with the decision: normalize refuses such limits for the static
// Replicas first, and the fallback checks a live count's share before it
// uses it, so it is never expected.
func (ll *localLimits) allow(key string, n int, lim Limit, replicas int, now int64) (Decision, error) {
	rl, err := ll.limiter(localKey{key, lim, replicas})
	if err != nil {
		return Decision{Remaining: -1, Source: SourceFallback}, err
	}
	if wait := rl.AdmitN(now, n); wait > 0 {
		return Decision{RetryAfter: wait, Remaining: -1, Source: SourceFallback}, nil
	}
	return Decision{Allowed: true, Remaining: -1, Source: SourceFallback}, nil
}
