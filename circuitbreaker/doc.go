// Package circuitbreaker stops calling a dependency that is failing, and
// probes it before trusting it again.
//
// # States
//
// A [Breaker] is Closed (admits every call, judges their results), Open
// (rejects every call until the open duration has passed), or HalfOpen
// (admits HalfOpenProbes probe calls, at most HalfOpenMaxConcurrent at once;
// HalfOpenSuccesses successes close it, and it opens again as soon as that
// has become impossible). Disabled, ForcedOpen and MetricsOnly are entered
// and left only by hand ([Breaker.TransitionTo]).
//
// # Judging health
//
// Config.Mode chooses one of three judgements of the closed state:
//
//   - CountWindow (default): failure and slow-call rates over the last
//     WindowSize calls, kept in a wait-free ring: one atomic add on a
//     sequence number, an atomic swap of a slot only when its outcome
//     changes, and 0–3 counter adds. A success that finds the window full
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
// [Breaker.Do] and [Call] wrap a function. A pipeline or middleware that
// already reads the clock uses the primitives: [Breaker.Acquire] with a
// reading of [Breaker.Ticker], then exactly one [Breaker.Record] (classifies
// an error) or [Breaker.RecordResult] (the caller classified the outcome,
// e.g. an HTTP 503) with the permit and the end time.
// [Breaker.RemainingOpen] gives a Retry-After.
//
// # Cost
//
// On a Closed breaker Acquire is one atomic load and a branch. A success in
// a count window full of successes (a healthy dependency) is four loads and
// writes nothing; otherwise one add and a load, plus a swap when the slot it
// replaces held another outcome. In consecutive mode a success is one load. With no slow-call threshold, no time window and no
// per-call listener, Do and Call read no clock at all while Closed. An Open
// rejection is two loads and one add (the rejection counter), and returns a
// preallocated error. Nothing allocates; transitions take a mutex.
//
// # Zero value and concurrency
//
// The zero Breaker is not usable: create one with [New]. Every method is
// safe for concurrent use. Listeners run synchronously on the goroutine
// that caused the event; a panicking listener is recovered and counted in
// Stats().ListenerPanics.
package circuitbreaker
