package grpcguard

import (
	"context"
	"errors"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rampart-go/rampart/pipeline"
)

// PushbackKey is the trailing metadata key of a server's retry pushback
// (gRPC A6, "Retry Pushback"): the milliseconds the client should wait
// before it retries, as a decimal integer; a negative or unparsable value
// means "do not retry".
const PushbackKey = "grpc-retry-pushback-ms"

// PreviousAttemptsKey is the request metadata key that carries, on a retry
// or a hedged attempt, how many attempts of the call were started before it
// (gRPC A6, "grpc-previous-rpc-attempts").
const PreviousAttemptsKey = "grpc-previous-rpc-attempts"

// RejectionCode returns the status code a guard answers for a rejection by
// a policy of kind k: RESOURCE_EXHAUSTED for the rate limiter,
// DEADLINE_EXCEEDED for the timeout, UNAVAILABLE for the others (the
// breaker, the bulkhead, the adaptive limit, the retry budget).
func RejectionCode(k pipeline.Kind) codes.Code {
	switch k {
	case pipeline.RateLimit:
		return codes.ResourceExhausted
	case pipeline.Timeout:
		return codes.DeadlineExceeded
	}
	return codes.Unavailable
}

// RejectedError is the error a guard returns for a call that one of its
// policies refused or timed out: a gRPC status (status.Code reads Code,
// status.FromError the message) that also matches, through errors.Is, the
// policy's own error (and so rampart.ErrRejected for a rejection,
// timeout.ErrTimeout for a timeout).
type RejectedError struct {
	// Code is the status code (see [RejectionCode]).
	Code codes.Code
	// Policy is the kind of policy that refused the call.
	Policy pipeline.Kind
	// RetryAfter is the hint sent as the pushback, 0 when none.
	RetryAfter time.Duration
	err        error
}

// Error returns the status's text, e.g. "rpc error: code = Unavailable desc
// = circuit breaker "db" is open".
func (e *RejectedError) Error() string {
	return "rpc error: code = " + e.Code.String() + " desc = " + e.err.Error()
}

// GRPCStatus returns the error as a status, for status.FromError and for
// grpc's server, which sends it.
func (e *RejectedError) GRPCStatus() *status.Status { return status.New(e.Code, e.err.Error()) }

// Unwrap returns the policy's error.
func (e *RejectedError) Unwrap() error { return e.err }

// codeOf returns err's status code, as grpc's server sends it: a status
// error's code, a context error's code, else Unknown. Failure path only.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// DefaultIsFailure is the default IsFailure of [ServerConfig] and
// [ClientConfig]: the codes that say the server, not the request, is at
// fault (as HTTP's 5xx): UNKNOWN, DEADLINE_EXCEEDED, INTERNAL,
// UNAVAILABLE and DATA_LOSS.
func DefaultIsFailure(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// pushbackMillis formats d as A6's pushback: whole milliseconds, rounded
// up.
func pushbackMillis(d time.Duration) string {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// pushbackMD returns the trailing metadata that carries d.
func pushbackMD(d time.Duration) metadata.MD {
	return metadata.MD{PushbackKey: []string{pushbackMillis(d)}}
}

// pushback reads a server's retry hint from an attempt's trailers (A6) or,
// without one, from a google.rpc.RetryInfo in its status details (what a
// tap rejection carries). ok is false when there is none; a negative d
// means the server said not to retry (a negative or unparsable pushback,
// or more than one value).
// Failure path only.
func pushback(md metadata.MD, err error) (d time.Duration, ok bool) {
	if v := md[PushbackKey]; len(v) > 0 {
		if len(v) > 1 {
			return -1, true // several values: not retried, as grpc-go's own retry (A6 allows one)
		}
		ms, perr := strconv.ParseInt(v[0], 10, 64)
		if perr != nil || ms < 0 {
			return -1, true
		}
		if ms > int64(1<<63-1)/int64(time.Millisecond) {
			return time.Duration(1<<63 - 1), true
		}
		return time.Duration(ms) * time.Millisecond, true
	}
	st, sok := status.FromError(err)
	if !sok {
		return 0, false
	}
	for _, det := range st.Details() {
		if ri, rok := det.(*errdetails.RetryInfo); rok && ri.GetRetryDelay() != nil {
			d := ri.GetRetryDelay().AsDuration()
			if d < 0 {
				return -1, true
			}
			return d, true
		}
	}
	return 0, false
}

// retryInfoStatus is a rejection as a status with a google.rpc.RetryInfo
// detail: the form a tap's rejection takes, since grpc sends no trailing
// metadata for it.
func retryInfoStatus(code codes.Code, msg string, d time.Duration) error {
	st := status.New(code, msg)
	if d > 0 {
		if ds, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
			st = ds
		}
	}
	return st.Err()
}
