package shed

import (
	"math"
	"reflect"
	"runtime/metrics"
	"time"
)

// Signals is one reading of the runtime's overload signals. A negative
// value is unknown: the shedder ignores it (it neither engages nor holds the
// shedder). Before each Read the shedder sets every field to -1, so a
// Source fills in only what it knows.
type Signals struct {
	// SchedLatency is the 99th percentile of the time goroutines spent
	// runnable before they ran, over the scheduling events since the
	// previous reading: how long work waits for a P. It grows with the run
	// queue when the process has more CPU work than GOMAXPROCS serves, and
	// when the OS gives the process's threads less CPU than GOMAXPROCS.
	SchedLatency time.Duration
	// CPU is the busy share of GOMAXPROCS, in [0, 1]: the CPU time spent
	// running Go code and the runtime (GC, scavenger) over the CPU time
	// GOMAXPROCS Ps had, since the previous reading.
	CPU float64
	// Runnable is the goroutines ready to run and not running, per P, now.
	Runnable float64
}

// Source reads the overload signals. The shedder calls Read from one
// goroutine at a time (the caller that won the sample, at most once per
// SampleInterval), with the sample's reading now and s set to unknown (-1
// everywhere); Read fills in what it knows. Read runs on a caller's
// admission path: keep it short and allocation-free. A Source that panics is
// recovered (counted in Stats.ListenerPanics) and its reading discarded.
//
// To correct the runtime where its view is wrong, wrap a [RuntimeSource]:
//
//	rt := shed.NewRuntimeSource()
//	src := shed.SourceFunc(func(now int64, s *shed.Signals) {
//		rt.Read(now, s)
//		s.CPU = cgroupCPU() // the container's CPU, which the runtime does not see
//	})
type Source interface {
	Read(now int64, s *Signals)
}

// SourceFunc adapts a function to a [Source].
type SourceFunc func(now int64, s *Signals)

// Read calls f(now, s).
func (f SourceFunc) Read(now int64, s *Signals) { f(now, s) }

// isNilSource reports whether src is a non-nil interface that holds a nil
// pointer or func, whose Read would panic on every sample.
func isNilSource(src Source) bool {
	if src == nil {
		return false
	}
	v := reflect.ValueOf(src)
	switch v.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Interface, reflect.Map, reflect.Slice, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// The runtime/metrics names a RuntimeSource reads, in the order of its
// samples.
const (
	metricSched    = "/sched/latencies:seconds"
	metricCPUTotal = "/cpu/classes/total:cpu-seconds"
	metricCPUIdle  = "/cpu/classes/idle:cpu-seconds"
	metricRunnable = "/sched/goroutines/runnable:goroutines"
	metricProcs    = "/sched/gomaxprocs:threads"
)

// minSchedEvents is the least number of scheduling events between two
// readings for SchedLatency to be known: a percentile of a handful of
// events (an idle process) is one event's latency.
const minSchedEvents = 16

// RuntimeSource reads the signals from the Go runtime (runtime/metrics).
// Create it with [NewRuntimeSource]; it is the default Config.Source. It is
// not safe for concurrent use: give each Shedder its own (the shedder calls
// Read from one goroutine at a time).
//
// SchedLatency is the p99 of the change in /sched/latencies:seconds between
// two readings (the histogram is cumulative since the process started: the
// difference is the distribution of the latest interval), taken at the
// lower bound of its bucket: the runtime's buckets are four to a power of
// two, up to 25 % wide, and the lower bound is at or below the true p99,
// so reaching SchedLatencyThreshold means the p99 did (the true p99 may
// be up to 25 % above the reading). Unknown with fewer than 16 events in the
// interval.
//
// CPU is Δ(total − idle) / Δtotal of /cpu/classes/total:cpu-seconds and
// /cpu/classes/idle:cpu-seconds; total is GOMAXPROCS integrated over wall
// time, so this is the CPU used against GOMAXPROCS. The runtime updates
// these classes only at the end of a GC cycle (runtime/mgc.go,
// gcMarkTermination), so CPU is unknown for a reading with no GC since the
// previous one, and otherwise covers the time between the two GCs. It counts
// a P running a goroutine as busy even while the OS has descheduled its
// thread: on a host shared with other processes (a container with a CPU
// quota, a sandbox) it overstates the CPU the process had, and
// SchedLatency, which grows either way, is the better signal; ignore CPU
// there (Config.Ignore) or supply the container's figure.
//
// Runnable is /sched/goroutines/runnable:goroutines divided by
// /sched/gomaxprocs:threads; unknown where the runtime lacks the metric.
//
// A Read allocates nothing: the samples and the previous histogram are
// allocated by NewRuntimeSource, and metrics.Read reuses a histogram value
// it already filled. A RuntimeSource holds 3120 B with Go 1.26's
// 162-bucket scheduling histogram: its counts twice (the runtime's and the
// previous reading's, 1408 B each in their size class), the histogram's
// header and the struct (TestShedderBytes).
type RuntimeSource struct {
	samples   [5]metrics.Sample
	prev      []uint64 // the scheduling histogram's counts at the previous reading
	prevTotal float64
	prevIdle  float64
	primed    bool
}

// NewRuntimeSource returns a RuntimeSource. It takes the first reading,
// so that the first Read reports the change since NewRuntimeSource: build
// the Source (and the Shedder that owns it) when its traffic starts, or
// its first sample judges whatever ran since.
func NewRuntimeSource() *RuntimeSource {
	r := &RuntimeSource{}
	for i, name := range [...]string{metricSched, metricCPUTotal, metricCPUIdle, metricRunnable, metricProcs} {
		r.samples[i].Name = name
	}
	metrics.Read(r.samples[:]) // allocates the histogram's value once; later reads reuse it
	if r.samples[0].Value.Kind() == metrics.KindFloat64Histogram {
		r.prev = make([]uint64, len(r.samples[0].Value.Float64Histogram().Counts))
	}
	r.record()
	return r
}

// Read fills s from the runtime: see [RuntimeSource].
func (r *RuntimeSource) Read(_ int64, s *Signals) {
	metrics.Read(r.samples[:])
	if r.primed {
		s.SchedLatency = r.schedP99()
		if r.samples[1].Value.Kind() == metrics.KindFloat64 && r.samples[2].Value.Kind() == metrics.KindFloat64 {
			total, idle := r.samples[1].Value.Float64(), r.samples[2].Value.Float64()
			if dt := total - r.prevTotal; dt > 0 {
				busy := dt - (idle - r.prevIdle)
				s.CPU = min(max(busy/dt, 0), 1)
			}
		}
	}
	if r.samples[3].Value.Kind() == metrics.KindUint64 && r.samples[4].Value.Kind() == metrics.KindUint64 {
		if procs := r.samples[4].Value.Uint64(); procs > 0 {
			s.Runnable = float64(r.samples[3].Value.Uint64()) / float64(procs)
		}
	}
	r.record()
}

// record keeps the current reading as the previous one.
func (r *RuntimeSource) record() {
	if r.samples[0].Value.Kind() == metrics.KindFloat64Histogram {
		if h := r.samples[0].Value.Float64Histogram(); len(h.Counts) == len(r.prev) {
			copy(r.prev, h.Counts)
		}
	}
	if r.samples[1].Value.Kind() == metrics.KindFloat64 && r.samples[2].Value.Kind() == metrics.KindFloat64 {
		r.prevTotal, r.prevIdle = r.samples[1].Value.Float64(), r.samples[2].Value.Float64()
	}
	r.primed = true
}

// schedP99 returns the p99 of the scheduling latencies since the previous
// reading (whose counts are still in r.prev), or -1 with too few events.
func (r *RuntimeSource) schedP99() time.Duration {
	if r.samples[0].Value.Kind() != metrics.KindFloat64Histogram {
		return -1
	}
	h := r.samples[0].Value.Float64Histogram()
	if len(h.Counts) != len(r.prev) {
		return -1
	}
	var n uint64
	for i, c := range h.Counts {
		n += c - r.prev[i]
	}
	if n < minSchedEvents {
		return -1
	}
	return time.Duration(quantileOf(h, r.prev, n, 0.99) * 1e9)
}

// quantileOf returns the q-quantile of the n events by which h's counts
// exceed prev's, at the lower bound of its bucket (0 for the runtime's
// first, (−Inf, 0), bucket), which is at or below every event in it.
func quantileOf(h *metrics.Float64Histogram, prev []uint64, n uint64, q float64) float64 {
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range h.Counts {
		seen += c - prev[i]
		if seen >= rank {
			return max(h.Buckets[i], 0)
		}
	}
	return max(h.Buckets[len(h.Buckets)-2], 0)
}
