package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/adaptive"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/ratelimit"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/shed"
	"github.com/rampart-go/rampart/timeout"
)

// This file checks run's fast first attempt against the general loop
// (begin, end, settle, abort, unwind): the same scripted sequence of
// behaviours runs through two identical sets of policies, one called through
// Try/TryCall (the fast first attempt when the pipeline allows it) and one
// through the general path, and every Outcome and every policy's Stats must
// come out identical. Two references for the general path:
//   - fpHedged: the same pipeline called through TryHedged/TryCallHedged
//     with no Hedge configured, which runs every attempt through begin and
//     end (runHedged has no fast path);
//   - fpWait: a pipeline whose bulkhead has MaxWait set (p.fast false, so
//     run takes runLoop for every attempt; see FuzzReleaseExactlyOnce),
//     never full, so that nothing waits.
// Everything runs in a synctest bubble on a manual ticker: the retry's sleeps
// and the deadline watchdog's sweeps use the bubble's fake clock.

// fpTickerPanic is what a world's ticker panics with once armed (ArmOnce):
// the world's ticker is a testkit.PanicTicker on a manual clock, which also
// counts its reads.
type fpTickerPanic struct{}

// fpLogBudget is a retry budget with tb underneath that logs every call
// with its time, so that the two paths' budget protocols can be compared
// call for call.
func fpLogBudget(tb *retry.TokenBucket) *testkit.Budget {
	b := &testkit.Budget{Base: tb}
	b.KeepLog()
	return b
}

// fpAlgorithm's controller keeps the limit, and panics once when armed.
type fpAlgorithm struct{ armed *atomic.Bool }

func (a fpAlgorithm) Start(initial, lo, hi float64) adaptive.Controller { return a }

type fpControllerPanic struct{}

func (a fpAlgorithm) Update(s adaptive.Sample) float64 {
	if a.armed.CompareAndSwap(true, false) {
		panic(fpControllerPanic{})
	}
	return s.Limit
}

type fpClassifyPanic struct{ which string }

type fpFnPanic struct{}

type fpHinted struct{}

func (fpHinted) Error() string             { return "busy" }
func (fpHinted) RetryAfter() time.Duration { return 3 * time.Second }

// fpConfig selects the policies of a world.
type fpConfig struct {
	name string
	// retry: 0 none; 1 with a logging budget (the retry needs the start
	// time) and a ShouldRetry that refuses timeouts (context errors); 2
	// with a plain token bucket (it does not), default classifier; 3 as 1
	// with the default classifier, which retries timeouts.
	retry int
	// breaker: 0 none; 1 count window (Record's healthy fast path); 2 count
	// window with a Classify (that may be armed to panic); 3 consecutive;
	// 4 count window timing slow calls (needs both readings).
	breaker   int
	rateLimit bool
	bulkhead  int // Max; 0: none
	adaptive  int // limit; 0: none
	timeout   int // 0 none, 1 soft, 2 deadline
	shed      bool
}

const fpTimeout = time.Second

var fpConfigs = []fpConfig{
	{name: "full-soft", retry: 1, breaker: 1, rateLimit: true, bulkhead: 2, adaptive: 1, timeout: 1},
	{name: "full-deadline-classify", retry: 3, breaker: 2, rateLimit: true, bulkhead: 2, adaptive: 1, timeout: 2},
	{name: "full-soft-classify-retry-all", retry: 3, breaker: 2, rateLimit: true, bulkhead: 2, adaptive: 2, timeout: 1},
	{name: "breaker-bulkhead-no-clock", retry: 2, breaker: 3, bulkhead: 2},
	{name: "healthy-breaker-bulkhead1", breaker: 1, bulkhead: 1},
	{name: "healthy-breaker-bulkhead1-retry", retry: 2, breaker: 1, bulkhead: 1, adaptive: 2},
	{name: "timed-breaker-ratelimit-soft", retry: 1, breaker: 4, rateLimit: true, bulkhead: 2, timeout: 1},
	{name: "deadline-watchdog-verdict", retry: 3, breaker: 1, bulkhead: 2, timeout: 2},
	{name: "adaptive-budget", retry: 1, bulkhead: 3, adaptive: 1},
	{name: "classify-breaker-ratelimit", retry: 1, breaker: 2, rateLimit: true},
	{name: "retry-only", retry: 1},
	{name: "full-soft-shed", retry: 1, breaker: 1, rateLimit: true, bulkhead: 2, adaptive: 1, timeout: 1, shed: true},
	{name: "shed-classify-breaker-deadline", retry: 3, breaker: 2, bulkhead: 2, timeout: 2, shed: true},
	{name: "shed-only", shed: true},
}

type fpRef int

const (
	fpFast   fpRef = iota // Try/TryCall: the fast first attempt when p.fast
	fpHedged              // TryHedged/TryCallHedged without a Hedge: begin/end only
	fpWait                // a bulkhead with MaxWait: p.fast false, runLoop only
)

func (r fpRef) String() string { return [...]string{"fast", "hedged", "wait"}[r] }

// fpWorld is one set of policies and its pipeline.
type fpWorld struct {
	cfg   fpConfig
	ref   fpRef
	clock *rampart.ManualTicker // moved by the test
	tick  *testkit.PanicTicker  // the policies' ticker: clock's readings, counted, panicking once armed
	bud   *testkit.Budget
	rt    *retry.Policy
	cb    *circuitbreaker.Breaker
	rl    *ratelimit.Limiter
	bh    *bulkhead.Bulkhead
	al    *adaptive.Limiter
	to    *timeout.Timeout
	sh    *shed.Shedder
	p     *pipeline.Pipeline

	cbPanic, alClassifyPanic, ctrlPanic, shedHot atomic.Bool
}

func newFPWorld(t testing.TB, cfg fpConfig, ref fpRef) *fpWorld {
	t.Helper()
	w := &fpWorld{cfg: cfg, ref: ref, clock: rampart.NewManualTicker(1_000_000)}
	w.tick = &testkit.PanicTicker{Base: w.clock, Value: fpTickerPanic{}}
	pc := pipeline.Config{Name: cfg.name, Ticker: w.tick}
	if cfg.retry != 0 {
		tb, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 4, TokenRatio: 0.5})
		require.NoError(t, err)
		rc := retry.Config{Name: "rt", Ticker: w.tick, MaxAttempts: 3, Backoff: retry.Constant, BaseDelay: time.Microsecond}
		switch cfg.retry {
		case 1, 3:
			w.bud = fpLogBudget(tb)
			rc.Budget = w.bud
		case 2:
			rc.Budget = tb
		}
		if cfg.retry == 1 {
			rc.ShouldRetry = func(err error) bool {
				return !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
			}
		}
		var err2 error
		w.rt, err2 = retry.New(rc)
		require.NoError(t, err2)
		pc.Retry = w.rt
	}
	if cfg.breaker != 0 {
		bc := circuitbreaker.Config{Name: "cb", Ticker: w.tick, Mode: circuitbreaker.CountWindow,
			WindowSize: 4, MinimumCalls: 4, FailureRateThreshold: 50,
			OpenDuration: 10 * time.Second, HalfOpenProbes: 2}
		switch cfg.breaker {
		case 2:
			bc.Classify = func(err error) rampart.Result {
				if w.cbPanic.CompareAndSwap(true, false) {
					panic(fpClassifyPanic{"breaker"})
				}
				return circuitbreaker.DefaultClassify(err)
			}
		case 3:
			bc.Mode, bc.WindowSize, bc.MinimumCalls, bc.FailureRateThreshold = circuitbreaker.Consecutive, 0, 0, 0
			bc.ConsecutiveFailures = 2
		case 4:
			bc.SlowCallDuration = 500 * time.Millisecond
		}
		cb, err := circuitbreaker.New(bc)
		require.NoError(t, err)
		w.cb = cb
		pc.Breaker = cb
	}
	if cfg.rateLimit {
		w.rl = newRateLimit(t, 100, 3, w.tick)
		pc.RateLimit = w.rl
	}
	if cfg.bulkhead != 0 {
		bc := bulkhead.Config{Max: cfg.bulkhead, Name: "bh", Ticker: w.tick}
		if ref == fpWait {
			bc.MaxWait = time.Second // never full here: nothing waits
		}
		bh, err := bulkhead.New(bc)
		require.NoError(t, err)
		w.bh = bh
		pc.Bulkhead = bh
	}
	if cfg.adaptive != 0 {
		al, err := adaptive.New(adaptive.Config{Name: "al", Ticker: w.tick, Algorithm: fpAlgorithm{&w.ctrlPanic},
			InitialLimit: cfg.adaptive, MinLimit: cfg.adaptive, MaxLimit: cfg.adaptive,
			Window: time.Second, MinWindowSamples: 1})
		require.NoError(t, err)
		w.al = al
		pc.Adaptive = al
		pc.AdaptiveClassify = func(ctx context.Context, err error) rampart.Result {
			if w.alClassifyPanic.CompareAndSwap(true, false) {
				panic(fpClassifyPanic{"adaptive"})
			}
			return adaptive.DefaultClassify(ctx, err)
		}
	}
	switch cfg.timeout {
	case 1:
		w.to = newTimeout(t, w.tick, fpTimeout, timeout.ModeSoft)
	case 2:
		w.to = newTimeoutTick(t, w.tick, fpTimeout, timeout.ModeDeadline, time.Millisecond)
	}
	if w.to != nil {
		pc.Timeout = w.to
	}
	if cfg.shed {
		sh, err := shed.New(shed.Config{Name: "sh", Ticker: w.tick, SampleInterval: 100 * time.Millisecond, CoolOff: 100 * time.Millisecond,
			Source: shed.SourceFunc(func(_ int64, s *shed.Signals) {
				s.SchedLatency = 0
				if w.shedHot.Load() {
					s.SchedLatency = time.Second
				}
			})})
		require.NoError(t, err)
		w.sh = sh
		pc.Shed = sh
	}
	p, err := pipeline.New(pc)
	require.NoError(t, err)
	w.p = p
	return w
}

// The behaviours of a script. Each op is one call (or a clock move).
const (
	opOK              = iota
	opFail            // a retryable error
	opPermanent       // retry.Permanent
	opHinted          // an error with a retry-after hint
	opFailThenOK      // fails on the first attempt only
	opPanic           // fn panics
	opGoexit          // fn calls runtime.Goexit
	opOverrun         // fn overruns the timeout and returns nil
	opOverrunFail     // fn overruns the timeout and returns an error
	opCancel          // fn cancels the caller's context and returns its error
	opCancelOK        // fn cancels the caller's context and returns nil
	opNested          // fn makes a nested call while holding its permits
	opPreCanceled     // the context is done before the call
	opCbPanicOnError  // the breaker's Classify panics on this call's error
	opAlClassifyPanic // AdaptiveClassify panics on this call's error
	opTickPanicT1     // the ticker panics at the first read after fn
	opTickPanicT1Fail // the same, fn failing
	opTickPanicT0     // the ticker panics at the call's first read
	opAdvance         // the clock moves 10 ms, no call
	opAdvanceOpen     // the clock moves 11 s (past the open period and the adaptive window), no call
	opShedHot         // the shedder's signal turns hot and the clock moves to its next sample, no call
	opShedCold        // the shedder's signal turns cold and the clock moves to its next sample, no call
	opCount

	// Ops run by a test of their own, outside the generated scripts.
	opCbPanicOnSuccess = 100 + iota // the breaker's Classify panics on a success
	opCtrlPanic                     // the adaptive Controller panics when this call's success closes the window
)

// ops returns the ops that apply to cfg: no ticker panics with a deadline
// timeout, whose watchdog goroutine reads the ticker too.
func (cfg fpConfig) ops() []byte {
	var ops []byte
	for op := range byte(opCount) {
		switch op {
		case opTickPanicT0, opTickPanicT1, opTickPanicT1Fail:
			if cfg.timeout == 2 {
				continue
			}
		case opShedHot, opShedCold:
			if !cfg.shed {
				continue
			}
		}
		ops = append(ops, op)
	}
	return ops
}

// step runs op and returns what the caller saw.
func (w *fpWorld) step(op byte, i int) string {
	defer func() {
		// Disarm whatever the op did not trigger, so that it cannot fire
		// somewhere else later.
		w.cbPanic.Store(false)
		w.alClassifyPanic.Store(false)
		w.ctrlPanic.Store(false)
		w.tick.Disarm()
	}()
	switch op {
	case opAdvance:
		w.clock.Advance(10 * time.Millisecond)
		return "advance"
	case opAdvanceOpen:
		w.clock.Advance(11 * time.Second)
		return "advance open"
	case opShedHot, opShedCold:
		w.shedHot.Store(op == opShedHot)
		w.clock.Advance(100 * time.Millisecond)
		return "shed signal"
	case opCbPanicOnSuccess:
		w.cbPanic.Store(true)
	case opCtrlPanic:
		w.clock.Advance(1500 * time.Millisecond) // the adaptive window is due
		w.ctrlPanic.Store(true)
	case opTickPanicT0:
		w.tick.ArmOnce()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if op == opPreCanceled {
		cancel()
	}
	var n int
	var inner string
	fn := func(actx context.Context) (int, error) {
		n++
		switch op {
		case opFail:
			return n, errBoom
		case opPermanent:
			return n, retry.Permanent(errBoom)
		case opHinted:
			return n, fpHinted{}
		case opFailThenOK:
			if n == 1 {
				return n, errBoom
			}
		case opPanic:
			panic(fpFnPanic{})
		case opGoexit:
			testkit.Goexit()
		case opOverrun, opOverrunFail:
			w.clock.Advance(fpTimeout + time.Millisecond)
			if w.cfg.timeout == 2 {
				<-actx.Done() // the watchdog fires (fake time in the bubble)
			}
			if op == opOverrunFail {
				return n, errBoom
			}
		case opCancel:
			cancel()
			return n, actx.Err()
		case opCancelOK:
			cancel()
		case opNested:
			var o pipeline.Outcome
			if w.ref == fpHedged {
				o = w.p.TryHedged(actx, ok)
			} else {
				o = w.p.Try(actx, ok)
			}
			inner = fpDescribe(o)
		case opCbPanicOnError:
			w.cbPanic.Store(true)
			return n, errBoom
		case opAlClassifyPanic:
			w.alClassifyPanic.Store(true)
			return n, errBoom
		case opTickPanicT1:
			w.tick.ArmOnce()
		case opTickPanicT1Fail:
			w.tick.ArmOnce()
			return n, errBoom
		}
		return n, nil
	}
	var s string
	panicked, goexited := testkit.Run(func() {
		if i%2 == 0 {
			// Try: fnE.
			fe := func(ctx context.Context) error { _, err := fn(ctx); return err }
			var o pipeline.Outcome
			if w.ref == fpHedged {
				o = w.p.TryHedged(ctx, fe)
			} else {
				o = w.p.Try(ctx, fe)
			}
			s = fpDescribe(o)
		} else {
			// TryCall: fnT, and the value of the last attempt.
			var v int
			var o pipeline.Outcome
			if w.ref == fpHedged {
				v, o = pipeline.TryCallHedged(ctx, w.p, fn)
			} else {
				v, o = pipeline.TryCall(ctx, w.p, fn)
			}
			s = fmt.Sprintf("%s v=%d", fpDescribe(o), v)
		}
	})
	switch {
	case goexited:
		s = "goexit"
	case panicked != nil:
		s = fmt.Sprintf("panic %#v", panicked)
	}
	return fmt.Sprintf("%s fn-runs=%d inner=[%s]", s, n, inner)
}

func fpDescribe(o pipeline.Outcome) string {
	return fmt.Sprintf("code=%v policy=%v attempts=%d retryAfter=%v err=%T(%v) rejected=%v timeout=%v canceled=%v",
		o.Code, o.Policy, o.Attempts, o.RetryAfter, o.Err, o.Err,
		errors.Is(o.Err, rampart.ErrRejected), errors.Is(o.Err, timeout.ErrTimeout), errors.Is(o.Err, context.Canceled))
}

// snapshot renders every policy's Stats (and the budget's log, and the
// ticker's read count when reads is set).
func (w *fpWorld) snapshot(reads bool) string {
	var b strings.Builder
	if reads {
		fmt.Fprintf(&b, "reads %d\n", w.tick.Reads())
	}
	if w.rt != nil {
		fmt.Fprintf(&b, "retry %+v\n", w.rt.Stats())
	}
	if w.bud != nil {
		fmt.Fprintf(&b, "budget %s\n", w.bud)
	}
	if w.cb != nil {
		fmt.Fprintf(&b, "breaker %+v\n", w.cb.Stats())
	}
	if w.rl != nil {
		fmt.Fprintf(&b, "ratelimit %+v\n", w.rl.Stats())
	}
	if w.bh != nil {
		fmt.Fprintf(&b, "bulkhead %+v\n", w.bh.Stats())
	}
	if w.al != nil {
		fmt.Fprintf(&b, "adaptive %+v inflight %d\n", w.al.Stats(), w.al.InFlight())
	}
	if w.to != nil {
		fmt.Fprintf(&b, "timeout %+v\n", w.to.Stats())
	}
	if w.sh != nil {
		fmt.Fprintf(&b, "shed %+v\n", w.sh.Stats())
	}
	return b.String()
}

// held reports the permits still held after a call (none may be).
func (w *fpWorld) held() string {
	var s []string
	if w.bh != nil && w.bh.Stats().InFlight != 0 {
		s = append(s, fmt.Sprintf("bulkhead %d", w.bh.Stats().InFlight))
	}
	if w.al != nil && w.al.InFlight() != 0 {
		s = append(s, fmt.Sprintf("adaptive %d", w.al.InFlight()))
	}
	if w.sh != nil && w.sh.InFlight() != 0 {
		s = append(s, fmt.Sprintf("shed %d", w.sh.InFlight()))
	}
	if w.cb != nil && w.cb.Stats().HalfOpenInFlight != 0 {
		s = append(s, fmt.Sprintf("half-open probes %d", w.cb.Stats().HalfOpenInFlight))
	}
	return strings.Join(s, ", ")
}

func fpOpNames(script []byte) string {
	names := map[byte]string{
		opOK: "ok", opFail: "fail", opPermanent: "permanent", opHinted: "hinted", opFailThenOK: "failThenOK",
		opPanic: "panic", opGoexit: "goexit", opOverrun: "overrun", opOverrunFail: "overrunFail",
		opCancel: "cancel", opCancelOK: "cancelOK", opNested: "nested", opPreCanceled: "preCanceled",
		opCbPanicOnError: "cbPanicOnError", opAlClassifyPanic: "alClassifyPanic",
		opTickPanicT1: "tickPanicT1", opTickPanicT1Fail: "tickPanicT1Fail", opTickPanicT0: "tickPanicT0",
		opAdvance: "advance", opAdvanceOpen: "advanceOpen", opShedHot: "shedHot", opShedCold: "shedCold",
		opCbPanicOnSuccess: "cbPanicOnSuccess", opCtrlPanic: "ctrlPanic",
	}
	s := make([]string, len(script))
	for i, op := range script {
		s[i] = names[op]
	}
	return strings.Join(s, " ")
}

// fpCompare runs script through a fast world and a reference world of cfg
// (inside the caller's synctest bubble) and returns the first difference, or
// "" when every outcome and every snapshot matched.
func fpCompare(t testing.TB, cfg fpConfig, ref fpRef, script []byte) string {
	fast := newFPWorld(t, cfg, fpFast)
	other := newFPWorld(t, cfg, ref)
	// The waiting bulkhead's pipeline reads t0 again after admission; the
	// hedged reference reads the clock exactly as often (but a deadline
	// timeout's watchdog goroutine reads it too, when it likes).
	reads := ref == fpHedged && cfg.timeout != 2
	for i, op := range script {
		a := fast.step(op, i)
		b := other.step(op, i)
		sa, sb := fast.snapshot(reads), other.snapshot(reads)
		if a != b || sa != sb {
			return fmt.Sprintf("%s vs %s, op %d of [%s]:\nfast:  %s\n%s\n%s: %s\n%s",
				cfg.name, ref, i, fpOpNames(script[:i+1]), a, sa, ref, b, sb)
		}
		// After the snapshots: a breaker's Stats reads the ticker when open.
		if h, hb := fast.held(), other.held(); h != "" || hb != "" {
			return fmt.Sprintf("%s, op %d of [%s]: held after the call: fast: %s; %s: %s", cfg.name, i, fpOpNames(script[:i+1]), h, ref, hb)
		}
	}
	return ""
}

// fpScripts returns the scripts run for cfg: every op after each other op
// (with clock moves), and a long pseudo-random one.
func fpScripts(cfg fpConfig, stream uint64) [][]byte {
	ops := cfg.ops()
	var pairs []byte
	for _, a := range ops {
		for _, b := range ops {
			pairs = append(pairs, a, b)
		}
		pairs = append(pairs, opAdvanceOpen)
	}
	r := rand.New(rand.NewPCG(stream, 0x5eed))
	random := make([]byte, 300)
	for i := range random {
		random[i] = ops[r.IntN(len(ops))]
	}
	// Failures in a row (the breaker trips), then its half-open probes.
	trip := []byte{opOK, opOK, opOK, opOK, opFail, opFail, opFail, opFail, opOK, opAdvanceOpen,
		opOK, opFail, opAdvanceOpen, opNested, opOK, opOK, opOK, opOK, opOK, opPanic, opAdvanceOpen, opGoexit,
		opAdvanceOpen, opCbPanicOnError, opAdvanceOpen, opOverrun, opOK}
	return [][]byte{pairs, random, trip}
}

// TestFastPathMatchesGeneralPath: for every combination of policies and
// every behaviour of fn and the user's code (errors, panics, Goexit,
// timeouts, cancellation, nested calls holding permits, rejections by each
// policy, panicking classifiers and clocks), the fast first attempt gives
// the Outcome, the value and the policies' Stats (breaker, rate limiter,
// bulkhead, adaptive, timeout, retry, and the budget's calls with their
// times) that the general path gives, and holds nothing afterwards.
func TestFastPathMatchesGeneralPath(t *testing.T) {
	for ci, cfg := range fpConfigs {
		for _, ref := range []fpRef{fpHedged, fpWait} {
			if ref == fpWait && cfg.bulkhead < 2 {
				continue // a nested call would queue behind its own caller
			}
			t.Run(cfg.name+"/"+ref.String(), func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					for si, script := range fpScripts(cfg, uint64(ci)) {
						if d := fpCompare(t, cfg, ref, script); d != "" {
							t.Fatalf("script %d: %s", si, d)
						}
					}
				})
			})
		}
	}
}

// FuzzFastPathMatchesGeneralPath is TestFastPathMatchesGeneralPath on
// fuzzed scripts.
func FuzzFastPathMatchesGeneralPath(f *testing.F) {
	f.Add(uint8(0), false, []byte{opOK, opFail, opNested, opAdvanceOpen, opPanic, opOverrun})
	f.Add(uint8(1), true, []byte{opFailThenOK, opFail, opFail, opFail, opAdvanceOpen, opOK})
	f.Add(uint8(3), false, []byte{opFail, opFail, opAdvanceOpen, opOK, opGoexit})
	f.Fuzz(func(t *testing.T, ci uint8, wait bool, raw []byte) {
		cfg := fpConfigs[int(ci)%len(fpConfigs)]
		ref := fpHedged
		if wait && cfg.bulkhead >= 2 {
			ref = fpWait
		}
		ops := cfg.ops()
		script := make([]byte, len(raw))
		for i, b := range raw {
			script[i] = ops[int(b)%len(ops)]
		}
		synctest.Test(t, func(t *testing.T) {
			if d := fpCompare(t, cfg, ref, script); d != "" {
				t.Fatal(d)
			}
		})
	})
}

// TestFastPathUserPanicOnSuccessMatchesGeneralPath: user code that panics
// while a success is released, on the fast path as on the general path
// (settle): a breaker Classify that panics on a success (the adaptive
// token is released the same way, so the adaptive limit's samples match),
// and an adaptive Controller that panics when a success closes the window
// (the permits are released in settle's order, so the breaker and the
// budget record what they record there).
func TestFastPathUserPanicOnSuccessMatchesGeneralPath(t *testing.T) {
	for _, c := range []struct {
		cfg    fpConfig
		script []byte
	}{
		{fpConfig{name: "classify-adaptive", retry: 1, breaker: 2, bulkhead: 2, adaptive: 2},
			[]byte{opOK, opCbPanicOnSuccess, opAdvanceOpen, opOK, opAdvanceOpen, opOK}},
		{fpConfig{name: "controller", retry: 1, breaker: 3, bulkhead: 2, adaptive: 2},
			[]byte{opOK, opCtrlPanic, opOK, opFail, opOK}},
	} {
		for _, ref := range []fpRef{fpHedged, fpWait} {
			t.Run(c.cfg.name+"/"+ref.String(), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					if d := fpCompare(t, c.cfg, ref, c.script); d != "" {
						t.Fatal(d)
					}
				})
			})
		}
	}
}

// TestFastPathGoexitInRejectionListenerReleasesBreakerPermit: a rate
// limiter's OnRejected or a bulkhead's OnRejected that calls runtime.Goexit
// (t.FailNow in a test's listener; notify recovers panics, not Goexit)
// while the breaker's permit is held ends the caller's goroutine, and the
// guard releases the breaker's permit, on the fast first attempt as on the
// general path: the half-open probe slot is free again, and the breaker
// does not reject the later calls as half-open-full.
func TestFastPathGoexitInRejectionListenerReleasesBreakerPermit(t *testing.T) {
	for _, which := range []string{"ratelimit", "bulkhead"} {
		for _, ref := range []fpRef{fpFast, fpHedged} {
			t.Run(which+"/"+ref.String(), func(t *testing.T) {
				tick := rampart.NewManualTicker(1)
				var goexit atomic.Bool
				cb := newBreaker(t, tick, nil) // one half-open probe
				cfg := pipeline.Config{Breaker: cb}
				var take func() bool
				if which == "ratelimit" {
					rl, err := ratelimit.New(ratelimit.Config{Name: "rl", Rate: 1, Burst: 1, Ticker: tick,
						OnRejected: func(int, time.Duration) {
							if goexit.Load() {
								testkit.Goexit()
							}
						}})
					require.NoError(t, err)
					cfg.RateLimit = rl
					take = func() bool { return rl.AdmitN(tick.Now(), 1) == 0 }
				} else {
					bh, err := bulkhead.New(bulkhead.Config{Name: "bh", Max: 1, Ticker: tick,
						OnRejected: func(int64, time.Duration) {
							if goexit.Load() {
								testkit.Goexit()
							}
						}})
					require.NoError(t, err)
					cfg.Bulkhead = bh
					take = func() bool { return bh.Acquire() == nil }
				}
				p, err := pipeline.New(cfg)
				require.NoError(t, err)
				require.True(t, cb.TransitionTo(circuitbreaker.HalfOpen))
				require.True(t, take()) // the next attempt is rejected after the breaker admits it
				goexit.Store(true)
				_, goexited := testkit.Run(func() {
					if ref == fpHedged {
						_ = p.DoHedged(context.Background(), ok)
					} else {
						_ = p.Do(context.Background(), ok)
					}
				})
				require.True(t, goexited, "the call returned after the listener's runtime.Goexit")
				require.Zero(t, cb.Stats().HalfOpenInFlight, "the half-open probe's permit leaked")
			})
		}
	}
}

// TestFastPathBreakerRejectionPaths: the breaker's two rejection paths on
// the fast first attempt, with and without t0 read, give the general path's
// Outcome (the remaining open time as the hint, one attempt, the budget's
// request counted and nothing else), and an open period that has passed
// admits the call as a half-open probe, whose success closes the breaker,
// when t0 was not read.
func TestFastPathBreakerRejectionPaths(t *testing.T) {
	for _, cfg := range []fpConfig{
		{name: "t0-read", retry: 1, breaker: 3, rateLimit: true, bulkhead: 2},
		{name: "t0-not-read", retry: 2, breaker: 3, bulkhead: 2},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Trip (two failures, each retried: the retry gives up on the
				// breaker's rejection), rejected calls, then the probe.
				script := []byte{opFail, opFail, opOK, opAdvance, opOK, opNested, opAdvanceOpen, opOK, opOK}
				if d := fpCompare(t, cfg, fpHedged, script); d != "" {
					t.Fatal(d)
				}
				w := newFPWorld(t, cfg, fpFast)
				for i, op := range script[:3] {
					w.step(op, i)
				}
				require.Equal(t, circuitbreaker.Open, w.cb.State())
				w.clock.Advance(4 * time.Second)
				o := w.p.Try(context.Background(), ok)
				require.Equal(t, pipeline.Outcome{Code: pipeline.Rejected, Policy: pipeline.Breaker, Attempts: 1,
					Err: o.Err, RetryAfter: 6 * time.Second}, o)
				require.ErrorIs(t, o.Err, circuitbreaker.ErrOpen)
				w.clock.Advance(6 * time.Second)
				require.Equal(t, pipeline.Outcome{Attempts: 1}, w.p.Try(context.Background(), ok))
				s := w.cb.Stats()
				// The probe's success was recorded: it closed the breaker
				// (of 2 probes, the one left could no longer make 2 fail).
				require.Equal(t, circuitbreaker.Closed, s.State, "the probe's success was not recorded")
				require.Zero(t, s.HalfOpenInFlight)
			})
		})
	}
}

// TestFastPathPanicsReleaseOnce: a panic or Goexit in fn, a classifier or
// the clock at each point of the fast first attempt releases every permit
// exactly once (the bulkhead panics on an unmatched Release; the adaptive
// limit at 1 admits exactly one call afterwards), records the breaker's
// failure and the budget's, and re-raises.
func TestFastPathPanicsReleaseOnce(t *testing.T) {
	cases := []struct {
		op          byte
		failure     bool   // the breaker and the budget record a failure
		reraised    string // "" for Goexit
		budgetTimes int    // budget log entries after the call
	}{
		{opPanic, true, "pipeline_test.fpFnPanic{}", 2},
		{opGoexit, true, "", 2},
		{opTickPanicT1, true, "pipeline_test.fpTickerPanic{}", 2},
		{opTickPanicT1Fail, true, "pipeline_test.fpTickerPanic{}", 2},
		{opCbPanicOnError, true, "pipeline_test.fpClassifyPanic{which:\"breaker\"}", 2},
		{opAlClassifyPanic, true, "pipeline_test.fpClassifyPanic{which:\"adaptive\"}", 2},
		{opTickPanicT0, false, "pipeline_test.fpTickerPanic{}", 0},
	}
	for _, c := range cases {
		t.Run(fpOpNames([]byte{c.op}), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := fpConfig{name: "all", retry: 1, breaker: 2, rateLimit: true, bulkhead: 1, adaptive: 1, timeout: 1}
				w := newFPWorld(t, cfg, fpFast)
				got := w.step(c.op, 0)
				if c.reraised == "" {
					require.True(t, strings.HasPrefix(got, "goexit "), got)
				} else {
					require.True(t, strings.HasPrefix(got, "panic "+c.reraised+" "), got)
				}
				require.Empty(t, w.held())
				fails := uint64(0)
				if c.failure {
					fails = 1
				}
				require.Equal(t, fails, w.cb.Stats().Failures)
				log := w.bud.Log()
				require.Len(t, log, c.budgetTimes, w.bud.String())
				if c.failure {
					require.True(t, strings.HasPrefix(log[1], "fail@"), w.bud.String())
				}
				// Exactly one permit each: one call admitted, a nested one
				// rejected by the bulkhead.
				got = w.step(opNested, 1)
				require.Contains(t, got, "code=ok")
				require.Contains(t, got, "inner=[code=rejected policy=bulkhead")
				require.Empty(t, w.held())
			})
		})
	}
}

// TestFastPathOutcomes pins the fast first attempt's Outcome for each way a
// call can end on it, field by field.
func TestFastPathOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := fpConfig{name: "outcomes", retry: 1, breaker: 3, rateLimit: true, bulkhead: 1, adaptive: 2, timeout: 1}
		w := newFPWorld(t, cfg, fpFast)
		ctx := context.Background()
		require.Equal(t, pipeline.Outcome{Attempts: 1}, w.p.Try(ctx, ok))
		v, o := pipeline.TryCall(ctx, w.p, func(context.Context) (int, error) { return 42, nil })
		require.Equal(t, 42, v)
		require.Equal(t, pipeline.Outcome{Attempts: 1}, o)
		// A soft-mode overrun of a success: a timeout, which this world's
		// ShouldRetry refuses.
		o = w.p.Try(ctx, func(context.Context) error { w.clock.Advance(fpTimeout); return nil })
		require.Equal(t, pipeline.Outcome{Code: pipeline.TimedOut, Policy: pipeline.Timeout, Attempts: 1, Err: w.to.Err()}, o)
		w.clock.Advance(time.Second)                                      // the rate limiter refills
		require.Equal(t, pipeline.Outcome{Attempts: 1}, w.p.Try(ctx, ok)) // the breaker's count of failures in a row back to 0
		// A hinted, non-retryable error.
		o = w.p.Try(ctx, func(context.Context) error { return retry.Permanent(fpHinted{}) })
		require.Equal(t, pipeline.Outcome{Code: pipeline.Failed, Attempts: 1, Err: fpHinted{}, RetryAfter: 3 * time.Second}, o)
		// Rejections: the bulkhead (nested) and the rate limiter (burst 3 spent).
		w.clock.Advance(time.Second)
		var inner pipeline.Outcome
		require.Equal(t, pipeline.Outcome{Attempts: 1}, w.p.Try(ctx, func(ctx context.Context) error { inner = w.p.Try(ctx, ok); return nil }))
		require.Equal(t, pipeline.Outcome{Code: pipeline.Rejected, Policy: pipeline.Bulkhead, Attempts: 1, Err: w.bh.RejectedError()}, inner)
		require.Equal(t, pipeline.Outcome{Attempts: 1}, w.p.Try(ctx, ok))
		o = w.p.Try(ctx, ok)
		require.Equal(t, pipeline.Outcome{Code: pipeline.Rejected, Policy: pipeline.RateLimit, Attempts: 1, Err: w.rl.RejectedError(), RetryAfter: 10 * time.Millisecond}, o)
		require.Empty(t, w.held())
	})
}

// TestBreakerRecordFastPathSkipsNoProbeOrStalePermit: Record's early return
// for a healthy closed count window never swallows a half-open probe's
// success (the window can still be full of successes when a breaker is
// moved to half-open by hand) nor a permit of an older generation whose
// successor window is healthy.
func TestBreakerRecordFastPathSkipsNoProbeOrStalePermit(t *testing.T) {
	tick := rampart.NewManualTicker(1)
	cb, err := circuitbreaker.New(circuitbreaker.Config{Name: "cb", Ticker: tick, Mode: circuitbreaker.CountWindow,
		WindowSize: 2, MinimumCalls: 2, FailureRateThreshold: 50, OpenDuration: time.Second,
		HalfOpenProbes: 1, HalfOpenSuccesses: 1})
	require.NoError(t, err)
	healthy := func() {
		for range 2 {
			pm, err := cb.AcquireAt(tick.Now())
			require.NoError(t, err)
			cb.ReleaseAt(pm, tick.Now(), cb.Classify(nil))
		}
		s := cb.Stats()
		require.Equal(t, int64(2), s.WindowCalls)
		require.Zero(t, s.WindowFailures)
	}
	healthy()
	// A stale permit: taken in this generation, recorded after a reset
	// whose new window is healthy again.
	stale, err := cb.AcquireAt(tick.Now())
	require.NoError(t, err)
	cb.Reset()
	healthy()
	cb.ReleaseAt(stale, tick.Now(), cb.Classify(nil))
	require.EqualValues(t, 1, cb.Stats().StaleResults, "a stale permit's success was taken for a current one")

	// A half-open probe over a window full of successes.
	require.True(t, cb.TransitionTo(circuitbreaker.HalfOpen))
	require.Equal(t, int64(2), cb.Stats().WindowCalls, "the window is still full of successes")
	probe, err := cb.AcquireAt(tick.Now())
	require.NoError(t, err)
	_, err = cb.AcquireAt(tick.Now())
	require.ErrorIs(t, err, circuitbreaker.ErrHalfOpenFull)
	cb.ReleaseAt(probe, tick.Now(), cb.Classify(nil))
	require.Equal(t, circuitbreaker.Closed, cb.State(), "the probe's success was not recorded")

	// Through a pipeline: the probe is the fast first attempt's.
	p, err := pipeline.New(pipeline.Config{Breaker: cb})
	require.NoError(t, err)
	healthy()
	require.True(t, cb.TransitionTo(circuitbreaker.HalfOpen))
	require.Equal(t, pipeline.Outcome{Attempts: 1}, p.Try(context.Background(), ok))
	require.Equal(t, circuitbreaker.Closed, cb.State(), "the pipeline's probe success was not recorded")
}

// TestTimeoutFinishFastPath: Finish's soft-mode in-time early return keeps
// Finish's contract for every kind of handle and reading: NotRead reads the
// clock, a reading at the deadline is a timeout, a zero Handle (deadline 0)
// is in time only for a reading below 0, and a deadline-mode handle always
// takes the slow path (its context is ended and its watch released).
func TestTimeoutFinishFastPath(t *testing.T) {
	tick := rampart.NewManualTicker(1000)
	soft := newTimeout(t, tick, fpTimeout, timeout.ModeSoft)
	_, h := soft.StartAt(context.Background(), 1000)
	d := h.Deadline()
	require.Equal(t, int64(1000)+int64(fpTimeout), d)
	require.Same(t, errBoom, soft.FinishAt(h, d-1, errBoom))
	require.NoError(t, soft.FinishAt(h, d-1, nil))
	require.Zero(t, soft.Stats().Timeouts)
	require.ErrorIs(t, soft.FinishAt(h, d, nil), timeout.ErrTimeout)
	require.EqualValues(t, 1, soft.Stats().Timeouts)
	// NotRead: soft mode reads the ticker.
	require.NoError(t, soft.FinishAt(h, rampart.NotRead, nil))
	tick.Set(d)
	require.ErrorIs(t, soft.FinishAt(h, rampart.NotRead, nil), timeout.ErrTimeout)
	require.EqualValues(t, 2, soft.Stats().Timeouts)
	// The zero Handle: deadline 0.
	require.Same(t, errBoom, soft.FinishAt(timeout.Handle{}, -1, errBoom))
	require.ErrorIs(t, soft.FinishAt(timeout.Handle{}, 0, errBoom), timeout.ErrTimeout)
	require.ErrorIs(t, soft.FinishAt(timeout.Handle{}, rampart.NotRead, nil), timeout.ErrTimeout, "NotRead reads the clock: past deadline 0")

	// Deadline mode, in time: Finish must still end the context.
	dl := newTimeoutTick(t, tick, fpTimeout, timeout.ModeDeadline, time.Millisecond)
	for _, now := range []int64{tick.Now() + 1, rampart.NotRead} {
		ctx, h := dl.StartAt(context.Background(), tick.Now())
		require.NoError(t, ctx.Err())
		require.NoError(t, dl.FinishAt(h, now, nil))
		require.ErrorIs(t, ctx.Err(), context.Canceled, "Finish did not end a deadline-mode context")
	}
	require.Zero(t, dl.Stats().Timeouts)
	ctx, h := dl.StartAt(context.Background(), tick.Now())
	require.ErrorIs(t, dl.FinishAt(h, h.Deadline(), nil), timeout.ErrTimeout)
	require.Error(t, ctx.Err())
}

// TestCachedTickerReadDirectly: the pipeline's direct load of a
// CachedTicker's word falls back to Now while the ticker is not started
// (0) and after Close (-1), so that no policy ever sees 0 or -1 as the
// time, and readings never go backwards across Close.
func TestCachedTickerReadDirectly(t *testing.T) {
	ct := rampart.NewCachedTicker(time.Hour) // refreshed only by hand here: never on its own
	defer ct.Close()
	bud := fpLogBudget(newTokenBucket(t))
	rt := newRetry(t, ct, func(c *retry.Config) { c.Budget = bud })
	p, err := pipeline.New(pipeline.Config{Retry: rt, RateLimit: newRateLimit(t, 1e6, 100, ct)})
	require.NoError(t, err)
	var last int64
	check := func(what string) {
		t.Helper()
		require.NoError(t, p.Do(context.Background(), ok))
		log := bud.Log()
		var now int64
		_, err := fmt.Sscanf(log[len(log)-1], "ok@%d", &now)
		require.NoError(t, err)
		require.Positive(t, now, what)
		require.GreaterOrEqual(t, now, last, what+": time went backwards")
		require.LessOrEqual(t, now, ct.Now(), what)
		last = now
	}
	check("not started") // the first read starts the ticker
	check("started")
	require.NoError(t, ct.Close())
	check("closed")
	check("closed again")

	// Inside a bubble: the ticker follows the fake clock and the pipeline
	// reads what the ticker reads.
	synctest.Test(t, func(t *testing.T) {
		ct := rampart.NewCachedTicker(time.Millisecond)
		defer ct.Close()
		bud := fpLogBudget(newTokenBucket(t))
		rt := newRetry(t, ct, func(c *retry.Config) { c.Budget = bud })
		p, err := pipeline.New(pipeline.Config{Retry: rt})
		require.NoError(t, err)
		var times []int64
		for range 3 {
			require.NoError(t, p.Do(context.Background(), ok))
			var now int64
			log := bud.Log()
			_, err := fmt.Sscanf(log[len(log)-1], "ok@%d", &now)
			require.NoError(t, err)
			require.Positive(t, now)
			require.LessOrEqual(t, now, ct.Now())
			times = append(times, now)
			time.Sleep(10 * time.Millisecond)
		}
		// Within one refresh interval of the 10 ms slept.
		require.GreaterOrEqual(t, times[1]-times[0], int64(8*time.Millisecond), "the reading did not follow the bubble's clock")
		require.GreaterOrEqual(t, times[2]-times[1], int64(8*time.Millisecond))
	})
}

// TestBreakerRejectionWithoutClockCountsOnce: with no policy reading t0, the
// pipeline (fast first attempt and begin alike) first asks the breaker with
// "not read", which an open breaker refuses, then reads the clock and asks
// again. Only the call's final answer counts: a call rejected once is
// counted once (Stats.Rejected, OnRejected), and a call admitted as a
// half-open probe is not counted as rejected.
func TestBreakerRejectionWithoutClockCountsOnce(t *testing.T) {
	for _, ref := range []fpRef{fpFast, fpHedged} {
		t.Run(ref.String(), func(t *testing.T) {
			tick := rampart.NewManualTicker(1)
			var notified atomic.Int64
			cb := newBreaker(t, tick, func(c *circuitbreaker.Config) {
				c.OnRejected = func(circuitbreaker.State) { notified.Add(1) }
			})
			p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: newBulkhead(t, 2, tick)}) // nothing reads t0
			require.NoError(t, err)
			try := func() pipeline.Outcome {
				if ref == fpHedged {
					return p.TryHedged(context.Background(), ok)
				}
				return p.Try(context.Background(), ok)
			}
			require.True(t, cb.TransitionTo(circuitbreaker.Open))
			o := try()
			require.Equal(t, pipeline.Rejected, o.Code)
			require.EqualValues(t, 1, cb.Stats().Rejected, "one rejected call")
			require.EqualValues(t, 1, notified.Load(), "one OnRejected")
			tick.Advance(11 * time.Second) // the open period is over
			require.Equal(t, pipeline.OK, try().Code)
			require.EqualValues(t, 1, cb.Stats().Rejected, "the admitted probe was counted as rejected")
			require.EqualValues(t, 1, notified.Load())
		})
	}
}

// TestNewWithNilCachedTickerDoesNotPanic: New looks inside a
// *rampart.CachedTicker for its reading word; a typed nil one (a
// configuration mistake), or a typed nil of the other tickers, makes New
// return a rampart.ConfigError instead of panicking.
func TestNewWithNilCachedTickerDoesNotPanic(t *testing.T) {
	for _, tick := range []rampart.Ticker{(*rampart.CachedTicker)(nil), (*rampart.NanoTicker)(nil), (*rampart.ManualTicker)(nil)} {
		require.NotPanics(t, func() {
			_, err := pipeline.New(pipeline.Config{Ticker: tick})
			testkit.RequireConfigError(t, err, "pipeline", "Ticker")
		})
	}
}

// TestPanickingTickerAfterPanicReleasesEverything: after fn panics, the
// guard reads the end time for the policies that take it; a Ticker that
// panics there too must not leave the permits held, and the caller sees
// fn's panic.
func TestPanickingTickerAfterPanicReleasesEverything(t *testing.T) {
	tick := &testkit.PanicTicker{Base: rampart.NewManualTicker(1), Value: "ticker bug"} // a user Ticker with a bug
	bh := newBulkhead(t, 1, tick)
	al := newAdaptive(t, tick, 1)
	to := newTimeout(t, tick, time.Second, timeout.ModeSoft)
	cb := newBreaker(t, tick, nil)
	p, err := pipeline.New(pipeline.Config{Breaker: cb, Bulkhead: bh, Adaptive: al, Timeout: to})
	require.NoError(t, err)
	require.PanicsWithValue(t, "fn", func() {
		_ = p.Do(context.Background(), func(context.Context) error {
			tick.Arm()
			panic("fn")
		})
	})
	tick.Disarm()
	require.Zero(t, bh.Stats().InFlight, "bulkhead permit leaked")
	require.Zero(t, al.InFlight(), "adaptive token leaked")
	require.EqualValues(t, 1, cb.Stats().Failures, "the panic was not recorded")
	require.NoError(t, p.Do(context.Background(), ok), "nothing is stuck")
}

// TestUncomparableTickerIsAConfigError: two policies sharing a Ticker whose
// type cannot be compared (== would panic) make New return a ConfigError.
func TestUncomparableTickerIsAConfigError(t *testing.T) {
	tk := testkit.FuncTicker(func() int64 { return 1 }) // a func: not comparable
	rl, err := ratelimit.New(ratelimit.Config{Rate: 1, Burst: 1, Ticker: tk})
	require.NoError(t, err)
	rt, err := retry.New(retry.Config{Ticker: tk})
	require.NoError(t, err)
	require.NotPanics(t, func() {
		_, err = pipeline.New(pipeline.Config{Retry: rt, RateLimit: rl})
	})
	testkit.RequireConfigError(t, err, "pipeline", "Retry")
}
