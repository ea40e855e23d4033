//go:build race

package rampartprom

// raceEnabled: the allocation gates skip under the race detector (its
// instrumentation allocates).
const raceEnabled = true
