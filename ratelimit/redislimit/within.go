package redislimit

import (
	"context"
	"sync/atomic"
)

// callReply is the outcome of one Redis call made by within.
type callReply[T any] struct {
	v     T
	err   error
	panic any // a panic in the client (a hook, say), re-raised on the caller's goroutine
}

// within runs call and returns when it answers or when ctx ends, whichever
// comes first. The client may not honour ctx's deadline: go-redis v9 ignores
// context deadlines on socket reads unless Options.ContextTimeoutEnabled is
// set (a read then waits for ReadTimeout, 3 s by default, and any retries),
// and with ReadTimeout -1 or -2 it sets no read deadline at all. So the call
// runs on a goroutine of its own and the caller waits for it only until ctx
// ends; this one goroutine and its reply channel are the cost of a Timeout
// that holds for every client, next to the round trip itself and go-redis'
// own allocations. The goroutine still gets ctx, so a client that does
// honour it stops at the deadline too; one that does not finishes the call
// in the background, bounded by its own ReadTimeout (at most the client's
// pool size of them at once: waiting for a pooled connection, and dialling
// one, do honour ctx), and its late reply is dropped: the caller has already
// taken the Failure mode's decision and the breaker has recorded the
// timeout, so nothing is counted twice. What such a late call did in Redis
// is described where each caller uses within (events never spent, a lease
// that expires unrenewed).
func within[T any](ctx context.Context, call func(context.Context) (T, error)) (T, error) {
	done := make(chan callReply[T], 1) // buffered: a reply nobody waits for any more never blocks the goroutine
	go func() {
		var r callReply[T]
		defer func() {
			if p := recover(); p != nil {
				r = callReply[T]{panic: p}
			}
			done <- r
		}()
		r.v, r.err = call(ctx)
	}()
	var r callReply[T]
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done: // the reply raced the deadline: use it
		default:
			var zero T
			return zero, context.Cause(ctx) // the Timeout's cause, or the caller's own cancellation or deadline
		}
	}
	if r.panic != nil {
		panic(r.panic)
	}
	return r.v, r.err
}

// notifyListener calls f(a), recovering a panic in it and counting it in
// panics: a listener never breaks the call that notified it.
func notifyListener[A any](panics *atomic.Uint64, f func(A), a A) {
	defer func() {
		if recover() != nil {
			panics.Add(1)
		}
	}()
	f(a)
}

// notifyListener2 is notifyListener for a listener of two arguments.
func notifyListener2[A, B any](panics *atomic.Uint64, f func(A, B), a A, b B) {
	defer func() {
		if recover() != nil {
			panics.Add(1)
		}
	}()
	f(a, b)
}
