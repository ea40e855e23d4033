package bulkhead

import (
	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/sameptr"
)

// The fields Update refuses to change are compared with what New was
// given, by identity where Go defines no equality (package sameptr: a func
// value, an uncomparable clock). Slow path: Update only.

// sameTicker reports whether a and b are the same clock, a nil Ticker
// meaning rampart.DefaultTicker(): equal values of a comparable type, or
// the same value of an uncomparable one (a func type: the same closure).
func sameTicker(a, b rampart.Ticker) bool {
	if a == nil {
		a = rampart.DefaultTicker()
	}
	if b == nil {
		b = rampart.DefaultTicker()
	}
	return sameptr.Value(a, b)
}
