package adaptive

// Audit of the calls into user code (callbacks): a user Ticker that panics
// must not leak a slot, and re-entrant user code must not deadlock. Every
// name starts with cb to stay clear of the other test files (r3Ticker, the
// panicking Ticker, is in review3_test.go).

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cbRecover runs f on its own goroutine and swallows its panic.
func cbRecover(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }()
		f()
	}()
	<-done
}

// TestCallbacksTickerPanicInBeginLeaksSlot: Begin (and so Do and Call)
// takes the slot (l.slots.Add(admitOne)) and then, for a call picked as an
// RTT sample, reads the user Ticker to build the Token. A Ticker that
// panics there leaves the slot taken with no Token to release it: the
// limiter shrinks by one call for ever.
func TestCallbacksTickerPanicInBeginLeaksSlot(t *testing.T) {
	tk := &r3Ticker{}
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2, MaxSampleStride: 1, Ticker: tk})
	require.NoError(t, err)
	tk.armed.Store(true)
	cbRecover(func() { _ = l.Do(context.Background(), func(context.Context) error { return nil }) })
	cbRecover(func() { _, _ = l.Begin() })
	require.Equal(t, 0, l.InFlight(), "the slots taken before the panicking clock read are leaked")
}

// TestCallbacksTickerPanicInEndLeaksSlot: End reads the user Ticker for a
// sampled Token before Release frees the slot; Do has already set done =
// true (so that a panicking Controller does not release twice), so a Ticker
// that panics in End leaks the slot.
func TestCallbacksTickerPanicInEndLeaksSlot(t *testing.T) {
	tk := &r3Ticker{}
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2, MaxSampleStride: 1, Ticker: tk})
	require.NoError(t, err)
	cbRecover(func() {
		_ = l.Do(context.Background(), func(context.Context) error {
			tk.armed.Store(true)
			return nil
		})
	})
	tk.armed.Store(false)
	require.Equal(t, 0, l.InFlight(), "End leaked the slot")
}

// TestCallbacksReentrantListenerAndController: a Controller and an
// OnLimitChange listener that call back into the same limiter (Acquire,
// Release, Stats) neither deadlock nor corrupt the window: the Controller
// runs under the window's CAS lock (a nested closeWindow returns at once)
// and the listener after it is released.
func TestCallbacksReentrantListenerAndController(t *testing.T) {
	var l *Limiter
	var nested atomic.Int64
	ctrl := cbCtrl(func(s Sample) float64 {
		if tok, ok := l.Acquire(s.Now); ok {
			l.Release(tok, s.Now+int64(time.Hour), Success) // a window is due: the nested close must return
			nested.Add(1)
		}
		return s.Limit + 1
	})
	var err error
	l, err = New(Config{Algorithm: cbAlg{ctrl}, InitialLimit: 4, MinLimit: 1, MaxLimit: 100, MinWindowSamples: 1, Window: time.Millisecond,
		OnLimitChange: func(int, int) {
			tok, ok := l.Acquire(0)
			if ok {
				l.Release(tok, 0, Ignored)
			}
			_ = l.Stats()
		}, Ticker: &r3Ticker{}})
	require.NoError(t, err)
	for i := range 5 {
		tok, ok := l.Acquire(int64(i) * int64(time.Second))
		require.True(t, ok)
		l.Release(tok, int64(i)*int64(time.Second)+1, Success)
	}
	require.Equal(t, 0, l.InFlight())
	require.Positive(t, nested.Load())
	require.Greater(t, l.Limit(), 4)
}

type cbCtrl func(Sample) float64

func (f cbCtrl) Update(s Sample) float64 { return f(s) }

type cbAlg struct{ c Controller }

func (a cbAlg) Start(initial, lo, hi float64) Controller { return a.c }
