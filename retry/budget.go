package retry

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/internal/budgetcheck"
	"github.com/rampart-go/rampart/internal/pad"
)

// milli is the fixed-point scale of TokenBucket: 1 token = 1000 milli-tokens
// (A6 specifies up to three decimal places for the token ratio).
const milli = 1000

// TokenBucketConfig configures a [TokenBucket]. The zero value is valid.
type TokenBucketConfig struct {
	// MaxTokens is the bucket size; the bucket starts full and retries are
	// allowed while it holds more than MaxTokens/2. 0 means 10. Must be in
	// (0, 1e9]; it is kept to three decimal places.
	MaxTokens float64
	// TokenRatio is what a success adds back (a failure removes 1). 0 means
	// 0.1. Must be in (0, 1]; it is kept to three decimal places, as in A6.
	TokenRatio float64
	// Compact lays the instance out without cache-line padding: smaller
	// (32 B instead of 64 B on amd64, 128 B on arm64), for the many cold
	// instances (per-tenant, per-route keys) where goroutines do not
	// contend on one instance; the default pads the words that many
	// goroutines write on every call.
	Compact bool
}

// TokenBucket is the gRPC A6 retry-throttling budget: a token count that
// starts at MaxTokens, loses 1 per failed attempt and gains TokenRatio per
// success (clamped to [0, MaxTokens]); a retry is allowed only while the
// count is above MaxTokens/2. With the defaults (10, 0.1), a dependency that
// fails every call gets at most about 5 retries in all before retries stop,
// and they resume after about 10 successes per missing token; a share of
// failed attempts above TokenRatio / (1 + TokenRatio) (1/11 with the
// defaults) drains the bucket, and retries stop while it lasts (see
// "Choosing a budget" in the package doc).
//
// The count is one int64 of milli-tokens (fixed point, no float on the hot
// path), on one cache line with the three constants that every call reads
// beside it and nothing else: the default layout fills the line (a
// TokenBucket is 32 B; New allocates it in a block of one line, which the
// allocator places on a line boundary), so no other object shares the
// line that every caller of the dependency writes while the bucket is
// neither full nor empty (TokenBucketConfig.Compact drops the fill).
// AllowRetry is one load. OnSuccess and
// OnFailure are one load, plus one atomic add only when the add would change
// the count (a full bucket and a healthy dependency cost no write). Under
// concurrency the raw word may overshoot the bounds by a few adds for an
// instant; every reader clamps it, and the overshoot is corrected by the
// adder that caused it.
//
// The zero TokenBucket is not usable; create it with [NewTokenBucket].
type TokenBucket struct {
	// tokens is the count in milli-tokens, written by the successes and
	// failures of every caller of the dependency (not while the bucket is
	// full, nor empty); read-only constants share its line, which every
	// reader of tokens loads anyway (see paddedBucket).
	tokens atomic.Int64

	max   int64 // MaxTokens in milli-tokens
	half  int64 // retries allowed while tokens > half
	ratio int64 // TokenRatio in milli-tokens
}

// paddedBucket is the default layout of a TokenBucket: filled to a whole
// cache line, a size class whose blocks the allocator places at multiples
// of their size from a page (on a line boundary), so that the line of the
// token count holds nothing else: TestTokenBucketLayout.
type paddedBucket struct {
	TokenBucket
	_ [(pad.LineSize - unsafe.Sizeof(TokenBucket{})%pad.LineSize) % pad.LineSize]byte
}

// NewTokenBucket returns a full A6 token bucket, or a [*rampart.ConfigError]
// for an invalid configuration.
func NewTokenBucket(c TokenBucketConfig) (*TokenBucket, error) {
	maxTok, ratio := c.MaxTokens, c.TokenRatio
	if maxTok == 0 {
		maxTok = 10
	}
	if ratio == 0 {
		ratio = 0.1
	}
	if !(maxTok > 0 && maxTok <= 1e9) {
		return nil, rampart.NewConfigError("retry", "MaxTokens", "must be in (0, 1e9], got %v", c.MaxTokens)
	}
	if !(ratio > 0 && ratio <= 1) {
		return nil, rampart.NewConfigError("retry", "TokenRatio", "must be in (0, 1], got %v", c.TokenRatio)
	}
	var b *TokenBucket
	if c.Compact {
		b = new(TokenBucket)
	} else {
		b = &new(paddedBucket).TokenBucket // the block stays alive with b
	}
	b.max, b.ratio = int64(math.Round(maxTok*milli)), int64(math.Round(ratio*milli))
	if b.max < 1 || b.ratio < 1 {
		return nil, rampart.NewConfigError("retry", "TokenBucket", "MaxTokens and TokenRatio must be at least 0.001 (three decimals)")
	}
	b.half = b.max / 2
	b.tokens.Store(b.max)
	return b, nil
}

// OnRequest does nothing: A6 counts attempts' outcomes, not requests.
func (b *TokenBucket) OnRequest(now int64) {}

// OnSuccess adds TokenRatio tokens, up to MaxTokens. One load, and one add
// only when the bucket is not full.
func (b *TokenBucket) OnSuccess(now int64) {
	if b.tokens.Load() == b.max {
		return // full: the common healthy case writes nothing
	}
	b.addSlow(b.ratio)
}

// OnFailure removes one token, down to 0. One load, and one add only when
// the bucket is not empty.
func (b *TokenBucket) OnFailure(now int64) {
	if b.tokens.Load() == 0 {
		return // empty: a dependency that is down writes nothing
	}
	b.addSlow(-milli)
}

// addSlow is the slow path of OnSuccess (delta > 0) and OnFailure (delta <
// 0): one add, plus a CAS that undoes an overshoot of [0, max] caused by
// racing adders. A lost CAS leaves the correction to the readers' clamp and
// to the next adder.
func (b *TokenBucket) addSlow(delta int64) {
	v := b.tokens.Load()
	if c := min(max(v, 0), b.max); c != v {
		b.tokens.CompareAndSwap(v, c) // bring a raced overshoot back inside first
		v = c
	}
	if (delta > 0 && v >= b.max) || (delta < 0 && v <= 0) {
		return // already full (empty)
	}
	if v = b.tokens.Add(delta); v > b.max {
		b.tokens.CompareAndSwap(v, b.max)
	} else if v < 0 {
		b.tokens.CompareAndSwap(v, 0)
	}
}

// AllowRetry reports whether the bucket holds more than MaxTokens/2: one
// load. It does not take a token (A6 charges the retry's outcome, through
// OnFailure / OnSuccess).
func (b *TokenBucket) AllowRetry(now int64) bool {
	return min(b.tokens.Load(), b.max) > b.half
}

// Tokens returns the current token count.
func (b *TokenBucket) Tokens() float64 {
	return float64(min(max(b.tokens.Load(), 0), b.max)) / milli
}

// RatioBudgetConfig configures a [RatioBudget]. The zero value is valid.
type RatioBudgetConfig struct {
	// Ratio is the largest share of retries: retries ≤ Ratio × requests
	// (+ MinRetries) over the window. 0 means 0.1 (the SRE book's 10 %).
	// Must be in (0, 1]; it is kept to parts per million, so it must be at
	// least 0.5e-6 (one retry per two million requests).
	Ratio float64
	// Window is the length of the sliding window. 0 means 10 s.
	Window time.Duration
	// Buckets is the number of time buckets the window is made of (its
	// resolution). 0 means 10. Must be in [1, 1024].
	Buckets int
	// MinRetries is a number of retries allowed per window whatever the
	// ratio, so that a dependency with little traffic can still be retried.
	// 0 means none. Must not be negative.
	MinRetries int
}

// Words of a RatioBudget: two per time bucket, one counting the requests
// and one the granted retries, each updated by one CAS:
//
//	63                        24 23          0
//	+---------------------------+-------------+
//	|          lap tag          |    count    |
//	+---------------------------+-------------+
//
// A reading's epoch is now / bucket length; its bucket is epoch mod Buckets
// (the slot in the ring) and its lap epoch / Buckets, kept modulo 2^40 as
// the tag. The divisions round down and the modulo is in [0, Buckets), so
// readings below 0 (a ticker's epoch is arbitrary) slide the window as the
// others do, across 0 too. A word whose tag is not the expected lap's is
// stale and counts as empty (the first writer of a new lap replaces it); a
// word whose count is 0 has never been written, whatever its tag. A writer
// that finds a tag at most 2^39 laps ahead of its own drops its count: its
// reading is a window or more older than the bucket's (see add). Counts
// saturate at 2^24-1 per bucket.
//
// The tag covers the whole int64 clock, negative readings included (2^64
// ns), for windows of 35 ms (a lap over 2^25 ns) and more. With shorter
// windows a word left untouched for more than 2^39 windows (17 years with
// a 1 ms window) is taken for a newer one until its slot's lap comes round
// again, and one untouched for a multiple of 2^40 windows aliases (counts
// one stale bucket once).
const (
	rbCountBits = 24
	rbCountMax  = 1<<rbCountBits - 1
	rbTagBits   = 64 - rbCountBits
	rbTagMask   = 1<<rbTagBits - 1
	rbTagHalf   = 1 << (rbTagBits - 1) // tags ahead by less than this are newer
	ppm         = 1_000_000            // fixed-point scale of the ratio
)

// RatioBudget is the SRE book's retry budget: over a sliding window of time
// buckets, retries may be at most Ratio × requests (+ MinRetries). It counts
// requests (OnRequest) and granted retries (AllowRetry); outcomes are not
// needed (OnSuccess and OnFailure do nothing).
//
// Each bucket is two uint64 words (layout above), each updated by one CAS,
// so OnRequest costs one load and one CAS; AllowRetry reads the 2 × Buckets
// words and, when it grants, adds with one CAS. The check and the add are separate steps: under
// concurrency the ratio can be exceeded by at most the number of goroutines
// that check at the same instant.
//
// The zero RatioBudget is not usable; create it with [NewRatioBudget].
type RatioBudget struct {
	words    []atomic.Uint64 // the ring, requests and retries of bucket i at 2i and 2i+1 (its own allocation): written by every request
	bucketNs int64
	n        int64
	ratioPPM uint64
	minPPM   uint64
}

// NewRatioBudget returns an empty SRE retry budget, or a
// [*rampart.ConfigError] for an invalid configuration.
func NewRatioBudget(c RatioBudgetConfig) (*RatioBudget, error) {
	ratio, window, n := c.Ratio, c.Window, c.Buckets
	if ratio == 0 {
		ratio = 0.1
	}
	if window == 0 {
		window = 10 * time.Second
	}
	if n == 0 {
		n = 10
	}
	switch {
	case !(ratio > 0 && ratio <= 1):
		return nil, rampart.NewConfigError("retry", "Ratio", "must be in (0, 1], got %v", c.Ratio)
	case window < 0:
		return nil, rampart.NewConfigError("retry", "Window", "must not be negative, got %v", c.Window)
	case n < 1 || n > 1024:
		return nil, rampart.NewConfigError("retry", "Buckets", "must be in [1, 1024], got %d", c.Buckets)
	case int64(window) < int64(n):
		return nil, rampart.NewConfigError("retry", "Window", "must be at least Buckets nanoseconds, got %v", c.Window)
	case c.MinRetries < 0 || c.MinRetries > rbCountMax:
		return nil, rampart.NewConfigError("retry", "MinRetries", "must be in [0, %d], got %d", rbCountMax, c.MinRetries)
	case math.Round(ratio*ppm) < 1:
		return nil, rampart.NewConfigError("retry", "Ratio", "is below the budget's precision of one retry per million requests, got %v", c.Ratio)
	}
	return &RatioBudget{
		words:    make([]atomic.Uint64, 2*n),
		bucketNs: int64(window) / int64(n),
		n:        int64(n),
		ratioPPM: uint64(math.Round(ratio * ppm)),
		minPPM:   uint64(c.MinRetries) * ppm,
	}, nil
}

// epoch returns the bucket number of the reading now: now / bucket length,
// rounded down (towards -inf, so that readings below 0, which an arbitrary
// epoch allows, keep moving the window).
func (b *RatioBudget) epoch(now int64) int64 {
	e := now / b.bucketNs
	if now%b.bucketNs < 0 {
		e-- // one division: the quotient and the remainder come from it
	}
	return e
}

// slot returns the index of the requests word of epoch e's bucket (its
// retries word follows) and the epoch's lap tag: e mod Buckets in
// [0, Buckets) and e / Buckets rounded down, for negative epochs too (the
// lap's two's complement modulo 2^40 keeps the tags' order across 0).
func (b *RatioBudget) slot(e int64) (i int64, tag uint64) {
	i, lap := e%b.n, e/b.n
	if i < 0 {
		i, lap = i+b.n, lap-1
	}
	return 2 * i, uint64(lap) & rbTagMask
}

// add adds one to the word w (a requests or a retries word) for the lap
// tag: one load and one CAS (more only when another writer raced us).
func add(w *atomic.Uint64, tag uint64) {
	for {
		old := w.Load()
		c := old & rbCountMax
		if t := old >> rbCountBits; t != tag && c != 0 {
			if (t-tag)&rbTagMask < rbTagHalf {
				// The word holds a newer lap: this writer read the clock
				// a whole window or more ago. Its epoch is outside every
				// current window; writing would erase live counts.
				return
			}
			c = 0 // an older lap: stale
		}
		nw := tag<<rbCountBits | min(c+1, rbCountMax)
		if nw == old || w.CompareAndSwap(old, nw) {
			return
		}
	}
}

// Counts returns the requests and retries counted in the window that ends at
// now.
func (b *RatioBudget) Counts(now int64) (requests, retries uint64) {
	e := b.epoch(now)
	for k := range b.n {
		i, tag := b.slot(e - k)
		if w := b.words[i].Load(); w>>rbCountBits == tag {
			requests += w & rbCountMax
		}
		if w := b.words[i+1].Load(); w>>rbCountBits == tag {
			retries += w & rbCountMax
		}
	}
	return requests, retries
}

// OnRequest counts one request in the current bucket.
func (b *RatioBudget) OnRequest(now int64) {
	i, tag := b.slot(b.epoch(now))
	add(&b.words[i], tag)
}

// OnSuccess does nothing: the ratio counts requests and retries only.
func (b *RatioBudget) OnSuccess(now int64) {}

// OnFailure does nothing: the ratio counts requests and retries only.
func (b *RatioBudget) OnFailure(now int64) {}

// AllowRetry grants a retry when retries+1 ≤ Ratio × requests + MinRetries
// over the window, and counts the granted retry.
func (b *RatioBudget) AllowRetry(now int64) bool {
	req, ret := b.Counts(now)
	if (ret+1)*ppm > b.ratioPPM*req+b.minPPM {
		return false
	}
	i, tag := b.slot(b.epoch(now))
	add(&b.words[i+1], tag)
	return true
}

// budgetReason is New's check of a Config.Budget, shared with package
// hedge through internal/budgetcheck: a nil pointer of one of this
// package's budget types (a non-nil Budget whose first method call would
// panic in the middle of a call, as policies refuse a nil pointer of
// rampart's ticker types), or a zero value not built by its constructor (a
// zero TokenBucket never grants a retry; a zero RatioBudget divides by
// zero in its first call). It returns the ConfigError reason, "" when b is
// usable or is not one of this package's types (a user's type: a nil
// pointer may be a valid receiver there). qual prefixes the constructors'
// names ("retry." for package hedge). New only.
func budgetReason(b any, qual string) string {
	// The advice is built only for a refused budget: New's message strings
	// would otherwise be garbage counted against every instance.
	use := func() string { return "pass one made by " + qual + "NewTokenBucket or " + qual + "NewRatioBudget" }
	switch b := b.(type) {
	case *TokenBucket:
		switch {
		case b == nil:
			return "is a nil *retry.TokenBucket: leave it nil for no budget, or " + use()
		case b.max == 0: // NewTokenBucket sets at least 1 milli-token
			return "is a zero retry.TokenBucket, not built by " + qual + "NewTokenBucket (the zero value never grants a retry): " + use()
		}
	case *RatioBudget:
		switch {
		case b == nil:
			return "is a nil *retry.RatioBudget: leave it nil for no budget, or " + use()
		case b.n == 0: // NewRatioBudget sets at least 1 bucket
			return "is a zero retry.RatioBudget, not built by " + qual + "NewRatioBudget (the zero value has no window and would divide by zero): " + use()
		}
	}
	return ""
}

func init() { budgetcheck.Reason = budgetReason }

var (
	_ rampart.Budget = (*TokenBucket)(nil)
	_ rampart.Budget = (*RatioBudget)(nil)
)
