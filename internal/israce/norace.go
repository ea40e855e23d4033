//go:build !race

// Package israce reports whether the race detector is on, so allocation
// gates (testing.AllocsPerRun) can skip themselves under -race, where the
// instrumentation allocates.
package israce

// Enabled is true when the binary was built with -race.
const Enabled = false
