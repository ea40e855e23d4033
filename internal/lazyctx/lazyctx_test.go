package lazyctx

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart/internal/bubble"
	"github.com/rampart-go/rampart/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newCtx(parent context.Context) *Ctx {
	c := new(Ctx)
	Init(c, parent)
	return c
}

type key struct{}

// requireDone fails t unless d is closed.
func requireDone(t *testing.T, d <-chan struct{}) {
	t.Helper()
	select {
	case <-d:
	default:
		t.Fatal("Done is open")
	}
}

// requireOpen fails t if d is closed.
func requireOpen(t *testing.T, d <-chan struct{}) {
	t.Helper()
	select {
	case <-d:
		t.Fatal("Done is closed")
	default:
	}
}

// TestErrIsTheCodeAndNeverChanges ends a context with each code, with and
// without a Done channel made first, and checks that Err, Code and Done
// agree and stay as they are whatever ends it later.
func TestErrIsTheCodeAndNeverChanges(t *testing.T) {
	for _, tc := range []struct {
		name string
		code Code
		want error
	}{
		{"fired", Fired, context.DeadlineExceeded},
		{"finished", Finished, context.Canceled},
		{"parent", ParentDone, context.Canceled}, // the parent's Err: a cancelled parent's
	} {
		for _, doneFirst := range []bool{false, true} {
			name := tc.name
			if doneFirst {
				name += "/done-first"
			}
			t.Run(name, func(t *testing.T) {
				parent, cancel := context.WithCancel(context.Background())
				defer cancel()
				c := newCtx(parent)
				require.Equal(t, Live, CodeOf(c))
				require.NoError(t, c.Err())
				var d <-chan struct{}
				if doneFirst {
					d = c.Done()
					requireOpen(t, d)
				}
				require.False(t, End(c, Live), "Live ends nothing")
				if tc.code == ParentDone {
					cancel() // the parent ends it (noticed by Err or by the watch)
				} else {
					require.True(t, End(c, tc.code))
				}
				require.Equal(t, tc.want, c.Err())
				require.Equal(t, tc.code, CodeOf(c))
				if d == nil {
					d = c.Done()
				}
				requireDone(t, d)
				require.Equal(t, d, c.Done(), "Done is stable")
				// Whatever happens later, the first end stays.
				cancel()
				for _, code := range []Code{Fired, Finished, ParentDone} {
					require.False(t, End(c, code))
				}
				require.Equal(t, tc.want, c.Err())
				require.Equal(t, tc.code, CodeOf(c))
			})
		}
	}
}

// TestErrSeesTheParentWithoutDone checks that a parent that ended is
// noticed by Err alone (no watch was registered), and that the parent's
// error is then frozen against a later Cancel.
func TestErrSeesTheParentWithoutDone(t *testing.T) {
	parent, cancel := context.WithTimeout(context.Background(), time.Hour)
	c := newCtx(parent)
	require.NoError(t, c.Err())
	cancel()
	require.Equal(t, context.Canceled, c.Err())
	require.Equal(t, ParentDone, CodeOf(c))
	require.False(t, End(c, Fired))
	require.Equal(t, context.Canceled, c.Err())
	requireDone(t, c.Done())

	// A parent already done before the context was made.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	c = newCtx(done)
	requireDone(t, c.Done())
	require.Equal(t, context.Canceled, c.Err())
}

// TestDeadlineValueAndStringAreTheParents checks the parts a Ctx takes
// from its parent as they are.
func TestDeadlineValueAndStringAreTheParents(t *testing.T) {
	c := newCtx(context.WithValue(context.Background(), key{}, "v"))
	_, ok := c.Deadline()
	require.False(t, ok)
	require.Equal(t, "v", c.Value(key{}))
	require.Nil(t, c.Value("other"))
	require.Equal(t, "lazyctx.Ctx", c.String())

	at := time.Now().Add(time.Hour)
	parent, cancel := context.WithDeadline(context.Background(), at)
	defer cancel()
	c = newCtx(parent)
	dl, ok := c.Deadline()
	require.True(t, ok)
	require.Equal(t, at, dl)
	require.Equal(t, parent, Parent(c))
	End(c, Finished)
	require.Equal(t, "v", newCtx(context.WithValue(c, key{}, "v")).Value(key{}), "values pass through a derived context")
}

// TestCauseIsErrOrTheParentsCause checks context.Cause on a Ctx: nil while
// live (even under a live WithCancelCause parent), Err when the owner ended
// it (never nil, never the parent's cause), the parent's cause when the
// parent ended it (seen through Err or through the watch).
func TestCauseIsErrOrTheParentsCause(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		end  func(c *Ctx, cancel context.CancelCauseFunc)
		want error
	}{
		{"fired", func(c *Ctx, _ context.CancelCauseFunc) { End(c, Fired) }, context.DeadlineExceeded},
		{"finished", func(c *Ctx, _ context.CancelCauseFunc) { End(c, Finished) }, context.Canceled},
		{"finished, then the parent", func(c *Ctx, cancel context.CancelCauseFunc) {
			End(c, Finished)
			cancel(boom)
		}, context.Canceled},
		{"parent", func(_ *Ctx, cancel context.CancelCauseFunc) { cancel(boom) }, boom},
	} {
		for _, watched := range []bool{false, true} {
			name := tc.name
			if watched {
				name += "/watched"
			}
			t.Run(name, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				c := newCtx(parent)
				if watched {
					c.Done()
				}
				require.NoError(t, context.Cause(c))
				tc.end(c, cancel)
				require.Equal(t, tc.want, context.Cause(c))
				require.Equal(t, tc.want, context.Cause(c), "stable")
				// A child derived from c inherits the same cause.
				child, ccancel := context.WithCancel(c)
				defer ccancel()
				requireDone(t, child.Done())
				require.Equal(t, tc.want, context.Cause(child))
			})
		}
	}

	// A parent ended by its own deadline, with a cause.
	parent, cancel := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), boom)
	defer cancel()
	c := newCtx(parent)
	require.Equal(t, boom, context.Cause(c))
	require.Equal(t, context.DeadlineExceeded, c.Err())

	// A parent that is not a cancelCtx but ends on its own, inside a live
	// cancelCtx: Cause must not report the live one's nil cause.
	outer, cancelOuter := context.WithCancelCause(context.Background())
	defer cancelOuter(nil)
	cp := testkit.NewPlainCtx(outer)
	c = newCtx(cp)
	cp.Cancel()
	require.Equal(t, context.Canceled, context.Cause(c))
}

// TestAfterFuncRunsAtTheEnd checks the AfterFunc method: a registration runs
// once, synchronously on the goroutine that ends the context; a stopped one
// never runs; one made after the end runs at once on its own goroutine.
func TestAfterFuncRunsAtTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCtx(context.Background())
		var ran atomic.Int32
		stop1 := c.AfterFunc(func() { ran.Add(1) })
		stop2 := c.AfterFunc(func() { ran.Add(10) })
		require.True(t, stop2())
		require.False(t, stop2())
		require.True(t, End(c, Fired))
		require.Equal(t, int32(1), ran.Load(), "ran synchronously in Cancel")
		require.False(t, stop1(), "already ran")
		require.False(t, End(c, Finished))
		require.Equal(t, int32(1), ran.Load(), "runs once")

		stop3 := c.AfterFunc(func() { ran.Add(100) })
		synctest.Wait()
		require.Equal(t, int32(101), ran.Load(), "after the end: at once, in a goroutine")
		require.False(t, stop3())

		// Ended by the parent through the watch: the registration runs.
		parent, cancel := context.WithCancel(context.Background())
		c = newCtx(parent)
		c.AfterFunc(func() { ran.Add(1000) })
		cancel()
		synctest.Wait() // context.AfterFunc on the parent runs its f in a goroutine
		require.Equal(t, int32(1101), ran.Load())
		require.Equal(t, context.Canceled, c.Err())
	})
}

// TestChildrenCostNoGoroutine derives children from a Ctx (whose parent is
// a *context.cancelCtx, a Ctx, a parent without AfterFunc, or Background)
// and checks that they cost no goroutine and all end with the Ctx, and that
// the watch on the parent is released when the Ctx ends.
func TestChildrenCostNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent func(t *testing.T) context.Context
		watch  int // goroutines the watch on the parent costs
	}{
		{"background", func(*testing.T) context.Context { return context.Background() }, 0},
		{"cancelCtx", func(t *testing.T) context.Context { return t.Context() }, 0},
		{"ctx", func(t *testing.T) context.Context { return newCtx(t.Context()) }, 0},
		{"custom", func(t *testing.T) context.Context {
			return testkit.NewPlainCtx(t.Context())
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent := tc.parent(t)
				synctest.Wait()
				base := bubble.Goroutines()
				c := newCtx(parent)
				const n = 20
				var children []context.Context
				var ran atomic.Int32
				for range n {
					cc, ccancel := context.WithCancel(c)
					defer ccancel()
					tc, tcancel := context.WithTimeout(c, time.Hour)
					defer tcancel()
					gc, gcancel := context.WithCancel(cc)
					defer gcancel()
					context.AfterFunc(c, func() { ran.Add(1) })
					children = append(children, cc, tc, gc)
				}
				stop := context.AfterFunc(c, func() { ran.Add(1000) })
				require.True(t, stop())
				synctest.Wait()
				require.Equal(t, base+tc.watch, bubble.Goroutines(), "children must not cost goroutines")
				for _, ch := range children {
					requireOpen(t, ch.Done())
				}
				End(c, Fired)
				for _, ch := range children {
					requireDone(t, ch.Done()) // synchronously
					require.Equal(t, context.DeadlineExceeded, ch.Err())
				}
				synctest.Wait() // context.AfterFunc runs f in a goroutine
				require.Equal(t, int32(n), ran.Load())
				require.Equal(t, base, bubble.Goroutines(), "the watch is released")
			})
		})
	}
}

// TestParentWatchUnregisters checks that a Ctx that ended before its
// parent no longer holds a registration on the parent: the parent's later
// cancellation finds nothing of it (its Err stays its own).
func TestParentWatchUnregisters(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	p := newCtx(parent)
	c := newCtx(p)
	d := c.Done()
	require.Len(t, p.slow.Load().afters, 1, "c watches p through p's AfterFunc")
	require.True(t, End(c, Finished))
	requireDone(t, d)
	require.Empty(t, p.slow.Load().afters, "the watch is released")
	cancel()
	require.Equal(t, context.Canceled, p.Err())
	requireDone(t, p.Done())
	require.Equal(t, context.Canceled, c.Err())
	require.Equal(t, Finished, CodeOf(c), "ended by the owner, not the parent")
	require.Equal(t, ParentDone, CodeOf(p))
}

// TestConcurrentEnd races every reader of a Ctx (Done, Err, Cause, AfterFunc
// and its stop, derived children) against two enders (the owner's Cancel
// and the parent's cancellation). Every observer must see the same error,
// every Done closed, and every registration not stopped in time run
// exactly once. Run it under -race.
func TestConcurrentEnd(t *testing.T) {
	// In a bubble so that synctest.Wait can wait for the registrations that
	// run on goroutines of their own; the goroutines still run in parallel.
	synctest.Test(t, func(t *testing.T) {
		for range 200 {
			concurrentEnd(t)
		}
	})
}

func concurrentEnd(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCtx(parent)
	const readers = 8
	var wg sync.WaitGroup
	var ran, stopped atomic.Int32
	errs := make([]error, readers)
	start := make(chan struct{})
	for i := range readers {
		wg.Go(func() {
			<-start
			stop := c.AfterFunc(func() { ran.Add(1) })
			child, ccancel := context.WithCancel(c)
			defer ccancel()
			if i%2 == 0 && stop() {
				stopped.Add(1)
			}
			_ = c.Err()
			_ = context.Cause(c)
			<-c.Done()
			<-child.Done()
			errs[i] = c.Err()
		})
	}
	wg.Go(func() { <-start; End(c, Fired) })
	wg.Go(func() { <-start; cancel() })
	close(start)
	wg.Wait()
	want := c.Err()
	require.True(t, want == context.DeadlineExceeded || want == context.Canceled, want)
	for _, e := range errs {
		require.Equal(t, want, e)
	}
	require.Equal(t, want, context.Cause(c))
	// A registration runs synchronously, or (made after the end) on a
	// goroutine of its own: wait for those.
	synctest.Wait()
	require.Equal(t, int32(readers), ran.Load()+stopped.Load())
}

// TestOwnerOperationsAreNotMethods checks that a Ctx, as a callee receives
// it, has no exported method beyond context.Context's, String and
// AfterFunc: ending or re-initialising it is for its owner, through the
// package functions.
func TestOwnerOperationsAreNotMethods(t *testing.T) {
	typ := reflect.TypeFor[*Ctx]()
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	require.Equal(t, []string{"AfterFunc", "Deadline", "Done", "Err", "String", "Value"}, got)
}

// children returns the number of children registered on a
// *context.cancelCtx (read through reflection: the set is unexported).
func children(t *testing.T, ctx context.Context) int {
	t.Helper()
	v := reflect.ValueOf(ctx).Elem().FieldByName("children")
	require.True(t, v.IsValid(), "not a *context.cancelCtx: %T", ctx)
	return v.Len()
}

// TestDoneUnderACancelCtxParentRegistersOneChild checks the registration
// that Done makes on a *context.cancelCtx parent: one child in the parent's
// children set while the context is live, none once it ended (End, or the
// parent's cancellation), and the Done channel closed synchronously by the
// parent's cancel, as a context.WithCancel child's is.
func TestDoneUnderACancelCtxParentRegistersOneChild(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c := newCtx(parent)
	_ = c.Err()
	require.Equal(t, 0, children(t, parent), "Err registers nothing")
	d := c.Done()
	require.Equal(t, d, c.Done())
	require.Equal(t, 1, children(t, parent))
	require.True(t, End(c, Finished))
	requireDone(t, d)
	require.Equal(t, 0, children(t, parent), "End releases the registration")

	c = newCtx(parent)
	d = c.Done()
	require.Equal(t, 1, children(t, parent))
	boom := errors.New("boom")
	cancel(boom)
	requireDone(t, d) // synchronously, within the parent's cancel
	require.Equal(t, context.Canceled, c.Err())
	require.Equal(t, ParentDone, CodeOf(c))
	require.Equal(t, boom, context.Cause(c))
	require.True(t, errors.Is(c.Err(), context.Canceled))
}

// TestConcurrentFirstDone races the first Done calls of one context against
// its End (and, every other round, the parent's cancellation): every caller
// gets the same channel, it is closed, Err agrees with the code, and the
// parent keeps no registration. Run it under -race.
func TestConcurrentFirstDone(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 500 {
		p := parent
		var pcancel context.CancelFunc = func() {}
		if i%2 == 1 {
			p, pcancel = context.WithCancel(parent)
		}
		c := newCtx(p)
		const n = 4
		var got [n]<-chan struct{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range n {
			wg.Go(func() { <-start; got[j] = c.Done() })
		}
		wg.Go(func() { <-start; End(c, Fired) })
		wg.Go(func() { <-start; pcancel() })
		close(start)
		wg.Wait()
		for j := range n {
			require.Equal(t, got[0], got[j])
		}
		requireDone(t, got[0])
		require.Equal(t, got[0], c.Done())
		switch CodeOf(c) {
		case Fired:
			require.Equal(t, context.DeadlineExceeded, c.Err())
		case ParentDone:
			require.Equal(t, context.Canceled, c.Err())
		default:
			t.Fatalf("code %v", CodeOf(c))
		}
		pcancel()
		require.Equal(t, 0, children(t, parent), "round %d", i)
	}
}

var sink *Ctx

// TestSize pins the size the package documentation promises (64-bit):
// what every call pays for a callee that never asks for Done.
func TestSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	require.Equal(t, uintptr(48), unsafe.Sizeof(Ctx{}))
}

// TestAllocs pins what a Ctx costs: one object for a callee that never
// asks for Done (Err polled, ended by its owner), the channel for one that
// does under a parent that is never cancelled, and the child registered on
// a cancellable parent.
func TestAllocs(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	testkit.WantAllocs(t, "Err only", 1, func() {
		c := new(Ctx)
		Init(c, parent)
		_ = c.Err()
		End(c, Finished)
		sink = c
	})
	// The channel; Background is never done: no watch.
	testkit.WantAllocs(t, "Done, parent never done", 1+1, func() {
		c := new(Ctx)
		Init(c, context.Background())
		<-doneAfter(c)
		sink = c
	})
	// A cancelCtx parent: the child context.WithCancel registers on it,
	// its cancel func and its channel (which is Done's); the parent's
	// children set already exists.
	testkit.WantAllocs(t, "Done, cancelCtx parent", 1+3, func() {
		c := new(Ctx)
		Init(c, parent)
		<-doneAfter(c)
		sink = c
	})
	// A parent that is itself a Ctx (one object more): the channel, the
	// slow state that holds the watch, and the watch through the parent's
	// AfterFunc: the parent's slow state, its entry, map (two objects) and
	// stop closure, and the bound parentDone; no goroutine.
	testkit.WantAllocs(t, "Done, Ctx parent", 1+1+1+1+6, func() {
		p := new(Ctx)
		Init(p, context.Background())
		c := new(Ctx)
		Init(c, p)
		<-doneAfter(c)
		sink = p
	})
}

// doneAfter makes c's Done channel, ends c and returns the channel.
func doneAfter(c *Ctx) <-chan struct{} {
	d := c.Done()
	End(c, Finished)
	return d
}

// BenchmarkParentRegistration measures the two ways the context package
// offers to hear of a *context.cancelCtx parent's cancellation without a
// goroutine, each with the Done channel a context needs (made, then
// closed): a child context.WithCancel, whose channel is the context's (what
// Done does), and context.AfterFunc beside a channel of one's own. Both
// insert into and delete from the parent's children set under its lock;
// Ctx is what Done costs in all (the Ctx, the child, its cancel func, the
// channel). Channel and CtxBackground are the same under a parent that is
// never cancelled. Command: go test -run '^$' -bench ParentRegistration
// ./internal/lazyctx/
func BenchmarkParentRegistration(b *testing.B) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("WithCancel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			child, cancel := context.WithCancel(parent)
			doneSink = child.Done()
			cancel()
		}
	})
	b.Run("AfterFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := make(chan struct{})
			stop := context.AfterFunc(parent, func() { close(d) })
			doneSink = d
			if stop() {
				close(d)
			}
		}
	})
	b.Run("Ctx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := new(Ctx)
			Init(c, parent)
			doneSink = c.Done()
			End(c, Finished)
		}
	})
	// The floor under a parent that is never cancelled: the channel alone,
	// made and closed (a context that ends must close the channel it handed
	// out, so a channel never serves two contexts), and Done there.
	b.Run("Channel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d := make(chan struct{})
			doneSink = d
			close(d)
		}
	})
	b.Run("CtxBackground", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := new(Ctx)
			Init(c, context.Background())
			doneSink = c.Done()
			End(c, Finished)
		}
	})
}

var doneSink <-chan struct{}

// TestParentCancelBeforeFireKeepsTheParentsErr cancels a *context.cancelCtx
// parent after Done was made (the parent closes Done's channel itself: it
// is the registered child's), then fires the deadline: as under
// context.WithDeadline, the context keeps the parent's error and cause, and
// the fire ends nothing.
func TestParentCancelBeforeFireKeepsTheParentsErr(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := newCtx(parent)
	d := c.Done()
	boom := errors.New("boom")
	cancel(boom)
	requireDone(t, d) // the callee sees its context done: the parent's doing

	// What context.WithDeadline does.
	ref, rcancel := context.WithCancel(parent)
	defer rcancel()
	<-ref.Done()

	require.False(t, End(c, Fired), "the parent ended the context first")
	require.Equal(t, ParentDone, CodeOf(c))
	require.Equal(t, ref.Err(), c.Err())
	require.Equal(t, boom, context.Cause(c))
}

// TestParentCancelBeforeFinishKeepsTheParentsCause is the same with the
// owner finishing the call after the parent's cancellation: the code is
// ParentDone and Cause the parent's cause.
func TestParentCancelBeforeFinishKeepsTheParentsCause(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := newCtx(parent)
	d := c.Done()
	boom := errors.New("boom")
	cancel(boom)
	<-d
	require.False(t, End(c, Finished))
	require.Equal(t, ParentDone, CodeOf(c))
	require.Equal(t, context.Canceled, c.Err())
	require.Equal(t, boom, context.Cause(c))
}

// TestDoneClosedWhileLiveMeansParentDone races the parent's cancellation
// against the owner's End (Fired, or Finished) under a *context.cancelCtx
// parent, with an observer that waits for Done (made before, or racing
// too): an observer that saw Done closed while the context was still live
// saw the parent's doing, so the context must end ParentDone, whoever asks
// Err first. Run it under -race.
func TestDoneClosedWhileLiveMeansParentDone(t *testing.T) {
	for i := range 2000 {
		parent, cancel := context.WithCancel(context.Background())
		c := newCtx(parent)
		var d <-chan struct{}
		if i%4 < 2 {
			d = c.Done()
		}
		code := Fired
		if i%2 == 1 {
			code = Finished
		}
		var wg sync.WaitGroup
		var sawLive bool
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			if d == nil {
				<-c.Done()
			} else {
				<-d
			}
			sawLive = CodeOf(c) == Live
		})
		wg.Go(func() { <-start; cancel() })
		wg.Go(func() { <-start; End(c, code) })
		close(start)
		wg.Wait()
		if sawLive {
			require.Equal(t, ParentDone, CodeOf(c), "round %d: Done was closed by the parent while live", i)
			require.Equal(t, context.Canceled, c.Err(), "round %d", i)
		}
		require.Equal(t, 0, children(t, parent), "round %d", i)
	}
}

// hookCtx is a cancellable custom parent (no AfterFunc method) whose Done
// calls run hooks: it lets a test stop Done's slow path at fixed points.
type hookCtx struct {
	context.Context
	ch    chan struct{}
	calls int
	hooks []func()
}

func (h *hookCtx) Done() <-chan struct{} {
	if h.calls < len(h.hooks) {
		f := h.hooks[h.calls]
		h.calls++
		f()
	}
	return h.ch
}

func (h *hookCtx) Err() error { return nil }

// TestErrNonNilMeansDoneClosed ends a context and reads its Err while the
// first Done is between its liveness check and the publication of its
// channel: once Err has returned non-nil, Done (that first call, and every
// later one) returns a closed channel, as the context package guarantees.
func TestErrNonNilMeansDoneClosed(t *testing.T) {
	atDone1, go1 := make(chan struct{}), make(chan struct{})
	atDone2, go2 := make(chan struct{}), make(chan struct{})
	p := &hookCtx{Context: context.Background(), ch: make(chan struct{}), hooks: []func(){
		func() { close(atDone1); <-go1 }, // doneSlow's parent.Done(), before the publication
		func() { close(atDone2); <-go2 }, // context.AfterFunc's parent.Done(), after it
	}}
	c := newCtx(p)
	first := make(chan (<-chan struct{}))
	go func() { first <- c.Done() }()
	<-atDone1
	require.True(t, End(c, Finished))
	require.Equal(t, context.Canceled, c.Err())
	close(go1)
	var fd <-chan struct{}
	select {
	case <-atDone2: // the first Done published an open channel and is registering
	case fd = <-first: // it returned at once
	}
	d := c.Done()
	open := false
	select {
	case <-d:
	default:
		open = true
	}
	close(go2)
	if fd == nil {
		fd = <-first
	}
	require.False(t, open, "Err returned context.Canceled, then Done returned an open channel")
	requireDone(t, fd)
	require.Equal(t, d, fd)
}

// TestDoneRacingEndReleasesTheParentWatch ends a context while its first
// Done is between its liveness check and the creation of the slow state
// that holds the watch on a custom parent: Done registers the watch, then
// must release it (context.AfterFunc's goroutine would otherwise live
// until the parent ends).
func TestDoneRacingEndReleasesTheParentWatch(t *testing.T) {
	atDone1, go1 := make(chan struct{}), make(chan struct{})
	p := &hookCtx{Context: context.Background(), ch: make(chan struct{}), hooks: []func(){
		func() { close(atDone1); <-go1 }, // doneSlow's parent.Done(), before the publication
	}}
	c := newCtx(p)
	first := make(chan (<-chan struct{}))
	go func() { first <- c.Done() }()
	<-atDone1
	require.True(t, End(c, Finished))
	close(go1)
	requireDone(t, <-first)
	s := c.slow.Load()
	require.NotNil(t, s, "no slow state")
	s.mu.Lock()
	stop := s.stopWatch
	s.mu.Unlock()
	if stop != nil {
		stop() // let goleak pass
		t.Fatal("the context ended, but its watch on the parent is still registered")
	}
}
