package ratelimit

import (
	"math"
	"math/big"
	"testing"
	"time"
)

// checkParams checks what every accepted configuration must satisfy: a full
// burst at once, then one permit per interval, with exact waits.
func checkParams(t *testing.T, l *Limiter) {
	s := l.st.Load()
	if s.k < 1 || s.tau != s.burst*s.k || s.num < s.den {
		t.Fatalf("bad params %+v", s.params)
	}
	burst := int(s.burst)
	if w := int64(l.AdmitN(0, burst)); w != 0 {
		t.Fatalf("a full burst of %d refused at 0 (wait %d)", burst, w)
	}
	w := int64(l.AdmitN(0, 1))
	// The wait is the interval num/den, rounded up, within a ns.
	ideal := new(big.Rat).SetFrac(new(big.Int).SetUint64(s.num), new(big.Int).SetUint64(s.den))
	f, _ := ideal.Float64()
	if w < 1 || math.Abs(float64(w)-math.Ceil(f)) > 1+f*1e-15 {
		t.Fatalf("wait %d for an interval of %v ns", w, f)
	}
	if cloneLimiter(l).AllowN(w-1, 1) && w > 1 {
		t.Fatalf("admitted 1 ns before the wait %d", w)
	}
	if !cloneLimiter(l).AllowN(w, 1) {
		t.Fatalf("rejected at the wait %d", w)
	}
	// units is exact and monotonic around a few readings.
	for _, now := range []int64{0, 1, 2, 3, w - 1, w, int64(s.num), int64(s.num) - 1, 1<<40 + 1, 1 << 61, 1<<61 + 12345} {
		u := s.units(now)
		want := new(big.Int).Mul(big.NewInt(now), new(big.Int).SetUint64(s.denK))
		want.Quo(want, new(big.Int).SetUint64(s.num))
		if !want.IsInt64() || want.Int64() != u {
			t.Fatalf("units(%d) = %d, want %v", now, u, want)
		}
		if s.units(now+1) < u {
			t.Fatalf("units not monotonic at %d", now)
		}
		// The phase: floor(x) + 1 exactly when frac(x) ≥ k/num, i.e.
		// (now·denK mod num) ≥ k.
		rem := new(big.Int).Mul(big.NewInt(now), new(big.Int).SetUint64(s.denK))
		rem.Mod(rem, new(big.Int).SetUint64(s.num))
		wantPh := u
		if !s.unitIsNs && rem.Cmp(big.NewInt(s.k)) >= 0 && u < maxUnits {
			wantPh++
		}
		if fu, ph := s.unitsPhase(now); fu != u || ph != wantPh {
			t.Fatalf("unitsPhase(%d) = %d, %d, want %d, %d", now, fu, ph, u, wantPh)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add(1.0, int64(1), int64(time.Second), 1)
	f.Add(1e-9, int64(3), int64(time.Second), 5)
	f.Add(1e9, int64(1e9), int64(time.Second), 1<<20)
	f.Add(0.1, int64(7), int64(time.Hour), 0)
	f.Add(1e3/7, int64(1000), int64(999), 3)
	f.Add(12345.678, int64(1), int64(1), 1)
	f.Add(math.Pi, int64(-1), int64(0), -2)
	f.Fuzz(func(t *testing.T, rate float64, limit, period int64, burst int) {
		burst %= 1 << 20
		if l, err := New(Config{Rate: rate, Burst: burst}); err == nil {
			checkParams(t, l)
		} else if rate >= 1e-9 && rate <= 1e9 && burst >= 0 && float64(max(burst, 1))*1e9/rate < 0.99*maxTau {
			t.Fatalf("rate %v burst %d refused: %v", rate, burst, err)
		}
		if l, err := New(Config{Limit: int(limit), Period: time.Duration(period), Burst: burst}); err == nil {
			checkParams(t, l)
		}
		if l, err := New(Config{Capacity: burst, RefillRate: rate}); err == nil {
			checkParams(t, l)
		}
	})
}

// FuzzOps runs a sequence of operations (advance, acquire, reserve, cancel,
// jump to the exact instant of n permits) read from the input against the
// reference models: the token count against the continuous bucket, and
// every admission and wait against exact GCRA (never early, and less than
// 1 ns late at most).
func FuzzOps(f *testing.F) {
	f.Add([]byte{3, 10, 2, 0, 1, 200, 3, 5, 0, 0, 0, 0, 7, 7, 7, 1, 2, 3, 4, 5, 6})
	f.Add([]byte{1, 1, 1, 255, 255, 255, 0, 0, 2, 2, 3, 3})
	f.Add([]byte{200, 50, 20, 4, 4, 4, 4, 4, 4, 1, 0, 1, 0, 2, 1, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 3 {
			return
		}
		limit := 1 + int(ops[0])
		period := time.Duration(1+int(ops[1])) * time.Millisecond
		burst := 1 + int(ops[2]%16)
		l, err := New(Config{Limit: limit, Period: period, Burst: burst})
		if err != nil {
			return
		}
		p := l.st.Load().params
		m := newModel(p, 0)
		g := newGCRA(p)
		eps := 4 / float64(p.k)
		now := int64(ops[1]) * 7919 // a phase off the unit grid
		var last Reservation
		var lastN int
		var beforeLast *gcra
		for i := 3; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%5, ops[i+1]
			n := 1 + int(arg)%burst
			switch op {
			case 0: // advance
				now += int64(arg) * int64(period) / 64
			case 1: // acquire
				m.advance(now)
				want := m.float()
				w := int64(l.AdmitN(now, n))
				g.check(t, i, now, n, w == 0)
				if w == 0 {
					if want < float64(n)-eps {
						t.Fatalf("op %d: admitted %d with %.6f tokens", i, n, want)
					}
					m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(int64(n)))
					g.take(now, n)
				} else {
					if want >= float64(n)+eps {
						t.Fatalf("op %d: rejected %d with %.6f tokens", i, n, want)
					}
					g.checkWait(t, i, now, n, w)
				}
			case 2: // reserve, waiting at most arg/64 of a period
				m.advance(now)
				before := g.clone()
				r, err := l.ReserveN(now, n, time.Duration(int64(arg)*int64(period)/64))
				if err == nil {
					m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(int64(n)))
					g.checkWait(t, i, now, n, r.Delay().Nanoseconds())
					g.take(now, n)
					last, lastN, beforeLast = r, n, before
				}
			case 3: // cancel the last reservation
				m.advance(now)
				if last.CancelAt(now) {
					m.tokens.Add(m.tokens, new(big.Rat).SetInt64(int64(lastN)))
					if m.tokens.Cmp(m.burst) > 0 {
						m.tokens.Set(m.burst)
					}
					g = beforeLast
				}
			case 4: // to 1 ns before, at or 1 ns after the exact instant of n permits
				if g.tat == nil {
					break // any reading admits
				}
				if f := g.firstReading(n) - 1 + int64(int(arg)/burst%3); f > now {
					now = f
				}
			}
			m.advance(now)
			if d := l.TokensAt(now) - m.float(); d > eps || d < -eps {
				t.Fatalf("op %d: limiter %.6f tokens, model %.6f", i, l.TokensAt(now), m.float())
			}
		}
	})
}
