// Package chaos injects faults into calls, for testing that a system's
// resilience works before a real outage tests it: latency, panics, errors
// and substitute results, each at its own configured rate, reproducibly.
// It is the counterpart of the chaos strategies of Polly v8 (Simmy: fault,
// latency, outcome and behaviour injection) for rampart.
//
// Build an [Injector] with [New] and run the dependency's calls through
// [Injector.Do] or the typed [Call], innermost, so that every policy sees
// the fault as the real dependency would produce it:
//
//	inj, err := chaos.New(chaos.Config{ErrorRate: 0.05, Error: io.ErrUnexpectedEOF,
//		LatencyRate: 0.1, Latency: 200 * time.Millisecond})
//	...
//	err = p.Do(ctx, func(ctx context.Context) error { // p: a pipeline.Pipeline
//		return inj.Do(ctx, db.Ping)
//	})
//
// For HTTP, [Injector.RoundTripper] wraps a client's transport (faults as a
// client sees a failing server or network) and [Injector.Handler] wraps a
// server's handler (faults as the server's clients see them). Switch
// injection on and off at run time with [Injector.SetEnabled]: off, a call
// costs one atomic load more than calling the function.
//
// # Faults and their rates
//
// Each call draws its faults independently of every other call:
//
//   - a latency, with probability LatencyRate: the call waits Latency
//     (uniform in [Latency, LatencyMax] when LatencyMax is set) before going
//     on, and returns the context's error without running when the
//     context ends during the wait;
//   - then at most one of: a panic with PanicValue (probability PanicRate),
//     the error Error returned as is (ErrorRate), or a substitute result
//     (ResultRate): Call's [Substitute], the RoundTripper's response or the
//     Handler's reply with Status and Retry-After. These three share one
//     draw, so each gets exactly its own share of calls and their rates add
//     up to at most 1.
//
// The latency draw is independent of the other: a share LatencyRate ×
// ErrorRate of calls is delayed and then fails, as a dependency that times
// out slowly does. Do, and Call without a Substitute, have no result to
// substitute: their share of ResultRate runs the function.
//
// # Algorithm and reproducibility
//
// The n-th call of an injector (n counted while enabled) draws from a PCG
// (math/rand/v2) seeded with Config.Seed and n scrambled by SplitMix64's
// output function: its faults depend on (Seed, n) and nothing else. Two
// injectors with the same Config inject the same faults into their n-th
// calls; a run on one goroutine replays exactly; calls on many goroutines
// are race-free, take no lock and share no generator state, and n calls
// inject the same faults in all however the goroutines interleave. A zero
// Seed is drawn at random in New and reported by [Injector.Config], so a
// failing run can be replayed. A rate is compared with 53 random bits.
//
// Time: an injected latency waits on a real timer, or on Config.Sleep.
// Under testing/synctest the real timer follows the bubble's fake clock, so
// a test of a 30 s latency takes no time. [ManualSleep] moves a
// [rampart.ManualTicker] by the latency instead of waiting, so that
// policies reading that ticker (a breaker's slow-call threshold, an
// adaptive limiter's latency samples) see it.
//
// # Cost
//
// Disabled: one atomic load, then the function. Enabled with every rate 0:
// one atomic add more (the call's index, which is also Stats.Calls).
// Enabled with a rate set: the PCG draws (two or three, on the stack), and
// on an injection an atomic add to its counter and the listener, if any.
// None of these allocates; an injected latency allocates its timer when
// the context can end, and a substituted HTTP response allocates the
// response. The counters sit on their own cache line, off the read-mostly
// configuration, unless Config.Compact.
//
// # Zero value and configuration
//
// The zero Injector is not usable: build one with [New]. The zero [Config]
// injects nothing (every rate is 0) and starts enabled. Invalid values (a
// rate outside [0, 1] or NaN, a negative latency, LatencyMax below
// Latency, ...) are a [*rampart.ConfigError] from New.
//
// # Concurrency
//
// All methods are safe for concurrent use. Config.OnInject runs on the
// caller's goroutine before the fault takes effect; a panic in it is
// recovered and counted in Stats.ListenerPanics.
package chaos
