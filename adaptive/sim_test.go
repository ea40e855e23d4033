package adaptive

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
)

// The simulation: a discrete-event model of a client with a Limiter in front
// of a server with Capacity workers. Requests arrive as a Poisson process;
// the limiter admits or rejects each; an admitted request is served at once
// if a worker is free, else it waits in the server's FIFO queue. Service
// takes Base × U(0.9, 1.1). So the server's true concurrency capacity is
// Capacity, its throughput Capacity/Base, and latency grows linearly with
// the queue beyond Capacity. Time is virtual (int64 ns): the event loop hands
// each event's time to AcquireAt/ReleaseAt, so a run is deterministic and takes
// milliseconds of real time per simulated second. In sampled mode the loop
// sets the limiter's manual ticker to the event's time and calls Acquire/Release
// (AcquirePartition), the clock-reading forms that time only a sample of the
// calls.

type simEvent struct {
	at   int64
	kind int // 0 arrival, 1 completion, 2 a lost call's client timeout
	req  int // index into sim.reqs for a completion or a lost call
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].kind > h[j].kind // completions first at equal times
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simReq struct {
	tok    Permit
	arrive int64 // the admission time (an Acquire token carries none unless sampled)
}

type sim struct {
	l          *Limiter
	tk         *rampart.ManualTicker
	sampled    bool // Acquire/Release instead of AcquireAt/ReleaseAt
	onComplete func(rtt int64)
	rng        *rand.Rand
	now        int64
	events     eventHeap
	capacity   int
	base       int64   // mean service time, ns
	rate       float64 // arrivals per second
	timeout    int64   // client timeout: an RTT above it is released as Failure (0: none)
	critical   float64 // fraction of arrivals of priority 0 (AcquirePartitionAt); 0: plain AcquireAt
	loss       float64 // fraction of admitted calls lost whatever the load: the server never sees them and the client releases them as Failure after lossAfter
	lossAfter  int64   // the client timeout of a lost call
	busy       int
	queue      []int // request indexes waiting at the server
	reqs       []simReq
	free       []int

	// measurements of the current phase
	arrivals, rejected, completed, dropped int
	lost                                   int // of dropped: the calls lost whatever the load (loss)
	critArrivals, critRejected             int
	rtts                                   []int64
	limits                                 []int // the limit at every 10 ms of virtual time
	nextProbe                              int64
}

func newSim(t testing.TB, c Config, capacity int, base time.Duration, seed uint64) *sim {
	t.Helper()
	if israce.Enabled {
		// The simulation runs on one goroutine and is deterministic: the
		// race detector has nothing to find and makes it 20× slower.
		t.Skip("single-goroutine deterministic simulation; run without -race")
	}
	if c.Ticker == nil {
		c.Ticker = rampart.NewManualTicker(0)
	}
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	l.seed = uint32(seed) // Acquire's sampling picks: deterministic too
	tk, _ := c.Ticker.(*rampart.ManualTicker)
	s := &sim{l: l, tk: tk, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), capacity: capacity, base: int64(base)}
	heap.Push(&s.events, simEvent{at: 0, kind: 0})
	return s
}

func (s *sim) service() int64 {
	return int64(float64(s.base) * (0.9 + 0.2*s.rng.Float64()))
}

func (s *sim) start(i int) {
	s.busy++
	heap.Push(&s.events, simEvent{at: s.now + s.service(), kind: 1, req: i})
}

// run advances the simulation by d with the current parameters, resetting
// the phase measurements first.
func (s *sim) run(d time.Duration) {
	s.arrivals, s.rejected, s.completed, s.dropped, s.lost = 0, 0, 0, 0, 0
	s.critArrivals, s.critRejected = 0, 0
	s.rtts = s.rtts[:0]
	s.limits = s.limits[:0]
	end := s.now + int64(d)
	for len(s.events) > 0 && s.events[0].at <= end {
		ev := heap.Pop(&s.events).(simEvent)
		s.now = ev.at
		for s.nextProbe <= s.now {
			s.limits = append(s.limits, s.l.Limit())
			s.nextProbe += int64(10 * time.Millisecond)
		}
		switch ev.kind {
		case 0:
			s.arrivals++
			var tok Permit
			var ok bool
			if s.sampled {
				s.tk.Set(s.now)
			}
			if s.critical > 0 {
				p := 1
				if s.rng.Float64() < s.critical {
					p = 0
					s.critArrivals++
				}
				if s.sampled {
					tok, ok = admitted(s.l.AcquirePartition(p))
				} else {
					tok, ok = admitted(s.l.AcquirePartitionAt(s.now, p))
				}
				if !ok && p == 0 {
					s.critRejected++
				}
			} else if s.sampled {
				tok, ok = admitted(s.l.Acquire())
			} else {
				tok, ok = admitted(s.l.AcquireAt(s.now))
			}
			if ok {
				var i int
				if n := len(s.free); n > 0 {
					i = s.free[n-1]
					s.free = s.free[:n-1]
				} else {
					i = len(s.reqs)
					s.reqs = append(s.reqs, simReq{})
				}
				s.reqs[i] = simReq{tok: tok, arrive: s.now}
				if s.loss > 0 && s.rng.Float64() < s.loss { // drawn only when set: other runs keep their random stream
					heap.Push(&s.events, simEvent{at: s.now + s.lossAfter, kind: 2, req: i})
				} else if s.busy < s.capacity {
					s.start(i)
				} else {
					s.queue = append(s.queue, i)
				}
			} else {
				s.rejected++
			}
			gap := int64(s.rng.ExpFloat64() / s.rate * 1e9)
			heap.Push(&s.events, simEvent{at: s.now + max(gap, 1), kind: 0})
		case 1:
			s.busy--
			r := s.reqs[ev.req]
			s.free = append(s.free, ev.req)
			rtt := s.now - r.arrive
			o := rampart.Success
			if s.timeout > 0 && rtt > s.timeout {
				s.dropped++
				o = rampart.Failure
			} else {
				s.completed++
				s.rtts = append(s.rtts, rtt)
				if s.onComplete != nil {
					s.onComplete(rtt)
				}
			}
			if s.sampled {
				s.tk.Set(s.now)
				s.l.Release(r.tok, o)
			} else {
				s.l.ReleaseAt(r.tok, s.now, o)
			}
			for s.busy < s.capacity && len(s.queue) > 0 {
				i := s.queue[0]
				s.queue = s.queue[1:]
				s.start(i)
			}
		case 2:
			r := s.reqs[ev.req]
			s.free = append(s.free, ev.req)
			s.dropped++
			s.lost++
			if s.sampled {
				s.tk.Set(s.now)
				s.l.Release(r.tok, rampart.Failure)
			} else {
				s.l.ReleaseAt(r.tok, s.now, rampart.Failure)
			}
		}
	}
	s.now = end
}

// goodput is the completed calls of the last phase as a fraction of what
// the server could complete in d.
func (s *sim) goodput(d time.Duration) float64 {
	return float64(s.completed) / (d.Seconds() * float64(s.capacity) / (float64(s.base) / 1e9))
}

func (s *sim) p99() time.Duration {
	if len(s.rtts) == 0 {
		return 0
	}
	r := slices.Clone(s.rtts)
	slices.Sort(r)
	return time.Duration(r[len(r)*99/100])
}

// meanLimit is the mean of the sampled limits over the last frac of the phase.
func (s *sim) meanLimit(frac float64) float64 {
	ls := s.limits[int(float64(len(s.limits))*(1-frac)):]
	sum := 0
	for _, v := range ls {
		sum += v
	}
	return float64(sum) / float64(max(len(ls), 1))
}

// settle returns the virtual time after which the limit, averaged over
// each second, stayed within ±tol of target until the end of the phase (-1
// if the last second is outside). Averaging over a second smooths out the
// baseline probes (the limit is held low on purpose for a few windows).
func (s *sim) settle(target, tol float64) time.Duration {
	const perSecond = 100 // samples are 10 ms apart
	last := -1
	for i := 0; i+perSecond <= len(s.limits); i += perSecond {
		sum := 0
		for _, v := range s.limits[i : i+perSecond] {
			sum += v
		}
		if m := float64(sum) / perSecond; math.Abs(m-target) > tol*target {
			last = i / perSecond
		}
	}
	if (last+1)*perSecond >= len(s.limits) {
		return -1
	}
	return time.Duration(last+1) * time.Second
}

// inBand returns the fraction of the 1-s means of the last d within ±tol of
// target.
func (s *sim) inBand(target, tol float64, d time.Duration) float64 {
	const perSecond = 100
	secs := int(d / time.Second)
	in := 0
	for k := range secs {
		i := len(s.limits) - (k+1)*perSecond
		sum := 0
		for _, v := range s.limits[i : i+perSecond] {
			sum += v
		}
		if math.Abs(float64(sum)/perSecond-target) <= tol*target {
			in++
		}
	}
	return float64(in) / float64(secs)
}

func (s *sim) minMax() (int, int) { return slices.Min(s.limits), slices.Max(s.limits) }

const (
	simCap  = 50
	simBase = 10 * time.Millisecond
	// simThroughput is the server's capacity in calls per second.
	simThroughput = simCap / 0.010
)

func simConfig(alg Algorithm, initial int) Config {
	return Config{
		Algorithm:    alg,
		InitialLimit: initial,
		MaxLimit:     2000,
		Window:       100 * time.Millisecond,
		Ticker:       rampart.NewManualTicker(0), // New starts the first window at the ticker's now
	}
}

// unloadedP99 measures the p99 latency at 30 % load without a limit that
// matters.
func unloadedP99(t *testing.T) time.Duration {
	s := newSim(t, Config{Algorithm: Vegas{}, InitialLimit: 1000, MinLimit: 1000, MaxLimit: 1000}, simCap, simBase, 1)
	s.rate = 0.3 * simThroughput
	s.run(5 * time.Second)
	return s.p99()
}

// simModes runs f as two subtests of name: "every" (AcquireAt/Release with the
// event's time: every call timed) and "sampled" (Acquire/Release on the manual
// ticker: the limiter's RTT sampling; with the 100 ms windows of simConfig
// and a few hundred calls per window the stride mostly stays 1, so both
// modes agree closely: TestSimSampling covers long windows).
func simModes(t *testing.T, name string, f func(t *testing.T, sampled bool)) {
	for _, m := range []struct {
		name    string
		sampled bool
	}{{"every", false}, {"sampled", true}} {
		t.Run(name+"/"+m.name, func(t *testing.T) { f(t, m.sampled) })
	}
}

var delayAlgorithms = []struct {
	name string
	alg  Algorithm
}{
	{"Vegas", Vegas{}},
	{"Gradient2", Gradient2{}},
}

// TestSimConvergence: from a limit ten times too low and ten times too high,
// the limit settles within ±25 % of the capacity under 3× overload.
func TestSimConvergence(t *testing.T) {
	for _, a := range delayAlgorithms {
		for _, initial := range []int{5, 500} {
			simModes(t, a.name+"/"+itoa(initial), func(t *testing.T, sampled bool) {
				s := newSim(t, simConfig(a.alg, initial), simCap, simBase, 2)
				s.sampled = sampled
				s.rate = 3 * simThroughput
				const d = 30 * time.Second
				s.run(d)
				mean := s.meanLimit(0.5)
				settle := s.settle(simCap, 0.25)
				lo, hi := s.minMax()
				t.Logf("initial %d: mean limit over last 15 s %.1f (capacity %d), 1-s means within ±25%% from %v on, %.0f%% of the last 20 s in band, range [%d, %d]",
					initial, mean, simCap, settle, 100*s.inBand(simCap, 0.25, 20*time.Second), lo, hi)
				if math.Abs(mean-simCap) > 0.25*simCap {
					t.Errorf("mean limit %.1f not within ±25%% of %d", mean, simCap)
				}
				if in := s.inBand(simCap, 0.25, 20*time.Second); in < 0.8 {
					t.Errorf("only %.0f%% of the last 20 s within ±25%% (settle %v)", 100*in, settle)
				}
			})
		}
	}
}

// TestSimOverload: under 3× overload goodput stays ≥ 85 % of capacity and
// the p99 of admitted calls ≤ 2× the unloaded p99.
func TestSimOverload(t *testing.T) {
	unloaded := unloadedP99(t)
	for _, a := range delayAlgorithms {
		simModes(t, a.name, func(t *testing.T, sampled bool) {
			s := newSim(t, simConfig(a.alg, 20), simCap, simBase, 3)
			s.sampled = sampled
			s.rate = 3 * simThroughput
			s.run(10 * time.Second) // warm up
			const d = 30 * time.Second
			s.run(d)
			g, p := s.goodput(d), s.p99()
			t.Logf("3x overload: goodput %.1f%% of capacity, p99 %v (unloaded p99 %v, ratio %.2f), mean limit %.1f, rejected %.1f%%",
				100*g, p, unloaded, float64(p)/float64(unloaded), s.meanLimit(1), 100*float64(s.rejected)/float64(s.arrivals))
			if g < 0.85 {
				t.Errorf("goodput %.3f < 0.85", g)
			}
			if p > 2*unloaded {
				t.Errorf("p99 %v > 2 × unloaded %v", p, unloaded)
			}
		})
	}
}

// TestSimCapacityDoubles: when the server's capacity doubles, the limit
// follows it.
func TestSimCapacityDoubles(t *testing.T) {
	for _, a := range delayAlgorithms {
		simModes(t, a.name, func(t *testing.T, sampled bool) {
			s := newSim(t, simConfig(a.alg, 20), simCap, simBase, 4)
			s.sampled = sampled
			s.rate = 6 * simThroughput // 3× the doubled capacity
			s.run(20 * time.Second)
			before := s.meanLimit(0.5)
			s.capacity = 2 * simCap
			const d = 30 * time.Second
			s.run(d)
			after := s.meanLimit(0.5)
			settle := s.settle(2*simCap, 0.25)
			t.Logf("capacity %d -> %d: mean limit %.1f -> %.1f, 1-s means within ±25%% from %v on, goodput %.1f%%",
				simCap, 2*simCap, before, after, settle, 100*s.goodput(d))
			if math.Abs(after-2*simCap) > 0.25*2*simCap {
				t.Errorf("limit %.1f did not follow capacity %d", after, 2*simCap)
			}
		})
	}
}

// TestSimRecoversAfterOverload: a latency spike (the server slows down 20×
// for 10 s) drives the limit down; once it ends, the limit climbs back
// instead of sticking at the minimum (a failure mode reported against
// platinummonkey/go-concurrency-limits).
func TestSimRecoversAfterOverload(t *testing.T) {
	for _, a := range append(delayAlgorithms, struct {
		name string
		alg  Algorithm
	}{"AIMD", AIMD{Timeout: 2 * simBase}}) {
		simModes(t, a.name, func(t *testing.T, sampled bool) {
			s := newSim(t, simConfig(a.alg, 20), simCap, simBase, 5)
			s.sampled = sampled
			s.rate = 3 * simThroughput
			s.run(15 * time.Second)
			s.base = 20 * int64(simBase)
			s.capacity = 5
			s.run(10 * time.Second)
			during := s.meanLimit(0.5)
			dlo, _ := s.minMax()
			s.base = int64(simBase)
			s.capacity = simCap
			s.run(30 * time.Second)
			after := s.meanLimit(0.5)
			lo, hi := s.minMax()
			t.Logf("overload: mean limit %.1f (min %d); after: mean %.1f, range [%d, %d]", during, dlo, after, lo, hi)
			if after < 0.75*simCap {
				t.Errorf("limit %.1f stuck low after the overload ended", after)
			}
			if hi > 2000 || lo < 1 {
				t.Errorf("limit left [min, max]: [%d, %d]", lo, hi)
			}
		})
	}
}

// TestSimAIMDBand: AIMD with a client timeout of 2× the base latency grows
// the limit until calls time out (queueing delay ≈ the timeout, i.e. a limit
// of about 2·capacity) and then oscillates below it in its documented band.
func TestSimAIMDBand(t *testing.T) {
	simModes(t, "AIMD", testSimAIMDBand)
}

func testSimAIMDBand(t *testing.T, sampled bool) {
	s := newSim(t, simConfig(AIMD{}, 20), simCap, simBase, 6)
	s.sampled = sampled
	s.timeout = int64(2 * simBase)
	s.rate = 3 * simThroughput
	s.run(30 * time.Second)
	const d = 30 * time.Second
	s.run(d)
	lo, hi := s.minMax()
	t.Logf("AIMD: limit range [%d, %d], mean %.1f, goodput %.1f%%, drops %d of %d",
		lo, hi, s.meanLimit(1), 100*s.goodput(d), s.dropped, s.completed+s.dropped)
	if lo < simCap || hi > 2*simCap*11/10 {
		t.Errorf("AIMD limit range [%d, %d] outside [%d, %d]", lo, hi, simCap, 2*simCap*11/10)
	}
}

// dropAlgorithms are the three built-in algorithms as the drop-rate rows
// run them: AIMD, loss-based, with a client timeout of 2× the base latency
// (its load signal: calls that queue past it are released as Failure, as in
// TestSimAIMDBand).
var dropAlgorithms = []struct {
	name    string
	alg     Algorithm
	timeout time.Duration
}{
	{"Vegas", Vegas{}, 0},
	{"Gradient2", Gradient2{}, 0},
	{"AIMD", AIMD{}, 2 * simBase},
}

// simLossAfter is the client timeout of a call lost whatever the load.
const simLossAfter = 10 * simBase

// TestSimLoadIndependentDropsKeepGoodput: calls lost whatever the load
// (0.05 %, 0.2 % and 1 % of the admitted calls never reach the server and
// are released as Failure after a client timeout of 10× the base latency)
// are not overload: at 80 % load and at 3× overload each algorithm keeps its
// goodput within 5 % of the same run without losses. (Reacting to any drop
// in a window, Gradient2 sat at 2·QueueSize = 8 and AIMD and Vegas near
// their minimum.) The last row is one long timeout every few windows:
// 0.05 % of the calls time out after 3000× the base latency (30 s, a
// client's timeout among 10 ms calls), after a warm-up long enough for
// those timeouts to be released throughout the measured run. (Gradient2
// weighing a drop by its RTT, one such timeout weighed as 3000 calls and
// collapsed the limit: TestGradient2OneLongTimeoutKeepsLimit.) The row runs
// with baseline probes: the calls hung in flight when a probe drains are
// counted as stuck (its limit of 1 is held on top of them), and windows
// that no release closes are closed by the rejections
// (TestProbeEndsWhileLongCallHoldsItsSlot); waiting for the hung calls to
// drain cost 27 % of the goodput.
func TestSimLoadIndependentDropsKeepGoodput(t *testing.T) {
	for _, a := range dropAlgorithms {
		for _, load := range []float64{0.8, 3} {
			simModes(t, a.name+"/load"+itoa(int(100*load))+"%", func(t *testing.T, sampled bool) {
				var base float64
				for _, r := range []struct {
					loss        float64
					after, warm time.Duration
				}{
					{0, simLossAfter, 10 * time.Second},
					{0.0005, simLossAfter, 10 * time.Second},
					{0.002, simLossAfter, 10 * time.Second},
					{0.01, simLossAfter, 10 * time.Second},
					{0.0005, 3000 * simBase, 40 * time.Second}, // one long timeout
				} {
					s := newSim(t, simConfig(a.alg, 20), simCap, simBase, 9)
					s.sampled = sampled
					s.timeout = int64(a.timeout)
					s.loss, s.lossAfter = r.loss, int64(r.after)
					s.rate = load * simThroughput
					s.run(r.warm) // warm up
					const d = 30 * time.Second
					s.run(d)
					g := s.goodput(d)
					if r.loss == 0 {
						base = g
					}
					t.Logf("loss %.2f%% after %v: goodput %.1f%% of capacity (%.1f%% of the lossless run), mean limit %.1f, p99 %v, drops %.2f%% (lost %d, timed out %d)",
						100*r.loss, r.after, 100*g, 100*g/base, s.meanLimit(1), s.p99(), 100*float64(s.dropped)/float64(s.completed+s.dropped), s.lost, s.dropped-s.lost)
					if g < 0.95*base {
						t.Errorf("loss %.2f%% after %v: goodput %.3f < 95 %% of the lossless %.3f", 100*r.loss, r.after, g, base)
					}
				}
			})
		}
	}
}

// TestSimRealOverloadStillBacksOff: with 1 % of the calls lost whatever the
// load, a real overload still lowers every algorithm's limit. Under 3×
// overload the server's capacity falls from 50 to 10 workers for 20 s: its
// latency rises with the queue, and calls that queue past a client timeout
// of 2× the base latency are Failure, so the drop rate rises with the load.
// The limit must come down to at most 2.2× the new capacity (AIMD's band
// reaches about twice the capacity, the delay-based ones settle near it)
// while goodput stays at least 80 % of the reduced capacity (the phase
// includes the descent, whose queued calls time out), and climb back once
// capacity returns.
func TestSimRealOverloadStillBacksOff(t *testing.T) {
	for _, a := range dropAlgorithms {
		for _, loss := range []float64{0, 0.01} {
			simModes(t, a.name+"/loss"+itoa(int(100*loss))+"%", func(t *testing.T, sampled bool) {
				s := newSim(t, simConfig(a.alg, 20), simCap, simBase, 10)
				s.sampled = sampled
				s.timeout = int64(2 * simBase)
				s.loss, s.lossAfter = loss, int64(simLossAfter)
				s.rate = 3 * simThroughput
				s.run(20 * time.Second)
				before := s.meanLimit(0.5)
				const small = 10
				s.capacity = small
				const d = 20 * time.Second
				s.run(d)
				during, g := s.meanLimit(0.5), s.goodput(d)
				drops := float64(s.dropped-s.lost) / float64(s.completed+s.dropped)
				s.capacity = simCap
				s.run(20 * time.Second)
				after := s.meanLimit(0.5)
				t.Logf("capacity %d -> %d -> %d: mean limit %.1f -> %.1f -> %.1f, goodput at %d %.1f%%, timed out %.1f%%",
					simCap, small, simCap, before, during, after, small, 100*g, 100*drops)
				if during > 2.2*small {
					t.Errorf("mean limit %.1f at capacity %d: did not back off (want ≤ %.0f)", during, small, 2.2*small)
				}
				if g < 0.8 {
					t.Errorf("goodput %.3f of the reduced capacity < 0.8", g)
				}
				if after < 0.75*simCap {
					t.Errorf("limit %.1f did not climb back to capacity %d", after, simCap)
				}
			})
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestSimPriority: under 3× overload, critical traffic worth 60 % of the
// capacity with a 90 % share is admitted except while a baseline probe holds
// the whole limit low (about 4 windows in 100); batch traffic takes the rest
// of the limit and absorbs the shedding. With probes off, critical traffic is
// rejected only by its own Poisson bursts above its share (well under 1 %).
func TestSimPriority(t *testing.T) {
	for _, a := range []struct {
		name    string
		alg     Algorithm
		maxCrit float64
	}{
		{"Vegas", Vegas{}, 0.05},
		{"Gradient2", Gradient2{}, 0.05},
		{"Vegas/no-probe", Vegas{ProbeInterval: -1}, 0.01},
		{"Gradient2/no-probe", Gradient2{ProbeInterval: -1}, 0.01},
	} {
		simModes(t, a.name, func(t *testing.T, sampled bool) {
			c := simConfig(a.alg, 20)
			c.Partitions = []Partition{{Name: "critical", Share: 0.9}, {Name: "batch", Share: 0.1}}
			s := newSim(t, c, simCap, simBase, 8)
			s.sampled = sampled
			s.rate = 3 * simThroughput
			s.critical = 0.2 // 0.2 × 3 = 60 % of capacity
			s.run(10 * time.Second)
			const d = 30 * time.Second
			s.run(d)
			crit := float64(s.critRejected) / float64(s.critArrivals)
			batch := float64(s.rejected-s.critRejected) / float64(s.arrivals-s.critArrivals)
			t.Logf("priority: critical rejected %.2f%%, batch rejected %.1f%%, goodput %.1f%%, p99 %v, mean limit %.1f",
				100*crit, 100*batch, 100*s.goodput(d), s.p99(), s.meanLimit(1))
			if crit > a.maxCrit {
				t.Errorf("critical rejected %.4f > %.4f", crit, a.maxCrit)
			}
			if g := s.goodput(d); g < 0.85 {
				t.Errorf("goodput %.3f < 0.85", g)
			}
		})
	}
}

// meanProbe wraps an Algorithm and records, for every window, the ratio of
// the window's AvgRTT to the true mean RTT of every success the simulation
// completed in it (fed by sim.onComplete).
type meanProbe struct {
	alg      Algorithm
	inner    Controller
	sum, n   float64
	ratios   []float64
	minCount int64 // ratios are kept for windows of at least this many successes
}

func (p *meanProbe) Start(initial, lo, hi float64) Controller {
	p.inner = p.alg.Start(initial, lo, hi)
	return p
}

func (p *meanProbe) Update(s Sample) float64 {
	if p.n >= float64(p.minCount) && s.Count > 0 {
		p.ratios = append(p.ratios, float64(s.AvgRTT)/(p.sum/p.n))
	}
	p.sum, p.n = 0, 0
	return p.inner.Update(s)
}

func (p *meanProbe) complete(rtt int64) { p.sum += float64(rtt); p.n++ }

// TestSimSampling: with 1 s windows (5000 calls per window at C = 50, D =
// 10 ms) Acquire/Release time about one call in 8–16; the stride-weighted window
// mean stays within a fraction of a percent of the mean of every call, and
// the limit lands where timing every call puts it.
func TestSimSampling(t *testing.T) {
	for _, a := range []struct {
		name    string
		alg     Algorithm
		initial int
	}{{"Vegas", Vegas{}, 5}, {"Gradient2", Gradient2{}, 1000}} {
		t.Run(a.name, func(t *testing.T) {
			var limits [2]float64
			for i, sampled := range []bool{false, true} {
				p := &meanProbe{alg: a.alg, minCount: 1000}
				c := simConfig(p, a.initial)
				c.Window = time.Second
				s := newSim(t, c, simCap, simBase, 11)
				s.sampled = sampled
				s.onComplete = p.complete
				s.rate = 3 * simThroughput
				s.run(60 * time.Second)
				limits[i] = s.meanLimit(0.5)
				st := s.l.Stats()
				mean, sd := 0.0, 0.0
				for _, r := range p.ratios {
					mean += r
				}
				mean /= float64(len(p.ratios))
				for _, r := range p.ratios {
					sd += (r - mean) * (r - mean)
				}
				sd = math.Sqrt(sd / float64(len(p.ratios)))
				t.Logf("sampled %v: mean limit %.1f, %d windows, %.0f samples/window, final stride %d, AvgRTT / true mean %.4f (s.d. %.4f over %d windows)",
					sampled, limits[i], st.Windows, float64(st.Samples)/float64(st.Windows), st.Stride, mean, sd, len(p.ratios))
				if !sampled {
					require.InDelta(t, 1, mean, 1e-6) // integer division only
					continue
				}
				require.GreaterOrEqual(t, st.Stride, 8, "sampling is active")
				require.InDelta(t, 1, mean, 0.01, "the weighted mean is unbiased")
				require.Less(t, sd, 0.02)
			}
			require.InDelta(t, limits[0], limits[1], 0.1*limits[0], "sampled and every-call limits agree")
		})
	}
}
