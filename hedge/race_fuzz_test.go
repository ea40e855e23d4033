package hedge

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Outcome kinds of one attempt in FuzzRace.
const (
	okSuccess = iota
	okFatal
	okSoft
	okPanic
)

var errFuzzFatal, errFuzzSoft = errors.New("fatal"), errors.New("soft")

// FuzzRace drives one hedged call whose up to four attempts each have a
// latency and an outcome taken from the input, and checks the result
// against a model of the race: attempt i starts at i×delay unless the race
// was decided before; the first success, fatal error or panic decides; a
// soft error decides only when no other attempt runs.
func FuzzRace(f *testing.F) {
	f.Add([]byte{5, okSuccess, 1, okSuccess, 1, okSuccess, 1, okSuccess})
	f.Add([]byte{9, okSoft, 9, okSoft, 9, okSoft, 9, okSoft})
	f.Add([]byte{1, okSoft, 1, okSuccess, 1, okSuccess, 1, okSuccess})
	f.Add([]byte{9, okSuccess, 7, okFatal, 1, okPanic, 1, okSuccess})
	f.Add([]byte{3, okPanic, 0, okSuccess, 0, okSuccess, 0, okSuccess})
	f.Add([]byte{7, okSoft, 9, okPanic, 0, okSoft, 4, okSuccess})
	f.Fuzz(func(t *testing.T, in []byte) {
		const n, delay = 4, 2 * time.Millisecond
		var lat [n]time.Duration
		var kind [n]int
		for i := range n {
			var l, k byte
			if 2*i+1 < len(in) {
				l, k = in[2*i], in[2*i+1]
			}
			// Distinct finishing times, never on a start time.
			lat[i] = time.Duration(l%10)*time.Millisecond + 300*time.Microsecond + time.Duration(i)*10*time.Microsecond
			kind[i] = int(k % 4)
		}
		// The model.
		start := [n]time.Duration{0, delay, 2 * delay, 3 * delay}
		winner, decidedAt := -1, time.Duration(0)
		done := [n]bool{}
		running := 0
		started := 0
		for winner < 0 {
			// Next event: a start (started < n) or the earliest finish of a running attempt.
			next, fin := time.Duration(1<<62), -1
			for i := 0; i < started; i++ {
				if !done[i] && start[i]+lat[i] < next {
					next, fin = start[i]+lat[i], i
				}
			}
			if started < n && start[started] < next {
				started++
				running++
				continue
			}
			if fin < 0 {
				t.Fatal("model: no event")
			}
			done[fin] = true
			running--
			if kind[fin] != okSoft || running == 0 {
				winner, decidedAt = fin, next
			}
		}
		wantPanic := kind[winner] == okPanic

		synctest.Test(t, func(t *testing.T) {
			h := newBubbleHedger(t, Config{Delay: delay, MaxHedges: n - 1, Fatal: func(err error) bool { return err == errFuzzFatal }})
			var seq atomic.Int32
			var got int
			var gotErr error
			var gotPanic any
			t0 := time.Now()
			func() {
				defer func() { gotPanic = recover() }()
				got, gotErr = Call(context.Background(), h, func(ctx context.Context) (int, error) {
					i := int(seq.Add(1)) - 1
					if err := sleepCtx(ctx, lat[i]); err != nil {
						return -1, err
					}
					switch kind[i] {
					case okFatal:
						return i, errFuzzFatal
					case okSoft:
						return i, fmt.Errorf("attempt %d: %w", i, errFuzzSoft)
					case okPanic:
						panic(i)
					}
					return i, nil
				})
			}()
			el := time.Since(t0)
			synctest.Wait()
			if wantPanic {
				if gotPanic != winner {
					t.Fatalf("model: attempt %d panics; got panic %v, result %d, %v", winner, gotPanic, got, gotErr)
				}
			} else {
				if gotPanic != nil {
					t.Fatalf("unexpected panic %v (model winner %d)", gotPanic, winner)
				}
				if got != winner {
					t.Fatalf("got attempt %d (%v), model winner %d", got, gotErr, winner)
				}
				switch kind[winner] {
				case okSuccess:
					if gotErr != nil {
						t.Fatalf("err %v", gotErr)
					}
				case okFatal:
					if gotErr != errFuzzFatal {
						t.Fatalf("err %v", gotErr)
					}
				case okSoft:
					if !errors.Is(gotErr, errFuzzSoft) {
						t.Fatalf("err %v", gotErr)
					}
				}
			}
			if !wantPanic || winner != 0 {
				if el != decidedAt {
					t.Fatalf("returned at %v, model %v (winner %d)", el, decidedAt, winner)
				}
			}
			if st := h.Stats(); int(st.Hedges) != int(seq.Load())-1 {
				t.Fatalf("stats %+v, attempts %d", st, seq.Load())
			}
		})
	})
}
