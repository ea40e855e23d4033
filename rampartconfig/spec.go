package rampartconfig

import (
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// The specs below are the document's schema. Every field is a pointer (or
// a slice) so that an absent field is told from a zero one: an absent
// field is inherited from the kind's defaults, and when the defaults do not
// set it either, it means the policy's own default (its Config's zero
// value). Each field has the name of the policy Config field it sets, in
// lowerCamelCase (failureRateThreshold sets FailureRateThreshold).

// Duration is a time.Duration written as a Go duration string ("200ms",
// "1m30s") in YAML and JSON.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a duration is a Go duration string such as \"200ms\"", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: a duration is a Go duration string such as \"200ms\": %v", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a Go duration string such as \"200ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("a duration is a Go duration string such as \"200ms\": %v", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Meta holds what every instance of the document may carry besides its
// policy's fields.
type Meta struct {
	// Groups are the registry groups of the instance (for the registry's
	// group operations and RangeGroup). When absent, a named instance
	// inherits the defaults' groups and an inline policy of a pipeline is
	// in the pipeline's (none when the pipeline has none: an inline
	// policy never takes the defaults' groups).
	Groups []string `json:"groups,omitempty" yaml:"groups,omitempty"`
	// Replace lets a reload rebuild the instance when a field fixed at
	// construction changes: a new instance replaces the old one in the
	// registry (and in the pipelines that use it, which are rebuilt too).
	// Callers that hold the old instance keep using it. Without it such a
	// change is an error naming the field. Set in the defaults, it marks
	// every instance of the kind.
	Replace bool `json:"replace,omitempty" yaml:"replace,omitempty"`
}

// BreakerSpec configures a circuitbreaker.Breaker.
type BreakerSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Compact: the policy's Config.Compact: no cache-line padding (smaller,
	// for many cold instances). Default false. Reload: fixed.
	Compact *bool `json:"compact,omitempty" yaml:"compact,omitempty"`
	// Mode: count, time or consecutive: how health is judged when closed.
	// Default count. Reload: fixed.
	Mode *string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// WindowSize: calls a count window judges (at most 1048576). Default 100.
	// Reload: fixed.
	WindowSize *int `json:"windowSize,omitempty" yaml:"windowSize,omitempty"`
	// TimeWindow: span a time window judges. Default 10s. Reload: fixed.
	TimeWindow *Duration `json:"timeWindow,omitempty" yaml:"timeWindow,omitempty"`
	// Buckets: buckets of a time window (at most 1024). Default 10. Reload:
	// fixed.
	Buckets *int `json:"buckets,omitempty" yaml:"buckets,omitempty"`
	// ConsecutiveFailures: failures in a row that trip a consecutive breaker.
	// Default 5. Reload: updatable.
	ConsecutiveFailures *int `json:"consecutiveFailures,omitempty" yaml:"consecutiveFailures,omitempty"`
	// FailureRateThreshold: failure rate (percent, in (0, 100]) that trips a
	// windowed breaker. Default 50. Reload: updatable.
	FailureRateThreshold *float64 `json:"failureRateThreshold,omitempty" yaml:"failureRateThreshold,omitempty"`
	// SlowCallDuration: duration from which a call counts as slow. Default 0
	// (no slow-call detection). Reload: fixed between 0 and positive (a
	// pipeline decides at its New whether to time the breaker's calls),
	// unless a per-call listener already makes the breaker time them;
	// updatable between positive values.
	SlowCallDuration *Duration `json:"slowCallDuration,omitempty" yaml:"slowCallDuration,omitempty"`
	// SlowCallRateThreshold: slow-call rate (percent) that trips. Default 100.
	// Reload: updatable.
	SlowCallRateThreshold *float64 `json:"slowCallRateThreshold,omitempty" yaml:"slowCallRateThreshold,omitempty"`
	// MinimumCalls: calls a window must hold before a rate is judged. Default
	// 10 (capped at windowSize). Reload: updatable.
	MinimumCalls *int `json:"minimumCalls,omitempty" yaml:"minimumCalls,omitempty"`
	// OpenDuration: how long the breaker stays open after a trip from closed.
	// Default 5s. Reload: updatable.
	OpenDuration *Duration `json:"openDuration,omitempty" yaml:"openDuration,omitempty"`
	// MaxOpenDuration: cap of the open duration as it grows. Default max(60s,
	// openDuration). Reload: updatable.
	MaxOpenDuration *Duration `json:"maxOpenDuration,omitempty" yaml:"maxOpenDuration,omitempty"`
	// OpenBackoffFactor: growth of the open duration after each failed
	// half-open period (at least 1). Default 2. Reload: updatable.
	OpenBackoffFactor *float64 `json:"openBackoffFactor,omitempty" yaml:"openBackoffFactor,omitempty"`
	// OpenJitter: fraction in [0, 1) by which each open duration is shortened
	// at random. Default 0. Reload: updatable.
	OpenJitter *float64 `json:"openJitter,omitempty" yaml:"openJitter,omitempty"`
	// HalfOpenProbes: calls admitted in one half-open period (at most 255).
	// Default 5. Reload: updatable.
	HalfOpenProbes *int `json:"halfOpenProbes,omitempty" yaml:"halfOpenProbes,omitempty"`
	// HalfOpenMaxConcurrent: probes in flight at once. Default halfOpenProbes.
	// Reload: updatable.
	HalfOpenMaxConcurrent *int `json:"halfOpenMaxConcurrent,omitempty" yaml:"halfOpenMaxConcurrent,omitempty"`
	// HalfOpenSuccesses: successful probes that close the breaker. Default 0
	// (judge the probes by the thresholds). Reload: updatable.
	HalfOpenSuccesses *int `json:"halfOpenSuccesses,omitempty" yaml:"halfOpenSuccesses,omitempty"`
	// MaxHalfOpenDuration: how long a half-open period waits on its probes.
	// Default 0 (no bound). Reload: updatable.
	MaxHalfOpenDuration *Duration `json:"maxHalfOpenDuration,omitempty" yaml:"maxHalfOpenDuration,omitempty"`
}

// RateLimiterSpec configures a ratelimit.Limiter: one of the three rate
// forms (rate and burst; limit per period; capacity and refillRate).
type RateLimiterSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Rate: admissions per second (1e-9 to 1e9), with burst. Default none: set
	// one rate form. Reload: updatable.
	Rate *float64 `json:"rate,omitempty" yaml:"rate,omitempty"`
	// Burst: admissions back to back after an idle period. Default 1 (rate),
	// limit, capacity. Reload: updatable.
	Burst *int `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Limit: admissions per period. Default none. Reload: updatable.
	Limit *int `json:"limit,omitempty" yaml:"limit,omitempty"`
	// Period: the window of limit (changes only with limit set). Default 1s.
	// Reload: updatable.
	Period *Duration `json:"period,omitempty" yaml:"period,omitempty"`
	// Capacity: token bucket size (with refillRate). Default none. Reload:
	// updatable.
	Capacity *int `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	// RefillRate: token bucket refill, tokens per second (with capacity).
	// Default none. Reload: updatable.
	RefillRate *float64 `json:"refillRate,omitempty" yaml:"refillRate,omitempty"`
	// CountStats: count admissions and rejections in Stats. Default false.
	// Reload: fixed.
	CountStats *bool `json:"countStats,omitempty" yaml:"countStats,omitempty"`
	// Compact: the policy's Config.Compact: no cache-line padding (smaller,
	// for many cold instances). Default false. Reload: fixed.
	Compact *bool `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// ShardedRateLimiterSpec configures a ratelimit.Sharded: the total limit,
// split between Shards sub-limiters.
type ShardedRateLimiterSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Rate: total admissions per second, split between the shards. Default
	// none: set one rate form. Reload: updatable.
	Rate *float64 `json:"rate,omitempty" yaml:"rate,omitempty"`
	// Burst: total burst, split between the shards. Default 1 (rate), limit,
	// capacity. Reload: updatable.
	Burst *int `json:"burst,omitempty" yaml:"burst,omitempty"`
	// Limit: total admissions per period. Default none. Reload: updatable.
	Limit *int `json:"limit,omitempty" yaml:"limit,omitempty"`
	// Period: the window of limit (changes only with limit set). Default 1s.
	// Reload: updatable.
	Period *Duration `json:"period,omitempty" yaml:"period,omitempty"`
	// Capacity: total token bucket size. Default none. Reload: updatable.
	Capacity *int `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	// RefillRate: total token bucket refill per second. Default none. Reload:
	// updatable.
	RefillRate *float64 `json:"refillRate,omitempty" yaml:"refillRate,omitempty"`
	// CountStats: count admissions and rejections in Stats. Default false.
	// Reload: fixed.
	CountStats *bool `json:"countStats,omitempty" yaml:"countStats,omitempty"`
	// Shards: sub-limiters. Default GOMAXPROCS (at most 64). Reload: fixed.
	Shards *int `json:"shards,omitempty" yaml:"shards,omitempty"`
}

// BulkheadSpec configures a bulkhead.Bulkhead.
type BulkheadSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Max: calls in flight at once. Default none: required, at least 1.
	// Reload: updatable.
	Max *int `json:"max,omitempty" yaml:"max,omitempty"`
	// MaxWait: how long a call waits for a permit. Default 0 (fail fast).
	// Reload: fixed between 0 and positive.
	MaxWait *Duration `json:"maxWait,omitempty" yaml:"maxWait,omitempty"`
	// Compact: the policy's Config.Compact: no cache-line padding (smaller,
	// for many cold instances). Default false. Reload: fixed.
	Compact *bool `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// AdaptiveSpec configures an adaptive.Limiter.
type AdaptiveSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Algorithm: exactly one of vegas, aimd, gradient2; another algorithm
	// starts afresh at the kept limit. Default vegas with its defaults.
	// Reload: updatable.
	Algorithm *AlgorithmSpec `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	// InitialLimit: limit before the first window (validated, not applied by a
	// reload). Default 20. Reload: updatable.
	InitialLimit *int `json:"initialLimit,omitempty" yaml:"initialLimit,omitempty"`
	// MinLimit: least limit. Default 1. Reload: updatable.
	MinLimit *int `json:"minLimit,omitempty" yaml:"minLimit,omitempty"`
	// MaxLimit: greatest limit. Default 1000. Reload: updatable.
	MaxLimit *int `json:"maxLimit,omitempty" yaml:"maxLimit,omitempty"`
	// Window: least duration of an aggregation window. Default 1s. Reload:
	// updatable.
	Window *Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// MinWindowSamples: successful calls a window must hold before it ends.
	// Default 10. Reload: updatable.
	MinWindowSamples *int `json:"minWindowSamples,omitempty" yaml:"minWindowSamples,omitempty"`
	// Partitions: shares of the limit by priority (summing to at most 1);
	// shares updatable. Default none. Reload: fixed their number.
	Partitions []PartitionSpec `json:"partitions,omitempty" yaml:"partitions,omitempty"`
	// Queue: the waiting queue (CoDel, adaptive LIFO). Default no queue.
	// Reload: updatable.
	Queue *QueueSpec `json:"queue,omitempty" yaml:"queue,omitempty"`
	// MaxSampleStride: at least one call in this many is timed (a power of
	// two, 1 to 1024). Default 64. Reload: updatable.
	MaxSampleStride *int `json:"maxSampleStride,omitempty" yaml:"maxSampleStride,omitempty"`
	// Compact: the policy's Config.Compact: no cache-line padding (smaller,
	// for many cold instances). Default false. Reload: fixed.
	Compact *bool `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// AlgorithmSpec names an adaptive limiter's algorithm: exactly one of its
// fields is set.
type AlgorithmSpec struct {
	// Vegas: Vegas: queue estimated from the RTT (Netflix concurrency-limits
	// VegasLimit). Reload: updatable.
	Vegas *VegasSpec `json:"vegas,omitempty" yaml:"vegas,omitempty"`
	// AIMD: AIMD: additive increase, multiplicative decrease. Reload:
	// updatable.
	AIMD *AIMDSpec `json:"aimd,omitempty" yaml:"aimd,omitempty"`
	// Gradient2: Gradient2: short against long RTT average (Netflix
	// concurrency-limits Gradient2Limit). Reload: updatable.
	Gradient2 *Gradient2Spec `json:"gradient2,omitempty" yaml:"gradient2,omitempty"`
}

// VegasSpec is adaptive.Vegas.
type VegasSpec struct {
	// Alpha: lower queue target, times log10(limit). Default 2. Reload:
	// updatable.
	Alpha *float64 `json:"alpha,omitempty" yaml:"alpha,omitempty"`
	// Beta: upper queue target, times log10(limit); above alpha. Default 4.
	// Reload: updatable.
	Beta *float64 `json:"beta,omitempty" yaml:"beta,omitempty"`
	// Smoothing: weight of the new limit, in (0, 1]. Default 1. Reload:
	// updatable.
	Smoothing *float64 `json:"smoothing,omitempty" yaml:"smoothing,omitempty"`
	// ProbeInterval: windows between RTT baseline re-measurements; negative
	// disables. Default 100. Reload: updatable.
	ProbeInterval *int `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
	// ProbeLimit: limit held during a re-measurement. Default 1. Reload:
	// updatable.
	ProbeLimit *int `json:"probeLimit,omitempty" yaml:"probeLimit,omitempty"`
	// DropThreshold: drop rate above which a window is a loss. Default 0.05.
	// Reload: updatable.
	DropThreshold *float64 `json:"dropThreshold,omitempty" yaml:"dropThreshold,omitempty"`
}

// AIMDSpec is adaptive.AIMD.
type AIMDSpec struct {
	// Backoff: factor of the limit after a loss, in (0, 1). Default 0.9.
	// Reload: updatable.
	Backoff *float64 `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	// Increase: limit added after a window without loss. Default 1. Reload:
	// updatable.
	Increase *float64 `json:"increase,omitempty" yaml:"increase,omitempty"`
	// Timeout: RTT from which a window is a loss. Default 0 (only failures are
	// losses). Reload: updatable.
	Timeout *Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// DropThreshold: drop rate above which a window is a loss. Default 0.05.
	// Reload: updatable.
	DropThreshold *float64 `json:"dropThreshold,omitempty" yaml:"dropThreshold,omitempty"`
}

// Gradient2Spec is adaptive.Gradient2.
type Gradient2Spec struct {
	// Tolerance: RTT ratio tolerated before the limit shrinks, at least 1.
	// Default 1.05. Reload: updatable.
	Tolerance *float64 `json:"tolerance,omitempty" yaml:"tolerance,omitempty"`
	// QueueSize: headroom added every window. Default 4. Reload: updatable.
	QueueSize *float64 `json:"queueSize,omitempty" yaml:"queueSize,omitempty"`
	// Smoothing: weight of the new limit, in (0, 1]. Default 0.2. Reload:
	// updatable.
	Smoothing *float64 `json:"smoothing,omitempty" yaml:"smoothing,omitempty"`
	// LongWindow: windows of the long RTT average. Default 600. Reload:
	// updatable.
	LongWindow *int `json:"longWindow,omitempty" yaml:"longWindow,omitempty"`
	// ProbeInterval: windows between re-measurements; negative disables.
	// Default 100. Reload: updatable.
	ProbeInterval *int `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
	// ProbeLimit: limit held during a re-measurement. Default 1. Reload:
	// updatable.
	ProbeLimit *int `json:"probeLimit,omitempty" yaml:"probeLimit,omitempty"`
}

// PartitionSpec is adaptive.Partition.
type PartitionSpec struct {
	// Name: for humans; unused by the limiter. Default "". Reload: updatable.
	Name *string `json:"name,omitempty" yaml:"name,omitempty"`
	// Share: fraction of the limit reserved, in [0, 1]. Default 0. Reload:
	// updatable.
	Share *float64 `json:"share,omitempty" yaml:"share,omitempty"`
}

// QueueSpec is adaptive.QueueConfig.
type QueueSpec struct {
	// MaxLength: calls that may wait. Default 0 (no queue). Reload: fixed
	// between 0 and positive.
	MaxLength *int `json:"maxLength,omitempty" yaml:"maxLength,omitempty"`
	// Target: longest wait while overloaded (CoDel's target). Default 5ms.
	// Reload: updatable.
	Target *Duration `json:"target,omitempty" yaml:"target,omitempty"`
	// Interval: time non-empty before overloaded, longest wait otherwise.
	// Default 100ms. Reload: updatable.
	Interval *Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
	// FIFO: serve oldest first always (no adaptive LIFO). Default false.
	// Reload: updatable.
	FIFO *bool `json:"fifo,omitempty" yaml:"fifo,omitempty"`
}

// RetrySpec configures a retry.Policy.
type RetrySpec struct {
	Meta `json:",inline" yaml:",inline"`
	// MaxAttempts: attempts in all, the first included. Default 3. Reload:
	// updatable.
	MaxAttempts *int `json:"maxAttempts,omitempty" yaml:"maxAttempts,omitempty"`
	// MaxDuration: time from the first attempt's start to the last one's.
	// Default 0 (no limit). Reload: fixed between 0 and positive.
	MaxDuration *Duration `json:"maxDuration,omitempty" yaml:"maxDuration,omitempty"`
	// Backoff: full-jitter, exponential, constant, linear, equal-jitter or
	// decorrelated-jitter. Default full-jitter. Reload: updatable.
	Backoff *string `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	// BaseDelay: the first delay. Default 100ms. Reload: updatable.
	BaseDelay *Duration `json:"baseDelay,omitempty" yaml:"baseDelay,omitempty"`
	// MaxDelay: cap of every delay and retry-after hint. Default max(10s,
	// baseDelay). Reload: updatable.
	MaxDelay *Duration `json:"maxDelay,omitempty" yaml:"maxDelay,omitempty"`
	// Multiplier: growth factor, at least 1. Default 2 (3 for
	// decorrelated-jitter). Reload: updatable.
	Multiplier *float64 `json:"multiplier,omitempty" yaml:"multiplier,omitempty"`
	// Increment: linear's step. Default baseDelay. Reload: updatable.
	Increment *Duration `json:"increment,omitempty" yaml:"increment,omitempty"`
}

// TimeoutSpec configures a timeout.Timeout.
type TimeoutSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Duration: the timeout, from the start of the call. Default none:
	// required, positive. Reload: updatable.
	Duration *Duration `json:"duration,omitempty" yaml:"duration,omitempty"`
	// Mode: deadline (the context ends) or soft (only classifies). Default
	// deadline. Reload: fixed.
	Mode *string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// Tick: sweep period of the timeout's own watchdog. Default 1ms. Reload:
	// fixed.
	Tick *Duration `json:"tick,omitempty" yaml:"tick,omitempty"`
	// MaxAbandoned: abandoned functions still running before DoAbandon
	// rejects. Default 1000. Reload: updatable.
	MaxAbandoned *int `json:"maxAbandoned,omitempty" yaml:"maxAbandoned,omitempty"`
	// Workers: DoAbandon's reusable worker goroutines. Default 128. Reload:
	// fixed.
	Workers *int `json:"workers,omitempty" yaml:"workers,omitempty"`
}

// HedgeSpec configures a hedge.Hedger.
type HedgeSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Delay: fixed hedging delay (the delay until warmUp with percentile).
	// Default none: required when percentile is 0. Reload: updatable.
	Delay *Duration `json:"delay,omitempty" yaml:"delay,omitempty"`
	// Percentile: the delay is this latency percentile, in [0.5, 1). Default 0
	// (fixed delay). Reload: fixed between 0 and not 0.
	Percentile *float64 `json:"percentile,omitempty" yaml:"percentile,omitempty"`
	// MinDelay: lower clamp of the percentile delay. Default 0. Reload:
	// updatable.
	MinDelay *Duration `json:"minDelay,omitempty" yaml:"minDelay,omitempty"`
	// MaxDelay: upper clamp of the percentile delay. Default 0 (no clamp).
	// Reload: updatable.
	MaxDelay *Duration `json:"maxDelay,omitempty" yaml:"maxDelay,omitempty"`
	// WarmUp: samples before the percentile replaces delay. Default 100.
	// Reload: updatable.
	WarmUp *int `json:"warmUp,omitempty" yaml:"warmUp,omitempty"`
	// Refresh: how often the percentile is recomputed. Default 100ms. Reload:
	// updatable.
	Refresh *Duration `json:"refresh,omitempty" yaml:"refresh,omitempty"`
	// MaxHedges: hedges per call, one delay apart. Default 1. Reload:
	// updatable.
	MaxHedges *int `json:"maxHedges,omitempty" yaml:"maxHedges,omitempty"`
	// AsyncFirst: run the first attempt on its own goroutine. Default false.
	// Reload: fixed.
	AsyncFirst *bool `json:"asyncFirst,omitempty" yaml:"asyncFirst,omitempty"`
	// Tick: tick of the hedger's own watchdog. Default the shared watchdog.
	// Reload: fixed.
	Tick *Duration `json:"tick,omitempty" yaml:"tick,omitempty"`
}

// PipelineSpec configures a pipeline.Pipeline. Each policy slot is either
// a reference to a named instance of the document ({ref: name}) or an
// inline instance, registered as "<pipeline>.<slot>" (db.breaker) in the
// pipeline's groups.
type PipelineSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// Idempotent is pipeline.Config.Idempotent: the calls may be hedged.
	// Default false. Reload: fixed.
	Idempotent *bool `json:"idempotent,omitempty" yaml:"idempotent,omitempty"`
	// CountStats is pipeline.Config.CountStats. Default false.
	// Reload: fixed.
	CountStats *bool `json:"countStats,omitempty" yaml:"countStats,omitempty"`
	// Retry is the pipeline's retry policy.
	Retry *RetrySlot `json:"retry,omitempty" yaml:"retry,omitempty"`
	// Breaker is the pipeline's circuit breaker.
	Breaker *BreakerSlot `json:"breaker,omitempty" yaml:"breaker,omitempty"`
	// RateLimiter is the pipeline's rate limiter.
	RateLimiter *RateSlot `json:"rateLimiter,omitempty" yaml:"rateLimiter,omitempty"`
	// Bulkhead is the pipeline's bulkhead.
	Bulkhead *BulkSlot `json:"bulkhead,omitempty" yaml:"bulkhead,omitempty"`
	// Adaptive is the pipeline's adaptive concurrency limiter.
	Adaptive *AdaptSlot `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	// Timeout is the pipeline's timeout.
	Timeout *TimeoutSlot `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// Hedge is the pipeline's hedger.
	Hedge *HedgeSlot `json:"hedge,omitempty" yaml:"hedge,omitempty"`
	// Shed is the pipeline's overload shedder, its last admission
	// (pipeline.Config.Shed; ShedPriority is set by Options.Configure).
	Shed *ShedSlot `json:"shed,omitempty" yaml:"shed,omitempty"`
}

// Ref names an instance of the document from a pipeline's policy slot.
type Ref struct {
	// Ref is the name of an instance in the section of the slot's kind
	// (breakers for breaker, ...). A slot with a ref has no other field.
	Ref string `json:"ref,omitempty" yaml:"ref,omitempty"`
}

// BreakerSlot is a pipeline's breaker: a reference or an inline spec.
type BreakerSlot struct {
	Ref         `json:",inline" yaml:",inline"`
	BreakerSpec `json:",inline" yaml:",inline"`
}

// RateSlot is a pipeline's rate limiter: a reference or an inline spec.
type RateSlot struct {
	Ref             `json:",inline" yaml:",inline"`
	RateLimiterSpec `json:",inline" yaml:",inline"`
}

// BulkSlot is a pipeline's bulkhead: a reference or an inline spec.
type BulkSlot struct {
	Ref          `json:",inline" yaml:",inline"`
	BulkheadSpec `json:",inline" yaml:",inline"`
}

// AdaptSlot is a pipeline's adaptive limiter: a reference or an inline
// spec.
type AdaptSlot struct {
	Ref          `json:",inline" yaml:",inline"`
	AdaptiveSpec `json:",inline" yaml:",inline"`
}

// RetrySlot is a pipeline's retry policy: a reference or an inline spec.
type RetrySlot struct {
	Ref       `json:",inline" yaml:",inline"`
	RetrySpec `json:",inline" yaml:",inline"`
}

// TimeoutSlot is a pipeline's timeout: a reference or an inline spec.
type TimeoutSlot struct {
	Ref         `json:",inline" yaml:",inline"`
	TimeoutSpec `json:",inline" yaml:",inline"`
}

// HedgeSlot is a pipeline's hedger: a reference or an inline spec.
type HedgeSlot struct {
	Ref       `json:",inline" yaml:",inline"`
	HedgeSpec `json:",inline" yaml:",inline"`
}

// ShedSlot is a pipeline's overload shedder: a reference or an inline
// spec.
type ShedSlot struct {
	Ref      `json:",inline" yaml:",inline"`
	ShedSpec `json:",inline" yaml:",inline"`
}

// ShedSpec configures a shed.Shedder, the overload shedder. A Shedder has
// no Update: a reload that changes any of its fields needs replace: true.
// Its code-level fields (Source, Ignore, Classify, OnOverload, Ticker)
// are set by Options.Configure.
type ShedSpec struct {
	Meta `json:",inline" yaml:",inline"`
	// SampleInterval: least time between two samples of the signals (at
	// least 1ms). Default 100ms. Reload: fixed.
	SampleInterval *Duration `json:"sampleInterval,omitempty" yaml:"sampleInterval,omitempty"`
	// Window: span of the buckets the cap is computed from. Default 1s.
	// Reload: fixed.
	Window *Duration `json:"window,omitempty" yaml:"window,omitempty"`
	// CoolOff: how long the shedder stays overloaded after its last
	// rejection once the signals are cold. Default 1s. Reload: fixed.
	CoolOff *Duration `json:"coolOff,omitempty" yaml:"coolOff,omitempty"`
	// Hysteresis: fraction below its threshold a signal must fall to to
	// release, in [0, 1). Default 0.2. Reload: fixed.
	Hysteresis *float64 `json:"hysteresis,omitempty" yaml:"hysteresis,omitempty"`
	// SchedLatencyThreshold: p99 scheduling latency that engages it.
	// Default 10ms. Reload: fixed.
	SchedLatencyThreshold *Duration `json:"schedLatencyThreshold,omitempty" yaml:"schedLatencyThreshold,omitempty"`
	// CPUThreshold: busy share of GOMAXPROCS that engages it, in (0, 1].
	// Default 0.9. Reload: fixed.
	CPUThreshold *float64 `json:"cpuThreshold,omitempty" yaml:"cpuThreshold,omitempty"`
	// RunnableThreshold: runnable goroutines per P that engage it. Default
	// 4. Reload: fixed.
	RunnableThreshold *float64 `json:"runnableThreshold,omitempty" yaml:"runnableThreshold,omitempty"`
	// InFlightThreshold: calls in flight that engage it. Default 0 (off).
	// Reload: fixed.
	InFlightThreshold *int `json:"inFlightThreshold,omitempty" yaml:"inFlightThreshold,omitempty"`
	// LatencyThreshold: mean latency of the calls that engages it. Default
	// 0 (off). Reload: fixed.
	LatencyThreshold *Duration `json:"latencyThreshold,omitempty" yaml:"latencyThreshold,omitempty"`
	// Priorities: priority levels, 0 the most important (at most 64).
	// Default 1. Reload: fixed.
	Priorities *int `json:"priorities,omitempty" yaml:"priorities,omitempty"`
	// PriorityReserve: fraction of the cap each level keeps from the level
	// below it, in [0, 1). Default 0.1 with several priorities. Reload:
	// fixed.
	PriorityReserve *float64 `json:"priorityReserve,omitempty" yaml:"priorityReserve,omitempty"`
	// MaxSampleStride: at least one call in this many is timed (a power of
	// two, 1 to 1024). Default 64. Reload: fixed.
	MaxSampleStride *int `json:"maxSampleStride,omitempty" yaml:"maxSampleStride,omitempty"`
	// Compact: the policy's Config.Compact: no cache-line padding (smaller,
	// for many cold instances). Default false. Reload: fixed.
	Compact *bool `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// Defaults holds one spec per kind, inherited field by field by every
// instance of that kind (named or inline): a field an instance sets
// overrides the default's; queue, algorithm and partitions are taken
// whole.
type Defaults struct {
	// Breaker is inherited by every breaker.
	Breaker *BreakerSpec `json:"breaker,omitempty" yaml:"breaker,omitempty"`
	// RateLimiter is inherited by every rate limiter.
	RateLimiter *RateLimiterSpec `json:"rateLimiter,omitempty" yaml:"rateLimiter,omitempty"`
	// ShardedRateLimiter is inherited by every sharded rate limiter.
	ShardedRateLimiter *ShardedRateLimiterSpec `json:"shardedRateLimiter,omitempty" yaml:"shardedRateLimiter,omitempty"`
	// Bulkhead is inherited by every bulkhead.
	Bulkhead *BulkheadSpec `json:"bulkhead,omitempty" yaml:"bulkhead,omitempty"`
	// Adaptive is inherited by every adaptive limiter.
	Adaptive *AdaptiveSpec `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	// Retry is inherited by every retry policy.
	Retry *RetrySpec `json:"retry,omitempty" yaml:"retry,omitempty"`
	// Timeout is inherited by every timeout.
	Timeout *TimeoutSpec `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	// Hedge is inherited by every hedger.
	Hedge *HedgeSpec `json:"hedge,omitempty" yaml:"hedge,omitempty"`
	// Shed is inherited by every overload shedder.
	Shed *ShedSpec `json:"shed,omitempty" yaml:"shed,omitempty"`
}
