// Package pad provides atomic words that sit alone on their cache line.
//
// A word written on every call by many goroutines (an in-flight counter, a
// GCRA arrival time, a sequence number) must not share a cache line with
// anything else, or every write by one core invalidates the neighbours' reads
// on the others (false sharing). Each type here is laid out as
//
//	+----------------------+-------+---------------------------+
//	| cpu.CacheLinePad     | value | pad to the end of a line  |
//	+----------------------+-------+---------------------------+
//	0                      L       L+8 (or L+4)               2L
//
// where L is the cache line size (64 B on amd64, 128 B on arm64). Go does not
// align structs to cache lines, so the value cannot rely on starting a line:
// the leading pad keeps whatever precedes the struct off the value's line and
// the trailing pad keeps whatever follows it off. Any cache line that holds a
// byte of the value lies entirely inside the struct. The sizes are asserted in
// pad_test.go.
//
// Padding costs 2L bytes a word. Use it only for words written on hot paths;
// read-mostly configuration is grouped unpadded, so that thousands of
// instances stay small.
package pad

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// LineSize is the cache line size assumed for padding on this architecture
// (at least 16, so that every padded struct here builds: x/sys/cpu has no
// line on wasm, which runs one thread).
const LineSize = max(unsafe.Sizeof(cpu.CacheLinePad{}), 16)

// Tail64 and Tail48 pad 64 and 48 bytes of fields that open a line to a
// whole number of lines: LineSize − n where lines hold n bytes or more,
// else what rounds n up to whole lines (32 B lines: arm, mips).
const (
	Tail64 = (LineSize - 64%LineSize) % LineSize
	Tail48 = (LineSize - 48%LineSize) % LineSize
)

// Line is one cache line of padding, for structs that separate groups of
// fields by hand. It separates what precedes it from what follows it.
type Line = cpu.CacheLinePad

// Int64 is an atomic.Int64 alone on its cache line.
type Int64 struct {
	_ cpu.CacheLinePad // separates the value from the preceding field
	atomic.Int64
	_ [LineSize - 8]byte // separates the value from the following field
}

// Uint64 is an atomic.Uint64 alone on its cache line.
type Uint64 struct {
	_ cpu.CacheLinePad // separates the value from the preceding field
	atomic.Uint64
	_ [LineSize - 8]byte // separates the value from the following field
}

// Int32 is an atomic.Int32 alone on its cache line.
type Int32 struct {
	_ cpu.CacheLinePad // separates the value from the preceding field
	atomic.Int32
	_ [LineSize - 4]byte // separates the value from the following field
}

// Uint32 is an atomic.Uint32 alone on its cache line.
type Uint32 struct {
	_ cpu.CacheLinePad // separates the value from the preceding field
	atomic.Uint32
	_ [LineSize - 4]byte // separates the value from the following field
}
