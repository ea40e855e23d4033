package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// printTable prints one row per mode and phase: offered, achieved (sent)
// and successful rates, fast rejections, failures, the successes' latency,
// and dropped iterations. It ends with a warning when the generator did not
// reach the offered rate.
func printTable(w io.Writer, o options, results []result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| mode | phase | offered/s | sent/s | ok/s | shed 503/s | failed | failed % | p50 ms | p99 ms | max ms | server p99 ms | dropped |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var short []string
	for _, r := range results {
		for _, p := range r.phases {
			secs := p.phase.duration.Seconds()
			sent := p.sent.Load()
			p50, p99, mx := p.percentiles()
			failedPct := 0.0
			if sent > 0 {
				failedPct = 100 * float64(p.failed.Load()) / float64(sent)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.0f | %.0f | %d | %.2f | %s | %s | %s | %s | %d |\n",
				r.mode, p.phase.name, float64(p.offered)/secs,
				float64(sent)/secs, float64(p.ok.Load())/secs, float64(p.shed.Load())/secs,
				p.failed.Load(), failedPct, ms(p50), ms(p99), ms(mx), ms(p.serverP99()), p.dropped.Load())
			if p.offered > 0 && float64(sent) < 0.95*float64(p.offered) {
				short = append(short, fmt.Sprintf("%s/%s sent %d of %d (%.0f %%; %d dropped, worst generator lag %s)",
					r.mode, p.phase.name, sent, p.offered, 100*float64(sent)/float64(p.offered),
					p.dropped.Load(), time.Duration(p.maxLag.Load()).Round(time.Millisecond)))
			}
		}
	}
	fmt.Fprintln(w)
	for _, r := range results {
		for _, p := range r.phases {
			if f := p.failed.Load(); f > 0 {
				fmt.Fprintf(w, "failed in %s/%s: %d no response (client timeout %s or connection error), %d 504 (server deadline), %d other\n",
					r.mode, p.phase.name, p.errs.Load(), o.clientTimeout, p.gw.Load(), f-p.errs.Load()-p.gw.Load())
			}
		}
	}
	if len(short) > 0 {
		fmt.Fprintf(w, "WARNING: the offered rate of %d req/s was NOT reached in %d phase(s); those rows do not measure the server at that rate:\n  %s\n",
			o.rate, len(short), strings.Join(short, "\n  "))
	} else {
		fmt.Fprintf(w, "The generator reached the offered rate of %d req/s in every phase (at least 95 %% of the iterations sent).\n", o.rate)
	}
	fmt.Fprintln(w, "The warm-up ramps the offered rate from a tenth of it to all of it.")
	fmt.Fprintln(w, "ok/s counts 200s; shed: 503 with Retry-After (a deliberate fast rejection); failed: any other outcome")
	fmt.Fprintln(w, "(5xx, client timeout, connection error); latencies are the successes' own, from send to last byte as")
	fmt.Fprintln(w, "the client saw them; server p99 is the time the server spent on them (the difference is the generator's")
	fmt.Fprintln(w, "and the network stack's share, which grows when the CPU is short).")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
}
