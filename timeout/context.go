package timeout

import (
	"context"
	"time"

	"github.com/rampart-go/rampart/internal/lazyctx"
)

// ctx is the context handed to the callee in deadline mode and by DoAbandon. A
// fresh one is allocated per call (one 64-byte object) and never reused: a
// callee may keep it, and a kept context stays done with the same error
// forever.
//
// The context itself (Err, Done, Value, AfterFunc, the parent watch) is a
// lazyctx.Ctx: what only some callees need is
// allocated on first use, so a callee that only passes the context along
// or polls Err pays for nothing more. Its end codes: lazyctx.Fired when the
// deadline passed (context.DeadlineExceeded), lazyctx.Finished when the
// call finished first (context.Canceled), lazyctx.ParentDone when the
// parent was done first (the parent's error).
//
// Layout: 64 bytes (lazyctx.Ctx 48, s 8, deadline 8); the watch handle
// and the fallback timer travel in the Handle (or the DoAbandon job), not
// here.
//
// It has no exported method beyond those of context.Context (and
// AfterFunc, which only registers a callback): the callee receives it, and
// a type assertion on it must not reach anything that fires or ends it.
// The watchdog fires it as a fireTarget (see there).
type ctx struct {
	lazyctx.Ctx
	s        *settings // the configuration the call started under (and, through it, the Timeout)
	deadline int64     // ticker reading
}

// newCtx allocates the context of one call started under s.
func newCtx(parent context.Context, s *settings, deadline int64) *ctx {
	c := &ctx{s: s, deadline: deadline}
	lazyctx.Init(&c.Ctx, parent)
	return c
}

// Deadline returns the instant of the deadline, or the parent's deadline if
// that is earlier. The ticker deadline is converted with the Timeout's
// epoch (a time.Time taken in New, minus the ticker reading then), so
// successive calls return the same value and the result carries a
// monotonic reading (time.Until on it is immune to wall-clock steps).
func (c *ctx) Deadline() (time.Time, bool) {
	d := c.s.t.epoch.Add(time.Duration(c.deadline))
	if pd, ok := lazyctx.Parent(&c.Ctx).Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

// String names the context for debugging.
func (c *ctx) String() string {
	if name := c.s.err.name; name != "" {
		return "timeout.Context(" + name + ")"
	}
	return "timeout.Context"
}

// end ends c with code unless it already ended; it reports whether this
// call ended it.
func (c *ctx) end(code lazyctx.Code) bool { return lazyctx.End(&c.Ctx, code) }

// code returns why c ended, or lazyctx.Live.
func (c *ctx) code() lazyctx.Code { return lazyctx.CodeOf(&c.Ctx) }

// fireTarget is a ctx as the watchdog sees it: the same object under a
// type whose method set has Fire. The conversion from *ctx is free (no
// allocation, the same pointer), and the context handed to the callee, a
// *ctx, has no Fire for a type assertion to find.
type fireTarget ctx

// Fire is the watchdog's callback: the deadline passed.
func (f *fireTarget) Fire(uint64) { (*ctx)(f).end(lazyctx.Fired) }
