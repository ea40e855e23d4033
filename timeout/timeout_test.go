package timeout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/bubble"
	"github.com/rampart-go/rampart/internal/lazyctx"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/internal/watchdog"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// Tests that use the process-wide watchdog leave its goroutine idling;
	// stop it before the leak check (every deadline has been released).
	if !watchdog.Default().StopIdle() {
		println("default watchdog still has armed deadlines")
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println(err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// newT builds a Timeout whose watchdog lives and dies with the test (inside
// a synctest bubble when called from one).
func newT(t *testing.T, cfg Config) *Timeout {
	t.Helper()
	if cfg.Ticker == nil {
		cfg.Ticker = rampart.NewNanoTicker()
	}
	if cfg.Tick == 0 && cfg.Watchdog == nil {
		cfg.Tick = time.Millisecond
	}
	tm, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tm.Close() })
	return tm
}

func TestNewValidates(t *testing.T) {
	wd := NewWatchdog(time.Millisecond, nil)
	defer wd.Close()
	for name, tc := range map[string]struct {
		cfg   Config
		field string
	}{
		"zero duration":            {Config{}, "Duration"},
		"negative duration":        {Config{Duration: -time.Second}, "Duration"},
		"bad mode":                 {Config{Duration: time.Second, Mode: 7}, "Mode"},
		"mode 2 (no abandon mode)": {Config{Duration: time.Second, Mode: ModeSoft + 1}, "Mode"},
		"negative tick":            {Config{Duration: time.Second, Tick: -1}, "Tick"},
		"negative max":             {Config{Duration: time.Second, MaxAbandoned: -1}, "MaxAbandoned"},
		"tick vs watchdog":         {Config{Duration: time.Second, Watchdog: wd, Tick: 2 * time.Millisecond}, "Tick"},
		"ticker vs wd":             {Config{Duration: time.Second, Watchdog: wd, Ticker: rampart.NewManualTicker(0)}, "Ticker"},
	} {
		_, err := New(tc.cfg)
		require.Error(t, err, name)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig, name)
		testkit.RequireConfigError(t, err, "timeout", tc.field)
	}
	tm, err := New(Config{Duration: time.Second, Watchdog: wd})
	require.NoError(t, err)
	require.Equal(t, Ticker(wd.Clock()), tm.Ticker())
	require.Equal(t, time.Second, tm.Duration())
	require.Equal(t, ModeDeadline, tm.Mode())
	require.Equal(t, "deadline", tm.Mode().String())
	require.Equal(t, "soft", ModeSoft.String())
	require.Equal(t, "Mode(invalid)", (ModeSoft + 1).String())
	require.Equal(t, "Mode(invalid)", Mode(9).String())
}

// TestNewUncomparableTicker: a Ticker of an uncomparable type (a func) is a
// valid rampart.Ticker. Shared with a Watchdog, New cannot check with ==
// that it is the Watchdog's clock: it accepts it, or refuses it with a
// ConfigError for Ticker, and never panics. Without a Watchdog the
// Timeout's own watchdog runs on it and calls time out.
func TestNewUncomparableTicker(t *testing.T) {
	t.Run("shared watchdog", func(t *testing.T) {
		tk := rampart.NewManualTicker(0)
		ft := testkit.FuncTicker(tk.Now)
		wd := NewWatchdog(time.Millisecond, ft)
		defer wd.Close()
		var tm *Timeout
		var err error
		p, _ := testkit.Run(func() { tm, err = New(Config{Duration: time.Second, Watchdog: wd, Ticker: ft}) })
		require.Nil(t, p, "New panicked")
		if err != nil {
			require.ErrorIs(t, err, rampart.ErrInvalidConfig)
			testkit.RequireConfigError(t, err, "timeout", "Ticker")
			return
		}
		tm.Close()
	})
	t.Run("own watchdog", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := rampart.NewNanoTicker()
			tm, err := New(Config{Duration: time.Second, Ticker: testkit.FuncTicker(n.Now)})
			require.NoError(t, err)
			defer tm.Close()
			err = tm.Do(context.Background(), func(c context.Context) error { <-c.Done(); return nil })
			require.ErrorIs(t, err, ErrTimeout)
		})
	})
}

// bubbleGoroutines counts the goroutines of the calling goroutine's
// testing/synctest bubble.
func bubbleGoroutines() int { return bubble.Goroutines() }

// Ticker aliases rampart.Ticker for the comparison above.
type Ticker = rampart.Ticker

func TestErrors(t *testing.T) {
	require.ErrorIs(t, ErrTimeout, context.DeadlineExceeded)
	tm := newT(t, Config{Duration: time.Second, Name: "db"})
	err := error(tm.Err())
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, rampart.ErrRejected)
	require.Equal(t, `timeout "db": deadline exceeded (1s)`, err.Error())
	require.Equal(t, "db", tm.Err().Name())
	require.Equal(t, time.Second, tm.Err().Duration())
	var te interface{ Timeout() bool }
	require.ErrorAs(t, err, &te)
	require.True(t, te.Timeout())
	require.Equal(t, "timeout: deadline exceeded", ErrTimeout.Error())
}

// TestDoAndCallNeverAbandon: Do and Call run fn on the caller's goroutine
// in both modes, whatever the abandon settings: a callee that ignores its
// context keeps the caller until it returns (then the call is a timeout),
// and nothing is abandoned or handed to a worker. DoAbandon and
// CallAbandon are the abandoning entry points.
func TestDoAndCallNeverAbandon(t *testing.T) {
	for _, mode := range []Mode{ModeDeadline, ModeSoft} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := newT(t, Config{Duration: 10 * time.Millisecond, Mode: mode, MaxAbandoned: 5, Workers: 2})
				caller := goid()
				start := time.Now()
				err := tm.Do(t.Context(), func(context.Context) error {
					require.Equal(t, caller, goid(), "fn runs on the caller's goroutine")
					time.Sleep(50 * time.Millisecond) // ignores its context
					return nil
				})
				require.Same(t, tm.Err(), err)
				require.Equal(t, 50*time.Millisecond, time.Since(start), "Do returned when fn did")
				v, err := Call(t.Context(), tm, func(context.Context) (int, error) {
					require.Equal(t, caller, goid(), "fn runs on the caller's goroutine")
					time.Sleep(50 * time.Millisecond)
					return 7, nil
				})
				require.Same(t, tm.Err(), err)
				require.Equal(t, 7, v, "the late value comes back next to the error")
				st := tm.Stats()
				require.Equal(t, uint64(2), st.Timeouts)
				require.Zero(t, st.AbandonedTotal)
				require.Zero(t, st.Workers, "no worker was started")
			})
		})
	}
}

func TestDeadlineModeOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		boom := errors.New("boom")
		require.NoError(t, tm.Do(t.Context(), func(context.Context) error { return nil }))
		require.Same(t, boom, tm.Do(t.Context(), func(context.Context) error { return boom }))

		// The callee honours its context: ErrTimeout at the deadline.
		start := time.Now()
		err := tm.Do(t.Context(), func(c context.Context) error {
			<-c.Done()
			return c.Err()
		})
		require.Same(t, tm.Err(), err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond)
		require.LessOrEqual(t, time.Since(start), 11*time.Millisecond)

		// A success after the deadline is a timeout too (documented).
		err = tm.Do(t.Context(), func(c context.Context) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		})
		require.Same(t, tm.Err(), err)

		// Call hands the late value back next to the error.
		v, err := Call(t.Context(), tm, func(c context.Context) (int, error) {
			time.Sleep(20 * time.Millisecond)
			return 7, nil
		})
		require.Equal(t, 7, v)
		require.ErrorIs(t, err, ErrTimeout)
		v, err = Call(t.Context(), tm, func(c context.Context) (int, error) { return 8, nil })
		require.Equal(t, 8, v)
		require.NoError(t, err)
		require.Equal(t, uint64(3), tm.Stats().Timeouts)
	})
}

// TestPrecision: the context is done no earlier than the deadline and no
// later than one tick after it, for several ticks and durations.
func TestPrecision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tick := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
			for _, d := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 50 * time.Millisecond, 1234 * time.Microsecond} {
				tm := newT(t, Config{Duration: d, Tick: tick})
				// StartAt at an odd offset from the watchdog's ticks.
				time.Sleep(333 * time.Microsecond)
				start := time.Now()
				var fired time.Duration
				err := tm.Do(t.Context(), func(c context.Context) error {
					<-c.Done()
					fired = time.Since(start)
					return c.Err()
				})
				require.ErrorIs(t, err, ErrTimeout)
				require.GreaterOrEqual(t, fired, d, "tick %v d %v", tick, d)
				require.LessOrEqual(t, fired, d+tick, "tick %v d %v", tick, d)
				tm.Close()
			}
		}
	})
}

func TestSoftMode(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	tm, err := New(Config{Duration: 10, Mode: ModeSoft, Ticker: tk})
	require.NoError(t, err)
	defer tm.Close()
	parent := context.WithValue(context.Background(), ctxKey{}, 1)
	c, h := tm.StartAt(parent, 100)
	require.Equal(t, parent, c, "soft mode hands the parent through")
	require.Equal(t, int64(110), h.Deadline())
	boom := errors.New("boom")
	require.Same(t, boom, tm.FinishAt(h, 109, boom))
	require.Same(t, tm.Err(), tm.FinishAt(h, 110, boom))
	require.Same(t, tm.Err(), tm.FinishAt(h, 110, nil))

	err = tm.Do(context.Background(), func(context.Context) error { tk.Advance(10); return nil })
	require.ErrorIs(t, err, ErrTimeout)
	require.NoError(t, tm.Do(context.Background(), func(context.Context) error { tk.Advance(9); return nil }))
}

// TestExtremeReadingsSaturate: on a manual clock near math.MaxInt64, a
// start there and a Duration of math.MaxInt64 (soft mode), or of two hours
// (deadline mode, on a watchdog clocked by the manual ticker), saturate the
// deadline at math.MaxInt64 instead of wrapping it into the past: the call
// is in time until the clock reaches it (FinishAt returns the user's error
// unchanged), the context's Deadline is in the future and it never fires
// early; at math.MaxInt64 the call is a timeout.
func TestExtremeReadingsSaturate(t *testing.T) {
	t.Run("soft", func(t *testing.T) {
		tk := rampart.NewManualTicker(math.MaxInt64 - 10)
		tm, err := New(Config{Duration: math.MaxInt64, Mode: ModeSoft, Ticker: tk})
		require.NoError(t, err)
		defer tm.Close()
		boom := errors.New("boom")
		_, h := tm.StartAt(context.Background(), tk.Now())
		require.Equal(t, int64(math.MaxInt64), h.Deadline(), "deadline not saturated")
		require.Same(t, boom, tm.FinishAt(h, math.MaxInt64-1, boom), "Finish before the deadline: the user's error unchanged")
		require.ErrorIs(t, tm.FinishAt(h, math.MaxInt64, nil), ErrTimeout, "Finish at the deadline")
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			tk := rampart.NewManualTicker(math.MaxInt64 - int64(time.Hour))
			wd := NewWatchdog(time.Millisecond, tk)
			defer wd.Close()
			tm, err := New(Config{Duration: 2 * time.Hour, Watchdog: wd})
			require.NoError(t, err)
			defer tm.Close()
			boom := errors.New("boom")
			c, h := tm.StartAt(context.Background(), tk.Now())
			require.Equal(t, int64(math.MaxInt64), h.Deadline(), "deadline not saturated")
			d, ok := c.Deadline()
			require.True(t, ok && d.After(time.Now()), "Deadline() = %v, %v: not in the future", d, ok)
			time.Sleep(10 * time.Millisecond) // sweeps: nothing is due
			require.NoError(t, c.Err(), "fired early")
			tk.Advance(time.Hour - 1)
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, c.Err(), "fired 1 ns early")
			require.Same(t, boom, tm.FinishAt(h, tk.Now(), boom), "Finish: the user's error unchanged")
			require.ErrorIs(t, c.Err(), context.Canceled, "after Finish")
			// A call at the very end of the clock fires when it reaches MaxInt64.
			c, h = tm.StartAt(context.Background(), tk.Now())
			tk.Set(math.MaxInt64)
			time.Sleep(2 * time.Millisecond)
			require.ErrorIs(t, c.Err(), context.DeadlineExceeded, "at MaxInt64")
			require.ErrorIs(t, tm.FinishAt(h, tk.Now(), nil), ErrTimeout)
		})
	})
}

// TestCallUserErrorAndParentCancel: Call in deadline mode returns a user's
// error unchanged with the value when in time; the parent's cancellation
// comes back as the parent's error with fn's value, not as a timeout, and
// is not counted.
func TestCallUserErrorAndParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Second})
		boom := errors.New("boom")
		v, err := Call(context.Background(), tm, func(context.Context) (int, error) { return 7, boom })
		require.Equal(t, 7, v)
		require.Same(t, boom, err)
		parent, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		v, err = Call(parent, tm, func(c context.Context) (int, error) { <-c.Done(); return 3, c.Err() })
		require.Equal(t, 3, v)
		require.Equal(t, context.Canceled, err)
		require.Zero(t, tm.Stats().Timeouts, "timeouts counted for a parent's cancellation")
	})
}

// TestPrimitivesManual drives StartAt/FinishAt with a manual ticker and a
// manual sweep: classification is exact, firing happens on Sweep.
func TestPrimitivesManual(t *testing.T) {
	tk := rampart.NewManualTicker(1000)
	wd := watchdog.New(watchdog.Config{Clock: tk, Manual: true})
	defer wd.Close()
	tm, err := New(Config{Duration: 100, Watchdog: wd})
	require.NoError(t, err)

	// Finishes in time.
	c, h := tm.StartAt(context.Background(), tk.Now())
	require.NoError(t, c.Err())
	require.NoError(t, tm.FinishAt(h, 1099, nil))
	require.ErrorIs(t, c.Err(), context.Canceled, "a finished context is cancelled, like WithTimeout's cancel")

	// Overruns without the watchdog having fired: still a timeout.
	c, h = tm.StartAt(context.Background(), tk.Now())
	require.Same(t, tm.Err(), tm.FinishAt(h, 1100, nil))
	require.ErrorIs(t, c.Err(), context.Canceled)

	// The watchdog fires first: the context says DeadlineExceeded forever.
	c, h = tm.StartAt(context.Background(), tk.Now())
	tk.Set(1100)
	require.Equal(t, 1, wd.Sweep())
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after fire")
	}
	// A stale clock reading (a cached ticker) is still classified by the fire.
	require.Same(t, tm.Err(), tm.FinishAt(h, 1050, nil))
	require.Equal(t, context.DeadlineExceeded, c.Err())
	require.Equal(t, 0, wd.Stats().Armed)
}

// TestFinishNotRead: without an end reading, deadline mode classifies by
// the watchdog's fire (a late return the watchdog has not seen yet is in
// time, as in Do), and soft mode reads the ticker.
func TestFinishNotRead(t *testing.T) {
	tk := rampart.NewManualTicker(1000)
	wd := watchdog.New(watchdog.Config{Clock: tk, Manual: true})
	defer wd.Close()
	tm, err := New(Config{Duration: 100, Watchdog: wd})
	require.NoError(t, err)
	boom := errors.New("boom")

	c, h := tm.StartAt(context.Background(), tk.Now())
	tk.Set(1100) // past the deadline, but the watchdog has not swept
	require.Same(t, boom, tm.FinishAt(h, rampart.NotRead, boom), "not fired: the call's own result")
	require.ErrorIs(t, c.Err(), context.Canceled)
	require.Equal(t, uint64(0), tm.Stats().Timeouts)

	c, h = tm.StartAt(context.Background(), tk.Now())
	tk.Set(1200)
	require.Equal(t, 1, wd.Sweep())
	require.Same(t, tm.Err(), tm.FinishAt(h, rampart.NotRead, nil), "fired first: a timeout")
	require.Equal(t, context.DeadlineExceeded, c.Err())
	require.Equal(t, uint64(1), tm.Stats().Timeouts)
	require.Equal(t, 0, wd.Stats().Armed)

	soft, err := New(Config{Duration: 100, Mode: ModeSoft, Ticker: tk})
	require.NoError(t, err)
	defer soft.Close()
	_, h = soft.StartAt(context.Background(), tk.Now())
	require.NoError(t, soft.FinishAt(h, rampart.NotRead, nil), "soft mode reads the ticker: in time")
	_, h = soft.StartAt(context.Background(), tk.Now())
	tk.Advance(100)
	require.Same(t, soft.Err(), soft.FinishAt(h, rampart.NotRead, nil), "soft mode reads the ticker: late")
}

type ctxKey struct{}

// TestContextContract checks Deadline, Done, Err, Value, Cause and the
// permanence of a retained context.
func TestContextContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		parent := context.WithValue(t.Context(), ctxKey{}, "v")
		var kept context.Context
		start := time.Now()
		err := tm.Do(parent, func(c context.Context) error {
			kept = c
			dl, ok := c.Deadline()
			require.True(t, ok)
			require.Equal(t, start.Add(10*time.Millisecond), dl)
			dl2, _ := c.Deadline()
			require.Equal(t, dl, dl2, "Deadline is stable")
			require.Equal(t, "v", c.Value(ctxKey{}))
			require.Nil(t, c.Value("other"))
			require.NoError(t, c.Err())
			require.Nil(t, context.Cause(c))
			d := c.Done()
			require.Equal(t, d, c.Done(), "Done is stable")
			select {
			case <-d:
				t.Fatal("done early")
			default:
			}
			<-d
			require.Equal(t, context.DeadlineExceeded, c.Err())
			require.Equal(t, context.DeadlineExceeded, context.Cause(c))
			return c.Err()
		})
		require.ErrorIs(t, err, ErrTimeout)
		require.Contains(t, kept.(interface{ String() string }).String(), "timeout.Context")
		// Retained: same error forever, whatever happens later.
		time.Sleep(time.Hour)
		require.Equal(t, context.DeadlineExceeded, kept.Err())
		<-kept.Done()

		// A retained context of a call that finished in time: Canceled forever.
		err = tm.Do(parent, func(c context.Context) error { kept = c; return nil })
		require.NoError(t, err)
		require.Equal(t, context.Canceled, kept.Err())
		<-kept.Done()
		time.Sleep(time.Hour)
		require.Equal(t, context.Canceled, kept.Err())
	})
}

// TestCalleeContextCannotBeEndedByATypeAssertion checks that the context
// handed to the callee (Do, StartAt, DoAbandon) exposes no method beyond
// context.Context's, String and AfterFunc: a callee that type-asserts it
// finds nothing that fires, cancels or re-initialises it.
func TestCalleeContextCannotBeEndedByATypeAssertion(t *testing.T) {
	tm := newT(t, Config{Duration: time.Hour})
	want := []string{"AfterFunc", "Deadline", "Done", "Err", "String", "Value"}
	check := func(c context.Context) error {
		typ := reflect.TypeOf(c)
		var got []string
		for i := range typ.NumMethod() {
			got = append(got, typ.Method(i).Name)
		}
		require.Equal(t, want, got, "exported methods of %v", typ)
		_, ok := c.(interface{ Fire(uint64) })
		require.False(t, ok, "the watchdog's Fire is reachable")
		_, ok = c.(interface{ Cancel(lazyctx.Code) bool })
		require.False(t, ok, "Cancel is reachable")
		return c.Err()
	}
	require.NoError(t, tm.Do(context.Background(), check))
	require.NoError(t, tm.DoAbandon(context.Background(), check, nil))
	c, h := tm.Start(context.Background())
	require.NoError(t, tm.Finish(h, check(c)))
}

// TestDeadlineContextBehavesAsWithDeadline runs the same scenarios on the
// deadline-mode context and on a context.WithDeadline child of the same
// kind of parent (a *context.cancelCtx with a cause, as a server request's
// context), the callee reading Done before or after the end, and checks
// that both report the same: Done closed at once, Err, context.Cause,
// errors.Is(Err, context.DeadlineExceeded), a context.AfterFunc on the
// context run once, and a child derived from it ended with the same error
// and cause. The one documented difference: a child derived from ours
// hears of the parent's cancellation one hop later (on the context
// package's AfterFunc goroutine), where WithDeadline's child hears at once.
func TestDeadlineContextBehavesAsWithDeadline(t *testing.T) {
	boom := errors.New("boom")
	type scenario struct {
		name string
		// end ends the call's context: the deadline passes, the parent is
		// cancelled with boom, or the call finishes (finish).
		end func(cancel context.CancelCauseFunc, finish func())
	}
	for _, sc := range []scenario{
		{"deadline", func(context.CancelCauseFunc, func()) { time.Sleep(20 * time.Millisecond) }},
		{"parent", func(cancel context.CancelCauseFunc, _ func()) { cancel(boom) }},
		{"finished", func(_ context.CancelCauseFunc, finish func()) { finish() }},
	} {
		for _, doneFirst := range []bool{false, true} {
			name := sc.name
			if doneFirst {
				name += "/done-first"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					tm := newT(t, Config{Duration: 10 * time.Millisecond})
					type result struct {
						err, cause, childErr, childCause error
						ran                              int32
					}
					run := func(c context.Context, cancel context.CancelCauseFunc, finish func(), ours bool) result {
						var d <-chan struct{}
						if doneFirst {
							d = c.Done()
							requireOpen(t, d)
						}
						var ran atomic.Int32
						context.AfterFunc(c, func() { ran.Add(1) })
						child, ccancel := context.WithCancel(c)
						defer ccancel()
						require.NoError(t, c.Err())
						sc.end(cancel, finish)
						if d == nil {
							d = c.Done()
						}
						requireClosed(t, d)
						if ours && sc.name == "parent" {
							synctest.Wait() // the hop
						}
						requireClosed(t, child.Done())
						synctest.Wait() // context.AfterFunc runs f on a goroutine
						return result{c.Err(), context.Cause(c), child.Err(), context.Cause(child), ran.Load()}
					}
					// The standard library's.
					parent, cancel := context.WithCancelCause(t.Context())
					std, stdCancel := context.WithDeadline(parent, time.Now().Add(10*time.Millisecond))
					want := run(std, cancel, stdCancel, false)
					stdCancel()
					cancel(nil)
					// Ours, under the same kind of parent.
					parent, cancel = context.WithCancelCause(t.Context())
					c, h := tm.Start(parent)
					finished := false
					got := run(c, cancel, func() { finished = true; require.NoError(t, tm.Finish(h, nil)) }, true)
					if !finished {
						tm.Finish(h, nil)
					}
					cancel(nil)
					require.Equal(t, want, got)
					require.Equal(t, sc.name == "deadline", errors.Is(got.err, context.DeadlineExceeded))
					require.Equal(t, int32(1), got.ran)
				})
			})
		}
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

// requireClosed fails t unless d is closed.
func requireClosed(t *testing.T, d <-chan struct{}) {
	t.Helper()
	select {
	case <-d:
	default:
		t.Fatal("Done is open")
	}
}

func TestParentDeadlineEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Second})
		parent, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		pdl, _ := parent.Deadline()
		err := tm.Do(parent, func(c context.Context) error {
			dl, _ := c.Deadline()
			require.Equal(t, pdl, dl, "the parent's earlier deadline wins")
			<-c.Done()
			return c.Err()
		})
		// The parent's deadline, not ours: the error comes back unchanged.
		require.Equal(t, context.DeadlineExceeded, err)
		require.NotErrorIs(t, err, ErrTimeout)
		require.Equal(t, uint64(0), tm.Stats().Timeouts)
	})
}

func TestParentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: time.Hour})

		// Err sees the parent's cancellation at once, without Done.
		parent, cancel := context.WithCancel(t.Context())
		c, h := tm.StartAt(parent, tm.Ticker().Now())
		cancel()
		require.Equal(t, context.Canceled, c.Err())
		require.Equal(t, context.Canceled, tm.FinishAt(h, tm.Ticker().Now(), c.Err()))

		// Done is closed when the parent is cancelled later.
		parent, cancelCause := context.WithCancelCause(t.Context())
		c, h = tm.StartAt(parent, tm.Ticker().Now())
		d := c.Done()
		boom := errors.New("boom")
		cancelCause(boom)
		<-d
		require.Equal(t, context.Canceled, c.Err())
		tm.FinishAt(h, tm.Ticker().Now(), nil)
		require.Equal(t, context.Canceled, c.Err())

		// A parent cancelled before StartAt.
		parent, cancel = context.WithCancel(t.Context())
		cancel()
		c, h = tm.StartAt(parent, tm.Ticker().Now())
		<-c.Done()
		require.Equal(t, context.Canceled, c.Err())
		tm.FinishAt(h, tm.Ticker().Now(), nil)

		// A custom parent without AfterFunc: one goroutine (context.AfterFunc's), cleaned up at FinishAt.
		cp := testkit.NewPlainCtx(t.Context())
		c, h = tm.StartAt(cp, tm.Ticker().Now())
		<-doneSoon(c.Done(), cp)
		require.Equal(t, context.Canceled, c.Err())
		tm.FinishAt(h, tm.Ticker().Now(), nil)
		synctest.Wait()
	})
}

// doneSoon cancels cp once d has been requested, and returns d.
func doneSoon(d <-chan struct{}, cp *testkit.PlainCtx) <-chan struct{} {
	cp.Cancel()
	return d
}

// TestChildrenCostNoGoroutine derives many children from a timeout
// context (and from a timeout context whose parent is a *context.cancelCtx,
// and from a nested timeout) and checks that no goroutine appears, and that
// every child ends when the deadline fires.
func TestChildrenCostNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := newT(t, Config{Duration: 10 * time.Millisecond})
		outer := newT(t, Config{Duration: time.Hour})
		parent, cancel := context.WithCancel(t.Context())
		defer cancel()
		// Warm up: start the watchdogs so their goroutines are counted.
		outer.Do(parent, func(context.Context) error { return nil })
		inner.Do(parent, func(context.Context) error { return nil })
		synctest.Wait()
		base := bubbleGoroutines()

		err := outer.Do(parent, func(oc context.Context) error {
			return inner.Do(oc, func(c context.Context) error {
				const n = 50
				var children []context.Context
				var afterRan atomic.Int32
				for range n {
					cc, ccancel := context.WithCancel(c)
					defer ccancel()
					tc, tcancel := context.WithTimeout(c, time.Hour)
					defer tcancel()
					gc, gcancel := context.WithCancel(cc) // a grandchild
					defer gcancel()
					stop := context.AfterFunc(c, func() { afterRan.Add(1) })
					_ = stop
					children = append(children, cc, tc, gc)
				}
				// A stopped AfterFunc does not run.
				stop := context.AfterFunc(c, func() { afterRan.Add(1000) })
				require.True(t, stop())
				require.False(t, stop())
				require.Equal(t, base, bubbleGoroutines(), "children must not cost goroutines")
				<-c.Done()
				for _, ch := range children {
					<-ch.Done()
					require.Equal(t, context.DeadlineExceeded, ch.Err())
				}
				synctest.Wait() // context.AfterFunc runs f in a goroutine
				require.Equal(t, int32(n), afterRan.Load())
				return c.Err()
			})
		})
		require.ErrorIs(t, err, ErrTimeout)
		synctest.Wait()
		require.Equal(t, base, bubbleGoroutines())
	})
}

// TestAfterFuncMethod exercises the AfterFunc method directly.
func TestAfterFuncMethod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		c, h := tm.StartAt(t.Context(), tm.Ticker().Now())
		af := c.(interface{ AfterFunc(func()) func() bool })
		var ran atomic.Int32
		stop1 := af.AfterFunc(func() { ran.Add(1) })
		stop2 := af.AfterFunc(func() { ran.Add(10) })
		require.True(t, stop2())
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, int32(1), ran.Load(), "runs synchronously at the fire")
		require.False(t, stop1())
		// Registered after the end: runs at once, in its own goroutine.
		stop3 := af.AfterFunc(func() { ran.Add(100) })
		synctest.Wait()
		require.Equal(t, int32(101), ran.Load())
		require.False(t, stop3())
		require.ErrorIs(t, tm.FinishAt(h, tm.Ticker().Now(), nil), ErrTimeout)
	})
}

func TestListeners(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	var got []time.Duration
	tm, err := New(Config{Duration: 100, Mode: ModeSoft, Ticker: tk, OnTimeout: func(e time.Duration) { got = append(got, e) }})
	require.NoError(t, err)
	_, h := tm.StartAt(context.Background(), 10)
	require.ErrorIs(t, tm.FinishAt(h, 150, nil), ErrTimeout)
	require.Equal(t, []time.Duration{140}, got)
	tm2, err := New(Config{Duration: 100, Mode: ModeSoft, Ticker: tk, OnTimeout: func(time.Duration) { panic("x") }})
	require.NoError(t, err)
	_, h = tm2.StartAt(context.Background(), 10)
	require.ErrorIs(t, tm2.FinishAt(h, 150, nil), ErrTimeout)
	require.Equal(t, uint64(1), tm2.Stats().ListenerPanics)
}

// TestDefaultWatchdog uses the process-wide watchdog (real time, a 1 ms tick).
func TestDefaultWatchdog(t *testing.T) {
	// runtime.NumGoroutine counts every goroutine: do not let the default
	// watchdog idle out in the middle of another test's count.
	t.Cleanup(func() { require.True(t, watchdog.Default().StopIdle()) })
	tm, err := New(Config{Duration: time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, tm.Close())
	err = tm.Do(context.Background(), func(c context.Context) error { <-c.Done(); return c.Err() })
	require.ErrorIs(t, err, ErrTimeout)
	require.NoError(t, tm.Do(context.Background(), func(context.Context) error { return nil }))
}

// TestFallbackTimer: a closed watchdog refuses; calls still time out with a
// runtime timer each.
func TestFallbackTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		require.NoError(t, tm.Close())
		err := tm.Do(t.Context(), func(c context.Context) error { <-c.Done(); return c.Err() })
		require.ErrorIs(t, err, ErrTimeout)
		require.NoError(t, tm.Do(t.Context(), func(context.Context) error { return nil }))
		require.Equal(t, uint64(2), tm.Stats().Fallbacks)

		// DoAbandon on timers too, including a parent cancelled while the
		// callee watches its context.
		ta := newT(t, Config{Duration: 10 * time.Millisecond})
		require.NoError(t, ta.Close())
		hang := make(chan struct{})
		err = ta.DoAbandon(t.Context(), func(context.Context) error { <-hang; return nil }, nil)
		require.ErrorIs(t, err, ErrTimeout)
		parent, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Millisecond); cancel() }()
		err = ta.DoAbandon(parent, func(c context.Context) error { <-c.Done(); <-hang; return nil }, nil)
		require.Equal(t, context.Canceled, err)
		require.NoError(t, ta.DoAbandon(t.Context(), func(context.Context) error { return nil }, nil))
		close(hang)
		synctest.Wait()
		require.Equal(t, int64(0), ta.Stats().Abandoned)
	})
}

// TestCloseKeepsInFlightDeadlines: closing a Timeout's own watchdog does
// not strand the calls in flight: their contexts still end at the
// deadline, and a DoAbandon call still leaves at it.
func TestCloseKeepsInFlightDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := rampart.NewNanoTicker()
		tm, err := New(Config{Duration: time.Second, Tick: time.Millisecond, Ticker: tk})
		require.NoError(t, err)
		ctx, h := tm.StartAt(context.Background(), tk.Now())
		done := ctx.Done()
		aband := make(chan error, 1)
		release := make(chan struct{})
		go func() {
			aband <- tm.DoAbandon(context.Background(), func(context.Context) error { <-release; return nil }, nil)
		}()
		synctest.Wait()
		require.NoError(t, tm.Close())
		time.Sleep(2 * time.Second)
		select {
		case <-done:
		default:
			t.Fatal("the context in flight at Close never reached its deadline")
		}
		require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
		require.ErrorIs(t, tm.FinishAt(h, tk.Now(), nil), ErrTimeout, "Finish")
		require.ErrorIs(t, <-aband, ErrTimeout, "DoAbandon")
		close(release)
		synctest.Wait()
	})
}

// TestStress runs many concurrent calls, some honouring short deadlines,
// and checks every outcome and that no watch slot stays armed.
func TestStress(t *testing.T) {
	wd := NewWatchdog(100*time.Microsecond, nil)
	defer wd.Close()
	tm, err := New(Config{Duration: 200 * time.Microsecond, Watchdog: wd})
	require.NoError(t, err)
	boom := errors.New("boom")
	var wg sync.WaitGroup
	var timeouts, oks, booms atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				var kept context.Context
				err := tm.Do(context.Background(), func(c context.Context) error {
					kept = c
					switch (g + i) % 4 {
					case 0:
						<-c.Done()
						return c.Err()
					case 1:
						cc, cancel := context.WithCancel(c)
						defer cancel()
						_ = cc.Err()
						return boom
					case 2:
						_ = c.Done()
						return nil
					}
					return nil
				})
				switch {
				case errors.Is(err, ErrTimeout):
					timeouts.Add(1)
				case err == nil:
					oks.Add(1)
				case err == boom:
					booms.Add(1)
				default:
					t.Errorf("unexpected %v", err)
				}
				if kept.Err() == nil {
					t.Error("a finished context is live")
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, int64(8*300), timeouts.Load()+oks.Load()+booms.Load())
	require.GreaterOrEqual(t, timeouts.Load(), int64(8*300/4))
	require.Equal(t, 0, wd.Stats().Armed)
}

func FuzzConfig(f *testing.F) {
	f.Add(int64(time.Millisecond), uint8(0), int64(0), 0)
	f.Add(int64(-1), uint8(1), int64(5), 3)
	f.Add(int64(1), uint8(2), int64(-1), -1)
	f.Add(int64(0), uint8(9), int64(0), 0)
	f.Add(int64(math.MaxInt64), uint8(0), int64(0), 0)
	f.Fuzz(func(t *testing.T, d int64, mode uint8, tick int64, maxAb int) {
		tk := rampart.NewManualTicker(0)
		tm, err := New(Config{Duration: time.Duration(d), Mode: Mode(mode), Tick: time.Duration(tick), MaxAbandoned: maxAb, Ticker: tk})
		if err != nil {
			require.ErrorIs(t, err, rampart.ErrInvalidConfig)
			return
		}
		defer tm.Close()
		// A huge Duration saturates instead of wrapping into the past.
		_, h := tm.StartAt(context.Background(), 1000)
		require.GreaterOrEqual(t, h.Deadline(), int64(1000))
		tm.FinishAt(h, 1000, nil)
		c, h := tm.StartAt(context.Background(), 0)
		_ = c.Err()
		err = tm.FinishAt(h, d, nil)
		require.ErrorIs(t, err, ErrTimeout, "finishing at the deadline is a timeout")
		_, h = tm.StartAt(context.Background(), 0)
		require.NoError(t, tm.FinishAt(h, d-1, nil))
	})
}

func TestAllocsDeadline(t *testing.T) {
	tm := newT(t, Config{Duration: time.Hour})
	fn := func(context.Context) error { return nil }
	tm.Do(context.Background(), fn) // grow the watchdog table
	testkit.WantAllocs(t, "Do", 1, func() { tm.Do(context.Background(), fn) })
	testkit.WantAllocs(t, "StartAt+FinishAt", 1, func() {
		_, h := tm.StartAt(context.Background(), 1)
		tm.FinishAt(h, 2, nil)
	})
	cfn := func(context.Context) (int, error) { return 1, nil }
	testkit.WantAllocs(t, "Call", 1, func() { Call(context.Background(), tm, cfn) })
	// A callee that polls Err or reads Deadline/Value pays nothing more.
	testkit.WantAllocs(t, "Do + Err/Deadline/Value", 1, func() {
		tm.Do(context.Background(), func(c context.Context) error { c.Deadline(); c.Value(1); return c.Err() })
	})
	// Done costs the channel under a parent that is never cancelled ...
	testkit.WantAllocs(t, "Do + Done", 2, func() {
		tm.Do(context.Background(), func(c context.Context) error { _ = c.Done(); return nil })
	})
	// ... and under a cancellable parent (a server request's context) the
	// child context.WithCancel registered on it, its cancel func and its
	// channel, which is Done's.
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	testkit.WantAllocs(t, "Do + Done, cancellable parent", 4, func() {
		tm.Do(parent, func(c context.Context) error { _ = c.Done(); return c.Err() })
	})
	// The timeout path allocates nothing more.
	tk := rampart.NewManualTicker(0)
	wd := watchdog.New(watchdog.Config{Clock: tk, Manual: true})
	defer wd.Close()
	tm2, _ := New(Config{Duration: 10, Watchdog: wd})
	testkit.WantAllocs(t, "timeout", 1, func() {
		_, h := tm2.StartAt(context.Background(), 0)
		if tm2.FinishAt(h, 10, nil) == nil {
			t.Fatal("not a timeout")
		}
	})
}

func TestAllocsSoft(t *testing.T) {
	tm := newT(t, Config{Duration: time.Hour, Mode: ModeSoft})
	fn := func(context.Context) error { return nil }
	testkit.WantAllocs(t, "Do", 0, func() { tm.Do(context.Background(), fn) })
	testkit.WantAllocs(t, "StartAt+FinishAt", 0, func() {
		_, h := tm.StartAt(context.Background(), 1)
		tm.FinishAt(h, 2, nil)
	})
	cfn := func(context.Context) (int, error) { return 1, nil }
	testkit.WantAllocs(t, "Call", 0, func() { Call(context.Background(), tm, cfn) })
	testkit.WantAllocs(t, "timeout", 0, func() {
		_, h := tm.StartAt(context.Background(), 1)
		if tm.FinishAt(h, int64(time.Hour)+1, nil) == nil {
			t.Fatal("not a timeout")
		}
	})
}

// TestContextConcurrent hammers one context from many goroutines (Done,
// Err, AfterFunc and its stop, derived children) while the deadline fires,
// the parent is cancelled and FinishAt runs, and checks the end state.
func TestContextConcurrent(t *testing.T) {
	wd := NewWatchdog(20*time.Microsecond, nil)
	defer wd.Close()
	tm, err := New(Config{Duration: 50 * time.Microsecond, Watchdog: wd})
	require.NoError(t, err)
	for round := range 200 {
		parent, cancel := context.WithCancel(context.Background())
		c, h := tm.StartAt(parent, tm.Ticker().Now())
		var ran, stopped atomic.Int32
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch g % 3 {
				case 0:
					<-c.Done()
				case 1:
					stop := context.AfterFunc(c, func() { ran.Add(1) })
					if g%2 == 0 && stop() {
						stopped.Add(1)
					}
				case 2:
					cc, ccancel := context.WithCancel(c)
					defer ccancel()
					<-cc.Done()
				}
				_ = c.Err()
			}()
		}
		switch round % 3 {
		case 0:
			cancel()
		case 1:
			tm.FinishAt(h, tm.Ticker().Now(), nil)
		}
		wg.Wait()
		tm.FinishAt(h, tm.Ticker().Now(), nil)
		cancel()
		e := c.Err()
		require.Error(t, e)
		for range 3 {
			require.Equal(t, e, c.Err(), "the error never changes")
		}
		// context.AfterFunc runs f in a goroutine: wait for it.
		for ran.Load()+stopped.Load() != 2 {
			runtime.Gosched()
		}
	}
	require.Equal(t, 0, wd.Stats().Armed)
}

// fakeDB stands for the dependency a caller's closure captures.
type fakeDB struct{ calls atomic.Int64 }

func (db *fakeDB) exec(_ context.Context, q string) error {
	db.calls.Add(int64(len(q)))
	return nil
}

// TestAllocsCapturingClosure measures Do and Call with the closure callers
// write, one that captures variables (a dependency and a query), created
// at each call: Do and Call run fn on the caller's goroutine, so fn does not
// escape and the closure stays on the caller's stack (soft: nothing;
// deadline: the context). DoAbandon and CallAbandon hand fn to another
// goroutine: the closure escapes, in either mode. The figures are the
// package doc's.
func TestAllocsCapturingClosure(t *testing.T) {
	db, q := new(fakeDB), "SELECT 1"
	ctx := context.Background()
	for _, tc := range []struct {
		mode                                          Mode
		do, call, startFinish, doAbandon, callAbandon int
	}{
		{ModeSoft, 0, 0, 0, 4, 6},
		{ModeDeadline, 1, 1, 1, 2, 4},
	} {
		tm := newT(t, Config{Duration: time.Hour, Mode: tc.mode})
		testkit.WantAllocs(t, tc.mode.String()+" Do", tc.do, func() {
			_ = tm.Do(ctx, func(c context.Context) error { return db.exec(c, q) })
		})
		testkit.WantAllocs(t, tc.mode.String()+" Call", tc.call, func() {
			_, _ = Call(ctx, tm, func(c context.Context) (int, error) { return len(q), db.exec(c, q) })
		})
		testkit.WantAllocs(t, tc.mode.String()+" Start/Finish", tc.startFinish, func() {
			c, h := tm.StartAt(ctx, tm.Ticker().Now())
			_ = tm.FinishAt(h, tm.Ticker().Now(), db.exec(c, q))
		})
		testkit.WantAllocs(t, tc.mode.String()+" DoAbandon", tc.doAbandon, func() {
			_ = tm.DoAbandon(ctx, func(c context.Context) error { return db.exec(c, q) }, nil)
		})
		testkit.WantAllocs(t, tc.mode.String()+" CallAbandon", tc.callAbandon, func() {
			_, _ = CallAbandon(ctx, tm, func(c context.Context) (int, error) { return len(q), db.exec(c, q) }, nil)
		})
	}
}

// TestTimeoutBytes gates the heap bytes of one live Timeout, default
// Config, unnamed and named: the 96 B Timeout, its settings (80 B, size
// class 80: the timeout Error, MaxAbandoned, the listeners) and the
// Error's message (48). DoAbandon's machinery (the worker table, the pool
// of jobs, the abandon counters, a named Timeout's rejection error) is
// built by the first DoAbandon, so a Timeout that never abandons carries
// one nil pointer for it. (Was 336 B with that machinery in the Timeout,
// 592 B with a padded counter, a message built in three steps and a
// rejection error per instance; a named one 432 B.)
func TestTimeoutBytes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	for _, name := range []string{"", "db"} {
		got := testkit.Bytes(t, func() any {
			to, err := New(Config{Duration: 100 * time.Millisecond, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			return to
		})
		if want := int64(224); got != want {
			t.Errorf("a Timeout named %q: got %d B, want %d", name, got, want)
		}
	}
}

// TestParentCancelledBeforeDeadlineIsNotATimeout cancels the parent (with
// a cause) before the deadline; the callee sees its context's Done closed,
// cleans up past the deadline and returns its context's Err. The parent
// ended the call first: the callee's Err is the parent's (Canceled, as
// under context.WithDeadline), its Cause the parent's cause, and Do
// returns fn's error unchanged and counts no timeout.
func TestParentCancelledBeforeDeadlineIsNotATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 10 * time.Millisecond})
		parent, cancel := context.WithCancelCause(t.Context())
		boom := errors.New("boom")
		time.AfterFunc(time.Millisecond, func() { cancel(boom) })
		var cause error
		err := tm.Do(parent, func(c context.Context) error {
			<-c.Done()
			time.Sleep(20 * time.Millisecond) // cleanup, past the deadline
			cause = context.Cause(c)
			return c.Err()
		})
		require.Equal(t, context.Canceled, err)
		require.Equal(t, boom, cause)
		require.Zero(t, tm.Stats().Timeouts)
	})
}

// TestUpdateRefusals: Update refuses, with a *rampart.ConfigError naming
// the field, a change to each field fixed at construction and each value
// New refuses (with New's error), and then changes nothing.
func TestUpdateRefusals(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	wd := NewWatchdog(time.Millisecond, tk)
	defer wd.Close()
	own := Config{Duration: time.Second, Name: "db", Ticker: tk, Tick: 2 * time.Millisecond}
	given := Config{Duration: time.Second, Name: "db", Watchdog: wd}
	shared := Config{Duration: time.Second, Name: "db"}
	soft := Config{Duration: time.Second, Name: "db", Mode: ModeSoft, Ticker: tk, Tick: time.Millisecond}
	with := func(c Config, f func(*Config)) Config { f(&c); return c }
	for _, c := range []struct {
		field    string
		base, to Config
		fixed    bool
	}{
		{"Name", own, with(own, func(c *Config) { c.Name = "other" }), true},
		{"Mode", own, with(own, func(c *Config) { c.Mode = ModeSoft }), true},
		{"Ticker", own, with(own, func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }), true},
		{"Ticker", shared, with(shared, func(c *Config) { c.Ticker = tk }), true},
		{"Tick", own, with(own, func(c *Config) { c.Tick = 3 * time.Millisecond }), true},
		{"Tick", own, with(own, func(c *Config) { c.Tick = 0 }), true}, // 1 ms, not the 2 ms it sweeps at
		{"Tick", shared, with(shared, func(c *Config) { c.Tick = time.Millisecond }), true},
		{"Watchdog", own, with(own, func(c *Config) { c.Ticker, c.Tick, c.Watchdog = nil, 0, wd }), true},
		{"Watchdog", given, with(given, func(c *Config) { c.Watchdog, c.Ticker = nil, tk }), true}, // an own watchdog on the same clock
		{"Workers", own, with(own, func(c *Config) { c.Workers = 3 }), true},
		{"Duration", own, with(own, func(c *Config) { c.Duration = 0 }), false},
		{"MaxAbandoned", own, with(own, func(c *Config) { c.MaxAbandoned = -1 }), false},
		{"Workers", own, with(own, func(c *Config) { c.Workers = -1 }), false},
		{"Tick", given, with(given, func(c *Config) { c.Tick = 5 * time.Millisecond }), false},
		{"Ticker", given, with(given, func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }), false},
	} {
		tm, err := New(c.base)
		require.NoError(t, err)
		err = tm.Update(c.to)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, "%s", c.field)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		require.Equal(t, c.field, ce.Field, "%v", err)
		require.Equal(t, c.fixed, strings.Contains(ce.Reason, "fixed at construction"), "%v", err)
		if !c.fixed {
			_, nerr := New(c.to)
			require.EqualError(t, err, nerr.Error(), "Update validates as New does")
		}
		require.Equal(t, time.Second, tm.Duration(), "%s: a refused Update changes nothing", c.field)
		require.NoError(t, tm.Close())
	}
	// What New accepted again, with the updatable fields changed, is
	// accepted in every watchdog arrangement; soft mode ignores Tick.
	for _, base := range []Config{own, given, shared, soft} {
		tm, err := New(base)
		require.NoError(t, err)
		require.NoError(t, tm.Update(with(base, func(c *Config) { c.Duration, c.MaxAbandoned = time.Minute, 3 })))
		require.Equal(t, time.Minute, tm.Duration())
		require.NoError(t, tm.Close())
	}
	tm, err := New(soft)
	require.NoError(t, err)
	require.NoError(t, tm.Update(with(soft, func(c *Config) { c.Tick = 0 })))
}

// TestUpdateAppliesFromTheNextCall: a call in progress keeps the
// configuration it started under (its deadline and its timeout error), a
// call started after an Update gets the new Duration, error and
// listener, and Err and Duration report the new ones.
func TestUpdateAppliesFromTheNextCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var oldCalls, newCalls int
		tm := newT(t, Config{Duration: 10 * time.Millisecond, OnTimeout: func(time.Duration) { oldCalls++ }})
		oldErr := tm.Err()
		ctx, h := tm.Start(t.Context())
		require.NoError(t, tm.Update(Config{Duration: 50 * time.Millisecond, Ticker: tm.Ticker(), Tick: time.Millisecond,
			OnTimeout: func(time.Duration) { newCalls++ }}))
		require.Equal(t, 50*time.Millisecond, tm.Duration())
		require.Equal(t, "timeout: deadline exceeded (50ms)", tm.Err().Error())
		<-ctx.Done() // at the 10 ms it started with
		time.Sleep(time.Millisecond)
		err := tm.Finish(h, nil)
		require.Same(t, oldErr, err, "the call in progress times out with the error it started under")
		require.Equal(t, [2]int{1, 0}, [2]int{oldCalls, newCalls})

		start := time.Now()
		err = tm.Do(t.Context(), func(c context.Context) error {
			<-c.Done()
			return c.Err()
		})
		require.Equal(t, 50*time.Millisecond, time.Since(start).Round(10*time.Millisecond), "the new Duration")
		require.Same(t, tm.Err(), err)
		require.Equal(t, [2]int{1, 1}, [2]int{oldCalls, newCalls})
		require.EqualValues(t, 2, tm.Stats().Timeouts)

		// MaxAbandoned bounds the next DoAbandon calls.
		release := make(chan struct{})
		require.NoError(t, tm.Update(Config{Duration: time.Millisecond, Ticker: tm.Ticker(), Tick: time.Millisecond, MaxAbandoned: 1}))
		require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-release; return nil }, nil), ErrTimeout)
		require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { return nil }, nil), ErrTooManyAbandoned)
		require.NoError(t, tm.Update(Config{Duration: time.Millisecond, Ticker: tm.Ticker(), Tick: time.Millisecond, MaxAbandoned: 2}))
		require.ErrorIs(t, tm.DoAbandon(t.Context(), func(context.Context) error { <-release; return nil }, nil), ErrTimeout)
		close(release)
		synctest.Wait()
		s := tm.Stats()
		require.Equal(t, [3]uint64{0, 2, 1}, [3]uint64{uint64(s.Abandoned), s.AbandonedTotal, s.Rejected})
	})
}

// TestStressUpdatesRacingCalls: calls (Do, StartAt/FinishAt, DoAbandon)
// race Updates that switch the Duration between 2 and 5 ms: every call
// runs wholly under one configuration (a call that timed out returns the
// error of the Duration its context's deadline was set with), every
// DoAbandon's onDone runs once, and at the end nothing is abandoned and
// the timeouts counted are the timeouts returned.
func TestStressUpdatesRacingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newT(t, Config{Duration: 2 * time.Millisecond, MaxAbandoned: 100})
		cfgs := []Config{
			{Duration: 2 * time.Millisecond, Ticker: tm.Ticker(), Tick: time.Millisecond, MaxAbandoned: 100},
			{Duration: 5 * time.Millisecond, Ticker: tm.Ticker(), Tick: time.Millisecond, MaxAbandoned: 50},
		}
		var timeouts, mixed, dones, abandons, fives atomic.Int64
		check := func(err error, d time.Duration) {
			var te *Error
			if errors.As(err, &te) {
				timeouts.Add(1)
				if te.Duration() != d {
					mixed.Add(1)
				}
			}
			if d == 5*time.Millisecond {
				fives.Add(1)
			}
		}
		done, updaterExited := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(updaterExited)
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				require.NoError(t, tm.Update(cfgs[i%2]))
				time.Sleep(700 * time.Microsecond)
			}
		}()
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() {
				for i := range 150 {
					work := time.Duration((g*7+i)%8) * time.Millisecond
					var d time.Duration
					fn := func(c context.Context) error {
						dl, _ := c.Deadline()
						d = time.Until(dl).Round(time.Millisecond) // the Duration the call started with
						select {
						case <-time.After(work):
						case <-c.Done():
						}
						return nil
					}
					switch i % 3 {
					case 0:
						err := tm.Do(t.Context(), fn)
						check(err, d)
					case 1:
						c, h := tm.Start(t.Context())
						_ = fn(c)
						check(tm.Finish(h, nil), d)
					default:
						abandons.Add(1)
						err := tm.DoAbandon(t.Context(), func(context.Context) error {
							time.Sleep(work) // ignores its context: abandoned at the deadline
							return nil
						}, func() { dones.Add(1) })
						if errors.As(err, new(*Error)) {
							timeouts.Add(1)
						}
					}
				}
			})
		}
		wg.Wait()
		close(done)
		<-updaterExited
		synctest.Wait()
		require.Zero(t, mixed.Load(), "calls whose timeout error was another configuration's")
		require.NotZero(t, fives.Load(), "no call ran under the second configuration")
		require.Equal(t, abandons.Load(), dones.Load(), "every onDone ran once")
		s := tm.Stats()
		require.Zero(t, s.Abandoned)
		require.Equal(t, uint64(timeouts.Load()), s.Timeouts)
	})
}

// TestHandleIsFourWords: a Handle, returned by StartAt and copied by Do on
// every call, stays four words. With a fifth the compiler copies it with
// 16-byte loads that straddle the 8-byte stores that filled it, which
// stalls the CPU on every call (a soft-mode Do went from 14 to 38 ns when
// the Handle carried the configuration beside the context).
func TestHandleIsFourWords(t *testing.T) {
	if got, want := unsafe.Sizeof(Handle{}), 4*unsafe.Sizeof(uintptr(0)); got != want && unsafe.Sizeof(uintptr(0)) == 8 {
		t.Fatalf("a Handle is %d B, want %d", got, want)
	}
}

// TestUpdateWithoutNameKeepsTheName: an empty Name in Update keeps the
// name New was given (a registry's create-or-get sets it on the caller's
// behalf, and the caller's own Config, changed, must be accepted back):
// Config and the timeout error still carry it.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	tm, err := New(Config{Duration: time.Second, Name: "db", Mode: ModeSoft})
	require.NoError(t, err)
	defer tm.Close()
	require.NoError(t, tm.Update(Config{Duration: time.Minute, Mode: ModeSoft}))
	require.Equal(t, "db", tm.Config().Name)
	require.Equal(t, time.Minute, tm.Duration())
	var te *Error
	require.ErrorAs(t, tm.Err(), &te)
	require.Equal(t, "db", te.Name())
	require.Contains(t, tm.Err().Error(), `"db"`)
}

// TestUpdateOfConfigRoundTrips: Config returns the configuration in force
// with its defaults filled in, and Update(Config()) is accepted and changes
// nothing, in every watchdog arrangement (its own, one given, the shared
// one, soft mode) and with the listeners set.
func TestUpdateOfConfigRoundTrips(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	wd := NewWatchdog(2*time.Millisecond, tk)
	defer wd.Close()
	for _, c := range []Config{
		{Duration: time.Second},
		{Duration: time.Second, Name: "db", Ticker: tk, Tick: 3 * time.Millisecond, MaxAbandoned: 7, Workers: 2,
			OnTimeout: func(time.Duration) {}, OnAbandon: func(int64) {}, OnRejected: func(int64) {}},
		{Duration: time.Second, Ticker: tk},
		{Duration: time.Second, Watchdog: wd},
		{Duration: time.Second, Mode: ModeSoft, Ticker: tk, Tick: time.Millisecond},
	} {
		tm, err := New(c)
		require.NoError(t, err)
		before := tm.Config()
		require.NoError(t, tm.Update(before), "%+v", c)
		require.Equal(t, fmt.Sprint(before), fmt.Sprint(tm.Config()), "Update(Config()) changes nothing")
		require.Equal(t, c.Duration, tm.Duration())
		require.NoError(t, tm.Close())
	}
	tm, err := New(Config{Duration: time.Second})
	require.NoError(t, err)
	defer tm.Close()
	d := tm.Config()
	require.Equal(t, rampart.DefaultTicker(), d.Ticker)
	require.Equal(t, DefaultMaxAbandoned, d.MaxAbandoned)
	require.Equal(t, DefaultWorkers, d.Workers)
	require.Zero(t, d.Tick, "the shared watchdog")
}
