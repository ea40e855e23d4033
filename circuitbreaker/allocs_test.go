package circuitbreaker

import (
	"context"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/israce"
	"github.com/rampart-go/rampart/internal/testkit"
	"github.com/stretchr/testify/require"
)

// TestAllocs: in every mode, admitting, recording (fast, slow, failed),
// Do, Call, rejecting (open, half-open full) and Stats allocate nothing.
func TestAllocs(t *testing.T) {
	if israce.Enabled {
		t.Skip("allocation counts differ under -race")
	}
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	fail := func(context.Context) error { return errBoom }
	gate := func(name string, f func()) {
		t.Helper()
		testkit.WantAllocs(t, name, 0, f)
	}
	for _, mode := range []Mode{CountWindow, TimeWindow, Consecutive} {
		tk := rampart.NewManualTicker(0)
		b, err := New(Config{Mode: mode, Ticker: tk, WindowSize: 8, MinimumCalls: 8, FailureRateThreshold: 100,
			ConsecutiveFailures: 1 << 30, SlowCallDuration: time.Millisecond, SlowCallRateThreshold: 100,
			OnSuccess: func(time.Duration) {}, OnFailure: func(time.Duration) {}})
		if err != nil {
			t.Fatal(err)
		}
		gate(mode.String()+"/success", func() {
			p, err := b.AcquireAt(tk.Now())
			if err != nil {
				t.Fatal(err)
			}
			b.ReleaseAt(p, tk.Now(), b.Classify(nil))
		})
		gate(mode.String()+"/slow-success", func() {
			p, _ := b.AcquireAt(tk.Now())
			b.ReleaseAt(p, tk.Advance(2*time.Millisecond), b.Classify(nil))
		})
		gate(mode.String()+"/failure", func() {
			p, _ := b.AcquireAt(tk.Now())
			b.ReleaseAt(p, tk.Now(), b.Classify(errBoom))
		})
		gate(mode.String()+"/do-success", func() { _ = b.Do(ctx, ok) })
		gate(mode.String()+"/do-failure", func() { _ = b.Do(ctx, fail) })
		gate(mode.String()+"/call", func() { _, _ = Call(ctx, b, func(context.Context) (int, error) { return 1, nil }) })
		b.TransitionTo(Open)
		gate(mode.String()+"/open-rejection", func() {
			if _, err := b.AcquireAt(tk.Now()); err == nil {
				t.Fatal("admitted")
			}
		})
		gate(mode.String()+"/do-rejection", func() {
			if b.Do(ctx, ok) == nil {
				t.Fatal("admitted")
			}
		})
		b.TransitionTo(HalfOpen)
		var ps []Permit
		for range 5 {
			p, err := b.AcquireAt(tk.Now())
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
		gate(mode.String()+"/half-open-rejection", func() {
			if _, err := b.AcquireAt(tk.Now()); err == nil {
				t.Fatal("admitted")
			}
		})
		gate(mode.String()+"/stats", func() { _ = b.Stats() })
		_ = ps
	}
	// The default config, the benchmark's.
	b, _ := New(Config{})
	gate("default/do-success", func() { _ = b.Do(ctx, ok) })
	// CountStats: its success counts allocate nothing either.
	for _, compact := range []bool{false, true} {
		b, _ := New(Config{CountStats: true, Compact: compact})
		gate("CountStats/do-success", func() { _ = b.Do(ctx, ok) })
		gate("CountStats/call", func() { _, _ = Call(ctx, b, func(context.Context) (int, error) { return 1, nil }) })
		gate("CountStats/release", func() {
			p, _ := b.Acquire()
			b.Release(p, rampart.Success)
		})
		gate("CountStats/stats", func() { _ = b.Stats() })
	}
}

// TestInstanceBytesAllocs gates the heap bytes of one live breaker on
// amd64, in both layouts, at 1, 2 and 16 Ps: the Breaker (448 B: its
// fields, the time window's header included, then its hot line), a
// 100-call count window's slots (16 to a word: 7 words, 56 B, in the
// allocator's 64-byte class; 416 B when a slot was a word), a time
// window's 10 buckets (32 B each, packed in both layouts: 320 B; 688 B
// with the header allocated apart and the buckets a line apart), and a
// Name's two rejection errors (128 B) and their messages (32 and 64 B,
// and 16 B of quoted name). A breaker that never left Closed is the same
// at any GOMAXPROCS, and a default one, named or not, is under 1 KB; the
// default layout adds its per-P rejection counters at the first trip, one
// 64 B line per P after the first, up to 7. A breaker without a Name
// shares its rejection errors; on a ManualTicker it has no open timer.
// CountStats allocates its success counters at New: a 64 B line per P, up
// to 8 (the trip's rejection lines and one for P 0), one with Compact.
func TestInstanceBytesAllocs(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the figures are for amd64, not %s", runtime.GOARCH)
	}
	// The least of three measurements: now and then something else in the
	// process (the runtime, the test framework) allocates a few KiB during
	// one, which the floored average does not hide.
	want := func(name string, bytes int64, mk func() any) {
		t.Helper()
		got := min(testkit.Bytes(t, mk), testkit.Bytes(t, mk), testkit.Bytes(t, mk))
		if got != bytes {
			t.Errorf("GOMAXPROCS %d, %s: got %d bytes per instance, want %d", runtime.GOMAXPROCS(0), name, got, bytes)
		}
	}
	tk := rampart.NewManualTicker(0) // shared: not an instance's bytes
	mk := func(cfg Config, trip bool) func() any {
		cfg.Ticker = tk
		return func() any {
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if trip {
				b.TransitionTo(Open)
			}
			return b
		}
	}
	require.Equal(t, uintptr(448), unsafe.Sizeof(Breaker{}))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 16} {
		runtime.GOMAXPROCS(procs)
		lines := int64(64 * (min(procs, maxLines+1) - 1)) // the per-P counters of a tripped breaker
		want("default (100-call count window)", 448+64, mk(Config{}, false))
		want("default, named", 448+64+240, mk(Config{Name: "db"}, false))
		require.LessOrEqual(t, int64(448+64+240), int64(1024))
		want("default, tripped", 448+64+lines, mk(Config{}, true))
		want("Compact", 448+64, mk(Config{Compact: true}, false))
		want("Compact, named", 448+64+240, mk(Config{Name: "db", Compact: true}, false))
		want("Compact, tripped", 448+64, mk(Config{Compact: true}, true))
		want("1000-call count window", 448+512, mk(Config{WindowSize: 1000}, false))
		want("1000-call count window, Compact", 448+512, mk(Config{WindowSize: 1000, Compact: true}, false))
		want("time window", 448+320, mk(Config{Mode: TimeWindow}, false))
		want("time window, named", 448+320+240, mk(Config{Mode: TimeWindow, Name: "db"}, false))
		want("time window, Compact", 448+320, mk(Config{Mode: TimeWindow, Compact: true}, false))
		want("consecutive", 448, mk(Config{Mode: Consecutive}, false))
		want("consecutive, tripped", 448+lines, mk(Config{Mode: Consecutive}, true))
		want("consecutive, Compact", 448, mk(Config{Mode: Consecutive, Compact: true}, false))
		// CountStats: the per-P lines at New, one more for P 0's
		// successes (up to 8 in all), which a trip then reuses; Compact:
		// one line.
		counted := int64(64 * min(procs, maxLines+1))
		want("CountStats", 448+64+counted, mk(Config{CountStats: true}, false))
		want("CountStats, tripped", 448+64+counted, mk(Config{CountStats: true}, true))
		want("CountStats, Compact", 448+64+64, mk(Config{CountStats: true, Compact: true}, false))
	}
}

// TestTripAllocs: on a real-time NanoTicker, the first transition to Open
// builds the open timer and the per-P rejection counters (once, so that a
// breaker that never trips carries neither); every later trip allocates
// nothing.
func TestTripAllocs(t *testing.T) {
	b, err := New(Config{Ticker: rampart.NewNanoTicker(), OpenDuration: time.Hour})
	require.NoError(t, err)
	require.Nil(t, b.hint, "no timer before the first trip")
	require.True(t, b.TransitionTo(Open))
	require.NotNil(t, b.hint)
	testkit.WantAllocs(t, "later trips", 0, func() {
		b.TransitionTo(Closed)
		b.TransitionTo(Open)
	})
}
