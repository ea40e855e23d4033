// Package notify calls user listeners so that a panicking listener never
// breaks the call that notified it.
//
// The listener convention (see the root package doc): a listener is a func
// field of a policy's Config, nil when absent, so an absent listener costs one
// nil check at the call site. Listeners take primitive arguments (no event
// structs to allocate). A listener that panics is recovered here and counted
// in the policy's stats; the panic value is dropped.
//
// Call sites check for nil before calling these helpers, so a helper (a call
// with a deferred recover) is paid only when a listener is set.
package notify

import "sync/atomic"

// Call1 calls f(a), recovering a panic and counting it in panics.
func Call1[A any](panics *atomic.Uint64, f func(A), a A) {
	defer recoverInto(panics)
	f(a)
}

// Call2 calls f(a, b), recovering a panic and counting it in panics.
func Call2[A, B any](panics *atomic.Uint64, f func(A, B), a A, b B) {
	defer recoverInto(panics)
	f(a, b)
}

// Call3 calls f(a, b, c), recovering a panic and counting it in panics.
func Call3[A, B, C any](panics *atomic.Uint64, f func(A, B, C), a A, b B, c C) {
	defer recoverInto(panics)
	f(a, b, c)
}

func recoverInto(panics *atomic.Uint64) {
	if r := recover(); r != nil {
		panics.Add(1)
	}
}
