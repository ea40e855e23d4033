//go:build race

package connectguard_test

const raceEnabled = true
