//go:build !race

package grpcguard_test

const raceEnabled = false
