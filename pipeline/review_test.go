package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/retry"
)

// An attempt that fails with a retryable error after the caller's context
// was cancelled ends the call without granting a retry, as retry.Do does:
// the budget counts no retry, OnRetry is not called, Stats.Retries stays 0.
func TestCanceledAttemptGrantsNoRetry(t *testing.T) {
	tk := rampart.NewManualTicker(0)
	budget, err := retry.NewRatioBudget(retry.RatioBudgetConfig{MinRetries: 10})
	require.NoError(t, err)
	var onRetry int
	rt, err := retry.New(retry.Config{Ticker: tk, Budget: budget, BaseDelay: time.Millisecond,
		OnRetry: func(int, time.Duration, error) { onRetry++ }})
	require.NoError(t, err)
	p, err := pipeline.New(pipeline.Config{Ticker: tk, Retry: rt})
	require.NoError(t, err)

	errBoom := errors.New("boom")
	ctx, cancel := context.WithCancel(context.Background())
	o := p.Try(ctx, func(context.Context) error {
		cancel()
		return errBoom
	})
	require.Equal(t, pipeline.Canceled, o.Code)
	require.ErrorIs(t, o.Err, errBoom)
	require.ErrorIs(t, o.Err, context.Canceled)
	require.EqualValues(t, 1, o.Attempts)
	_, retries := budget.Counts(tk.Now())
	require.Zero(t, retries, "budget counted a retry that was never made")
	require.Zero(t, onRetry)
	require.Zero(t, rt.Stats().Retries)

	// retry.Do, for comparison, grants nothing either.
	ctx, cancel = context.WithCancel(context.Background())
	err = rt.Do(ctx, func(context.Context) error { cancel(); return errBoom })
	require.ErrorIs(t, err, context.Canceled)
	_, retries = budget.Counts(tk.Now())
	require.Zero(t, retries)
}
