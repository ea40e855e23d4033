package grpcguard

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
)

// maxReplay is how many messages a client stream keeps for a retry before
// its first response: past it the stream is committed (not retried), as
// grpc's own retry commits a stream whose buffer is full.
const maxReplay = 64

// StreamInterceptor admits each client stream once, in the pipeline's
// order (breaker, rate limiter, bulkhead, adaptive limit, shedder, the
// last at the pipeline's ShedPriority of the stream's context), and holds the
// permits until the stream ends: RecvMsg returns an error (io.EOF is a
// success), Header or SendMsg fails with an error other than io.EOF, or
// the stream's context ends. The breaker and the adaptive limit record
// the stream's final status. The pipeline's Timeout and Hedge do not
// apply to streams (bound a stream with its context's deadline).
//
// With a retry in the pipeline, a stream whose first RecvMsg (or whose
// opening) fails with a retryable code, before any response message came,
// is opened again after the retry's backoff or the server's pushback, with
// the messages sent so far (at most 64, kept by reference, as
// grpc.ClientStream.SendMsg's contract allows: a sent message must not
// be modified) and its CloseSend replayed; each retry is admitted again by
// every policy. Once a response message came, the stream is committed and
// its errors come back as they are.
func (c *Client) StreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	r, err := c.route(method, cc)
	if err != nil {
		return nil, err
	}
	if r.p == nil || (r.pc.Breaker == nil && r.pc.RateLimit == nil && r.pc.Bulkhead == nil && r.pc.Adaptive == nil && r.pc.Shed == nil && r.pc.Retry == nil) {
		return streamer(ctx, desc, cc, method, opts...)
	}
	g := &clientStream{c: c, r: r, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts,
		tick: r.p.Ticker(), start: rampart.NotRead}
	if rp := r.pc.Retry; rp != nil {
		// The call's start, for the retry's MaxDuration and the budget:
		// read only when a retry may follow.
		g.start = g.tick.Now()
		if b := rp.Budget(); b != nil {
			b.OnRequest(g.start)
		}
	}
	if err := g.reopen(); err != nil {
		return nil, err
	}
	// The AfterFunc runs at once, on its own goroutine, when ctx is done
	// already: it must not read g.stop, written here (finish's stop false).
	g.stop = context.AfterFunc(ctx, func() { g.finish(ctx.Err(), false) })
	return g, nil
}

// clientStream is a guarded client stream.
type clientStream struct {
	c        *Client
	r        *clientRoute
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption
	tick     rampart.Ticker
	stop     func() bool // the AfterFunc's stop

	// The retry's state, used by RecvMsg (and the interceptor) only.
	start    int64
	attempts int
	prev     time.Duration

	mu        sync.Mutex
	cs        grpc.ClientStream // the current attempt's stream
	sent      []any             // messages sent before the first response, for a replay
	committed bool              // a response came, or sent overflowed: no retry
	closeSent bool              // CloseSend was called

	// The permits of the current attempt; held says they are.
	held  atomic.Bool
	ended atomic.Bool
	t0    int64
	cbp   circuitbreaker.Permit
	alp   adaptive.Permit
	shp   shed.Permit
	hasCB bool
	hasBH bool
	hasAL bool
	hasSH bool
}

// admit takes the attempt's permits in the pipeline's order, releasing
// those taken when a later one refuses.
func (g *clientStream) admit() error {
	pc := &g.r.pc
	prio := 0
	if pc.Shed != nil && pc.ShedPriority != nil {
		// User code, asked before any permit is taken: a panic in it
		// leaves nothing held.
		prio = pc.ShedPriority(g.ctx)
	}
	// One clock read per admission, shared by the breaker, the rate
	// limiter, the adaptive limit and the shedder (as a pipeline's t0).
	g.t0 = g.tick.Now()
	g.hasCB, g.hasBH, g.hasAL, g.hasSH = false, false, false, false
	if pc.Breaker != nil {
		p, err := pc.Breaker.AcquireAt(g.t0)
		if err != nil {
			return g.reject(pipeline.Breaker, err, 0)
		}
		g.cbp, g.hasCB = p, true
	}
	if pc.RateLimit != nil {
		if w := pc.RateLimit.AdmitN(g.t0, 1); w != 0 {
			return g.reject(pipeline.RateLimit, pc.RateLimit.RejectedError(), w)
		}
	}
	if pc.Bulkhead != nil {
		if err := pc.Bulkhead.Acquire(); err != nil {
			return g.reject(pipeline.Bulkhead, err, 0)
		}
		g.hasBH = true
	}
	if pc.Adaptive != nil {
		p, err := pc.Adaptive.AcquireAt(g.t0)
		if err != nil {
			return g.reject(pipeline.Adaptive, err, 0)
		}
		g.alp, g.hasAL = p, true
	}
	if pc.Shed != nil {
		p, err := pc.Shed.AcquirePriorityAt(g.t0, prio)
		if err != nil {
			return g.reject(pipeline.Shed, err, 0)
		}
		g.shp, g.hasSH = p, true
	}
	g.held.Store(true)
	if g.ended.Load() {
		// The stream ended (its context's AfterFunc, or a failed SendMsg)
		// while this attempt was admitted, between a retry's release and
		// here: nothing else will give these permits back.
		g.release(context.Canceled)
		err := g.ctx.Err()
		if err == nil {
			err = context.Canceled
		}
		return status.FromContextError(err).Err()
	}
	return nil
}

// reject releases what admit took (the breaker's permit without a
// result) and returns the rejection. Rejection path.
func (g *clientStream) reject(k pipeline.Kind, err error, wait time.Duration) error {
	if g.hasAL {
		g.r.pc.Adaptive.ReleaseAt(g.alp, g.t0, rampart.Ignored)
		g.hasAL = false
	}
	if g.hasBH {
		g.r.pc.Bulkhead.Release()
		g.hasBH = false
	}
	if g.hasCB {
		g.r.pc.Breaker.ReleaseAt(g.cbp, rampart.NotRead, rampart.Ignored)
		g.hasCB = false
	}
	return &RejectedError{Code: RejectionCode(k), Policy: k, RetryAfter: wait, err: err}
}

// release gives back the attempt's permits, recording verdict (what the
// policies see of its end: nil for a success). Exactly once per admit.
func (g *clientStream) release(verdict error) {
	if !g.held.CompareAndSwap(true, false) {
		return
	}
	pc := &g.r.pc
	if g.hasSH {
		r := rampart.Success
		if verdict != nil {
			r = pc.Shed.Classify(g.ctx, verdict)
		}
		pc.Shed.Release(g.shp, r) // reads the clock only for a sampled success
	}
	if g.hasAL {
		now := g.tick.Now()
		r := rampart.Success
		if verdict != nil {
			r = pc.Adaptive.Classify(g.ctx, verdict)
		}
		pc.Adaptive.ReleaseAt(g.alp, now, r)
	}
	if g.hasBH {
		pc.Bulkhead.Release()
	}
	if g.hasCB {
		pc.Breaker.Release(g.cbp, pc.Breaker.Classify(verdict)) // reads the clock only for a timed permit
	}
}

// open starts the current attempt's stream and replays what was sent.
func (g *clientStream) open() error {
	ctx := g.ctx
	if g.attempts > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, PreviousAttemptsKey, strconv.Itoa(g.attempts))
	}
	cs, err := g.streamer(ctx, g.desc, g.cc, g.method, g.opts...)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cs = cs
	for _, m := range g.sent {
		if err := cs.SendMsg(m); err != nil {
			break // the stream failed: its RecvMsg says why
		}
	}
	if g.closeSent {
		_ = cs.CloseSend()
	}
	return nil
}

// reopen admits and opens an attempt, retrying an opening that fails.
func (g *clientStream) reopen() error {
	for {
		if err := g.admit(); err != nil {
			return err
		}
		err := g.open()
		if err == nil {
			return nil
		}
		if rerr := g.retry(err, nil); rerr != nil {
			return rerr
		}
	}
}

// retry decides on a failed attempt (its opening, or its RecvMsg before
// the first response): it releases the attempt, and returns nil when a
// new attempt is to be made (after the backoff, admitted again by the
// caller), else the error to return. tr is the attempt's trailer.
func (g *clientStream) retry(err error, tr metadata.MD) error {
	verdict := g.c.judge(g.ctx, err, tr, false)
	g.release(verdict)
	rp := g.r.pc.Retry
	if rp == nil || g.ctx.Err() != nil {
		return err
	}
	g.mu.Lock()
	committed := g.committed
	g.mu.Unlock()
	if committed {
		return err
	}
	g.attempts++
	now := g.tick.Now()
	d, stop := rp.Decide(g.attempts, verdict, g.start, now, rp.Deadline(g.ctx, now), g.prev)
	if stop != retry.Continue {
		return err
	}
	g.prev = d
	if serr := rp.Sleep(g.ctx, d); serr != nil {
		return status.FromContextError(serr).Err()
	}
	return nil
}

// end ends the stream once: the permits are released with the stream's
// final status, and the budget told of a success.
func (g *clientStream) end(err error) { g.finish(err, true) }

// finish is end; stop says to stop the context's AfterFunc: false on the
// AfterFunc's own goroutine, which must not read g.stop (the interceptor
// may still be writing it).
func (g *clientStream) finish(err error, stop bool) {
	if !g.ended.CompareAndSwap(false, true) {
		return
	}
	if stop && g.stop != nil {
		g.stop()
	}
	var verdict error
	if err != nil && err != io.EOF {
		verdict = g.c.judge(g.ctx, err, nil, false)
		if errors.Is(verdict, context.Canceled) || errors.Is(verdict, context.DeadlineExceeded) {
			verdict = err
			if codeOf(err) == codes.Canceled {
				verdict = context.Canceled
			}
		}
	}
	g.release(verdict)
	if rp := g.r.pc.Retry; rp != nil && verdict == nil {
		if b := rp.Budget(); b != nil {
			b.OnSuccess(g.tick.Now())
		}
	}
}

// current returns the current attempt's stream.
func (g *clientStream) current() grpc.ClientStream {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cs
}

// Header returns the current attempt's header; an error other than io.EOF
// ends the stream.
func (g *clientStream) Header() (metadata.MD, error) {
	md, err := g.current().Header()
	if err != nil && err != io.EOF {
		g.end(err)
	}
	return md, err
}

// Trailer returns the current attempt's trailer.
func (g *clientStream) Trailer() metadata.MD { return g.current().Trailer() }

// CloseSend closes the send direction (again on a retried attempt).
func (g *clientStream) CloseSend() error {
	g.mu.Lock()
	g.closeSent = true
	cs := g.cs
	g.mu.Unlock()
	return cs.CloseSend()
}

// Context returns the current attempt's context.
func (g *clientStream) Context() context.Context { return g.current().Context() }

// SendMsg sends m, keeping it for a replay until the first response.
func (g *clientStream) SendMsg(m any) error {
	g.mu.Lock()
	if !g.committed && g.r.pc.Retry != nil {
		if len(g.sent) < maxReplay {
			g.sent = append(g.sent, m)
		} else {
			g.committed, g.sent = true, nil
		}
	}
	cs := g.cs
	g.mu.Unlock()
	err := cs.SendMsg(m)
	if err != nil && err != io.EOF {
		g.end(err)
	}
	return err
}

// RecvMsg receives a message; before the first one, a retryable failure
// opens the stream again (see [Client.StreamInterceptor]). The stream ends
// with RecvMsg's first error.
func (g *clientStream) RecvMsg(m any) error {
	for {
		cs := g.current()
		err := cs.RecvMsg(m)
		if err == nil {
			g.mu.Lock()
			if !g.committed {
				g.committed, g.sent = true, nil
			}
			g.mu.Unlock()
			if !g.desc.ServerStreams {
				// A unary response (client streaming): the stream is over;
				// grpc's RecvMsg has read its status.
				g.end(nil)
			}
			return nil
		}
		if err == io.EOF || g.ended.Load() {
			g.end(err)
			return err
		}
		rerr := g.retry(err, cs.Trailer())
		if rerr == nil {
			rerr = g.reopen()
		}
		if rerr == nil {
			continue // replayed on a new stream: receive from it
		}
		g.end(rerr)
		return rerr
	}
}
