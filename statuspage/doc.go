// Package statuspage serves the live state of a program's rampart
// instances over HTTP: an [http.Handler] with a JSON document at
// .../status.json and an HTML page at .../ that refreshes itself and draws
// the last minutes of each instance as small inline SVG charts. It is an
// operator's window, in the tradition of Go's expvar and net/http/pprof and
// of the /statusz pages of Google's servers; the library's hot paths know
// nothing of it.
//
// # Exposure
//
// Nothing is served unless the program mounts the handler on a server of its
// own: the package registers no route (unlike expvar and pprof, which add
// themselves to http.DefaultServeMux) and starts no listener. Mount it on an
// internal or loopback listener, or behind the program's own authentication:
// the page names every instance and shows its counters.
//
//	h, err := statuspage.New(statuspage.Config{Instances: []statuspage.Instance{
//		{Name: "db", Value: breaker}, {Name: "api", Value: admission},
//	}})
//	mux.Handle("/debug/rampart/", h) // the page at /debug/rampart/, the JSON at /debug/rampart/status.json
//
// The handler answers by the last element of the path, so it works with or
// without http.StripPrefix: a path ending in /status.json is the JSON, one
// ending in /action the actions (below), anything else the page (mount it
// with a trailing slash, so that the page's relative links resolve).
//
// # Read-only by default
//
// Without Config.Authorize the handler changes nothing: every POST to
// .../action is refused with 403 Forbidden. With it, a POST to .../action
// whose request Authorize accepts may move a breaker by hand into any state
// [circuitbreaker.Breaker.TransitionTo] can enter (force-open, open,
// half-open, metrics-only, disable: the last admits every call and records
// nothing, a forced close) or reset it ([circuitbreaker.Breaker.Reset]:
// Closed, its window and open backoff cleared), or switch a chaos injector
// on or off ([chaos.Injector.SetEnabled]); a request it refuses gets 403.
// Settings that take a value (a bulkhead's SetMax, a limiter's SetRate) are
// not offered: a new value is a change to review, not a button. Actions are
// POST only (any other method gets 405), and a POST whose Origin header names
// another host than the request's is refused (403) whatever Authorize says,
// so that a page elsewhere cannot make a logged-in browser submit one (the
// usual cross-site request forgery defence; Authorize still decides for
// requests without an Origin). The page shows the action buttons only to
// requests that Authorize accepts.
//
// # What it shows
//
// Instances come from Config.Instances (an explicit list of names and
// values) and from Config.Source (anything with a Range method: package
// registry's Registry is one), listed by name; a name in both is shown
// once, the explicit one. New refuses a nil value in Config.Instances,
// typed or not (a nil *circuitbreaker.Breaker in the interface, whose
// Stats would panic every sample); a Source's nil values are left out.
// Each instance is shown through its own exported API, its Stats and
// accessors:
//
//	kind               value                    shown                              charted
//	-----------------  -----------------------  ---------------------------------  -----------------------------
//	circuitbreaker     *circuitbreaker.Breaker  Stats (state, window counts, ...)  failure rate %, state strip,
//	                                                                               successes/s (with CountStats)
//	bulkhead           *bulkhead.Bulkhead       Stats (in flight, max, waiting)    in flight, max
//	ratelimit          *ratelimit.Limiter       Stats, Tokens                      tokens, burst
//	ratelimit.keyed    *ratelimit.Keyed         KeyedStats                         keys held, rejected/s
//	ratelimit.sharded  *ratelimit.Sharded       Stats, Shards                      rejected/s
//	adaptive           *adaptive.Limiter        Stats (limit, in flight, ...)      limit, in flight
//	throttler          *adaptive.Throttler      ThrottlerStats                     rejection probability
//	shed               *shed.Shedder            Stats (in flight, cap, signals)    in flight, rejected/s
//	retry              *retry.Policy            Stats, MaxAttempts, its budget     retries/s, budget refused/s
//	retry.budget       *retry.TokenBucket       Tokens                             tokens
//	retry.budget       *retry.RatioBudget       Counts (requests, retries)         requests, retries
//	chaos              *chaos.Injector          Stats, Enabled                     calls/s, faults/s
//	hedge              *hedge.Hedger            Stats (hedges, delay, ...)         hedges/s, delay ms
//	timeout            *timeout.Timeout         Stats, Duration, Mode              timeouts/s, abandoned
//	pipeline           *pipeline.Pipeline       each of its policies, as above,    calls/s, rejected/s (with
//	                                            and Stats as Outcomes (with        CountStats; no chart
//	                                            Config.CountStats)              otherwise)
//	fallback           *pipeline.Fallback[T],   FallbackStats (answers by ending,  answered/s, stale served/s
//	                   *pipeline.DoFallback     stale served, expired)
//
// A Fallback of any T is recognised by its method Stats()
// pipeline.FallbackStats; its counts, a pipeline's Outcomes and a breaker's
// Successes are 0 unless the pipeline counts outcomes
// (pipeline.Config.CountStats) or the breaker its successes
// (circuitbreaker.Config.CountStats). Any other value is listed with its Go
// type and no state. In the JSON, each
// Stats struct keeps its Go field names and types: durations are integers of
// nanoseconds, and a breaker's State is its name ("closed", "open", ...).
// Rates per second ("/s") are differences between two samples divided by
// the time between them.
//
// # Sampling and memory
//
// Each instance keeps a ring of Config.Samples samples (300 by default), one
// taken at most every Config.Interval (1 s by default): 5 minutes. A sample
// is taken when a request for the page or the JSON finds the last one
// Interval old or older, so with nobody watching the charts have gaps. For
// a continuous history the program starts [Handler.Run] on a goroutine of its
// own (it samples every Interval until its context ends) or calls
// [Handler.Sample] from a loop it already has: the package starts no
// goroutine itself. A ring is dropped when its instance leaves the Source,
// and restarted when another instance takes its name (a registry's
// replacement): a rate is never drawn across two instances' counts (a
// value that == cannot compare keeps its ring, and where a count goes
// down no rate is drawn). Samples × Interval, the window charted, must fit
// in a time.Duration: New refuses a longer one. Memory: Samples × 32 B per charted instance (9.6 KB at the default; a
// sample is a reading, two values and a state).
//
// Timestamps are readings of Config.Ticker (rampart.DefaultTicker() when
// nil): give it the ticker the instances use, and a [rampart.ManualTicker]
// in tests makes the JSON deterministic. Budgets (TokenBucket, RatioBudget)
// have no ticker of their own and are read at this one.
//
// # Refresh
//
// The page refreshes itself with a meta refresh (every Config.Refresh, 5 s
// by default), not a script polling the JSON: the charts are drawn by the
// server from its rings, in one place, with no second renderer in
// JavaScript to keep in step; the page works
// with JavaScript disabled and is served with a Content-Security-Policy that
// allows no script at all, which matters for a page that can carry action
// buttons. The cost is a whole page (a few KB per instance) per refresh,
// which is nothing for an operator's page.
//
// Serving the page or the JSON takes a mutex (the rings'), reads each
// instance's Stats and allocates: it is a cold path, never on a call's.
package statuspage
