// Package shed sheds load while the process is overloaded, judged by the Go
// runtime's own signals: the server-side load shedder, which needs no
// limit to be configured.
//
// Build a [Shedder] with [New] and wrap each request's work in
// [Shedder.Do] (or [Shedder.DoPriority], the typed [Call]);
// [Shedder.Acquire] and then exactly one [Shedder.Release] bracket a call
// by hand. While the process is not overloaded every call is admitted, at
// the cost of one atomic add; while it is, the calls in flight are capped
// at what the process has shown it can complete, and the rest are rejected
// at once with a preallocated error matching [ErrOverloaded] and
// rampart.ErrRejected. The algorithm is Kratos's BBR limiter (aegis's
// ratelimit/bbr, after the BBR congestion control of Cardwell et al.,
// 2016) and go-zero's adaptive shedder (core/load), with the CPU trigger
// replaced by the runtime's signals; Sentinel's system-adaptive rules
// (sentinel-golang's system rules) combine the same two ideas.
//
// # Signals
//
// Every SampleInterval (default 100 ms) the first call at or after the due
// time that has a clock reading (every AcquireAt; the calls Acquire picks as
// latency samples, and while engaged every call it admits) wins a CAS on
// the due time and samples: there is no background goroutine. The sample reads the [Source] (default: a [RuntimeSource],
// runtime/metrics with preallocated samples) and the shedder's own
// counters:
//
//	signal          what                                          engages at (default)         Config field
//	--------------  --------------------------------------------  ---------------------------  ---------------------
//	SchedLatency    p99 of /sched/latencies:seconds, the change    ≥ 10 ms                      SchedLatencyThreshold
//	                between two samples (not the cumulative one),
//	                its bucket's lower bound
//	CPU             Δ(total − idle) / Δtotal of /cpu/classes:      ≥ 0.9 of GOMAXPROCS          CPUThreshold
//	                busy CPU against GOMAXPROCS × elapsed
//	Runnable        /sched/goroutines/runnable:goroutines per P    ≥ 4 per P                    RunnableThreshold
//	InFlight        the shedder's calls in flight                  off (0)                      InFlightThreshold
//	Latency         mean latency of the calls completed since      off (0)                      LatencyThreshold
//	                the previous sample
//
// The shedder engages when any signal reaches its threshold and calls
// Config.OnOverload(true), on the sampling goroutine and under the
// sample, so that the listener's calls never overlap and come in order (a
// listener that blocks delays the next sample). It releases (OnOverload(false)) when every known
// signal is below threshold·(1 − Hysteresis) (Hysteresis default 0.2) and
// no call was rejected for CoolOff (default 1 s, go-zero's cool-off): it
// stays engaged while it sheds, since shedding is what holds the signals
// down, and a signal that hovers at its threshold engages it once instead of
// flapping. A signal the Source reports as unknown (negative) counts for
// neither. The runtime's CPU classes are updated only at the end of a GC
// cycle, so CPU is unknown between GCs, and it counts a P as busy while the
// OS has descheduled its thread: where the process shares its CPUs
// (containers with a quota, sandboxes) put CPU in Config.Ignore, or give a
// Source that reports the container's figure (wrap a RuntimeSource: see
// [Source]); SchedLatency sees that contention either way.
//
// # The cap
//
// Each sample also closes a bucket of the sliding window (Window, default
// 1 s: ten buckets): the calls that completed as a Success since the
// previous sample and the sum of their latencies. From the buckets of the
// window,
//
//	maxPass = max over buckets of completions / bucket length   (calls/s)
//	minRT   = min over buckets of Σlatency / timed completions   (s)
//	cap     = max(1, round(maxPass × minRT))
//
// the bandwidth-delay product: by Little's law the calls in flight that the
// best throughput seen needs at the best latency seen, and nothing that
// could only queue. While engaged a call is admitted while the calls in
// flight, itself included, are at most the limit (Stats.Limit): the cap
// and one call more, which waits for a core. A shedder rejects instead of
// queueing, so a slot freed by a completion stays idle until the next
// arrival: a limit of exactly the cap leaves a core idle that long after
// every call (a third of the time at a cap of 1 under a 2× overload), and
// the buckets' mean calls in flight then measure below the cap, which
// confirms itself or falls; the extra call starts as one ends (Kratos's
// BBR admits while the calls in flight before the new one are at most its
// estimate, the same limit). Before any call has completed the cap is
// unlimited, and a window in which no call completed keeps the last cap
// measured. Failure and Ignored releases only free their slot: they say
// nothing of the capacity.
//
// A bucket's completions per second times its mean latency is its mean
// calls in flight (Little's law again), so maxPass × minRT never exceeds
// the most calls in flight of the window: a cap held at its own estimate
// only confirms itself. One measured too low (while other work had the
// cores) would hold the process under its capacity for as long as the
// overload lasts, and one too high would keep the queue it let in, since
// every bucket's latency then includes it. So while engaged the limit
// cycles through gains as BBR's ProbeBW does: six samples at cap + 1, one
// at ⌈1.25 × cap⌉ (at least cap + 1; more completions raise maxPass if
// there are idle cores, as the extra call does) and one at
// max(1, ⌊0.75 × cap⌋), with no extra call (a bucket without the queue
// lowers minRT; the window, ten samples at the defaults, holds one at
// every sample, so the extra call's wait never counts as capacity: a
// Window under eight SampleIntervals loses it between down-probes, and the
// cap may then climb a call a sample until the next). In the tests'
// model of a CPU-bound server under overload a cap of 1 on four cores
// reaches 4 within 24 samples, and a cap of 8 on two cores comes down to
// 2 within 32; then the calls in flight stay within one of the cores.
// With arrivals one core of 2 ms work cannot keep up with (every 0.9 ms),
// a cap of 1 completes 96 % of the core's capacity with a p99 of twice the
// work (TestCapLeavesNoCoreIdleBetweenArrivals; 77 % with a limit of 1).
//
// # Priorities
//
// With Config.Priorities > 1, [Shedder.AcquirePriorityAt] and
// [Shedder.DoPriority] take a priority, 0 the most important. While engaged,
// priority p is admitted while the calls in flight are at most
// max(1, limit − p·⌈cap·PriorityReserve⌉) (default reserve 0.1 per level):
// trunk reservation, as in telephone networks, so the least important
// level is shed first and the most important keeps the whole limit. It needs
// no per-level counter on the hot path (one multiply in the admission
// check, only while engaged). A level alone uses its share of the cap,
// not the whole of it: that is the price of keeping the rest for the levels
// above.
//
// # For composition
//
// A pipeline or an adapter that shares one clock reading and one
// classification between policies uses [Shedder.AcquireAt],
// [Shedder.AcquirePriorityAt], [Shedder.ReleaseAt], [Shedder.Classify],
// [Shedder.RejectedError] and [Shedder.Ticker]. Applications call Do,
// DoPriority, [Call] and the shorthands ([Shedder.Acquire],
// [Shedder.Release]).
//
// # Costs
//
// Admission is one atomic add and two loads (the due time and the cap)
// while not engaged; a Success release is two atomic adds on the same
// cache line (four for a timed call), any other release one. No lock, no
// allocation, no clock read in the XAt forms. Acquire and Release read the
// clock only for the calls they pick as latency samples, as adaptive's
// limiter does: every call while the rate is low, about one in 64 at high
// rates (Config.MaxSampleStride), picked at random by the runtime's
// per-thread generator; a sampled call's reading also takes a due sample
// and moves the cool-off, so a timed call comes every 10 ms or sooner at
// the last bucket's rate, and its latency counts for the stride's calls
// it stands for. While engaged, Acquire times every call it admits (a
// clock read at admission and one at a Success release, for at most the
// cap's calls in flight), so that the shedder samples, and can release,
// as soon as its traffic falls; its rejections read no clock unless
// picked. AcquireAt and ReleaseAt time every call. The sample, once per
// SampleInterval, reads runtime/metrics into samples allocated at New:
// 0.54 to 1.10 µs a read (median 0.74 µs: BenchmarkShedSample in
// bench/shedcompare, two sets of five runs, 15:54 and 16:26 UTC, on the
// shared development machine).
//
// # Zero values and concurrency
//
// The zero [Config] is valid; [New] validates every field and returns a
// *rampart.ConfigError for a bad one. The zero [Shedder] is not usable;
// build with [New]. A Shedder is safe for concurrent use by any number of
// goroutines; its Source is called by one goroutine at a time.
package shed
