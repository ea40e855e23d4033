package rampartotel

import (
	"context"
	"net/http"

	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/shed"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Span event names and attributes (see the package doc, Tracing); the
// policy's, attrPolicy, is the metrics' (package observe).
const (
	// EventRejected is the span event of a call a policy refused.
	EventRejected = "rampart.rejected"
	// EventTimedOut is the span event of a call whose timeout expired.
	EventTimedOut = "rampart.timed_out"
	// EventBreakerTransition is the span event of a call during which the
	// pipeline's circuit breaker changed state (see [Do]).
	EventBreakerTransition = "rampart.circuitbreaker.transition"
	// EventShedTransition is the span event of a call during which the
	// pipeline's shedder engaged or released (see [Do]).
	EventShedTransition = "rampart.shed.transition"

	attrRetryAfter = "rampart.retry_after"     // the outcome's RetryAfter, in seconds (float)
	attrAttempts   = "rampart.attempts"        // the attempts made, rejected ones included
	attrError      = "rampart.error"           // the outcome's error message
	attrStateFrom  = "rampart.state.from"      // the breaker's state before the call
	attrStateTo    = "rampart.state.to"        // the breaker's state after the call
	attrOverloaded = "rampart.shed.overloaded" // the shedder's Overloaded after the call
)

// Do runs fn through p as p.Do does and returns the same error; when the
// call is rejected or times out it adds an event ([EventRejected],
// [EventTimedOut]) to the span of ctx, trace.SpanFromContext(ctx), if that
// span is recording.
//
// When p has a circuit breaker or a shedder (p.Config().Breaker, .Shed)
// and the span is recording, Do also reads the breaker's State and the
// shedder's Overloaded before and after the call, and adds
// [EventBreakerTransition] (rampart.name, rampart.state.from,
// rampart.state.to) or [EventShedTransition] (rampart.shed.overloaded)
// when the reading changed, before the outcome's event. A panic in fn
// still gets them, then goes on. What the readings can see:
//
//   - a change made by another goroutine's call while this one ran is
//     attributed to this span too (to every span of a call that
//     overlapped it);
//   - only the state before and after: a call that saw Open become
//     HalfOpen (its own probe admission) and then Closed (its probe's
//     success) gets one event, open→closed, and a change undone before
//     the call ended (closed→open→half-open→closed by others) gets none;
//   - a timer-driven transition (an open breaker whose open time has
//     passed reports Open until the next admission moves it to HalfOpen;
//     a shedder samples at the calls' admissions) is seen by the next call
//     through p, which made it;
//   - a change made outside p's calls (TransitionTo, Update, another
//     pipeline sharing the breaker) is seen only when it falls during one.
//
// The metrics (rampart.circuitbreaker.transitions, .state) and the logs
// (rampartslog.BreakerOnStateChange) count every transition.
//
// Cost: a call under a span that does not record (or no span) costs p.Do's
// and one context lookup (trace.SpanFromContext(ctx)) more; only when the
// span records are p.Config() and the State (or Overloaded) readings
// taken, one atomic load each. No call allocates more than p.Do unless it
// adds an event (TestDoAllocs).
func Do(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error) error {
	// The span lookup is what every call pays for the events; a span that
	// does not record takes none, so the call is p.Do's alone.
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		return tryRecording(ctx, p, fn, span).Err
	}
	return p.Do(ctx, fn)
}

// Try is [pipeline.Pipeline.Try] with the span events of [Do].
func Try(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error) pipeline.Outcome {
	// The span lookup is what every call pays for the events (see Do).
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		return tryRecording(ctx, p, fn, span)
	}
	return p.Try(ctx, fn)
}

// tryRecording is Try under a recording span: the transitions are watched
// when p has a breaker or a shedder, then the outcome's event is added.
// p.Config() is read here only, not on every call: it copies the whole
// configuration (about twenty words), measured as costly as the span
// lookup.
func tryRecording(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error, span trace.Span) pipeline.Outcome {
	var o pipeline.Outcome
	if cfg := p.Config(); cfg.Breaker != nil || cfg.Shed != nil {
		o = tryWatched(ctx, p, fn, span, cfg.Breaker, cfg.Shed)
	} else {
		o = p.Try(ctx, fn)
	}
	if o.Code == pipeline.Rejected || o.Code == pipeline.TimedOut {
		addOutcomeEvent(span, o)
	}
	return o
}

// tryWatched runs p.Try with the breaker's and the shedder's readings taken
// before and after it (each one atomic load), for a recording span; the
// deferred comparison adds the transition events on a panic in fn too.
func tryWatched(ctx context.Context, p *pipeline.Pipeline, fn func(context.Context) error, span trace.Span, cb *circuitbreaker.Breaker, sh *shed.Shedder) pipeline.Outcome {
	var from circuitbreaker.State
	if cb != nil {
		from = cb.State()
	}
	var was bool
	if sh != nil {
		was = sh.Overloaded()
	}
	defer func() {
		if cb != nil {
			if to := cb.State(); to != from {
				span.AddEvent(EventBreakerTransition, trace.WithAttributes(
					attribute.String(attrName, cb.Config().Name),
					attribute.String(attrStateFrom, from.String()),
					attribute.String(attrStateTo, to.String()),
				))
			}
		}
		if sh != nil {
			if is := sh.Overloaded(); is != was {
				span.AddEvent(EventShedTransition, trace.WithAttributes(
					attribute.Bool(attrOverloaded, is),
				))
			}
		}
	}()
	return p.Try(ctx, fn)
}

// AddOutcomeEvent adds the span event of o to the span of ctx when o is
// Rejected or TimedOut and the span is recording; otherwise it does
// nothing. Use it with the Outcome of pipeline.TryCall, TryHedged and the
// like.
func AddOutcomeEvent(ctx context.Context, o pipeline.Outcome) {
	switch o.Code {
	case pipeline.Rejected, pipeline.TimedOut:
	default:
		return
	}
	addOutcomeEvent(trace.SpanFromContext(ctx), o)
}

// addOutcomeEvent is AddOutcomeEvent on span, for a Rejected or TimedOut o.
func addOutcomeEvent(span trace.Span, o pipeline.Outcome) {
	if !span.IsRecording() {
		return
	}
	name := EventRejected
	if o.Code == pipeline.TimedOut {
		name = EventTimedOut
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
