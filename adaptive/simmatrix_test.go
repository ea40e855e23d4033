package adaptive

import (
	"os"
	"testing"
	"time"
)

// TestSimMatrix runs the simulation over several capacities and latencies, for
// the README's table. It takes minutes: set RAMPART_SIM_MATRIX=1 to run it.
func TestSimMatrix(t *testing.T) {
	if os.Getenv("RAMPART_SIM_MATRIX") == "" {
		t.Skip("set RAMPART_SIM_MATRIX=1")
	}
	for _, a := range append(delayAlgorithms, struct {
		name string
		alg  Algorithm
	}{"Gradient2{Tolerance: 1.5}", Gradient2{Tolerance: 1.5}}, struct {
		name string
		alg  Algorithm
	}{"Vegas{Alpha: 3, Beta: 6}", Vegas{Alpha: 3, Beta: 6}}) {
		for _, cd := range []struct {
			c int
			d time.Duration
		}{{10, 2 * time.Millisecond}, {50, 10 * time.Millisecond}, {200, 20 * time.Millisecond}, {500, 5 * time.Millisecond}} {
			for _, initial := range []int{5, 1000} {
				s := newSim(t, simConfig(a.alg, initial), cd.c, cd.d, 7)
				thr := float64(cd.c) / cd.d.Seconds()
				s.rate = 3 * thr
				s.run(30 * time.Second)
				m := s.meanLimit(0.5)
				in := s.inBand(float64(cd.c), 0.25, 20*time.Second)
				s.run(10 * time.Second)
				t.Logf("%s C=%d D=%v init %d: mean %.1f (%.0f%%) inband %.2f | goodput %.3f p99 %v", a.name, cd.c, cd.d, initial, m, 100*(m/float64(cd.c)-1), in, s.goodput(10*time.Second), s.p99())
			}
		}
	}
}

// TestSimSamplingMatrix compares timing every call (AcquireAt/ReleaseAt) with
// Acquire/Release's RTT sampling over several capacities, latencies and window
// lengths, three seeds each, for the README. It takes minutes: set
// RAMPART_SIM_MATRIX=1 to run it.
func TestSimSamplingMatrix(t *testing.T) {
	if os.Getenv("RAMPART_SIM_MATRIX") == "" {
		t.Skip("set RAMPART_SIM_MATRIX=1")
	}
	for _, a := range delayAlgorithms {
		for _, cd := range []struct {
			c    int
			d, w time.Duration
		}{{50, 10 * time.Millisecond, time.Second}, {10, 2 * time.Millisecond, time.Second}, {200, 20 * time.Millisecond, time.Second}, {500, 5 * time.Millisecond, 100 * time.Millisecond}} {
			for _, initial := range []int{5, 1000} {
				for _, sampled := range []bool{false, true} {
					for seed := uint64(11); seed < 14; seed++ {
						c := simConfig(a.alg, initial)
						c.Window = cd.w
						s := newSim(t, c, cd.c, cd.d, seed)
						s.sampled = sampled
						s.rate = 3 * float64(cd.c) / cd.d.Seconds()
						s.run(60 * time.Second)
						m := s.meanLimit(0.5)
						st := s.l.Stats()
						s.run(10 * time.Second)
						t.Logf("%s C=%d D=%v W=%v init %d sampled=%v seed %d: mean %.1f (%+.0f%%) | goodput %.3f p99 %v | %.0f samples/window, stride %d",
							a.name, cd.c, cd.d, cd.w, initial, sampled, seed, m, 100*(m/float64(cd.c)-1), s.goodput(10*time.Second), s.p99(), float64(st.Samples)/float64(st.Windows), st.Stride)
					}
				}
			}
		}
	}
}
