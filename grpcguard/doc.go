// Package grpcguard puts rampart's policies in front of gRPC (module
// google.golang.org/grpc): server interceptors and a tap that admit calls
// through a [pipeline.Pipeline] and answer rejections with the status code
// and the retry pushback of gRPC A6, and client interceptors that retry
// with a budget, honour the server's pushback, keep a breaker per target
// or per method, bound each attempt, and hedge idempotent methods.
//
// On a server, build a [Server] with [NewServer] and pass
// [Server.ServerOptions] to grpc.NewServer. On a client, build a [Client]
// with [NewClient] and pass [Client.DialOptions] to grpc.NewClient. Both
// take a pipeline for every method, a map of pipelines by method with a
// default, or a function from method to pipeline, resolved once per method
// and then read without a lock; an invalid configuration is a
// [*rampart.ConfigError] at construction. At most 4096 method names are
// kept (an UnknownServiceHandler's clients choose names); past them a
// method's PipelineFor is asked on each of its calls, and the route of the
// pipeline it returns, built once per pipeline, serves the call.
//
// # Server
//
// [Server.UnaryInterceptor] runs each call through its method's pipeline,
// and [Server.StreamInterceptor] each stream, admitted once: a stream
// holds its concurrency permit (bulkhead, adaptive limit) and its breaker
// permit until its handler returns, not per message; the pipeline's
// shedder admits it too, at ShedPriority. A refused or
// timed-out call is answered with a [*RejectedError]:
//
//   - a rate-limit rejection: RESOURCE_EXHAUSTED;
//   - a breaker, bulkhead, adaptive-limit or shedder rejection:
//     UNAVAILABLE;
//   - the pipeline's timeout: DEADLINE_EXCEEDED (in soft mode a handler
//     that answered late is still answered; a call whose client went away
//     while it overran is answered with the handler's own result, as the
//     pipeline ends it Canceled, not TimedOut: the client is gone);
//
// each with the trailing metadata grpc-retry-pushback-ms ([PushbackKey],
// gRPC A6): the policy's hint (the rate limiter's wait, the breaker's
// remaining open time), or ServerConfig.DefaultPushback when it has none.
// A handler's own error comes back unchanged; its code decides what the
// breaker and the adaptive limit record (ServerConfig.IsFailure, by
// default the codes of a server fault: UNKNOWN, DEADLINE_EXCEEDED,
// INTERNAL, UNAVAILABLE, DATA_LOSS; CANCELED is Ignored). A handler that
// panics is recorded as a failure, its permits are released and the panic
// goes on (install a recovery interceptor outside the guard).
//
// [Server.InHandle] is a tap.ServerInHandle: with ServerConfig.Tap it
// applies each method's rate limiter before grpc reads and decodes the
// request, the cheapest place to shed. It can enforce a rate only: it
// runs before the handler, so it cannot hold a concurrency permit for the
// handler's duration nor record the handler's outcome; the bulkhead, the
// adaptive limit, the breaker and the timeout stay in the interceptors.
// grpc sends a tap's refusal as a bare status, without trailing metadata,
// so the tap's pushback travels as a google.rpc.RetryInfo status detail
// (the form Google APIs use), which [Client] honours as it honours the A6
// trailer.
//
// # Client
//
// [Client.UnaryInterceptor] runs each call through its method's pipeline:
//
//   - the retry retries the codes of ClientConfig.RetryCodes (default
//     UNAVAILABLE), within its attempts, its backoff and its budget
//     (retry.TokenBucket is A6's retry throttling), and an attempt that ran
//     past its own deadline while the call's is live;
//   - the server's pushback replaces the backoff of that retry; a
//     negative or unparsable pushback, or more than one value, means do
//     not retry (A6, and grpc-go's own retry);
//   - each retry and each hedge carries grpc-previous-rpc-attempts
//     ([PreviousAttemptsKey]);
//   - a breaker (one per target or per method with
//     ClientConfig.NewBreaker), a rate limiter, a bulkhead or adaptive
//     limit refuse calls locally with a [*RejectedError] (UNAVAILABLE or
//     RESOURCE_EXHAUSTED), which matches rampart.ErrRejected;
//   - ClientConfig.AttemptTimeout (or the pipeline's Timeout) bounds each
//     attempt inside the call's own deadline, never past it;
//   - a method named in ClientConfig.Idempotent is hedged by the
//     pipeline's Hedge: extra attempts of a slow call, each decoding into
//     a reply of its own, the winner's merged into the caller's reply, the
//     losers cancelled.
//
// The error of the last attempt comes back as grpc returned it, also when
// the retry gave up or its budget refused.
//
// [Client.StreamInterceptor] admits a stream once (the shedder too, at the
// pipeline's ShedPriority) and holds its permits until it ends; with a
// retry, a stream that fails before its first response message is opened
// again, admitted again, and what was sent is replayed. A stream whose
// context ends while a retry is admitted gives that attempt's permits
// back at once.
//
// # Cost
//
// An admitted call costs the interceptors no allocation: the method's
// route is one lock-free map read, the pipeline's Try allocates nothing
// (but a deadline-mode timeout's context), and a retried call's trailer
// buffer is pooled. TestServerAdmitPathAllocs and TestClientAdmitPathAllocs
// gate it. docs/grpcguard.md has the measured overhead against
// failsafe-go's failsafegrpc (BenchmarkGRPC in the bench module).
//
// # Concurrency
//
// A Server and a Client are safe for concurrent use; one serves every
// call, sharing the policies of its pipelines.
package grpcguard
