// Package connectguard puts rampart's policies in front of Connect
// (module connectrpc.com/connect) with one connect.Interceptor, the
// counterpart of package grpcguard: on a handler it admits calls through a
// [pipeline.Pipeline] and answers rejections with Connect's codes and the
// gRPC A6 retry pushback; on a client it retries with a budget, honours
// the pushback, keeps a breaker per host or per procedure and bounds each
// attempt.
//
// Build an [Interceptor] with [New] and pass it to connect.WithInterceptors
// on a handler (connect.NewUnaryHandler and its kin) or a client
// (connect.NewClient); each call's connect.Spec.IsClient selects the
// rules. The pipeline is one for every procedure, a map of pipelines by
// procedure with a default, or a function from procedure to pipeline,
// resolved once per procedure and then read without a lock (at most 4096
// procedure names are kept; past them PipelineFor is asked on each call of
// a procedure not kept, and the routes of the pipeline it returns, built
// once per pipeline, serve the call). An invalid configuration is a
// [*rampart.ConfigError] at New.
//
// # Handler
//
// [Interceptor.WrapUnary] runs each call through its procedure's pipeline,
// and [Interceptor.WrapStreamingHandler] each stream, admitted once and
// holding its permits until the handler returns. A refused or timed-out
// call is answered with a *connect.Error that wraps the policy's error (so
// errors.Is(err, rampart.ErrRejected) holds):
//
//   - a rate-limit rejection: connect.CodeResourceExhausted;
//   - a breaker, bulkhead, adaptive-limit or shedder rejection:
//     connect.CodeUnavailable;
//   - the pipeline's timeout: connect.CodeDeadlineExceeded (in soft mode a
//     handler that answered late is still answered; a call whose client
//     went away while it overran gets the handler's own result, as the
//     pipeline ends it Canceled, not TimedOut);
//
// each with grpc-retry-pushback-ms ([PushbackKey]) in the error's
// metadata: the policy's hint (the rate limiter's wait, the breaker's
// remaining open time), or Config.DefaultPushback. A handler's own error
// comes back unchanged; its code decides what the breaker and the adaptive
// limit record (Config.IsFailure; CodeCanceled is Ignored). A handler that
// panics is recorded as a failure and its permits are released before the
// panic goes on (to connect.WithRecover, if set).
//
// # Client
//
// On a client, WrapUnary retries the codes of Config.RetryCodes (default
// CodeUnavailable) within the retry's attempts, backoff and budget, and
// an attempt that ran past its own deadline while the call's is live; the
// server's pushback replaces the backoff, and a negative or unparsable
// one, or more than one value, means do not retry (A6, and grpc-go's own
// retry); each retry carries grpc-previous-rpc-attempts
// ([PreviousAttemptsKey]), set on the caller's request for the retries
// and taken off it after the call (the caller's own value, if it had one,
// put back). A breaker (one per
// host or per procedure with Config.NewBreaker), a rate limiter, a
// bulkhead or an adaptive limit refuse calls locally with a
// *connect.Error (CodeUnavailable or CodeResourceExhausted).
// Config.AttemptTimeout bounds each attempt inside the call's deadline.
// The last attempt's error comes back as connect returned it, also when
// the retry gave up or its budget refused.
//
// [Interceptor.WrapStreamingClient] admits a stream once (the shedder too,
// at the pipeline's ShedPriority) and holds its permits until it ends
// (Receive's first error, CloseResponse, or its context's end); a refused
// stream's Send and Receive return the rejection and it sends nothing to
// the server (no HTTP request is made). Client streams are not retried.
//
// A pipeline with a Hedge is refused: an interceptor gets one request per
// call, which connect's client writes to as it sends it, so concurrent
// attempts cannot share it, and an interceptor cannot copy it. Hedge in
// the caller (pipeline.CallHedged around a client call, building a
// request per attempt) instead.
//
// # Cost
//
// An admitted unary call costs the interceptor no allocation beyond its
// pipeline's; TestClientAdmitPathAllocs and TestServerAdmitPathAllocs gate
// it. docs/connectguard.md has the details.
package connectguard
