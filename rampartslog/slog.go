package rampartslog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/hedge"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// Messages of the records this package logs.
const (
	// MsgStateChange is the message of BreakerOnStateChange's records.
	MsgStateChange = "rampart: circuit breaker state change"
	// MsgLimitChange is the message of AdaptiveOnLimitChange's records.
	MsgLimitChange = "rampart: adaptive limit change"
	// MsgRejections is the message of a Summary's records.
	MsgRejections = "rampart: rejections"
	// MsgOverload is the message of ShedOnOverload's records.
	MsgOverload = "rampart: overload"
)

// BreakerOnStateChange returns a listener for
// circuitbreaker.Config.OnStateChange that logs each transition at Info,
// with the attributes policy ("circuitbreaker"), name, from and to.
func BreakerOnStateChange(logger *slog.Logger, name string) func(from, to circuitbreaker.State) {
	return func(from, to circuitbreaker.State) {
		logger.LogAttrs(context.Background(), slog.LevelInfo, MsgStateChange,
			slog.String("policy", "circuitbreaker"), slog.String("name", name),
			slog.String("from", from.String()), slog.String("to", to.String()))
	}
}

// ShedOnOverload returns a listener for shed.Config.OnOverload that logs
// each transition of the shedder at Info, with the attributes policy
// ("shed"), name and overloaded (true when it engages, false when it
// releases). With stats non-nil (a func returning the shedder, which the
// Config is built before: see the package doc), an engagement's record
// also carries the shedder's state at that sample: trigger (the signals
// at or above their thresholds), cap, sched_latency, cpu and runnable.
// The listener runs on the caller that took the sample, once per
// transition: shed's own rule for listeners.
func ShedOnOverload(logger *slog.Logger, name string, stats func() *shed.Shedder) func(on bool) {
	return func(on bool) {
		attrs := [9]slog.Attr{slog.String("policy", "shed"), slog.String("name", name), slog.Bool("overloaded", on)}
		n := 3
		if sh := shedderOf(stats); on && sh != nil {
			st := sh.Stats()
			attrs[3], attrs[4] = slog.String("trigger", signalNames(st.Trigger)), slog.Int("cap", st.Cap)
			attrs[5], attrs[6] = slog.Duration("sched_latency", st.Signals.SchedLatency), slog.Float64("cpu", st.Signals.CPU)
			attrs[7] = slog.Float64("runnable", st.Signals.Runnable)
			n = 8
		}
		logger.LogAttrs(context.Background(), slog.LevelInfo, MsgOverload, attrs[:n]...)
	}
}

func shedderOf(f func() *shed.Shedder) *shed.Shedder {
	if f == nil {
		return nil
	}
	return f()
}

// signalNames names the signals of t, joined by "+": "sched_latency",
// "cpu", "runnable", "in_flight", "latency" (the metrics adapters'
// rampart.signal values); "none" for none.
func signalNames(t shed.Signal) string {
	names := [...]struct {
		s    shed.Signal
		name string
	}{{shed.SchedLatency, "sched_latency"}, {shed.CPU, "cpu"}, {shed.Runnable, "runnable"}, {shed.InFlight, "in_flight"}, {shed.Latency, "latency"}}
	out := ""
	for _, n := range names {
		if t&n.s != 0 {
			if out != "" {
				out += "+"
			}
			out += n.name
		}
	}
	if out == "" {
		return "none"
	}
	return out
}

// AdaptiveOnLimitChange returns a listener for
// adaptive.Config.OnLimitChange that logs the limit at Info (attributes
// policy "adaptive", name, from, to) when it has moved by at least
// minChange (a fraction: 0.25 logs a move of 25 %) from the limit of the
// last line it logged, or from the first old limit it was told. A
// minChange of 0 logs every change.
func AdaptiveOnLimitChange(logger *slog.Logger, name string, minChange float64) func(oldLimit, newLimit int) {
	var logged atomic.Int64 // the limit of the last line logged; 0 before the first call
	return func(oldLimit, newLimit int) {
		base := logged.Load()
		if base == 0 {
			logged.CompareAndSwap(0, int64(oldLimit))
			base = logged.Load()
		}
		diff := float64(int64(newLimit) - base)
		if diff < 0 {
			diff = -diff
		}
		if diff == 0 || (base > 0 && diff < minChange*float64(base)) {
			return
		}
		if !logged.CompareAndSwap(base, int64(newLimit)) {
			return // a racing call logged a newer limit
		}
		logger.LogAttrs(context.Background(), slog.LevelInfo, MsgLimitChange,
			slog.String("policy", "adaptive"), slog.String("name", name),
			slog.Int64("from", base), slog.Int("to", newLimit))
	}
}

// Source is a set of named instances that a [Summary] reads at every
// flush, such as a *registry.Registry. Range calls f for each instance
// until f returns false.
type Source interface {
	Range(f func(name string, instance any) bool)
}

// ErrUnsupported is returned by [Summary.Add] for an instance with no
// count the summary reports.
var ErrUnsupported = errors.New("rampartslog: no summarised counts for this instance type")

// SummaryConfig configures [NewSummary].
type SummaryConfig struct {
	// Logger receives the summary records. Required.
	Logger *slog.Logger
	// Interval is the least time between two records of [Summary.Poll].
	// Zero means one minute. Must not be negative.
	Interval time.Duration
	// Level is the records' level. The zero value is Info.
	Level slog.Level
	// Ticker is the clock of Poll. Zero means rampart.DefaultTicker.
	Ticker rampart.Ticker
}

// Summary logs the rejections of the instances it knows, one record per
// flush (see the package doc). Its methods are safe for concurrent use.
type Summary struct {
	logger   *slog.Logger
	level    slog.Level
	interval int64
	tk       rampart.Ticker
	next     atomic.Int64 // the reading from which Poll flushes

	mu      sync.Mutex // Add, Remove, AddSource, Flush
	named   map[string]any
	sources []Source
	last    map[any]counts // the counts of each instance at the last flush
	lastAt  int64          // the reading of the last flush
}

// counts is what a Summary reads from one instance.
type counts [2]uint64

// kindCounts names the counts of each kind: the policy and the counters
// (one or two).
type kindCounts struct {
	policy   string
	counters [2]string
}

// countsOf reads inst's summarised counts; ok is false for a type with
// none, and for a nil pointer of a known type (whose Stats would panic).
func countsOf(inst any) (k kindCounts, c counts, ok bool) {
	if !supported(inst) {
		return kindCounts{}, counts{}, false
	}
	switch p := inst.(type) {
	case *circuitbreaker.Breaker:
		return kindCounts{"circuitbreaker", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *ratelimit.Limiter:
		return kindCounts{"ratelimit", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *ratelimit.Sharded:
		return kindCounts{"ratelimit", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *ratelimit.Keyed:
		return kindCounts{"ratelimit", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *bulkhead.Bulkhead:
		return kindCounts{"bulkhead", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *adaptive.Limiter:
		return kindCounts{"adaptive", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *adaptive.Throttler:
		return kindCounts{"adaptive.throttler", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	case *retry.Policy:
		s := p.Stats()
		return kindCounts{"retry", [2]string{"budget_refused", "give_ups"}}, counts{s.BudgetRefused, s.GiveUps}, true
	case *timeout.Timeout:
		s := p.Stats()
		return kindCounts{"timeout", [2]string{"timeouts", "rejected"}}, counts{s.Timeouts, s.Rejected}, true
	case *hedge.Hedger:
		return kindCounts{"hedge", [2]string{"budget_refused"}}, counts{p.Stats().BudgetRefused}, true
	case *shed.Shedder:
		return kindCounts{"shed", [2]string{"rejected"}}, counts{p.Stats().Rejected}, true
	}
	return kindCounts{}, counts{}, false
}

// supported reports whether countsOf knows inst's type, without reading
// its Stats (nil pointers of a known type are not supported).
func supported(inst any) bool {
	switch p := inst.(type) {
	case *circuitbreaker.Breaker:
		return p != nil
	case *ratelimit.Limiter:
		return p != nil
	case *ratelimit.Sharded:
		return p != nil
	case *ratelimit.Keyed:
		return p != nil
	case *bulkhead.Bulkhead:
		return p != nil
	case *adaptive.Limiter:
		return p != nil
	case *adaptive.Throttler:
		return p != nil
	case *retry.Policy:
		return p != nil
	case *timeout.Timeout:
		return p != nil
	case *hedge.Hedger:
		return p != nil
	case *shed.Shedder:
		return p != nil
	}
	return false
}

// NewSummary returns a summary of no instance yet, or a
// *rampart.ConfigError for a nil Logger or a negative Interval.
func NewSummary(c SummaryConfig) (*Summary, error) {
	switch {
	case c.Logger == nil:
		return nil, rampart.NewConfigError("rampartslog", "Logger", "must not be nil")
	case c.Interval < 0:
		return nil, rampart.NewConfigError("rampartslog", "Interval", "must not be negative, got %v", c.Interval)
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.Ticker == nil {
		c.Ticker = rampart.DefaultTicker()
	}
	s := &Summary{logger: c.Logger, level: c.Level, interval: int64(c.Interval), tk: c.Ticker,
		named: map[string]any{}, last: map[any]counts{}}
	now := s.tk.Now()
	s.lastAt = now
	s.next.Store(now + s.interval)
	return s, nil
}

// Add summarises inst under name from now on: its counts so far are not
// reported (unless the summary knows inst already, through a Source or an
// earlier Add: then from the last flush). It returns an error wrapping [ErrUnsupported] for a type
// with no summarised count, and an error if name is already added.
func (s *Summary) Add(name string, inst any) error {
	if !supported(inst) {
		return fmt.Errorf("Add(%q, %T): %w", name, inst, ErrUnsupported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.named[name]; dup {
		return fmt.Errorf("rampartslog: Add(%q): name already added", name)
	}
	s.named[name] = inst
	if _, seen := s.last[inst]; !seen {
		_, c, _ := countsOf(inst)
		s.last[inst] = c
	}
	return nil
}

// Remove stops summarising the instance added under name; its rejections
// since the last flush are not reported.
func (s *Summary) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.named, name)
}

// AddSource summarises every instance src holds, at every flush. An
// instance that is first seen at a flush reports its counts from the
// next flush on. Instances of a type with no summarised count, and nil
// pointers of a known type, are skipped, and counted in the record's
// skipped attribute.
func (s *Summary) AddSource(src Source) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sources = append(s.sources, src)
	src.Range(func(_ string, inst any) bool {
		if _, c, ok := countsOf(inst); ok {
			if _, seen := s.last[inst]; !seen {
				s.last[inst] = c
			}
		}
		return true
	})
}

// Poll flushes when Interval has passed since the last flush, on the
// summary's Ticker, and reports whether it did. It costs one clock read
// and one atomic load when no flush is due; of concurrent callers that
// find it due, one flushes.
func (s *Summary) Poll() bool {
	now := s.tk.Now() // the decision needs the time
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, now+s.interval) {
		return false
	}
	s.flush(now)
	return true
}

// Flush logs the rejections counted since the last flush now (nothing if
// there are none) and restarts the interval.
func (s *Summary) Flush() {
	now := s.tk.Now()
	s.next.Store(now + s.interval)
	s.flush(now)
}

// line is one instance's share of a record.
type line struct {
	policy, counter, name string
	n                     uint64
}

func (s *Summary) flush(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []line
	seen := make(map[any]counts, len(s.last))
	skipped := 0
	visit := func(name string, inst any) bool {
		if _, dup := seen[inst]; dup {
			return true
		}
		k, c, ok := countsOf(inst)
		if !ok {
			skipped++
			return true
		}
		seen[inst] = c
		prev, known := s.last[inst]
		if !known {
			return true // first seen: report from the next flush on
		}
		for i, counter := range k.counters {
			if counter != "" && c[i] > prev[i] {
				lines = append(lines, line{k.policy, counter, name, c[i] - prev[i]})
			}
		}
		return true
	}
	for name, inst := range s.named {
		visit(name, inst)
	}
	for _, src := range s.sources {
		src.Range(visit)
	}
	s.last = seen
	// lastAt never moves back: a Poll that read the clock before a
	// concurrent Flush may take the lock after it, and its record's
	// interval is then 0, not negative (nor the next one's too long).
	now = max(now, s.lastAt)
	interval := time.Duration(now - s.lastAt)
	s.lastAt = now
	if len(lines) == 0 && skipped == 0 {
		return
	}
	if !s.logger.Enabled(context.Background(), s.level) {
		return
	}
	s.logger.LogAttrs(context.Background(), s.level, MsgRejections, group(lines, interval, skipped)...)
}

// group nests the lines by policy and counter, in a stable order:
// interval, then each policy (circuitbreaker.rejected.payments=12 in a text
// handler), then skipped.
func group(lines []line, interval time.Duration, skipped int) []slog.Attr {
	lines = sortLines(lines)
	attrs := []slog.Attr{slog.Duration("interval", interval)}
	for i := 0; i < len(lines); {
		policy := lines[i].policy
		var counters []any
		for i < len(lines) && lines[i].policy == policy {
			counter := lines[i].counter
			var names []any
			for i < len(lines) && lines[i].policy == policy && lines[i].counter == counter {
				names = append(names, slog.Uint64(lines[i].name, lines[i].n))
				i++
			}
			counters = append(counters, slog.Group(counter, names...))
		}
		attrs = append(attrs, slog.Group(policy, counters...))
	}
	if skipped > 0 {
		attrs = append(attrs, slog.Int("skipped", skipped))
	}
	return attrs
}

// sortLines orders lines by policy, counter and name, and sums the lines
// of one policy, counter and name (two instances of a kind under one
// name: an added one and a Source's, or two Sources'), so that a record
// never holds a key twice; it returns the summed lines, in ls's array.
func sortLines(ls []line) []line {
	slices.SortFunc(ls, func(a, b line) int {
		return cmp.Or(cmp.Compare(a.policy, b.policy), cmp.Compare(a.counter, b.counter), cmp.Compare(a.name, b.name))
	})
	out := ls[:0]
	for _, l := range ls {
		if n := len(out); n > 0 && out[n-1].policy == l.policy && out[n-1].counter == l.counter && out[n-1].name == l.name {
			out[n-1].n += l.n
			continue
		}
		out = append(out, l)
	}
	return out
}
