package observe

// This file is the scheme: every metric of every instance type, and the
// reader of each from one Stats snapshot.

import (
	"reflect"
	"strings"

	"github.com/rampart-go/rampart"
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

// Kind is how a metric accumulates.
type Kind uint8

const (
	Gauge   Kind = iota // a value now
	Counter             // a monotonic count since the instance was created
)

// String returns "gauge" or "counter".
func (k Kind) String() string {
	if k == Counter {
		return "counter"
	}
	return "gauge"
}

// Metric is one metric of one instance type.
type Metric struct {
	Name        string // the OpenTelemetry name, e.g. rampart.circuitbreaker.rejected
	Kind        Kind
	Unit        string // UCUM, as OpenTelemetry writes it: "{call}", "s", "1"
	Field       string // the Stats field (or method) it reads, for the docs
	Description string
	// States: one series per circuit breaker state (attribute
	// rampart.state, values BreakerStates), 1 for the current one; the
	// value read is the State's number.
	States bool
	// Attr and Value: the series of the metric name that carries
	// attribute Attr = Value besides rampart.name (rampart.code="ok" of
	// rampart.pipeline.calls): a name with one attribute has one Metric
	// per value, in a row of its Type's Metrics.
	Attr, Value string
}

// Type is the metrics of one instance type. A collection reads them all
// from one Stats snapshot into a slice v, v[i] being Metrics[i]'s value.
type Type struct {
	GoType  string // the Go type, e.g. *circuitbreaker.Breaker
	Family  string // types of one family share metric names, so a name is unique within a family
	Metrics []Metric
	read    func(inst any, now int64, v []float64)
}

// Attribute names (a Prometheus label is its PromLabel).
const (
	AttrName  = "rampart.name"  // the instance's name, as given to Add or by the Source
	AttrState = "rampart.state" // a circuit breaker state, on rampart.circuitbreaker.state
)

// AttrReason is the attribute of rampart.skipped_instances, values SkipReasons.
const AttrReason = "rampart.reason"

// The attributes of the metrics that split a count by a value of their
// own: a pipeline call's Code, the policy that rejected (the
// pipeline.Kind's name, as the trace events' rampart.policy), the ending a
// fallback answered, and a shedder's trigger signal.
const (
	AttrCode   = "rampart.code"
	AttrPolicy = "rampart.policy"
	AttrEnding = "rampart.ending"
	AttrSignal = "rampart.signal"
)

// ExtraAttrs are the attributes above, in this order.
var ExtraAttrs = []string{AttrCode, AttrPolicy, AttrEnding, AttrSignal}

// rejectingKinds are the pipeline.Kinds that reject a call (None does
// not), in the order of their series.
var rejectingKinds = [...]pipeline.Kind{pipeline.Retry, pipeline.Breaker, pipeline.RateLimit, pipeline.Bulkhead,
	pipeline.Adaptive, pipeline.Timeout, pipeline.Shed}

// byPolicy returns one Metric per rejecting Kind, ms with rampart.policy
// set to the Kind's name and its field indexed by it.
func byPolicy(ms Metric) []Metric {
	out := make([]Metric, len(rejectingKinds))
	for i, k := range rejectingKinds {
		m := ms
		m.Attr, m.Value, m.Field = AttrPolicy, k.String(), ms.Field+"["+k.String()+"]"
		out[i] = m
	}
	return out
}

// withValues returns ms once per value of attribute attr, with the field
// of each.
func withValues(ms Metric, attr string, values, fields []string) []Metric {
	out := make([]Metric, len(values))
	for i := range values {
		m := ms
		m.Attr, m.Value, m.Field = attr, values[i], fields[i]
		out[i] = m
	}
	return out
}

func concat(parts ...[]Metric) []Metric {
	var out []Metric
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Why an instance a Source holds is not collected: the indexes of
// SkipReasons and of the counts a Set hands Emitter.Skipped.
const (
	SkipUnknownType = iota // a type the adapter does not know
	SkipNoStats            // a known type that counts nothing (*pipeline.Pipeline without Config.CountStats)
	SkipDuplicate          // a name already collected for the same kind family
	SkipPanicked           // a Source's Range, or an instance's Stats, panicked (counted once per panic, recovered)
	NumSkipReasons         // the number of reasons
)

// SkipReasons are the values of rampart.reason, indexed by the Skip constants.
var SkipReasons = [NumSkipReasons]string{"unknown_type", "no_stats", "duplicate_name", "panicked"}

// SkippedMetric, rampart.skipped_instances (attribute AttrReason), counts what the last collection skipped: the instances
// that Sources held and that were not collected, and the panics of a
// Source's Range or an instance's Stats.
var SkippedMetric = Metric{Name: "rampart.skipped_instances", Kind: Gauge, Unit: "{instance}", Field: "-",
	Description: "Instances skipped at the last collection, by reason: a Source's that cannot be collected, a panic of a Source or of a Stats."}

// BreakerStates are the values of rampart.state, indexed by State.
var BreakerStates = [...]circuitbreaker.State{circuitbreaker.Closed, circuitbreaker.Open, circuitbreaker.HalfOpen,
	circuitbreaker.Disabled, circuitbreaker.ForcedOpen, circuitbreaker.MetricsOnly}

func secs(d int64) float64 { return float64(d) / 1e9 }

var breakerSpec = Type{GoType: "*circuitbreaker.Breaker", Family: "circuitbreaker", Metrics: []Metric{
	{"rampart.circuitbreaker.state", Gauge, "{state}", "State", "1 for the breaker's current state, 0 for the others (one series per state).", true, "", ""},
	{"rampart.circuitbreaker.window.calls", Gauge, "{call}", "WindowCalls", "Results in the current window.", false, "", ""},
	{"rampart.circuitbreaker.window.failures", Gauge, "{call}", "WindowFailures", "Failures in the current window.", false, "", ""},
	{"rampart.circuitbreaker.window.slow_calls", Gauge, "{call}", "WindowSlowCalls", "Slow calls in the current window.", false, "", ""},
	{"rampart.circuitbreaker.window.failure_rate", Gauge, "1", "FailureRate/100", "Share of the window's results that failed.", false, "", ""},
	{"rampart.circuitbreaker.window.slow_call_rate", Gauge, "1", "SlowCallRate/100", "Share of the window's results that were slow.", false, "", ""},
	{"rampart.circuitbreaker.consecutive_failures", Gauge, "{call}", "ConsecutiveFailures", "Failures in a row now (Consecutive mode).", false, "", ""},
	{"rampart.circuitbreaker.half_open.admitted", Gauge, "{call}", "HalfOpenAdmitted", "Probes admitted in the current half-open period.", false, "", ""},
	{"rampart.circuitbreaker.half_open.in_flight", Gauge, "{call}", "HalfOpenInFlight", "Probes in flight now.", false, "", ""},
	{"rampart.circuitbreaker.half_open.succeeded", Gauge, "{call}", "HalfOpenSucceeded", "Probes that succeeded in the current half-open period.", false, "", ""},
	{"rampart.circuitbreaker.half_open.failed", Gauge, "{call}", "HalfOpenFailed", "Probes that failed in the current half-open period.", false, "", ""},
	{"rampart.circuitbreaker.half_open.slow_calls", Gauge, "{call}", "HalfOpenSlowCalls", "Slow probes in the current half-open period.", false, "", ""},
	{"rampart.circuitbreaker.failures", Counter, "{call}", "Failures", "Failures recorded.", false, "", ""},
	{"rampart.circuitbreaker.slow_calls", Counter, "{call}", "SlowCalls", "Slow calls recorded.", false, "", ""},
	{"rampart.circuitbreaker.rejected", Counter, "{call}", "Rejected", "Calls rejected (open, forced open, half-open full).", false, "", ""},
	{"rampart.circuitbreaker.stale_results", Counter, "{call}", "StaleResults", "Results ignored because their permit was from an older generation.", false, "", ""},
	{"rampart.circuitbreaker.transitions", Counter, "{transition}", "Transitions", "State transitions.", false, "", ""},
	{"rampart.circuitbreaker.trips", Counter, "{transition}", "Trips", "Automatic transitions to open.", false, "", ""},
	{"rampart.circuitbreaker.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
	{"rampart.circuitbreaker.remaining_open", Gauge, "s", "RemainingOpen", "Time left before an open breaker lets probes through.", false, "", ""},
	{"rampart.circuitbreaker.successes", Counter, "{call}", "Successes", "Successes released (counted only with Config.CountStats).", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*circuitbreaker.Breaker).Stats()
	v[0], v[1], v[2], v[3] = float64(s.State), float64(s.WindowCalls), float64(s.WindowFailures), float64(s.WindowSlowCalls)
	v[4], v[5], v[6] = s.FailureRate/100, s.SlowCallRate/100, float64(s.ConsecutiveFailures)
	v[7], v[8], v[9], v[10], v[11] = float64(s.HalfOpenAdmitted), float64(s.HalfOpenInFlight), float64(s.HalfOpenSucceeded), float64(s.HalfOpenFailed), float64(s.HalfOpenSlowCalls)
	v[12], v[13], v[14], v[15] = float64(s.Failures), float64(s.SlowCalls), float64(s.Rejected), float64(s.StaleResults)
	v[16], v[17], v[18], v[19] = float64(s.Transitions), float64(s.Trips), float64(s.ListenerPanics), secs(int64(s.RemainingOpen))
	v[20] = float64(s.Successes)
}}

var rateMetrics = []Metric{
	{"rampart.ratelimit.admitted", Counter, "{call}", "Admitted", "Calls admitted (counted only with Config.CountStats).", false, "", ""},
	{"rampart.ratelimit.rejected", Counter, "{call}", "Rejected", "Calls rejected (counted only with Config.CountStats).", false, "", ""},
	{"rampart.ratelimit.waited", Counter, "{call}", "Waited", "Wait calls that had to sleep.", false, "", ""},
	{"rampart.ratelimit.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
	{"rampart.ratelimit.rate", Gauge, "{call}/s", "Rate", "Admissions per second allowed.", false, "", ""},
	{"rampart.ratelimit.burst", Gauge, "{call}", "Burst", "The bucket size.", false, "", ""},
}

func readRate(s ratelimit.Stats, v []float64) {
	v[0], v[1], v[2], v[3], v[4], v[5] = float64(s.Admitted), float64(s.Rejected), float64(s.Waited), float64(s.ListenerPanics), s.Rate, float64(s.Burst)
}

var limiterSpec = Type{GoType: "*ratelimit.Limiter", Family: "ratelimit", Metrics: rateMetrics, read: func(inst any, _ int64, v []float64) {
	readRate(inst.(*ratelimit.Limiter).Stats(), v)
}}

var shardedSpec = Type{GoType: "*ratelimit.Sharded", Family: "ratelimit", Metrics: rateMetrics, read: func(inst any, _ int64, v []float64) {
	readRate(inst.(*ratelimit.Sharded).Stats(), v)
}}

var keyedSpec = Type{GoType: "*ratelimit.Keyed", Family: "ratelimit", Metrics: []Metric{
	{"rampart.ratelimit.admitted", Counter, "{call}", "Admitted", "Calls admitted (counted only with Config.CountStats).", false, "", ""},
	{"rampart.ratelimit.rejected", Counter, "{call}", "Rejected", "Calls rejected (counted only with Config.CountStats).", false, "", ""},
	{"rampart.ratelimit.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
	{"rampart.ratelimit.keys", Gauge, "{key}", "Keys", "Keys held now.", false, "", ""},
	{"rampart.ratelimit.evicted", Counter, "{key}", "Evicted", "Idle keys evicted.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*ratelimit.Keyed).Stats()
	v[0], v[1], v[2], v[3], v[4] = float64(s.Admitted), float64(s.Rejected), float64(s.ListenerPanics), float64(s.Keys), float64(s.Evicted)
}}

var bulkheadSpec = Type{GoType: "*bulkhead.Bulkhead", Family: "bulkhead", Metrics: []Metric{
	{"rampart.bulkhead.max", Gauge, "{call}", "Max", "The current limit of calls in flight.", false, "", ""},
	{"rampart.bulkhead.in_flight", Gauge, "{call}", "InFlight", "Permits held now.", false, "", ""},
	{"rampart.bulkhead.peak_in_flight", Gauge, "{call}", "PeakInFlight", "The most permits ever held at once.", false, "", ""},
	{"rampart.bulkhead.waiting", Gauge, "{call}", "Waiting", "Calls queued now.", false, "", ""},
	{"rampart.bulkhead.rejected", Counter, "{call}", "Rejected", "Calls refused a permit, for any reason (timed out and canceled included).", false, "", ""},
	{"rampart.bulkhead.timed_out", Counter, "{call}", "TimedOut", "Waiting calls whose MaxWait expired.", false, "", ""},
	{"rampart.bulkhead.canceled", Counter, "{call}", "Canceled", "Waiting calls whose context ended first.", false, "", ""},
	{"rampart.bulkhead.overshoots", Counter, "{call}", "Overshoots", "Adds that lost the race for the last permit and were undone.", false, "", ""},
	{"rampart.bulkhead.waited", Counter, "{call}", "Waited", "Calls admitted after queueing.", false, "", ""},
	{"rampart.bulkhead.wait_time", Counter, "s", "WaitTime", "Time spent queueing, admitted or not.", false, "", ""},
	{"rampart.bulkhead.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*bulkhead.Bulkhead).Stats()
	v[0], v[1], v[2], v[3] = float64(s.Max), float64(s.InFlight), float64(s.PeakInFlight), float64(s.Waiting)
	v[4], v[5], v[6], v[7] = float64(s.Rejected), float64(s.TimedOut), float64(s.Canceled), float64(s.Overshoots)
	v[8], v[9], v[10] = float64(s.Waited), secs(int64(s.WaitTime)), float64(s.ListenerPanics)
}}

var adaptiveSpec = Type{GoType: "*adaptive.Limiter", Family: "adaptive", Metrics: []Metric{
	{"rampart.adaptive.limit", Gauge, "{call}", "Limit", "The published concurrency limit.", false, "", ""},
	{"rampart.adaptive.in_flight", Gauge, "{call}", "InFlight", "Calls admitted and not yet released.", false, "", ""},
	{"rampart.adaptive.peak_in_flight", Gauge, "{call}", "PeakInFlight", "The most calls in flight seen at an admission.", false, "", ""},
	{"rampart.adaptive.queued", Gauge, "{call}", "Queued", "Calls waiting in the queue now.", false, "", ""},
	{"rampart.adaptive.stride", Gauge, "{call}", "Stride", "RTT sampling stride: about one call in Stride is timed.", false, "", ""},
	{"rampart.adaptive.rejected", Counter, "{call}", "Rejected", "Calls refused (shed from the queue included).", false, "", ""},
	{"rampart.adaptive.shed", Counter, "{call}", "Shed", "Waiting calls shed by CoDel or a full queue.", false, "", ""},
	{"rampart.adaptive.samples", Counter, "{sample}", "Samples", "RTT samples counted in closed windows.", false, "", ""},
	{"rampart.adaptive.drops", Counter, "{call}", "Drops", "Failure releases counted in closed windows.", false, "", ""},
	{"rampart.adaptive.windows", Counter, "{window}", "Windows", "Windows closed (limit recomputations).", false, "", ""},
	{"rampart.adaptive.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*adaptive.Limiter).Stats()
	v[0], v[1], v[2], v[3], v[4] = float64(s.Limit), float64(s.InFlight), float64(s.PeakInFlight), float64(s.Queued), float64(s.Stride)
	v[5], v[6], v[7], v[8], v[9], v[10] = float64(s.Rejected), float64(s.Shed), float64(s.Samples), float64(s.Drops), float64(s.Windows), float64(s.ListenerPanics)
}}

var throttlerSpec = Type{GoType: "*adaptive.Throttler", Family: "adaptive.throttler", Metrics: []Metric{
	{"rampart.adaptive.throttler.window.requests", Gauge, "{request}", "Requests", "Requests counted in the window.", false, "", ""},
	{"rampart.adaptive.throttler.window.accepted", Gauge, "{request}", "Accepted", "Accepts counted in the window.", false, "", ""},
	{"rampart.adaptive.throttler.rejection_probability", Gauge, "1", "Probability", "The current probability of a local rejection.", false, "", ""},
	{"rampart.adaptive.throttler.rejected", Counter, "{request}", "Rejected", "Local rejections.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*adaptive.Throttler).Stats()
	v[0], v[1], v[2], v[3] = float64(s.Requests), float64(s.Accepted), s.Probability, float64(s.Rejected)
}}

var retrySpec = Type{GoType: "*retry.Policy", Family: "retry", Metrics: []Metric{
	{"rampart.retry.retries", Counter, "{retry}", "Retries", "Retries granted.", false, "", ""},
	{"rampart.retry.give_ups", Counter, "{call}", "GiveUps", "Calls that gave up (give-up errors built).", false, "", ""},
	{"rampart.retry.budget_refused", Counter, "{retry}", "BudgetRefused", "Retries the budget refused.", false, "", ""},
	{"rampart.retry.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*retry.Policy).Stats()
	v[0], v[1], v[2], v[3] = float64(s.Retries), float64(s.GiveUps), float64(s.BudgetRefused), float64(s.ListenerPanics)
}}

var tokenBucketSpec = Type{GoType: "*retry.TokenBucket", Family: "retry.budget", Metrics: []Metric{
	{"rampart.retry.budget.tokens", Gauge, "{token}", "Tokens()", "Tokens in the gRPC A6 bucket; retries are allowed above half of MaxTokens.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	v[0] = inst.(*retry.TokenBucket).Tokens()
}}

var ratioBudgetSpec = Type{GoType: "*retry.RatioBudget", Family: "retry.budget", Metrics: []Metric{
	{"rampart.retry.budget.window.requests", Gauge, "{request}", "Counts(now) requests", "Requests counted in the budget's window.", false, "", ""},
	{"rampart.retry.budget.window.retries", Gauge, "{retry}", "Counts(now) retries", "Retries granted in the budget's window.", false, "", ""},
}, read: func(inst any, now int64, v []float64) {
	req, ret := inst.(*retry.RatioBudget).Counts(now)
	v[0], v[1] = float64(req), float64(ret)
}}

var timeoutSpec = Type{GoType: "*timeout.Timeout", Family: "timeout", Metrics: []Metric{
	{"rampart.timeout.timeouts", Counter, "{call}", "Timeouts", "Calls classified as timed out.", false, "", ""},
	{"rampart.timeout.abandoned", Counter, "{call}", "AbandonedTotal", "Functions ever abandoned (DoAbandon, CallAbandon).", false, "", ""},
	{"rampart.timeout.abandoned_running", Gauge, "{call}", "Abandoned", "Abandoned functions still running.", false, "", ""},
	{"rampart.timeout.rejected", Counter, "{call}", "Rejected", "Calls rejected because MaxAbandoned was reached.", false, "", ""},
	{"rampart.timeout.fallbacks", Counter, "{call}", "Fallbacks", "Calls timed by a runtime timer instead of the watchdog.", false, "", ""},
	{"rampart.timeout.workers", Gauge, "{goroutine}", "Workers", "DoAbandon worker goroutines alive now.", false, "", ""},
	{"rampart.timeout.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*timeout.Timeout).Stats()
	v[0], v[1], v[2], v[3] = float64(s.Timeouts), float64(s.AbandonedTotal), float64(s.Abandoned), float64(s.Rejected)
	v[4], v[5], v[6] = float64(s.Fallbacks), float64(s.Workers), float64(s.ListenerPanics)
}}

var hedgeSpec = Type{GoType: "*hedge.Hedger", Family: "hedge", Metrics: []Metric{
	{"rampart.hedge.hedges", Counter, "{attempt}", "Hedges", "Hedge attempts that ran.", false, "", ""},
	{"rampart.hedge.hedges_won", Counter, "{attempt}", "HedgesWon", "Races won by a hedge.", false, "", ""},
	{"rampart.hedge.budget_refused", Counter, "{attempt}", "BudgetRefused", "Hedges the budget refused.", false, "", ""},
	{"rampart.hedge.trigger_full", Counter, "{call}", "TriggerFull", "Calls that ran unhedged because the watchdog refused the trigger.", false, "", ""},
	{"rampart.hedge.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
	{"rampart.hedge.delay", Gauge, "s", "Delay", "The current hedging delay (-1 s: no hedging yet).", false, "", ""},
	{"rampart.hedge.samples", Gauge, "{sample}", "Samples", "Latencies in the histogram at the last refresh.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*hedge.Hedger).Stats()
	v[0], v[1], v[2], v[3], v[4] = float64(s.Hedges), float64(s.HedgesWon), float64(s.BudgetRefused), float64(s.TriggerFull), float64(s.ListenerPanics)
	v[5], v[6] = secs(int64(s.Delay)), float64(s.Samples)
	if s.Delay < 0 {
		v[5] = -1
	}
}}

var chaosSpec = Type{GoType: "*chaos.Injector", Family: "chaos", Metrics: []Metric{
	{"rampart.chaos.calls", Counter, "{call}", "Calls", "Calls seen while enabled.", false, "", ""},
	{"rampart.chaos.delayed", Counter, "{call}", "Delayed", "Calls that got an injected latency.", false, "", ""},
	{"rampart.chaos.delay_time", Counter, "s", "DelayTime", "Latency injected, in all.", false, "", ""},
	{"rampart.chaos.interrupted", Counter, "{call}", "Interrupted", "Delayed calls whose context ended during the latency.", false, "", ""},
	{"rampart.chaos.panicked", Counter, "{call}", "Panicked", "Calls made to panic.", false, "", ""},
	{"rampart.chaos.errored", Counter, "{call}", "Errored", "Calls made to return the injected error.", false, "", ""},
	{"rampart.chaos.substituted", Counter, "{call}", "Substituted", "Calls whose result was substituted.", false, "", ""},
	{"rampart.chaos.listener_panics", Counter, "{panic}", "ListenerPanics", "Listener panics recovered.", false, "", ""},
}, read: func(inst any, _ int64, v []float64) {
	s := inst.(*chaos.Injector).Stats()
	v[0], v[1], v[2], v[3] = float64(s.Calls), float64(s.Delayed), secs(int64(s.DelayTime)), float64(s.Interrupted)
	v[4], v[5], v[6], v[7] = float64(s.Panicked), float64(s.Errored), float64(s.Substituted), float64(s.ListenerPanics)
}}

// pipelineSpec is a *pipeline.Pipeline built with Config.CountStats
// (one without counts nothing: Add refuses it, a Source's is skipped as
// no_stats).
var pipelineSpec = Type{GoType: "*pipeline.Pipeline", Family: "pipeline", Metrics: concat(
	withValues(Metric{Name: "rampart.pipeline.calls", Kind: Counter, Unit: "{call}",
		Description: "Calls that ended, by Code (counted with Config.CountStats)."}, AttrCode,
		[]string{"ok", "failed", "rejected", "timed_out", "canceled"},
		[]string{"Succeeded", "Failed", "Rejected", "TimedOut", "Canceled"}),
	byPolicy(Metric{Name: "rampart.pipeline.rejected", Kind: Counter, Unit: "{call}", Field: "RejectedBy",
		Description: "Calls rejected, by the policy that rejected (counted with Config.CountStats)."}),
	[]Metric{
		{"rampart.pipeline.panicked", Counter, "{call}", "Panicked", "Calls whose fn panicked or called runtime.Goexit (not in calls).", false, "", ""},
		{"rampart.pipeline.attempts", Counter, "{attempt}", "Attempts", "Attempts of the calls that ended, rejected ones included.", false, "", ""},
	}), read: func(inst any, _ int64, v []float64) {
	s := inst.(*pipeline.Pipeline).Stats()
	v[0], v[1], v[2], v[3], v[4] = float64(s.Succeeded), float64(s.Failed), float64(s.Rejected), float64(s.TimedOut), float64(s.Canceled)
	for i, k := range rejectingKinds {
		v[5+i] = float64(s.RejectedBy[k])
	}
	v[5+len(rejectingKinds)], v[6+len(rejectingKinds)] = float64(s.Panicked), float64(s.Attempts)
}}

// fallbackStatser is what a *pipeline.Fallback[T] of any T (and a
// *pipeline.DoFallback) has: its Stats.
type fallbackStatser interface{ Stats() pipeline.FallbackStats }

var fallbackMetrics = concat(
	withValues(Metric{Name: "rampart.fallback.answers", Kind: Counter, Unit: "{call}",
		Description: "Calls the fallback answered, by how they ended (counted with the pipeline's Config.CountStats)."}, AttrEnding,
		[]string{"rejected", "timed_out", "retries_exhausted", "failed", "canceled"},
		[]string{"AnsweredRejected (sum)", "AnsweredTimedOut", "AnsweredExhausted", "AnsweredFailed", "AnsweredCanceled"}),
	byPolicy(Metric{Name: "rampart.fallback.answered_rejected", Kind: Counter, Unit: "{call}", Field: "AnsweredRejected",
		Description: "Rejections the fallback answered, by the policy that rejected."}),
	[]Metric{
		{"rampart.fallback.stale_served", Counter, "{call}", "StaleServed", "Answers with the last good value.", false, "", ""},
		{"rampart.fallback.stale_expired", Counter, "{call}", "StaleExpired", "Endings met while the last good value was older than MaxAge.", false, "", ""},
	})

func readFallback(s pipeline.FallbackStats, v []float64) {
	var rejected uint64
	for i, k := range rejectingKinds {
		rejected += s.AnsweredRejected[k]
		v[5+i] = float64(s.AnsweredRejected[k])
	}
	rejected += s.AnsweredRejected[pipeline.None]
	v[0], v[1], v[2], v[3], v[4] = float64(rejected), float64(s.AnsweredTimedOut), float64(s.AnsweredExhausted), float64(s.AnsweredFailed), float64(s.AnsweredCanceled)
	v[5+len(rejectingKinds)], v[6+len(rejectingKinds)] = float64(s.StaleServed), float64(s.StaleExpired)
}

// fallbackSpec is any *pipeline.Fallback[T], through its Stats method.
var fallbackSpec = Type{GoType: "*pipeline.Fallback[T]", Family: "fallback", Metrics: fallbackMetrics, read: func(inst any, _ int64, v []float64) {
	readFallback(inst.(fallbackStatser).Stats(), v)
}}

var doFallbackSpec = Type{GoType: "*pipeline.DoFallback", Family: "fallback", Metrics: fallbackMetrics, read: func(inst any, _ int64, v []float64) {
	readFallback(inst.(*pipeline.DoFallback).Stats(), v)
}}

// shedSignals are the values of rampart.signal, the bits of shed.Signal.
var shedSignals = [...]shed.Signal{shed.SchedLatency, shed.CPU, shed.Runnable, shed.InFlight, shed.Latency}

var shedSpec = Type{GoType: "*shed.Shedder", Family: "shed", Metrics: concat([]Metric{
	{"rampart.shed.admitted", Counter, "{call}", "Admitted", "Calls admitted.", false, "", ""},
	{"rampart.shed.rejected", Counter, "{call}", "Rejected", "Calls shed while overloaded.", false, "", ""},
	{"rampart.shed.in_flight", Gauge, "{call}", "InFlight", "Calls admitted and not yet released.", false, "", ""},
	{"rampart.shed.overloaded", Gauge, "{state}", "Overloaded", "1 while the shedder is engaged, 0 otherwise.", false, "", ""},
	{"rampart.shed.overloads", Counter, "{transition}", "Overloads", "Times the shedder engaged.", false, "", ""},
	{"rampart.shed.cap", Gauge, "{call}", "Cap", "The cap while overloaded: max_pass × min_rt (0 when not overloaded).", false, "", ""},
	{"rampart.shed.limit", Gauge, "{call}", "Limit", "Calls in flight admitted now at priority 0: the cap or its probe.", false, "", ""},
	{"rampart.shed.max_pass", Gauge, "{call}/s", "MaxPass", "The most calls completed per second in a bucket of the window.", false, "", ""},
	{"rampart.shed.min_rt", Gauge, "s", "MinRT", "The least mean latency of a bucket of the window.", false, "", ""},
	{"rampart.shed.signals.sched_latency", Gauge, "s", "Signals.SchedLatency", "The Source's last scheduling latency (-1 s: unknown).", false, "", ""},
	{"rampart.shed.signals.cpu", Gauge, "1", "Signals.CPU", "The Source's last busy share of GOMAXPROCS (-1: unknown).", false, "", ""},
	{"rampart.shed.signals.runnable", Gauge, "{goroutine}", "Signals.Runnable", "The Source's last runnable goroutines per P (-1: unknown).", false, "", ""},
	{"rampart.shed.samples", Counter, "{sample}", "Samples", "Samples taken.", false, "", ""},
	{"rampart.shed.stride", Gauge, "{call}", "Stride", "Latency sampling stride: about one call in Stride is timed.", false, "", ""},
	{"rampart.shed.listener_panics", Counter, "{panic}", "ListenerPanics", "Panics of OnOverload or the Source recovered.", false, "", ""},
}, withValues(Metric{Name: "rampart.shed.trigger", Kind: Gauge, Unit: "{signal}",
	Description: "1 for each signal at or above its threshold at the last sample, 0 for the others."}, AttrSignal,
	[]string{"sched_latency", "cpu", "runnable", "in_flight", "latency"},
	[]string{"Trigger&SchedLatency", "Trigger&CPU", "Trigger&Runnable", "Trigger&InFlight", "Trigger&Latency"})),
	read: func(inst any, _ int64, v []float64) {
		s := inst.(*shed.Shedder).Stats()
		v[0], v[1], v[2], v[3], v[4] = float64(s.Admitted), float64(s.Rejected), float64(s.InFlight), b2f(s.Overloaded), float64(s.Overloads)
		v[5], v[6], v[7], v[8] = float64(s.Cap), float64(s.Limit), s.MaxPass, secs(int64(s.MinRT))
		v[9], v[10], v[11] = secs(int64(s.Signals.SchedLatency)), s.Signals.CPU, s.Signals.Runnable
		if s.Signals.SchedLatency < 0 {
			v[9] = -1
		}
		v[12], v[13], v[14] = float64(s.Samples), float64(s.Stride), float64(s.ListenerPanics)
		for i, sig := range shedSignals {
			v[15+i] = b2f(s.Trigger&sig != 0)
		}
	}}

// types lists every Type, in the order of the docs' table.
var types = []*Type{&breakerSpec, &limiterSpec, &shardedSpec, &keyedSpec, &bulkheadSpec, &adaptiveSpec,
	&throttlerSpec, &retrySpec, &tokenBucketSpec, &ratioBudgetSpec, &timeoutSpec, &hedgeSpec, &chaosSpec,
	&pipelineSpec, &fallbackSpec, &doFallbackSpec, &shedSpec}

// MaxMetrics is the most Metrics of one Type (the size of a Set's read buffer).
const MaxMetrics = 24

// Types returns every Type the scheme knows, in the order of the docs'
// table. The slice and its Types are shared: do not modify them.
func Types() []*Type { return types }

// TypeOf returns inst's Type, nil for a type the scheme does not know. A
// *pipeline.Pipeline built without Config.CountStats is known but counts
// nothing: noStats.
func TypeOf(inst any) (t *Type, noStats bool) { return specOf(inst) }

// specOf returns inst's kind, nil for a type the adapter does not know.
// A *pipeline.Pipeline built without Config.CountStats is known but
// counts nothing: noStats.
func specOf(inst any) (k *Type, noStats bool) {
	switch x := inst.(type) {
	case *circuitbreaker.Breaker:
		return &breakerSpec, false
	case *ratelimit.Limiter:
		return &limiterSpec, false
	case *ratelimit.Sharded:
		return &shardedSpec, false
	case *ratelimit.Keyed:
		return &keyedSpec, false
	case *bulkhead.Bulkhead:
		return &bulkheadSpec, false
	case *adaptive.Limiter:
		return &adaptiveSpec, false
	case *adaptive.Throttler:
		return &throttlerSpec, false
	case *retry.Policy:
		return &retrySpec, false
	case *retry.TokenBucket:
		return &tokenBucketSpec, false
	case *retry.RatioBudget:
		return &ratioBudgetSpec, false
	case *timeout.Timeout:
		return &timeoutSpec, false
	case *hedge.Hedger:
		return &hedgeSpec, false
	case *chaos.Injector:
		return &chaosSpec, false
	case *shed.Shedder:
		return &shedSpec, false
	case *pipeline.Pipeline:
		if x == nil || !x.Config().CountStats {
			return nil, true
		}
		return &pipelineSpec, false
	case *pipeline.DoFallback:
		return &doFallbackSpec, false
	case fallbackStatser: // a *pipeline.Fallback[T], of any T
		return &fallbackSpec, false
	}
	return nil, false
}

// isNil reports whether inst is a nil pointer of a known type (a typed nil
// in an interface), which Add refuses.
func isNil(inst any) bool {
	switch p := inst.(type) {
	case *circuitbreaker.Breaker:
		return p == nil
	case *ratelimit.Limiter:
		return p == nil
	case *ratelimit.Sharded:
		return p == nil
	case *ratelimit.Keyed:
		return p == nil
	case *bulkhead.Bulkhead:
		return p == nil
	case *adaptive.Limiter:
		return p == nil
	case *adaptive.Throttler:
		return p == nil
	case *retry.Policy:
		return p == nil
	case *retry.TokenBucket:
		return p == nil
	case *retry.RatioBudget:
		return p == nil
	case *timeout.Timeout:
		return p == nil
	case *hedge.Hedger:
		return p == nil
	case *chaos.Injector:
		return p == nil
	case *pipeline.Pipeline:
		return p == nil
	case *shed.Shedder:
		return p == nil
	case *pipeline.DoFallback:
		return p == nil
	case fallbackStatser: // a generic type: the one case that needs reflect (Add and collections only)
		v := reflect.ValueOf(p)
		return v.Kind() == reflect.Pointer && v.IsNil()
	}
	return inst == nil
}

// tickerOrDefault returns tk, or rampart.DefaultTicker when tk is nil.
func tickerOrDefault(tk rampart.Ticker) rampart.Ticker {
	if tk == nil {
		return rampart.DefaultTicker()
	}
	return tk
}

// PromLabel returns an attribute's Prometheus label Name: dots as underscores.
func PromLabel(attr string) string { return strings.ReplaceAll(attr, ".", "_") }

// PromName returns a metric's Prometheus name from its OpenTelemetry name,
// unit and kind, as OpenTelemetry's Prometheus compatibility rules do: dots
// become underscores, unit "s" appends _seconds, a unit per second ("/s")
// appends _per_second, unit "1" appends _ratio, and a Counter appends
// _total (other units, "{call}" and the like, are annotations: nothing).
func PromName(ms *Metric) string {
	n := strings.ReplaceAll(ms.Name, ".", "_")
	switch {
	case ms.Unit == "s":
		n += "_seconds"
	case strings.HasSuffix(ms.Unit, "/s"):
		n += "_per_second"
	case ms.Unit == "1":
		n += "_ratio"
	}
	if ms.Kind == Counter {
		n += "_total"
	}
	return n
}
