// Package ratelimit limits the rate of admissions with GCRA (the generic
// cell rate algorithm): exact, lock-free, allocation-free, and immune to
// stale timestamps.
//
// Build a [Limiter] with [New] and ask [Limiter.Allow] before each call (or
// run the call in [Limiter.Do]); [Limiter.Wait] blocks until a permit is
// due and [Limiter.Reserve] schedules one ahead. [Keyed] (with [NewKeyed])
// keeps one limit per client or tenant. A pipeline uses the methods under
// For composition.
//
// # Algorithm
//
// A [Limiter]'s state is one word: the theoretical arrival time (TAT), the
// instant at which the limiter would be back to a full burst. By default the
// word shares its padded cache lines only with the limiter's parameters,
// which every call reads with it (no other object sits on them); with
// Config.Compact it is not padded. With emission interval T (1/rate) and
// tolerance τ = burst·T, a
// request for n permits at time now is admitted when
//
//	max(TAT, now) + n·T − now ≤ τ
//
// and then TAT becomes max(TAT, now) + n·T with one compare-and-swap. A
// rejection only reads the word, so an overloaded limiter does not bounce
// its cache line between cores. Token-bucket and limit-per-period
// configurations are the same thing in other words (see [Config]).
//
// Exactness: the emission interval is kept as an exact fraction (period/limit
// nanoseconds, counted as a whole number of units of 0.5 to 1 ns), so
// rounding never accumulates. The reference is GCRA computed in exact
// rational arithmetic with that interval, on the same ns readings:
//
//   - No admission ever comes before the instant the reference gives it,
//     and every wait (AdmitN, ReserveN, Wait) ends at or after it. So
//     over any window of length W a limiter admits at most
//     burst + rate·W + 1 permits.
//   - For a whole-ns interval (1e9/rate a whole number: 1, 10, 1000, 0.1 or
//     2.5 per second; a Period that Limit divides) the limiter is the
//     reference: the same admissions at the same readings, the same waits.
//   - Otherwise an admission may come later than the reference, by less
//     than one unit, so at most 1 ns: a reading that starts a new phase
//     (the limiter was idle) puts the TAT on the unit grid, and when the
//     reading falls between grid points the TAT goes to the next one,
//     because the one below would admit some later permit early. For
//     example, a full burst taken in several calls at that very reading
//     may get its last permit only 1 ns later. A single 64-bit word cannot
//     hold every phase of an interval like 1e9/3 ns over the whole clock
//     range. The error does not grow: it is fixed when the phase starts
//     and no later admission adds to it.
//
// Slots committed ahead (ReserveN, WaitN, a burst spent at once) keep their
// phase: the n-th slot after a phase starting at 0 is n·period/limit
// rounded up to the ns, for any n, however long it runs. Time never moves
// backwards: the TAT only grows, so a caller whose now is older than other
// callers' cannot create credit (x/time/rate's golang/go#71360); a stale
// now counts as an early arrival.
//
// # Which method
//
//   - Fail fast: [Limiter.Allow] (reads the ticker), or [Limiter.AllowN] /
//     [Limiter.AdmitN] with a now shared with other policies;
//     AdmitN also tells how long to wait when it rejects.
//   - Wait: [Limiter.WaitN] blocks until admitted, or fails at once when the
//     wait would pass the context's deadline.
//   - Schedule: [Limiter.ReserveN] commits permits at a future time and
//     returns the delay; [Reservation.CancelAt] gives them back when that is
//     exact (see its rule).
//   - Per client or tenant: [Keyed], one limit per key, bounded, idle keys
//     evicted.
//   - Extreme contention: [Sharded], K independent limiters of rate/K.
//
// # For composition
//
// A pipeline or an adapter that shares one clock reading between policies
// uses [Limiter.AdmitN] (admit, or say how long until it would: the
// Retry-After hint), [Keyed.AdmitN], [Sharded.AdmitN],
// [Limiter.RejectedError] and the Ticker accessors. Applications call Allow,
// Admit, Reserve, Wait, Do and Call.
//
// The names follow golang.org/x/time/rate, with rampart's deviations:
// readings are int64 Ticker nanoseconds, not time.Time; x/time/rate's Limit
// (events per second) is rampart's Rate (Config.Rate, SetRate), while
// rampart's Limit is an exact count per Config.Period (SetLimit);
// ReserveN takes a maxWait and returns the rejection error; Cancel reports
// whether the permits came back; AdmitN has no x/time/rate counterpart
// (ReserveN, DelayFrom and Cancel there).
//
// # Zero value and concurrency
//
// The zero Limiter is not usable: create one with [New] (or [NewKeyed],
// [NewSharded]). Every method is safe for concurrent use. The rate and burst
// can be changed at run time ([Limiter.SetRate], [Limiter.SetLimit],
// [Limiter.SetBurst]); admission never takes a lock. A setter holds the
// TAT word (it swaps a retired marker into it) from its check to the
// publication of the next state, which for the shorthands includes their
// read of the Ticker; admissions and other setters spin meanwhile. If the
// setter ends there (an invalid value, a Ticker that panics or calls
// runtime.Goexit) the word gets its TAT back unchanged, and a panic reaches
// the setter's caller as it was.
//
// # Live reconfiguration
//
// [Limiter.Update] (and [Limiter.UpdateAt]) takes a whole Config (the one
// New was given, or [Limiter.Config]'s, changed), validates it exactly as
// New does, and applies
// it while calls run, or refuses it with a *rampart.ConfigError naming
// the field and changes nothing. It is the setters' code (one new state
// published at once: a call reads one state pointer, so it sees the old
// rate and burst or the new ones, never a mix) and keeps their
// guarantees: the permits available, or committed ahead, carry over,
// capped at the new burst. A Config with the rate and burst in force
// changes nothing, so reservations stay cancellable.
//
//   - Rate, Limit, Period, Capacity, RefillRate, Burst: updatable, in any
//     of the three forms (a Limit/Period limiter may become a token
//     bucket): all are the same GCRA state, a rate and a burst.
//   - Name: fixed: New builds the rejection error that carries it, once.
//     An empty Name keeps it (a registry names the limiters it builds from
//     a Config without one, and that Config, changed, is accepted).
//   - Ticker: fixed: the theoretical arrival time is counted in readings
//     of that clock; another clock's do not compare with them.
//   - Compact: fixed: the layout of the states New chose.
//   - CountStats, OnRejected: fixed: New allocates the counters and the
//     listener's block, or leaves them out, and every admission reads that
//     choice from a word New set (making it replaceable would cost an
//     atomic load per call). Update accepts the func value New was given,
//     as Config returns it, and refuses any other func value;
//     whether another evaluation of the same func literal is accepted is
//     unspecified (it depends on what the literal captures and on the
//     compiler), so pass the value New was given.
//
// [Limiter.Config] returns the configuration in force with its defaults
// filled in, the rate in its exact Limit/Period form (per second when a
// second holds a whole number of intervals; Rate, Capacity and RefillRate
// zero: to set another form, zero Limit and Period first).
//
// [Sharded.Update] is the same over ShardedConfig, with Shards fixed (New
// allocated them; 0 means those shards, whatever GOMAXPROCS is now;
// Compact is ignored, as by NewSharded), and [Sharded.Config] reports the
// total rate and burst. Sharded Updates are serialised, so racing Updates
// leave every shard on one of their configurations, and each reads the
// Ticker once, before any shard changes. It updates the shards one after
// the other: a call racing it may take its permit from a shard already
// updated and borrow from one not yet, each at its own rate. [Keyed] has no Update: every key's TAT is counted in the
// parameters NewKeyed fixed, which each admission reads from the instance
// without a load of a state pointer; changing them would cost every call
// that load and a conversion of up to MaxKeys TATs racing the admissions.
// Build a new Keyed instead.
package ratelimit
