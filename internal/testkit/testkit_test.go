package testkit_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/retry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The kit's types satisfy the interfaces they stand in for.
var (
	_ rampart.Ticker         = (*testkit.CountingTicker)(nil)
	_ rampart.Ticker         = testkit.FuncTicker(nil)
	_ rampart.Ticker         = (*testkit.PanicTicker)(nil)
	_ testkit.Ticker         = rampart.NewManualTicker(0)
	_ rampart.Budget         = (*testkit.Budget)(nil)
	_ testkit.BudgetProtocol = (*retry.TokenBucket)(nil)
	_ testkit.BudgetProtocol = rampart.Budget(nil)
)

// fakeT records what a helper reports; its Fatalf, FailNow and Skip end
// the goroutine as testing.T's do, so it runs under testkit.Run.
type fakeT struct {
	testing.TB
	mu      sync.Mutex
	errors  []string
	fatal   bool
	skipped bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}
func (f *fakeT) Error(args ...any) { f.Errorf("%s", fmt.Sprint(args...)) }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.fatal = true
	runtime.Goexit()
}
func (f *fakeT) Skip(args ...any) { f.skipped = true; runtime.Goexit() }

var sink []byte

func TestWantAllocs(t *testing.T) {
	ft := &fakeT{TB: t}
	_, goexited := testkit.Run(func() { testkit.WantAllocs(ft, "none", 0, func() {}) })
	if israce.Enabled {
		require.True(t, goexited && ft.skipped, "not skipped under -race")
		return
	}
	require.False(t, goexited)
	require.Empty(t, ft.errors)

	ft = &fakeT{TB: t}
	testkit.Run(func() { testkit.WantAllocs(ft, "one", 0, func() { sink = make([]byte, 64) }) })
	require.Equal(t, []string{"one: got 1 allocs per run, want 0"}, ft.errors)
	require.False(t, ft.fatal, "a failed gate is not fatal (the test's other gates run)")

	testkit.WantAllocs(t, "exact", 1, func() { sink = make([]byte, 64) })
}

func TestRun(t *testing.T) {
	p, g := testkit.Run(func() {})
	require.Nil(t, p)
	require.False(t, g)

	p, g = testkit.Run(func() { panic("boom") })
	require.Equal(t, "boom", p)
	require.False(t, g)

	p, g = testkit.Run(testkit.Goexit)
	require.Nil(t, p)
	require.True(t, g)

	p, g = testkit.Run(func() { panic(nil) })
	var pe *runtime.PanicNilError
	require.ErrorAs(t, p.(error), &pe)
	require.False(t, g)

	// f runs on a goroutine of its own.
	ran := false
	testkit.Run(func() { ran = true; runtime.Goexit() })
	require.True(t, ran)
}

func TestCountingTicker(t *testing.T) {
	var c testkit.CountingTicker
	require.Zero(t, c.Now())
	require.EqualValues(t, 1, c.Reads())

	m := rampart.NewManualTicker(5)
	c2 := testkit.CountingTicker{Base: m}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				require.EqualValues(t, 5, c2.Now())
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 800, c2.Reads())
}

func TestFuncTicker(t *testing.T) {
	n := int64(0)
	f := testkit.FuncTicker(func() int64 { n += 2; return n })
	require.EqualValues(t, 2, f.Now())
	require.EqualValues(t, 4, f.Now())
}

func TestPanicTicker(t *testing.T) {
	p := &testkit.PanicTicker{Base: rampart.NewManualTicker(7)}
	require.EqualValues(t, 7, p.Now(), "starts disarmed")

	p.Arm()
	require.PanicsWithValue(t, testkit.PanicTickerValue, func() { p.Now() })
	require.PanicsWithValue(t, testkit.PanicTickerValue, func() { p.Now() })
	p.Disarm()
	require.EqualValues(t, 7, p.Now())

	p.ArmOnce()
	require.Panics(t, func() { p.Now() })
	require.EqualValues(t, 7, p.Now(), "ArmOnce panics once")

	p.ArmAfter(2)
	require.EqualValues(t, 7, p.Now())
	require.EqualValues(t, 7, p.Now())
	require.Panics(t, func() { p.Now() })
	require.Panics(t, func() { p.Now() }, "armed for good after the n reads")
	require.EqualValues(t, 10, p.Reads())

	type bug struct{}
	q := &testkit.PanicTicker{Value: bug{}}
	require.Zero(t, q.Now(), "no Base reads 0")
	q.ArmAfter(0)
	require.PanicsWithValue(t, bug{}, func() { q.Now() })
}

// TestPanicTickerArmAfterConcurrent: of many concurrent reads, exactly n
// succeed before the ticker panics.
func TestPanicTickerArmAfterConcurrent(t *testing.T) {
	p := &testkit.PanicTicker{}
	p.ArmAfter(500)
	var mu sync.Mutex
	ok, panicked := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				r, _ := testkit.Run(func() { p.Now() })
				mu.Lock()
				if r != nil {
					panicked++
				} else {
					ok++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 500, ok)
	require.Equal(t, 300, panicked)
}

func TestBudget(t *testing.T) {
	var b testkit.Budget
	b.OnRequest(1)
	b.OnFailure(2)
	require.True(t, b.AllowRetry(3), "the zero value allows")
	b.SetAllow(false)
	require.False(t, b.AllowRetry(4))
	b.OnSuccess(5)
	require.EqualValues(t, 1, b.Requests())
	require.EqualValues(t, 1, b.Failures())
	require.EqualValues(t, 1, b.Successes())
	require.EqualValues(t, 2, b.Asks())
	require.EqualValues(t, 1, b.Allowed())
	require.Empty(t, b.Log(), "no log unless asked")

	b.PanicIn(testkit.CallOnSuccess | testkit.CallAllowRetry)
	require.PanicsWithValue(t, "testkit: Budget.OnSuccess", func() { b.OnSuccess(6) })
	require.PanicsWithValue(t, "testkit: Budget.AllowRetry", func() { b.AllowRetry(6) })
	require.NotPanics(t, func() { b.OnFailure(6) })
	require.EqualValues(t, 2, b.Successes(), "counted before panicking")
	b.PanicIn(0)
	require.NotPanics(t, func() { b.OnSuccess(7) })
	require.Equal(t, "OnRequest", testkit.CallOnRequest.String())
}

func TestBudgetBaseAndLog(t *testing.T) {
	tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{})
	require.NoError(t, err)
	b := &testkit.Budget{Base: tb}
	b.KeepLog()
	b.SetAllow(false) // ignored: Base answers
	b.OnRequest(10)
	b.OnFailure(11)
	require.True(t, b.AllowRetry(12))
	b.OnSuccess(13)
	require.Equal(t, "req@10 fail@11 allow=true@12 ok@13", b.String())
	require.Equal(t, []string{"req@10", "fail@11", "allow=true@12", "ok@13"}, b.Log())
}

// TestBudgetAllocs: a Budget without a log allocates nothing, so it may
// stand in allocation gates.
func TestBudgetAllocs(t *testing.T) {
	var b testkit.Budget
	testkit.WantAllocs(t, "budget", 0, func() {
		b.OnRequest(1)
		b.OnFailure(1)
		b.AllowRetry(1)
		b.OnSuccess(1)
	})
}

func TestLeakCheck(t *testing.T) {
	stop := make(chan struct{})
	ft := &fakeT{TB: t}
	var cleanups []func()
	ct := &cleanupT{fakeT: ft, cleanups: &cleanups}
	testkit.LeakCheck(ct)
	go func() { <-stop }()
	testkit.Run(cleanups[0])
	require.Len(t, ft.errors, 1, "the leaked goroutine went unnoticed")
	close(stop)

	ft2 := &fakeT{TB: t}
	cleanups = nil
	testkit.LeakCheck(&cleanupT{fakeT: ft2, cleanups: &cleanups})
	testkit.Run(cleanups[0])
	require.Empty(t, ft2.errors)
}

// cleanupT keeps the cleanups registered on it, for the test to run.
type cleanupT struct {
	*fakeT
	cleanups *[]func()
}

func (c *cleanupT) Cleanup(f func()) { *c.cleanups = append(*c.cleanups, f) }

func TestRequireConfigError(t *testing.T) {
	ce := rampart.NewConfigError("bulkhead", "Max", "must be at least 1, got %d", 0)
	testkit.RequireConfigError(t, ce, "bulkhead", "Max")
	testkit.RequireConfigError(t, fmt.Errorf("wrapped: %w", ce), "bulkhead", "Max")
	testkit.RequireConfigError(t, errors.Join(errors.New("other"), ce), "bulkhead", "Max")

	for name, tc := range map[string]struct {
		err           error
		policy, field string
		want          string
	}{
		"nil":          {nil, "bulkhead", "Max", "got no error"},
		"other error":  {errors.New("rampart: invalid config"), "bulkhead", "Max", "want a *rampart.ConfigError"},
		"sentinel":     {rampart.ErrInvalidConfig, "bulkhead", "Max", "want a *rampart.ConfigError"},
		"wrong field":  {ce, "bulkhead", "MaxWait", "got a ConfigError for bulkhead.Max"},
		"wrong policy": {ce, "retry", "Max", "got a ConfigError for bulkhead.Max"},
		"nil pointer":  {(*rampart.ConfigError)(nil), "bulkhead", "Max", "want a *rampart.ConfigError"},
	} {
		t.Run(name, func(t *testing.T) {
			ft := &fakeT{TB: t}
			_, goexited := testkit.Run(func() { testkit.RequireConfigError(ft, tc.err, tc.policy, tc.field) })
			require.True(t, goexited && ft.fatal, "passed")
			require.Len(t, ft.errors, 1)
			require.True(t, strings.Contains(ft.errors[0], tc.want), ft.errors[0])
		})
	}
}

// TestPlainCtx: a PlainCtx is live until Cancel, then done with
// context.Canceled (once, however often Cancel is called), keeps its
// parent's values, and has no AfterFunc method.
func TestPlainCtx(t *testing.T) {
	type key struct{}
	c := testkit.NewPlainCtx(context.WithValue(context.Background(), key{}, "v"))
	if c.Err() != nil {
		t.Fatalf("live PlainCtx: Err %v", c.Err())
	}
	select {
	case <-c.Done():
		t.Fatal("live PlainCtx: Done closed")
	default:
	}
	if c.Value(key{}) != "v" {
		t.Fatal("the parent's value is lost")
	}
	if _, ok := any(c).(interface {
		AfterFunc(func()) func() bool
	}); ok {
		t.Fatal("PlainCtx has an AfterFunc method")
	}
	c.Cancel()
	c.Cancel()
	<-c.Done()
	if c.Err() != context.Canceled {
		t.Fatalf("after Cancel: Err %v", c.Err())
	}
}

func TestBytesCountsLiveInstances(t *testing.T) {
	type thing [100]byte
	if got := testkit.Bytes(t, func() any { return new(thing) }); got != 112 { // the 112-byte size class
		t.Fatalf("Bytes of a 100-byte struct: got %d, want 112", got)
	}
	boxed := int64(unsafe.Sizeof([2]*thing{})) // the interface's boxed array: 16 B, 8 B on 32-bit
	if got := testkit.Bytes(t, func() any { return [2]*thing{new(thing), new(thing)} }); got != 2*112+boxed {
		t.Fatalf("Bytes of two: got %d, want %d", got, 2*112+boxed)
	}
}
