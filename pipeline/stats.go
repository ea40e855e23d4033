package pipeline

import "github.com/rampart-go/rampart/internal/percpu"

// Stats counts a pipeline's calls by how they ended through its policies,
// for an operator's metrics: filled only when [Config.CountStats] is
// set (all zeros otherwise). Every field is a running total since [New]. A
// call through a [Fallback] is counted by how it ended before the fallback
// answered (the fallback's answers are in [FallbackStats]).
type Stats struct {
	// Calls is the number of calls that ended with an Outcome: Succeeded
	// + Failed + Rejected + TimedOut + Canceled.
	Calls uint64
	// Succeeded counts the calls of Code OK.
	Succeeded uint64
	// Failed counts the calls of Code Failed: fn's error (Policy None),
	// or the retry's give-up (Policy Retry).
	Failed uint64
	// Rejected counts the calls of Code Rejected, by every policy: the sum
	// of RejectedBy.
	Rejected uint64
	// RejectedBy counts the calls of Code Rejected by the rejecting
	// policy's Kind: RejectedBy[pipeline.Shed], RejectedBy[pipeline.Retry]
	// (its budget), ...
	RejectedBy [8]uint64
	// TimedOut counts the calls of Code TimedOut.
	TimedOut uint64
	// Canceled counts the calls of Code Canceled.
	Canceled uint64
	// Panicked counts the calls whose fn (or Config.ShedPriority, or a
	// classifier, listener or Controller run while the attempt held its
	// permits) panicked or called runtime.Goexit: they end with no Outcome
	// and are not in Calls.
	Panicked uint64
	// Attempts counts the attempts of the calls in Calls, rejected ones
	// included (a retried call counts each).
	Attempts uint64
}

// The counters' indexes: a Code below Rejected, then the rejections by
// Kind, then the panics and the attempts.
const (
	statRejectedBy = int(Canceled) + 1 // + Kind: 5 … 12
	statPanicked   = statRejectedBy + 8
	statAttempts   = statPanicked + 1
)

// counted records o when the pipeline counts outcomes. Inlined into every
// entry point: with CountStats off it costs a load of p.stats, a field
// set at New, and a branch that always goes the same way.
func (p *Pipeline) counted(o *Outcome) {
	if p.stats != nil {
		p.record(o)
	}
}

// record adds o to the counters: one pinned add of two words of this P's
// stripe (no lock, no atomic read-modify-write, no allocation).
func (p *Pipeline) record(o *Outcome) {
	i := int(o.Code)
	if o.Code == Rejected {
		i = statRejectedBy + int(o.Policy&7)
	}
	p.stats.Add2(i, 1, statAttempts, uint64(o.Attempts))
}

// Stats returns the pipeline's outcome counts: see [Stats]. All zeros
// unless Config.CountStats is set. It sums the counters of every P (one
// pass, no lock, no allocation); counts of calls that end meanwhile may be
// in it or not.
func (p *Pipeline) Stats() Stats {
	var s Stats
	if p.stats == nil {
		return s
	}
	var c [percpu.Width]uint64
	p.stats.Snapshot(&c)
	s.Succeeded, s.Failed, s.TimedOut, s.Canceled = c[OK], c[Failed], c[TimedOut], c[Canceled]
	for k := range s.RejectedBy {
		s.RejectedBy[k] = c[statRejectedBy+k]
		s.Rejected += s.RejectedBy[k]
	}
	s.Calls = s.Succeeded + s.Failed + s.Rejected + s.TimedOut + s.Canceled
	s.Panicked, s.Attempts = c[statPanicked], c[statAttempts]
	return s
}
