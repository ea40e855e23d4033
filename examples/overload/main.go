// Command overload puts an API sized for 10k req/s, with a bounded database
// pool, under overload on one machine: the API must stay inside its latency
// objective by shedding early. It runs first unprotected, then protected by
// rampart, and prints what happened to each phase's requests. Then it runs
// a second scenario, a CPU-bound handler offered twice its capacity,
// unprotected and then protected by package shed. It is `make demo`.
//
// A real net/http server on 127.0.0.1 (an ephemeral port) serves a simulated
// API: 90 % reads and 10 % writes, 80 % of reads served from cache, about
// 50 ms in the API on average, and a database with a pool of 40 connections
// at about 10 ms per visit (waiting for a connection counts in the latency).
// An open-model load generator in the same process offers a constant arrival
// rate (like k6's constant-arrival-rate executor), whatever the responses
// do, through phases: warm-up, steady, a database slowdown (every visit 4×
// slower) and recovery. One progress line per second; a table at the end.
//
// Unprotected, every request is admitted and waits for a connection as long
// as its client does. Protected (guard.go), rampart adds an admission
// bulkhead and an end-to-end deadline at the entry (package pipeline served
// through httpguard), and in front of the database bounded retries with a
// budget, a circuit breaker and a per-dependency bulkhead (another pipeline);
// every rejection is a fast 503 with Retry-After.
//
// The CPU scenario (cpu.go, -scenario cpu) serves a handler that burns a
// fixed amount of CPU per request (-cpu-work, 5 ms), yielding between
// chunks. Before each run it measures the capacity (the requests per
// second the server completes closed-loop), then offers half of it, twice
// it (-cpu-load) and half again. Unprotected, the requests in flight share
// the cores and all of them slow down; protected, a pipeline with package
// shed's overload shedder (Config.Shed), served through httpguard, admits
// what the cores complete and answers the rest with a fast 503. The table
// gives the goodput against the capacity and the share shed.
//
// The instances of each run live in one registry.Registry, under the names
// and groups an operator finds them by ("api-admission", "db-breaker",
// "cpu-shed", ...; groups "api", "db", "cpu"), and are removed at the end
// of the run. While it runs, the demo serves on a loopback port (-status,
// status.go) package statuspage's live page over the registry and
// /metrics for Prometheus (package rampartprom's collector over the
// registry, with the Go runtime's scheduler metrics), and prints both URLs.
//
// Each run is also recorded one point a second (offered, sent, completed,
// succeeded, shed and failed rates, requests in flight, the successes' p50
// and p99, the runtime's scheduling latency, the breaker's state and the
// bulkheads' permits, the shedder's state and limit): -out DIR writes each
// scenario's series as overload.json and overload.csv (overload-cpu.* for
// the CPU scenario) and draws them as overload.svg (both runs side by side
// on the same axes, phases shaded) and overload.html, with the standard
// library only (series.go, chart.go); -render FILE redraws a recording
// (only its chart, FILE's name with .svg and .html: FILE itself is not
// rewritten).
//
// The demo is a module of its own (it depends on Prometheus's client; the
// core does not). Usage, from examples/overload:
//
//	go run . [flags]
//
// `go run . -h` lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/rampartconfig"
	"github.com/rampart-go/rampart/registry"
)

// options are the demo's knobs; the defaults run both scenarios in about
// 70 s.
type options struct {
	rate                               int
	warmup, steady, slowdown, recovery time.Duration
	mode                               string
	slowFactor                         float64
	apiTime, dbVisit                   time.Duration
	dbPool                             int
	hitRate, writeRate, dbErrors       float64
	deadline, dbMaxWait                time.Duration
	admissionLimit                     int
	clientTimeout, maxLag              time.Duration
	maxVUs                             int
	quiet                              bool
	out                                string // directory for the recorded series and the chart; "" writes none
	render                             string // an overload.json to render instead of running
	status                             string // the status page's and /metrics' listen address; "" serves none
	scenario                           string // db, cpu or both (db, then cpu)
	cpuWork, cpuChunk                  time.Duration
	cpuLoad                            float64
	cpuWarmup, cpuOverload, cpuRecover time.Duration
	cpuCapacity                        time.Duration
	config                             string // a rampartconfig document for the protected database run, watched; "" for none
	args                               []string
	onStatus                           func(page, metrics string)         // tests: called once the status page and /metrics serve
	onTick                             func(scenario, mode, phase string) // tests: called after each second's point is recorded
	onConfig                           func(rampartconfig.Event)          // tests: called after each reload attempt of -config
}

func defaultOptions() options {
	return options{
		rate:          defaultRate,
		warmup:        2 * time.Second,
		steady:        8 * time.Second,
		slowdown:      8 * time.Second,
		recovery:      6 * time.Second,
		mode:          "both",
		slowFactor:    4,
		apiTime:       50 * time.Millisecond,
		dbVisit:       10 * time.Millisecond,
		dbPool:        0,
		hitRate:       0.8,
		writeRate:     0.1,
		dbErrors:      0.002,
		deadline:      150 * time.Millisecond,
		dbMaxWait:     10 * time.Millisecond,
		clientTimeout: 2 * time.Second,
		maxLag:        100 * time.Millisecond,
		maxVUs:        5000,
		status:        "127.0.0.1:0",
		scenario:      "both",
		cpuWork:       5 * time.Millisecond,
		cpuChunk:      100 * time.Microsecond,
		cpuLoad:       2,
		cpuWarmup:     2 * time.Second,
		cpuOverload:   5 * time.Second,
		cpuRecover:    2 * time.Second,
		cpuCapacity:   500 * time.Millisecond,
	}
}

// defaultRate is the offered load of `make demo`. The scenario is sized for
// 10k req/s; on the 2-core machine this demo was measured on, one process
// cannot both generate and serve that many HTTP requests (see
// docs/overload-demo.md), so the
// default is a rate it really generates, and the -rate flag asks for more.
const defaultRate = 1000

// admission is the entry bulkhead's limit: twice the concurrency Little's
// law predicts at the offered rate (rate × mean API time), at least 64.
func (o options) admission() int {
	if o.admissionLimit > 0 {
		return o.admissionLimit
	}
	return max(64, int(2*float64(o.rate)*o.apiTime.Seconds()))
}

// pool is the database pool size: -db-pool, or the scenario's budget of 40
// connections for 10k req/s (28 busy on average) scaled to the offered rate,
// but at least 8: a very small pool queues even at moderate utilization
// (fewer servers, less smoothing), which would overload the steady phase
// instead of only the slowdown.
func (o options) pool() int {
	if o.dbPool > 0 {
		return o.dbPool
	}
	return max(8, int(math.Ceil(40*float64(o.rate)/10000)))
}

func (o options) phases() []phase {
	ps := []phase{
		{name: "warm-up", duration: o.warmup, slowdown: 1, rate: o.rate, ramp: true},
		{name: "steady", duration: o.steady, slowdown: 1, rate: o.rate},
		{name: "slowdown", duration: o.slowdown, slowdown: o.slowFactor, rate: o.rate},
		{name: "recovery", duration: o.recovery, slowdown: 1, rate: o.rate},
	}
	out := ps[:0]
	for _, p := range ps {
		if p.duration > 0 {
			out = append(out, p)
		}
	}
	return out
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.rate, "rate", o.rate, "offered load in requests per second (the scenario is sized for 10000)")
	fs.DurationVar(&o.warmup, "warmup", o.warmup, "warm-up phase length")
	fs.DurationVar(&o.steady, "steady", o.steady, "steady phase length")
	fs.DurationVar(&o.slowdown, "slowdown", o.slowdown, "database slowdown phase length")
	fs.DurationVar(&o.recovery, "recovery", o.recovery, "recovery phase length")
	fs.StringVar(&o.mode, "mode", o.mode, "which runs: both, unprotected or protected")
	fs.Float64Var(&o.slowFactor, "slow-factor", o.slowFactor, "database visit time multiplier during the slowdown, in (0, 1000]")
	fs.DurationVar(&o.apiTime, "api-time", o.apiTime, "mean time a request spends in the API")
	fs.DurationVar(&o.dbVisit, "db-visit", o.dbVisit, "mean time a database visit holds a connection")
	fs.IntVar(&o.dbPool, "db-pool", o.dbPool, "database connection pool size (0: 40 at 10k req/s, scaled to -rate, at least 8)")
	fs.Float64Var(&o.hitRate, "cache-hits", o.hitRate, "share of reads served from cache")
	fs.Float64Var(&o.writeRate, "writes", o.writeRate, "share of requests that are writes")
	fs.Float64Var(&o.dbErrors, "db-errors", o.dbErrors, "share of database visits that fail transiently")
	fs.DurationVar(&o.deadline, "deadline", o.deadline, "protected: end-to-end deadline of a request")
	fs.DurationVar(&o.dbMaxWait, "db-max-wait", o.dbMaxWait, "protected: longest wait for a database permit")
	fs.IntVar(&o.admissionLimit, "admission", 0, "protected: entry bulkhead limit (0: 2 × rate × api-time, at least 64)")
	fs.DurationVar(&o.clientTimeout, "client-timeout", o.clientTimeout, "load generator: request timeout (counted as failed)")
	fs.DurationVar(&o.maxLag, "max-lag", o.maxLag, "load generator: drop an iteration it could only start this late")
	fs.IntVar(&o.maxVUs, "vus", o.maxVUs, "load generator: most requests in flight (more are dropped iterations)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	fs.StringVar(&o.out, "out", "", "write the per-second series (overload.json, overload.csv) and the chart (overload.svg, overload.html) into this directory")
	fs.StringVar(&o.render, "render", "", "draw the chart (FILE's name with .svg and .html) of a recorded overload.json or overload-cpu.json into -out (default: FILE's directory) instead of running; FILE itself is not rewritten")
	fs.StringVar(&o.status, "status", o.status, "serve the live status page and /metrics on this loopback address while the demo runs (\"\": none)")
	fs.StringVar(&o.config, "config", "", "build the protected database run's policies from this rampartconfig document (YAML or JSON, e.g. limits.yaml) and apply every change to it while the run lasts")
	fs.StringVar(&o.scenario, "scenario", o.scenario, "which scenarios: db (the database slowdown), cpu (a CPU-bound handler at twice its capacity) or both (db, then cpu)")
	fs.DurationVar(&o.cpuWork, "cpu-work", o.cpuWork, "cpu scenario: CPU time of one request on an idle core")
	fs.DurationVar(&o.cpuChunk, "cpu-chunk", o.cpuChunk, "cpu scenario: the handler yields after each chunk of this much CPU")
	fs.Float64Var(&o.cpuLoad, "cpu-load", o.cpuLoad, "cpu scenario: the overload's offered rate, a multiple of the measured capacity")
	fs.DurationVar(&o.cpuWarmup, "cpu-warmup", o.cpuWarmup, "cpu scenario: warm-up at half the capacity")
	fs.DurationVar(&o.cpuOverload, "cpu-overload", o.cpuOverload, "cpu scenario: overload phase length")
	fs.DurationVar(&o.cpuRecover, "cpu-recovery", o.cpuRecover, "cpu scenario: recovery at half the capacity")
	fs.DurationVar(&o.cpuCapacity, "cpu-capacity", o.cpuCapacity, "cpu scenario: the closed-loop capacity measurement before and after each run (at most 10s)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.args = args
	share := func(x float64) bool { return x >= 0 && x <= 1 } // false for NaN too
	switch {
	case o.rate < 1 || o.rate > 1_000_000:
		return o, errors.New("-rate must be in [1, 1000000]")
	case o.mode != "both" && o.mode != "unprotected" && o.mode != "protected":
		return o, fmt.Errorf("-mode must be both, unprotected or protected, got %q", o.mode)
	case o.dbPool < 0 || o.dbPool > 1_000_000 || o.maxVUs < 1 || o.maxVUs > 1_000_000:
		return o, errors.New("-db-pool must be in [0, 1000000] and -vus in [1, 1000000]")
	case o.warmup < 0 || o.steady < 0 || o.slowdown < 0 || o.recovery < 0:
		return o, errors.New("phase lengths (-warmup, -steady, -slowdown, -recovery) must not be negative")
	case len(o.phases()) == 0:
		return o, errors.New("every phase has length 0")
	case !share(o.hitRate) || !share(o.writeRate) || !share(o.dbErrors):
		return o, errors.New("-cache-hits, -writes and -db-errors are shares: each must be in [0, 1]")
	case !(o.slowFactor > 0) || o.slowFactor > 1000:
		return o, fmt.Errorf("-slow-factor must be in (0, 1000], got %v", o.slowFactor)
	case o.apiTime < 0 || o.dbVisit < 0:
		return o, errors.New("-api-time and -db-visit must not be negative")
	case o.deadline <= 0:
		return o, fmt.Errorf("-deadline must be positive, got %v", o.deadline)
	case o.dbMaxWait < 0:
		return o, fmt.Errorf("-db-max-wait must not be negative, got %v", o.dbMaxWait)
	case o.admissionLimit < 0:
		return o, fmt.Errorf("-admission must not be negative (0: the default), got %d", o.admissionLimit)
	case o.clientTimeout <= 0:
		return o, fmt.Errorf("-client-timeout must be positive, got %v", o.clientTimeout)
	case o.maxLag < 0:
		return o, fmt.Errorf("-max-lag must not be negative, got %v", o.maxLag)
	case o.scenario != "both" && o.scenario != "db" && o.scenario != "cpu":
		return o, fmt.Errorf("-scenario must be db, cpu or both, got %q", o.scenario)
	case o.cpuWork <= 0 || o.cpuChunk <= 0 || o.cpuCapacity <= 0 || o.cpuOverload <= 0:
		return o, errors.New("-cpu-work, -cpu-chunk, -cpu-capacity and -cpu-overload must be positive")
	case o.cpuCapacity > maxMeasure:
		return o, fmt.Errorf("-cpu-capacity must be at most %v (the measurement's bound), got %v", maxMeasure, o.cpuCapacity)
	case o.cpuWarmup < 0 || o.cpuRecover < 0:
		return o, errors.New("-cpu-warmup and -cpu-recovery must not be negative")
	case !(o.cpuLoad > 0) || o.cpuLoad > 100:
		return o, fmt.Errorf("-cpu-load must be in (0, 100], got %v", o.cpuLoad)
	case o.status != "" && !loopback(o.status):
		return o, fmt.Errorf("-status must be a loopback address (127.0.0.1:port, [::1]:port or localhost:port), got %q", o.status)
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(2)
	}
	// The generator, the server and the simulated database share the
	// process: collect garbage less often, it is CPU the demo needs.
	debug.SetGCPercent(400)
	if o.render != "" {
		if err := render(o, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "overload:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

// result is one mode's run of a scenario.
type result struct {
	mode     string
	scenario string // "db" or "cpu"
	phases   []*phaseStats
	series   runSeries // one point per second
	capacity float64   // the CPU scenario: req/s the server completed, measured just before the run
	capAfter float64   // and just after it
	notes    []string  // lines for the report (the shedder's state at the end of the overload)
}

// render writes the chart of a recorded run (-render FILE) into -out, or
// next to FILE: only FILE's chart, named after it (run2.json: run2.svg and
// run2.html, linking to run2.json), so that neither FILE nor another
// recording of that directory is rewritten.
func render(o options, w io.Writer) error {
	rec, err := readRecording(o.render)
	if err != nil {
		return err
	}
	dir := o.out
	if dir == "" {
		dir = filepath.Dir(o.render)
	}
	paths, err := writeChart(dir, o.render, rec)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "wrote", strings.Join(paths, ", "))
	return nil
}

// loopback reports whether addr is host:port with a loopback host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// run performs the scenarios and runs o asks for and prints progress and
// the tables to w. The results are the database scenario's runs, then the
// CPU scenario's.
func run(ctx context.Context, o options, w io.Writer) ([]result, error) {
	modes := []string{"unprotected", "protected"}
	if o.mode != "both" {
		modes = []string{o.mode}
	}
	w = &lockedWriter{w: w}
	if o.config != "" { // refused now rather than after the unprotected run
		if _, err := rampartconfig.LoadFile(o.config); err != nil {
			return nil, err
		}
	}
	// One registry for the process, as a service has: each run registers
	// its instances in it and removes them at its end.
	reg := registry.New()
	st, err := startStatus(o.status, reg, o.onStatus)
	if err != nil {
		return nil, err
	}
	defer st.close()
	if st != nil {
		fmt.Fprintf(w, "status page: %s (status.json beside it), metrics: %s, while the demo runs\n", st.url, st.metricsURL)
	}
	var all []result
	if o.scenario != "cpu" {
		var total time.Duration
		for _, p := range o.phases() {
			total += p.duration
		}
		fmt.Fprintf(w, "overload: %d req/s offered, phases %s (%s per mode), database pool %d, GOMAXPROCS %d\n",
			o.rate, phaseList(o.phases()), total, o.pool(), runtime.GOMAXPROCS(0))
		if o.rate < 10000 {
			fmt.Fprintf(w, "(the scenario is sized for 10000 req/s; one 2-core machine cannot generate and serve that many, so the default is %d: try -rate 10000 to see the generator say so)\n", defaultRate)
		}
		var results []result
		for _, m := range modes {
			r, err := runMode(ctx, o, dbScenario(ctx, o, reg, w), m, w, st, reg)
			if err != nil {
				return append(all, results...), err
			}
			results = append(results, r)
			if ctx.Err() != nil {
				break
			}
		}
		all = append(all, results...)
		printTable(w, o, results)
		if err := record(o, w, "db", results); err != nil {
			return all, err
		}
	}
	if o.scenario != "db" && ctx.Err() == nil {
		results, err := runCPU(ctx, o, modes, w, st, reg)
		all = append(all, results...)
		if err != nil {
			return all, err
		}
		printCPUTable(w, o, results)
		if err := record(o, w, "cpu", results); err != nil {
			return all, err
		}
	}
	return all, nil
}

// record writes a scenario's series and chart into -out, when given.
func record(o options, w io.Writer, scenario string, results []result) error {
	if o.out == "" || len(results) == 0 {
		return nil
	}
	var runs []runSeries
	for _, r := range results {
		runs = append(runs, r.series)
	}
	rec := newRecording(o, o.args, runs)
	rec.Scenario = scenario
	paths, err := writeOutputs(o.out, rec)
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "wrote", strings.Join(paths, ", "))
	return nil
}

func phaseList(ps []phase) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s %s", p.name, p.duration))
	}
	return strings.Join(parts, ", ")
}

// scenario is what a run offers and serves: its phases and, per mode, the
// server's handler and state.
type scenario struct {
	name     string // "db" or "cpu"
	phases   []phase
	capacity float64 // the CPU scenario's capacity measured before the run (req/s); 0 otherwise
	build    func(mode string) (*target, error)
}

// target is one run's server side.
type target struct {
	handler  http.Handler
	snapshot func(p *point)       // the state of the run's instances, for the series
	enter    func(p phase)        // called as each phase starts
	progress func() string        // the tail of the progress line
	close    func()               // after the run (nil: nothing to do)
	after    func(p phase) string // at the end of each phase: a line for the report, "" for none (nil: none)
}

// dbScenario is the database slowdown: the service of service.go,
// unprotected or behind the guard of guard.go.
func dbScenario(ctx context.Context, o options, reg *registry.Registry, w io.Writer) scenario {
	return scenario{name: "db", phases: o.phases(), build: func(mode string) (*target, error) {
		db, err := newDatabase(reg, o.pool(), o.dbVisit, o.dbErrors)
		if err != nil {
			return nil, err
		}
		svc := newService(o, db)
		t := &target{
			handler:  svc,
			snapshot: func(p *point) { p.DBWaiting = db.waiting.Load() },
			enter:    func(p phase) { db.setSlowdown(p.slowdown) },
			progress: func() string { return fmt.Sprintf("db waiting %4d", db.waiting.Load()) },
		}
		if mode == "protected" {
			var lim *liveLimits
			if o.config != "" {
				if lim, err = startConfig(ctx, o.config, reg, w, o.onConfig); err != nil {
					return nil, fmt.Errorf("-config: %w", err)
				}
				fmt.Fprintf(w, "config: %s built %s, watched while the protected run lasts\n", o.config, strings.Join(lim.built, ", "))
			}
			g, err := newGuard(o, reg)
			if err != nil {
				lim.close()
				return nil, err
			}
			t.close = func() { g.close(); lim.close() }
			if t.handler, err = g.handler(svc); err != nil {
				t.close()
				return nil, err
			}
			t.snapshot = func(p *point) { p.DBWaiting = db.waiting.Load(); g.snapshot(p) }
		}
		return t, nil
	}}
}

// runMode starts a fresh server for mode, runs the scenario's phases
// against it, waits for the last responses and stops the server. The
// run's instances are in reg while it runs.
func runMode(ctx context.Context, o options, sc scenario, mode string, w io.Writer, st *status, reg *registry.Registry) (result, error) {
	defer st.sample() // after clearRegistry (deferred below): the page drops the run's charts
	defer clearRegistry(reg)
	tg, err := sc.build(mode)
	if err != nil {
		return result{}, err
	}
	if tg.close != nil {
		defer tg.close()
	}
	res := result{mode: mode, scenario: sc.name, capacity: sc.capacity}
	for i, p := range sc.phases {
		res.phases = append(res.phases, &phaseStats{phase: p, index: i})
	}
	// Outermost: count the requests in the server and time the successes
	// on the server's side, filed under the phase that sent them.
	var inFlight atomic.Int64
	inner := tg.handler
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		inFlight.Add(1)
		defer inFlight.Add(-1)
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		inner.ServeHTTP(sw, r)
		if i, err := strconv.Atoi(r.Header.Get("X-Phase")); err == nil && i >= 0 && i < len(res.phases) && sw.status == http.StatusOK {
			res.phases[i].addServerLatency(time.Since(start))
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	gen := newGenerator("http://"+ln.Addr().String()+"/item", o)
	defer gen.close()

	// One point of the series and one progress line per second.
	var cur sync.Mutex
	current := res.phases[0]
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	start := time.Now()
	rec := newRecorder(mode, res.phases, start)
	rec.capacity = sc.capacity
	snapshot := func() point {
		p := point{InFlightClient: gen.inFlight.Load(), InFlightServer: inFlight.Load()}
		tg.snapshot(&p)
		return p
	}
	label := mode
	if sc.name != "db" {
		label = sc.name + "/" + mode
	}
	go func() {
		defer close(progressDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var last [4]int64
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
			}
			cur.Lock()
			p := current
			rec.record(time.Now(), p.phase.name, snapshot())
			cur.Unlock()
			st.sample()
			if o.onTick != nil {
				o.onTick(sc.name, mode, p.phase.name)
			}
			if o.quiet {
				continue
			}
			var now [4]int64
			for _, q := range res.phases {
				now[0] += q.sent.Load()
				now[1] += q.ok.Load()
				now[2] += q.shed.Load()
				now[3] += q.failed.Load() + q.dropped.Load()
			}
			fmt.Fprintf(w, "%-15s %-8s %3.0fs  sent %5d/s  ok %5d/s  shed %5d/s  failed+dropped %5d/s  in flight: client %4d server %4d  %s\n",
				label, p.phase.name, time.Since(start).Seconds(),
				now[0]-last[0], now[1]-last[1], now[2]-last[2], now[3]-last[3],
				gen.inFlight.Load(), inFlight.Load(), tg.progress())
			last = now
		}
	}()

	for _, p := range res.phases {
		cur.Lock()
		current = p
		rec.phaseStarted(p.phase.name, scheduleOf(p), time.Now())
		cur.Unlock()
		if tg.enter != nil {
			tg.enter(p.phase)
		}
		gen.run(ctx, p)
		if tg.after != nil {
			if note := tg.after(p.phase); note != "" {
				res.notes = append(res.notes, note)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	gen.phasesOver()
	cur.Lock()
	rec.phasesEnded(time.Now())
	cur.Unlock()
	gen.wait() // bounded by the client timeout
	close(stopProgress)
	<-progressDone
	// The last, partial second: the responses that came after the last tick.
	rec.finish(time.Now(), current.phase.name, snapshot())
	res.series = rec.series
	return res, nil
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
