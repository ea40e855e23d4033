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
	// inherits the defaults' groups and an inline policy of a pipeline the
	// pipeline's.
	Groups []string `json:"groups,omitempty" yaml:"groups,omitempty"`
	// Replace lets a reload rebuild the instance when a field fixed at
	// construction changes: a new instance replaces the old one in the
	// registry (and in the pipelines that use it, which are rebuilt too).
	// Callers that hold the old instance keep using it. Without it such a
	// change is an error naming the field.
	Replace bool `json:"replace,omitempty" yaml:"replace,omitempty"`
}

// BreakerSpec configures a circuitbreaker.Breaker.
type BreakerSpec struct {
	Meta                  `json:",inline" yaml:",inline"`
	Compact               *bool     `json:"compact,omitempty" yaml:"compact,omitempty"`
	Mode                  *string   `json:"mode,omitempty" yaml:"mode,omitempty"`
	WindowSize            *int      `json:"windowSize,omitempty" yaml:"windowSize,omitempty"`
	TimeWindow            *Duration `json:"timeWindow,omitempty" yaml:"timeWindow,omitempty"`
	Buckets               *int      `json:"buckets,omitempty" yaml:"buckets,omitempty"`
	ConsecutiveFailures   *int      `json:"consecutiveFailures,omitempty" yaml:"consecutiveFailures,omitempty"`
	FailureRateThreshold  *float64  `json:"failureRateThreshold,omitempty" yaml:"failureRateThreshold,omitempty"`
	SlowCallDuration      *Duration `json:"slowCallDuration,omitempty" yaml:"slowCallDuration,omitempty"`
	SlowCallRateThreshold *float64  `json:"slowCallRateThreshold,omitempty" yaml:"slowCallRateThreshold,omitempty"`
	MinimumCalls          *int      `json:"minimumCalls,omitempty" yaml:"minimumCalls,omitempty"`
	OpenDuration          *Duration `json:"openDuration,omitempty" yaml:"openDuration,omitempty"`
	MaxOpenDuration       *Duration `json:"maxOpenDuration,omitempty" yaml:"maxOpenDuration,omitempty"`
	OpenBackoffFactor     *float64  `json:"openBackoffFactor,omitempty" yaml:"openBackoffFactor,omitempty"`
	OpenJitter            *float64  `json:"openJitter,omitempty" yaml:"openJitter,omitempty"`
	HalfOpenProbes        *int      `json:"halfOpenProbes,omitempty" yaml:"halfOpenProbes,omitempty"`
	HalfOpenMaxConcurrent *int      `json:"halfOpenMaxConcurrent,omitempty" yaml:"halfOpenMaxConcurrent,omitempty"`
	HalfOpenSuccesses     *int      `json:"halfOpenSuccesses,omitempty" yaml:"halfOpenSuccesses,omitempty"`
	MaxHalfOpenDuration   *Duration `json:"maxHalfOpenDuration,omitempty" yaml:"maxHalfOpenDuration,omitempty"`
}

// RateLimiterSpec configures a ratelimit.Limiter: one of the three rate
// forms (rate and burst; limit per period; capacity and refillRate).
type RateLimiterSpec struct {
	Meta       `json:",inline" yaml:",inline"`
	Rate       *float64  `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst      *int      `json:"burst,omitempty" yaml:"burst,omitempty"`
	Limit      *int      `json:"limit,omitempty" yaml:"limit,omitempty"`
	Period     *Duration `json:"period,omitempty" yaml:"period,omitempty"`
	Capacity   *int      `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	RefillRate *float64  `json:"refillRate,omitempty" yaml:"refillRate,omitempty"`
	CountStats *bool     `json:"countStats,omitempty" yaml:"countStats,omitempty"`
	Compact    *bool     `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// ShardedRateLimiterSpec configures a ratelimit.Sharded: the total limit,
// split between Shards sub-limiters.
type ShardedRateLimiterSpec struct {
	Meta       `json:",inline" yaml:",inline"`
	Rate       *float64  `json:"rate,omitempty" yaml:"rate,omitempty"`
	Burst      *int      `json:"burst,omitempty" yaml:"burst,omitempty"`
	Limit      *int      `json:"limit,omitempty" yaml:"limit,omitempty"`
	Period     *Duration `json:"period,omitempty" yaml:"period,omitempty"`
	Capacity   *int      `json:"capacity,omitempty" yaml:"capacity,omitempty"`
	RefillRate *float64  `json:"refillRate,omitempty" yaml:"refillRate,omitempty"`
	CountStats *bool     `json:"countStats,omitempty" yaml:"countStats,omitempty"`
	Shards     *int      `json:"shards,omitempty" yaml:"shards,omitempty"`
}

// BulkheadSpec configures a bulkhead.Bulkhead.
type BulkheadSpec struct {
	Meta    `json:",inline" yaml:",inline"`
	Max     *int      `json:"max,omitempty" yaml:"max,omitempty"`
	MaxWait *Duration `json:"maxWait,omitempty" yaml:"maxWait,omitempty"`
	Compact *bool     `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// AdaptiveSpec configures an adaptive.Limiter.
type AdaptiveSpec struct {
	Meta             `json:",inline" yaml:",inline"`
	Algorithm        *AlgorithmSpec  `json:"algorithm,omitempty" yaml:"algorithm,omitempty"`
	InitialLimit     *int            `json:"initialLimit,omitempty" yaml:"initialLimit,omitempty"`
	MinLimit         *int            `json:"minLimit,omitempty" yaml:"minLimit,omitempty"`
	MaxLimit         *int            `json:"maxLimit,omitempty" yaml:"maxLimit,omitempty"`
	Window           *Duration       `json:"window,omitempty" yaml:"window,omitempty"`
	MinWindowSamples *int            `json:"minWindowSamples,omitempty" yaml:"minWindowSamples,omitempty"`
	Partitions       []PartitionSpec `json:"partitions,omitempty" yaml:"partitions,omitempty"`
	Queue            *QueueSpec      `json:"queue,omitempty" yaml:"queue,omitempty"`
	MaxSampleStride  *int            `json:"maxSampleStride,omitempty" yaml:"maxSampleStride,omitempty"`
	Compact          *bool           `json:"compact,omitempty" yaml:"compact,omitempty"`
}

// AlgorithmSpec names an adaptive limiter's algorithm: exactly one of its
// fields is set.
type AlgorithmSpec struct {
	Vegas     *VegasSpec     `json:"vegas,omitempty" yaml:"vegas,omitempty"`
	AIMD      *AIMDSpec      `json:"aimd,omitempty" yaml:"aimd,omitempty"`
	Gradient2 *Gradient2Spec `json:"gradient2,omitempty" yaml:"gradient2,omitempty"`
}

// VegasSpec is adaptive.Vegas.
type VegasSpec struct {
	Alpha         *float64 `json:"alpha,omitempty" yaml:"alpha,omitempty"`
	Beta          *float64 `json:"beta,omitempty" yaml:"beta,omitempty"`
	Smoothing     *float64 `json:"smoothing,omitempty" yaml:"smoothing,omitempty"`
	ProbeInterval *int     `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
	ProbeLimit    *int     `json:"probeLimit,omitempty" yaml:"probeLimit,omitempty"`
	DropThreshold *float64 `json:"dropThreshold,omitempty" yaml:"dropThreshold,omitempty"`
}

// AIMDSpec is adaptive.AIMD.
type AIMDSpec struct {
	Backoff       *float64  `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	Increase      *float64  `json:"increase,omitempty" yaml:"increase,omitempty"`
	Timeout       *Duration `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	DropThreshold *float64  `json:"dropThreshold,omitempty" yaml:"dropThreshold,omitempty"`
}

// Gradient2Spec is adaptive.Gradient2.
type Gradient2Spec struct {
	Tolerance     *float64 `json:"tolerance,omitempty" yaml:"tolerance,omitempty"`
	QueueSize     *float64 `json:"queueSize,omitempty" yaml:"queueSize,omitempty"`
	Smoothing     *float64 `json:"smoothing,omitempty" yaml:"smoothing,omitempty"`
	LongWindow    *int     `json:"longWindow,omitempty" yaml:"longWindow,omitempty"`
	ProbeInterval *int     `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty"`
	ProbeLimit    *int     `json:"probeLimit,omitempty" yaml:"probeLimit,omitempty"`
}

// PartitionSpec is adaptive.Partition.
type PartitionSpec struct {
	Name  *string  `json:"name,omitempty" yaml:"name,omitempty"`
	Share *float64 `json:"share,omitempty" yaml:"share,omitempty"`
}

// QueueSpec is adaptive.QueueConfig.
type QueueSpec struct {
	MaxLength *int      `json:"maxLength,omitempty" yaml:"maxLength,omitempty"`
	Target    *Duration `json:"target,omitempty" yaml:"target,omitempty"`
	Interval  *Duration `json:"interval,omitempty" yaml:"interval,omitempty"`
	FIFO      *bool     `json:"fifo,omitempty" yaml:"fifo,omitempty"`
}

// RetrySpec configures a retry.Policy.
type RetrySpec struct {
	Meta        `json:",inline" yaml:",inline"`
	MaxAttempts *int      `json:"maxAttempts,omitempty" yaml:"maxAttempts,omitempty"`
	MaxDuration *Duration `json:"maxDuration,omitempty" yaml:"maxDuration,omitempty"`
	Backoff     *string   `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	BaseDelay   *Duration `json:"baseDelay,omitempty" yaml:"baseDelay,omitempty"`
	MaxDelay    *Duration `json:"maxDelay,omitempty" yaml:"maxDelay,omitempty"`
	Multiplier  *float64  `json:"multiplier,omitempty" yaml:"multiplier,omitempty"`
	Increment   *Duration `json:"increment,omitempty" yaml:"increment,omitempty"`
}

// TimeoutSpec configures a timeout.Timeout.
type TimeoutSpec struct {
	Meta         `json:",inline" yaml:",inline"`
	Duration     *Duration `json:"duration,omitempty" yaml:"duration,omitempty"`
	Mode         *string   `json:"mode,omitempty" yaml:"mode,omitempty"`
	Tick         *Duration `json:"tick,omitempty" yaml:"tick,omitempty"`
	MaxAbandoned *int      `json:"maxAbandoned,omitempty" yaml:"maxAbandoned,omitempty"`
	Workers      *int      `json:"workers,omitempty" yaml:"workers,omitempty"`
}

// HedgeSpec configures a hedge.Hedger.
type HedgeSpec struct {
	Meta       `json:",inline" yaml:",inline"`
	Delay      *Duration `json:"delay,omitempty" yaml:"delay,omitempty"`
	Percentile *float64  `json:"percentile,omitempty" yaml:"percentile,omitempty"`
	MinDelay   *Duration `json:"minDelay,omitempty" yaml:"minDelay,omitempty"`
	MaxDelay   *Duration `json:"maxDelay,omitempty" yaml:"maxDelay,omitempty"`
	WarmUp     *int      `json:"warmUp,omitempty" yaml:"warmUp,omitempty"`
	Refresh    *Duration `json:"refresh,omitempty" yaml:"refresh,omitempty"`
	MaxHedges  *int      `json:"maxHedges,omitempty" yaml:"maxHedges,omitempty"`
	AsyncFirst *bool     `json:"asyncFirst,omitempty" yaml:"asyncFirst,omitempty"`
	Tick       *Duration `json:"tick,omitempty" yaml:"tick,omitempty"`
}

// PipelineSpec configures a pipeline.Pipeline. Each policy slot is either
// a reference to a named instance of the document ({ref: name}) or an
// inline instance, registered as "<pipeline>.<slot>" (db.breaker) in the
// pipeline's groups.
type PipelineSpec struct {
	Meta          `json:",inline" yaml:",inline"`
	Idempotent    *bool        `json:"idempotent,omitempty" yaml:"idempotent,omitempty"`
	CountOutcomes *bool        `json:"countOutcomes,omitempty" yaml:"countOutcomes,omitempty"`
	Retry         *RetrySlot   `json:"retry,omitempty" yaml:"retry,omitempty"`
	Breaker       *BreakerSlot `json:"breaker,omitempty" yaml:"breaker,omitempty"`
	RateLimiter   *RateSlot    `json:"rateLimiter,omitempty" yaml:"rateLimiter,omitempty"`
	Bulkhead      *BulkSlot    `json:"bulkhead,omitempty" yaml:"bulkhead,omitempty"`
	Adaptive      *AdaptSlot   `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	Timeout       *TimeoutSlot `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Hedge         *HedgeSlot   `json:"hedge,omitempty" yaml:"hedge,omitempty"`
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

// Defaults holds one spec per kind, inherited field by field by every
// instance of that kind (named or inline): a field an instance sets
// overrides the default's; queue, algorithm and partitions are taken
// whole.
type Defaults struct {
	Breaker            *BreakerSpec            `json:"breaker,omitempty" yaml:"breaker,omitempty"`
	RateLimiter        *RateLimiterSpec        `json:"rateLimiter,omitempty" yaml:"rateLimiter,omitempty"`
	ShardedRateLimiter *ShardedRateLimiterSpec `json:"shardedRateLimiter,omitempty" yaml:"shardedRateLimiter,omitempty"`
	Bulkhead           *BulkheadSpec           `json:"bulkhead,omitempty" yaml:"bulkhead,omitempty"`
	Adaptive           *AdaptiveSpec           `json:"adaptive,omitempty" yaml:"adaptive,omitempty"`
	Retry              *RetrySpec              `json:"retry,omitempty" yaml:"retry,omitempty"`
	Timeout            *TimeoutSpec            `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	Hedge              *HedgeSpec              `json:"hedge,omitempty" yaml:"hedge,omitempty"`
}
