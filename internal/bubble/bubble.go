// Package bubble helps tests that run inside a testing/synctest bubble.
package bubble

import (
	"runtime"
	"strings"
)

// Goroutines counts the goroutines of the calling goroutine's
// testing/synctest bubble. runtime.NumGoroutine counts every goroutine of
// the process, including other tests' and the runtime's, which come and go
// on their own schedule; a test that asserts "no goroutine started" must
// count only its own bubble. It panics when called outside a bubble.
//
// Call synctest.Wait first: a goroutine that was just started (by the test
// or by the code under test) is not always in the dump yet, and the count
// is exact only once every goroutine of the bubble is durably blocked.
func Goroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	lines := strings.Split(string(buf), "\n")
	// The first header is the caller's: "goroutine N [running, synctest bubble K]:".
	_, tag, ok := strings.Cut(lines[0], "synctest bubble ")
	if !ok {
		panic("bubble.Goroutines called outside a synctest bubble")
	}
	tag = "synctest bubble " + tag
	count := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "goroutine ") && strings.HasSuffix(l, tag) {
			count++
		}
	}
	return count
}
