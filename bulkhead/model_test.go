package bulkhead

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
)

// model is the sequential specification of a bulkhead: a count and a limit.
type model struct {
	max, inFlight, peak int64
	rejected            uint64
}

// checkModel runs a sequence of operations, each encoded in one byte, on a
// real bulkhead and on the model, and compares them after every step.
//
//	op&7: 0,1 Acquire   2 AcquireWait (fail-fast config)   3,4 Release
//	      5 SetMax(op>>3 % 6; 0 is invalid)   6 Do   7 Call
func checkModel(t *testing.T, ops []byte) {
	b := mustNew(t, Config{Max: 2})
	m := model{max: 2}
	ctx := context.Background()
	admit := func() bool {
		if m.inFlight < m.max {
			m.inFlight++
			m.peak = max(m.peak, m.inFlight)
			return true
		}
		m.rejected++
		return false
	}
	for i, op := range ops {
		switch op & 7 {
		case 0, 1:
			require.Equal(t, admit(), b.Acquire() == nil, "step %d Acquire", i)
		case 2:
			want := admit()
			err := b.AcquireWait(ctx)
			require.Equal(t, want, err == nil, "step %d AcquireWait: %v", i, err)
		case 3, 4:
			if m.inFlight == 0 {
				require.Panics(t, b.Release, "step %d unmatched Release", i)
			} else {
				m.inFlight--
				b.Release()
			}
		case 5:
			n := int64(op>>3) % 6
			err := b.SetMax(int(n))
			if n < 1 {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				m.max = n
			}
		case 6:
			want := admit()
			ran := false
			err := b.Do(ctx, func(context.Context) error {
				ran = true
				require.Equal(t, m.inFlight, b.Stats().InFlight)
				return nil
			})
			if want {
				m.inFlight--
			}
			require.Equal(t, want, ran && err == nil, "step %d Do: %v", i, err)
		case 7:
			want := admit()
			v, err := Call(ctx, b, func(context.Context) (int, error) { return i, nil })
			if want {
				m.inFlight--
				require.Equal(t, i, v)
			}
			require.Equal(t, want, err == nil, "step %d Call: %v", i, err)
		}
		s := b.Stats()
		require.Equal(t, m.inFlight, s.InFlight, "step %d", i)
		require.Equal(t, m.max, s.Max, "step %d", i)
		require.Equal(t, m.rejected, s.Rejected, "step %d", i)
		require.Equal(t, m.peak, s.PeakInFlight, "step %d", i)
	}
}

// TestModel runs random operation sequences against the sequential model.
func TestModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		ops := make([]byte, 1+r.IntN(200))
		for i := range ops {
			ops[i] = byte(r.Uint32())
		}
		checkModel(t, ops)
	}
}

// FuzzModel explores operation sequences against the sequential model.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 3, 3})
	f.Add([]byte{0, 1, 5 | 1<<3, 0, 3, 0, 6, 7, 3, 3, 5 | 5<<3, 2, 2, 2})
	f.Add([]byte{5, 5 | 3<<3, 0, 0, 0, 0, 5 | 1<<3, 3, 0, 3, 3, 0})
	f.Fuzz(checkModel)
}

// FuzzNew: New accepts exactly Max ≥ 1 and MaxWait ≥ 0, and an accepted
// bulkhead admits exactly Max fail-fast calls (checked up to 64).
func FuzzNew(f *testing.F) {
	f.Add(1, int64(0))
	f.Add(0, int64(0))
	f.Add(3, int64(-1))
	f.Add(64, int64(1e9))
	f.Fuzz(func(t *testing.T, max int, wait int64) {
		b, err := New(Config{Max: max, MaxWait: time.Duration(wait)})
		if max < 1 || wait < 0 {
			require.ErrorIs(t, err, rampart.ErrInvalidConfig)
			return
		}
		require.NoError(t, err)
		n := min(max, 64)
		for range n {
			require.NoError(t, b.Acquire())
		}
		require.Equal(t, max > 64, b.Acquire() == nil)
		s := b.Stats()
		for range s.InFlight {
			b.Release()
		}
		require.Zero(t, b.Stats().InFlight)
	})
}
