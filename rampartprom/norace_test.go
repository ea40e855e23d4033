//go:build !race

package rampartprom

const raceEnabled = false
