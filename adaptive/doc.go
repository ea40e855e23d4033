// Package adaptive holds concurrency limits that tune themselves, client-side
// adaptive throttling, and priority load shedding: the bulkhead that needs no
// tuning.
//
// # Limiter
//
// A [Limiter] admits a call while fewer calls than its limit are in flight
// (one atomic add, as a fail-fast bulkhead) and, when the call ends, adds its
// round-trip time (RTT) to the current window's aggregates: a sum and a count
// (two atomic adds) and a minimum and a maximum in-flight count (CAS-min and
// CAS-max, which only write when the value improves). The first release past
// the window's end wins a CAS on the window's end time, swaps the
// aggregates out, and asks the [Algorithm] for a new limit. There is no
// background goroutine and no lock on the admission or release path.
//
// Three algorithms are provided, each documented with its formula:
//
//   - [Vegas] (the default): estimates the dependency's queue as
//     L·(1 − baseline/RTT) and keeps it between α and β calls; converges
//     fastest from a limit too low or too high and holds latency closest to
//     the unloaded latency; its small absolute queue is proportionally large
//     for capacities under about 20.
//   - [Gradient2]: compares the window's mean RTT with a long-term average
//     and shrinks the limit by their ratio; follows latency shifts of the
//     dependency, but grows slowly (QueueSize·Smoothing per window).
//   - [AIMD]: loss-based, reacts to drops and timeouts only; for
//     dependencies whose latency carries no signal.
//
// Outcomes are explicit ([Outcome]): a [Success] is an RTT sample, a
// [Dropped] call (timeout, overload error) is a loss that lowers the limit,
// and an [Ignored] call (the caller cancelled) only frees its slot.
//
// Which method to use: [Limiter.Acquire] and [Limiter.Release] are the
// primitives (they take the current time as an argument and allocate
// nothing; package pipeline uses them); [Limiter.Do] and [Call] wrap a
// function; [Limiter.AcquirePriority] admits by priority partition
// (Config.Partitions); [Limiter.AcquireWait] waits in the optional CoDel /
// adaptive-LIFO queue (Config.Queue).
//
// # Throttler
//
// A [Throttler] is the SRE book's client-side adaptive throttling: it rejects
// calls locally with probability max(0, (requests − K·accepts)/(requests+1))
// over a sliding window of time buckets, so a client whose backend is
// refusing work stops sending it. Call [Throttler.Allow] before and
// [Throttler.Record] after each call, or use [Throttler.Do].
//
// # Zero values and concurrency
//
// The zero [Config] and [ThrottlerConfig] are valid (documented defaults on
// each field); [New] and [NewThrottler] validate every field and return a
// *rampart.ConfigError for a bad one. A Limiter and a Throttler are safe for
// concurrent use by any number of goroutines. Rejections return one
// preallocated error per instance, matching [ErrLimited] (or [ErrThrottled])
// and rampart.ErrRejected.
package adaptive
