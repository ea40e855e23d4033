package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rampart-go/rampart"
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
		got := l.TokensAt(now)
		if d := got - want; d > eps || d < -eps {
			t.Fatalf("step %d at %d: limiter has %.9f tokens, model %.9f (eps %.3g)", i, now, got, want, eps)
		}
		wait := int64(l.AdmitN(now, n))
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

// gcra is the exact reference for admission instants: GCRA in rational
// arithmetic on the configured interval num/den ns, with the tolerance
// burst·interval. A request for n at reading t conforms when
// tat + n·interval − tolerance ≤ t, and then tat becomes
// max(tat, t) + n·interval. tat is nil before the first admission (a full
// bucket at any reading).
type gcra struct {
	tat      *big.Rat
	interval *big.Rat
	tol      *big.Rat
	burst    int64
	wholeNs  bool // the interval is a whole number of ns
	late     int  // rejections of conforming requests (within 1 ns of the instant)
}

func newGCRA(p params) *gcra {
	iv := new(big.Rat).SetFrac(new(big.Int).SetUint64(p.num), new(big.Int).SetUint64(p.den))
	return &gcra{
		interval: iv,
		tol:      new(big.Rat).Mul(iv, new(big.Rat).SetInt64(p.burst)),
		burst:    p.burst,
		wholeNs:  iv.IsInt(),
	}
}

// threshold returns the exact instant from which n permits conform (nil:
// at any reading).
func (g *gcra) threshold(n int) *big.Rat {
	if g.tat == nil {
		return nil
	}
	r := new(big.Rat).Mul(g.interval, new(big.Rat).SetInt64(int64(n)))
	r.Add(r, g.tat)
	return r.Sub(r, g.tol)
}

// firstReading returns the least whole-ns reading at which n permits
// conform, or math.MinInt64 when any reading does.
func (g *gcra) firstReading(n int) int64 {
	r := g.threshold(n)
	if r == nil {
		return math.MinInt64
	}
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// take commits n permits at reading t.
func (g *gcra) take(t int64, n int) {
	at := new(big.Rat).SetInt64(t)
	if g.tat != nil && g.tat.Cmp(at) > 0 {
		at.Set(g.tat)
	}
	g.tat = at.Add(at, new(big.Rat).Mul(g.interval, new(big.Rat).SetInt64(int64(n))))
}

func (g *gcra) clone() *gcra {
	c := *g
	if g.tat != nil {
		c.tat = new(big.Rat).Set(g.tat)
	}
	return &c
}

// check compares one decision of the limiter with the model, which holds
// the limiter's own history of admissions: an admission must conform (never
// early); a rejection of a conforming request is allowed only when the
// exact instant is less than 1 ns before the reading (a phase rounded up
// onto the unit grid), and never for a whole-ns interval.
func (g *gcra) check(t testing.TB, step int, now int64, n int, admitted bool) {
	t.Helper()
	first := g.firstReading(n)
	switch {
	case admitted && now < first:
		t.Fatalf("step %d: %d permits admitted at %d, before the exact GCRA instant %s (first whole-ns reading %d)",
			step, n, now, g.threshold(n).FloatString(3), first)
	case !admitted && now >= first:
		late := new(big.Rat).Sub(new(big.Rat).SetInt64(now), g.threshold(n))
		if g.wholeNs || late.Cmp(big.NewRat(1, 1)) >= 0 {
			t.Fatalf("step %d: %d permits rejected at %d, %s ns after the exact GCRA instant",
				step, n, now, late.FloatString(3))
		}
		g.late++
	}
}

// checkWait checks a wait (AdmitN, Reserve) against the model: it ends
// at the exact instant's first whole-ns reading or at most 1 ns later, and
// exactly there for a whole-ns interval.
func (g *gcra) checkWait(t testing.TB, step int, now int64, n int, wait int64) {
	t.Helper()
	want := int64(0)
	if f := g.firstReading(n); f > now {
		want = f - now
	}
	if wait < want || wait > want+1 || g.wholeNs && wait != want {
		t.Fatalf("step %d: wait %d for %d permits at %d, the exact GCRA wait is %d", step, wait, n, now, want)
	}
}

// exactRates are the configurations the exactness tests run: intervals of
// 1e9/3, 1e9/7, 1e9/333 and 10/3 ns, and whole-ns ones (7 ns from
// 1e9/7 per second, 1 s) that must match the model to the ns.
var exactRates = []Config{
	{Rate: 3}, {Rate: 7}, {Rate: 333}, {Rate: 1e9 / 7},
	{Limit: 3, Period: 10}, {Limit: 7, Period: time.Second}, {Limit: 1, Period: time.Second},
}

// nextReading picks the next reading for a request of n: at random offsets,
// and often right at the model's exact instant or 1 ns on either side of it
// (where rounding would show), sometimes a stale one.
func nextReading(rng *rand.Rand, g *gcra, now int64, n int) int64 {
	iv, _ := g.interval.Float64()
	switch rng.IntN(8) {
	case 0:
		return now // the same reading again
	case 1:
		return max(now-rng.Int64N(int64(iv)+2), 0) // stale
	case 2, 3, 4:
		if f := g.firstReading(n); f > now {
			return f - 1 + rng.Int64N(3)
		}
	}
	return now + rng.Int64N(int64(3*iv)+2)
}

// TestExactGCRALimiter drives a Limiter through Allow, AllowN, AdmitN,
// Reserve (with Cancel) at random readings (a fixed PCG stream) and checks
// every decision and wait against the exact GCRA model.
func TestExactGCRALimiter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 333))
	for _, c := range exactRates {
		for _, burst := range []int{1, 3, 10} {
			c := c
			c.Burst = burst
			start := rng.Int64N(1 << 40)
			tk := rampart.NewManualTicker(start)
			c.Ticker = tk
			l := mustNew(t, c)
			g := newGCRA(l.st.Load().params)
			now := start
			var last Reservation
			var beforeLast *gcra
			for step := range 3000 {
				n := 1 + rng.IntN(burst)
				now = nextReading(rng, g, now, n)
				switch rng.IntN(5) {
				case 0: // Allow reads the ticker (which never goes back)
					n = 1
					var ok bool
					if now >= tk.Now() {
						tk.Set(now)
						ok = l.Allow()
					} else {
						ok = l.AllowN(now, n)
					}
					g.check(t, step, now, n, ok)
					if ok {
						g.take(now, n)
					}
				case 1:
					ok := l.AllowN(now, n)
					g.check(t, step, now, n, ok)
					if ok {
						g.take(now, n)
					}
				case 2:
					w := int64(l.AdmitN(now, n))
					g.check(t, step, now, n, w == 0)
					if w == 0 {
						g.take(now, n)
					} else {
						g.checkWait(t, step, now, n, w)
					}
				case 3:
					maxWait := time.Duration(rng.Int64N(int64(g.burst) * 2 * int64(l.st.Load().k)))
					before := g.clone()
					r, err := l.ReserveN(now, n, maxWait)
					if err != nil {
						if want := g.firstReading(n) - now; want+1 <= int64(maxWait) {
							t.Fatalf("step %d: reservation refused with an exact wait of %d ≤ maxWait %d", step, want, maxWait)
						}
						continue
					}
					g.checkWait(t, step, now, n, r.Delay().Nanoseconds())
					g.take(now, n)
					last, beforeLast = r, before
				case 4:
					if last.CancelAt(now) {
						g = beforeLast
					}
				}
			}
			t.Logf("%v/%v per %v burst %d: %d rejections less than 1 ns after the exact instant", c.Rate, c.Limit, c.Period, burst, g.late)
		}
	}
}

// TestExactGCRAKeyed checks every decision and wait of a Keyed limiter
// against one exact GCRA model per key.
func TestExactGCRAKeyed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 334))
	keys := []string{"a", "b", "c"}
	for _, c := range exactRates {
		for _, burst := range []int{1, 4} {
			c := c
			c.Burst = burst
			start := rng.Int64N(1 << 40)
			tk := rampart.NewManualTicker(start)
			c.Ticker = tk
			k := mustKeyed(t, KeyedConfig{Config: c})
			models := map[string]*gcra{}
			for _, key := range keys {
				models[key] = newGCRA(k.p)
			}
			now := start
			for step := range 3000 {
				key := keys[rng.IntN(len(keys))]
				g := models[key]
				n := 1 + rng.IntN(burst)
				now = nextReading(rng, g, now, n)
				switch rng.IntN(3) {
				case 0:
					n = 1
					var ok bool
					if now >= tk.Now() {
						tk.Set(now)
						ok = k.Allow(key)
					} else {
						ok = k.AllowN(key, now, n)
					}
					g.check(t, step, now, n, ok)
					if ok {
						g.take(now, n)
					}
				case 1:
					ok := k.AllowN(key, now, n)
					g.check(t, step, now, n, ok)
					if ok {
						g.take(now, n)
					}
				case 2:
					w := int64(k.AdmitN(key, now, n))
					g.check(t, step, now, n, w == 0)
					if w == 0 {
						g.take(now, n)
					} else {
						g.checkWait(t, step, now, n, w)
					}
				}
			}
		}
	}
}

// TestExactGCRASharded checks a Sharded limiter against one exact GCRA
// model per shard: every admission conforms for the shard that took it
// (found by its TAT word), and a rejection's wait is never shorter than the
// shortest exact wait among the shards.
func TestExactGCRASharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 335))
	for _, c := range exactRates {
		if c.Limit == 1 {
			continue // 1 per second cannot be split
		}
		c := c
		c.Burst = 6
		start := rng.Int64N(1 << 40)
		c.Ticker = rampart.NewManualTicker(start)
		s, err := NewSharded(ShardedConfig{Config: c, Shards: 3})
		if err != nil {
			t.Fatal(c, err)
		}
		models := make([]*gcra, len(s.shards))
		tats := make([]int64, len(s.shards))
		for i, l := range s.shards {
			models[i] = newGCRA(l.st.Load().params)
		}
		burst := int(s.shards[0].st.Load().burst)
		now := start
		for step := range 3000 {
			n := 1 + rng.IntN(burst)
			now = nextReading(rng, models[rng.IntN(len(models))], now, n)
			for i, l := range s.shards {
				tats[i] = l.st.Load().tat.Load()
			}
			w := int64(s.AdmitN(now, n))
			took := -1
			for i, l := range s.shards {
				if l.st.Load().tat.Load() != tats[i] {
					if took >= 0 || w != 0 {
						t.Fatalf("step %d: shards %d and %d changed, wait %d", step, took, i, w)
					}
					took = i
				}
			}
			if w == 0 {
				if took < 0 {
					t.Fatalf("step %d: admitted without a shard taking it", step)
				}
				models[took].check(t, step, now, n, true)
				models[took].take(now, n)
				continue
			}
			least := int64(math.MaxInt64)
			for _, g := range models {
				least = min(least, max(g.firstReading(n)-now, 0))
			}
			if w < least {
				t.Fatalf("step %d: wait %d for %d permits, the shortest exact wait of a shard is %d", step, w, n, least)
			}
		}
	}
}

// TestExactGCRAWait runs Wait in a synctest bubble, at random offsets of
// its fake clock, and checks that each Wait returns at the exact GCRA
// instant of its permits (or less than 1 ns later, for an interval that is
// not a whole number of ns), and that a Wait refused for its deadline
// would not have been admitted in time.
func TestExactGCRAWait(t *testing.T) {
	for _, c := range exactRates {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 336))
			time.Sleep(time.Duration(rng.Int64N(1 << 40)))
			tk := rampart.NewNanoTicker() // inside the bubble: fake time
			time.Sleep(time.Duration(rng.Int64N(1 << 40)))
			c.Burst = 3
			c.Ticker = tk
			l := mustNew(t, c)
			g := newGCRA(l.st.Load().params)
			iv, _ := g.interval.Float64()
			ctx := context.Background()
			for step := range 300 {
				n := 1 + rng.IntN(3)
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(2*iv) + 1)))
				}
				before := tk.Now()
				first := max(g.firstReading(n), before)
				if rng.IntN(4) == 0 { // a deadline that may come first
					d := time.Duration(1 + rng.Int64N(int64(2*iv)+2))
					dctx, cancel := context.WithTimeout(ctx, d)
					err := l.WaitN(dctx, n)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						// The permits' time is the deadline: the timer and
						// the context end together, and when the context
						// wins the reservation is cancelled.
						if tk.Now()-before != int64(d) || first-before > int64(d) {
							t.Fatalf("step %d: deadline %d exceeded after %d ns, exact wait %d", step, d, tk.Now()-before, first-before)
						}
						continue
					}
					if err != nil {
						if !errors.Is(err, ErrLimited) || tk.Now() != before {
							t.Fatalf("step %d: Wait with a deadline: %v after %d ns", step, err, tk.Now()-before)
						}
						if first-before < int64(d) {
							t.Fatalf("step %d: Wait refused with an exact wait of %d before the deadline %d", step, first-before, d)
						}
						continue
					}
				} else if err := l.WaitN(ctx, n); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				g.checkWait(t, step, before, n, tk.Now()-before)
				g.take(before, n)
			}
		})
	}
}
