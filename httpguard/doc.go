// Package httpguard puts rampart's policies in front of net/http, with the
// standard library only: a server middleware that admits requests through a
// [pipeline.Pipeline] and answers rejections with 429 or 503 and a
// Retry-After header, and a client [http.RoundTripper] that retries
// idempotent requests safely, honours the server's Retry-After, and can
// hedge idempotent requests and keep a circuit breaker per host.
//
// On a server, build a [pipeline.Pipeline] and wrap the handler with
// [NewHandler] (or [Middleware] for a router's middleware chain). On a
// client, wrap the transport with [NewTransport] and set the result as an
// http.Client's Transport. Both take their pipeline in the Config and
// return a [*rampart.ConfigError] for an invalid configuration.
//
// # Server
//
// [NewHandler] (or [Middleware]) runs each request through a pipeline
// (typically a rate limiter, a bulkhead or adaptive limit, a breaker, an
// overload shedder and a timeout; a retry has no use on a server and is
// ignored there):
//
//   - a rate-limit rejection answers 429 Too Many Requests;
//   - a breaker, bulkhead, adaptive-limit or shed rejection answers 503
//     Service Unavailable (the pipeline's Config.Shed sheds requests while
//     this process is overloaded; a server gives each request a priority
//     for it with the pipeline's Config.ShedPriority, read from the
//     request's context);
//   - both carry Retry-After: the policy's hint (the rate limiter's wait, the
//     breaker's remaining open time) rounded up to whole seconds, or
//     [ServerConfig.DefaultRetryAfter] when the policy has none;
//   - when the pipeline's timeout expires and the handler has written
//     nothing, the answer is 503, or [ServerConfig.TimeoutStatus] (504 for a
//     gateway), with Retry-After (ServerConfig.DefaultRetryAfter),
//     Cache-Control: no-store and without the entity headers
//     (ETag, Last-Modified, Content-Encoding, Set-Cookie, ...) the handler
//     set for the body it never wrote (those set before the guard ran
//     stay); the same answer when the request's context ended before or
//     while it was admitted (not an implicit 200). The handler sees the deadline in its request's context and
//     must honour it: the permit it holds is released when it returns, never
//     before (releasing a permit while the work still runs would break the
//     limit);
//   - the handler's status counts as a failure for the breaker and the
//     adaptive limit when [ServerConfig.IsFailure] says so (5xx by default);
//   - a handler that panics counts as a failure, its permits are released
//     and the panic goes on; but a handler that aborts with
//     http.ErrAbortHandler because the client went away (its request's
//     context ended: httputil.ReverseProxy does so when the client leaves
//     mid-body) says nothing about the handler's health: the pipeline sees
//     an error matching context.Canceled and http.ErrAbortHandler, which
//     the breaker's and the adaptive limit's default classifiers record as
//     Ignored (a custom Classify should too), every permit is released,
//     and the middleware re-panics with http.ErrAbortHandler as net/http
//     expects. An abort while the pipeline's deadline has passed is that
//     timeout; one with the client still there (a proxy whose upstream
//     broke mid-body) is a failure, as any panic.
//
// A [ServerConfig.Fallback] answers, in the guard's place, the rejections
// and the timeout answer ([ServerConfig.FallbackWhen] narrows them to some
// policies, or adds the requests whose context ended): a static page or a
// cached body ([StaticFallback]), sent with the guard's status and
// Retry-After, or with a status and headers of its own (200 to serve a
// cached page as the answer, Retry-After dropped). The policies count the
// rejection or the timeout whatever the fallback writes.
//
// The handler gets a wrapper of its http.ResponseWriter that records the
// status; it is an http.Flusher, an http.Hijacker and an io.ReaderFrom
// (so io.Copy of a file keeps net/http's sendfile path), and its Unwrap
// lets http.ResponseController reach the writer underneath. The wrapper is
// reused for a later request once ServeHTTP has returned (gin and echo
// pool theirs the same way): as http.ResponseWriter's contract says, a
// handler must not use w after it returns, nor from a goroutine that
// outlives it.
//
// # Cost
//
// An admitted request costs the middleware itself no allocation: the
// wrapper comes from a pool, and the handler gets the request as it came
// unless a deadline-mode timeout gives it a new context. What a request
// allocates is the pipeline's: nothing with a soft-mode timeout (or
// none), two with a deadline-mode one, the timeout's default: the
// timeout's context (a fresh one per call, see timeout.ModeDeadline) and
// net/http's copy of the request that carries it (Request.WithContext
// copies the request every time; no middleware that hands the handler a
// deadline avoids it). A rejection and the timeout answer cost one (the
// response's header values), two when the Retry-After hint is 100 s or
// more (its digits: strconv keeps only smaller numbers ready-made). TestServerAllocsAdmittedRequest and
// TestServerAllocsRejectedRequest gate these counts. Measured in process
// (BenchmarkHTTPServer in the bench module; docs/httpguard.md has the
// figures and the command) with a breaker, a rate limiter, a bulkhead and
// a timeout, the middleware adds 140 to 250 ns of CPU per request to the
// bare handler with the timeout in soft mode, and 600 to 800 ns in
// deadline mode, most of it the two allocations; failsafe-go's
// failsafehttp over the same policies costs 33 allocations and 4.5 to 23
// times the CPU.
//
// # Client
//
// [NewTransport] wraps an [http.RoundTripper]. See [ClientConfig] for the
// rules; in short, with a retry in its pipeline it retries what every HTTP
// resilience client retries (hashicorp/go-retryablehttp, Polly's standard
// resilience handler, failsafe-go's failsafehttp): a 408, a 429, a 5xx but
// 501 and 505, a transport error and an attempt that ran past
// [ClientConfig.AttemptTimeout] ([ErrAttemptTimeout]), and only for an
// idempotent request (GET, HEAD, OPTIONS, TRACE, PUT, DELETE, or one with
// an Idempotency-Key header) whose body can be replayed through
// Request.GetBody; any other request is sent once unless
// [ClientConfig.RetryNonIdempotent] says otherwise. It waits at least the
// server's Retry-After (seconds or HTTP-date) before a retry and gives up
// when that ends past the context's deadline, returning the last response
// as from a plain transport (at its headers, its body untouched); when the
// retry is certain to follow (see [ClientConfig.Pipeline]), it reads and
// closes a small retried body before the backoff, and it closes every
// response body it discards, and starts no goroutine of its own except the
// hedged attempts, which end with the call.
//
// A [ClientConfig.Fallback] gives the response of a call the pipeline
// rejected or gave up on (by default: a rejection, its soft timeout, its
// retry giving up, never a Base transport's own give-up; a failure that is
// not retried only where
// [ClientConfig.FallbackFailed] accepts it), a synthetic *http.Response
// ([SyntheticResponse]) in place of the error or the last response. Every
// response of the call's attempts is closed before it runs; the response
// it returns is the caller's to close.
//
// # Concurrency
//
// The handler and the RoundTripper are safe for concurrent use, as net/http
// requires; one of each serves every request, sharing the policies of its
// pipeline.
package httpguard
