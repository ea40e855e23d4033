//go:build race

package observe

// raceEnabled: the allocation gates skip under the race detector (its
// instrumentation allocates).
const raceEnabled = true
