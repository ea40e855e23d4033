package adaptive

import (
	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/sameptr"
)

// The fields Update refuses to change, and the Algorithm it keeps running
// when given the same one, are compared with what New was given, by
// identity where Go defines no equality (package sameptr: a func value, an
// uncomparable Algorithm or clock). Slow path: Update only.

// sameTicker reports whether a and b are the same clock, a nil Ticker
// meaning rampart.DefaultTicker().
func sameTicker(a, b rampart.Ticker) bool {
	if a == nil {
		a = rampart.DefaultTicker()
	}
	if b == nil {
		b = rampart.DefaultTicker()
	}
	return sameptr.Value(a, b)
}
