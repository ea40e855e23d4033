package retry

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func mustNew(t testing.TB, c Config) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return p
}

// seeded returns a deterministic jitter source for single-goroutine tests.
func seeded(seed uint64) func(int64) int64 {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).Int64N
}

func TestBackoffExact(t *testing.T) {
	ms := int64(time.Millisecond)
	cases := []struct {
		name string
		c    Config
		want []int64 // delay after attempt 1, 2, ...
	}{
		{"constant", Config{Backoff: Constant, BaseDelay: 50 * time.Millisecond},
			[]int64{50 * ms, 50 * ms, 50 * ms, 50 * ms}},
		{"linear", Config{Backoff: Linear, BaseDelay: 100 * time.Millisecond, Increment: 50 * time.Millisecond, MaxDelay: 220 * time.Millisecond},
			[]int64{100 * ms, 150 * ms, 200 * ms, 220 * ms, 220 * ms}},
		{"linear-default-inc", Config{Backoff: Linear, BaseDelay: 10 * time.Millisecond},
			[]int64{10 * ms, 20 * ms, 30 * ms}},
		{"exponential", Config{Backoff: Exponential, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second},
			[]int64{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms}},
		{"exponential-x3", Config{Backoff: Exponential, BaseDelay: time.Millisecond, Multiplier: 3, MaxDelay: time.Second},
			[]int64{ms, 3 * ms, 9 * ms, 27 * ms}},
		{"exponential-x1.5", Config{Backoff: Exponential, BaseDelay: 100 * time.Millisecond, Multiplier: 1.5},
			[]int64{100 * ms, 150 * ms, 225 * ms, 337500 * 1000}},
		{"exponential-x1", Config{Backoff: Exponential, BaseDelay: 7 * time.Millisecond, Multiplier: 1},
			[]int64{7 * ms, 7 * ms, 7 * ms}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, tc.c)
			for i, want := range tc.want {
				if got := p.cur.Load().delay(i+1, 0); got != want {
					t.Errorf("delay(%d) = %v, want %v", i+1, time.Duration(got), time.Duration(want))
				}
			}
		})
	}
}

func TestBackoffSaturates(t *testing.T) {
	for _, mult := range []float64{2, 3, 1.7, 1e300} {
		p := mustNew(t, Config{Backoff: Exponential, BaseDelay: time.Hour, MaxDelay: math.MaxInt64, Multiplier: mult})
		prev := int64(0)
		for _, n := range []int{1, 2, 10, 40, 63, 64, 65, 100, 1 << 20, math.MaxInt32, math.MaxInt} {
			d := p.cur.Load().delay(n, 0)
			if d < prev || d <= 0 {
				t.Fatalf("mult %v: delay(%d) = %d after %d: not monotonic or overflowed", mult, n, d, prev)
			}
			prev = d
		}
		if prev != math.MaxInt64 {
			t.Fatalf("mult %v: delay(MaxInt) = %d, want saturation at MaxInt64", mult, prev)
		}
	}
	p := mustNew(t, Config{Backoff: Linear, BaseDelay: time.Hour, MaxDelay: math.MaxInt64})
	if d := p.cur.Load().delay(math.MaxInt, 0); d != math.MaxInt64 {
		t.Fatalf("linear did not saturate: %d", d)
	}
	for _, k := range []Backoff{FullJitter, EqualJitter, DecorrelatedJitter} {
		p := mustNew(t, Config{Backoff: k, BaseDelay: time.Hour, MaxDelay: math.MaxInt64, Rand: seeded(1)})
		prev := int64(0)
		for n := 1; n < 200; n++ {
			d := p.cur.Load().delay(n, prev)
			if d < 0 {
				t.Fatalf("%v: negative delay %d", k, d)
			}
			prev = d
		}
	}
}

// TestBackoffBoundedAtExtremes: every backoff kind stays in [0, MaxDelay]
// and never panics at the extremes (MaxDelay = MaxInt64, huge attempt
// numbers, huge prev, a fractional multiplier near 1 and a huge whole
// one); Exponential reaches exactly MaxDelay and stays there.
func TestBackoffBoundedAtExtremes(t *testing.T) {
	for kind := range numBackoffs {
		for _, mult := range []float64{1, 1.0000001, 1.5, 2, 3, 1e300} {
			for _, maxD := range []time.Duration{time.Second, math.MaxInt64} {
				p := mustNew(t, Config{Backoff: kind, BaseDelay: time.Nanosecond, MaxDelay: maxD, Multiplier: mult,
					Increment: math.MaxInt64 / 2, MaxAttempts: math.MaxInt})
				for _, n := range []int{1, 2, 62, 63, 64, 1000, math.MaxInt32, math.MaxInt - 1} {
					for _, prev := range []int64{0, 1, int64(maxD), math.MaxInt64} {
						d := p.cur.Load().delay(n, prev)
						if d < 0 || d > int64(maxD) {
							t.Fatalf("%v mult %v max %v n %d prev %d: delay %d", kind, mult, maxD, n, prev, d)
						}
					}
				}
			}
		}
	}
	p := mustNew(t, Config{Backoff: Exponential, BaseDelay: 3, MaxDelay: math.MaxInt64})
	if d := p.cur.Load().delay(1000, 0); d != math.MaxInt64 {
		t.Fatalf("exp(1000) = %d", d)
	}
	if d := p.cur.Load().delay(3, 0); d != 12 {
		t.Fatalf("exp(3) = %d, want 12", d)
	}
}

// TestJitterBounds draws every jittered kind many times with a fixed seed and
// checks each draw against its formula's bounds, and that the draws cover
// the range (both ends' neighbourhoods are reached).
func TestJitterBounds(t *testing.T) {
	const draws = 20000
	base, maxD := int64(10*time.Millisecond), int64(2*time.Second)
	for _, k := range []Backoff{FullJitter, EqualJitter, DecorrelatedJitter} {
		t.Run(k.String(), func(t *testing.T) {
			p := mustNew(t, Config{Backoff: k, BaseDelay: time.Duration(base), MaxDelay: time.Duration(maxD), Rand: seeded(42)})
			for n := 1; n <= 12; n++ {
				exp := p.cur.Load().bo.exp(n)
				var lo, hi int64
				switch k {
				case FullJitter:
					lo, hi = 0, exp
				case EqualJitter:
					lo, hi = exp-exp/2, exp
				}
				minSeen, maxSeen := int64(math.MaxInt64), int64(-1)
				prev := int64(0)
				for range draws {
					if k == DecorrelatedJitter {
						prev = min(max(prev, base), maxD)
						lo, hi = base, min(prev*3, maxD)
					}
					d := p.cur.Load().delay(n, prev)
					if d < lo || d > hi {
						t.Fatalf("n=%d: delay %v outside [%v, %v]", n, time.Duration(d), time.Duration(lo), time.Duration(hi))
					}
					minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
					if k == DecorrelatedJitter {
						prev = d
					}
				}
				if k != DecorrelatedJitter {
					span := hi - lo
					if minSeen > lo+span/50 || maxSeen < hi-span/50 {
						t.Fatalf("n=%d: draws [%d, %d] do not cover [%d, %d]", n, minSeen, maxSeen, lo, hi)
					}
				}
			}
		})
	}
}

// TestJitterDefaultSource checks the bounds with math/rand/v2's own
// generator (the production path).
func TestJitterDefaultSource(t *testing.T) {
	p := mustNew(t, Config{Backoff: EqualJitter, BaseDelay: time.Millisecond, MaxDelay: time.Second})
	for n := 1; n < 20; n++ {
		e := p.cur.Load().bo.exp(n)
		for range 500 {
			if d := p.cur.Load().delay(n, 0); d < e-e/2 || d > e {
				t.Fatalf("delay %d outside [%d, %d]", d, e-e/2, e)
			}
		}
	}
}

func TestJitterDeterministic(t *testing.T) {
	a := mustNew(t, Config{Rand: seeded(7)})
	b := mustNew(t, Config{Rand: seeded(7)})
	for n := 1; n < 50; n++ {
		if x, y := a.cur.Load().delay(n, 0), b.cur.Load().delay(n, 0); x != y {
			t.Fatalf("same seed, different draws: %d vs %d", x, y)
		}
	}
}

func TestBackoffString(t *testing.T) {
	for k := range numBackoffs + 1 {
		if k.String() == "" {
			t.Fatal("empty name")
		}
	}
	if Backoff(99).String() != "invalid" {
		t.Fatal("invalid kind name")
	}
}
