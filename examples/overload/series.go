package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rampart-go/rampart/shed"
)

// point is one second of a run (the last one of a run may be shorter):
// rates are per second over the interval that ends at T, latencies are the
// successes' that completed in it (0: none did), counts in flight are read
// at T. The policies' fields are the protected run's (empty or 0 in the
// unprotected one).
type point struct {
	T              float64 `json:"t"`         // seconds since the run started, at the end of the interval
	Dt             float64 `json:"dt"`        // the interval's length, seconds (to the microsecond)
	Phase          string  `json:"phase"`     // the phase being offered at T
	Offered        float64 `json:"offered"`   // iterations due by the schedule
	Sent           float64 `json:"sent"`      // iterations the generator sent (the rest it dropped: no free VU, or too late)
	Completed      float64 `json:"completed"` // responses or client errors: succeeded + shed + failed
	Succeeded      float64 `json:"succeeded"`
	Shed           float64 `json:"shed"`   // 503 with Retry-After
	Failed         float64 `json:"failed"` // anything else
	InFlightClient int64   `json:"in_flight_client"`
	InFlightServer int64   `json:"in_flight_server"`
	DBWaiting      int64   `json:"db_waiting"` // callers waiting for a database connection
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`

	BreakerState       string  `json:"breaker_state,omitempty"` // the database breaker's state ("closed", "open", "half-open")
	BreakerFailureRate float64 `json:"breaker_failure_rate"`    // percent of its window
	AdmissionInFlight  int64   `json:"admission_in_flight"`     // the entry bulkhead's permits held
	AdmissionMax       int64   `json:"admission_max"`
	DBInFlight         int64   `json:"db_in_flight"` // the database bulkhead's permits held
	DBMax              int64   `json:"db_max"`

	// The runtime's view of the process over the interval (both modes, both
	// scenarios; a RuntimeSource of package shed, read by the recorder), and
	// in the CPU scenario the capacity measured before the run and the
	// protected run's shedder.
	SchedP99ms   float64 `json:"sched_p99_ms"`         // p99 of the goroutines' scheduling latency (0: unknown, too few events)
	RunnablePerP float64 `json:"runnable_per_p"`       // runnable goroutines per P at T
	Capacity     float64 `json:"capacity,omitempty"`   // req/s the server completed closed-loop before the run
	ShedState    string  `json:"shed_state,omitempty"` // the shedder's state at T: "engaged" or "released"
	ShedInFlight int64   `json:"shed_in_flight"`       // its calls in flight
	ShedLimit    int64   `json:"shed_limit"`           // the calls in flight it admits while engaged (0: released)
}

// span is one phase's stretch of a run, in seconds since its start.
type span struct {
	Name  string  `json:"name"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// runSeries is one mode's recorded run.
type runSeries struct {
	Mode   string  `json:"mode"`
	Phases []span  `json:"phases"`
	Points []point `json:"points"`
}

// recording is what -out writes: the runs and what they ran on.
type recording struct {
	Command    string      `json:"command"`
	GoVersion  string      `json:"go_version"`
	CPU        string      `json:"cpu"`
	GOMAXPROCS int         `json:"gomaxprocs"`
	Rate       int         `json:"rate"`                  // offered req/s at full rate (the database scenario)
	Scenario   string      `json:"scenario,omitempty"`    // "db" (also when empty) or "cpu"
	SlowFactor float64     `json:"slow_factor,omitempty"` // -slow-factor (0: not recorded)
	CPULoad    float64     `json:"cpu_load,omitempty"`    // -cpu-load (0: not recorded)
	Runs       []runSeries `json:"runs"`
}

// recorder builds one run's series from the counters of its phases,
// called once a second by the progress loop.
type recorder struct {
	phases  []*phaseStats
	start   time.Time
	lastT   time.Time
	last    [6]int64 // offered, succeeded, shed, failed, completed, sent so far
	latSeen []int    // per phase: latencies already folded into a point
	plan    []planned
	series  runSeries
	runtime *shed.RuntimeSource // the runtime's signals at each point
	sig     shed.Signals
	// capacity is the CPU scenario's measured capacity (req/s), recorded
	// in every point; 0 in the database scenario.
	capacity float64

	// the counters and latencies seen before the last point, so that
	// finish can fold a short last interval into it
	prevLast [6]int64
	prevT    time.Time
	prevSeen []int
}

// planned is a started phase's schedule, for the offered rate.
type planned struct {
	start time.Time
	sc    schedule
}

func newRecorder(mode string, phases []*phaseStats, start time.Time) *recorder {
	r := &recorder{phases: phases, start: start, lastT: start, latSeen: make([]int, len(phases)), series: runSeries{Mode: mode}, runtime: shed.NewRuntimeSource()}
	r.runtime.Read(0, &r.sig) // the first reading: the next one is the change over the first interval
	return r
}

// phaseStarted marks the start of phase name, offered on schedule sc, at t.
func (r *recorder) phaseStarted(name string, sc schedule, t time.Time) {
	r.plan = append(r.plan, planned{t, sc})
	s := round3(t.Sub(r.start).Seconds())
	if n := len(r.series.Phases); n > 0 && r.series.Phases[n-1].End == 0 {
		r.series.Phases[n-1].End = s
	}
	r.series.Phases = append(r.series.Phases, span{Name: name, Start: s})
}

// phasesEnded closes the last phase at t.
func (r *recorder) phasesEnded(t time.Time) {
	if n := len(r.series.Phases); n > 0 && r.series.Phases[n-1].End == 0 {
		r.series.Phases[n-1].End = round3(t.Sub(r.start).Seconds())
	}
}

// record adds the point of the interval that ends at now; p holds the
// in-flight counts and the policies' state, read by the caller.
func (r *recorder) record(now time.Time, phase string, p point) {
	dt := now.Sub(r.lastT).Seconds()
	if dt <= 0 {
		return
	}
	var cur [6]int64
	var lat []time.Duration
	r.prevSeen = append(r.prevSeen[:0], r.latSeen...)
	for _, pl := range r.plan {
		cur[0] += pl.sc.dueBy(now.Sub(pl.start).Seconds())
	}
	for i, q := range r.phases {
		cur[5] += q.sent.Load()
		cur[1] += q.ok.Load()
		cur[2] += q.shed.Load()
		cur[3] += q.failed.Load()
		q.mu.Lock()
		lat = append(lat, q.lat[r.latSeen[i]:]...)
		r.latSeen[i] = len(q.lat)
		q.mu.Unlock()
	}
	cur[4] = cur[1] + cur[2] + cur[3]
	rate := func(i int) float64 { return float64(cur[i]-r.last[i]) / dt }
	// Dt to the microsecond: the series integrate (rate × dt) back to the
	// counts, and at a thousand requests a second a millisecond of
	// rounding would be a request per point.
	p.T, p.Dt, p.Phase = round3(now.Sub(r.start).Seconds()), round6(dt), phase
	p.Offered, p.Succeeded, p.Shed, p.Failed, p.Completed, p.Sent = round3(rate(0)), round3(rate(1)), round3(rate(2)), round3(rate(3)), round3(rate(4)), round3(rate(5))
	r.sig = shed.Signals{SchedLatency: -1, CPU: -1, Runnable: -1} // unknown unless read
	r.runtime.Read(0, &r.sig)
	if r.sig.SchedLatency > 0 {
		p.SchedP99ms = round3(float64(r.sig.SchedLatency) / float64(time.Millisecond))
	}
	p.RunnablePerP = round3(max(r.sig.Runnable, 0))
	p.Capacity = round3(r.capacity)
	if len(lat) > 0 {
		slices.Sort(lat)
		at := func(q float64) float64 {
			return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
		}
		p.P50ms, p.P99ms = round3(at(0.50)), round3(at(0.99))
	}
	r.series.Points = append(r.series.Points, p)
	r.prevLast, r.prevT = r.last, r.lastT
	r.last, r.lastT = cur, now
}

// finish records the run's last point, the interval after the last tick:
// one shorter than half a second is folded into the point before it (the
// rates over both intervals together), since a few responses over a
// fraction of a millisecond would read as a spike of thousands a second
// and scale the row's y axis, shared by both runs, to it. The folded point
// keeps the runtime's signals read at the tick: the reading after it
// covers only the short interval.
func (r *recorder) finish(now time.Time, phase string, p point) {
	n := len(r.series.Points)
	if n == 0 || now.Sub(r.lastT) >= 500*time.Millisecond {
		r.record(now, phase, p)
		return
	}
	dropped := r.series.Points[n-1]
	r.series.Points = r.series.Points[:n-1]
	r.last, r.lastT = r.prevLast, r.prevT
	copy(r.latSeen, r.prevSeen)
	r.record(now, phase, p)
	if m := len(r.series.Points); m == n {
		r.series.Points[m-1].SchedP99ms, r.series.Points[m-1].RunnablePerP = dropped.SchedP99ms, dropped.RunnablePerP
	}
}

func round6(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 6, 64), 64)
	return v
}

func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 3, 64), 64)
	return v
}

// newRecording describes this process's runs.
func newRecording(o options, args []string, runs []runSeries) recording {
	return recording{
		Command:    strings.TrimSpace("go run . " + strings.Join(args, " ")), // in examples/overload, a module of its own
		GoVersion:  runtime.Version(),
		CPU:        cpuModel(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Rate:       o.rate,
		SlowFactor: o.slowFactor,
		CPULoad:    o.cpuLoad,
		Runs:       runs,
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo, or GOARCH where
// there is none.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return fmt.Sprintf("%s (%d logical CPUs)", strings.TrimSpace(v), runtime.NumCPU())
			}
		}
	}
	return fmt.Sprintf("%s (%d logical CPUs)", runtime.GOARCH, runtime.NumCPU())
}

// csvHeader names writeCSV's columns.
var csvHeader = []string{"mode", "t", "dt", "phase", "offered", "sent", "completed", "succeeded", "shed", "failed",
	"in_flight_client", "in_flight_server", "db_waiting", "p50_ms", "p99_ms",
	"breaker_state", "breaker_failure_rate", "admission_in_flight", "admission_max", "db_in_flight", "db_max",
	"sched_p99_ms", "runnable_per_p", "capacity", "shed_state", "shed_in_flight", "shed_limit"}

// writeCSV writes one row per mode and point.
func writeCSV(w io.Writer, rec recording) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	d := func(x int64) string { return strconv.FormatInt(x, 10) }
	for _, r := range rec.Runs {
		for _, p := range r.Points {
			if err := cw.Write([]string{r.Mode, f(p.T), f(p.Dt), p.Phase, f(p.Offered), f(p.Sent), f(p.Completed), f(p.Succeeded), f(p.Shed), f(p.Failed),
				d(p.InFlightClient), d(p.InFlightServer), d(p.DBWaiting), f(p.P50ms), f(p.P99ms),
				p.BreakerState, f(p.BreakerFailureRate), d(p.AdmissionInFlight), d(p.AdmissionMax), d(p.DBInFlight), d(p.DBMax),
				f(p.SchedP99ms), f(p.RunnablePerP), f(p.Capacity), p.ShedState, d(p.ShedInFlight), d(p.ShedLimit)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeOutputs writes BASE.json, BASE.csv, BASE.svg and BASE.html into
// dir (created if missing), BASE being "overload" for the database
// scenario and "overload-cpu" for the CPU scenario, and returns their
// paths.
func writeOutputs(dir string, rec recording) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(rec, "", " ")
	if err != nil {
		return nil, err
	}
	base := specOf(rec).base
	var csvBuf, svgBuf, htmlBuf strings.Builder
	if err := writeCSV(&csvBuf, rec); err != nil {
		return nil, err
	}
	svg := renderSVG(rec)
	svgBuf.WriteString(svg)
	if err := writeHTML(&htmlBuf, rec, svg, []string{base + ".json", base + ".csv"}); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range []struct {
		name string
		data []byte
	}{
		{base + ".json", append(js, '\n')},
		{base + ".csv", []byte(csvBuf.String())},
		{base + ".svg", []byte(svgBuf.String())},
		{base + ".html", []byte(htmlBuf.String())},
	} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeChart writes the chart of rec, read from the recording at path,
// into dir: NAME.svg and NAME.html, NAME being path's file name without
// its extension, the page linking to path (and to NAME.csv beside it, if
// there is one). It writes nothing else: neither path nor another
// recording of dir is rewritten.
func writeChart(dir, path string, rec recording) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	var data []string
	for _, f := range []string{path, strings.TrimSuffix(path, filepath.Ext(path)) + ".csv"} {
		if f != path {
			if _, err := os.Stat(f); err != nil {
				continue
			}
		}
		data = append(data, relativeTo(dir, f))
	}
	svg := renderSVG(rec)
	var page strings.Builder
	if err := writeHTML(&page, rec, svg, data); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range [][2]string{{name + ".svg", svg}, {name + ".html", page.String()}} {
		p := filepath.Join(dir, f[0])
		if err := os.WriteFile(p, []byte(f[1]), 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// relativeTo is file's path from dir, as a link ("/"-separated), or its
// absolute path where there is no relative one.
func relativeTo(dir, file string) string {
	ad, err1 := filepath.Abs(dir)
	af, err2 := filepath.Abs(file)
	if err1 != nil || err2 != nil {
		return filepath.ToSlash(file)
	}
	if rel, err := filepath.Rel(ad, af); err == nil {
		return filepath.ToSlash(rel)
	}
	return filepath.ToSlash(af)
}

// readRecording reads a recording written by -out (overload.json or
// overload-cpu.json).
func readRecording(path string) (recording, error) {
	var rec recording
	b, err := os.ReadFile(path)
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", path, err)
	}
	if len(rec.Runs) == 0 {
		return rec, fmt.Errorf("%s: no runs", path)
	}
	return rec, nil
}
