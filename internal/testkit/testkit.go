package testkit

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/rampart-go/rampart/internal/israce"
)

// AllocRuns is the number of runs [WantAllocs] averages over.
const AllocRuns = 1000

// WantAllocs fails t unless f allocates exactly want objects per run,
// averaged over [AllocRuns] runs of testing.AllocsPerRun (which runs f once
// more beforehand, as a warm-up). name says which gate failed, for tests
// that check several. Under the race detector, whose instrumentation
// allocates, it skips t. The style is log/slog's wantAllocs.
func WantAllocs(t testing.TB, name string, want int, f func()) {
	t.Helper()
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	if got := testing.AllocsPerRun(AllocRuns, f); got != float64(want) {
		t.Errorf("%s: got %v allocs per run, want %d", name, got, want)
	}
}

// InstanceRuns is the number of instances [Bytes] builds per measurement.
const InstanceRuns = 1000

// Bytes returns the heap bytes one call of mk allocates, averaged over
// [InstanceRuns] calls whose results are all kept alive until the end (so
// that the count is of live instances, in the allocator's size classes:
// what a program holding thousands of them pays). The average is floored,
// and the least of three measurements is returned: the runtime's own
// allocations during a run (a few KB, now and then) only ever add. Under
// the race detector, whose instrumentation allocates, it skips t.
func Bytes(t testing.TB, mk func() any) int64 {
	t.Helper()
	if israce.Enabled {
		t.Skip("heap sizes differ under -race")
	}
	keep := make([]any, InstanceRuns)
	keep[0] = mk() // warm-up: lazily initialised globals are not the instance's
	least := int64(-1)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range keep {
			keep[i] = mk()
		}
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(keep)
		if n := int64(after.TotalAlloc-before.TotalAlloc) / InstanceRuns; least < 0 || n < least {
			least = n
		}
	}
	return least
}

// WantBytes fails t unless one call of mk allocates exactly want bytes (see
// [Bytes]); name says which gate failed.
func WantBytes(t testing.TB, name string, want int64, mk func() any) {
	t.Helper()
	if got := Bytes(t, mk); got != want {
		t.Errorf("%s: got %d bytes per instance, want %d", name, got, want)
	}
}

// Run runs f on a fresh goroutine, waits for that goroutine to end, and
// reports how f ended: panicked is the value f panicked with (nil when it
// did not panic; a panic(nil) is reported as the *runtime.PanicNilError
// Go raises for it), goexited is true when f called runtime.Goexit
// (t.FailNow, say). Both are zero when f returned. Run never panics itself,
// so it also serves to swallow a panic the test expects.
func Run(f func()) (panicked any, goexited bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		returned := false
		defer func() {
			if returned {
				return
			}
			// recover returns nil during runtime.Goexit, and only then:
			// since Go 1.21 panic(nil) panics with a *runtime.PanicNilError.
			if r := recover(); r != nil {
				panicked = r
			} else {
				goexited = true
			}
		}()
		f()
		returned = true
	}()
	<-done
	return panicked, goexited
}

// Goexit calls runtime.Goexit. Tests call it instead of runtime.Goexit
// directly inside callbacks that must return a value, so that the code
// after it (the return the compiler requires) does not read as dead.
func Goexit() { runtime.Goexit() }

// Ticker is the method set of the root package's rampart.Ticker (a
// monotonic clock reading in nanoseconds). testkit does not import the root
// package; every ticker here satisfies rampart.Ticker structurally, and
// any rampart.Ticker (a *rampart.ManualTicker, say) may serve as a base.
type Ticker interface{ Now() int64 }

// CountingTicker counts its reads. Base, when set, gives the readings;
// when nil every reading is 0. Base is set before first use and not
// changed after. CountingTicker is safe for concurrent use when Base is.
type CountingTicker struct {
	Base  Ticker
	reads atomic.Int64
}

// Now counts the read and returns Base's reading (0 without a Base).
func (c *CountingTicker) Now() int64 {
	c.reads.Add(1)
	if c.Base == nil {
		return 0
	}
	return c.Base.Now()
}

// Reads returns the number of Now calls so far.
func (c *CountingTicker) Reads() int64 { return c.reads.Load() }

// FuncTicker is a Ticker whose readings come from calling it. Its type is
// a func, so it is not comparable: it also serves the tests of code that
// must not compare Tickers with ==.
type FuncTicker func() int64

// Now returns f().
func (f FuncTicker) Now() int64 { return f() }

// PanicTickerValue is what a [PanicTicker] panics with when its Value is
// nil.
const PanicTickerValue = "testkit: PanicTicker"

// PanicTicker is a Ticker with a bug: once armed, its reads panic. It
// starts disarmed. Base, when set, gives the readings of the reads that do
// not panic (0 without a Base); Value is the panic value ([PanicTickerValue]
// when nil). Both are set before first use and not changed after.
// PanicTicker is safe for concurrent use when Base is.
type PanicTicker struct {
	Base  Ticker
	Value any

	// state: 0 disarmed; -1 every read panics; -2 the next read panics,
	// then disarmed; n > 0: n-1 more reads succeed, then every read panics.
	state atomic.Int64
	reads atomic.Int64
}

// Arm makes every read from now on panic, until Disarm.
func (p *PanicTicker) Arm() { p.state.Store(-1) }

// ArmOnce makes the next read panic; the reads after it succeed.
func (p *PanicTicker) ArmOnce() { p.state.Store(-2) }

// ArmAfter lets the next n reads succeed and makes every read after them
// panic, until Disarm. ArmAfter(0) is Arm.
func (p *PanicTicker) ArmAfter(n int) {
	if n <= 0 {
		p.Arm()
		return
	}
	p.state.Store(int64(n) + 1)
}

// Disarm makes the reads succeed again.
func (p *PanicTicker) Disarm() { p.state.Store(0) }

// Reads returns the number of Now calls so far, the ones that panicked
// included.
func (p *PanicTicker) Reads() int64 { return p.reads.Load() }

// Now panics when armed and returns Base's reading (0 without a Base)
// otherwise.
func (p *PanicTicker) Now() int64 {
	p.reads.Add(1)
	for {
		switch s := p.state.Load(); {
		case s == 0:
			return p.base()
		case s == -1:
			p.panic()
		case s == -2:
			if p.state.CompareAndSwap(-2, 0) {
				p.panic()
			}
		case s == 1:
			if p.state.CompareAndSwap(1, -1) {
				p.panic()
			}
		default:
			if p.state.CompareAndSwap(s, s-1) {
				return p.base()
			}
		}
	}
}

func (p *PanicTicker) base() int64 {
	if p.Base == nil {
		return 0
	}
	return p.Base.Now()
}

func (p *PanicTicker) panic() {
	if p.Value == nil {
		panic(PanicTickerValue)
	}
	panic(p.Value)
}

// BudgetProtocol is the method set of rampart.Budget: the
// protocol a retry or hedge policy speaks to its budget. testkit imports
// neither package; a [Budget] satisfies both structurally, and any of their
// budgets (a *retry.TokenBucket, say) may serve as a [Budget]'s Base.
type BudgetProtocol interface {
	OnRequest(now int64)
	OnSuccess(now int64)
	OnFailure(now int64)
	AllowRetry(now int64) bool
}

// BudgetCall names one method of the budget protocol, for [Budget.PanicIn].
type BudgetCall uint32

// The methods of the budget protocol.
const (
	CallOnRequest BudgetCall = 1 << iota
	CallOnSuccess
	CallOnFailure
	CallAllowRetry
)

// String returns the method's name, e.g. "OnSuccess".
func (c BudgetCall) String() string {
	switch c {
	case CallOnRequest:
		return "OnRequest"
	case CallOnSuccess:
		return "OnSuccess"
	case CallOnFailure:
		return "OnFailure"
	case CallAllowRetry:
		return "AllowRetry"
	}
	return fmt.Sprintf("BudgetCall(%d)", uint32(c))
}

// Budget is a retry/hedge budget for tests: it counts every call of the
// protocol and answers AllowRetry as told. With a Base, every call is
// forwarded to it after being counted, and AllowRetry answers what Base
// answers; without one, AllowRetry answers true until SetAllow(false).
// Base is set before first use and not changed after. KeepLog makes it
// also log every call with its time, for comparing two policies' protocols
// call for call. PanicIn makes chosen methods panic, a user budget with a
// bug. The zero value is ready to use; Budget is safe for concurrent use
// when Base is.
type Budget struct {
	Base BudgetProtocol

	requests, successes, failures, asks, allowed atomic.Int64
	deny                                         atomic.Bool
	panics                                       atomic.Uint32
	logging                                      atomic.Bool

	mu  sync.Mutex
	log []string
}

// SetAllow sets AllowRetry's answer when there is no Base.
func (b *Budget) SetAllow(ok bool) { b.deny.Store(!ok) }

// PanicIn makes the methods in calls (an or of BudgetCalls; 0 for none)
// panic, after counting, with the string "testkit: Budget.<Method>".
func (b *Budget) PanicIn(calls BudgetCall) { b.panics.Store(uint32(calls)) }

// KeepLog makes b log every call from now on; see Log.
func (b *Budget) KeepLog() { b.logging.Store(true) }

// OnRequest counts the call and forwards it to Base.
func (b *Budget) OnRequest(now int64) {
	b.requests.Add(1)
	b.record(CallOnRequest, "req", now)
	if b.Base != nil {
		b.Base.OnRequest(now)
	}
}

// OnSuccess counts the call and forwards it to Base.
func (b *Budget) OnSuccess(now int64) {
	b.successes.Add(1)
	b.record(CallOnSuccess, "ok", now)
	if b.Base != nil {
		b.Base.OnSuccess(now)
	}
}

// OnFailure counts the call and forwards it to Base.
func (b *Budget) OnFailure(now int64) {
	b.failures.Add(1)
	b.record(CallOnFailure, "fail", now)
	if b.Base != nil {
		b.Base.OnFailure(now)
	}
}

// AllowRetry counts the call and answers Base's answer, or without a Base
// the one SetAllow set (true by default).
func (b *Budget) AllowRetry(now int64) bool {
	b.asks.Add(1)
	if BudgetCall(b.panics.Load())&CallAllowRetry != 0 {
		panic("testkit: Budget.AllowRetry")
	}
	ok := !b.deny.Load()
	if b.Base != nil {
		ok = b.Base.AllowRetry(now)
	}
	if ok {
		b.allowed.Add(1)
	}
	if b.logging.Load() {
		b.add(fmt.Sprintf("allow=%v@%d", ok, now))
	}
	return ok
}

func (b *Budget) record(c BudgetCall, what string, now int64) {
	if b.logging.Load() {
		b.add(fmt.Sprintf("%s@%d", what, now))
	}
	if BudgetCall(b.panics.Load())&c != 0 {
		panic("testkit: Budget." + c.String())
	}
}

func (b *Budget) add(s string) {
	b.mu.Lock()
	b.log = append(b.log, s)
	b.mu.Unlock()
}

// Requests returns the number of OnRequest calls.
func (b *Budget) Requests() int64 { return b.requests.Load() }

// Successes returns the number of OnSuccess calls.
func (b *Budget) Successes() int64 { return b.successes.Load() }

// Failures returns the number of OnFailure calls.
func (b *Budget) Failures() int64 { return b.failures.Load() }

// Asks returns the number of AllowRetry calls.
func (b *Budget) Asks() int64 { return b.asks.Load() }

// Allowed returns the number of AllowRetry calls that answered true.
func (b *Budget) Allowed() int64 { return b.allowed.Load() }

// Log returns a copy of the calls logged since KeepLog, in order, each as
// "req@<now>", "ok@<now>", "fail@<now>" or "allow=<answer>@<now>".
func (b *Budget) Log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.log...)
}

// String returns the log, space-separated.
func (b *Budget) String() string { return strings.Join(b.Log(), " ") }

// LeakCheck makes t fail, after every other cleanup of t has run (servers,
// transports, policies' goroutines), if a goroutine that was not running
// when LeakCheck was called is still running. Call it first in the test.
// Packages that check the whole binary use goleak.VerifyTestMain in
// TestMain instead.
func LeakCheck(t testing.TB) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// configErrorPkg and configErrorName identify the root package's
// ConfigError, which testkit cannot import (see the package doc).
const (
	configErrorPkg  = "github.com/rampart-go/rampart"
	configErrorName = "ConfigError"
)

// RequireConfigError fails t now unless err's chain (errors.Unwrap, joined
// errors included) holds a *rampart.ConfigError whose Policy is policy and
// whose Field is field. A *rampart.ConfigError always matches
// rampart.ErrInvalidConfig through errors.Is. testkit does not import the
// root package: it recognises the type by its package path and name and
// reads the two fields by reflection.
func RequireConfigError(t testing.TB, err error, policy, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want a *rampart.ConfigError for %s.%s", policy, field)
	}
	ce, ok := findConfigError(err)
	if !ok {
		t.Fatalf("got %T %q, want a *rampart.ConfigError for %s.%s", err, err, policy, field)
	}
	gotPolicy, gotField := ce.FieldByName("Policy").String(), ce.FieldByName("Field").String()
	if gotPolicy != policy || gotField != field {
		t.Fatalf("got a ConfigError for %s.%s (%q), want one for %s.%s", gotPolicy, gotField, err, policy, field)
	}
}

// findConfigError returns the struct a *rampart.ConfigError in err's chain
// points to.
func findConfigError(err error) (reflect.Value, bool) {
	for err != nil {
		v := reflect.ValueOf(err)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			if e := v.Type().Elem(); e.PkgPath() == configErrorPkg && e.Name() == configErrorName {
				return v.Elem(), true
			}
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, inner := range j.Unwrap() {
				if ce, ok := findConfigError(inner); ok {
					return ce, true
				}
			}
			return reflect.Value{}, false
		}
		err = errors.Unwrap(err)
	}
	return reflect.Value{}, false
}

// PlainCtx is a context.Context that ends only when Cancel is called (with
// context.Canceled) and has no AfterFunc method: the kind of custom parent
// for which the context package (and rampart's contexts) must watch Done
// with a goroutine of their own. Value and Deadline are the embedded
// parent's. Build it with NewPlainCtx; it is safe for concurrent use.
type PlainCtx struct {
	context.Context
	done chan struct{}
	once sync.Once
	err  atomic.Value
}

// NewPlainCtx returns a live PlainCtx over parent (for Value and Deadline;
// parent's own end is not seen).
func NewPlainCtx(parent context.Context) *PlainCtx {
	return &PlainCtx{Context: parent, done: make(chan struct{})}
}

// Done is closed by Cancel.
func (c *PlainCtx) Done() <-chan struct{} { return c.done }

// Err is nil until Cancel, context.Canceled after.
func (c *PlainCtx) Err() error {
	if e, ok := c.err.Load().(error); ok {
		return e
	}
	return nil
}

// Cancel ends the context (once; later calls do nothing).
func (c *PlainCtx) Cancel() {
	c.once.Do(func() { c.err.Store(context.Canceled); close(c.done) })
}
