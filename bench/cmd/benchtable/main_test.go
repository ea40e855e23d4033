package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const sampleRun = `goversion: go1.26.8
benchcmd: cd bench && go test -run '^$' -bench . -benchmem -count 3 ./...
goos: linux
goarch: amd64
cpu: AMD EPYC
BenchmarkBulkhead/Admit/rampart-2         	100	  10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/rampart-2         	100	  12.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/rampart-2         	100	  11.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/rampart-do-2      	100	  22.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  66.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  55.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/failsafe-2        	100	  880 ns/op	 384 B/op	 13 allocs/op
BenchmarkBulkhead/Reject/rampart-2        	100	  4.00 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Reject/rampart-do-2     	100	  10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Reject/chan-2           	100	  8.00 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Reject/failsafe-2       	100	  800 ns/op	 384 B/op	 13 allocs/op
BenchmarkBulkhead/Reject/failsafe-permit-2	100	  6.00 ns/op	 0 B/op	 0 allocs/op
BenchmarkFloor/TimeNow/direct-2           	100	  60.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkPipeline/Success/rampart-2       	100	  200 ns/op	 48 B/op	 1 allocs/op
BenchmarkPipeline/Success/failsafe-2      	100	  3000 ns/op	 1504 B/op	 33 allocs/op
BenchmarkPipeline/Reject/rampart-2        	100	  100 ns/op	 0 B/op	 0 allocs/op
BenchmarkPipeline/Reject/failsafe-2       	100	  2000 ns/op	 768 B/op	 23 allocs/op
BenchmarkPipeline/SuccessSoftTimeout/rampart-2	100	  50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkPipeline/SuccessSoftTimeout/failsafe-2	100	  3100 ns/op	 1504 B/op	 33 allocs/op
BenchmarkTimeout/Success/rampart-2        	100	  100 ns/op	 48 B/op	 1 allocs/op
BenchmarkTimeout/Success/direct-2         	100	  600 ns/op	 272 B/op	 4 allocs/op
BenchmarkTimeout/Success/handoff-floor-2  	100	  400 ns/op	 0 B/op	 0 allocs/op
BenchmarkMemory/CircuitBreaker/rampart-2        	1000	  50.0 ns/op	 320.0 B/instance	 320 B/op	 1 allocs/op
BenchmarkMemory/CircuitBreaker/rampart-compact-2	1000	  40.0 ns/op	 160.0 B/instance	 160 B/op	 1 allocs/op
BenchmarkMemory/CircuitBreaker/gobreaker-2      	1000	  90.0 ns/op	 480.0 B/instance	 480 B/op	 3 allocs/op
BenchmarkUnknown/Case/rampart-2           	100	  1.00 ns/op
BenchmarkUnknown/Case/failsafe-2          	100	  9.00 ns/op
`

func parseSample(t *testing.T) *run {
	t.Helper()
	r, err := parse(strings.NewReader(sampleRun))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRender(t *testing.T) {
	r := parseSample(t)
	if r.procs != 2 || r.count != 3 || r.cpu != "AMD EPYC" || r.goVersion != "go1.26.8" ||
		r.command != "cd bench && go test -run '^$' -bench . -benchmem -count 3 ./..." {
		t.Fatalf("header: %+v", r)
	}
	out := render(r)
	for _, want := range []string{
		"Run: go1.26.8, linux/amd64, CPU: AMD EPYC, GOMAXPROCS=2, -count=3, medians.",
		"## Bulkhead",
		"| Admit | rampart | primitive | Acquire + Release | 11.0 | 0 |  |",
		"| Admit | chan | primitive | buffered channel: non-blocking send + receive | 55.0 | 0 |",
		"| Admit | primitive: Acquire + Release against try-acquire + release | chan 55.0 ÷ rampart 11.0 | 5.00 |",
		"| Admit | executor: Do against failsafe's executor | failsafe 880 ÷ rampart-do 22.0 | 40.00 |",
		"| TimeNow | direct | baseline | the operation itself | 60.0 | 0 |  |",
		"| Success | executor, five policies, the function does not read ctx.Done() | failsafe 3000 ÷ rampart 200 | 15.00 |",
		"## Unknown\n\nNo comparison is declared for this scenario: its rows are not divided.",
		"| Case | failsafe | not declared | — | 9.00 | ? |  |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

// A ratio divides only the rows a pair declares: failsafe's executor by
// rampart's Do, never by rampart's bare Acquire + Release, which is divided
// only by the peers' primitives.
func TestRatioNeverDividesAPrimitiveByAnExecutor(t *testing.T) {
	r := parseSample(t)
	out := summary(r)
	for _, want := range []string{
		// failsafe's executor: 880/22 in Admit, 800/10 in Reject.
		"| Bulkhead | executor: Do against failsafe's executor | rampart-do | Admit, Reject | 0 | failsafe 40.00–80.00× |",
		// The primitives: chan 55/11 and 8/4, failsafe-permit 6/4 (Reject only).
		"| Bulkhead | primitive: Acquire + Release against try-acquire + release | rampart | Admit, Reject | 0 | failsafe-permit 1.50×, chan 2.00–5.00× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// failsafe's executor over rampart's primitive would be 880/11 = 80.00 in
	// Admit and 800/4 = 200.00 in Reject.
	if strings.Contains(out, "200.00") || strings.Contains(render(r), "200.00") {
		t.Errorf("failsafe's executor divided by rampart's primitive:\n%s", out)
	}
	for _, sc := range r.scenarios() {
		g := groupOf(sc)
		for _, x := range r.ratios(sc) {
			rl, _ := g.libOf(x.caseName, x.pair.rampart)
			pl, _ := g.libOf(x.caseName, x.peer)
			if rl.kind != pl.kind {
				t.Errorf("%s/%s: %s (%s) divided by %s (%s)", sc, x.caseName, x.peer, pl.kind, x.pair.rampart, rl.kind)
			}
		}
	}
	// Without rampart's executor row, failsafe's executor has no ratio at all.
	noDo, err := parse(strings.NewReader("BenchmarkBulkhead/Reject/rampart-2 100 4.00 ns/op\n" +
		"BenchmarkBulkhead/Reject/failsafe-2 100 800 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rs := noDo.ratios("Bulkhead"); len(rs) != 0 {
		t.Errorf("ratios without a like-for-like rampart row: %+v", rs)
	}
	if out := summary(noDo); strings.Contains(out, "| Bulkhead |") {
		t.Errorf("summary row without a like-for-like rampart row:\n%s", out)
	}
}

// Every pair joins two rows of one kind (executor, primitive, handler,
// transport, instance) in every case it covers, a rampart row with peers'
// rows, and never a baseline.
func TestPairsJoinOneKind(t *testing.T) {
	for _, g := range groups {
		// The cases the declarations name, and "" for any other case.
		all := []string{""}
		for _, l := range g.libs {
			all = append(all, l.cases...)
		}
		for _, p := range g.pairs {
			all = append(all, p.cases...)
		}
		for _, p := range g.pairs {
			if !strings.HasPrefix(p.rampart, "rampart") {
				t.Errorf("%s %q: %q is not a rampart row", g.name, p.label, p.rampart)
			}
			cases := p.cases
			if cases == nil {
				cases = all
			}
			for _, c := range cases {
				rl, ok := g.libOf(c, p.rampart)
				if !ok {
					t.Errorf("%s/%s %q: %s is not declared", g.name, c, p.label, p.rampart)
					continue
				}
				if rl.kind == baseline {
					t.Errorf("%s/%s %q: %s is a baseline", g.name, c, p.label, p.rampart)
				}
				for _, peer := range p.peers {
					if strings.HasPrefix(peer, "rampart") {
						t.Errorf("%s %q: %q is not a peer", g.name, p.label, peer)
					}
					pl, ok := g.libOf(c, peer)
					switch {
					case !ok:
						t.Errorf("%s/%s %q: %s is not declared", g.name, c, p.label, peer)
					case pl.kind != rl.kind:
						t.Errorf("%s/%s %q: %s is %s, %s is %s", g.name, c, p.label, peer, pl.kind, p.rampart, rl.kind)
					}
				}
			}
		}
	}
}

// Every row of the committed run is declared: a benchmark added under a new
// name shows up here instead of as an undivided row (declare it in
// groups.go, with a pair if it has a like-for-like rampart row).
func TestEveryRowOfTheCommittedRunIsDeclared(t *testing.T) {
	for _, name := range undeclared(committedRun(t)) {
		t.Errorf("%s is not declared in groups.go", name)
	}
	if got := undeclared(parseSample(t)); strings.Join(got, " ") != "Unknown" {
		t.Errorf("undeclared in the sample: %q, want [Unknown]", got)
	}
}

// The adaptive limiter's table shows both rampart rows against failsafe's,
// which times every call: the sampled Acquire/Release and the every-call
// one, and says the rates at which sampling starts.
func TestAdaptiveShowsSampledAndEveryCallRows(t *testing.T) {
	r := committedRun(t)
	out := summary(r)
	for _, want := range []string{
		"| Adaptive | primitive, every call timed | rampart-every | Admit, AdmitParallel |",
		"| Adaptive | primitive, rampart timing a sample (1 call in stride: the rows' stride metric), failsafe every call | rampart | Admit, AdmitParallel |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	full := render(r)
	if !strings.Contains(full, "sampling starts at 256 calls/s (1 call in 2) and reaches 1 in 64 at 8192 calls/s") {
		t.Errorf("the Adaptive note does not say where sampling starts:\n%s", full)
	}
	// The sampled row shows its stride (the run's value, whatever it is).
	if !regexp.MustCompile(`\| Admit \| rampart \| primitive \| Acquire \+ Release, 1 call in stride timed \| [\d.]+ \| 0 \| \d+ stride \|`).MatchString(full) {
		t.Errorf("the sampled row has no stride in\n%s", full)
	}
}

// rampart's soft timeout (it never cancels) is not divided by failsafe's
// cancelling timeout.
func TestSoftTimeoutIsNotDividedByACancellingOne(t *testing.T) {
	r := parseSample(t)
	for _, x := range r.ratios("Pipeline") {
		if x.caseName == "SuccessSoftTimeout" {
			t.Errorf("SuccessSoftTimeout divided: %s ÷ %s", x.peer, x.pair.rampart)
		}
	}
	if out := summary(r); strings.Contains(out, "SuccessSoftTimeout") {
		t.Errorf("summary compares SuccessSoftTimeout:\n%s", out)
	}
	if full := render(r); !strings.Contains(full, "| SuccessSoftTimeout | failsafe | executor | failsafe with its cancelling timeout: not a soft timeout | 3100 | 33 |  |") {
		t.Errorf("the soft-timeout case's failsafe row is not labelled:\n%s", full)
	}
}

// The Memory scenario compares bytes per instance (B/instance, a custom
// metric), the peers' divided by the default and by the compact layout.
func TestMemoryComparesBytesPerInstance(t *testing.T) {
	r := parseSample(t)
	full := render(r)
	for _, want := range []string{
		"## Memory",
		"| case | library | kind | calls | B/instance |",
		"| CircuitBreaker | rampart-compact | instance | Config.Compact | 160 |",
		"| case | compared | division (B/instance) | ratio |",
		"| CircuitBreaker | bytes per instance, default layout | gobreaker 480 ÷ rampart 320 | 1.50 |",
		"| CircuitBreaker | bytes per instance, compact layout | gobreaker 480 ÷ rampart-compact 160 | 3.00 |",
	} {
		if !strings.Contains(full, want) {
			t.Errorf("missing %q in\n%s", want, full)
		}
	}
	out := summary(r)
	for _, want := range []string{
		"| Memory | bytes per instance, default layout | rampart | CircuitBreaker | — | gobreaker 1.50× |",
		"| Memory | bytes per instance, compact layout | rampart-compact | CircuitBreaker | — | gobreaker 3.00× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestSummaryRatioRangesPerComparison(t *testing.T) {
	out := summary(parseSample(t))
	for _, want := range []string{
		"| scenario | compared | rampart row | cases | rampart allocs/op | peer ÷ rampart |",
		// allocs differ between the cases: a range.
		"| Pipeline | executor, five policies, the function does not read ctx.Done() | rampart | Success, Reject | 0–1 | failsafe 15.00–20.00× |",
		"| Timeout | cancelling timeout, the function does not read ctx.Done() | rampart | Success | 1 | direct 6.00× |",
		"[full tables](bench/README.md)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	// A scenario without declarations, a baseline and a floor are not
	// divided.
	for _, unwanted := range []string{"Floor", "Unknown", "handoff-floor"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("summary has %q:\n%s", unwanted, out)
		}
	}
}

func TestCaptionSaysWhatTheRunDidNotRecord(t *testing.T) {
	r, err := parse(strings.NewReader("goos: linux\ngoarch: amd64\nBenchmarkA/B/rampart-2 1 5.0 ns/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := caption(r), "not recorded, linux/amd64, CPU: not recorded, GOMAXPROCS=2, -count=1, medians"; got != want {
		t.Fatalf("caption %q, want %q", got, want)
	}
	if doc := renderFile(r, "regen", "results/x.txt", nil); !strings.Contains(doc, "- command of the run: not recorded\n") {
		t.Fatalf("no 'not recorded' command in\n%s", doc)
	}
}

func TestHeadlineFromThePipelineSuccessCase(t *testing.T) {
	got := headline(parseSample(t))
	for _, want := range []string{
		"whose function does not read its context's Done channel costs 200 ns and 1 allocation with rampart, " +
			"against 3000 ns and 33 allocations with failsafe-go: 15.0× less time (`Pipeline/Success`",
		"go1.26.8, linux/amd64, CPU: AMD EPYC",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in %q", want, got)
		}
	}
	r, _ := parse(strings.NewReader("BenchmarkBulkhead/Admit/rampart-2 1 5.0 ns/op\n"))
	if got := headline(r); !strings.Contains(got, "has no Pipeline/CalleeReadsDone or Pipeline/Success case") {
		t.Errorf("headline without the case: %q", got)
	}
}

// With a case whose function reads ctx.Done(), the headline uses it.
func TestHeadlinePrefersTheCaseThatReadsDone(t *testing.T) {
	r, err := parse(strings.NewReader(sampleRun +
		"BenchmarkPipeline/CalleeReadsDone/rampart-2 100 300 ns/op 96 B/op 2 allocs/op\n" +
		"BenchmarkPipeline/CalleeReadsDone/failsafe-2 100 3300 ns/op 1504 B/op 33 allocs/op\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "whose function waits on its context's Done channel costs 300 ns and 2 allocations with rampart, " +
		"against 3300 ns and 33 allocations with failsafe-go: 11.0× less time (`Pipeline/CalleeReadsDone`"
	if got := headline(r); !strings.Contains(got, want) {
		t.Errorf("missing %q in %q", want, got)
	}
}

func TestRenderFileHeader(t *testing.T) {
	doc := renderFile(parseSample(t), generatedBy("results/latest.txt"), "results/latest.txt",
		[]string{"github.com/failsafe-go/failsafe-go v0.9.8"})
	for _, want := range []string{
		"<!-- Generated by cmd/benchtable; do not edit. Regenerate with: cd bench && go run ./cmd/benchtable -in results/latest.txt -out README.md -readme ../README.md -->",
		"- results file: `bench/results/latest.txt`",
		"- command of the run: `cd bench && go test -run '^$' -bench . -benchmem -count 3 ./...`",
		"- Go: go1.26.8; platform: linux/amd64; CPU: AMD EPYC; GOMAXPROCS: 2; repetitions: 3",
		"- peers, as pinned by `bench/go.mod`: github.com/failsafe-go/failsafe-go v0.9.8",
		"## Bulkhead",
		"| Reject | failsafe | executor | failsafe.With(bulkhead).Run(fn), executor built once | 800 | 13 |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("missing %q in\n%s", want, doc)
		}
	}
}

func TestRequiresListsDirectRequirementsButTheRoot(t *testing.T) {
	got := requires(`module m

go 1.26.0

require github.com/single/dep v1.0.0

require (
	github.com/a/b v1.2.3
	github.com/rampart-go/rampart v0.0.0-00010101000000-000000000000
	github.com/c/d v0.1.0 // indirect
)
`)
	want := []string{"github.com/single/dep v1.0.0", "github.com/a/b v1.2.3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("requires = %q, want %q", got, want)
	}
}

func TestSpliceAllReplacesEveryMarkerPair(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	os.WriteFile(p, []byte("a <!-- h:start -->old h<!-- h:end --> b\n<!-- t:start -->\nold\n<!-- t:end -->\nc\n"), 0o644)
	if err := spliceAll(p, map[string]string{"h": "new h", "t": "new\n"}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if want := "a <!-- h:start -->\n\nnew h\n\n<!-- h:end --> b\n<!-- t:start -->\n\nnew\n\n<!-- t:end -->\nc\n"; string(got) != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestSpliceAllWritesNothingWhenAMarkerIsMissing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	for _, text := range []string{
		"<!-- t:start -->\nold\n<!-- t:end -->\n",                                    // no h markers
		"<!-- h:start --><!-- h:end --><!-- t:end -->x<!-- t:start -->",              // t reversed
		"<!-- h:start --><!-- h:end --><!-- t:start --><!-- t:end --><!-- t:end -->", // t twice
	} {
		os.WriteFile(p, []byte(text), 0o644)
		if err := spliceAll(p, map[string]string{"h": "H", "t": "T"}); err == nil {
			t.Errorf("no error for %q", text)
		}
		if got, _ := os.ReadFile(p); string(got) != text {
			t.Errorf("file changed to %q", got)
		}
	}
}

// The committed bench/README.md and the README's summary and headline are
// what the committed run generates: nobody edited them by hand, and nobody
// changed the run without regenerating them.
func TestGeneratedFilesMatchTheCommittedRun(t *testing.T) {
	const in = "results/latest.txt"
	r := committedRun(t)
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	want := renderFile(r, generatedBy(in), in, requires(string(mod)))
	got, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("bench/README.md is not what %s generates: run `%s`", in, generatedBy(in))
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{tableMarker: summary(r), headlineMarker: headline(r)} {
		block := "<!-- " + name + ":start -->\n\n" + strings.TrimRight(text, "\n") + "\n\n<!-- " + name + ":end -->"
		if !strings.Contains(string(readme), block) {
			t.Errorf("README.md's %s block is not what %s generates: run `%s`", name, in, generatedBy(in))
		}
	}
}

// committedRun is the committed results file, parsed.
func committedRun(t *testing.T) *run {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "results", "latest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
