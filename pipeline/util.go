package pipeline

import (
	"errors"
	"fmt"
	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/ticker"
	"strings"
)

// isRejection reports whether err is a rampart rejection. The policies'
// rejection errors are *rampart.RejectedError, so the common case is one
// type assertion; errors.Is handles anything else.
func isRejection(err error) bool {
	if _, ok := err.(*rampart.RejectedError); ok {
		return true
	}
	return errors.Is(err, rampart.ErrRejected)
}

// ticked is a policy's Config field name and its ticker.
type ticked struct {
	field string
	t     rampart.Ticker
}

// policyPackage is the package whose New builds the policy of a Config
// field, for the advice of a ticker mismatch.
var policyPackage = map[string]string{"Retry": "retry", "Breaker": "circuitbreaker",
	"RateLimit": "ratelimit", "Adaptive": "adaptive", "Timeout": "timeout", "Hedge": "hedge", "Shed": "shed"}

// sharedTicker returns the pipeline's clock: cfgTicker when set, else the
// policies' (rampart.DefaultTicker() when there are none), or a ConfigError
// when the policies and cfgTicker do not share one. The error names the
// side that is off, as httpguard does for a host breaker: the policies on
// rampart.DefaultTicker() (built without a Ticker) when the others share a
// non-default one, else the first policy whose ticker differs from
// Config.Ticker or, without it, from the non-default ticker most policies
// share. New only (at most seven policies: the quadratic count is 49
// comparisons).
func sharedTicker(cfgTicker rampart.Ticker, clocks []ticked) (rampart.Ticker, error) {
	if len(clocks) == 0 {
		return cfgTicker, nil
	}
	// A ticker == cannot compare (an uncomparable dynamic type) panics
	// when compared to itself: after this pass, == is safe.
	if _, ok := ticker.Equal(cfgTicker, cfgTicker); !ok {
		return nil, rampart.NewConfigError("pipeline", "Ticker", ticker.UncomparableReason, cfgTicker)
	}
	for _, c := range clocks {
		if _, ok := ticker.Equal(c.t, c.t); !ok {
			return nil, rampart.NewConfigError("pipeline", c.field, ticker.UncomparableReason, c.t)
		}
	}
	def := rampart.DefaultTicker()
	want, wantBy := cfgTicker, "the pipeline's Config.Ticker"
	if want == nil {
		// The policies' ticker: the non-default one most of them use (the
		// first of a tie), else the default.
		want, wantBy = def, clocks[0].field
		best := 0
		for i, c := range clocks {
			if c.t == def {
				continue
			}
			k := 0
			for _, d := range clocks[i:] {
				if d.t == c.t {
					k++
				}
			}
			if k > best {
				want, wantBy, best = c.t, c.field, k
			}
		}
	}
	var onDefault, others []string // the fields on the default (off want); on want
	var stranger ticked            // the first policy on another ticker, neither want nor the default
	for _, c := range clocks {
		switch {
		case c.t == want:
			others = append(others, c.field)
		case c.t == def:
			onDefault = append(onDefault, c.field)
		case stranger.t == nil:
			stranger = c
		}
	}
	const mixed = "readings of different tickers are not comparable"
	switch {
	case stranger.t != nil && cfgTicker == def && len(others) == 0 && allSame(clocks):
		// Config.Ticker is the default, every policy shares another.
		return nil, rampart.NewConfigError("pipeline", "Ticker",
			"is rampart.DefaultTicker(), but every policy uses %s (%s): leave Config.Ticker nil, or set it to the policies' Ticker",
			describeTicker(stranger.t), mixed)
	case stranger.t != nil:
		return nil, rampart.NewConfigError("pipeline", stranger.field,
			"uses a different Ticker (%s) than %s (%s; %s): build every policy with one Ticker",
			describeTicker(stranger.t), wantBy, describeTicker(want), mixed)
	case len(onDefault) > 0:
		also := ""
		switch len(onDefault) {
		case 1:
		case 2:
			also = ", as was " + onDefault[1]
		default:
			also = ", as were " + strings.Join(onDefault[1:], ", ")
		}
		on := "the other policies (" + strings.Join(others, ", ") + ") use " + describeTicker(want)
		if cfgTicker != nil {
			on = "the pipeline's Config.Ticker is " + describeTicker(want)
			if len(others) > 0 {
				on += ", as are the Tickers of " + strings.Join(others, ", ")
			}
		}
		news := make([]string, len(onDefault))
		for i, f := range onDefault {
			news[i] = policyPackage[f] + ".New"
		}
		return nil, rampart.NewConfigError("pipeline", onDefault[0],
			"was built without a Ticker (rampart.DefaultTicker())%s; %s: pass the same Ticker to %s (%s)",
			also, on, strings.Join(news, ", "), mixed)
	}
	return want, nil
}

// allSame reports whether every policy uses the same ticker.
func allSame(clocks []ticked) bool {
	for _, c := range clocks[1:] {
		if c.t != clocks[0].t {
			return false
		}
	}
	return true
}

// describeTicker names a ticker for a ConfigError: its exported type.
func describeTicker(t rampart.Ticker) string {
	switch t.(type) {
	case *rampart.ManualTicker:
		return "a *rampart.ManualTicker"
	case *rampart.NanoTicker:
		if t == rampart.DefaultTicker() {
			return "rampart.DefaultTicker()"
		}
		return "a *rampart.NanoTicker"
	case *rampart.CachedTicker:
		return "a *rampart.CachedTicker"
	}
	return fmt.Sprintf("a %T", t)
}
