package bench

import (
	"context"
	"errors"
	"testing"

	"github.com/rampart-go/rampart/chaos"
)

// BenchmarkChaos measures what a fault injector costs the calls it lets
// through: switched off (the cost of leaving it in production code),
// switched on with every rate 0, and with a rate set (the draws). No peer
// library injects faults; `direct` is the function called without an
// injector. Each case checks that it took the path it names.
func BenchmarkChaos(b *testing.B) {
	ctx := context.Background()
	calls := 0
	fn := func(context.Context) error { calls++; return nil }

	b.Run("Disabled/direct", func(b *testing.B) {
		b.ReportAllocs()
		calls = 0
		for b.Loop() {
			_ = fn(ctx)
		}
		sink.Add(int64(calls))
	})
	b.Run("Disabled/rampart", func(b *testing.B) {
		b.ReportAllocs()
		inj := newInjector(b, chaos.Config{ErrorRate: 1, Disabled: true})
		calls = 0
		for b.Loop() {
			_ = inj.Do(ctx, fn)
		}
		if s := inj.Stats(); s.Calls != 0 || calls == 0 {
			b.Fatalf("disabled: injector saw %d calls, fn ran %d times", s.Calls, calls)
		}
	})
	b.Run("NoFault/rampart", func(b *testing.B) {
		b.ReportAllocs()
		inj := newInjector(b, chaos.Config{})
		calls = 0
		for b.Loop() {
			_ = inj.Do(ctx, fn)
		}
		if s := inj.Stats(); s.Calls != uint64(calls) || s.Errored != 0 {
			b.Fatalf("no fault: injector saw %d calls, fn ran %d times, %d errors", s.Calls, calls, s.Errored)
		}
	})
	b.Run("Drawn/rampart", func(b *testing.B) {
		// ErrorRate 10 %: every call draws, one in ten returns the error.
		b.ReportAllocs()
		inj := newInjector(b, chaos.Config{ErrorRate: 0.1, Seed: 1})
		calls = 0
		errs := 0
		for b.Loop() {
			if err := inj.Do(ctx, fn); errors.Is(err, chaos.ErrInjected) {
				errs++
			}
		}
		if s := inj.Stats(); s.Errored != uint64(errs) || s.Calls != uint64(calls+errs) {
			b.Fatalf("drawn: stats %+v, fn ran %d times, %d errors", s, calls, errs)
		}
	})
}

func newInjector(b *testing.B, cfg chaos.Config) *chaos.Injector {
	b.Helper()
	inj, err := chaos.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return inj
}
