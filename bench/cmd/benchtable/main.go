// Command benchtable turns `go test -bench` output of the bench module into
// the project's benchmark tables: per scenario and case, the median ns/op and
// allocs/op of each library (bytes per instance in the Memory scenario), and
// the ratios of the peers to rampart from the same run. A ratio divides only
// the rows that groups.go declares like for like (a pair: rampart's row, the
// peers' rows, the cases, and a label saying what is compared): executor
// with executor, primitive with primitive. Rows no pair names have no ratio.
//
// Usage (from the bench directory):
//
//	benchtable -in results/latest.txt [-out README.md] [-readme ../README.md] [-count 5]
//
// It reads an existing results file, so the tables can be regenerated from a
// committed run without benchmarking again. With -out it writes the full
// per-scenario tables as a generated Markdown file (bench/README.md), whose
// header says how the run was made: the command, Go version, platform and CPU
// taken from the run's configuration lines. With -readme it replaces, in the
// project README, the text between the markers
//
//	<!-- bench-headline:start --> ... <!-- bench-headline:end -->
//	<!-- bench:start --> ... <!-- bench:end -->
//
// with the headline sentence and the summary table (per scenario and
// declared comparison, each peer's ns/op divided by the rampart row it is
// compared with, over the cases). With
// neither, the full tables go to standard output.
//
// The run's configuration lines are the `key: value` lines of the Go
// benchmark format before the results: goos, goarch and cpu (written by go
// test), and goversion and benchcmd, which scripts/bench-report.sh writes
// at the top of the file. The -go and -cmd flags stand in for a file that
// lacks the last two.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The README's marker names: the summary table and the headline sentence.
const (
	tableMarker    = "bench"
	headlineMarker = "bench-headline"
)

// The headline comparison: a declared pair of the suite, named here
// because the sentence describes it. The first case of headlineCases that
// the run has is used: the function reading ctx.Done() (as a network or
// database call does) when the run has that case.
const (
	headlineScenario = "Pipeline"
	headlinePeer     = "failsafe"
)

var headlineCases = []struct{ caseName, what string }{
	{"CalleeReadsDone", "a call through a pipeline of five policies (retry, circuit breaker, rate limiter, bulkhead, " +
		"deadline-mode timeout) whose function waits on its context's Done channel"},
	{"Success", "a call through a pipeline of five policies (retry, circuit breaker, rate limiter, bulkhead, " +
		"deadline-mode timeout) whose function does not read its context's Done channel"},
}

func main() {
	in := flag.String("in", "", "go test -bench output (default: standard input)")
	out := flag.String("out", "", "generated Markdown file to write with the full tables (bench/README.md)")
	readme := flag.String("readme", "", "README to update between its bench and bench-headline markers")
	count := flag.Int("count", 0, "the -count of the run, for the captions (default: the most samples of a benchmark)")
	goVersion := flag.String("go", "", "Go version of the run, when the file has no goversion line")
	cmd := flag.String("cmd", "", "command that made the run, when the file has no benchcmd line")
	gomod := flag.String("gomod", "go.mod", "the bench module's go.mod, for the list of pinned peers (skipped when absent)")
	flag.Parse()

	var r io.Reader = os.Stdin
	inName := "standard input"
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		r = f
		inName = *in
	}
	run, err := parse(r)
	if err != nil {
		log.Fatal(err)
	}
	if *count > 0 {
		run.count = *count
	}
	if run.goVersion == "" {
		run.goVersion = *goVersion
	}
	if run.command == "" {
		run.command = *cmd
	}
	for _, name := range undeclared(run) {
		log.Printf("%s is not declared in cmd/benchtable/groups.go: shown without a ratio", name)
	}
	var peers []string
	if mod, err := os.ReadFile(*gomod); err == nil {
		peers = requires(string(mod))
	}
	if *out == "" && *readme == "" {
		fmt.Print(render(run))
		return
	}
	if *out != "" {
		doc := renderFile(run, generatedBy(*in), inName, peers)
		if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if *readme != "" {
		if err := spliceAll(*readme, map[string]string{
			headlineMarker: headline(run),
			tableMarker:    summary(run),
		}); err != nil {
			log.Fatal(err)
		}
	}
}

// generatedBy is the command that regenerates the file from the same input.
func generatedBy(in string) string {
	if in == "" {
		in = "results/latest.txt"
	}
	return "cd bench && go run ./cmd/benchtable -in " + in + " -out README.md -readme ../README.md"
}

// sample is one benchmark's measurements across the -count repetitions:
// per unit (ns/op, allocs/op, B/instance, ...), the values in run order.
type sample struct {
	metrics map[string][]float64
}

type key struct{ scenario, caseName, lib string }

type run struct {
	cpu, goos, goarch string
	goVersion         string // the goversion line, if the file has one
	command           string // the benchcmd line, if the file has one
	procs             int
	count             int
	order             []key // first appearance, to keep the suite's order
	samples           map[key]*sample
}

// line is a result line: the name, GOMAXPROCS, the iterations, then the
// measurements as value-unit pairs.
var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+(.*)$`)

func parse(r io.Reader) (*run, error) {
	res := &run{samples: map[key]*sample{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		t := sc.Text()
		switch {
		case strings.HasPrefix(t, "cpu: "):
			res.cpu = strings.TrimPrefix(t, "cpu: ")
		case strings.HasPrefix(t, "goos: "):
			res.goos = strings.TrimPrefix(t, "goos: ")
		case strings.HasPrefix(t, "goarch: "):
			res.goarch = strings.TrimPrefix(t, "goarch: ")
		case strings.HasPrefix(t, "goversion: "):
			res.goVersion = strings.TrimPrefix(t, "goversion: ")
		case strings.HasPrefix(t, "benchcmd: "):
			res.command = strings.TrimPrefix(t, "benchcmd: ")
		}
		m := line.FindStringSubmatch(t)
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		if len(f) < 2 || len(f)%2 != 0 || f[1] != "ns/op" {
			continue // not a result line
		}
		parts := strings.Split(m[1], "/")
		if len(parts) < 3 {
			continue // not Scenario/Case/library
		}
		k := key{parts[0], strings.Join(parts[1:len(parts)-1], "/"), parts[len(parts)-1]}
		if m[2] != "" {
			res.procs, _ = strconv.Atoi(m[2])
		}
		vals := map[string]float64{}
		for i := 0; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", t, err)
			}
			vals[f[i+1]] = v
		}
		s := res.samples[k]
		if s == nil {
			s = &sample{metrics: map[string][]float64{}}
			res.samples[k] = s
			res.order = append(res.order, k)
		}
		for unit, v := range vals {
			s.metrics[unit] = append(s.metrics[unit], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if res.count == 0 {
		for _, s := range res.samples {
			res.count = max(res.count, len(s.metrics["ns/op"]))
		}
	}
	return res, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// orUnknown names a configuration value the run did not record.
func orUnknown(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}

// caption is the one-line description of the run shared by every output.
func caption(r *run) string {
	return fmt.Sprintf("%s, %s/%s, CPU: %s, GOMAXPROCS=%d, -count=%d, medians",
		orUnknown(r.goVersion), r.goos, r.goarch, orUnknown(r.cpu), r.procs, r.count)
}

func (r *run) scenarios() []string {
	var scenarios []string
	for _, k := range r.order {
		if !slices.Contains(scenarios, k.scenario) {
			scenarios = append(scenarios, k.scenario)
		}
	}
	return scenarios
}

// undeclared is the run's rows that groups.go does not declare, as
// Scenario/Case/library (a whole scenario as Scenario).
func undeclared(r *run) []string {
	var out []string
	for _, k := range r.order {
		g := groupOf(k.scenario)
		switch {
		case g == nil:
			if !slices.Contains(out, k.scenario) {
				out = append(out, k.scenario)
			}
		default:
			if _, ok := g.libOf(k.caseName, k.lib); !ok {
				out = append(out, k.scenario+"/"+k.caseName+"/"+k.lib)
			}
		}
	}
	return out
}

// value is the median of k's measurements in unit, and whether it has any.
func (r *run) value(k key, unit string) (float64, bool) {
	s := r.samples[k]
	if s == nil || len(s.metrics[unit]) == 0 {
		return 0, false
	}
	return median(s.metrics[unit]), true
}

func (r *run) allocs(k key) string {
	v, ok := r.value(k, "allocs/op")
	if !ok {
		return "?"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// others is k's custom metrics (b.ReportMetric: the adaptive limiter's
// stride, cpu-ns/op), as "value unit" in the units' order, or "".
func (r *run) others(k key) string {
	s := r.samples[k]
	if s == nil {
		return ""
	}
	var units []string
	for u := range s.metrics {
		switch u {
		case "ns/op", "B/op", "allocs/op", "MB/s":
		default:
			units = append(units, u)
		}
	}
	slices.Sort(units)
	var cells []string
	for _, u := range units {
		v, _ := r.value(k, u)
		cells = append(cells, fmtValue(v, u)+" "+u)
	}
	return strings.Join(cells, ", ")
}

// ratio is one declared division: the peer's row by rampart's, in one case.
type ratio struct {
	pair      *pair
	caseName  string
	peer      string
	peerValue float64
	base      float64 // rampart's value
	v         float64 // peerValue / base
}

// ratios is every declared division the run has the rows for, in the
// suite's case order, then the pairs' and the peers' order. Nothing else is
// divided: an undeclared scenario, case or library has no ratio.
func (r *run) ratios(scenario string) []ratio {
	g := groupOf(scenario)
	if g == nil {
		return nil
	}
	var out []ratio
	for _, c := range r.cases(scenario) {
		for i := range g.pairs {
			p := &g.pairs[i]
			if !covers(p.cases, c) {
				continue
			}
			base, ok := r.value(key{scenario, c, p.rampart}, g.metric)
			if !ok || base <= 0 {
				continue
			}
			for _, peer := range p.peers {
				v, ok := r.value(key{scenario, c, peer}, g.metric)
				if !ok {
					continue
				}
				out = append(out, ratio{p, c, peer, v, base, v / base})
			}
		}
	}
	return out
}

// cases is a scenario's cases in the suite's order.
func (r *run) cases(scenario string) []string {
	var cases []string
	for _, k := range r.order {
		if k.scenario == scenario && !slices.Contains(cases, k.caseName) {
			cases = append(cases, k.caseName)
		}
	}
	return cases
}

// metricOf is the unit a scenario's tables compare.
func metricOf(scenario string) string {
	if g := groupOf(scenario); g != nil {
		return g.metric
	}
	return "ns/op"
}

// fmtValue formats a measurement in its unit.
func fmtValue(v float64, unit string) string {
	if strings.HasSuffix(unit, "ns/op") {
		return fmtNs(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// render is the full per-scenario tables: every row with what it calls,
// then the declared ratios, then the note on what is compared.
func render(r *run) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Run: %s. "+
		"Each ratio divides a peer's row by the rampart row declared like for like with it "+
		"(the same kind of call, the same case, the same run; cmd/benchtable/groups.go): "+
		"above 1 means the peer is slower (in Memory: larger) than rampart. Rows without a like-for-like "+
		"rampart row are shown without a ratio.\n", caption(r))
	for _, sc := range r.scenarios() {
		g := groupOf(sc)
		unit := metricOf(sc)
		fmt.Fprintf(&b, "\n## %s\n\n", sc)
		if g != nil {
			b.WriteString(g.note + "\n\n")
		} else {
			b.WriteString("No comparison is declared for this scenario: its rows are not divided.\n\n")
		}
		if unit == "ns/op" {
			b.WriteString("| case | library | kind | calls | ns/op | allocs/op | other metrics |\n|---|---|---|---|--:|--:|---|\n")
		} else {
			fmt.Fprintf(&b, "| case | library | kind | calls | %s |\n|---|---|---|---|--:|\n", unit)
		}
		for _, k := range r.order {
			if k.scenario != sc {
				continue
			}
			calls := "not declared | —"
			if g != nil {
				if l, ok := g.libOf(k.caseName, k.lib); ok {
					calls = fmt.Sprintf("%s | %s", l.kind, l.calls)
				}
			}
			v, ok := r.value(k, unit)
			cell := "?"
			if ok {
				cell = fmtValue(v, unit)
			}
			if unit == "ns/op" {
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", k.caseName, k.lib, calls, cell, r.allocs(k), r.others(k))
			} else {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", k.caseName, k.lib, calls, cell)
			}
		}
		if rs := r.ratios(sc); len(rs) > 0 {
			fmt.Fprintf(&b, "\n| case | compared | division (%s) | ratio |\n|---|---|---|--:|\n", unit)
			for _, x := range rs {
				fmt.Fprintf(&b, "| %s | %s | %s %s ÷ %s %s | %.2f |\n", x.caseName, x.pair.label,
					x.peer, fmtValue(x.peerValue, unit), x.pair.rampart, fmtValue(x.base, unit), x.v)
			}
		}
	}
	return b.String()
}

// renderFile is the generated bench/README.md: how it was made, what the
// names mean, then the full tables.
func renderFile(r *run, regenerate, in string, peers []string) string {
	var b bytes.Buffer
	b.WriteString("<!-- Generated by cmd/benchtable; do not edit. Regenerate with: " + regenerate + " -->\n\n")
	b.WriteString("# Benchmarks against the peers\n\n")
	b.WriteString("[← README](../README.md)\n\n")
	b.WriteString("This file is generated by `make bench-report` (scripts/bench-report.sh), which runs the suite, " +
		"summarises it with benchstat and then runs `" + regenerate + "`; that last command alone " +
		"regenerates it, and the README's summary table, from the committed results file.\n\n")
	fmt.Fprintf(&b, "- results file: `bench/%s` (its benchstat summary: `bench/results/benchstat.txt`)\n", strings.TrimPrefix(in, "./"))
	fmt.Fprintf(&b, "- command of the run: %s\n", code(r.command))
	fmt.Fprintf(&b, "- Go: %s; platform: %s/%s; CPU: %s; GOMAXPROCS: %d; repetitions: %d (medians below)\n",
		orUnknown(r.goVersion), r.goos, r.goarch, orUnknown(r.cpu), r.procs, r.count)
	if len(peers) > 0 {
		fmt.Fprintf(&b, "- peers, as pinned by `bench/go.mod`: %s\n", strings.Join(peers, ", "))
	}
	b.WriteString("\nBenchmark names are `Benchmark<Scenario>/<Case>/<library>`; every benchmark checks that it " +
		"really took the path it names (admitted or rejected). A library name with a suffix after `rampart-` " +
		"is a rampart variant (`rampart-cached`: a `rampart.NewCachedTicker`; `rampart-do`: the executor form), " +
		"and one with a suffix after a peer's name is that peer's other form (`failsafe-permit`: its " +
		"primitive); `direct` and `chan` are standard-library baselines. Each row says how it calls the " +
		"policy: an executor runs the function (Do, Run, Execute), a primitive is acquire and release called " +
		"by hand. A ratio divides only rows declared like for like in `cmd/benchtable/groups.go`: executor " +
		"with executor, primitive with primitive, the same timeout semantics. The machine is a shared VM: read " +
		"the ratios, which come from the same run, rather than the absolute times. The per-package pages under " +
		"[docs/](../docs) quote dedicated runs of single scenarios, which differ within the machine's noise.\n\n")
	b.WriteString(render(r))
	return b.String()
}

func code(s string) string {
	if s == "" {
		return "not recorded"
	}
	return "`" + s + "`"
}

// summary is the README's table: per scenario and declared comparison, each
// peer's value divided by the rampart row it is compared with, as the range
// over the cases both ran; the cases column and the allocation range cover
// the compared cases only.
func summary(r *run) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Run: %s. Each cell is a peer's ns/op (in Memory: bytes per instance) divided by the "+
		"rampart row compared like for like with it, in the same case of the same run (above 1: slower, or "+
		"larger, than rampart), as the range over the cases; the [full tables](bench/README.md) have every "+
		"row, what each calls, and a note per scenario on what is compared.\n\n", caption(r))
	b.WriteString("| scenario | compared | rampart row | cases | rampart allocs/op | peer ÷ rampart |\n|---|---|---|---|--:|---|\n")
	for _, sc := range r.scenarios() {
		g := groupOf(sc)
		if g == nil {
			continue
		}
		rs := r.ratios(sc)
		for i := range g.pairs {
			p := &g.pairs[i]
			var cases []string
			var allocs []float64
			var cells []string
			for _, peer := range p.peers {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, x := range rs {
					if x.pair != p || x.peer != peer {
						continue
					}
					lo, hi = min(lo, x.v), max(hi, x.v)
					if !slices.Contains(cases, x.caseName) {
						cases = append(cases, x.caseName)
						if a, ok := r.value(key{sc, x.caseName, p.rampart}, "allocs/op"); ok {
							allocs = append(allocs, a)
						}
					}
				}
				switch {
				case math.IsInf(lo, 1):
					continue
				case fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi):
					cells = append(cells, fmt.Sprintf("%s %.2f×", peer, lo))
				default:
					cells = append(cells, fmt.Sprintf("%s %.2f–%.2f×", peer, lo, hi))
				}
			}
			if len(cells) == 0 {
				continue // the run lacks the rows: the full tables have what it has
			}
			// Keep the suite's case order, whichever peer ran a case first.
			slices.SortStableFunc(cases, func(a, c string) int {
				return slices.Index(r.cases(sc), a) - slices.Index(r.cases(sc), c)
			})
			allocCell := fmtRange(allocs)
			if g.metric != "ns/op" {
				allocCell = "—"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", sc, p.label, p.rampart, strings.Join(cases, ", "),
				allocCell, strings.Join(cells, ", "))
		}
	}
	return b.String()
}

func fmtRange(v []float64) string {
	if len(v) == 0 {
		return "?"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return strconv.FormatFloat(lo, 'f', -1, 64)
	}
	return strconv.FormatFloat(lo, 'f', -1, 64) + "–" + strconv.FormatFloat(hi, 'f', -1, 64)
}

// headline is the README's sentence with the headline comparison: the first
// of headlineCases the run has for rampart and the peer (each a declared
// pair of the Pipeline scenario), or a sentence saying the run lacks them.
func headline(r *run) string {
	var names []string
	for _, hc := range headlineCases {
		names = append(names, headlineScenario+"/"+hc.caseName)
		rk := key{headlineScenario, hc.caseName, "rampart"}
		pk := key{headlineScenario, hc.caseName, headlinePeer}
		var x *ratio
		for _, v := range r.ratios(headlineScenario) {
			if v.caseName == hc.caseName && v.peer == headlinePeer && v.pair.rampart == "rampart" {
				x = &v
				break
			}
		}
		if x == nil {
			continue
		}
		return fmt.Sprintf("In the committed benchmark run (%s), %s costs %s ns and %s with rampart, "+
			"against %s ns and %s with failsafe-go: %.1f× less time (`%s/%s` in the [full tables](bench/README.md), "+
			"which compare every policy like for like).",
			caption(r), hc.what, fmtNs(x.base), allocations(r.allocs(rk)), fmtNs(x.peerValue), allocations(r.allocs(pk)),
			x.v, headlineScenario, hc.caseName)
	}
	return fmt.Sprintf("The benchmark run has no %s case for rampart and %s.", strings.Join(names, " or "), headlinePeer)
}

// allocations is a count of allocations in words: "1 allocation", "33 allocations".
func allocations(n string) string {
	if n == "1" {
		return "1 allocation"
	}
	return n + " allocations"
}

func fmtNs(ns float64) string {
	switch {
	case ns >= 100:
		return strconv.FormatFloat(ns, 'f', 0, 64)
	case ns >= 10:
		return strconv.FormatFloat(ns, 'f', 1, 64)
	default:
		return strconv.FormatFloat(ns, 'f', 2, 64)
	}
}

// requires is the direct requirements of a go.mod, "path version", without
// the replaced root module.
func requires(mod string) []string {
	var out []string
	block := false
	for _, l := range strings.Split(mod, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "require (":
			block = true
			continue
		case block && l == ")":
			block = false
			continue
		case strings.HasPrefix(l, "require "):
			l = strings.TrimPrefix(l, "require ")
		case !block:
			continue
		}
		if strings.Contains(l, "// indirect") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 2 || f[0] == "github.com/rampart-go/rampart" {
			continue
		}
		out = append(out, f[0]+" "+f[1])
	}
	return out
}

// spliceAll replaces, for each name, the text between <!-- name:start -->
// and <!-- name:end --> in the file at path; it writes nothing unless every
// marker pair is found.
func spliceAll(path string, texts map[string]string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	names := make([]string, 0, len(texts))
	for name := range texts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if s, err = splice(s, name, texts[name]); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// splice replaces the text between one marker pair; the text is set off by
// blank lines so that Markdown renders a table or paragraph inside the
// markers as a block of its own.
func splice(s, name, text string) (string, error) {
	start, end := "<!-- "+name+":start -->", "<!-- "+name+":end -->"
	i := strings.Index(s, start)
	j := strings.Index(s, end)
	if i < 0 || j < i || strings.Count(s, start) != 1 || strings.Count(s, end) != 1 {
		return "", fmt.Errorf("markers %q and %q not found once each, in that order", start, end)
	}
	return s[:i+len(start)] + "\n\n" + strings.TrimRight(text, "\n") + "\n\n" + s[j:], nil
}
