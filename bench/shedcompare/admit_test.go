package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kratos/aegis/ratelimit"
	"github.com/go-kratos/aegis/ratelimit/bbr"
	"github.com/zeromicro/go-zero/core/load"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/shed"
)

// The admission path while not overloaded, each library's primitive:
// admit, then end the call as a success. rampart: Acquire + Release (a
// clock read each), and AcquireAt + ReleaseAt on a cached ticker's readings;
// go-zero: Allow + Promise.Pass; aegis: Allow + the DoneFunc. Both peers
// read time.Now twice per call.

func BenchmarkShed(b *testing.B) {
	b.Run("Admit/rampart", func(b *testing.B) {
		s := newShedder(b, nil)
		b.ReportAllocs()
		for b.Loop() {
			p, err := s.Acquire()
			if err != nil {
				b.Fatal(err)
			}
			s.Release(p, rampart.Success)
		}
	})
	b.Run("Admit/rampart-cached", func(b *testing.B) {
		tk := rampart.NewCachedTicker(time.Millisecond)
		defer tk.Close()
		s := newShedder(b, tk)
		b.ReportAllocs()
		for b.Loop() {
			p, err := s.AcquireAt(tk.Now())
			if err != nil {
				b.Fatal(err)
			}
			s.ReleaseAt(p, tk.Now(), rampart.Success)
		}
	})
	b.Run("Admit/gozero", func(b *testing.B) {
		s := load.NewAdaptiveShedder()
		b.ReportAllocs()
		for b.Loop() {
			p, err := s.Allow()
			if err != nil {
				b.Fatal(err)
			}
			p.Pass()
		}
	})
	b.Run("Admit/aegis", func(b *testing.B) {
		l := bbr.NewLimiter()
		b.ReportAllocs()
		for b.Loop() {
			done, err := l.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(ratelimit.DoneInfo{})
		}
	})
	b.Run("AdmitParallel/rampart", func(b *testing.B) {
		s := newShedder(b, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if p, err := s.Acquire(); err == nil {
					s.Release(p, rampart.Success)
				}
			}
		})
	})
	b.Run("AdmitParallel/gozero", func(b *testing.B) {
		s := load.NewAdaptiveShedder()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if p, err := s.Allow(); err == nil {
					p.Pass()
				}
			}
		})
	})
	b.Run("AdmitParallel/aegis", func(b *testing.B) {
		l := bbr.NewLimiter()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if done, err := l.Allow(); err == nil {
					done(ratelimit.DoneInfo{})
				}
			}
		})
	})
}

// newShedder returns a Shedder that never engages (every signal ignored),
// so that the benchmark measures the admission path whatever the machine's
// load; its samples still run, one per SampleInterval.
func newShedder(b *testing.B, tk rampart.Ticker) *shed.Shedder {
	s, err := shed.New(shed.Config{Ticker: tk, Ignore: shed.SchedLatency | shed.CPU | shed.Runnable})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// TestCompareTable runs a short comparison and checks that the table has a
// row per shedder. The figures of so short a run mean nothing.
func TestCompareTable(t *testing.T) {
	if testing.Short() {
		t.Skip("burns CPU for a few seconds")
	}
	var out bytes.Buffer
	rs, err := compare(config{work: 200 * time.Microsecond, chunk: 50 * time.Microsecond, load: 2,
		warmup: 100 * time.Millisecond, duration: 300 * time.Millisecond, sample: 25 * time.Millisecond, measure: 100 * time.Millisecond}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 6 {
		t.Fatalf("%d rows, want 6", len(rs))
	}
	for _, name := range []string{"unloaded", "no shedding", "rampart shed", "25ms samples", "go-zero", "aegis"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("no row for %s in\n%s", name, out.String())
		}
	}
	for _, r := range rs {
		if r.offered <= 0 {
			t.Errorf("%s: nothing offered", r.name)
		}
	}
	if _, err := compare(config{}, io.Discard, io.Discard); err == nil {
		t.Error("compare accepted a zero config")
	}
}

// TestEachShedderIsBuiltJustBeforeItsRow: compare builds a row's shedder
// after the rows before it ran (and after its own capacity measurement),
// so that a RuntimeSource's first reading, the change since it was built,
// judges only its own row's traffic, not the earlier rows' overload.
func TestEachShedderIsBuiltJustBeforeItsRow(t *testing.T) {
	var log []string
	progress := writerFunc(func(p []byte) (int, error) {
		log = append(log, strings.TrimSpace(string(p)))
		return len(p), nil
	})
	c := config{work: 100 * time.Microsecond, chunk: 50 * time.Microsecond, load: 1,
		warmup: 10 * time.Millisecond, duration: 10 * time.Millisecond, sample: 25 * time.Millisecond, measure: 10 * time.Millisecond}
	c.rows = func(c config) []shedRow {
		rows := shedRows(c)
		for i := range rows {
			build, name := rows[i].build, rows[i].name
			rows[i].build = func() (admitter, func() string) {
				log = append(log, "build "+name)
				return build()
			}
		}
		return rows
	}
	if _, err := compare(c, io.Discard, progress); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range shedRows(c) {
		want = append(want, "build "+r.name, r.name+" done")
	}
	got := log[2:] // the calibration's line and the unloaded row's
	if !slices.Equal(got, want) {
		t.Fatalf("progress and builds:\n%s\nwant (after the unloaded row):\n%s", strings.Join(log, "\n"), strings.Join(want, "\n"))
	}
}

// writerFunc adapts a function to an io.Writer.
type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// BenchmarkShedSample is the cost of one sample's runtime read: what the
// caller that wins a sample pays, once per SampleInterval.
func BenchmarkShedSample(b *testing.B) {
	b.Run("RuntimeSource/rampart", func(b *testing.B) {
		r := shed.NewRuntimeSource()
		var s shed.Signals
		b.ReportAllocs()
		for b.Loop() {
			r.Read(0, &s)
		}
	})
}
