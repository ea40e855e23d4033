// Package rampartslog logs what rampart's policies do through log/slog,
// with listener funcs for the policies' Config fields and a summary of
// rejections, never a line per rejected call.
//
// # Transitions
//
// [BreakerOnStateChange] returns a listener for
// circuitbreaker.Config.OnStateChange that logs every transition at Info;
// [AdaptiveOnLimitChange] one for adaptive.Config.OnLimitChange that logs
// the limit at Info when it has moved by at least a given fraction since
// the last line it logged (an AIMD or Gradient2 limit moves by a step or
// two at every window, which would be a line per window);
// [ShedOnOverload] one for shed.Config.OnOverload that logs each time the
// shedder engages or releases, at Info. The shedder does not exist yet
// when its Config is built, so ShedOnOverload takes a func that returns it
// (or nil): with it, the engagement's record carries the trigger, the cap
// and the signals of the sample that engaged it.
//
//	var sh *shed.Shedder
//	sh, err := shed.New(shed.Config{
//		Name:       "cpu",
//		OnOverload: rampartslog.ShedOnOverload(logger, "cpu", func() *shed.Shedder { return sh }),
//	})
//
//	b, err := circuitbreaker.New(circuitbreaker.Config{
//		Name:          "payments",
//		OnStateChange: rampartslog.BreakerOnStateChange(logger, "payments"),
//	})
//
// # Rejections
//
// A [Summary] logs one record per interval with the rejections of every
// instance it knows, by policy and name, counted since the record before:
//
//	level=INFO msg="rampart: rejections" interval=1m0s circuitbreaker.rejected.payments=1200 ratelimit.rejected.login=37
//
// It counts nothing on the call path: at each flush it reads the
// instances' Stats and logs the differences from the last flush (so a
// rate limiter must count with ratelimit.Config.CountStats). The counts it
// summarises, by kind: the breaker's, rate limiters', bulkhead's, adaptive
// limiter's and throttler's Rejected; retry's BudgetRefused and GiveUps;
// the timeout's Timeouts and Rejected; the hedger's BudgetRefused; the
// shedder's Rejected (shed has no per-rejection listener: its rejections
// are read at the flushes that other listeners or a loop trigger).
//
// It starts no goroutine. A flush happens when [Summary.Flush] is called,
// or when [Summary.Poll] is called and Interval has passed (on the
// summary's Ticker) since the last one. Call Poll (or Flush) from a
// time.Ticker loop the application owns, from a periodic job it already
// runs, or from the policies' own rejection listeners ([Summary.OnRejected]
// returns such funcs): then a flush happens on the first rejection after
// the interval, and a quiet instance costs nothing. The listener's cost on
// a rejection is one clock read and one atomic load (and the flush itself,
// once per interval, on the goroutine that found it due); a rejection that
// no listener sees is still counted, by the next flush.
//
// Instances are given by name with [Summary.Add], or all the instances of
// a [Source] (a *registry.Registry satisfies it) with [Summary.AddSource].
// Two instances of one kind under one name (an added one and a Source's,
// or two Sources') are summed under that name, so that a record never
// holds a key twice; one instance under two names is counted once, under
// one of them. A Source's instances that have no summarised count (a type
// the summary does not know, a nil pointer of one it knows) are counted
// in the record's skipped attribute.
package rampartslog
