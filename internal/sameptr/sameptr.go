// Package sameptr compares by identity the values Go defines no equality
// for: func values, and interface values whose dynamic type is not
// comparable (== panics on them). The policies' Update uses it to tell
// whether a field fixed at construction (a listener, a clock, a budget)
// is the one New was given. Slow paths only: Update, never a call.
package sameptr

import (
	"reflect"
	"unsafe"
)

// Func reports whether f and g, of a func type F, are the same func value:
// both nil, or the same pointer to one closure (a func value is one such
// pointer). A func value passed on unchanged, such as the one a policy's
// New was given and its Config returns, is the same as itself. Whether two
// evaluations of one func literal, or of one method value, are the same is
// unspecified: it depends on whether the literal captures variables and on
// what the compiler inlines, so compare only values passed on unchanged.
// F must be a func type.
func Func[F any](f, g F) bool {
	return *(*unsafe.Pointer)(unsafe.Pointer(&f)) == *(*unsafe.Pointer)(unsafe.Pointer(&g))
}

// Value reports whether the interface values a and b are both nil, equal
// values of one comparable dynamic type, or the same value of one
// uncomparable dynamic type: the same data word (a func's closure, as
// [Func]; for anything else the same boxed copy, which an interface
// passed on unchanged keeps).
func Value(a, b any) bool {
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
