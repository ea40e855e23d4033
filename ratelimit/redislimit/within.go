package redislimit

import (
	"context"
	"errors"
	"fmt"
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

// Who settles a call of withinOwnDeadline: the goroutine that ran it, once
// the caller left at its own deadline (ownLeft); nobody, once the caller
// cancelled (ownCancelled); the caller, once the reply came (ownReplied).
const (
	ownReplied = 1 + iota
	ownLeft
	ownCancelled
)

// withinOwnDeadline is within for a caller whose own deadline comes before
// Timeout's: such a deadline says nothing about Redis' health (a healthy
// Redis slower than the caller's budget is not failing), so the call runs
// under cmd, Timeout alone, and is judged by it. The caller waits for the
// reply until parent ends. When the reply comes first, it is returned (a
// panic of the client re-raised) with left false, for the caller to settle
// as within's. When parent ends first, parent's cause is returned with
// left true, and: after a cancellation, the call is cancelled and counts
// for nothing (the caller gives the breaker's permit back as Ignored);
// after the deadline, settle gets the call's outcome when it comes, or at
// Timeout, on the goroutine that waited for it (a panic of the client as
// an error: there is no caller to re-raise it to). So a hung Redis still
// opens the breaker when every caller's deadline is short. This path costs
// a goroutine more than within's, and only callers with a deadline shorter
// than Timeout take it.
func withinOwnDeadline[T any](parent, cmd context.Context, cancel context.CancelFunc,
	call func(context.Context) (T, error), settle func(error)) (v T, err error, left bool) {
	var state atomic.Int32
	done := make(chan callReply[T], 1)
	go func() {
		var r callReply[T]
		func() {
			defer func() {
				if p := recover(); p != nil {
					r = callReply[T]{panic: p}
				}
			}()
			r.v, r.err = within(cmd, call)
		}()
		cancel()
		if state.CompareAndSwap(0, ownReplied) {
			done <- r
			return
		}
		if state.Load() == ownLeft {
			err := r.err
			if r.panic != nil {
				err = fmt.Errorf("redislimit: redis client panicked: %v", r.panic)
			}
			settle(err)
		}
	}()
	var r callReply[T]
	select {
	case r = <-done:
	case <-parent.Done():
		how := int32(ownLeft)
		if errors.Is(parent.Err(), context.Canceled) {
			how = ownCancelled
		}
		if state.CompareAndSwap(0, how) {
			if how == ownCancelled {
				cancel()
			}
			var zero T
			return zero, context.Cause(parent), true
		}
		r = <-done // the reply came first
	}
	if r.panic != nil {
		panic(r.panic)
	}
	return r.v, r.err, false
}
