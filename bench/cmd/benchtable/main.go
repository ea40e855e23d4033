// Command benchtable turns `go test -bench` output of the bench module into
// the project's benchmark tables: per scenario and case, the median ns/op and
// allocs/op of each library and its ratio to rampart from the same run.
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
// with the headline sentence and the summary table (per scenario, each
// peer's ns/op divided by rampart's, over the scenario's cases). With
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

// The headline comparison: one case of the suite, named here because the
// sentence describes it.
const (
	headlineScenario = "Pipeline"
	headlineCase     = "Success"
	headlinePeer     = "failsafe"
	headlineWhat     = "a call through a pipeline of five policies (retry, circuit breaker, rate limiter, bulkhead, deadline-mode timeout)"
)

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

// sample is one benchmark's measurements across the -count repetitions.
type sample struct {
	ns, allocs []float64
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

var line = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+([\d.]+) ns/op(.*)$`)
var allocsRe = regexp.MustCompile(`([\d.]+) allocs/op`)

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
		parts := strings.Split(m[1], "/")
		if len(parts) < 3 {
			continue // not Scenario/Case/library
		}
		k := key{parts[0], strings.Join(parts[1:len(parts)-1], "/"), parts[len(parts)-1]}
		if m[2] != "" {
			res.procs, _ = strconv.Atoi(m[2])
		}
		ns, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", t, err)
		}
		s := res.samples[k]
		if s == nil {
			s = &sample{}
			res.samples[k] = s
			res.order = append(res.order, k)
		}
		s.ns = append(s.ns, ns)
		if a := allocsRe.FindStringSubmatch(m[4]); a != nil {
			v, _ := strconv.ParseFloat(a[1], 64)
			s.allocs = append(s.allocs, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if res.count == 0 {
		for _, s := range res.samples {
			res.count = max(res.count, len(s.ns))
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

// ratio is the median ns/op of k divided by rampart's in the same case; ok
// is false when the case has no rampart row or k is rampart itself.
func (r *run) ratio(k key) (float64, bool) {
	if k.lib == "rampart" {
		return 0, false
	}
	base, ok := r.samples[key{k.scenario, k.caseName, "rampart"}]
	if !ok {
		return 0, false
	}
	bm := median(base.ns)
	if bm <= 0 {
		return 0, false
	}
	return median(r.samples[k].ns) / bm, true
}

func (r *run) allocs(k key) string {
	s := r.samples[k]
	if s == nil || len(s.allocs) == 0 {
		return "?"
	}
	return strconv.FormatFloat(median(s.allocs), 'f', -1, 64)
}

// render is the full per-scenario tables.
func render(r *run) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Run: %s. "+
		"The ratio column is the library's ns/op divided by rampart's in the same case of the same run: "+
		"above 1 means slower than rampart.\n", caption(r))
	for _, sc := range r.scenarios() {
		fmt.Fprintf(&b, "\n## %s\n\n| case | library | ns/op | allocs/op | × rampart |\n|---|---|--:|--:|--:|\n", sc)
		for _, k := range r.order {
			if k.scenario != sc {
				continue
			}
			ratio := "—"
			if v, ok := r.ratio(k); ok {
				ratio = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", k.caseName, k.lib, fmtNs(median(r.samples[k].ns)), r.allocs(k), ratio)
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
		"is a rampart variant (`rampart-cached`: a `rampart.NewCachedTicker`); `direct` and `chan` are " +
		"standard-library baselines. The machine is a shared VM: read the ratios, which come from the same " +
		"run, rather than the absolute times. The per-package pages under [docs/](../docs) quote dedicated " +
		"runs of single scenarios, which differ within the machine's noise.\n\n")
	b.WriteString(render(r))
	return b.String()
}

func code(s string) string {
	if s == "" {
		return "not recorded"
	}
	return "`" + s + "`"
}

// peers is the libraries of a scenario other than rampart, its variants and
// the floors (a "-floor" library measures a lower bound, not a peer), in the
// suite's order.
func (r *run) peers(scenario string) []string {
	var libs []string
	for _, k := range r.order {
		if k.scenario == scenario && !strings.HasPrefix(k.lib, "rampart") && !strings.HasSuffix(k.lib, "-floor") &&
			!slices.Contains(libs, k.lib) {
			libs = append(libs, k.lib)
		}
	}
	return libs
}

// summary is the README's table: per scenario with a rampart baseline, each
// peer's ns/op divided by rampart's, as the range over the cases both ran;
// the cases column and the allocation range cover the compared cases only.
func summary(r *run) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Run: %s. Each cell is the peer's ns/op divided by rampart's in the same case "+
		"of the same run (above 1: slower than rampart), as the range over the scenario's cases; "+
		"the [full tables](bench/README.md) have every case and variant.\n\n", caption(r))
	b.WriteString("| scenario | cases | rampart allocs/op | peer ns/op ÷ rampart ns/op |\n|---|---|--:|---|\n")
	for _, sc := range r.scenarios() {
		peers := r.peers(sc)
		var cases []string // the cases with rampart and at least one peer
		var allocs []float64
		for _, k := range r.order {
			if k.scenario != sc || k.lib != "rampart" {
				continue
			}
			compared := false
			for _, lib := range peers {
				if _, ok := r.samples[key{sc, k.caseName, lib}]; ok {
					compared = true
				}
			}
			if !compared {
				continue
			}
			cases = append(cases, k.caseName)
			if s := r.samples[k]; len(s.allocs) > 0 {
				allocs = append(allocs, median(s.allocs))
			}
		}
		var cells []string
		for _, lib := range peers {
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, c := range cases {
				k := key{sc, c, lib}
				if _, ok := r.samples[k]; !ok {
					continue
				}
				if v, ok := r.ratio(k); ok {
					lo, hi = min(lo, v), max(hi, v)
				}
			}
			switch {
			case math.IsInf(lo, 1):
				continue
			case fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi):
				cells = append(cells, fmt.Sprintf("%s %.2f×", lib, lo))
			default:
				cells = append(cells, fmt.Sprintf("%s %.2f–%.2f×", lib, lo, hi))
			}
		}
		if len(cells) == 0 {
			continue // no rampart baseline or no peer: the full tables have it
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", sc, strings.Join(cases, ", "), fmtRange(allocs), strings.Join(cells, ", "))
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

// headline is the README's sentence with the headline comparison, or a
// sentence saying the run lacks it.
func headline(r *run) string {
	rk := key{headlineScenario, headlineCase, "rampart"}
	pk := key{headlineScenario, headlineCase, headlinePeer}
	rs, pr := r.samples[rk], r.samples[pk]
	v, ok := r.ratio(pk)
	if rs == nil || pr == nil || !ok {
		return fmt.Sprintf("The benchmark run has no %s/%s case for rampart and %s.", headlineScenario, headlineCase, headlinePeer)
	}
	return fmt.Sprintf("In the committed benchmark run (%s), %s costs %s ns and %s with rampart, "+
		"against %s ns and %s with failsafe-go: %.1f× less time (`%s/%s` in the [full tables](bench/README.md)).",
		caption(r), headlineWhat, fmtNs(median(rs.ns)), allocations(r.allocs(rk)), fmtNs(median(pr.ns)), allocations(r.allocs(pk)),
		v, headlineScenario, headlineCase)
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
