package circuitbreaker

import (
	"math"
	"testing"
	"time"

	"github.com/rampart-go/rampart"
)

// refBreaker is the sequential reference model: a plain, obviously correct
// breaker with the same semantics, which evaluates every rate on every
// record (the real one skips evaluations that cannot trip).
type refBreaker struct {
	c                                                      Config
	state                                                  State
	gen                                                    uint64
	ring                                                   []uint32
	seq                                                    uint64
	ticks                                                  map[int64]*[3]int64
	consec                                                 int64
	openUntil                                              int64
	probeAt                                                int64 // half-open: when the newest probe was admitted
	streak                                                 int
	adm, infl, succ, fail, slowp                           int
	rejections, stale, transitions, trips, failures, slows uint64
}

type refPermit struct {
	gen   uint64
	st    State
	start int64
}

func newRef(c Config) *refBreaker {
	return &refBreaker{c: c, gen: 1, ring: make([]uint32, c.WindowSize), ticks: map[int64]*[3]int64{}}
}

func (m *refBreaker) res() int64 { return int64(m.c.TimeWindow) / int64(m.c.Buckets) }

func (m *refBreaker) window(now int64) (total, fails, slows int64) {
	switch m.c.Mode {
	case CountWindow:
		for _, c := range m.ring {
			total += int64(c & codeFilled)
			fails += int64(c & codeFailBit >> 1)
			slows += int64(c & codeSlowBit >> 2)
		}
	case TimeWindow:
		tick := floorDiv(now, m.res())
		for t, v := range m.ticks {
			if t <= tick && t > tick-int64(m.c.Buckets) {
				total, fails, slows = total+v[0], fails+v[1], slows+v[2]
			}
		}
	}
	return
}

func (m *refBreaker) dur(streak int) int64 {
	d := float64(m.c.OpenDuration)
	if streak > 0 && m.c.MaxOpenDuration > m.c.OpenDuration {
		d *= math.Pow(m.c.OpenBackoffFactor, float64(streak))
		d = min(d, float64(m.c.MaxOpenDuration))
	}
	return int64(d)
}

func (m *refBreaker) to(s State, now int64, auto bool) {
	from := m.state
	switch s {
	case Open:
		if auto && from == HalfOpen {
			m.streak++
		} else {
			m.streak = 0
		}
		m.openUntil = now + m.dur(m.streak)
		if auto {
			m.trips++
		}
	case HalfOpen:
		m.probeAt = now
	case Closed, MetricsOnly:
		clear(m.ring)
		clear(m.ticks)
		m.consec = 0
		if s == Closed {
			m.streak = 0
		}
	}
	m.state, m.gen = s, m.gen+1
	m.adm, m.infl, m.succ, m.fail, m.slowp = 0, 0, 0, 0, 0
	m.transitions++
}

// acquire returns the permit, or the rejection (1 open, 2 half-open full).
func (m *refBreaker) acquire(now int64) (refPermit, int) {
	for {
		switch m.state {
		case Closed, Disabled, MetricsOnly:
			return refPermit{m.gen, m.state, now}, 0
		case ForcedOpen:
			m.rejections++
			return refPermit{}, 1
		case Open:
			if now < m.openUntil {
				m.rejections++
				return refPermit{}, 1
			}
			m.state, m.gen = HalfOpen, m.gen+1
			m.probeAt = now // the half-open period starts at its first probe
			m.adm, m.infl, m.succ, m.fail, m.slowp = 1, 1, 0, 0, 0
			m.transitions++
			return refPermit{m.gen, m.state, now}, 0
		case HalfOpen:
			if m.adm >= m.c.HalfOpenProbes || m.infl >= m.c.HalfOpenMaxConcurrent {
				// Restarted only when no probe was admitted for that long.
				if m.c.MaxHalfOpenDuration > 0 && now-m.probeAt >= int64(m.c.MaxHalfOpenDuration) {
					m.to(HalfOpen, now, true)
					continue
				}
				m.rejections++
				return refPermit{}, 2
			}
			m.adm++
			m.infl++
			m.probeAt = max(m.probeAt, now)
			return refPermit{m.gen, m.state, now}, 0
		}
	}
}

func (m *refBreaker) record(p refPermit, now int64, r rampart.Result) {
	if p.gen != m.gen || p.st != m.state {
		m.stale++
		return
	}
	if m.state == Disabled {
		return
	}
	if r == rampart.Ignored {
		if m.state == HalfOpen {
			m.infl--
			m.adm--
		}
		return
	}
	slow := m.c.SlowCallDuration > 0 && now-p.start >= int64(m.c.SlowCallDuration)
	failed := r == rampart.Failure || slow && m.c.Mode == Consecutive // a slow call is a failure in Consecutive mode
	if failed {
		m.failures++
	}
	if slow {
		m.slows++
	}
	switch m.state {
	case HalfOpen:
		m.infl--
		if m.c.Mode == Consecutive {
			slow = false // counted as a failure above
		}
		if failed {
			m.fail++
		} else {
			m.succ++
		}
		if slow {
			m.slowp++
		}
		switch m.verdict() {
		case verdictClose:
			m.to(Closed, now, true)
		case verdictReopen:
			m.to(Open, now, true)
		}
	case Closed, MetricsOnly:
		judge := m.state == Closed
		switch m.c.Mode {
		case CountWindow:
			// A success over a ring full of successes changes nothing and
			// is not written (nor counted in seq), as in countWindow.add.
			if code := outcomeCode(failed, slow); code != codeOK || !m.ringAllOK() {
				m.ring[m.seq%uint64(len(m.ring))] = code
				m.seq++
			}
		case TimeWindow:
			tick := floorDiv(now, m.res())
			v := m.ticks[tick]
			if v == nil {
				v = &[3]int64{}
				m.ticks[tick] = v
			}
			v[0]++
			if failed {
				v[1]++
			}
			if slow {
				v[2]++
			}
		case Consecutive:
			if failed || slow {
				m.consec++
				if judge && m.consec >= int64(m.c.ConsecutiveFailures) {
					m.to(Open, now, true)
				}
			} else {
				m.consec = 0
			}
			return
		}
		if !judge {
			return
		}
		total, fails, slows := m.window(now)
		if total >= int64(m.c.MinimumCalls) && total > 0 &&
			(float64(fails)*100 >= m.c.FailureRateThreshold*float64(total) ||
				(m.c.SlowCallDuration > 0 && float64(slows)*100 >= m.c.SlowCallRateThreshold*float64(total))) {
			m.to(Open, now, true)
		}
	}
}

// verdict decides the half-open period the obvious way: it is decided when
// every way the probes still to come can end gives the same outcome.
func (m *refBreaker) verdict() int {
	n := m.c.HalfOpenProbes
	left := n - m.succ - m.fail
	// passes reports whether the period closes when, of the left probes,
	// f more fail and s more are slow (failed ones first).
	passes := func(f, s int) bool {
		fails, slows, succ := m.fail+f, m.slowp+s, m.succ+left-f
		slowOver := m.c.SlowCallDuration > 0 && float64(slows)*100 >= m.c.SlowCallRateThreshold*float64(n)
		switch {
		case m.c.HalfOpenSuccesses > 0:
			return succ >= m.c.HalfOpenSuccesses
		case m.c.Mode == Consecutive:
			return fails < min(m.c.ConsecutiveFailures, n)
		default:
			return float64(fails)*100 < m.c.FailureRateThreshold*float64(n) && !slowOver
		}
	}
	all, none := true, true
	for f := 0; f <= left; f++ {
		for s := 0; s <= left; s++ {
			if passes(f, s) {
				none = false
			} else {
				all = false
			}
		}
	}
	switch {
	case all:
		return verdictClose
	case none:
		return verdictReopen
	}
	return verdictUndecided
}

func (m *refBreaker) stats(now int64) Stats {
	s := Stats{
		State: m.state, Generation: m.gen, ConsecutiveFailures: m.consec,
		HalfOpenAdmitted: m.adm, HalfOpenInFlight: m.infl, HalfOpenSucceeded: m.succ, HalfOpenFailed: m.fail, HalfOpenSlowCalls: m.slowp,
		Failures: m.failures, SlowCalls: m.slows, Rejected: m.rejections, StaleResults: m.stale,
		Transitions: m.transitions, Trips: m.trips,
	}
	if m.c.Mode == CountWindow {
		s.Calls = m.seq
	}
	s.WindowCalls, s.WindowFailures, s.WindowSlowCalls = m.window(now)
	if s.WindowCalls > 0 {
		s.FailureRate = float64(s.WindowFailures) * 100 / float64(s.WindowCalls)
		s.SlowCallRate = float64(s.WindowSlowCalls) * 100 / float64(s.WindowCalls)
	}
	switch m.state {
	case Open:
		s.RemainingOpen = time.Duration(max(m.openUntil-now, 0))
	case ForcedOpen:
		s.RemainingOpen = m.c.OpenDuration
	}
	return s
}

// FuzzReference drives the breaker and the reference model with the same
// random configuration and operation sequence, and demands identical
// decisions and identical stats after every operation.
func FuzzReference(f *testing.F) {
	f.Add([]byte{0, 3, 2, 1, 0, 1, 0, 0, 0, 0, 1, 0, 2, 1, 1, 0, 2, 0, 1, 0, 0, 12, 1, 0, 2, 0, 1, 0, 2, 0})
	f.Add([]byte{1, 5, 3, 2, 1, 2, 1, 1, 1, 1, 1, 0, 1, 0, 2, 1, 0, 9, 1, 0, 1, 0, 2, 3, 0, 15, 1, 0, 5, 0})
	f.Add([]byte{2, 2, 1, 0, 1, 3, 2, 1, 0, 1, 1, 0, 2, 1, 0, 11, 1, 0, 1, 0, 2, 4, 2, 1, 3, 2, 4, 0, 1, 0})
	f.Add([]byte{0, 7, 6, 3, 3, 0, 0, 0, 1, 0, 1, 1, 1, 1, 2, 4, 2, 7, 0, 15, 3, 4, 3, 1, 1, 1, 2, 2, 2, 5})
	for s := range uint64(40) {
		seed := make([]byte, 10+2*(50+int(s)*5))
		x := s*0x9e3779b97f4a7c15 + 1
		for i := range seed {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			seed[i] = byte(x)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 10 {
			return
		}
		c := Config{
			Mode:                  Mode(in[0] % 3),
			WindowSize:            1 + int(in[1]%8),
			FailureRateThreshold:  [...]float64{25, 50, 75, 100}[in[3]%4],
			SlowCallRateThreshold: [...]float64{50, 100}[in[4]>>2%2],
			SlowCallDuration:      time.Duration(in[4]%2) * 5 * time.Millisecond,
			TimeWindow:            40 * time.Millisecond,
			Buckets:               4,
			ConsecutiveFailures:   1 + int(in[1]%4),
			OpenDuration:          10 * time.Millisecond,
			MaxOpenDuration:       [...]time.Duration{10, 40}[in[9]%2] * time.Millisecond,
			HalfOpenProbes:        1 + int(in[5]%4),
			MaxHalfOpenDuration:   time.Duration(in[8]%2) * 30 * time.Millisecond,
		}
		c.MinimumCalls = 1 + int(in[2])%c.WindowSize
		c.HalfOpenMaxConcurrent = 1 + int(in[6])%c.HalfOpenProbes
		c.HalfOpenSuccesses = int(in[7]) % (c.HalfOpenProbes + 1) // 0: judged by the thresholds
		tk := rampart.NewManualTicker(0)
		c.Ticker = tk
		b, err := New(c)
		if err != nil {
			t.Fatalf("config %+v: %v", c, err)
		}
		m := newRef(b.Config())
		type held struct {
			p Permit
			r refPermit
		}
		var hs []held
		ops := in[10:]
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, ops[i+1]
			now := tk.Now()
			switch op {
			case 0:
				tk.Advance(time.Duration(arg%16) * time.Millisecond)
			case 1, 2, 3:
				p, err := b.AcquireAt(now)
				rp, rej := m.acquire(now)
				switch {
				case rej == 0 && err != nil, rej == 1 && err != b.errOpen(), rej == 2 && err != b.errHalfOpen():
					t.Fatalf("op %d acquire: real %v, model %d", i/2, err, rej)
				}
				if err == nil {
					hs = append(hs, held{p, rp})
				}
			case 4, 5, 6:
				if len(hs) == 0 {
					continue
				}
				k := int(arg>>2) % len(hs)
				h := hs[k]
				hs = append(hs[:k], hs[k+1:]...)
				r := rampart.Result(arg % 3)
				b.ReleaseAt(h.p, now, r)
				m.record(h.r, now, r)
			case 7:
				if arg%7 == 6 {
					b.Reset()
					m.to(Closed, now, false)
				} else if to := State(arg % 7); b.TransitionTo(to) != (m.state != to) {
					t.Fatalf("op %d: TransitionTo(%v) disagrees", i/2, to)
				} else if m.state != to {
					m.to(to, now, false)
				}
			}
			if got, want := b.Stats(), m.stats(tk.Now()); got != want {
				t.Fatalf("op %d (%d,%d) config %+v\nreal  %+v\nmodel %+v", i/2, op, arg, b.Config(), got, want)
			}
		}
	})
}

// ringAllOK reports whether every slot of the reference ring holds a plain
// success.
func (m *refBreaker) ringAllOK() bool {
	for _, c := range m.ring {
		if c != codeOK {
			return false
		}
	}
	return true
}

// floorDiv is floor(a / b) for b > 0, as the time window buckets readings
// (which may be negative).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a < 0 && q*b != a {
		q--
	}
	return q
}
