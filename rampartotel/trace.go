package rampartotel

import (
	"context"
	"net/http"

	"github.com/rampart-go/rampart/pipeline"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span event names and attributes (see the package doc, Tracing); the
// policy's, attrPolicy, is the metrics' (spec.go).
const (
	// EventRejected is the span event of a call a policy refused.
	EventRejected = "rampart.rejected"
	// EventTimedOut is the span event of a call whose timeout expired.
	EventTimedOut = "rampart.timed_out"

	attrRetryAfter = "rampart.retry_after" // the outcome's RetryAfter, in seconds (float)
	attrAttempts   = "rampart.attempts"    // the attempts made, rejected ones included
	attrError      = "rampart.error"       // the outcome's error message
)

// Do runs fn through p as p.Do does and returns the same error; when the
// call is rejected or times out it adds an event ([EventRejected],
// [EventTimedOut]) to the span of ctx. A call that ends otherwise costs one
// comparison more than p.Do; one that ends with an event reads
// trace.SpanFromContext and builds the event only if that span is
// recording.
func Do(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error) error {
	o := p.Try(ctx, fn)
	if o.Code == pipeline.Rejected || o.Code == pipeline.TimedOut {
		AddOutcomeEvent(ctx, o)
	}
	return o.Err
}

// Try is [pipeline.Pipeline.Try] with the span event of [Do].
func Try(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error) pipeline.Outcome {
	o := p.Try(ctx, fn)
	if o.Code == pipeline.Rejected || o.Code == pipeline.TimedOut {
		AddOutcomeEvent(ctx, o)
	}
	return o
}

// AddOutcomeEvent adds the span event of o to the span of ctx when o is
// Rejected or TimedOut and the span is recording; otherwise it does
// nothing. Use it with the Outcome of pipeline.TryCall, TryHedged and the
// like.
func AddOutcomeEvent(ctx context.Context, o pipeline.Outcome) {
	var name string
	switch o.Code {
	case pipeline.Rejected:
		name = EventRejected
	case pipeline.TimedOut:
		name = EventTimedOut
	default:
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrPolicy, o.Policy.String()),
		attribute.Int(attrAttempts, int(o.Attempts)),
	}
	if o.RetryAfter > 0 {
		attrs = append(attrs, attribute.Float64(attrRetryAfter, o.RetryAfter.Seconds()))
	}
	if o.Err != nil {
		attrs = append(attrs, attribute.String(attrError, o.Err.Error()))
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}

// OnRejected returns a listener for httpguard.ServerConfig.OnRejected that
// adds the [EventRejected] event to the span of the request's context, then
// calls next (which must write the response, status included). A nil next
// writes the status and its text with the rejection's message, as
// http.Error does (httpguard has set Retry-After already).
func OnRejected(next func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome)) func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
	return func(w http.ResponseWriter, r *http.Request, status int, o pipeline.Outcome) {
		AddOutcomeEvent(r.Context(), o)
		if next != nil {
			next(w, r, status, o)
			return
		}
		msg := http.StatusText(status)
		if o.Err != nil {
			msg += ": " + o.Err.Error()
		}
		http.Error(w, msg, status)
	}
}
