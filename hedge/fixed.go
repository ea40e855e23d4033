package hedge

import (
	"reflect"
	"unsafe"

	"github.com/rampart-go/rampart"
)

// The fields Update refuses to change are compared with what New was
// given. Go compares a func or an arbitrary interface value only with nil
// (== panics on an uncomparable dynamic type), so these helpers compare
// identity where equality is not defined. Slow path: Update only.

// sameFunc reports whether f and g are the same func value: both nil, or
// the same closure. A func value is one pointer to its closure; two
// evaluations of a func literal that captures variables, or of a method
// value, are different closures, so pass the value New was given.
func sameFunc[F any](f, g F) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&f)) == *(*unsafe.Pointer)(unsafe.Pointer(&g))
}

// sameValue reports whether the interface values a and b are both nil,
// equal values of a comparable type, or the same value of an uncomparable
// one.
func sameValue(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() {
		return false
	}
	if va.Comparable() && vb.Comparable() {
		return a == b
	}
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&a))[1] == (*[2]unsafe.Pointer)(unsafe.Pointer(&b))[1]
}

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
	return sameValue(a, b)
}
