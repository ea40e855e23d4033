package bulkhead

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/pad"
	"github.com/rampart-go/rampart/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustNew(t testing.TB, cfg Config) *Bulkhead {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	return b
}

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{{Config{}, "Max"}, {Config{Max: -1}, "Max"}, {Config{Max: 1, MaxWait: -time.Second}, "MaxWait"}} {
		b, err := New(tc.cfg)
		require.Nil(t, b)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		testkit.RequireConfigError(t, err, "bulkhead", tc.field)
	}
	_, err := New(Config{Max: 0})
	require.EqualError(t, err, "bulkhead: invalid config: Max must be at least 1, got 0")
	b := mustNew(t, Config{Max: 3, Name: "db"})
	require.Equal(t, 3, b.Max())
	require.ErrorIs(t, b.SetMax(0), rampart.ErrInvalidConfig)
	testkit.RequireConfigError(t, b.SetMax(0), "bulkhead", "Max")
	require.Equal(t, 3, b.Max())
}

func TestAcquireRelease(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(map[bool]string{false: "padded", true: "Compact"}[compact], func(t *testing.T) { testAcquireRelease(t, compact) })
	}
}

func testAcquireRelease(t *testing.T, compact bool) {
	var rejects []int64
	b := mustNew(t, Config{Max: 2, Compact: compact, OnRejected: func(inFlight int64, waited time.Duration) { rejects = append(rejects, inFlight, int64(waited)) }})
	require.NoError(t, b.Acquire())
	require.NoError(t, b.Acquire())
	require.Error(t, b.Acquire())
	s := b.Stats()
	require.Equal(t, Stats{Max: 2, InFlight: 2, PeakInFlight: 2, Rejected: 1}, s)
	require.Equal(t, []int64{2, 0}, rejects)
	b.Release()
	require.NoError(t, b.Acquire())
	b.Release()
	b.Release()
	require.Equal(t, int64(0), b.Stats().InFlight)
	require.Equal(t, int64(2), b.Stats().PeakInFlight)
}

func TestRejectedError(t *testing.T) {
	b := mustNew(t, Config{Max: 1, Name: "db"})
	require.NoError(t, b.Acquire())
	err := b.AcquireWait(context.Background())
	require.ErrorIs(t, err, ErrFull)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Same(t, b.RejectedError(), err)
	require.Equal(t, `bulkhead "db": full`, err.Error())
	called := false
	err = b.Do(context.Background(), func(context.Context) error { called = true; return nil })
	require.Same(t, b.RejectedError(), err)
	require.False(t, called)
	v, err := Call(context.Background(), b, func(context.Context) (int, error) { return 7, nil })
	require.Zero(t, v)
	require.ErrorIs(t, err, ErrFull)
	b.Release()
	require.Equal(t, uint64(3), b.Stats().Rejected)
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	b := mustNew(t, Config{Max: 2, Name: "db"})
	p, _ := testkit.Run(b.Release)
	msg, _ := p.(string)
	require.True(t, strings.Contains(msg, "Release without a matching Acquire"), msg)
	require.True(t, strings.Contains(msg, "db"), msg)
	// The count was restored: the limit is still 2, not 3.
	require.Equal(t, int64(0), b.Stats().InFlight)
	require.NoError(t, b.Acquire())
	require.NoError(t, b.Acquire())
	require.Error(t, b.Acquire())
	b.Release()
	b.Release()
}

func TestDoReleasesOnEveryPath(t *testing.T) {
	b := mustNew(t, Config{Max: 1})
	ctx := context.Background()
	boom := errors.New("boom")
	require.Same(t, boom, b.Do(ctx, func(context.Context) error { return boom }))
	require.Zero(t, b.Stats().InFlight)

	require.PanicsWithValue(t, "p", func() { _ = b.Do(ctx, func(context.Context) error { panic("p") }) })
	require.Zero(t, b.Stats().InFlight)

	_, goexited := testkit.Run(func() { _ = b.Do(ctx, func(context.Context) error { testkit.Goexit(); return nil }) })
	require.True(t, goexited)
	require.Zero(t, b.Stats().InFlight)

	v, err := Call(ctx, b, func(context.Context) (string, error) { return "ok", nil })
	require.NoError(t, err)
	require.Equal(t, "ok", v)
	_, err = Call(ctx, b, func(context.Context) (string, error) { return "", boom })
	require.Same(t, boom, err)
	require.PanicsWithValue(t, "p", func() {
		_, _ = Call(ctx, b, func(context.Context) (string, error) { panic("p") })
	})
	require.Zero(t, b.Stats().InFlight)
	require.Zero(t, b.Stats().Rejected)
}

func TestSetMax(t *testing.T) {
	b := mustNew(t, Config{Max: 3})
	for range 3 {
		require.NoError(t, b.Acquire())
	}
	require.NoError(t, b.SetMax(1)) // shrink: nobody is evicted
	require.Equal(t, int64(3), b.Stats().InFlight)
	require.Error(t, b.Acquire())
	b.Release()
	b.Release()
	require.Error(t, b.Acquire()) // 1 in flight, max 1
	b.Release()
	require.NoError(t, b.Acquire())
	require.NoError(t, b.SetMax(2)) // grow
	require.NoError(t, b.Acquire())
	require.Error(t, b.Acquire())
	b.Release()
	b.Release()
}

// TestUpdateKeepsPermitsInFlight: a smaller Max evicts nobody; new calls
// are refused until the in-flight count is below it, then admitted; a
// larger one admits at once.
func TestUpdateKeepsPermitsInFlight(t *testing.T) {
	b := mustNew(t, Config{Max: 5})
	for range 5 {
		require.NoError(t, b.Acquire())
	}
	c := b.Config()
	c.Max = 2
	require.NoError(t, b.Update(c))
	require.Equal(t, 2, b.Max())
	require.Equal(t, int64(5), b.Stats().InFlight)
	for range 3 {
		require.ErrorIs(t, b.Acquire(), ErrFull)
		b.Release()
	}
	require.ErrorIs(t, b.Acquire(), ErrFull) // 2 in flight, Max 2
	b.Release()
	require.NoError(t, b.Acquire())
	c.Max = 4
	require.NoError(t, b.Update(c))
	require.NoError(t, b.Acquire())
	require.NoError(t, b.Acquire())
	require.ErrorIs(t, b.Acquire(), ErrFull)
	for range 4 {
		b.Release()
	}
	s := b.Stats()
	require.Zero(t, s.InFlight)
	require.Equal(t, int64(5), s.PeakInFlight)
	require.Equal(t, uint64(5), s.Rejected)
}

// TestUpdateRefusesFixedFields: a change to a field fixed at construction
// is a ConfigError naming it, and changes nothing; the same values (the
// func values New was given, a nil Ticker for the default) are accepted.
func TestUpdateRefusesFixedFields(t *testing.T) {
	onRej := func(int64, time.Duration) {}
	onAdmit := func(time.Duration) {}
	tk := rampart.NewManualTicker(0)
	base := Config{Max: 4, MaxWait: time.Second, Name: "db", Ticker: tk, OnRejected: onRej, OnWaitAdmit: onAdmit}
	capture := 0
	for _, tc := range []struct {
		field  string
		change func(*Config)
	}{
		{"Name", func(c *Config) { c.Name = "other" }},
		{"Ticker", func(c *Config) { c.Ticker = rampart.NewManualTicker(0) }},
		{"Ticker", func(c *Config) { c.Ticker = nil }}, // the default, not tk
		{"Ticker", func(c *Config) { c.Ticker = testkit.FuncTicker(func() int64 { return 0 }) }},
		{"Compact", func(c *Config) { c.Compact = true }},
		{"OnRejected", func(c *Config) { c.OnRejected = nil }},
		{"OnRejected", func(c *Config) { c.OnRejected = func(int64, time.Duration) { capture++ } }},
		{"OnWaitAdmit", func(c *Config) { c.OnWaitAdmit = nil }},
		{"MaxWait", func(c *Config) { c.MaxWait = 0 }},
		{"Max", func(c *Config) { c.Max = 0 }},                                  // invalid, as New says
		{"MaxWait", func(c *Config) { c.MaxWait = -1 }},                         // invalid, as New says
		{"Ticker", func(c *Config) { c.Ticker = (*rampart.ManualTicker)(nil) }}, // invalid, as New says
	} {
		b := mustNew(t, base)
		c := base
		c.Max = 9 // a valid change that must not be applied beside the refused one
		tc.change(&c)
		err := b.Update(c)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, tc.field)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		require.Equal(t, tc.field, ce.Field, err.Error())
		require.Equal(t, 4, b.Max(), "a refused Update applied something: %v", err)
		require.Equal(t, time.Second, b.Config().MaxWait)
	}
	b := mustNew(t, base)
	c := base
	c.Max, c.MaxWait = 6, time.Minute
	require.NoError(t, b.Update(c))
	require.Equal(t, 6, b.Max())
	require.Equal(t, time.Minute, b.Config().MaxWait)
	// The default ticker, nil or filled in by Config, is the same clock.
	d := mustNew(t, Config{Max: 1})
	dc := d.Config()
	require.NotNil(t, dc.Ticker)
	dc.Max = 2
	require.NoError(t, d.Update(dc))
	require.NoError(t, d.Update(Config{Max: 3}))
	require.Equal(t, 3, d.Max())
}

// TestUpdateWithoutNameKeepsTheName: an empty Name in Update keeps the
// name New was given (a registry names the bulkheads it builds), and the
// rejection error still carries it.
func TestUpdateWithoutNameKeepsTheName(t *testing.T) {
	b := mustNew(t, Config{Max: 1, Name: "db"})
	require.NoError(t, b.Update(Config{Max: 2}))
	require.Equal(t, 2, b.Max())
	require.Equal(t, "db", b.Config().Name)
	require.NoError(t, b.Acquire())
	require.NoError(t, b.Acquire())
	err := b.Acquire()
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, "db", err.(*rampart.RejectedError).Name())
	b.Release()
	b.Release()
}

func TestListenerPanicRecovered(t *testing.T) {
	b := mustNew(t, Config{Max: 1, OnRejected: func(int64, time.Duration) { panic("listener") }})
	require.NoError(t, b.Acquire())
	require.Error(t, b.Acquire())
	require.Equal(t, uint64(1), b.Stats().ListenerPanics)
	b.Release()
}

// TestNoRejectionAtExactlyMax: with no more goroutines than Max, each holds
// at most one add at a time, so the count never reaches a spurious limit:
// no rejection may happen at all.
func TestNoRejectionAtExactlyMax(t *testing.T) {
	const max = 4
	n := 50000
	if israce.Enabled {
		n = 5000
	}
	b := mustNew(t, Config{Max: max})
	var wg sync.WaitGroup
	for range max {
		wg.Go(func() {
			for range n {
				if b.Acquire() != nil {
					t.Error("rejected with no more goroutines than Max")
					return
				}
				b.Release()
			}
		})
	}
	wg.Wait()
	require.Zero(t, b.Stats().Rejected)
}

// TestOverCountRate measures how often a rejection at the limit came from an
// add that overshot and was undone (the transient over-count of the
// add-then-undo pattern): Max 1, four goroutines racing for the permit and
// yielding while they hold it. It also checks that the limit held.
func TestOverCountRate(t *testing.T) {
	const max = 1
	n := 100000
	if israce.Enabled {
		n = 10000
	}
	b := mustNew(t, Config{Max: max})
	var wg sync.WaitGroup
	var cur, over atomic.Int64
	for range 4 {
		wg.Go(func() {
			for i := range n {
				if b.Acquire() == nil {
					if cur.Add(1) > max {
						over.Add(1)
					}
					if i%4 == 0 {
						runtime.Gosched()
					}
					cur.Add(-1)
					b.Release()
				}
			}
		})
	}
	wg.Wait()
	s := b.Stats()
	require.Zero(t, over.Load(), "more than Max calls ran at once")
	require.Zero(t, s.InFlight)
	calls := uint64(4 * n)
	t.Logf("GOMAXPROCS %d: calls %d, rejected %d (%.2f %%), decided by an overshooting add %d (%.3f %% of rejections, %.4f %% of calls)",
		runtime.GOMAXPROCS(0), calls, s.Rejected, 100*float64(s.Rejected)/float64(calls), s.Overshoots,
		100*float64(s.Overshoots)/math.Max(1, float64(s.Rejected)), 100*float64(s.Overshoots)/float64(calls))
}

// TestBulkheadBytes gates the heap bytes of one live bulkhead, both
// layouts: 176 B compact (the struct's 168 B in its size class), and a
// line of padding more by default (240 B on 64 B lines). With 4-byte
// pointers (386, arm) the struct is 152 B: 160 B compact, 224 B padded. A
// Name adds its rejection error; unnamed bulkheads share one.
func TestBulkheadBytes(t *testing.T) {
	size := int64(unsafe.Sizeof(Bulkhead{}))
	mk := func(c Config) func() any { return func() any { return mustNew(t, c) } }
	if unsafe.Sizeof(uintptr(0)) == 4 {
		require.Equal(t, 64, int(pad.LineSize))
		require.Equal(t, int64(152), size)
		testkit.WantBytes(t, "default", 224, mk(Config{Max: 10}))
		testkit.WantBytes(t, "Compact", 160, mk(Config{Max: 10, Compact: true}))
	} else {
		require.Equal(t, int64(168+pad.LineSize-64), size)
		padded := map[uintptr]int64{64: 240, 128: 384}[pad.LineSize] // 64 + 176 B; 128 + 240 B (size class 384)
		testkit.WantBytes(t, "default", padded, mk(Config{Max: 10}))
		testkit.WantBytes(t, "Compact", 176+int64(pad.LineSize)-64, mk(Config{Max: 10, Compact: true}))
	}
	require.Same(t, mustNew(t, Config{Max: 1}).RejectedError(), mustNew(t, Config{Max: 2}).RejectedError(), "unnamed bulkheads share their rejection error")
}

// TestHotWordsOnSeparateLines: inFlight (written by every admission and
// release) and rejected (by every rejection) are a cache line apart in both
// layouts, and in the padded one every line holding a byte of either lies
// inside the allocation: a line of padding before inFlight, and at least a
// line of the bulkhead's own words from rejected to its end.
func TestHotWordsOnSeparateLines(t *testing.T) {
	var b Bulkhead
	line := pad.LineSize
	require.Zero(t, unsafe.Offsetof(b.inFlight))
	require.GreaterOrEqual(t, unsafe.Offsetof(b.rejected)-unsafe.Offsetof(b.inFlight), line)
	require.GreaterOrEqual(t, unsafe.Sizeof(b)-unsafe.Offsetof(b.rejected), line)
	var p paddedBulkhead
	require.Equal(t, line, unsafe.Offsetof(p.b))
}
