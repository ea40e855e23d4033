package main

import "slices"

// The comparisons are declared here, not guessed from the names: a peer's
// row is divided only by the rampart row a pair names, in the cases the pair
// names, and a pair joins only rows of one kind (TestPairsJoinOneKind). A row
// no pair names is shown in the full tables without a ratio.

// kind is how a benchmark row calls the policy.
type kind string

const (
	// executor: the library runs the function (Do, Run, Execute, Retry, ...).
	executor kind = "executor"
	// primitive: acquire and release (or allow and record) called by hand
	// around the function.
	primitive kind = "primitive"
	// handler: server middleware around an http.Handler.
	handler kind = "handler"
	// instance: the bytes of one instance, not a call.
	instance kind = "instance"
	// baseline: a building block or lower bound (a floor, the standard
	// library alone); never divided.
	baseline kind = "baseline"
)

// lib declares one library row of a group: how it calls the policy.
type lib struct {
	name  string
	cases []string // the cases this declaration covers; nil: all of the group's
	kind  kind
	calls string // what the row calls, for the full tables
}

// pair divides each peer's row by the rampart row in each of the cases.
type pair struct {
	label   string   // what is compared, in the tables and the summary
	rampart string   // rampart's library name: rampart or a rampart- variant
	peers   []string // the peers' library names
	cases   []string // nil: every case of the group where both rows exist
}

// group is one benchmark scenario (Benchmark<Group>/<Case>/<library>).
type group struct {
	name   string
	metric string // the unit compared: ns/op, or B/instance for Memory
	note   string // under the group's tables: what is compared
	libs   []lib
	pairs  []pair
}

// Case names shared by several declarations.
var (
	adaptiveAdmit   = []string{"Admit", "AdmitParallel"}
	timeoutCases    = []string{"Success", "SuccessParallel"}
	calleeReadsDone = []string{"CalleeReadsDone"}
	cancellable     = []string{"CancellableParent"}
	pipelineNoRead  = []string{"Success", "SuccessParallel", "Reject"}
	keyedCases      = []string{"Keyed"}
	rateDecision    = []string{"Admit", "AdmitParallel", "Reject", "RejectParallel"}
	retryFirstTry   = []string{"FirstTrySuccess", "FirstTrySuccessParallel"}
	softTimeoutCase = []string{"SuccessSoftTimeout"}
)

// groups is every scenario the tables know, in the suite's order.
var groups = []group{
	{
		name:   "Adaptive",
		metric: "ns/op",
		note: "Both libraries' primitives. rampart's Acquire/Release time a sample of the calls for the RTT once a window " +
			"is busy enough (adaptive/sampling.go): a window of at least 2T calls, T = 128 at the defaults (the least " +
			"power of two at or above max(8·MinWindowSamples, 4·MaxInFlight)), samples with stride calls/T rounded down " +
			"to a power of two, capped at MaxSampleStride (default 64). With the default 1 s Window, sampling starts " +
			"at 256 calls/s (1 call in 2) and reaches 1 in 64 at 8192 calls/s; below 256 calls/s every call is timed, " +
			"as in the rampart-every row. failsafe times every call. Both comparisons are shown: the sampled row " +
			"(its stride is in the rows' other metrics) and the every-call row.",
		libs: []lib{
			{name: "rampart", cases: adaptiveAdmit, kind: primitive, calls: "Acquire + Release, 1 call in stride timed"},
			{name: "rampart-every", kind: primitive, calls: "Acquire + Release, MaxSampleStride 1: every call timed (two clock reads)"},
			{name: "rampart-cached", kind: primitive, calls: "AcquireAt + ReleaseAt on a cached ticker's readings"},
			{name: "failsafe", cases: adaptiveAdmit, kind: primitive, calls: "adaptivelimiter TryAcquirePermit + Record: every call timed"},
			{name: "rampart", cases: []string{"Throttler"}, kind: primitive, calls: "Throttler AllowAt + RecordAt, one clock read"},
			{name: "failsafe", cases: []string{"Throttler"}, kind: primitive, calls: "adaptivethrottler TryAcquirePermit + RecordSuccess"},
		},
		pairs: []pair{
			{label: "primitive, every call timed", rampart: "rampart-every", peers: []string{"failsafe"}, cases: adaptiveAdmit},
			{label: "primitive, rampart timing a sample (1 call in stride: the rows' stride metric), failsafe every call", rampart: "rampart", peers: []string{"failsafe"}, cases: adaptiveAdmit},
			{label: "primitive, client-side throttler: allow + record", rampart: "rampart", peers: []string{"failsafe"}, cases: []string{"Throttler"}},
		},
	},
	{
		name:   "Bulkhead",
		metric: "ns/op",
		note: "Executor with executor: rampart's Do against failsafe's executor (failsafe.With(bulkhead).Run). " +
			"Primitive with primitive: rampart's Acquire + Release against each peer's try-acquire + release " +
			"(failsafe-permit is failsafe's TryAcquirePermit + ReleasePermit). Reject is a refused call on a full " +
			"bulkhead (limit 1, held).",
		libs: []lib{
			{name: "rampart", kind: primitive, calls: "Acquire + Release"},
			{name: "rampart-do", kind: executor, calls: "Do(ctx, fn)"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(bulkhead).Run(fn), executor built once"},
			{name: "failsafe-permit", kind: primitive, calls: "TryAcquirePermit + ReleasePermit"},
			{name: "goresiliency", kind: primitive, calls: "semaphore Acquire (arms a timer) + Release"},
			{name: "xsync", kind: primitive, calls: "semaphore.Weighted TryAcquire + Release"},
			{name: "chan", kind: primitive, calls: "buffered channel: non-blocking send + receive"},
		},
		pairs: []pair{
			{label: "executor: Do against failsafe's executor", rampart: "rampart-do", peers: []string{"failsafe"}},
			{label: "primitive: Acquire + Release against try-acquire + release", rampart: "rampart",
				peers: []string{"failsafe-permit", "goresiliency", "xsync", "chan"}},
		},
	},
	{
		name:   "Chaos",
		metric: "ns/op",
		note:   "What the fault injector costs the calls it lets through; no peer injects faults, nothing is divided.",
		libs: []lib{
			{name: "direct", kind: baseline, calls: "the function called without an injector"},
			{name: "rampart", kind: executor, calls: "the injector around the call"},
		},
	},
	{
		name:   "CircuitBreaker",
		metric: "ns/op",
		note: "Executor with executor, on breakers that count failures rather than keep a window of outcomes: " +
			"that is how every peer row is configured (gobreaker's default ReadyToTrip: more than 5 consecutive " +
			"failures; failsafe's default WithFailureThreshold: consecutive failures; go-resiliency's only mode: " +
			"errors without an error-free period), so the peers are divided by rampart-consecutive; the rampart row " +
			"(the default 100-call count window, which records every outcome) is divided only by failsafe-window, " +
			"failsafe's count window (WithFailureThresholdRatio), when the run has it. Primitive with primitive: rampart-acquire (Acquire + Release) against " +
			"gobreaker-twostep (TwoStepCircuitBreaker Allow + done) and failsafe-permit (TryAcquirePermit + Record).",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "Do(ctx, fn), 100-call count window"},
			{name: "rampart-counted", kind: executor, calls: "Do(ctx, fn), 100-call count window, Config.CountStats (per-P success counters)"},
			{name: "rampart-consecutive", kind: executor, calls: "Do(ctx, fn), Consecutive mode"},
			{name: "gobreaker", kind: executor, calls: "Execute(fn)"},
			{name: "goresiliency", kind: executor, calls: "Run(fn)"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(breaker).Run(fn), executor built once"},
			{name: "failsafe-window", kind: executor, calls: "failsafe.With(breaker).Run(fn), WithFailureThresholdRatio: a count window"},
			{name: "rampart-acquire", kind: primitive, calls: "Acquire + Release"},
			{name: "gobreaker-twostep", kind: primitive, calls: "TwoStepCircuitBreaker Allow + done(ok)"},
			{name: "failsafe-permit", kind: primitive, calls: "TryAcquirePermit + RecordSuccess/RecordFailure"},
		},
		pairs: []pair{
			{label: "executor, failure-counting breakers (rampart: Consecutive mode)", rampart: "rampart-consecutive", peers: []string{"gobreaker", "goresiliency", "failsafe"}},
			{label: "executor, count-window breakers", rampart: "rampart", peers: []string{"failsafe-window"}},
			{label: "executor, count-window breakers, rampart counting successes", rampart: "rampart-counted", peers: []string{"failsafe-window"}},
			{label: "primitive: Acquire + Release against the peers' two-step forms", rampart: "rampart-acquire", peers: []string{"gobreaker-twostep", "failsafe-permit"}},
		},
	},
	{
		name:   "Floor",
		metric: "ns/op",
		note:   "The building blocks every policy is made of, to read the policies' figures against; nothing is divided.",
		libs: []lib{
			{name: "direct", kind: baseline, calls: "the operation itself"},
			{name: "rampart", kind: baseline, calls: "the ticker's Now"},
			{name: "chan", kind: baseline, calls: "the channel operation itself"},
			{name: "mathrandv2", kind: baseline, calls: "math/rand/v2 top-level Int64N"},
			{name: "xexprand", kind: baseline, calls: "golang.org/x/exp/rand global Int63n"},
		},
	},
	{
		name:   "HTTPServer",
		metric: "ns/op",
		note: "Middleware with middleware, in process (a prebuilt request into a reused ResponseWriter): " +
			"httpguard.NewHandler over a pipeline of a circuit breaker, a rate limiter, a bulkhead and a " +
			"deadline-mode timeout against failsafehttp.NewHandler over failsafe's same four policies (its timeout " +
			"cancels too); the handler does not read its request context's Done channel. Reject: the rate limiter " +
			"refuses, both answer 429. rampart-soft (a timeout that classifies and never cancels) has no peer; " +
			"handler-floor is the bare handler; pipeline-floor and withcontext-floor are the deadline row's two lower bounds " +
			"(the pipeline alone, and net/http's request copy that hands the handler its deadline).",
		libs: []lib{
			{name: "handler-floor", kind: baseline, calls: "the bare handler"},
			{name: "pipeline-floor", kind: baseline, calls: "the deadline-mode pipeline alone, no HTTP"},
			{name: "withcontext-floor", kind: baseline, calls: "one Request.WithContext (net/http's request copy)"},
			{name: "rampart", kind: handler, calls: "httpguard.NewHandler, deadline-mode timeout"},
			{name: "rampart-soft", kind: handler, calls: "httpguard.NewHandler, soft timeout (never cancels)"},
			{name: "failsafe", kind: handler, calls: "failsafehttp.NewHandler, cancelling timeout"},
		},
		pairs: []pair{
			{label: "server middleware, four policies, cancelling timeout", rampart: "rampart", peers: []string{"failsafe"}},
		},
	},
	{
		name:   "GRPC",
		metric: "ns/op",
		note: "Interceptors with interceptors. Interceptors: each library's client interceptor called directly with an " +
			"invoker that calls its server interceptor with a handler returning a prebuilt response (what the " +
			"interceptors add, without a call's noise); grpcguard over a pipeline of a circuit breaker, a high-rate " +
			"limiter and a bulkhead on each side, against failsafegrpc over failsafe-go's same three policies. " +
			"RateLimitInterceptor: a server rate limit alone, where go-grpc-middleware's ratelimit interceptor (over " +
			"x/time/rate) applies. Unary and RateLimit: the same over bufconn (in memory: HTTP/2 framing and proto " +
			"coding, no socket), one call at a time: tens of µs whose noise on a shared machine exceeds what the " +
			"interceptors add. direct is the call without interceptors: subtract it from a row for what they add.",
		libs: []lib{
			{name: "direct", kind: baseline, calls: "the call without interceptors"},
			{name: "rampart", kind: handler, calls: "grpcguard interceptors over a pipeline"},
			{name: "failsafe", kind: handler, calls: "failsafegrpc interceptors over failsafe-go's policies"},
			{name: "grpcmiddleware", cases: []string{"RateLimit", "RateLimitInterceptor"}, kind: handler,
				calls: "go-grpc-middleware's ratelimit.UnaryServerInterceptor over x/time/rate"},
		},
		pairs: []pair{
			{label: "gRPC interceptors, server and client, three policies", rampart: "rampart", peers: []string{"failsafe"},
				cases: []string{"Interceptors", "Unary"}},
			{label: "gRPC server rate-limit interceptor", rampart: "rampart", peers: []string{"failsafe", "grpcmiddleware"},
				cases: []string{"RateLimitInterceptor", "RateLimit"}},
		},
	},
	{
		name:   "Hedge",
		metric: "ns/op",
		note: "Executor with executor; no hedge fires (delay 1 h). Like for like: rampart-async (Config.AsyncFirst) and " +
			"failsafe both run the first attempt on a new goroutine and return as soon as an attempt wins. rampart's " +
			"default runs the first attempt on the caller's goroutine: the same result for a function that honours " +
			"its context, but a caller whose first attempt ignores its cancelled context waits for it; that row is " +
			"divided too, labelled.",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "Do, fixed delay, first attempt on the caller's goroutine"},
			{name: "rampart-cached", kind: executor, calls: "the same on a cached ticker"},
			{name: "rampart-p95", kind: executor, calls: "Do, live p95 delay"},
			{name: "rampart-async", kind: executor, calls: "Do, AsyncFirst: first attempt on a new goroutine"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(hedgepolicy).Run: every attempt on a new goroutine"},
		},
		pairs: []pair{
			{label: "executor, first attempt on a new goroutine in both", rampart: "rampart-async", peers: []string{"failsafe"}},
			{label: "executor, each default: rampart's first attempt on the caller's goroutine, failsafe's on a new one",
				rampart: "rampart", peers: []string{"failsafe"}},
		},
	},
	{
		name:   "Keyed",
		metric: "ns/op",
		note: "Primitive with primitive: per-key admission with n keys present (MaxKeys = n), asked in a " +
			"precomputed order, uniform or Zipf (s = 1.1), from one goroutine or (Parallel) from every one: " +
			"rampart's Keyed.Allow against x/time/rate limiters in a map behind a sync.RWMutex (xtimerate) and in " +
			"a sync.Map (xtimerate-syncmap). NewKeyFull: a key not held while the table is full of active keys " +
			"(refused); no peer bounds its table, so it has no ratio.",
		libs: []lib{
			{name: "rampart", kind: primitive, calls: "Keyed.Allow(key)"},
			{name: "xtimerate", kind: primitive, calls: "map[string]*rate.Limiter behind a sync.RWMutex, Allow"},
			{name: "xtimerate-syncmap", kind: primitive, calls: "sync.Map of *rate.Limiter, Allow"},
		},
		pairs: []pair{
			{label: "keyed admission, 1k keys", rampart: "rampart", peers: []string{"xtimerate", "xtimerate-syncmap"}, cases: keyedSizes("1k")},
			{label: "keyed admission, 100k keys", rampart: "rampart", peers: []string{"xtimerate", "xtimerate-syncmap"}, cases: keyedSizes("100k")},
			{label: "keyed admission, 1M keys", rampart: "rampart", peers: []string{"xtimerate", "xtimerate-syncmap"}, cases: keyedSizes("1M")},
		},
	},
	{
		name:   "Memory",
		metric: "B/instance",
		note: "Bytes of one instance with its default configuration (lower is better): unsafe.Sizeof plus what New " +
			"allocates. rampart pads the words that many goroutines write on every call to the cache line; " +
			"rampart-compact is Config.Compact, without the padding, for many cold instances (per-tenant, per-route " +
			"keys). The ratio is the peer's bytes divided by rampart's.",
		libs: []lib{
			{name: "rampart", kind: instance, calls: "default layout (padded)"},
			{name: "rampart-compact", kind: instance, calls: "Config.Compact"},
			{name: "failsafe", kind: instance, calls: "default configuration"},
			{name: "gobreaker", kind: instance, calls: "default settings"},
			{name: "goresiliency", kind: instance, calls: "default configuration"},
			{name: "xtimerate", kind: instance, calls: "rate.NewLimiter"},
			{name: "uberratelimit", kind: instance, calls: "ratelimit.New"},
			{name: "xsync", kind: instance, calls: "semaphore.NewWeighted"},
			{name: "chan", kind: instance, calls: "make(chan struct{}, n)"},
		},
		pairs: []pair{
			{label: "bytes per instance, default layout", rampart: "rampart",
				peers: []string{"failsafe", "gobreaker", "goresiliency", "xtimerate", "uberratelimit", "xsync", "chan"}},
			{label: "bytes per instance, compact layout", rampart: "rampart-compact",
				peers: []string{"failsafe", "gobreaker", "goresiliency", "xtimerate", "uberratelimit", "xsync", "chan"}},
		},
	},
	{
		name:   "Pipeline",
		metric: "ns/op",
		note: "Executor with executor: rampart's pipeline against failsafe.With over the same policies (retry, " +
			"circuit breaker, rate limiter, bulkhead, and a timeout that cancels the function's context at its " +
			"deadline in both). In Success, SuccessParallel and Reject the function does not read ctx.Done() " +
			"(rampart's deadline context makes its channel only when read); CalleeReadsDone reads it and " +
			"CancellableParent runs under a cancellable parent context. SuccessNoTimeout drops the timeout from " +
			"both. SuccessSoftTimeout's rampart rows use the soft timeout (classifies a late call, never cancels), " +
			"which failsafe does not have: its failsafe row runs the cancelling timeout, so it is not divided " +
			"(SuccessNoTimeout is the nearest like-for-like: neither cancels). rampart-primitives calls the same " +
			"policies' primitives by hand.",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "Pipeline.Do, deadline-mode timeout"},
			{name: "rampart", cases: softTimeoutCase, kind: executor, calls: "Pipeline.Do, soft timeout (never cancels)"},
			{name: "rampart-cached", kind: executor, calls: "the same on a cached ticker"},
			{name: "rampart-cached", cases: softTimeoutCase, kind: executor, calls: "soft timeout on a cached ticker"},
			{name: "rampart", cases: []string{"SuccessNoTimeout"}, kind: executor, calls: "Pipeline.Do, no timeout"},
			{name: "rampart-cached", cases: []string{"SuccessNoTimeout"}, kind: executor, calls: "no timeout, on a cached ticker"},
			{name: "rampart-counted", cases: []string{"Success", "SuccessParallel"}, kind: executor, calls: "Pipeline.Do with Config.CountStats (per-P outcome counters)"},
			{name: "rampart-shed", cases: []string{"Success", "SuccessParallel"}, kind: executor, calls: "Pipeline.Do with a shed.Shedder in the pipeline (never engaged)"},
			{name: "rampart-primitives", kind: primitive, calls: "the policies' primitives called by hand, soft timeout"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(retry, breaker, rate limiter, bulkhead, timeout).Run"},
			{name: "failsafe", cases: []string{"SuccessNoTimeout"}, kind: executor, calls: "failsafe.With(retry, breaker, rate limiter, bulkhead).Run"},
			{name: "failsafe", cases: softTimeoutCase, kind: executor, calls: "failsafe with its cancelling timeout: not a soft timeout"},
			{name: "direct", kind: baseline, calls: "one time.Now()"},
		},
		pairs: []pair{
			{label: "executor, five policies, the function does not read ctx.Done()", rampart: "rampart", peers: []string{"failsafe"}, cases: pipelineNoRead},
			{label: "executor, five policies, the function reads ctx.Done()", rampart: "rampart", peers: []string{"failsafe"}, cases: calleeReadsDone},
			{label: "executor, five policies, under a cancellable parent context", rampart: "rampart", peers: []string{"failsafe"}, cases: cancellable},
			{label: "executor, four policies, no timeout", rampart: "rampart", peers: []string{"failsafe"}, cases: []string{"SuccessNoTimeout"}},
		},
	},
	{
		name:   "Fallback",
		metric: "ns/op",
		note:   "Executor with executor: a fallback outermost around the four policies of Pipeline/SuccessNoTimeout (retry, circuit breaker, rate limiter, bulkhead), a call returning a string: rampart's pipeline.Fallback against failsafe.With(fallback, ...). Success: every policy admits; Reject: the rate limiter refuses and the fallback answers; Try: the outcome API. rampart is the pipeline alone; -cached rows share a rampart.CachedTicker; -stale stores each success's value.",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "pipeline.Call, no fallback"},
			{name: "rampart-value", kind: executor, calls: "Fallback.Call, Value"},
			{name: "rampart-func", kind: executor, calls: "Fallback.Call, Func"},
			{name: "rampart-stale", kind: executor, calls: "Fallback.Call, Stale (a store per success on the default ticker)"},
			{name: "rampart-cached", cases: []string{"Success", "Try"}, kind: executor, calls: "pipeline.Call / TryCall on a cached ticker"},
			{name: "rampart-cached-value", cases: []string{"Success", "Try"}, kind: executor, calls: "Fallback.Call / Try, Value, cached ticker"},
			{name: "rampart-cached-stale", cases: []string{"Success"}, kind: executor, calls: "Fallback.Call, Stale, cached ticker (a store per tick)"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(fallback, retry, breaker, rate limiter, bulkhead).Get"},
		},
		pairs: []pair{{label: "executor, four policies and a fallback with a value", rampart: "rampart-value", peers: []string{"failsafe"}, cases: []string{"Success", "Reject"}}},
	},
	{
		name:   "RateLimit",
		metric: "ns/op",
		note: "Primitive with primitive: one admission decision (rampart Allow, x/time/rate Allow, uber's Take, which " +
			"never waits at these rates and has no rejection, failsafe TryAcquirePermit). Keyed cases: rampart's Keyed " +
			"limiter against a sync.Map of per-key limiters, 1024 keys present, asked round robin from every " +
			"goroutine (the Keyed scenario has 1k to 1M keys).",
		libs: []lib{
			{name: "rampart", kind: primitive, calls: "Limiter.Allow"},
			{name: "rampart", cases: keyedCases, kind: primitive, calls: "Keyed.Allow(key)"},
			{name: "rampart-cached", kind: primitive, calls: "the same on a cached ticker"},
			{name: "rampart-sharded", kind: primitive, calls: "a Sharded limiter's Allow"},
			{name: "xtimerate", kind: primitive, calls: "rate.Limiter Allow"},
			{name: "xtimerate", cases: keyedCases, kind: primitive, calls: "sync.Map Load + rate.Limiter Allow"},
			{name: "uberratelimit", kind: primitive, calls: "Take (never waits here)"},
			{name: "uberratelimit", cases: keyedCases, kind: primitive, calls: "sync.Map Load + Take"},
			{name: "failsafe", kind: primitive, calls: "ratelimiter TryAcquirePermit"},
			{name: "failsafe", cases: keyedCases, kind: primitive, calls: "sync.Map Load + TryAcquirePermit"},
		},
		pairs: []pair{
			{label: "primitive: one admission decision", rampart: "rampart", peers: []string{"xtimerate", "uberratelimit", "failsafe"}, cases: rateDecision},
			{label: "keyed, 1024 keys", rampart: "rampart", peers: []string{"xtimerate", "uberratelimit", "failsafe"}, cases: []string{"Keyed"}},
		},
	},
	{
		name:   "Retry",
		metric: "ns/op",
		note: "Executor with executor: every library's retry wrapper around an operation that succeeds at once " +
			"(3 attempts, exponential backoff, never reached). failsafe's executor is built once; the call's " +
			"context is attached per call (WithContext), as a server with per-request contexts does. WithBudget " +
			"adds each library's default retry budget (rampart: gRPC A6 token bucket; failsafe: budget.New).",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "Policy.Do"},
			{name: "rampart", cases: []string{"WithBudget"}, kind: executor, calls: "Policy.Do with a gRPC A6 token bucket"},
			{name: "rampart-call", kind: executor, calls: "retry.CallIf, typed result and predicate"},
			{name: "rampart-ratio", kind: executor, calls: "Do with the SRE ratio budget"},
			{name: "rampart-ratio-cached", kind: executor, calls: "the same on a cached ticker"},
			{name: "failsafe", kind: executor, calls: "executor.WithContext(ctx).Run(fn)"},
			{name: "failsafe", cases: []string{"WithBudget"}, kind: executor, calls: "the same with budget.New()"},
			{name: "backoff", kind: executor, calls: "backoff.Retry(ctx, op, WithMaxTries(3))"},
			{name: "retrygo", kind: executor, calls: "retry.Do(op, options...)"},
			{name: "goresiliency", kind: executor, calls: "retrier.RunCtx"},
		},
		pairs: []pair{
			{label: "executor, first try succeeds", rampart: "rampart", peers: []string{"failsafe", "backoff", "retrygo", "goresiliency"}, cases: retryFirstTry},
			{label: "executor with each library's default retry budget", rampart: "rampart", peers: []string{"failsafe"}, cases: []string{"WithBudget"}},
		},
	},
	{
		name:   "Timeout",
		metric: "ns/op",
		note: "Cancelling timeouts with each other: rampart's deadline mode, failsafe's timeout (a runtime timer, the " +
			"execution cancelled at the deadline) and context.WithTimeout by hand (direct) all run the function on " +
			"the caller's goroutine with a context done at the deadline. In Success the function does not read " +
			"ctx.Done() (rampart's context makes its channel only when read); CalleeReadsDone reads it; " +
			"CancellableParent runs under a cancellable parent. Returning at the deadline whatever the function " +
			"does: rampart's DoAbandon (rampart-abandon) against go-resiliency's deadline, both running the function " +
			"on another goroutine. rampart-soft (classification only) has no peer; handoff-floor is the least a " +
			"call handed to another goroutine costs, cancel-floor what registering with a cancellable parent costs.",
		libs: []lib{
			{name: "rampart", kind: executor, calls: "Do, deadline mode"},
			{name: "rampart-soft", kind: executor, calls: "Do, soft mode: classifies, never cancels"},
			{name: "rampart-abandon", kind: executor, calls: "DoAbandon: function on a parked worker, returns at the deadline"},
			{name: "rampart-cached", kind: executor, calls: "Do, deadline mode on a cached ticker"},
			{name: "failsafe", kind: executor, calls: "failsafe.With(timeout).Run, cancels at the deadline"},
			{name: "goresiliency", kind: executor, calls: "deadline.Run: function on a new goroutine, returns at the deadline"},
			{name: "direct", kind: executor, calls: "context.WithTimeout + cancel around the call, by hand"},
			{name: "handoff-floor", kind: baseline, calls: "one round trip to a parked goroutine, no timeout"},
			{name: "cancel-floor", kind: baseline, calls: "no timeout: the registration on the cancellable parent alone"},
		},
		pairs: []pair{
			{label: "cancelling timeout, the function does not read ctx.Done()", rampart: "rampart", peers: []string{"failsafe", "direct"}, cases: timeoutCases},
			{label: "cancelling timeout, the function reads ctx.Done()", rampart: "rampart", peers: []string{"failsafe", "direct"}, cases: calleeReadsDone},
			{label: "cancelling timeout, under a cancellable parent context", rampart: "rampart", peers: []string{"failsafe", "direct"}, cases: cancellable},
			{label: "returns at the deadline, function on another goroutine", rampart: "rampart-abandon", peers: []string{"goresiliency"},
				cases: slices.Concat(timeoutCases, calleeReadsDone, cancellable)},
		},
	},
}

// keyedSizes is the Keyed scenario's admission cases at one size: uniform
// and Zipf, from one goroutine and in parallel.
func keyedSizes(size string) []string {
	return []string{"Uniform" + size, "Zipf" + size, "Uniform" + size + "Parallel", "Zipf" + size + "Parallel"}
}

// groupOf returns the declaration of the named group, or nil.
func groupOf(name string) *group {
	for i := range groups {
		if groups[i].name == name {
			return &groups[i]
		}
	}
	return nil
}

// covers reports whether a case list (nil: every case) covers c.
func covers(cases []string, c string) bool {
	return cases == nil || slices.Contains(cases, c)
}

// libOf returns the declaration of library name in case c: the first one
// that names the case, else the first that covers every case.
func (g *group) libOf(c, name string) (lib, bool) {
	for _, l := range g.libs {
		if l.name == name && l.cases != nil && slices.Contains(l.cases, c) {
			return l, true
		}
	}
	for _, l := range g.libs {
		if l.name == name && l.cases == nil {
			return l, true
		}
	}
	return lib{}, false
}
