package connectguard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/shed"
)

// WrapStreamingHandler admits each stream once, through its procedure's
// pipeline: the stream holds its permits until the handler returns, not
// per message, and the breaker records the handler's final code. A
// rejection is answered with its code and the pushback (see WrapUnary).
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		r, err := i.routes.get(conn.Spec().Procedure)
		if err != nil {
			return err
		}
		if r.server == nil {
			return next(ctx, conn)
		}
		var herr error
		ran := false
		o := r.server.Try(ctx, func(ctx context.Context) error {
			ran = true
			herr = next(ctx, conn)
			return i.verdict(herr)
		})
		switch o.Code {
		case pipeline.OK, pipeline.Failed:
			return herr
		case pipeline.Canceled:
			if ran {
				return herr
			}
			return connect.NewError(codeOf(ctx.Err()), ctx.Err())
		case pipeline.TimedOut:
			if ran && herr == nil && r.soft {
				return nil
			}
		}
		return i.rejection(o, true)
	}
}

// WrapStreamingClient admits each client stream once, in the pipeline's
// order (breaker, rate limiter, bulkhead, adaptive limit, shedder, the
// last at the pipeline's ShedPriority of the stream's context), and holds
// the permits until the stream ends: Receive returns an error (io.EOF is a
// success), CloseResponse is called, or the stream's context ends. A
// refused stream is a connection whose Send and Receive return the
// rejection and that sends nothing: the HTTP request is never made.
// Streams are not retried, hedged or timed by the interceptor (bound a
// stream with its context's deadline).
//
// The next interceptor's connection is opened before the admission: its
// Peer names the host of a per-host breaker (connect gives the address
// only through the connection), and outer interceptors read a refused
// stream's Peer too. Opening it sends nothing: connect makes the HTTP
// request on the first Send or on CloseRequest, which a refused stream
// never passes on.
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		r, err := i.clientRoute(spec, conn.Peer())
		if err != nil {
			return &refusedConn{StreamingClientConn: conn, err: err}
		}
		pc := &r.cpc
		if r.client == nil || (pc.Breaker == nil && pc.RateLimit == nil && pc.Bulkhead == nil && pc.Adaptive == nil && pc.Shed == nil) {
			return conn
		}
		g := &clientConn{StreamingClientConn: conn, i: i, ctx: ctx, pc: pc, tick: r.client.Ticker()}
		if err := g.admit(); err != nil {
			return &refusedConn{StreamingClientConn: conn, err: err}
		}
		// The AfterFunc runs at once, on its own goroutine, when ctx is
		// done already: it must not read g.stop, written here (finish's
		// stop false).
		g.stop = context.AfterFunc(ctx, func() { g.finish(ctx.Err(), false) })
		return g
	}
}

// refusedConn is a stream the guard refused: nothing is sent. Only Spec,
// Peer and RequestHeader reach the connection, which make no request.
type refusedConn struct {
	connect.StreamingClientConn
	err error
}

// Send returns the rejection.
func (c *refusedConn) Send(any) error { return c.err }

// Receive returns the rejection.
func (c *refusedConn) Receive(any) error { return c.err }

// CloseRequest does nothing: the connection's would make the HTTP request
// (connect makes it on CloseRequest even when nothing was sent).
func (c *refusedConn) CloseRequest() error { return nil }

// CloseResponse does nothing: there is no response (the connection's
// would make the request and wait for one).
func (c *refusedConn) CloseResponse() error { return nil }

// ResponseHeader is empty: there is no response. Rejection path: it
// allocates the header.
func (c *refusedConn) ResponseHeader() http.Header { return http.Header{} }

// ResponseTrailer is empty: there is no response. Rejection path: it
// allocates the trailer.
func (c *refusedConn) ResponseTrailer() http.Header { return http.Header{} }

// clientConn is an admitted client stream holding its permits.
type clientConn struct {
	connect.StreamingClientConn
	i    *Interceptor
	ctx  context.Context
	pc   *pipeline.Config
	tick rampart.Ticker
	stop func() bool

	ended atomic.Bool
	cbp   circuitbreaker.Permit
	alp   adaptive.Permit
	shp   shed.Permit
	hasCB bool
	hasBH bool
	hasAL bool
	hasSH bool
}

// admit takes the permits in the pipeline's order, releasing those taken
// when a later one refuses.
func (g *clientConn) admit() error {
	pc := g.pc
	prio := 0
	if pc.Shed != nil && pc.ShedPriority != nil {
		// User code, asked before any permit is taken: a panic in it
		// leaves nothing held.
		prio = pc.ShedPriority(g.ctx)
	}
	now := g.tick.Now()
	if pc.Breaker != nil {
		p, err := pc.Breaker.AcquireAt(now)
		if err != nil {
			return g.reject(pipeline.Breaker, err, 0, now)
		}
		g.cbp, g.hasCB = p, true
	}
	if pc.RateLimit != nil {
		if w := pc.RateLimit.AdmitN(now, 1); w != 0 {
			return g.reject(pipeline.RateLimit, pc.RateLimit.RejectedError(), w, now)
		}
	}
	if pc.Bulkhead != nil {
		if err := pc.Bulkhead.Acquire(); err != nil {
			return g.reject(pipeline.Bulkhead, err, 0, now)
		}
		g.hasBH = true
	}
	if pc.Adaptive != nil {
		p, err := pc.Adaptive.AcquireAt(now)
		if err != nil {
			return g.reject(pipeline.Adaptive, err, 0, now)
		}
		g.alp, g.hasAL = p, true
	}
	if pc.Shed != nil {
		p, err := pc.Shed.AcquirePriorityAt(now, prio)
		if err != nil {
			return g.reject(pipeline.Shed, err, 0, now)
		}
		g.shp, g.hasSH = p, true
	}
	return nil
}

// reject releases what admit took and returns the rejection; now is the
// admission's reading.
func (g *clientConn) reject(k pipeline.Kind, err error, wait time.Duration, now int64) error {
	if g.hasAL {
		g.pc.Adaptive.ReleaseAt(g.alp, now, rampart.Ignored)
	}
	if g.hasBH {
		g.pc.Bulkhead.Release()
	}
	if g.hasCB {
		g.pc.Breaker.ReleaseAt(g.cbp, rampart.NotRead, rampart.Ignored)
	}
	g.ended.Store(true)
	return g.i.rejection(pipeline.Outcome{Code: pipeline.Rejected, Policy: k, Err: err, RetryAfter: wait}, false)
}

// end releases the permits once, recording the stream's final error.
func (g *clientConn) end(err error) { g.finish(err, true) }

// finish is end; stop says to stop the context's AfterFunc: false on the
// AfterFunc's own goroutine, which must not read g.stop (the interceptor
// may still be writing it).
func (g *clientConn) finish(err error, stop bool) {
	if !g.ended.CompareAndSwap(false, true) {
		return
	}
	if stop && g.stop != nil {
		g.stop()
	}
	var verdict error
	if err != nil && !errors.Is(err, io.EOF) {
		switch c := codeOf(err); {
		case c == connect.CodeCanceled:
			verdict = context.Canceled
		case g.i.retryable(c) || g.i.isFailure(c):
			verdict = err
		}
	}
	pc := g.pc
	if g.hasSH {
		r := rampart.Success
		if verdict != nil {
			r = pc.Shed.Classify(g.ctx, verdict)
		}
		pc.Shed.Release(g.shp, r) // reads the clock only for a sampled success
	}
	if g.hasAL {
		r := rampart.Success
		if verdict != nil {
			r = pc.Adaptive.Classify(g.ctx, verdict)
		}
		pc.Adaptive.ReleaseAt(g.alp, g.tick.Now(), r)
	}
	if g.hasBH {
		pc.Bulkhead.Release()
	}
	if g.hasCB {
		pc.Breaker.Release(g.cbp, pc.Breaker.Classify(verdict))
	}
}

// Send sends msg; an error other than io.EOF ends the stream.
func (g *clientConn) Send(msg any) error {
	err := g.StreamingClientConn.Send(msg)
	if err != nil && !errors.Is(err, io.EOF) {
		g.end(err)
	}
	return err
}

// Receive receives a message; its first error ends the stream.
func (g *clientConn) Receive(msg any) error {
	err := g.StreamingClientConn.Receive(msg)
	if err != nil {
		g.end(err)
	}
	return err
}

// CloseResponse closes the stream's response and ends the stream.
func (g *clientConn) CloseResponse() error {
	err := g.StreamingClientConn.CloseResponse()
	g.end(nil)
	return err
}
