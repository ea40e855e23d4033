package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleRun = `goos: linux
goarch: amd64
cpu: AMD EPYC
BenchmarkBulkhead/Admit/rampart-2         	100	  10.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/rampart-2         	100	  12.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/rampart-2         	100	  11.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  50.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  66.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkBulkhead/Admit/chan-2            	100	  55.0 ns/op	 0 B/op	 0 allocs/op
BenchmarkFloor/TimeNow/direct-2           	100	  60.0 ns/op	 0 B/op	 0 allocs/op
`

func TestParseRender(t *testing.T) {
	r, err := parse(strings.NewReader(sampleRun))
	if err != nil {
		t.Fatal(err)
	}
	if r.procs != 2 || r.count != 3 || r.cpu != "AMD EPYC" {
		t.Fatalf("header: %+v", r)
	}
	out := render(r)
	for _, want := range []string{
		"#### Bulkhead",
		"| Admit | rampart | 11.0 | 0 | — |",
		"| Admit | chan | 55.0 | 0 | 5.00 |",
		"| TimeNow | direct | 60.0 | 0 | — |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestSplice(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	os.WriteFile(p, []byte("a\n"+startMarker+"\nold\n"+endMarker+"\nb\n"), 0o644)
	if err := splice(p, "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if string(got) != "a\n"+startMarker+"\nnew\n\n"+endMarker+"\nb\n" {
		t.Fatalf("got %q", got)
	}
	os.WriteFile(p, []byte("no markers"), 0o644)
	if splice(p, "x") == nil {
		t.Fatal("no error without markers")
	}
}
