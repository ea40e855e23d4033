// Package adaptive holds concurrency limits that tune themselves, client-side
// adaptive throttling, and priority load shedding: the bulkhead that needs no
// tuning.
//
// Build a [Limiter] with [New] and wrap each call in [Limiter.Do] (or the
// typed [Call]); [Limiter.Acquire] and then exactly one [Limiter.Release]
// bracket a call by hand, for a caller that holds the permit across code it
// does not own. For client-side throttling build a [Throttler] with
// [NewThrottler] and wrap calls in [Throttler.Do] (or [Throttle]). A
// pipeline uses the methods under For composition.
//
// # Which method to use
//
// [Limiter.Acquire] and [Limiter.Release] admit and release
// a call, reading the limiter's ticker for sampled calls only (the
// recommended form when the caller has no clock readings of its own);
// [Limiter.Do] and [Call] wrap a function the same way;
// [Limiter.AcquirePartition] admits by priority partition
// (Config.Partitions). [Limiter.AcquireAt] and [Limiter.ReleaseAt] are the
// primitives for callers that already read the clock (they take the current
// time as an argument, time every call and allocate nothing; package
// pipeline uses them with its own readings), with [Limiter.AcquirePartitionAt]
// and [Limiter.AcquireWaitAt], which waits in the optional CoDel /
// adaptive-LIFO queue (Config.Queue).
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
// # RTT sampling
//
// Timing a call takes two clock reads, which cost more than the limiter
// itself. [Limiter.Acquire] and [Limiter.Release] (and Do and Call, which use
// them) read the clock only for the calls they pick as RTT samples, as
// high-rate systems do: about one call in a stride, picked by a hash of the
// admission's sequence number (which the slot's atomic add returns, so
// picking writes nothing shared). The stride adapts per window so that each
// window still carries T samples, T the least power of two at or above
// max(8·MinWindowSamples, 4·MaxInFlight) (128 at the defaults): at a window's
// close it becomes the greatest power of two at or below calls/T, capped by
// Config.MaxSampleStride (default 64; 1 times every call); it doubles within
// a window each time the window's samples reach another multiple of T beyond
// 2T; it drops to 1 when a window is due but short of samples. A slow or
// low-rate dependency (fewer than 2T calls per window) has every call timed;
// only high-rate ones are sampled.
//
// Drops are never sampled away (an unsampled Failure release counts the loss
// and reads the clock to close a due window; a sampled one also adds its RTT
// to the drops' own sum, Sample.DropRTT), and the most calls in flight
// comes from every release. A sample taken at stride s weighs s calls, so
// Sample.AvgRTT and Sample.Count are unbiased estimates over every success of
// the window even when the stride changes while latency trends (without the
// weights, a window whose stride rose while its latency climbed read about
// half its true mean in the simulation); Sample.Samples says how many calls
// were timed. Sample.MinRTT, the least of the timed calls, is at or above the
// true least (no built-in algorithm uses it). In the simulation with 1 s
// windows (stride 8–16, TestSimSampling) the sampled window means stayed
// within 0.1 % of the mean of every call on average (s.d. 0.3 % per window)
// and the limits within 1 % of those of timing every call.
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
//   - [AIMD]: loss-based, reacts to a drop rate above its DropThreshold
//     and to timeouts only; for dependencies whose latency carries no
//     signal.
//
// Outcomes are explicit ([rampart.Result]): a [rampart.Success] is an RTT sample, a
// [rampart.Failure] call (timeout, overload error) is a loss that counts toward
// the window's drop rate (see Drops below), and an [rampart.Ignored] call (the
// caller cancelled) only frees its slot. Any other value counts as a
// Failure, as [rampart.Result] documents.
//
// # Drops
//
// A window's drop rate is Drops / (Drops + Count) ([Sample.DropRate]): the
// window counts every Failure release and, stride-weighted, every success,
// so the rate costs no word of its own. [Vegas] and [AIMD] treat a window as
// a loss only when its drop rate exceeds their DropThreshold (in [0, 1];
// default 0.05); any value below one drop in a window's calls, such as
// 1e-9, restores the reaction to any drop of Netflix's VegasLimit and
// AIMDLimit, and 1 ignores drops. [Gradient2] has no drop rule, as
// Netflix's Gradient2Limit has none: the RTTs of timed drops
// ([Sample.DropRTT]) enter its short-term RTT with the successes', as in
// Netflix's window average, so calls that time out under a queue still
// shrink the limit. Each drop counts as one call whose RTT is bounded at
// twice the long-term average: Netflix's timeouts are the client's, a few
// RTTs, but a Failure here may be a 30 s timeout among 10 ms calls, which
// unbounded weighed as 3000 calls (one such timeout in two thousand calls
// per window took the limit from 116 to 13). Bounded, a window in which a
// fraction f of the calls timed out has a short-term RTT of at most
// long·(1+f), and a window mostly dropped reaches the gradient's floor of
// 0.5. Reacting to any drop in a window, a drop in every
// window (one timeout in two thousand calls, at two thousand calls per
// window) held Gradient2 at 2·QueueSize = 8 and Vegas and AIMD at their
// minimum. The rate is a window's: with fewer than 1/DropThreshold calls
// in a window (20 at the default) one drop exceeds it, so give a low-rate
// dependency a Window that holds a few hundred calls.
//
// Figures from the simulation (sim_test.go: C = 50 workers, D = 10 ms,
// 100 ms windows, every call timed; a lost call never reaches the server
// and is released as Failure after 100 ms; AIMD runs with a client timeout
// of 20 ms, its load signal). TestSimLoadIndependentDropsKeepGoodput, goodput
// as a fraction of the capacity under 3× overload with 0, 0.05, 0.2 and 1 %
// of the calls lost whatever the load, and in brackets the same runs when
// any drop in a window was a loss:
//
//	            0        0.05 %   0.2 %    1 %
//	Vegas       97.0 %   97.0 %   96.7 %   96.6 %   (96.9, 94.4, 27.7 %)
//	Gradient2   97.0 %   96.9 %   96.9 %   96.9 %   (82.3, 42.7, 20.0 %)
//	AIMD        98.4 %   98.6 %   98.7 %   98.7 %   (80.9, 39.6, 13.8 %)
//
// At 80 % load every algorithm stayed within 1.5 % of its lossless goodput
// (any-drop, 1 % lost: 15–39 % of it). With 0.05 % of the calls timing out
// after 30 s instead (3000 × D), goodput under 3× overload was 94.3 %
// (Vegas), 95.5 % (Gradient2) and 99.2 % (AIMD) of capacity, 97–101 % of
// each one's lossless run: a baseline probe counts the calls hung in flight
// as stuck and holds its limit on top of them (waiting for them to drain
// cost 27 %), and a window that no release closes is closed by the
// rejections; Gradient2 with unbounded drop RTTs fell to 24.7 %. TestSimRealOverloadStillBacksOff:
// the same overload with 1 % lost, and the server's capacity falling from
// 50 to 10 workers for 20 s, so that latency and timeouts (20 ms) rise with
// the queue: the mean limit over the last 10 s was 13.8 (Vegas), 15.4
// (Gradient2) and 18.2 (AIMD), goodput 83–90 % of the reduced capacity, and
// the limit climbed back to 58, 60 and 94 when capacity returned (any-drop:
// 16, 11 and 8 before the capacity fell, 20, 11 and 9 after it returned).
//
// A [Throttler] is drop-based by design and already reacts to a ratio: it
// rejects nothing while the backend accepts more than 1/K of the requests
// (half at the default K = 2), so a low drop rate never throttles.
//
// # Throttler
//
// A [Throttler] is the SRE book's client-side adaptive throttling: it rejects
// calls locally with probability max(0, (requests − K·accepts)/(requests+1))
// over a sliding window of time buckets, so a client whose backend is
// refusing work stops sending it. Call [Throttler.AllowAt] before and
// [Throttler.RecordAt] after each call, or use [Throttler.Do].
//
// # For composition
//
// A pipeline or an adapter that shares one clock reading and one
// classification between policies uses [Limiter.AcquireAt],
// [Limiter.AcquirePartitionAt], [Limiter.AcquireWaitAt], [Limiter.ReleaseAt],
// [Limiter.Classify], [Limiter.MayWait] and [Limiter.Ticker]; for a
// [Throttler], [Throttler.AllowAt], [Throttler.RecordAt],
// [Throttler.ProbabilityAt] and [Throttler.Ticker]. Applications call Do,
// [Call], [Throttle] and the shorthands ([Limiter.Acquire],
// [Limiter.Release], [Throttler.Allow], ...).
//
// # Zero values and concurrency
//
// The zero [Config] and [ThrottlerConfig] are valid (documented defaults on
// each field); [New] and [NewThrottler] validate every field and return a
// *rampart.ConfigError for a bad one. The zero [Limiter] is not usable;
// build with [New] (see the type). A Limiter and a Throttler are safe for
// concurrent use by any number of goroutines. Rejections return one
// preallocated error per instance, matching [ErrLimited] (or [ErrThrottled])
// and rampart.ErrRejected.
//
// # Live reconfiguration
//
// [Limiter.Update] takes a whole Config (start from [Limiter.Config], the
// configuration in force with its defaults filled in), validates it exactly
// as New does, and applies it while calls run, or refuses it with a
// *rampart.ConfigError naming the field and changes nothing. It applies the
// settings under the window lock, the one a window's closer takes, so no
// window is closed on a mix of old and new settings, and a call's hot path
// reads nothing new (the window, the samples and the stride cap, which
// slow paths read outside that lock, became atomic words: plain loads on
// amd64). The limiter keeps its current limit, clamped to the new bounds
// (OnLimitChange is told when that moves it, and queued calls get the
// slots a raised limit frees), and the calls in flight keep their permits:
// above a lowered limit they finish normally and no call is admitted until
// the count is below it.
//
//   - MinLimit, MaxLimit: updatable; the kept limit is clamped to them and
//     every later window's result is.
//   - Algorithm: updatable. The Algorithm in force (an equal value, nil
//     meaning Vegas{}) keeps its running Controller and what it learnt (its
//     RTT baseline, its probe schedule; a built-in probe keeps the floor
//     it took from the old MinLimit). Another Algorithm is started at the
//     kept limit, within the new bounds: what the old one learnt is lost.
//   - Window: updatable; the current window keeps its end, the next ones
//     last the new Window.
//   - MinWindowSamples: updatable, from the current window (the sample
//     target of the RTT sampling follows at the next window).
//   - MaxSampleStride: updatable; a lower cap holds from the next
//     admission.
//   - Partitions: the shares are updatable (republished with the limit);
//     their number is fixed: callers hold partition indices and permits
//     name them. Names are not kept (the limiter does not use them).
//   - Queue: Target, Interval, FIFO and MaxLength are updatable (the
//     waiters already queued keep their timers, and a shorter MaxLength
//     evicts nobody); MaxLength between 0 and positive is fixed: New
//     allocated the queue or not, and a pipeline chose its path by
//     MayWait.
//   - InitialLimit: validated, not applied: it is the limit before the
//     first window, which has begun.
//   - Name: fixed: New builds the rejection error that carries it, once.
//     An empty Name keeps it (a registry names the limiters it builds from
//     a Config without one, and that Config, changed, is accepted).
//   - Ticker: fixed: the window end and the calls' start times are
//     readings of the old clock.
//   - Compact: fixed: it chose the memory layout New allocated.
//   - Classify, OnLimitChange: fixed: read from words New set (by Do on
//     every call; by the window's closer after it gives the lock back).
//     Update accepts the func value New was given, as Config returns it
//     (nil means DefaultClassify for Classify), and refuses any
//     other func value; whether another evaluation of the same func
//     literal is accepted is unspecified (it depends on what the literal
//     captures and on the compiler), so pass the value New was given.
//
// Update must not be called from a Controller's Update, which runs under
// the window lock. A Throttler has no Update.
package adaptive
