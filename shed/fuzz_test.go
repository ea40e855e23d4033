package shed

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// FuzzConfig: New accepts a Config or returns a *rampart.ConfigError, never
// panics, and a Shedder it accepted admits, samples and releases without
// panicking.
func FuzzConfig(f *testing.F) {
	f.Add(int64(0), int64(0), int64(0), 0.0, int64(0), 0.0, 0.0, 0, int64(0), uint8(0), 0, 0.0)
	f.Add(int64(time.Millisecond), int64(time.Second), int64(-1), 0.5, int64(time.Microsecond), 1.0, 2.0, 3, int64(time.Millisecond), uint8(31), 64, 0.01)
	f.Add(int64(time.Second), int64(time.Millisecond), int64(time.Hour), 1.0, int64(-5), math.NaN(), math.Inf(1), -1, int64(-1), uint8(255), 65, 1.0)
	f.Fuzz(func(t *testing.T, interval, window, coolOff int64, hyst float64, sched int64, cpu, run float64, inflight int, latency int64, ignore uint8, prios int, reserve float64) {
		tk := rampart.NewManualTicker(0)
		src := newFakeSource()
		s, err := New(Config{
			SampleInterval: time.Duration(interval), Window: time.Duration(window), CoolOff: time.Duration(coolOff),
			Hysteresis: hyst, SchedLatencyThreshold: time.Duration(sched), CPUThreshold: cpu, RunnableThreshold: run,
			InFlightThreshold: inflight, LatencyThreshold: time.Duration(latency), Ignore: Signal(ignore),
			Priorities: prios, PriorityReserve: reserve, Ticker: tk, Source: src,
		})
		if err != nil {
			var ce *rampart.ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, rampart.ErrInvalidConfig) {
				t.Fatalf("New: %v is not a *rampart.ConfigError", err)
			}
			return
		}
		src.set(time.Hour, 1, 1e9)
		for i := range 50 {
			tk.Advance(time.Duration(interval) / 3)
			if i == 25 {
				src.set(-1, -1, -1)
			}
			p, err := s.AcquirePriorityAt(tk.Now(), i%max(prios, 1))
			if err == nil {
				s.ReleaseAt(p, tk.Now()+int64(time.Millisecond), rampart.Success)
			}
		}
		if st := s.Stats(); st.InFlight != 0 || st.Admitted+st.Rejected != 50 {
			t.Fatalf("after 50 calls: %+v", st)
		}
	})
}

// FuzzStateMachine drives a shedder with a fake source through a sequence
// of operations read from the input (admit at a priority, release with an
// outcome, with the primitives or the shorthands, move the clock, change the
// signals) and checks after each one:
// the calls in flight are those held; every attempt is admitted or
// rejected; nothing is rejected while the shedder is not engaged, and an
// admission while engaged respects its priority's share of the cap; the
// listener alternates on and off, matching Overloaded.
func FuzzStateMachine(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{3, 200, 0, 0, 0, 0, 2, 250, 0, 0, 1, 1, 1, 2, 100, 3, 0})
	f.Add([]byte{3, 255, 2, 255, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 200, 3, 1, 2, 255, 2, 255})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tk := rampart.NewManualTicker(0)
		src := newFakeSource()
		var ons []bool
		s, err := New(Config{Ticker: tk, Source: src, SampleInterval: 10 * time.Millisecond, Window: 50 * time.Millisecond,
			CoolOff: 30 * time.Millisecond, Priorities: 3, OnOverload: func(on bool) { ons = append(ons, on) }})
		if err != nil {
			t.Fatal(err)
		}
		var held []Permit
		attempts := uint64(0)
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, ops[i+1]
			switch op {
			case 0: // admit at priority arg%3, with the shorthand when arg's high bit is set
				attempts++
				before := s.InFlight()
				c := s.capw.Load()
				var p Permit
				var err error
				if arg&0x80 != 0 {
					p, err = s.AcquirePriority(int(arg % 3))
				} else {
					p, err = s.AcquirePriorityAt(tk.Now(), int(arg%3))
				}
				if err != nil {
					if !errors.Is(err, ErrOverloaded) {
						t.Fatalf("rejection %v", err)
					}
					if !s.Overloaded() {
						t.Fatal("rejected while not engaged")
					}
					break
				}
				if c != 0 && c == s.capw.Load() && int64(before+1) > s.limitOf(c, int(arg%3)) {
					t.Fatalf("admitted the %dth call at priority %d over its limit %d", before+1, arg%3, s.limitOf(c, int(arg%3)))
				}
				held = append(held, p)
			case 1: // release the oldest held call with outcome arg%4, with the shorthand when arg's high bit is set
				if len(held) > 0 {
					if arg&0x80 != 0 {
						s.Release(held[0], rampart.Result(arg%4))
					} else {
						s.ReleaseAt(held[0], tk.Now()+int64(arg&0x7f)*int64(time.Millisecond)/8, rampart.Result(arg%4))
					}
					held = held[1:]
				}
			case 2: // move the clock
				tk.Advance(time.Duration(arg) * time.Millisecond / 4)
			case 3: // set the scheduling latency (255: unknown)
				if arg == 255 {
					src.set(-1, -1, -1)
				} else {
					src.set(time.Duration(arg)*time.Millisecond/10, -1, -1)
				}
			}
			st := s.Stats()
			if st.InFlight != len(held) {
				t.Fatalf("in flight %d, held %d", st.InFlight, len(held))
			}
			if st.Admitted+st.Rejected != attempts {
				t.Fatalf("admitted %d + rejected %d != %d attempts", st.Admitted, st.Rejected, attempts)
			}
			for j, on := range ons {
				if on != (j%2 == 0) {
					t.Fatalf("listener calls %v do not alternate", ons)
				}
			}
			if st.Overloaded != (len(ons)%2 == 1) {
				t.Fatalf("Overloaded %v after listener calls %v", st.Overloaded, ons)
			}
		}
	})
}
