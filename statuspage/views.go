package statuspage

import (
	"fmt"
	"time"

	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// A series is one charted quantity of a kind.
type series struct {
	name    string
	counter bool // a count since New: charted as its rate per second between samples
}

// action is one thing the page may do to an instance.
type action struct {
	name string
	do   func()
}

// view is how the handler reads one instance: its kind, its JSON state, its
// charted values and its actions.
type view struct {
	kind    string
	stats   func(now int64) any
	series  [2]series // an empty name: no second series
	sample  func(now int64) (v [2]float64, state int8)
	actions []action
	states  bool // sample's state is a breaker state, drawn as a strip
}

// breakerStats is a breaker's Stats with its State by name.
type breakerStats struct {
	circuitbreaker.Stats
	State string `json:"State"`
}

type limiterStats struct {
	ratelimit.Stats
	Tokens float64
}

type shardedStats struct {
	ratelimit.Stats
	Shards int
}

type retryStats struct {
	retry.Stats
	MaxAttempts int
	Budget      any `json:",omitempty"`
}

type tokenBucketStats struct {
	Tokens float64
}

type ratioBudgetStats struct {
	Requests uint64 // requests counted in the window
	Retries  uint64 // retries counted in the window
}

type chaosStats struct {
	chaos.Stats
	Enabled bool
}

type timeoutStats struct {
	timeout.Stats
	Duration time.Duration
	Mode     string
}

// viewOf returns the view of v; an unknown type gets kind "other" and no
// state.
func viewOf(v any) view {
	switch x := v.(type) {
	case *circuitbreaker.Breaker:
		ss := [2]series{{name: "failure rate %"}}
		if x.Config().CountStats { // successes are counted: chart them
			ss[1] = series{name: "successes/s", counter: true}
		}
		return view{
			kind: "circuitbreaker",
			stats: func(int64) any {
				s := x.Stats()
				return breakerStats{Stats: s, State: s.State.String()}
			},
			series: ss,
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{s.FailureRate, float64(s.Successes)}, int8(s.State)
			},
			states: true,
			// Every state TransitionTo can enter, and Reset.
			actions: []action{
				{"force-open", func() { x.TransitionTo(circuitbreaker.ForcedOpen) }},
				{"open", func() { x.TransitionTo(circuitbreaker.Open) }},
				{"half-open", func() { x.TransitionTo(circuitbreaker.HalfOpen) }},
				{"metrics-only", func() { x.TransitionTo(circuitbreaker.MetricsOnly) }},
				{"disable", func() { x.TransitionTo(circuitbreaker.Disabled) }},
				{"reset", x.Reset},
			},
		}
	case *bulkhead.Bulkhead:
		return view{
			kind:   "bulkhead",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "in flight"}, {name: "max"}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.InFlight), float64(s.Max)}, 0
			},
		}
	case *ratelimit.Limiter:
		return view{
			kind: "ratelimit",
			stats: func(int64) any {
				return limiterStats{Stats: x.Stats(), Tokens: x.TokensAt(x.Ticker().Now())}
			},
			series: [2]series{{name: "tokens"}, {name: "burst"}},
			sample: func(int64) ([2]float64, int8) {
				return [2]float64{x.TokensAt(x.Ticker().Now()), float64(x.Stats().Burst)}, 0
			},
		}
	case *ratelimit.Keyed:
		return view{
			kind:   "ratelimit.keyed",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "keys"}, {name: "rejected/s", counter: true}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Keys), float64(s.Rejected)}, 0
			},
		}
	case *ratelimit.Sharded:
		return view{
			kind:   "ratelimit.sharded",
			stats:  func(int64) any { return shardedStats{Stats: x.Stats(), Shards: x.Shards()} },
			series: [2]series{{name: "rejected/s", counter: true}},
			sample: func(int64) ([2]float64, int8) { return [2]float64{float64(x.Stats().Rejected)}, 0 },
		}
	case *adaptive.Limiter:
		return view{
			kind:   "adaptive",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "limit"}, {name: "in flight"}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Limit), float64(s.InFlight)}, 0
			},
		}
	case *adaptive.Throttler:
		return view{
			kind:   "throttler",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "rejection probability"}},
			sample: func(int64) ([2]float64, int8) { return [2]float64{x.Stats().Probability}, 0 },
		}
	case *retry.Policy:
		return view{
			kind: "retry",
			stats: func(now int64) any {
				s := retryStats{Stats: x.Stats(), MaxAttempts: x.MaxAttempts()}
				if b := x.Budget(); b != nil {
					s.Budget = budgetStats(b, now)
				}
				return s
			},
			series: [2]series{{name: "retries/s", counter: true}, {name: "budget refused/s", counter: true}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Retries), float64(s.BudgetRefused)}, 0
			},
		}
	case *retry.TokenBucket:
		return view{
			kind:   "retry.budget",
			stats:  func(now int64) any { return budgetStats(x, now) },
			series: [2]series{{name: "tokens"}},
			sample: func(int64) ([2]float64, int8) { return [2]float64{x.Tokens()}, 0 },
		}
	case *retry.RatioBudget:
		return view{
			kind:   "retry.budget",
			stats:  func(now int64) any { return budgetStats(x, now) },
			series: [2]series{{name: "requests"}, {name: "retries"}},
			sample: func(now int64) ([2]float64, int8) {
				req, ret := x.Counts(now)
				return [2]float64{float64(req), float64(ret)}, 0
			},
		}
	case *chaos.Injector:
		return view{
			kind:   "chaos",
			stats:  func(int64) any { return chaosStats{Stats: x.Stats(), Enabled: x.Enabled()} },
			series: [2]series{{name: "calls/s", counter: true}, {name: "faults/s", counter: true}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Calls), float64(s.Delayed + s.Panicked + s.Errored + s.Substituted)}, 0
			},
			actions: []action{
				{"enable", func() { x.SetEnabled(true) }},
				{"disable", func() { x.SetEnabled(false) }},
			},
		}
	case *hedge.Hedger:
		return view{
			kind:   "hedge",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "hedges/s", counter: true}, {name: "delay ms"}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Hedges), float64(s.Delay) / float64(time.Millisecond)}, 0
			},
		}
	case *timeout.Timeout:
		return view{
			kind: "timeout",
			stats: func(int64) any {
				return timeoutStats{Stats: x.Stats(), Duration: x.Duration(), Mode: x.Mode().String()}
			},
			series: [2]series{{name: "timeouts/s", counter: true}, {name: "abandoned"}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Timeouts), float64(s.Abandoned)}, 0
			},
		}
	case *shed.Shedder:
		return view{
			kind:   "shed",
			stats:  func(int64) any { return x.Stats() },
			series: [2]series{{name: "in flight"}, {name: "rejected/s", counter: true}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.InFlight), float64(s.Rejected)}, 0
			},
		}
	case *pipeline.Pipeline:
		if !x.Config().CountStats {
			return view{kind: "pipeline", stats: func(now int64) any { return pipelineStats(x, now) }}
		}
		return view{
			kind:   "pipeline",
			stats:  func(now int64) any { return pipelineStats(x, now) },
			series: [2]series{{name: "calls/s", counter: true}, {name: "rejected/s", counter: true}},
			sample: func(int64) ([2]float64, int8) {
				s := x.Stats()
				return [2]float64{float64(s.Calls), float64(s.Rejected)}, 0
			},
		}
	case *pipeline.DoFallback:
		return fallbackView(x)
	case fallbackStatser: // a *pipeline.Fallback[T], of any T
		return fallbackView(x)
	}
	return view{kind: "other"}
}

// fallbackStatser is what a *pipeline.Fallback[T] of any T (and a
// *pipeline.DoFallback) has: its Stats. A generic type is recognised by
// it.
type fallbackStatser interface{ Stats() pipeline.FallbackStats }

// fallbackView is a fallback's: its answers (all 0 unless its pipeline
// counts outcomes).
func fallbackView(x fallbackStatser) view {
	return view{
		kind:   "fallback",
		stats:  func(int64) any { return x.Stats() },
		series: [2]series{{name: "answered/s", counter: true}, {name: "stale served/s", counter: true}},
		sample: func(int64) ([2]float64, int8) {
			s := x.Stats()
			return [2]float64{float64(s.Answered), float64(s.StaleServed)}, 0
		},
	}
}

// budgetStats is the state of a retry budget of this package's known
// types, or nil for a budget of the user's.
func budgetStats(b any, now int64) any {
	switch x := b.(type) {
	case *retry.TokenBucket:
		return tokenBucketStats{Tokens: x.Tokens()}
	case *retry.RatioBudget:
		req, ret := x.Counts(now)
		return ratioBudgetStats{Requests: req, Retries: ret}
	}
	return nil
}

// pipelineStats is each of the pipeline's policies' state, keyed by its
// pipeline.Config field name, in the pipeline's order, and the pipeline's
// own outcome counts when it counts them (Config.CountStats).
func pipelineStats(p *pipeline.Pipeline, now int64) any {
	c := p.Config()
	type part struct {
		Field string
		Kind  string
		Stats any
	}
	var parts []part
	add := func(field string, v any) {
		w := viewOf(v)
		parts = append(parts, part{field, w.kind, w.stats(now)})
	}
	if c.Retry != nil {
		add("Retry", c.Retry)
	}
	if c.Breaker != nil {
		add("Breaker", c.Breaker)
	}
	if c.RateLimit != nil {
		add("RateLimit", c.RateLimit)
	}
	if c.Bulkhead != nil {
		add("Bulkhead", c.Bulkhead)
	}
	if c.Adaptive != nil {
		add("Adaptive", c.Adaptive)
	}
	if c.Shed != nil {
		add("Shed", c.Shed)
	}
	if c.Timeout != nil {
		add("Timeout", c.Timeout)
	}
	if c.Hedge != nil {
		add("Hedge", c.Hedge)
	}
	var counts *pipeline.Stats
	if c.CountStats {
		s := p.Stats()
		counts = &s
	}
	return struct {
		Outcomes *pipeline.Stats `json:",omitempty"`
		Policies []part
	}{counts, parts}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }

// sample is one point of an instance's ring: 32 bytes.
type sample struct {
	t     int64
	v     [2]float64
	state int8
}

// ring is a bounded history of samples, oldest first once full.
type ring struct {
	kind string
	inst any // the instance sampled: another under the same name gets a new ring
	buf  []sample
	next int // index of the next write
	full bool
}

func newRing(kind string, inst any, n int) *ring {
	return &ring{kind: kind, inst: inst, buf: make([]sample, n)}
}

func (r *ring) push(s sample) {
	r.buf[r.next] = s
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// samples returns the samples oldest first (a copy).
func (r *ring) samples() []sample {
	if !r.full {
		return append([]sample(nil), r.buf[:r.next]...)
	}
	return append(append([]sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}
