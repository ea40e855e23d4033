package rampartslog_test

import (
	"log/slog"
	"os"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/rampartslog"
	"github.com/rampart-go/rampart/ratelimit"
)

// noTime drops the time from the records, so that the output is stable.
func noTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// A breaker whose transitions are logged, and a rate limiter whose
// rejections are summarised once per interval, flushed by the first
// rejection after it.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime}))
	tk := rampart.NewManualTicker(0) // a test clock; leave Ticker zero in production
	summary, err := rampartslog.NewSummary(rampartslog.SummaryConfig{Logger: logger, Interval: time.Minute, Ticker: tk})
	if err != nil {
		panic(err)
	}
	on := summary.OnRejected()

	breaker, _ := circuitbreaker.New(circuitbreaker.Config{
		Name: "payments", Ticker: tk, Mode: circuitbreaker.Consecutive, ConsecutiveFailures: 1,
		OnStateChange: rampartslog.BreakerOnStateChange(logger, "payments"),
		OnRejected:    on.Breaker,
	})
	limiter, _ := ratelimit.New(ratelimit.Config{
		Name: "login", Ticker: tk, Rate: 1, Burst: 1, CountStats: true,
		OnRejected: on.RateLimit,
	})
	_ = summary.Add("payments", breaker)
	_ = summary.Add("login", limiter)

	p, _ := breaker.Acquire()
	breaker.Release(p, rampart.Failure) // trips: logged at once
	for range 3 {
		limiter.Allow() // 1 admitted, 2 rejected: counted, not logged
	}
	tk.Advance(time.Minute)
	limiter.Allow() // admitted (a token came back)
	limiter.Allow() // rejected, after the interval: the summary is flushed
	// Output:
	// level=INFO msg="rampart: circuit breaker state change" policy=circuitbreaker name=payments from=closed to=open
	// level=INFO msg="rampart: rejections" interval=1m0s ratelimit.rejected.login=3
}
