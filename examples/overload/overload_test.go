package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemoShort runs both modes for a few seconds at a low rate, with a
// database slow enough during the slowdown that the pool is overloaded, and
// checks that both produce a complete table and that the protected mode
// sheds (fast 503s) instead of queueing. No latency assertion: the machine
// is shared.
func TestDemoShort(t *testing.T) {
	o := defaultOptions()
	o.rate = 200
	o.warmup, o.steady, o.slowdown, o.recovery = 500*time.Millisecond, 700*time.Millisecond, 1500*time.Millisecond, 500*time.Millisecond
	o.dbPool = 2 // 200 req/s × 28 % × 10 ms = 0.56 busy; ×8 = 4.5 busy: overloaded
	o.slowFactor = 8
	o.clientTimeout = 4 * time.Second // generous: CI runs packages side by side on 2 cores
	var out bytes.Buffer
	results, err := run(context.Background(), o, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	if len(results) != 2 || results[0].mode != "unprotected" || results[1].mode != "protected" {
		t.Fatalf("results %+v", results)
	}
	for _, r := range results {
		if len(r.phases) != 4 {
			t.Fatalf("%s: %d phases", r.mode, len(r.phases))
		}
		for _, p := range r.phases {
			if p.sent.Load() == 0 || p.ok.Load() == 0 {
				t.Errorf("%s/%s: sent %d ok %d", r.mode, p.phase.name, p.sent.Load(), p.ok.Load())
			}
			t.Logf("%s/%s: failed %d (no response %d, 504 %d)", r.mode, p.phase.name, p.failed.Load(), p.errs.Load(), p.gw.Load())
			if got := p.ok.Load() + p.shed.Load() + p.failed.Load(); got != p.sent.Load() {
				t.Errorf("%s/%s: %d outcomes for %d sent", r.mode, p.phase.name, got, p.sent.Load())
			}
			row := "| " + r.mode + " | " + p.phase.name + " | "
			if !strings.Contains(out.String(), row) {
				t.Errorf("table has no row %q", row)
			}
		}
	}
	unprot, prot := results[0].phases[2], results[1].phases[2]
	if prot.shed.Load() == 0 {
		t.Errorf("protected slowdown shed nothing")
	}
	if unprot.shed.Load() != 0 {
		t.Errorf("unprotected mode shed %d", unprot.shed.Load())
	}
	for _, line := range []string{"sent", "shed"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("no progress line with %q", line)
		}
	}
}

func TestFlags(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags([]string{"-rate", "123", "-mode", "protected", "-steady", "3s"}, &errOut)
	if err != nil || o.rate != 123 || o.mode != "protected" || o.steady != 3*time.Second {
		t.Fatalf("%+v %v", o, err)
	}
	if o.pool() != 8 || o.admission() != 64 {
		t.Fatalf("pool %d admission %d", o.pool(), o.admission())
	}
	o, _ = parseFlags([]string{"-rate", "10000"}, &errOut)
	if o.pool() != 40 || o.admission() != 1000 {
		t.Fatalf("pool %d admission %d", o.pool(), o.admission())
	}
}

// parseFlags refuses every value that would fail late (-deadline 0 and
// -db-max-wait -1ms would make timeout.New / bulkhead.New return a
// ConfigError only when the protected run starts, after the whole
// unprotected run of "-mode both") or give a meaningless run (a rate of 0,
// an unknown mode, phases of no length in all, shares outside [0, 1] or
// NaN, a negative slow-down factor, a negative -max-lag that drops every
// iteration, negative durations that skip a phase or make delays negative,
// a negative -admission taken as the default).
func TestFlagsRejectInvalidValues(t *testing.T) {
	for _, bad := range [][]string{
		{"-rate", "0"},
		{"-mode", "x"},
		{"-warmup", "0", "-steady", "0", "-slowdown", "0", "-recovery", "0"},
		{"-deadline", "0"},
		{"-deadline", "-1s"},
		{"-db-max-wait", "-1ms"},
		{"-cache-hits", "1.5"},
		{"-cache-hits", "NaN"},
		{"-writes", "-0.1"},
		{"-db-errors", "2"},
		{"-slow-factor", "-4"},
		{"-slow-factor", "NaN"},
		{"-max-lag", "-1ms"},
		{"-client-timeout", "-1s"},
		{"-api-time", "-50ms"},
		{"-db-visit", "-10ms"},
		{"-warmup", "-2s"},
		{"-admission", "-5"},
	} {
		var errOut bytes.Buffer
		if _, err := parseFlags(bad, &errOut); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// The default flags build a protected guard without error, and it closes
// (the timeout's watchdog) cleanly; goleak (TestMain) checks that nothing
// outlives it.
func TestDefaultGuardBuildsAndCloses(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags(nil, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(o)
	if err != nil {
		t.Fatal(err)
	}
	db, err := newDatabase(o.pool(), o.dbVisit, o.dbErrors)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.handler(newService(o, db)); err != nil {
		t.Fatal(err)
	}
	g.close()
}

// TestDatabaseTransientErrors: the database's transient errors come from
// its fault injector, at -db-errors of the visits, after the visit has
// held its connection; an invalid share is refused.
func TestDatabaseTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want error
	}{{0, nil}, {1, errTransient}} {
		db, err := newDatabase(1, 0, tc.rate)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if err := db.query(context.Background()); err != tc.want {
				t.Fatalf("rate %v: got %v, want %v", tc.rate, err, tc.want)
			}
		}
		if s := db.faults.Stats(); db.visits.Load() != 10 || (tc.want != nil) != (s.Errored == 10) {
			t.Errorf("rate %v: %d visits, injector stats %+v", tc.rate, db.visits.Load(), s)
		}
	}
	if _, err := newDatabase(1, 0, 2); err == nil {
		t.Error("a share of 2 was accepted")
	}
}
