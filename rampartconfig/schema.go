package rampartconfig

// fieldDoc is the reference of one document field, rendered into
// docs/config.md. A test checks that every spec field has one, and that a
// reload changing the field to sample is applied when fixed is empty and
// refused naming the field otherwise.
type fieldDoc struct {
	def    string // the default when absent
	fixed  string // when a reload may not change it ("" = updatable)
	sample string // a valid value differing from the test's base (YAML), or "=" and a whole instance
	about  string // one line
}

// schemaBase is the smallest valid instance of each kind, the base of the
// reload test.
var schemaBase = map[string]string{
	"breaker":            "{}",
	"rateLimiter":        "{rate: 10}",
	"shardedRateLimiter": "{rate: 100, shards: 2}",
	"bulkhead":           "{max: 2}",
	"adaptive":           "{}",
	"retry":              "{}",
	"timeout":            "{duration: 1s}",
	"hedge":              "{delay: 10ms}",
	"shed":               "{}",
}

// schemaDocs documents every field of every kind, by "kind.path".
var schemaDocs = map[string]fieldDoc{
	"breaker.compact":               {"false", "always", "true", "the policy's Config.Compact: no cache-line padding (smaller, for many cold instances)"},
	"breaker.mode":                  {"count", "always", "consecutive", "count, time or consecutive: how health is judged when closed"},
	"breaker.windowSize":            {"100", "always", "20", "calls a count window judges (at most 1048576)"},
	"breaker.timeWindow":            {"10s", "always", "20s", "span a time window judges"},
	"breaker.buckets":               {"10", "always", "20", "buckets of a time window (at most 1024)"},
	"breaker.consecutiveFailures":   {"5", "", "7", "failures in a row that trip a consecutive breaker"},
	"breaker.failureRateThreshold":  {"50", "", "25", "failure rate (percent, in (0, 100]) that trips a windowed breaker"},
	"breaker.slowCallDuration":      {"0 (no slow-call detection)", "between 0 and positive (unless a per-call listener times the calls)", "1s", "duration from which a call counts as slow"},
	"breaker.slowCallRateThreshold": {"100", "", "80", "slow-call rate (percent) that trips"},
	"breaker.minimumCalls":          {"10 (capped at windowSize)", "", "20", "calls a window must hold before a rate is judged"},
	"breaker.openDuration":          {"5s", "", "2s", "how long the breaker stays open after a trip from closed"},
	"breaker.maxOpenDuration":       {"max(60s, openDuration)", "", "2m", "cap of the open duration as it grows"},
	"breaker.openBackoffFactor":     {"2", "", "3", "growth of the open duration after each failed half-open period (at least 1)"},
	"breaker.openJitter":            {"0", "", "0.2", "fraction in [0, 1) by which each open duration is shortened at random"},
	"breaker.halfOpenProbes":        {"5", "", "7", "calls admitted in one half-open period (at most 255)"},
	"breaker.halfOpenMaxConcurrent": {"halfOpenProbes", "", "2", "probes in flight at once"},
	"breaker.halfOpenSuccesses":     {"0 (judge the probes by the thresholds)", "", "3", "successful probes that close the breaker"},
	"breaker.maxHalfOpenDuration":   {"0 (no bound)", "", "30s", "how long a half-open period waits on its probes"},

	"rateLimiter.rate":       {"none: set one rate form", "", "20", "admissions per second (1e-9 to 1e9), with burst"},
	"rateLimiter.burst":      {"1 (rate), limit, capacity", "", "5", "admissions back to back after an idle period"},
	"rateLimiter.limit":      {"none", "", "={limit: 30}", "admissions per period"},
	"rateLimiter.period":     {"1s", "", "={limit: 30, period: 2s}", "the window of limit (changes only with limit set)"},
	"rateLimiter.capacity":   {"none", "", "={capacity: 8, refillRate: 3}", "token bucket size (with refillRate)"},
	"rateLimiter.refillRate": {"none", "", "={capacity: 8, refillRate: 3}", "token bucket refill, tokens per second (with capacity)"},
	"rateLimiter.countStats": {"false", "always", "true", "count admissions and rejections in Stats"},
	"rateLimiter.compact":    {"false", "always", "true", "the policy's Config.Compact: no cache-line padding (smaller, for many cold instances)"},

	"shardedRateLimiter.rate":       {"none: set one rate form", "", "200", "total admissions per second, split between the shards"},
	"shardedRateLimiter.burst":      {"1 (rate), limit, capacity", "", "10", "total burst, split between the shards"},
	"shardedRateLimiter.limit":      {"none", "", "={limit: 300, shards: 2}", "total admissions per period"},
	"shardedRateLimiter.period":     {"1s", "", "={limit: 300, period: 2s, shards: 2}", "the window of limit (changes only with limit set)"},
	"shardedRateLimiter.capacity":   {"none", "", "={capacity: 80, refillRate: 30, shards: 2}", "total token bucket size"},
	"shardedRateLimiter.refillRate": {"none", "", "={capacity: 80, refillRate: 30, shards: 2}", "total token bucket refill per second"},
	"shardedRateLimiter.countStats": {"false", "always", "true", "count admissions and rejections in Stats"},
	"shardedRateLimiter.shards":     {"GOMAXPROCS (at most 64)", "always", "3", "sub-limiters"},

	"bulkhead.max":     {"none: required, at least 1", "", "5", "calls in flight at once"},
	"bulkhead.maxWait": {"0 (fail fast)", "between 0 and positive", "1s", "how long a call waits for a permit"},
	"bulkhead.compact": {"false", "always", "true", "the policy's Config.Compact: no cache-line padding (smaller, for many cold instances)"},

	"adaptive.algorithm":                         {"vegas with its defaults", "", "{aimd: {}}", "exactly one of vegas, aimd, gradient2; another algorithm starts afresh at the kept limit"},
	"adaptive.algorithm.vegas":                   {"", "", "{vegas: {alpha: 3}}", "Vegas: queue estimated from the RTT (Netflix concurrency-limits VegasLimit)"},
	"adaptive.algorithm.vegas.alpha":             {"2", "", "{vegas: {alpha: 3}}", "lower queue target, times log10(limit)"},
	"adaptive.algorithm.vegas.beta":              {"4", "", "{vegas: {beta: 6}}", "upper queue target, times log10(limit); above alpha"},
	"adaptive.algorithm.vegas.smoothing":         {"1", "", "{vegas: {smoothing: 0.5}}", "weight of the new limit, in (0, 1]"},
	"adaptive.algorithm.vegas.probeInterval":     {"100", "", "{vegas: {probeInterval: 50}}", "windows between RTT baseline re-measurements; negative disables"},
	"adaptive.algorithm.vegas.probeLimit":        {"1", "", "{vegas: {probeLimit: 2}}", "limit held during a re-measurement"},
	"adaptive.algorithm.vegas.dropThreshold":     {"0.05", "", "{vegas: {dropThreshold: 0.1}}", "drop rate above which a window is a loss"},
	"adaptive.algorithm.aimd":                    {"", "", "{aimd: {}}", "AIMD: additive increase, multiplicative decrease"},
	"adaptive.algorithm.aimd.backoff":            {"0.9", "", "{aimd: {backoff: 0.8}}", "factor of the limit after a loss, in (0, 1)"},
	"adaptive.algorithm.aimd.increase":           {"1", "", "{aimd: {increase: 2}}", "limit added after a window without loss"},
	"adaptive.algorithm.aimd.timeout":            {"0 (only failures are losses)", "", "{aimd: {timeout: 1s}}", "RTT from which a window is a loss"},
	"adaptive.algorithm.aimd.dropThreshold":      {"0.05", "", "{aimd: {dropThreshold: 0.1}}", "drop rate above which a window is a loss"},
	"adaptive.algorithm.gradient2":               {"", "", "{gradient2: {}}", "Gradient2: short against long RTT average (Netflix concurrency-limits Gradient2Limit)"},
	"adaptive.algorithm.gradient2.tolerance":     {"1.05", "", "{gradient2: {tolerance: 2}}", "RTT ratio tolerated before the limit shrinks, at least 1"},
	"adaptive.algorithm.gradient2.queueSize":     {"4", "", "{gradient2: {queueSize: 6}}", "headroom added every window"},
	"adaptive.algorithm.gradient2.smoothing":     {"0.2", "", "{gradient2: {smoothing: 0.5}}", "weight of the new limit, in (0, 1]"},
	"adaptive.algorithm.gradient2.longWindow":    {"600", "", "{gradient2: {longWindow: 100}}", "windows of the long RTT average"},
	"adaptive.algorithm.gradient2.probeInterval": {"100", "", "{gradient2: {probeInterval: 50}}", "windows between re-measurements; negative disables"},
	"adaptive.algorithm.gradient2.probeLimit":    {"1", "", "{gradient2: {probeLimit: 2}}", "limit held during a re-measurement"},
	"adaptive.initialLimit":                      {"20", "", "30", "limit before the first window (validated, not applied by a reload)"},
	"adaptive.minLimit":                          {"1", "", "2", "least limit"},
	"adaptive.maxLimit":                          {"1000", "", "500", "greatest limit"},
	"adaptive.window":                            {"1s", "", "2s", "least duration of an aggregation window"},
	"adaptive.minWindowSamples":                  {"10", "", "5", "successful calls a window must hold before it ends"},
	"adaptive.partitions":                        {"none", "their number", "[{name: hi, share: 0.5}]", "shares of the limit by priority (summing to at most 1); shares updatable"},
	"adaptive.partitions.name":                   {"\"\"", "", "", "for humans; unused by the limiter"},
	"adaptive.partitions.share":                  {"0", "", "", "fraction of the limit reserved, in [0, 1]"},
	"adaptive.queue":                             {"no queue", "", "{target: 10ms}", "the waiting queue (CoDel, adaptive LIFO)"},
	"adaptive.queue.maxLength":                   {"0 (no queue)", "between 0 and positive", "{maxLength: 5}", "calls that may wait"},
	"adaptive.queue.target":                      {"5ms", "", "{target: 10ms}", "longest wait while overloaded (CoDel's target)"},
	"adaptive.queue.interval":                    {"100ms", "", "{interval: 200ms}", "time non-empty before overloaded, longest wait otherwise"},
	"adaptive.queue.fifo":                        {"false", "", "{fifo: true}", "serve oldest first always (no adaptive LIFO)"},
	"adaptive.maxSampleStride":                   {"64", "", "16", "at least one call in this many is timed (a power of two, 1 to 1024)"},
	"adaptive.compact":                           {"false", "always", "true", "the policy's Config.Compact: no cache-line padding (smaller, for many cold instances)"},

	"retry.maxAttempts": {"3", "", "5", "attempts in all, the first included"},
	"retry.maxDuration": {"0 (no limit)", "between 0 and positive", "1s", "time from the first attempt's start to the last one's"},
	"retry.backoff":     {"full-jitter", "", "linear", "full-jitter, exponential, constant, linear, equal-jitter or decorrelated-jitter"},
	"retry.baseDelay":   {"100ms", "", "20ms", "the first delay"},
	"retry.maxDelay":    {"max(10s, baseDelay)", "", "2s", "cap of every delay and retry-after hint"},
	"retry.multiplier":  {"2 (3 for decorrelated-jitter)", "", "3", "growth factor, at least 1"},
	"retry.increment":   {"baseDelay", "", "30ms", "linear's step"},

	"timeout.duration":     {"none: required, positive", "", "2s", "the timeout, from the start of the call"},
	"timeout.mode":         {"deadline", "always", "soft", "deadline (the context ends) or soft (only classifies)"},
	"timeout.tick":         {"1ms", "always", "5ms", "sweep period of the timeout's own watchdog"},
	"timeout.maxAbandoned": {"1000", "", "10", "abandoned functions still running before DoAbandon rejects"},
	"timeout.workers":      {"128", "always", "4", "DoAbandon's reusable worker goroutines"},

	"hedge.delay":      {"none: required when percentile is 0", "", "20ms", "fixed hedging delay (the delay until warmUp with percentile)"},
	"hedge.percentile": {"0 (fixed delay)", "between 0 and not 0", "0.9", "the delay is this latency percentile, in [0.5, 1)"},
	"hedge.minDelay":   {"0", "", "1ms", "lower clamp of the percentile delay"},
	"hedge.maxDelay":   {"0 (no clamp)", "", "1s", "upper clamp of the percentile delay"},
	"hedge.warmUp":     {"100", "", "50", "samples before the percentile replaces delay"},
	"hedge.refresh":    {"100ms", "", "1s", "how often the percentile is recomputed"},
	"hedge.maxHedges":  {"1", "", "2", "hedges per call, one delay apart"},
	"hedge.asyncFirst": {"false", "always", "true", "run the first attempt on its own goroutine"},
	"hedge.tick":       {"the shared watchdog", "always", "5ms", "tick of the hedger's own watchdog"},

	"shed.sampleInterval":        {"100ms", "always", "50ms", "least time between two samples of the signals (at least 1ms)"},
	"shed.window":                {"1s", "always", "2s", "span of the buckets the cap is computed from"},
	"shed.coolOff":               {"1s", "always", "2s", "how long it stays overloaded after its last rejection once the signals are cold"},
	"shed.hysteresis":            {"0.2", "always", "0.3", "fraction below its threshold a signal falls to to release, in [0, 1)"},
	"shed.schedLatencyThreshold": {"10ms", "always", "20ms", "p99 scheduling latency that engages it"},
	"shed.cpuThreshold":          {"0.9", "always", "0.8", "busy share of GOMAXPROCS that engages it, in (0, 1]"},
	"shed.runnableThreshold":     {"4", "always", "8", "runnable goroutines per P that engage it"},
	"shed.inFlightThreshold":     {"0 (off)", "always", "100", "calls in flight that engage it"},
	"shed.latencyThreshold":      {"0 (off)", "always", "50ms", "mean latency of the calls that engages it"},
	"shed.priorities":            {"1", "always", "2", "priority levels, 0 the most important (at most 64)"},
	"shed.priorityReserve":       {"0.1 with several priorities", "always", "0.2", "fraction of the cap each level keeps from the level below it"},
	"shed.maxSampleStride":       {"64", "always", "32", "at least one call in this many is timed (a power of two, 1 to 1024)"},
	"shed.compact":               {"false", "always", "true", "the policy's Config.Compact: no cache-line padding (smaller, for many cold instances)"},
}
