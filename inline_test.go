package rampart_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// intendedInlining lists, per package directory (relative to the module
// root), the functions on the pipeline's per-call path that the compiler
// must inline, spelled as go build -gcflags=-m=2 prints them. The docs'
// performance claims rest on these (a cached ticker read is one inlined
// load, a soft-mode timeout's Finish costs no call); a function that grows
// past Go's inlining budget (80) silently costs a call on every request.
//
// Not listed because they do not inline, and the docs say so: the
// admissions and releases that take an out-of-line slow path besides their
// atomics. A call to a function that is not inlined costs 57 of the budget,
// which leaves 23 for the fast path, less than one atomic operation on a
// padded word plus its branch and arguments: circuitbreaker's Acquire (96)
// and ReleaseAt (337), ratelimit's AdmitN (299), bulkhead's AcquireWait
// (208), Acquire (225) and Release (90), adaptive's AcquireWait (it has a
// defer) and Release (441), timeout's StartAt (153).
//
// internal/pad declares only types (atomic words alone on a cache line):
// its methods are sync/atomic's, which the compiler treats as intrinsics.
var intendedInlining = map[string][]string{
	".": {
		"NewRejectedError", // an instance that copies its error in builds it on the stack (TestInstanceBytesAllocs)
	},
	"internal/ticker": {
		"(*Cached).Now", // the cached ticker's read: one load while it runs
		"Reading",       // the cached word that pipeline's now loads
		"(*Manual).Now",
		"(*Nano).Now",
	},
	"internal/atomicx": {
		"Max",    // adaptive's ReleaseAt (most in flight); bulkhead's new peak
		"Min",    // adaptive's ReleaseAt (least RTT)
		"SatAdd", // timeout's StartAt (the deadline); adaptive's window end
	},
	"circuitbreaker": {
		"(*countWindow).allOK",       // ReleaseAt's healthy fast path
		"(*Breaker).Classify",        // pipeline's release, on a failure or with Classify set
		"(*Breaker).RemainingOpenAt", // pipeline's rejection by an open breaker
	},
	"ratelimit": {
		"(*Limiter).RejectedError", // pipeline's rejection by the limiter
	},
	"adaptive": {
		"(*Limiter).tryAcquire", // AcquireWaitAt's immediate admission
		"(*Limiter).Classify",   // pipeline's release, on a failure
		"inFlightOf",
	},
	"retry": {
		"(*TokenBucket).OnSuccess", // retry.Do's devirtualised A6 bucket: one load when full
		"(*TokenBucket).OnFailure",
	},
	"timeout": {
		"(*Timeout).FinishAt", // the soft-mode early return, inlined into pipeline's release
	},
	"shed": {
		"(*Shedder).ReleaseAt",     // pipeline's release of a shed permit
		"(*Shedder).RejectedError", // pipeline's rejection by the shedder
		"(*Shedder).Classify",
		"(*Shedder).limitOf", // AcquirePriorityAt's cap for a priority
		"inFlightOf",
	},
	"pipeline": {
		"(*Pipeline).now",         // a cached ticker read as one load, no interface call
		"(*Pipeline).releaseHeld", // run's deferred guard: a test of a.held on every call
	},
}

// inlineLine matches the compiler's verdict on one function: "file:line:col:
// can inline NAME with cost N ..." or "file:line:col: cannot inline NAME:
// reason".
var inlineLine = regexp.MustCompile(`^(\S+\.go):\d+:\d+: (can|cannot) inline (\S+?):? (.*)$`)

// TestIntendedInlining checks that every function in intendedInlining is
// inlinable, in the manner of the Go compiler's own TestIntendedInlining
// (cmd/compile/internal/test/inl_test.go).
func TestIntendedInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages with -gcflags=-m=2")
	}
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the intended inlining is a 64-bit target's: on 32-bit, 64-bit atomics cost more than the budget allows")
	}
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	var dirs []string
	for dir := range intendedInlining {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	args := []string{"build", "-gcflags=-m=2"}
	for _, dir := range dirs {
		args = append(args, "./"+dir)
	}
	cmd := exec.Command(gobin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
	}

	// verdict[dir][name]: "cost N" for can inline, the reason otherwise.
	verdict := make(map[string]map[string]string)
	can := make(map[string]map[string]bool)
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := inlineLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		dir := filepath.ToSlash(filepath.Dir(m[1]))
		dir = strings.TrimPrefix(dir, "./")
		if verdict[dir] == nil {
			verdict[dir], can[dir] = make(map[string]string), make(map[string]bool)
		}
		name, rest := m[3], m[4]
		if m[2] == "can" {
			can[dir][name] = true
			verdict[dir][name] = strings.SplitN(rest, " as:", 2)[0]
		} else if !can[dir][name] {
			verdict[dir][name] = rest
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	for _, dir := range dirs {
		for _, fn := range intendedInlining[dir] {
			how := "go build -gcflags=-m=2 ./" + dir + " 2>&1 | grep -F '" + fn + "'"
			switch v, ok := verdict[dir][fn]; {
			case !ok:
				t.Errorf("%s: %s was not reported by the compiler: renamed or removed? Update intendedInlining (check with %s)", dir, fn, how)
			case !can[dir][fn]:
				t.Errorf("%s: %s is no longer inlinable (%s): move its slow path out of line, or correct the docs that rely on it and drop it from intendedInlining (check with %s)", dir, fn, v, how)
			default:
				t.Logf("%s: %s: %s", dir, fn, v)
			}
		}
	}
}
