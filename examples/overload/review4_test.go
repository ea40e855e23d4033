package main

import (
	"bytes"
	"testing"
)

// parseFlags validates only -rate, -mode, -db-pool, -vus and the phases
// having some length. Every value below is accepted, and then either fails
// late (-deadline 0 and -db-max-wait -1ms: timeout.New / bulkhead.New
// return a ConfigError only when the protected run starts, after the whole
// unprotected run of "-mode both") or silently produces a meaningless run
// (shares outside [0, 1] or NaN, a negative slow-down factor, a negative
// -max-lag that drops every iteration, negative durations that skip a phase
// or make delays negative, a negative -admission taken as the default).
func TestReview4FlagsRejectInvalidValues(t *testing.T) {
	for _, bad := range [][]string{
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

// Guard: the default flags build a protected guard without error, and it
// closes (the timeout's watchdog) cleanly; goleak (TestMain) checks that
// nothing outlives it.
func TestReview4DefaultGuardBuildsAndCloses(t *testing.T) {
	var errOut bytes.Buffer
	o, err := parseFlags(nil, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.handler(newService(o, newDatabase(o.pool(), o.dbVisit, o.dbErrors))); err != nil {
		t.Fatal(err)
	}
	g.close()
}
