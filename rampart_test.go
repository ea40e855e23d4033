package rampart_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/testkit"
)

var errFull = errors.New("full")

func TestRejectedError(t *testing.T) {
	e := rampart.NewRejectedError("bulkhead", "db", errFull)
	if e.Error() != `bulkhead "db": full` {
		t.Fatalf("message %q", e.Error())
	}
	var err error = e
	if !errors.Is(err, errFull) || !errors.Is(err, rampart.ErrRejected) {
		t.Fatal("does not match its sentinels")
	}
	if errors.Is(err, rampart.ErrInvalidConfig) {
		t.Fatal("matches ErrInvalidConfig")
	}
	wrapped := fmt.Errorf("call failed: %w", err)
	var re *rampart.RejectedError
	if !errors.As(wrapped, &re) || re.Policy() != "bulkhead" || re.Name() != "db" || re.Reason() != errFull {
		t.Fatal("errors.As")
	}
	if rampart.NewRejectedError("bulkhead", "", errFull).Error() != "bulkhead: full" {
		t.Fatal("unnamed message")
	}
	if errors.Is(errFull, rampart.ErrRejected) {
		t.Fatal("a plain error matches ErrRejected")
	}
}

func TestRejectedErrorAllocs(t *testing.T) {
	e := rampart.NewRejectedError("bulkhead", "db", errFull)
	var err error
	testkit.WantAllocs(t, "errors.Is(RejectedError, ErrRejected)", 0, func() {
		err = e
		if !errors.Is(err, rampart.ErrRejected) {
			t.Fatal("no match")
		}
	})
}

func TestConfigError(t *testing.T) {
	err := error(rampart.NewConfigError("ratelimit", "Burst", "must be at least 1, got %d", 0))
	require.EqualError(t, err, "ratelimit: invalid config: Burst must be at least 1, got 0")
	require.ErrorIs(t, err, rampart.ErrInvalidConfig)
	require.NotErrorIs(t, err, rampart.ErrRejected)
}

func TestDefaultTickerShared(t *testing.T) {
	var wg sync.WaitGroup
	got := make([]rampart.Ticker, 8)
	for i := range got {
		wg.Go(func() { got[i] = rampart.DefaultTicker() })
	}
	wg.Wait()
	for _, tk := range got {
		if tk != got[0] {
			t.Fatal("DefaultTicker returned different clocks")
		}
	}
	a := got[0].Now()
	if b := got[0].Now(); b < a {
		t.Fatal("backwards")
	}
}

func TestTickersImplementInterface(t *testing.T) {
	c := rampart.NewCachedTicker(time.Millisecond)
	defer c.Close()
	for _, tk := range []rampart.Ticker{rampart.NewNanoTicker(), c, rampart.NewManualTicker(7)} {
		if tk.Now() < 0 {
			t.Fatal("negative reading")
		}
	}
}
