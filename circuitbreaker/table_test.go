package circuitbreaker

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// TestTransitionTable drives small scripts at fixed times. Steps:
//
//	s f w i   a call that succeeds, fails, succeeds slowly (taking 10 ms), is ignored
//	x h       a call that must be rejected as open / as half-open full
//	p P       take a probe permit and hold it / record the held permits as successes
//	+N        advance the clock by N ms
//	=state    the breaker must be in this state ("closed", "open", "half-open", ...)
//	>state    manual TransitionTo(state); "reset" resets
//	~N        RemainingOpenAt must be N ms
func TestTransitionTable(t *testing.T) {
	count := Config{WindowSize: 4, MinimumCalls: 4, OpenDuration: 100 * time.Millisecond, HalfOpenProbes: 2}
	slow := Config{WindowSize: 4, MinimumCalls: 2, SlowCallDuration: 10 * time.Millisecond, SlowCallRateThreshold: 60, FailureRateThreshold: 100, OpenDuration: 100 * time.Millisecond, HalfOpenProbes: 1}
	consec := Config{Mode: Consecutive, ConsecutiveFailures: 2, OpenDuration: 100 * time.Millisecond, MaxOpenDuration: 400 * time.Millisecond, HalfOpenProbes: 1}
	timew := Config{Mode: TimeWindow, TimeWindow: 100 * time.Millisecond, Buckets: 4, MinimumCalls: 2, FailureRateThreshold: 60, OpenDuration: 100 * time.Millisecond, HalfOpenProbes: 1}
	probes := Config{Mode: Consecutive, ConsecutiveFailures: 1, OpenDuration: 100 * time.Millisecond, HalfOpenProbes: 3, HalfOpenMaxConcurrent: 2, HalfOpenSuccesses: 2, MaxHalfOpenDuration: 50 * time.Millisecond}
	probes3 := probes
	probes3.HalfOpenSuccesses = 3
	cases := []struct {
		name   string
		cfg    Config
		script string
	}{
		{"closed stays closed under the minimum", count, "f f f =closed"},
		{"closed→open at the rate", count, "s f s f =open ~100 x"},
		{"open until the deadline, then half-open", count, "f f f f =open +99 x =open ~1 +1 s =half-open"},
		{"half-open→closed after the successes", count, "f f f f +100 s s =closed"},
		{"half-open→open on a failed probe: the open duration doubles", count, "f f f f +100 s f =open ~200"},
		{"ignored calls count nothing", count, "i i i i f f f =closed"},
		{"slow calls trip", slow, "w s =closed w =open"},
		{"slow probe fails the probe", slow, "w w =open ~100 +100 w =open"},
		{"consecutive: success resets", consec, "f s f s f =closed f =open"},
		{"backoff doubles to the cap", consec, "f f ~100 +100 f ~200 +200 f ~400 +400 f ~400 +400 s =closed f f ~100"},
		{"time window: failures age out", timew, "f +100 f =closed s =closed f =open"},
		{"probe concurrency", probes, "f +100 p p h =half-open P =closed"},
		{"probe count", probes3, "f +100 p p h P p h =half-open P =closed"},
		{"stuck probes: fresh half-open after the max", probes, "f +100 p p h +49 h +1 s s =closed"},
		{"manual states", count, ">disabled f f f f =disabled >forced-open x +1000 x ~100 >metrics-only f f f f =metrics-only >closed s =closed >open x >half-open s s =closed >reset =closed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := rampart.NewManualTicker(0)
			c.cfg.Ticker = tk
			b, err := New(c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			var held []Permit
			for i, step := range strings.Fields(c.script) {
				fail := func(format string, args ...any) {
					t.Helper()
					t.Fatalf("step %d %q at %v: "+format, append([]any{i, step, time.Duration(tk.Now())}, args...)...)
				}
				record := func(d time.Duration, r rampart.Result) {
					p, err := b.AcquireAt(tk.Now())
					if err != nil {
						fail("rejected: %v", err)
					}
					tk.Advance(d)
					b.ReleaseAt(p, tk.Now(), r)
				}
				switch step[0] {
				case 's':
					record(0, rampart.Success)
				case 'f':
					record(0, rampart.Failure)
				case 'w':
					record(10*time.Millisecond, rampart.Success)
				case 'i':
					record(0, rampart.Ignored)
				case 'x', 'h':
					_, err := b.AcquireAt(tk.Now())
					if want := map[byte]error{'x': b.errOpen(), 'h': b.errHalfOpen()}[step[0]]; err != want {
						fail("got %v, want %v", err, want)
					}
				case 'p':
					p, err := b.AcquireAt(tk.Now())
					if err != nil {
						fail("rejected: %v", err)
					}
					held = append(held, p)
				case 'P':
					for _, p := range held {
						b.ReleaseAt(p, tk.Now(), rampart.Success)
					}
					held = nil
				case '+':
					n, _ := strconv.Atoi(step[1:])
					tk.Advance(time.Duration(n) * time.Millisecond)
				case '~':
					n, _ := strconv.Atoi(step[1:])
					if got := b.RemainingOpenAt(tk.Now()); got != time.Duration(n)*time.Millisecond {
						fail("RemainingOpen %v", got)
					}
				case '=':
					if got := b.State().String(); got != step[1:] {
						fail("state %s", got)
					}
				case '>':
					if step[1:] == "reset" {
						b.Reset()
						break
					}
					for s := range State(6) {
						if s.String() == step[1:] {
							b.TransitionTo(s)
						}
					}
				}
			}
		})
	}
}
