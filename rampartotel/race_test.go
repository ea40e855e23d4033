//go:build race

package rampartotel

// raceEnabled: the allocation gates skip under the race detector (its
// instrumentation allocates).
const raceEnabled = true
