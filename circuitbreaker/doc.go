// Package circuitbreaker stops calling a dependency that is failing, and
// probes it before trusting it again.
//
// Build a [Breaker] with [New] and wrap each call in [Breaker.Do] (or the
// typed [Call]). [Breaker.Acquire] and [Breaker.Release] are the primitives
// for a caller that holds the permit across code it does not own (a
// middleware, a stream); a pipeline uses the methods under For composition.
// [Breaker.State] and [Breaker.Stats] report on it.
//
// # States
//
// A [Breaker] is Closed (admits every call, judges their results), Open
// (rejects every call until the open duration has passed), or HalfOpen
// (admits HalfOpenProbes probe calls, at most HalfOpenMaxConcurrent at once,
// and closes or opens again on their results: see Half-open). Disabled,
// ForcedOpen and MetricsOnly are entered and left only by hand
// ([Breaker.TransitionTo]).
//
// # Judging health
//
// Config.Mode chooses one of three judgements of the closed state:
//
//   - CountWindow (default): failure and slow-call rates over the last
//     WindowSize calls, kept in a wait-free ring of 4-bit slots, 16 to a
//     word: one atomic add on a sequence number, a CAS of a slot's word
//     only when its outcome changes, and 0–3 counter adds. A success that finds the window full
//     of successes writes nothing at all (three loads), so a healthy
//     breaker is read-only and scales across cores.
//   - TimeWindow: the same rates over the last TimeWindow, kept in Buckets
//     buckets tagged with their tick and reset by CAS.
//   - Consecutive: ConsecutiveFailures failures in a row. No time decay, so
//     a slow trickle of failures trips it too.
//
// Rates are judged only once a window holds MinimumCalls calls, and only
// when a rate can have risen: after a failure, a slow call, or while the
// window is still filling. A fast success in a warm window evaluates
// nothing.
//
// # Half-open
//
// By default (HalfOpenSuccesses 0) the probes are judged by the thresholds
// that trip the breaker, as a window of HalfOpenProbes calls (resilience4j's
// rule): the period closes when the probes' failure rate is below
// FailureRateThreshold and, with a slow-call threshold, their slow rate is
// below SlowCallRateThreshold; it reopens when the probes would have tripped
// a closed breaker. A slow successful probe is a success that counts towards
// the slow rate, exactly as in the closed window. The period is decided as
// soon as the probes still to come can no longer change the outcome. An
// Ignored probe gives its slot back and decides nothing.
//
// With 5 probes and a 50 % threshold (the defaults), the period closes with
// at most 2 failed probes: it closes at the third success and reopens at the
// third failure. Against a dependency whose calls fail independently with
// probability p, a period closes with probability P(at most 2 of 5 fail) =
// (1-p)⁵ + 5p(1-p)⁴ + 10p²(1-p)³ (TestHalfOpenRoundCloseProbability checks
// these against 20,000 simulated periods):
//
//	p                     0.30   0.35   0.40   0.60   0.80
//	closes (default)      0.837  0.765  0.683  0.317  0.058
//	all 5 must succeed    0.168  0.116  0.078  0.010  0.0003
//
// The second row is HalfOpenSuccesses 5: every probe must succeed, (1-p)⁵.
//
// In Consecutive mode, which has no rate, the period reopens when
// min(ConsecutiveFailures, HalfOpenProbes) probes have failed (slow ones
// included, since a slow call is a failure in that mode), in whatever
// order: probes run concurrently, so their order means nothing. With
// ConsecutiveFailures 1 the first failed probe reopens; with the defaults
// (5 and 5) only 5 failed probes do.
//
// An explicit HalfOpenSuccesses k is sony/gobreaker's rule instead, in
// every mode: the period closes after k successful probes (slow or not; in
// Consecutive mode a slow probe is a failure) and reopens as soon as more
// than HalfOpenProbes-k have failed. HalfOpenSuccesses equal to
// HalfOpenProbes makes every probe have to succeed.
//
// Over a long run, a default breaker in front of a dependency failing at a
// steady rate p rejects this percentage of the calls (figures from the
// package's TestSteadyFailureRateRejections: 10^6 calls, one at a time, at
// a fixed interval, each failing with probability p; "former" is every
// probe must succeed with a fixed 60 s open duration):
//
//	p                        0.30   0.35   0.40   0.60   0.80
//	one call a second        0.00   0.15   2.46   73.8   92.2
//	  former                 0.21   8.02   60.5   97.1   97.9
//	ten calls a second       0.03   1.33   21.7   96.8   99.2
//	  former                 1.26   44.3   95.4   99.7   99.8
//	a hundred calls a second 0.35   12.3   73.5   99.7   99.9
//	  former                 30.6   87.7   99.0   99.97  99.98
//
// What remains below the threshold are trips of the closed window by
// chance. The failures among the last WindowSize calls have a standard
// deviation of sqrt(WindowSize·p·(1-p)): 4.8 calls for 100 calls at p =
// 0.35, so a 50 % threshold is about 3 standard deviations away and some
// window of the sliding sequence reaches it now and then; and the first
// MinimumCalls (10) calls after a close hold at least 5 failures with
// probability 0.25 at p = 0.35 (0.37 at p = 0.4). Each trip costs an open
// duration of rejections, so the rejected share grows with the call rate.
// That is why the open duration starts short (OpenDuration, 5 s) and
// doubles only while half-open periods keep failing (up to
// MaxOpenDuration, 60 s): a trip by chance costs 5 s, a real outage is
// probed at most once a minute. At high call rates, a larger WindowSize
// (or a TimeWindow holding thousands of calls) makes trips by chance
// vanishingly rare: the standard deviation of the rate falls as
// 1/sqrt(calls).
//
// # Generations
//
// Every transition increments a generation kept in the same atomic word as
// the state. A [Permit] carries the generation it was admitted in, and a
// result recorded with a permit of an older generation is ignored: a slow
// call admitted while Closed that ends during HalfOpen does not decide the
// probe.
//
// # Which method to use
//
// [Breaker.Do] and [Call] wrap a function. A middleware or a stream that
// holds the permit across code it does not own uses the shorthands
// [Breaker.Acquire], then exactly one [Breaker.Release] with the permit and
// the call's result: [Breaker.Classify] of an error, or the caller's own
// classification (e.g. a Failure for an HTTP 503). With a count window or
// Consecutive mode, no slow-call threshold and no per-call listener (the
// default), they read no clock on a closed breaker, nor on an open one
// whose open timer has not fired (default real-time clock): the clock is
// read only on the open and half-open slow paths. A pipeline that already
// has a reading of [Breaker.Ticker] passes it to [Breaker.AcquireAt] and
// [Breaker.ReleaseAt] instead. [Breaker.RemainingOpenAt] gives a
// Retry-After.
//
// # Cost
//
// On a Closed breaker Acquire and AcquireAt are one atomic load and a
// branch. A success in a count window full of successes (a healthy
// dependency) is four loads and writes nothing; otherwise one add and a
// load, plus a swap when the slot it replaces held another outcome. In
// consecutive mode a success is one load. With no slow-call threshold, no
// time window and no per-call listener, Do, Call, Acquire and Release read
// no clock at all while Closed or MetricsOnly; a Disabled breaker never
// makes them read it.
//
// An Open rejection is two loads (the state word, the open timer's hint)
// and a count: the rejection is added to a counter of the P (the
// scheduler's processor) running the caller, on a cache line of its own,
// with the goroutine pinned to its P meanwhile (the runtime's per-P
// primitive that sync.Pool uses), so the add is a plain one, not a locked
// instruction. On up to 8 Ps (GOMAXPROCS at the first trip) a rejection
// thus writes no shared word, and rejections from many goroutines at once
// never move a line between cores. Beyond 8 Ps there are still 8 counters:
// P 8+i adds atomically to a spare word on P 1+i's line (modulo 7), so
// those lines are shared by two or more Ps, spread over 7 lines rather than
// one word. Stats sums the counters, exactly. It returns a preallocated
// error. Nothing allocates on a call; transitions take a mutex, and the
// first transition to a rejecting state allocates the per-P counters (and,
// on the real-time clock, the open timer). A rejection that races that
// first publication, or a breaker that tripped first on 1 P (with
// CountStats: that was built on 1 P, as New allocates the lines then),
// counts on one shared atomic word instead (Compact counts every rejection
// so, on its hot line).
//
// Successes are not counted by default: a success into a healthy window
// writes nothing, so Stats has Failures and Rejected but no count of the
// calls that went well. [Config.CountStats] counts them (Stats.Successes),
// as ratelimit's CountStats counts admissions: a pinned plain add to a
// counter of the caller's P, on lines New allocates (one per P up to 8; one
// with Compact, added to atomically), never the hot line; the Ps beyond
// add atomically to spare words of those lines. Every Success released is
// counted, a stale one too, but for a slow success in Consecutive mode,
// which is recorded as a failure: Failures counts recorded failures only,
// so a stale Success is in Successes and a stale Failure only in
// StaleResults. Off, it costs a test of a byte the success paths load
// anyway. Like resilience4j's
// numberOfSuccessfulCalls, which its ring buffer always keeps; here it is
// opt-in because the default success path writes nothing.
//
// The open timer runs only where the breaker's NanoTicker and the tripping
// goroutine are on the same side of a testing/synctest bubble's edge (both
// outside, or both inside): a breaker shared across that edge (a
// package-level one, say) marks each such open period over at once
// instead, so that the shorthands read the clock to decide, as AcquireAt
// does.
//
// Measured in the bench module with interleaved rounds (cd bench &&
// RAMPART_MINRATIO=1 go test -run TestCircuitBreakerMinRatios -v ., 2-core
// shared VM): an open rejection through Do is 7.0–7.4 ns, 1/10.8 of
// gobreaker's (1/11.5 from 2 goroutines; it was 1/8.5 with one shared
// rejection counter) and 3.5× go-resiliency's, whose rejection is one
// inlined load that counts nothing; Acquire + Release on a closed breaker is 8.0
// ns, 1/5.3 of failsafe-go's TryAcquirePermit + RecordSuccess and 1/28 of
// gobreaker's two-step Allow + done. docs/circuitbreaker.md has the tables.
//
// # Memory
//
// The words that records write (the window's sequence and counters, the
// failure counts) share one cache line (64 B on amd64, 128 B on arm64, two
// 32 B lines on arm and mips), the last of the Breaker, away from the state
// word and configuration that every call reads; the rest is unpadded. The
// allocator places the Breaker on a line boundary where it gets no malloc
// header: on 64-bit platforms with lines of at most 128 B (amd64, arm64,
// ppc64, riscv64, mips64, ...), not on 32-bit ones nor on s390x, where the
// hot line shares a line with its neighbours when the allocator does not
// happen to align it. Heap bytes per live breaker that never left Closed,
// on amd64 at any GOMAXPROCS (gated by TestInstanceBytesAllocs at 1, 2 and
// 16 Ps):
//
//	configuration                     default   Compact
//	100-call count window (default)     512 B     512 B
//	1000-call count window              960 B     960 B
//	time window (10 buckets)            768 B     768 B
//	consecutive                         448 B     448 B
//	100-call window, CountStats         512 B     576 B
//	                                    + 64 B per P up to 8
//
// The Breaker is 448 B (the time window's header included); a count window
// adds its slots, 4 bits a call, 16 to a word (7 words for 100 calls: 64 B
// in the allocator's size classes); a time window its buckets, 32 B each,
// packed two to a line in both layouts (every call of a slice writes the
// one bucket of that slice, so a line per bucket would separate nothing
// that is written at once). The default layout adds, at the first
// transition to Open, HalfOpen or ForcedOpen, one counter line per P after
// the first (64 B each on amd64, up to 7: 64 B on 2 Ps, 448 B from 8 Ps
// on) for the rejection counters; [Config.Compact] counts rejections with
// one atomic add instead, for the many cold instances (per-tenant,
// per-route keys) where goroutines do not contend on one breaker. A
// breaker with a Name adds its two rejection errors and their messages
// (240 B with the name "db": a named default breaker is 752 B); a tripped
// breaker on the real-time clock, its open timer (about 200 B).
//
// # Live reconfiguration
//
// [Breaker.Update] takes a whole Config (the one New was given, or
// [Breaker.Config], changed), validates it exactly as New does (zero
// fields mean the same defaults), and applies it while calls run, or
// refuses it with a *rampart.ConfigError naming the field and changes
// nothing. The configuration is one immutable object that a call loads
// once (Do, Call, Acquire and the slow paths of AcquireAt and ReleaseAt;
// the closed admission of AcquireAt reads none), so a call runs wholly
// under the old configuration or wholly under the new one. The state, the
// window, the counters (Stats), the open period in progress and a
// half-open period's probes are kept. The new thresholds hold from the
// next admission: Update judges the window recorded so far (or the
// failures in a row, or the probes recorded) by them, and trips, closes or
// reopens the breaker there if they decide it, as the next record would.
//
//   - FailureRateThreshold, SlowCallDuration, SlowCallRateThreshold,
//     MinimumCalls (at most the fixed WindowSize), ConsecutiveFailures:
//     updatable; judged at the Update, then at every record.
//     SlowCallDuration changes between positive values, and from or to 0
//     only where a time window or a per-call listener keeps the breaker
//     measuring calls (below).
//   - OpenDuration, MaxOpenDuration, OpenBackoffFactor, OpenJitter:
//     updatable; the open period in progress keeps its end, the next one
//     is computed with the new values (the backoff streak is kept).
//   - HalfOpenProbes, HalfOpenMaxConcurrent, HalfOpenSuccesses,
//     MaxHalfOpenDuration: updatable; a half-open period in progress keeps
//     the probes it admitted, admits up to the new HalfOpenProbes (none
//     more when already reached) and is judged over all its probes, those
//     beyond a lowered HalfOpenProbes included.
//   - Classify, OnStateChange, OnSuccess, OnFailure, OnRejected:
//     updatable; each call uses those of the configuration it loaded.
//     Classify changes from one func to another, never from or to nil:
//     a pipeline reads it once, at its New, to decide whether its
//     successes are classified (a Classify set later would never see
//     them, one removed would still be called).
//   - Whether the breaker measures calls ([Breaker.MeasuresCalls]: a
//     slow-call threshold, a time window or a per-call listener) is fixed:
//     a pipeline reads it once, at its New, to decide whether its calls
//     read the clock before and after fn (one built without would pass
//     NotRead and never see a call slow). Update refuses, naming the field,
//     a SlowCallDuration from or to 0, or an OnSuccess or OnFailure from or
//     to nil, that would flip it; the same change beside another setting
//     that times calls (Mode TimeWindow, a threshold, the other listener)
//     is accepted. To add timing later, build the breaker with a
//     SlowCallDuration no call reaches (an hour) and lower it.
//   - Name: fixed: New built the rejection errors that carry it, once.
//     An empty Name keeps it (a registry names the breakers it builds from
//     a Config without one, and that Config, changed, is accepted).
//   - Ticker: fixed: the open period's end, the half-open period's start
//     and the permits' starts are readings of that clock, which another
//     clock's do not compare with.
//   - Compact: fixed: it chose where rejections are counted.
//   - CountStats: fixed: New allocated the success counters, or none.
//   - Mode: fixed: the window New allocated (or none) is the judgement's,
//     and it holds the calls judged so far.
//   - WindowSize: fixed: New allocated the slots, and a call's slot is its
//     sequence number modulo the size; another size would scramble the
//     window.
//   - TimeWindow, Buckets: fixed: New allocated the buckets, each counting
//     one slice of TimeWindow/Buckets tagged with its tick; another span
//     or count would misread them.
//
// Updates may run concurrently: they publish one at a time, the one
// published last is the configuration in force, and an Update's judgement
// moves the breaker only while its configuration is still the published
// one (a slower Update's judgement, run after a later publication, changes
// nothing).
//
// Update allocates the new configuration (one object of about 220 B);
// calls still allocate nothing. For composition: ReleaseAt and Classify
// each load the configuration once, so a caller that uses them in
// sequence (package pipeline) may see an Update between them; what
// MeasuresCalls reports, and whether Config().Classify is nil, never
// change after New, so a caller may read them once.
//
// # For composition
//
// A pipeline or an adapter that shares one clock reading and one
// classification between policies uses [Breaker.AcquireAt],
// [Breaker.ReleaseAt] (with [Breaker.Classify]), [Breaker.RemainingOpenAt],
// [Breaker.MeasuresCalls], [Breaker.Config] and [Breaker.Ticker].
// Applications call [Breaker.Do], [Call] and the shorthands
// [Breaker.Acquire], [Breaker.Release] and [Breaker.RemainingOpen].
//
// # Zero value and concurrency
//
// The zero Breaker is not usable: create one with [New]. Every method is
// safe for concurrent use. Listeners run synchronously on the goroutine
// that caused the event; a panicking listener is recovered and counted in
// Stats().ListenerPanics.
package circuitbreaker
