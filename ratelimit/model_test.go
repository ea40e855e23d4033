package ratelimit

import (
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// model is the reference: a continuous token bucket in exact rational
// arithmetic, holding at most burst tokens, refilled at num/den ns per token.
type model struct {
	tokens *big.Rat
	last   int64
	burst  *big.Rat
	perNs  *big.Rat // tokens per ns = den/num
}

func newModel(p params, start int64) *model {
	return &model{
		tokens: new(big.Rat).SetInt64(p.burst),
		last:   start,
		burst:  new(big.Rat).SetInt64(p.burst),
		perNs:  new(big.Rat).SetFrac(new(big.Int).SetUint64(p.den), new(big.Int).SetUint64(p.num)),
	}
}

// advance refills the bucket up to time t (t never goes back in the model).
func (m *model) advance(t int64) {
	if t <= m.last {
		return
	}
	add := new(big.Rat).Mul(m.perNs, new(big.Rat).SetInt64(t-m.last))
	m.tokens.Add(m.tokens, add)
	if m.tokens.Cmp(m.burst) > 0 {
		m.tokens.Set(m.burst)
	}
	m.last = t
}

func (m *model) float() float64 { f, _ := m.tokens.Float64(); return f }

// checkAgainstModel drives a limiter and the model with the same arrivals
// and fails when they disagree by more than the conversion of a reading to
// units can explain (a few units, i.e. eps tokens).
func checkAgainstModel(t testing.TB, l *Limiter, rng *rand.Rand, steps int, meanGap int64) {
	t.Helper()
	p := l.st.Load().params
	m := newModel(p, 0)
	eps := 4 / float64(p.k) // 4 units, each ≤ 1 ns
	var now int64
	for i := range steps {
		now += rng.Int64N(2*meanGap + 1)
		n := 1 + rng.IntN(int(p.burst))
		m.advance(now)
		want := m.float()
		got := l.Tokens(now)
		if d := got - want; d > eps || d < -eps {
			t.Fatalf("step %d at %d: limiter has %.9f tokens, model %.9f (eps %.3g)", i, now, got, want, eps)
		}
		wait := l.TryAcquire(now, n)
		admitted := wait == 0
		switch {
		case want >= float64(n)+eps && !admitted:
			t.Fatalf("step %d at %d: model has %.9f tokens for n=%d but limiter rejected (wait %d)", i, now, want, n, wait)
		case want < float64(n)-eps && admitted:
			t.Fatalf("step %d at %d: model has %.9f tokens for n=%d but limiter admitted", i, now, want, n)
		}
		if admitted {
			m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(int64(n)))
			continue
		}
		// The wait is exact for the limiter: one ns earlier is still
		// rejected, at the wait it is admitted (checked on a copy).
		cp := cloneLimiter(l)
		if cp.AllowN(now+wait-1, n) && wait > 1 {
			t.Fatalf("step %d: admitted 1 ns before the wait %d", i, wait)
		}
		if !cloneLimiter(l).AllowN(now+wait, n) {
			t.Fatalf("step %d: rejected at the wait %d", i, wait)
		}
	}
}

// cloneLimiter copies a limiter's state (tests only).
func cloneLimiter(l *Limiter) *Limiter {
	s := l.st.Load()
	c := &Limiter{tk: l.tk, rejected: l.rejected}
	ns := &state{params: s.params}
	ns.tat.Store(s.tat.Load())
	c.st.Store(ns)
	return c
}

func TestReferenceModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		limit := 1 + rng.IntN(1000)
		period := time.Duration(1+rng.Int64N(int64(10*time.Second))) + time.Duration(limit)
		burst := 1 + rng.IntN(20)
		l, err := New(Config{Limit: limit, Period: period, Burst: burst, Ticker: nil})
		if err != nil {
			t.Fatal(err)
		}
		interval := int64(period) / int64(limit)
		// Offered load from 3× the rate to a third of it.
		gap := max(interval/3, 1)
		if trial%3 == 1 {
			gap = interval * 3
		}
		checkAgainstModel(t, l, rng, 300, gap)
	}
}

func TestReferenceModelFloatRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range []float64{0.1, 0.3, 1, 2.5, 7, 1e3 / 7, 12345.678, 1e6, 3e8, 1e9} {
		l, err := New(Config{Rate: r, Burst: 5})
		if err != nil {
			t.Fatal(r, err)
		}
		interval := int64(1e9 / r)
		checkAgainstModel(t, l, rng, 500, max(interval/2, 1))
	}
}
