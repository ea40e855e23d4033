package adaptive

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

func queued(t *testing.T, q QueueConfig) *Limiter {
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 1, MinLimit: 1, MaxLimit: 1, Queue: q, Ticker: rampart.NewNanoTicker()})
	require.NoError(t, err)
	return l
}

type waitResult struct {
	id  int
	tok Permit
	err error
}

func TestQueueHandoffFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := queued(t, QueueConfig{MaxLength: 4})
		hold, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
		require.NoError(t, err)
		res := make(chan waitResult, 4)
		for i := range 2 {
			go func() {
				tok, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
				res <- waitResult{i, tok, err}
			}()
			synctest.Wait()
		}
		require.Equal(t, 2, l.Stats().Queued)
		time.Sleep(time.Millisecond)
		l.ReleaseAt(hold, l.Ticker().Now(), rampart.Success)
		r := <-res
		require.NoError(t, r.err)
		require.Equal(t, 0, r.id) // not overloaded yet: FIFO
		l.ReleaseAt(r.tok, l.Ticker().Now(), rampart.Success)
		r = <-res
		require.Equal(t, 1, r.id)
		l.ReleaseAt(r.tok, l.Ticker().Now(), rampart.Success)
		require.Equal(t, 0, l.InFlight())
	})
}

// TestQueueCoDelLIFO: once the queue has been non-empty for longer than the
// interval, waiters older than the target are shed and the newest is served.
func TestQueueCoDelLIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := queued(t, QueueConfig{MaxLength: 10, Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond})
		hold, _ := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
		res := make(chan waitResult, 10)
		start := func(id int) {
			go func() {
				tok, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
				res <- waitResult{id, tok, err}
			}()
			synctest.Wait()
		}
		start(0)
		time.Sleep(60 * time.Millisecond)
		start(1)
		time.Sleep(60 * time.Millisecond) // queue non-empty for 120 ms: overloaded
		start(2)
		time.Sleep(time.Millisecond)
		start(3)
		l.ReleaseAt(hold, l.Ticker().Now(), rampart.Success)
		// 0 (120 ms) and 1 (60 ms) are older than the 5 ms target: shed.
		// Of 2 and 3, the newest (3) is served.
		got := map[int]waitResult{}
		for range 3 {
			r := <-res
			got[r.id] = r
		}
		require.ErrorIs(t, got[0].err, ErrLimited)
		require.ErrorIs(t, got[1].err, ErrLimited)
		require.NoError(t, got[3].err)
		st := l.Stats()
		require.Equal(t, uint64(2), st.Shed)
		// Waiter 2 times out on its own after the interval.
		r := <-res
		require.Equal(t, 2, r.id)
		require.ErrorIs(t, r.err, rampart.ErrRejected)
		l.ReleaseAt(got[3].tok, l.Ticker().Now(), rampart.Success)
		require.Equal(t, 0, l.InFlight())
		require.Equal(t, 0, l.Stats().Queued)
	})
}

func TestQueueFullCancelAndDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := queued(t, QueueConfig{MaxLength: 1, FIFO: true})
		hold, _ := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan error, 1)
		go func() { res <- l.Do(ctx, func(context.Context) error { return nil }) }()
		synctest.Wait()
		// Queue full: rejected at once.
		_, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
		require.ErrorIs(t, err, ErrLimited)
		cancel()
		require.True(t, errors.Is(<-res, context.Canceled))
		_, err = l.AcquireWaitAt(ctx, l.Ticker().Now())
		require.ErrorIs(t, err, context.Canceled)
		// Do waits for the slot.
		go func() { res <- l.Do(context.Background(), func(context.Context) error { return nil }) }()
		synctest.Wait()
		l.ReleaseAt(hold, l.Ticker().Now(), rampart.Success)
		require.NoError(t, <-res)
		require.Equal(t, 0, l.InFlight())
	})
	// Without a queue AcquireWaitAt is a rejecting AcquireAt.
	l, _ := fixed(t, 1, nil)
	tok, _ := l.AcquireWaitAt(context.Background(), 0)
	_, err := l.AcquireWaitAt(context.Background(), 0)
	require.ErrorIs(t, err, ErrLimited)
	l.ReleaseAt(tok, 1, rampart.Success)
}

// TestQueueStress: many goroutines through Do with a small limit and a
// queue; every slot and every waiter comes back.
func TestQueueStress(t *testing.T) {
	l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
		Queue: QueueConfig{MaxLength: 4}})
	require.NoError(t, err)
	var wg sync.WaitGroup
	var over atomic.Int64
	var active atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				_ = l.Do(context.Background(), func(context.Context) error {
					if active.Add(1) > 2 {
						over.Add(1)
					}
					runtime.Gosched()
					active.Add(-1)
					return nil
				})
			}
		}()
	}
	wg.Wait()
	require.Zero(t, over.Load())
	require.Equal(t, 0, l.InFlight())
	require.Equal(t, 0, l.Stats().Queued)
}

// TestQueueRaisedLimitServesAllWaiters: when a release frees one slot and
// the window it closes raises the limit, every waiter that now fits is
// admitted by that release (the handoff runs after the window closed), not
// left next to free slots until a later release or its own timer sheds it.
func TestQueueRaisedLimitServesAllWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := rampart.NewManualTicker(1)
		l, err := New(Config{Algorithm: algFunc(func(Sample) float64 { return 3 }), InitialLimit: 1, MaxLimit: 10,
			MinWindowSamples: 1, Window: time.Second, Queue: QueueConfig{MaxLength: 4, Interval: time.Minute}, Ticker: clock})
		require.NoError(t, err)
		hold, ok := admitted(l.AcquireAt(clock.Now()))
		require.True(t, ok)
		res := make(chan waitResult, 2)
		for i := range 2 {
			go func() {
				tok, err := l.AcquireWaitAt(context.Background(), clock.Now())
				res <- waitResult{i, tok, err}
			}()
		}
		synctest.Wait()
		require.Equal(t, 2, l.Stats().Queued)
		clock.Advance(2 * time.Second)
		l.ReleaseAt(hold, clock.Now(), rampart.Success) // closes the window: limit 1 -> 3
		synctest.Wait()
		require.Equal(t, 3, l.Limit())
		var toks []Permit
		for range 2 {
			select {
			case r := <-res:
				require.NoError(t, r.err)
				toks = append(toks, r.tok)
			default:
				t.Fatalf("a waiter still waits with %d of %d slots in flight", l.InFlight(), l.Limit())
			}
		}
		for _, tok := range toks {
			l.ReleaseAt(tok, clock.Now(), rampart.Ignored)
		}
		require.Zero(t, l.InFlight())
	})
}

// A limiter with partitions and a queue: the queue's handoff ignores
// partitions (its tokens carry none), and a partition's in-flight count
// returns to zero once its calls are released.
func TestQueueWithPartitions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(Config{Algorithm: AIMD{}, InitialLimit: 2, MinLimit: 2, MaxLimit: 2,
			Partitions: []Partition{{Share: 0.5}, {Share: 0.5}},
			Queue:      QueueConfig{MaxLength: 4}, Ticker: rampart.NewNanoTicker()})
		require.NoError(t, err)
		a, ok := admitted(l.AcquirePartitionAt(0, 0))
		require.True(t, ok)
		b, ok := admitted(l.AcquirePartitionAt(0, 1))
		require.True(t, ok)
		_, ok = admitted(l.AcquirePartitionAt(0, 1)) // beyond its share, nothing to borrow
		require.False(t, ok)
		got := make(chan Permit, 1)
		go func() {
			tok, err := l.AcquireWaitAt(context.Background(), l.Ticker().Now())
			if err != nil {
				t.Error(err)
			}
			got <- tok
		}()
		synctest.Wait()
		l.ReleaseAt(a, l.Ticker().Now(), rampart.Success)
		w := <-got
		require.Equal(t, 0, l.PartitionInFlight(0))
		require.Equal(t, 1, l.PartitionInFlight(1))
		l.Release(w, rampart.Success)
		l.Release(b, rampart.Failure)
		require.Equal(t, 0, l.InFlight())
		require.Equal(t, 0, l.PartitionInFlight(1))
		require.Equal(t, uint64(1), l.Stats().Rejected)
	})
}
