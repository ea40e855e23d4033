package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"
	"github.com/zeromicro/go-zero/core/logx"
	"github.com/zeromicro/go-zero/core/stat"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/shed"
)

// admitter is one shedder under test: allow admits a call or refuses it;
// done ends an admitted call that completed.
type admitter interface {
	allow() (done func(), ok bool)
}

// none admits every call: the unprotected server.
type none struct{}

func (none) allow() (func(), bool) { return func() {}, true }

// rampartShed is rampart's shed.Shedder with its defaults.
type rampartShed struct{ s *shed.Shedder }

func newRampart(ignore shed.Signal, sample time.Duration) (admitter, func() string) {
	s, err := shed.New(shed.Config{Name: "bench", Ignore: ignore, SampleInterval: sample})
	if err != nil {
		panic(err)
	}
	stats := func() string {
		st := s.Stats()
		return fmt.Sprintf("overloaded %v (engaged %d times), cap %d (maxPass %.0f/s × minRT %v), limit %d, sampling stride %d, last signals: sched p99 %v, cpu %.2f, runnable/P %.1f, trigger %v",
			st.Overloaded, st.Overloads, st.Cap, st.MaxPass, st.MinRT.Round(10*time.Microsecond), st.Limit, st.Stride,
			st.Signals.SchedLatency, st.Signals.CPU, st.Signals.Runnable, st.Trigger)
	}
	return rampartShed{s}, stats
}

func (r rampartShed) allow() (func(), bool) {
	p, err := r.s.Acquire()
	if err != nil {
		return nil, false
	}
	return func() { r.s.Release(p, rampart.Success) }, true
}

// goZero is go-zero's core/load adaptive shedder with its defaults.
type goZero struct{ s load.Shedder }

func newGoZero() admitter {
	return goZero{load.NewAdaptiveShedder()}
}

// goZeroDetail is go-zero's CPU reading (‰ of the cores, a moving average
// refreshed every 250 ms), the trigger of its shedder at 900.
func goZeroDetail() string { return fmt.Sprintf("cpu %d‰ (sheds from 900‰)", stat.CpuUsage()) }

func (g goZero) allow() (func(), bool) {
	p, err := g.s.Allow()
	if err != nil {
		return nil, false
	}
	return p.Pass, true
}

// aegisBBR is Kratos's aegis ratelimit/bbr limiter with its defaults.
type aegisBBR struct{ l *bbr.BBR }

func newAegis() (admitter, func() string) {
	l := bbr.NewLimiter()
	return aegisBBR{l}, func() string {
		st := l.Stat()
		return fmt.Sprintf("cpu %d‰ (sheds from 800‰), maxInFlight %d (maxPass %d per bucket × minRT %d ms), inFlight %d",
			st.CPU, st.MaxInFlight, st.MaxPass, st.MinRt, st.InFlight)
	}
}

func (a aegisBBR) allow() (func(), bool) {
	done, err := a.l.Allow()
	if err != nil {
		return nil, false
	}
	return func() { done(ratelimit.DoneInfo{}) }, true
}

func init() {
	// go-zero logs every drop and a usage line a minute; the scenario
	// measures, it does not log.
	load.DisableLog()
	logx.Disable()
}

// work is the CPU-bound handler: chunks of a fixed number of xorshift
// rounds, yielding between chunks as a handler that does some I/O or
// allocates would, so that the goroutines in flight share the Ps
// (processor sharing) and new arrivals get scheduled.
type work struct {
	chunks     int
	chunkIters int
}

var sink atomic.Uint64

// burn runs n xorshift rounds.
func burn(n int) uint64 {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// run does the work, stopping early (false) once stop is set.
func (w work) run(stop *atomic.Bool) bool {
	var acc uint64
	for range w.chunks {
		if stop.Load() {
			return false
		}
		acc += burn(w.chunkIters)
		runtime.Gosched()
	}
	sink.Add(acc)
	return true
}

// calibrate returns the work of about d of one core, in chunks of chunk:
// the least of five timings of a burn, the machine being shared.
func calibrate(d, chunk time.Duration) work {
	const n = 2_000_000
	best := time.Duration(math.MaxInt64)
	for range 5 {
		t0 := time.Now()
		sink.Add(burn(n))
		best = min(best, time.Since(t0))
	}
	perChunk := int(float64(n) * float64(chunk) / float64(best))
	return work{chunks: max(int(d/chunk), 1), chunkIters: max(perChunk, 1)}
}

// capacity measures the completions per second of GOMAXPROCS workers
// running the work back to back for d: what the process can serve now.
func capacity(w work, d time.Duration) float64 {
	var stop atomic.Bool
	var done atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for !stop.Load() {
				if w.run(&stop) {
					done.Add(1)
				}
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(done.Load()) / time.Since(t0).Seconds()
}

// result is one run's figures.
type result struct {
	name              string
	offered           float64 // arrivals per second
	p50, p99, p99Tail time.Duration
	p99BySecond       []time.Duration // the p99 of the calls that ended in each second of the measured phase (the cut-off ones in the last)
	goodput           float64         // successes per second
	shed              float64         // the share of arrivals rejected
	unfinished        int             // admitted calls cut off at the end of the run
	capacity          float64         // the capacity the goodput is compared to: the mean of the measurements before and after
	capBefore         float64
	capAfter          float64
	detail            string
}

// phase is a stretch of open-loop arrivals at a rate.
type phase struct {
	rate    float64 // arrivals per second
	d       time.Duration
	measure bool
}

// openLoop offers the phases' arrivals to a (open loop: an arrival is
// sent at its time whatever the server does, one goroutine each), runs the
// work for the admitted ones and returns the figures of the measured
// phase. Latency runs from the arrival's scheduled time to the end of its
// work. When the last phase ends, calls still in flight are cut off and
// counted with their latency so far (a lower bound), so a run whose queue
// grows shows it.
func openLoop(name string, a admitter, w work, phases []phase, capa float64, atEnd func() string) result {
	type rec struct {
		arrival time.Duration // from the start of the measured phase
		lat     time.Duration
		state   uint8 // 0: not yet ended, 1: success, 2: rejected, 3: cut off
	}
	var total float64
	for _, p := range phases {
		if p.measure {
			total += p.rate * p.d.Seconds()
		}
	}
	recs := make([]rec, int(total)+16)
	var next atomic.Int64 // index of the next measured arrival
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	var mStart time.Time
	var mEnd time.Duration
	phaseStart := start
	const tick = 500 * time.Microsecond
	for _, p := range phases {
		if p.measure {
			mStart = phaseStart
		}
		interval := time.Duration(float64(time.Second) / p.rate)
		due := phaseStart
		end := phaseStart.Add(p.d)
		for due.Before(end) {
			now := time.Now()
			for !due.After(now) && due.Before(end) {
				at := due
				due = due.Add(interval)
				var r *rec
				if p.measure {
					if i := next.Add(1) - 1; int(i) < len(recs) {
						r = &recs[i]
						r.arrival = at.Sub(mStart)
					}
				}
				wg.Go(func() {
					doneFn, ok := a.allow()
					if !ok {
						if r != nil {
							r.state = 2
						}
						return
					}
					if !w.run(&stop) {
						if r != nil {
							r.lat, r.state = time.Since(at), 3
						}
						return
					}
					doneFn()
					if r != nil {
						r.lat, r.state = time.Since(at), 1
					}
				})
			}
			time.Sleep(tick)
		}
		phaseStart = end
		if p.measure {
			mEnd = end.Sub(mStart)
		}
	}
	var detail string
	if atEnd != nil {
		detail = atEnd() // the shedder's state at the end of the overload, before the calls in flight are cut off
	}
	stop.Store(true)
	wg.Wait()

	n := min(int(next.Load()), len(recs))
	var lats, tail []time.Duration
	bySecond := make([][]time.Duration, int(math.Ceil(mEnd.Seconds())))
	add := func(arrival, l time.Duration) {
		lats = append(lats, l)
		if arrival >= mEnd/2 {
			tail = append(tail, l)
		}
		i := min(int((arrival+l)/time.Second), len(bySecond)-1) // by when it ended: a growing queue shows as a growing p99
		bySecond[i] = append(bySecond[i], l)
	}
	var ok, rejected, cut int
	for _, r := range recs[:n] {
		switch r.state {
		case 1, 3:
			add(r.arrival, r.lat)
			if r.state == 1 {
				ok++
			} else {
				cut++
			}
		case 2:
			rejected++
		default: // never started its work before the end: cut off at the end
			cut++
			add(r.arrival, mEnd-r.arrival)
		}
	}
	res := result{name: name, offered: float64(n) / mEnd.Seconds(), capacity: capa, unfinished: cut, detail: detail}
	res.p50, res.p99 = quantile(lats, 0.5), quantile(lats, 0.99)
	res.p99Tail = quantile(tail, 0.99)
	for _, ls := range bySecond {
		res.p99BySecond = append(res.p99BySecond, quantile(ls, 0.99))
	}
	res.goodput = float64(ok) / mEnd.Seconds()
	if n > 0 {
		res.shed = float64(rejected) / float64(n)
	}
	return res
}

// setCapacity records the capacity measured before and after the run; the
// goodput is compared to their mean (the CPU a process gets on a shared
// machine moves during a run).
func (r *result) setCapacity(before, after float64) {
	r.capBefore, r.capAfter, r.capacity = before, after, (before+after)/2
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(math.Ceil(q*float64(len(ds))))-1, len(ds)-1)]
}

// config is one comparison's settings.
type config struct {
	work     time.Duration          // the handler's CPU time on an idle core
	chunk    time.Duration          // between two yields
	load     float64                // offered load, as a multiple of the measured capacity
	warmup   time.Duration          // at half the capacity, before the measured phase
	duration time.Duration          // the measured phase
	ignore   shed.Signal            // rampart signals to ignore
	sample   time.Duration          // a second rampart row with this SampleInterval, when set
	only     string                 // run only the cases whose name contains it (the unloaded row always runs)
	measure  time.Duration          // the closed-loop capacity measurement before each row
	rows     func(config) []shedRow // the rows after the unloaded one; nil: shedRows
}

// shedRow is one shedder's row of the comparison: build returns its
// admitter and the state to report at the end of the overload (nil: none).
type shedRow struct {
	name  string
	build func() (admitter, func() string)
}

// shedRows returns the rows after the unloaded one, in order. Each row's
// shedder is built by compare just before the row runs, never here.
func shedRows(c config) []shedRow {
	rows := []shedRow{
		{"no shedding", func() (admitter, func() string) { return none{}, nil }},
		{"rampart shed", func() (admitter, func() string) { return newRampart(c.ignore, 0) }},
	}
	if c.sample > 0 {
		rows = append(rows, shedRow{fmt.Sprintf("rampart shed, %v samples", c.sample),
			func() (admitter, func() string) { return newRampart(c.ignore, c.sample) }})
	}
	return append(rows,
		shedRow{"go-zero core/load", func() (admitter, func() string) { return newGoZero(), goZeroDetail }},
		shedRow{"aegis bbr", newAegis})
}

// compare runs the scenario for each shedder and writes the table to out.
func compare(c config, out io.Writer, progress io.Writer) ([]result, error) {
	if c.load <= 0 || c.duration <= 0 || c.work <= 0 || c.chunk <= 0 || c.measure <= 0 {
		return nil, errors.New("load, duration, work, chunk and the capacity measurement must be positive")
	}
	w := calibrate(c.work, c.chunk)
	fmt.Fprintf(progress, "work %v in %d chunks of %d rounds; GOMAXPROCS %d\n", c.work, w.chunks, w.chunkIters, runtime.GOMAXPROCS(0))
	// Each row measures the capacity just before it and offers its load
	// against that: on a shared machine the CPU the process gets moves
	// between rows.
	var results []result
	capa := capacity(w, c.measure)
	base := openLoop("unloaded (½ capacity, no shedding)", none{}, w, []phase{{rate: capa / 2, d: c.duration, measure: true}}, capa, nil)
	base.setCapacity(capa, capacity(w, c.measure))
	results = append(results, base)
	fmt.Fprintf(progress, "%s done\n", base.name)
	rows := shedRows
	if c.rows != nil {
		rows = c.rows
	}
	for _, k := range rows(c) {
		if c.only != "" && !strings.Contains(k.name, c.only) {
			continue
		}
		capa := capacity(w, c.measure)
		// Built just before its row: a RuntimeSource's first reading is the
		// change since it was built, which must not span the rows before.
		a, detail := k.build()
		half := phase{rate: capa / 2, d: c.warmup}
		over := phase{rate: capa * c.load, d: c.duration, measure: true}
		r := openLoop(k.name, a, w, []phase{half, over}, capa, detail)
		r.setCapacity(capa, capacity(w, c.measure))
		results = append(results, r)
		fmt.Fprintf(progress, "%s done\n", k.name)
		runtime.GC()
	}
	writeTable(out, c, results)
	return results, nil
}

func writeTable(out io.Writer, c config, rs []result) {
	base := rs[0].p99
	fmt.Fprintf(out, "CPU-bound handler of %v (yielding every %v), GOMAXPROCS %d, capacity measured before and after each row (closed loop, %v each; the goodput is compared to their mean); "+
		"%v at ½ capacity, then %.1f× capacity for %v, open-loop arrivals (measured: the second phase; "+
		"the unloaded row: %v at ½ capacity). Latency from the arrival's scheduled time to the end of its work; "+
		"calls still in flight at the end are cut off and counted at their latency so far; p99 by second groups the calls by the second they ended in.\n\n",
		c.work, c.chunk, runtime.GOMAXPROCS(0), c.measure, c.warmup, c.load, c.duration, c.duration)
	fmt.Fprintln(out, "| shedder | capacity/s before, after | offered/s | p50 | p99 | p99, 2nd half | p99 / unloaded p99 | p99 by second | goodput/s | goodput / capacity | shed | cut off |")
	fmt.Fprintln(out, "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, r := range rs {
		var by []string
		for _, d := range r.p99BySecond {
			by = append(by, round(d).String())
		}
		fmt.Fprintf(out, "| %s | %.0f, %.0f | %.0f | %v | %v | %v | %.2f | %s | %.0f | %.1f %% | %.1f %% | %d |\n",
			r.name, r.capBefore, r.capAfter, r.offered, round(r.p50), round(r.p99), round(r.p99Tail),
			float64(r.p99)/float64(base), strings.Join(by, ", "), r.goodput, 100*r.goodput/r.capacity, 100*r.shed, r.unfinished)
	}
	for _, r := range rs {
		if r.detail != "" {
			fmt.Fprintf(out, "\n%s, at the end of the overload: %s\n", r.name, r.detail)
		}
	}
}

// round rounds d for the table: to 10 µs under 10 ms, to 0.1 ms under 1 s,
// to 10 ms beyond.
func round(d time.Duration) time.Duration {
	switch {
	case d < 10*time.Millisecond:
		return d.Round(10 * time.Microsecond)
	case d < time.Second:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Millisecond)
}
