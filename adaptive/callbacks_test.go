package adaptive

// The calls into user code (callbacks: Ticker, Classify, Controller,
// OnLimitChange): one that panics or calls runtime.Goexit leaks no slot and
// leaves the limiter usable, and re-entrant user code does not deadlock.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

// Acquire (and so Do and Call) takes the slot and then, for a call picked as
// an RTT sample, reads the user Ticker to build the Permit: a Ticker that
// panics there gives the slot back (the limiter does not shrink by one
// call for ever), and the panic goes on to the caller.
func TestCallbacksTickerPanicInAcquireReleasesSlot(t *testing.T) {
	tk := &testkit.PanicTicker{}
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2, MaxSampleStride: 1, Ticker: tk})
	require.NoError(t, err)
	tk.Arm()
	p, _ := testkit.Run(func() { _ = l.Do(context.Background(), func(context.Context) error { return nil }) })
	require.Equal(t, testkit.PanicTickerValue, p, "Do")
	p, _ = testkit.Run(func() { _, _ = l.Acquire() })
	require.Equal(t, testkit.PanicTickerValue, p, "Begin")
	require.Equal(t, 0, l.InFlight(), "the slots taken before the panicking clock read are leaked")
}

// Release reads the user Ticker for a sampled Permit before ReleaseAt frees the
// slot, after Do has marked the call done (so that a panicking Controller
// does not release twice): a Ticker that panics in Release still frees the
// slot, and the panic goes on to the caller.
func TestCallbacksTickerPanicInReleaseReleasesSlot(t *testing.T) {
	tk := &testkit.PanicTicker{}
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2, MaxSampleStride: 1, Ticker: tk})
	require.NoError(t, err)
	p, _ := testkit.Run(func() {
		_ = l.Do(context.Background(), func(context.Context) error {
			tk.Arm()
			return nil
		})
	})
	tk.Disarm()
	require.Equal(t, testkit.PanicTickerValue, p)
	require.Equal(t, 0, l.InFlight(), "End leaked the slot")
}

// A Controller and an OnLimitChange listener that call back into the same limiter (AcquireAt,
// ReleaseAt, Stats) neither deadlock nor corrupt the window: the Controller
// runs under the window's CAS lock (a nested closeWindow returns at once)
// and the listener after it is released.
func TestCallbacksReentrantListenerAndController(t *testing.T) {
	var l *Limiter
	var nested atomic.Int64
	ctrl := cbCtrl(func(s Sample) float64 {
		if tok, err := l.AcquireAt(s.Now); err == nil {
			l.ReleaseAt(tok, s.Now+int64(time.Hour), rampart.Success) // a window is due: the nested close must return
			nested.Add(1)
		}
		return s.Limit + 1
	})
	var err error
	l, err = New(Config{Algorithm: cbAlg{ctrl}, InitialLimit: 4, MinLimit: 1, MaxLimit: 100, MinWindowSamples: 1, Window: time.Millisecond,
		OnLimitChange: func(int, int) {
			tok, ok := admitted(l.AcquireAt(0))
			if ok {
				l.ReleaseAt(tok, 0, rampart.Ignored)
			}
			_ = l.Stats()
		}, Ticker: &testkit.PanicTicker{}})
	require.NoError(t, err)
	for i := range 5 {
		tok, ok := admitted(l.AcquireAt(int64(i) * int64(time.Second)))
		require.True(t, ok)
		l.ReleaseAt(tok, int64(i)*int64(time.Second)+1, rampart.Success)
	}
	require.Equal(t, 0, l.InFlight())
	require.Positive(t, nested.Load())
	require.Greater(t, l.Limit(), 4)
}

type cbCtrl func(Sample) float64

func (f cbCtrl) Update(s Sample) float64 { return f(s) }

type cbAlg struct{ c Controller }

func (a cbAlg) Start(initial, lo, hi float64) Controller { return a.c }

// A Classify that panics or calls runtime.Goexit, which Do and Call run
// after the call, releases the slot all the same (the limiter does not
// shrink by one call per occurrence), and the panic or Goexit goes on to
// the caller.
func TestCallbacksClassifyPanicOrGoexitReleasesSlot(t *testing.T) {
	errBoom := errors.New("boom")
	for _, kind := range []string{"panic", "goexit"} {
		t.Run(kind, func(t *testing.T) {
			l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
				Ticker: rampart.NewManualTicker(0),
				Classify: func(ctx context.Context, err error) rampart.Result {
					if err != nil {
						if kind == "panic" {
							panic("classify")
						}
						testkit.Goexit()
					}
					return rampart.Success
				}})
			require.NoError(t, err)
			ended := func(panicked any, goexited bool) {
				t.Helper()
				if kind == "panic" {
					require.Equal(t, "classify", panicked)
				} else {
					require.True(t, goexited)
				}
			}
			ended(testkit.Run(func() { _ = l.Do(context.Background(), func(context.Context) error { return errBoom }) }))
			require.Equal(t, 0, l.InFlight(), "Do leaked the slot")
			ended(testkit.Run(func() {
				_, _ = Call(context.Background(), l, func(context.Context) (int, error) { return 0, errBoom })
			}))
			require.Equal(t, 0, l.InFlight(), "Call leaked the slot")
		})
	}
}

// A Controller that calls runtime.Goexit (t.FailNow in a test Controller,
// say) leaves the window lock released: later windows close and the limit
// adapts again (a panicking Controller leaves the limiter usable, and a
// Goexit is handled the same way).
func TestCallbacksControllerGoexitKeepsWindowsClosing(t *testing.T) {
	var exit atomic.Bool
	exit.Store(true)
	updates := 0
	l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
		updates++
		if exit.Load() {
			testkit.Goexit()
		}
		return 7
	}), Window: 10, MinWindowSamples: 1, Ticker: rampart.NewManualTicker(0)})
	require.NoError(t, err)
	tok, ok := admitted(l.AcquireAt(0))
	require.True(t, ok)
	_, goexited := testkit.Run(func() { l.ReleaseAt(tok, 20, rampart.Success) })
	require.True(t, goexited)
	require.Equal(t, 1, updates)
	require.Equal(t, 0, l.InFlight())
	exit.Store(false)
	for i := range 5 {
		now := int64(100 * (i + 1))
		tok, ok := admitted(l.AcquireAt(now))
		require.True(t, ok)
		l.ReleaseAt(tok, now+20, rampart.Success)
	}
	// Window is 10 ns: each of the five releases closes one window.
	require.Equal(t, 6, updates, "no window closed after the Goexit")
	require.Equal(t, 7, l.Limit())
}

// A waiter that gives up reads the limiter's Ticker while it holds the
// queue's mutex: a Ticker that panics there leaves the mutex unlocked (no
// later waiter, and no ReleaseAt made while someone waits, blocks), the
// abandoned waiter out of the queue, and the freed slot not handed to it.
func TestCallbacksQueueTickerPanicUnlocksQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := &testkit.PanicTicker{}
		l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 1, MinLimit: 1, MaxLimit: 1,
			Queue: QueueConfig{MaxLength: 2}, Ticker: tk})
		require.NoError(t, err)
		hold, ok := admitted(l.AcquireAt(0))
		require.True(t, ok)
		ctx, cancel := context.WithCancel(context.Background())
		panicked := make(chan any, 1)
		go func() {
			p, _ := testkit.Run(func() { _, _ = l.AcquireWaitAt(ctx, 0) })
			panicked <- p
		}()
		synctest.Wait()
		require.Equal(t, 1, l.Stats().Queued)
		tk.Arm()
		cancel()
		require.Equal(t, testkit.PanicTickerValue, <-panicked)
		tk.Disarm()
		require.True(t, l.queue.mu.TryLock(), "the queue's mutex was left locked by the panic")
		l.queue.mu.Unlock()
		require.Equal(t, 0, l.Stats().Queued, "the abandoned waiter is still queued")
		l.ReleaseAt(hold, 1, rampart.Success)
		require.Equal(t, 0, l.InFlight(), "the freed slot went to the abandoned waiter and leaked")
	})
}

// ReleaseAt runs the queue handoff after closing the window: when a user
// Controller panics, the freed slot still goes to the waiter, which is not
// left to wait for its own timer (Interval) and be shed as a rejection
// while a slot is free (a panicking Controller leaves the limiter usable).
func TestCallbacksControllerPanicStillHandsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var boom atomic.Bool
		boom.Store(true)
		l, err := New(Config{Algorithm: algFunc(func(s Sample) float64 {
			if boom.Load() {
				panic("controller")
			}
			return s.Limit
		}), InitialLimit: 1, MinLimit: 1, MaxLimit: 1, Window: time.Millisecond, MinWindowSamples: 1,
			Queue: QueueConfig{MaxLength: 1}, Ticker: rampart.NewNanoTicker()})
		require.NoError(t, err)
		hold, ok := admitted(l.AcquireAt(l.Ticker().Now()))
		require.True(t, ok)
		type res struct {
			tok Permit
			err error
		}
		got := make(chan res, 1)
		go func() {
			tok, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
			got <- res{tok, err}
		}()
		synctest.Wait()
		require.Equal(t, 1, l.Stats().Queued)
		time.Sleep(2 * time.Millisecond) // the window is due
		require.Panics(t, func() { l.ReleaseAt(hold, l.Ticker().Now(), rampart.Success) })
		boom.Store(false)
		r := <-got
		require.NoError(t, r.err, "the waiter was shed although the slot was free")
		l.ReleaseAt(r.tok, l.Ticker().Now(), rampart.Success)
		require.Equal(t, 0, l.InFlight())
	})
}
