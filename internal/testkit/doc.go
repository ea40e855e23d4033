// Package testkit is the shared test kit of the core module: the helpers
// that the packages' tests would otherwise each copy. It is imported by
// _test.go files only, never by library code.
//
// It holds allocation gates in the style of log/slog's tests ([WantAllocs]),
// a runner that reports whether a function panicked or called
// runtime.Goexit ([Run]), tickers for tests ([CountingTicker], [FuncTicker],
// [PanicTicker]), a retry/hedge budget that records its calls and answers as
// told ([Budget]), a goroutine leak check ([LeakCheck]) and the check of a
// configuration error ([RequireConfigError]).
//
// It does not import the root package (internal packages never do: the
// layering test enforces it), so the tests of every package, the root's and
// the internal ones included, may use it. Its tickers satisfy the root's
// Ticker (Now() int64) and its Budget satisfies rampart.Budget and
// rampart.Budget structurally.
package testkit
