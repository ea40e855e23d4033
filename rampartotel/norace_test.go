//go:build !race

package rampartotel

const raceEnabled = false
