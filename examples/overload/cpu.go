package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/shed"
)

// The CPU scenario: a handler that burns a fixed amount of CPU per request
// (as bench/shedcompare's server does), offered twice what the process can
// serve, measured just before each run. Unprotected, every request is
// admitted: the goroutines in flight share the cores, so every request
// gets slower as more arrive, until the clients time out. Protected, a
// pipeline whose only policy is package shed's overload shedder admits
// what the cores complete and answers the rest with a fast 503 and
// Retry-After (httpguard). Its instances are "cpu" (the pipeline) and
// "cpu-shed" (the shedder), in the group "cpu".
const groupCPU = "cpu"

// cpuWork is the handler's work: chunks of a fixed number of xorshift
// rounds, yielding between chunks as a handler that does some I/O or
// allocates would, so that the requests in flight share the Ps (processor
// sharing) and new arrivals are scheduled.
type cpuWork struct {
	chunks     int
	chunkIters int
}

var cpuSink atomic.Uint64

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

// calibrateCPU returns the work of about d of one core, whatever chunk
// (splitWork): the least of five timings of a burn, the machine being
// shared.
func calibrateCPU(d, chunk time.Duration) cpuWork {
	const n = 1_000_000
	best := time.Duration(math.MaxInt64)
	for range 5 {
		t0 := time.Now()
		cpuSink.Add(burn(n))
		best = min(best, time.Since(t0))
	}
	return splitWork(d, chunk, float64(n)/float64(max(best, 1)))
}

// splitWork is d of work at perNs burn rounds a nanosecond in ceil(d/chunk)
// equal chunks of at most chunk: the rest of 5 ms in 3 ms chunks is not
// dropped, and a chunk longer than d is cut to d.
func splitWork(d, chunk time.Duration, perNs float64) cpuWork {
	chunks := max(int((d+chunk-1)/chunk), 1)
	return cpuWork{chunks: chunks, chunkIters: max(int(perNs*float64(d)/float64(chunks)), 1)}
}

// run does the work, stopping early with ctx's error once ctx ends (the
// client gave up: a real handler's next I/O would fail the same way).
func (w cpuWork) run(ctx context.Context) error {
	var acc uint64
	for range w.chunks {
		if err := ctx.Err(); err != nil {
			return err
		}
		acc += burn(w.chunkIters)
		runtime.Gosched()
	}
	cpuSink.Add(acc)
	return nil
}

// cpuHandler serves the work: 200 once done, 500 when the request's
// context ended first.
func cpuHandler(work cpuWork) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := work.run(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// maxMeasure bounds measureCapacity, and with it -cpu-capacity.
const maxMeasure = 10 * time.Second

// measureCapacity serves h on a loopback server of its own and sends it
// requests closed-loop from 2 × GOMAXPROCS clients for d, and on until at
// least minCompletions have completed (at most maxMeasure in all): the
// requests per second the process completes now, HTTP included (what
// bench/shedcompare measures without HTTP, with GOMAXPROCS workers). No
// request is cut off: each client stops after the request it is in, and
// the rate is over the time until the last one completed, so a machine
// that gives the process little CPU reads as a low capacity, not as 0.
func measureCapacity(ctx context.Context, h http.Handler, d time.Duration) (float64, error) {
	const minCompletions = 16
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conc := 2 * runtime.GOMAXPROCS(0)
	tr := &http.Transport{MaxIdleConnsPerHost: conc, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	url := "http://" + ln.Addr().String() + "/item"
	ctx, cancel := context.WithTimeout(ctx, maxMeasure)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	more := func() bool {
		return ctx.Err() == nil && (time.Since(t0) < d || done.Load() < minCompletions)
	}
	for range conc {
		wg.Go(func() {
			for more() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(t0).Seconds(), nil
}

// cpuPhases are the CPU scenario's phases at capacity capa req/s: a
// warm-up at half of it, the overload at o.cpuLoad times it, a recovery
// at half of it.
func cpuPhases(o options, capa float64) []phase {
	rate := func(f float64) int { return max(1, int(math.Round(f*capa))) }
	ps := []phase{
		{name: "warm-up", duration: o.cpuWarmup, slowdown: 1, rate: rate(0.5)},
		{name: "overload", duration: o.cpuOverload, slowdown: 1, rate: rate(o.cpuLoad)},
		{name: "recovery", duration: o.cpuRecover, slowdown: 1, rate: rate(0.5)},
	}
	out := ps[:0]
	for _, p := range ps {
		if p.duration > 0 {
			out = append(out, p)
		}
	}
	return out
}

// runCPU runs the CPU scenario in each mode: the capacity measured, the
// phases offered at their multiples of it, the capacity measured again.
func runCPU(ctx context.Context, o options, modes []string, w io.Writer, st *status, reg *registry.Registry) ([]result, error) {
	work := calibrateCPU(o.cpuWork, o.cpuChunk)
	fmt.Fprintf(w, "\ncpu: a handler burning %s of CPU per request (%d chunks of %d rounds, yielding between them), GOMAXPROCS %d; each run offers %g× the capacity measured just before it (closed loop, %s), after a warm-up at half of it (%s, overload %s, recovery %s)\n",
		o.cpuWork, work.chunks, work.chunkIters, runtime.GOMAXPROCS(0), o.cpuLoad, o.cpuCapacity, o.cpuWarmup, o.cpuOverload, o.cpuRecover)
	var results []result
	for _, m := range modes {
		capa, err := measureCapacity(ctx, cpuHandler(work), o.cpuCapacity)
		if err != nil {
			return results, err
		}
		fmt.Fprintf(w, "cpu/%s: capacity %.0f req/s\n", m, capa)
		sc := scenario{name: "cpu", phases: cpuPhases(o, capa), capacity: capa, build: func(mode string) (*target, error) {
			return cpuTarget(mode, work, reg)
		}}
		r, err := runMode(ctx, o, sc, m, w, st, reg)
		if err != nil {
			return results, err
		}
		if r.capAfter, err = measureCapacity(ctx, cpuHandler(work), o.cpuCapacity); err != nil {
			return results, err
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	return results, nil
}

// cpuTarget is the CPU scenario's server in mode: the bare handler, or
// behind a pipeline with the shedder (defaults but its name), registered
// in reg.
func cpuTarget(mode string, work cpuWork, reg *registry.Registry) (*target, error) {
	t := &target{handler: cpuHandler(work), snapshot: func(*point) {}, progress: func() string { return "" }}
	if mode != "protected" {
		return t, nil
	}
	s, err := shed.New(shed.Config{Name: "cpu"})
	if err != nil {
		return nil, err
	}
	if err := reg.Add("cpu-shed", s, groupCPU); err != nil {
		return nil, err
	}
	p, err := registry.Pipeline(reg, "cpu", pipeline.Config{Name: "cpu", Shed: s, CountStats: true}, groupCPU)
	if err != nil {
		return nil, err
	}
	if t.handler, err = httpguard.NewHandler(t.handler, httpguard.ServerConfig{Pipeline: p}); err != nil {
		return nil, err
	}
	t.snapshot = func(pt *point) {
		st := s.Stats()
		pt.ShedState, pt.ShedInFlight = "released", int64(st.InFlight)
		if st.Overloaded {
			pt.ShedState, pt.ShedLimit = "engaged", int64(st.Limit)
		}
	}
	t.progress = func() string {
		st := s.Stats()
		if !st.Overloaded {
			return "shed: released"
		}
		return fmt.Sprintf("shed: engaged, limit %d", st.Limit)
	}
	t.after = func(ph phase) string {
		if ph.name != "overload" {
			return ""
		}
		st := s.Stats()
		return fmt.Sprintf("the shedder at the end of the overload: overloaded %v (engaged %d times), cap %d (maxPass %.0f/s × minRT %v), limit %d, rejected %d of %d, last signals: sched p99 %v, cpu %.2f, runnable/P %.1f, trigger %v",
			st.Overloaded, st.Overloads, st.Cap, st.MaxPass, st.MinRT.Round(10*time.Microsecond), st.Limit, st.Rejected, st.Admitted+st.Rejected,
			st.Signals.SchedLatency, st.Signals.CPU, st.Signals.Runnable, st.Trigger)
	}
	return t, nil
}

// printCPUTable prints one row per mode and phase of the CPU scenario:
// the capacity measured before and after the run, the offered and sent
// rates, the goodput (successes completed while the phase was offered,
// whichever phase sent them) also against the capacity before the run,
// what became of the requests the phase sent (ok, shed, failed), the
// successes' latency and the dropped iterations; then the shedder's state
// at the end of the overload.
func printCPUTable(w io.Writer, o options, results []result) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| cpu mode | phase | capacity/s before, after | offered/s | sent/s | goodput/s | goodput / capacity | ok % | shed % | failed % | p50 ms | p99 ms | max ms | server p99 ms | dropped |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	pct := func(n, of int64) float64 {
		if of == 0 {
			return 0
		}
		return 100 * float64(n) / float64(of)
	}
	for _, r := range results {
		for _, p := range r.phases {
			secs := p.phase.duration.Seconds()
			sent := p.sent.Load()
			good := float64(p.okDuring.Load()) / secs
			p50, p99, mx := p.percentiles()
			fmt.Fprintf(w, "| %s | %s | %.0f, %.0f | %.0f | %.0f | %.0f | %.1f %% | %.1f | %.1f | %.1f | %s | %s | %s | %s | %d |\n",
				r.mode, p.phase.name, r.capacity, r.capAfter, float64(p.offered)/secs, float64(sent)/secs, good,
				100*good/max(r.capacity, 1), pct(p.ok.Load(), sent), pct(p.shed.Load(), sent), pct(p.failed.Load(), sent),
				ms(p50), ms(p99), ms(mx), ms(p.serverP99()), p.dropped.Load())
		}
	}
	fmt.Fprintln(w)
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(w, "cpu/%s: %s\n", r.mode, n)
		}
		for _, p := range r.phases {
			if f := p.failed.Load(); f > 0 {
				fmt.Fprintf(w, "failed in cpu/%s/%s: %d no response (client timeout %s or connection error), %d other\n",
					r.mode, p.phase.name, p.errs.Load(), o.clientTimeout, f-p.errs.Load())
			}
		}
	}
	fmt.Fprintln(w, "capacity: the requests per second the server completed closed-loop just before (and after) the run. goodput: the successes")
	fmt.Fprintln(w, "completed while the phase was offered (whichever phase sent them), per second, and against the capacity before the run;")
	fmt.Fprintln(w, "ok, shed (503 with Retry-After), failed (client timeout, 5xx) and the latencies are those of the requests the phase sent.")
	fmt.Fprintln(w, "On a machine shared with other work the capacity moves within a run: compare the rows of one run with each other.")
}
