package redislimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rampart-go/rampart"
)

// semHelperEnv selects a child-process mode of this test binary for the
// multi-process semaphore tests: "load" (TestSemaphoreProcessesNeverExceedMax)
// or "hold" (TestSemaphoreKilledHolderFreesItsPermits).
const semHelperEnv = "REDISLIMIT_SEMAPHORE_HELPER"

// heldLeases purges the expired leases of key and returns how many remain,
// in one script run on Redis' clock: the count the semaphore's own acquire
// script compares with Max.
var heldLeases = redis.NewScript(purgeExpired + `return redis.call('ZCARD', KEYS[1])`)

// liveLeases purges the expired leases of key and returns the others with
// their scores (expiries, µs of Redis' TIME).
var liveLeases = redis.NewScript(purgeExpired + `return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')`)

// redisMicros is the Redis server's TIME in microseconds.
func redisMicros(t testing.TB, c redis.UniversalClient) float64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	require.NoError(t, err)
	return float64(now.UnixMicro())
}

func countHeld(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := heldLeases.Run(context.Background(), c, []string{key}).Int64()
	require.NoError(t, err)
	return n
}

// waitFor polls cond every 5 ms until it holds or d passes, and reports
// whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-time.After(5 * time.Millisecond)
	}
}

// noLeaks returns a check that no goroutine started since it was called
// is left, to be deferred. Two of go-redis' own goroutines are not ours:
// its per-client maintenance loop, which ends when the client closes (in
// the test's cleanup, after the check), and the one that retries a failed
// dial after a second.
func noLeaks(t *testing.T) func() {
	opts := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")}
	return func() { goleak.VerifyNone(t, opts...) }
}

func semConfig(t testing.TB, c redis.UniversalClient, max int) SemaphoreConfig {
	return SemaphoreConfig{Client: c, Name: uniqueKey(t), Max: max}
}

func TestSemaphoreConfigErrors(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		field string
		cfg   SemaphoreConfig
	}{
		{"SemaphoreConfig.Client", SemaphoreConfig{Name: "n", Max: 1}},
		{"SemaphoreConfig.Name", SemaphoreConfig{Client: c, Max: 1}},
		{"SemaphoreConfig.Max", SemaphoreConfig{Client: c, Name: "n"}},
		{"SemaphoreConfig.Max", SemaphoreConfig{Client: c, Name: "n", Max: -3}},
		{"SemaphoreConfig.TTL", SemaphoreConfig{Client: c, Name: "n", Max: 1, TTL: -time.Second}},
		{"SemaphoreConfig.TTL", SemaphoreConfig{Client: c, Name: "n", Max: 1, TTL: time.Second, RenewEvery: time.Second}},
		{"SemaphoreConfig.TTL", SemaphoreConfig{Client: c, Name: "n", Max: 1, TTL: time.Second, RenewEvery: 2 * time.Second}},
		{"SemaphoreConfig.TTL", SemaphoreConfig{Client: c, Name: "n", Max: 1, RenewEvery: 3 * time.Second}}, // the default TTL
		{"SemaphoreConfig.RenewEvery", SemaphoreConfig{Client: c, Name: "n", Max: 1, RenewEvery: -1}},
		{"SemaphoreConfig.MaxWait", SemaphoreConfig{Client: c, Name: "n", Max: 1, MaxWait: -1}},
		{"SemaphoreConfig.PollMin", SemaphoreConfig{Client: c, Name: "n", Max: 1, PollMin: -1}},
		{"SemaphoreConfig.PollMax", SemaphoreConfig{Client: c, Name: "n", Max: 1, PollMin: time.Second, PollMax: time.Millisecond}},
		{"SemaphoreConfig.Timeout", SemaphoreConfig{Client: c, Name: "n", Max: 1, Timeout: -1}},
		{"SemaphoreConfig.Failure", SemaphoreConfig{Client: c, Name: "n", Max: 1, Failure: 7}},
		{"SemaphoreConfig.Replicas", SemaphoreConfig{Client: c, Name: "n", Max: 1, Replicas: -1}},
		{"SemaphoreConfig.BreakerFailures", SemaphoreConfig{Client: c, Name: "n", Max: 1, BreakerFailures: -1}},
		{"SemaphoreConfig.BreakerOpen", SemaphoreConfig{Client: c, Name: "n", Max: 1, BreakerOpen: -1}},
	} {
		_, err := NewSemaphore(tc.cfg)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		require.ErrorIs(t, err, rampart.ErrInvalidConfig)
		require.Equal(t, tc.field, ce.Field, "%v", err)
	}
	for _, tc := range []struct {
		field string
		cfg   ReplicasConfig
	}{
		{"ReplicasConfig.Client", ReplicasConfig{Name: "n"}},
		{"ReplicasConfig.Name", ReplicasConfig{Client: c}},
		{"ReplicasConfig.TTL", ReplicasConfig{Client: c, Name: "n", TTL: time.Second, Every: time.Second}},
		{"ReplicasConfig.TTL", ReplicasConfig{Client: c, Name: "n", TTL: -1}},
		{"ReplicasConfig.Every", ReplicasConfig{Client: c, Name: "n", Every: -1}},
		{"ReplicasConfig.Timeout", ReplicasConfig{Client: c, Name: "n", Timeout: -1}},
	} {
		_, err := NewReplicas(tc.cfg)
		var ce *rampart.ConfigError
		require.ErrorAs(t, err, &ce, "%+v", tc.cfg)
		require.Equal(t, tc.field, ce.Field, "%v", err)
	}
	s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: "ok", Max: 1})
	require.NoError(t, err)
	require.Equal(t, "rampart:sem:{ok}", s.Key())
	require.NoError(t, s.Close())
}

// TestSemaphoreAcquireRelease: Max permits are granted, the next is refused
// with the preallocated rejection error, a Release frees one, and a second
// Release of the same permit (or of the zero Permit) frees nothing.
func TestSemaphoreAcquireRelease(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	var rejectedHeld []int64
	cfg := semConfig(t, c, 3)
	cfg.OnRejected = func(held int64, waited time.Duration) { rejectedHeld = append(rejectedHeld, held) }
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	var ps []Permit
	for i := range 3 {
		p, err := s.Acquire(ctx)
		require.NoError(t, err, "permit %d", i)
		require.Equal(t, SourceRedis, p.Source())
		ps = append(ps, p)
	}
	require.EqualValues(t, 3, countHeld(t, c, s.Key()))
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, ErrSemaphoreFull)
	require.ErrorIs(t, err, rampart.ErrRejected)
	require.Same(t, s.RejectedError(), err)
	require.Equal(t, []int64{3}, rejectedHeld)

	s.Release(ps[0])
	s.Release(ps[0]) // released once
	s.Release(Permit{})
	other, err := NewSemaphore(semConfig(t, c, 3))
	require.NoError(t, err)
	require.PanicsWithValue(t, `redislimit: Release on semaphore "`+other.cfg.Name+`" of a Permit of semaphore "`+s.cfg.Name+`"`,
		func() { other.Release(ps[1]) })
	require.NoError(t, other.Close())
	require.EqualValues(t, 2, countHeld(t, c, s.Key()))
	p, err := s.Acquire(ctx)
	require.NoError(t, err)
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, ErrSemaphoreFull)
	for _, p := range append(ps[1:], p) {
		s.Release(p)
	}
	require.Zero(t, countHeld(t, c, s.Key()))
	st := s.Stats()
	require.Equal(t, SemaphoreStats{Max: 3, PeakInFlight: 3, Admitted: 4, Rejected: 2, RoundTrips: 10, Renewals: st.Renewals}, st)
}

// TestSemaphoreScriptCountsATokenOnce: the acquire script run twice with
// one token (go-redis retrying a call whose first attempt ran) holds one
// lease, granted both times, even when the set is then full.
func TestSemaphoreScriptCountsATokenOnce(t *testing.T) {
	c := newClient(t)
	key := "sem:{" + uniqueKey(t) + "}"
	ctx := context.Background()
	for range 2 {
		v, err := semAcquireScript.Run(ctx, c, []string{key}, "tok", "1", "1000000").Int64Slice()
		require.NoError(t, err)
		require.Equal(t, []int64{1, 1}, v)
	}
	v, err := semAcquireScript.Run(ctx, c, []string{key}, "other", "1", "1000000").Int64Slice()
	require.NoError(t, err)
	require.Equal(t, []int64{0, 1}, v)
	require.EqualValues(t, 1, countHeld(t, c, key))
	ttl, err := c.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.InDelta(t, float64(time.Second), float64(ttl), float64(100*time.Millisecond), "the key expires with its last lease")
}

// TestSemaphoreRenewsHeldLeasesInOneCallPerPeriod: leases held past several
// TTLs stay counted, renewed by one script call per period for all of them
// (counted by a hook on the client), and the renewal goroutine stops once
// none is held.
func TestSemaphoreRenewsHeldLeasesInOneCallPerPeriod(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	var renewCmds atomic.Int64
	c.AddHook(countScriptHook{sha: semRenewScript.Hash(), n: &renewCmds})
	cfg := semConfig(t, c, 100)
	// A renewal may be late by TTL - RenewEvery (450 ms, for a machine
	// shared with other work) before a lease is lost; Timeout is long so
	// that no renewal command fails uncounted.
	cfg.TTL, cfg.RenewEvery, cfg.Timeout = 500*time.Millisecond, 50*time.Millisecond, 5*time.Second
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	var ps []Permit
	start := time.Now() // before the first acquire starts the renewal goroutine
	for range 40 {
		p, err := s.Acquire(ctx)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	// Sample the count until the leases have outlived three TTLs.
	for time.Since(start) < 3*cfg.TTL {
		require.EqualValues(t, 40, countHeld(t, c, s.Key()))
		<-time.After(20 * time.Millisecond)
	}
	st := s.Stats()
	elapsed := time.Since(start)
	t.Logf("%d renewal calls for 40 leases in %v (%d script commands seen by the hook)", st.Renewals, elapsed, renewCmds.Load())
	require.Zero(t, st.Expired)
	require.Zero(t, st.RedisErrors)
	require.GreaterOrEqual(t, st.Renewals, uint64(elapsed/cfg.TTL)) // at least one per TTL
	require.LessOrEqual(t, st.Renewals, uint64(elapsed/cfg.RenewEvery)+1)
	for _, p := range ps {
		s.Release(p)
	}
	require.True(t, waitFor(time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.renewing
	}), "the renewal goroutine stops when no lease is held")
	// Counted once no renewal is in flight: one command per renewal, for all 40.
	require.Equal(t, int64(s.Stats().Renewals), renewCmds.Load())
}

// countScriptHook counts the EVALSHA commands of one script (one per run:
// the EVAL that follows a NOSCRIPT reply is not counted).
type countScriptHook struct {
	sha string
	n   *atomic.Int64
}

func (h countScriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "evalsha" && a[1] == h.sha {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSemaphoreExpiredLeaseIsNotRevived: a lease that expired in Redis
// (here: removed behind the holder's back, as a purge after a missed
// renewal does) is not put back by the next renewal, since another process
// may hold its place; the renewal counts it in Expired and tells
// OnExpired, and its Release makes no round trip.
func TestSemaphoreExpiredLeaseIsNotRevived(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	var expired atomic.Int64
	cfg := semConfig(t, c, 2)
	cfg.TTL, cfg.RenewEvery = time.Second, 20*time.Millisecond
	cfg.OnExpired = func(n int) { expired.Add(int64(n)) }
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	a, err := s.Acquire(ctx)
	require.NoError(t, err)
	b, err := s.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, c.ZRem(ctx, s.Key(), a.h.token).Err())
	other, err := NewSemaphore(cfg) // another process takes the freed place
	require.NoError(t, err)
	defer other.Close()
	o, err := other.Acquire(ctx)
	require.NoError(t, err)
	require.True(t, waitFor(2*time.Second, func() bool { return s.Stats().Expired == 1 }))
	require.EqualValues(t, 1, expired.Load())
	require.True(t, waitFor(time.Second, func() bool { return s.Stats().Renewals >= 3 }))
	require.EqualValues(t, 2, countHeld(t, c, s.Key()), "b and o, not a")
	score, err := c.ZScore(ctx, s.Key(), a.h.token).Result()
	require.ErrorIs(t, err, redis.Nil, "a was revived with score %v", score)
	trips := s.Stats().RoundTrips
	s.Release(a)
	require.Equal(t, trips, s.Stats().RoundTrips)
	s.Release(b)
	other.Release(o)
	require.Zero(t, countHeld(t, c, s.Key()))
}

// TestSemaphoreAcquireWait: a waiter gets the permit a local Release frees
// (woken at once, long before its next poll), MaxWait ends a wait with the
// rejection error, and a context that ends ends the wait with its error.
func TestSemaphoreAcquireWait(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	var waitAdmits atomic.Int64
	cfg := semConfig(t, c, 1)
	cfg.MaxWait = 300 * time.Millisecond
	cfg.PollMin, cfg.PollMax = time.Hour, time.Hour // only a local Release can wake the waiter in time
	cfg.OnWaitAdmit = func(time.Duration) { waitAdmits.Add(1) }
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	p, err := s.AcquireWait(ctx)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		q, err := s.AcquireWait(ctx)
		if err == nil {
			s.Release(q)
		}
		got <- err
	}()
	require.True(t, waitFor(time.Second, func() bool { return s.Stats().Waiting == 1 }))
	s.Release(p)
	require.NoError(t, <-got)
	require.EqualValues(t, 1, waitAdmits.Load())

	p, err = s.AcquireWait(ctx)
	require.NoError(t, err)
	start := time.Now()
	_, err = s.AcquireWait(ctx)
	require.ErrorIs(t, err, ErrSemaphoreFull)
	require.GreaterOrEqual(t, time.Since(start), cfg.MaxWait)

	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := s.AcquireWait(cctx)
		got <- err
	}()
	require.True(t, waitFor(time.Second, func() bool { return s.Stats().Waiting == 1 }))
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	s.Release(p)
	st := s.Stats()
	require.Equal(t, uint64(1), st.TimedOut)
	require.Equal(t, uint64(1), st.Canceled)
	require.Equal(t, uint64(2), st.Rejected)
	require.Equal(t, uint64(1), st.Waited)
}

// TestSemaphoreDo: Do returns fn's error unchanged and releases the permit
// on every path out of fn, a panic included; Call returns fn's value.
func TestSemaphoreDo(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	s, err := NewSemaphore(semConfig(t, c, 1))
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	mine := errors.New("mine")
	require.Same(t, mine, s.Do(ctx, func(context.Context) error { return mine }))
	func() {
		defer func() { require.Equal(t, "boom", recover()) }()
		_ = s.Do(ctx, func(context.Context) error { panic("boom") })
	}()
	v, err := Call(ctx, s, func(context.Context) (int, error) {
		require.EqualValues(t, 1, countHeld(t, c, s.Key()))
		_, err := s.Acquire(ctx) // full while fn runs
		require.ErrorIs(t, err, ErrSemaphoreFull)
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Zero(t, countHeld(t, c, s.Key()))
	require.Zero(t, s.Stats().InFlight)
}

// TestSemaphoreCloseRemovesLeases: Close removes the leases this process
// holds in one call and refuses later acquires; a Release after it makes
// no round trip.
func TestSemaphoreCloseRemovesLeases(t *testing.T) {
	defer noLeaks(t)()
	c := newClient(t)
	s, err := NewSemaphore(semConfig(t, c, 5))
	require.NoError(t, err)
	ctx := context.Background()
	var ps []Permit
	for range 3 {
		p, err := s.Acquire(ctx)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.Zero(t, countHeld(t, c, s.Key()))
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, ErrClosed)
	trips := s.Stats().RoundTrips
	for _, p := range ps {
		s.Release(p)
	}
	require.Equal(t, trips, s.Stats().RoundTrips)
	require.Zero(t, s.Stats().InFlight)
}

// TestSemaphoreProcessesNeverExceedMax: 8 processes (this test binary
// re-executed) of 64 goroutines each wait for permits of one semaphore of
// Max 16. Each holder increments a shared counter in Redis after its
// acquire and decrements it before its release: the counter, read by every
// process, never exceeds Max, nor do the leases sampled from Redis by this
// process, and under this load the budget is reached.
func TestSemaphoreProcessesNeverExceedMax(t *testing.T) {
	if os.Getenv(semHelperEnv) == "load" {
		runSemaphoreLoad(t)
		return
	}
	const procs, max = 8, 16
	c := newClient(t)
	name := uniqueKey(t)
	until := time.Now().Add(3 * time.Second) // leaves time for the processes to start
	outs := make([][]byte, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSemaphoreProcessesNeverExceedMax$")
			cmd.Env = append(os.Environ(), semHelperEnv+"=load", "REDIS_ADDR="+redisAddr, "SEM_NAME="+name,
				"SEM_MAX="+strconv.Itoa(max), "SEM_UNTIL="+strconv.FormatInt(until.UnixNano(), 10))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("process %d: %v\n%s", i, err, out)
			}
			outs[i] = out
		})
	}
	key := "rampart:sem:{" + name + "}"
	var peak, samples int64
	for time.Now().Before(until) {
		n := countHeld(t, c, key)
		require.LessOrEqual(t, n, int64(max), "leases held in redis")
		peak = maxInt(peak, n)
		samples++
		<-time.After(2 * time.Millisecond)
	}
	wg.Wait()
	var admitted, counterPeak int64
	var perProcess []int64
	for i, o := range outs {
		for _, line := range splitLines(string(o)) {
			if v, ok := parseField(line, "admitted="); ok {
				admitted += v // not necessarily in every process: waiters are not served in order
				perProcess = append(perProcess, v)
			}
			if v, ok := parseField(line, "counter_peak="); ok {
				require.LessOrEqual(t, v, int64(max), "process %d saw the holders' counter at %d", i, v)
				counterPeak = maxInt(counterPeak, v)
			}
			if v, ok := parseField(line, "local_peak="); ok {
				require.LessOrEqual(t, v, int64(max), "process %d", i)
			}
			if v, ok := parseField(line, "expired="); ok {
				require.Zero(t, v, "process %d lost leases", i)
			}
		}
	}
	t.Logf("%d admissions %v; peak %d leases in %d samples from redis, holders' counter peak %d", admitted, perProcess, peak, samples, counterPeak)
	require.Equal(t, int64(max), peak, "the budget is reached under load")
	// Every process closed its semaphore, which removed its leases; an
	// acquire its deadline abandoned mid-call gives its late grant back
	// from a goroutine the process may exit before, and then that lease
	// expires within the TTL.
	require.True(t, waitFor(3*time.Second, func() bool { return countHeld(t, c, key) == 0 }))
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// runSemaphoreLoad is one process of TestSemaphoreProcessesNeverExceedMax.
func runSemaphoreLoad(t *testing.T) {
	redisAddr = os.Getenv("REDIS_ADDR")
	max, _ := strconv.Atoi(os.Getenv("SEM_MAX"))
	untilNs, _ := strconv.ParseInt(os.Getenv("SEM_UNTIL"), 10, 64)
	until := time.Unix(0, untilNs)
	c := newClient(t)
	s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: os.Getenv("SEM_NAME"), Max: max,
		TTL: 2 * time.Second, RenewEvery: 500 * time.Millisecond, Timeout: 5 * time.Second, Failure: FailClosed,
		MaxWait: time.Duration(1<<63 - 1), PollMin: 5 * time.Millisecond, PollMax: 100 * time.Millisecond})
	require.NoError(t, err)
	counter := s.Key() + ":holders"
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	var admitted, counterPeak, localPeak atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				p, err := s.AcquireWait(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				admitted.Add(1)
				v, err := c.Incr(context.Background(), counter).Result()
				if err != nil {
					t.Error(err)
				}
				for old := counterPeak.Load(); v > old && !counterPeak.CompareAndSwap(old, v); old = counterPeak.Load() {
				}
				if n := s.Stats().InFlight; n > localPeak.Load() {
					localPeak.Store(n) // a sample; racy stores only lower it
				}
				if err := c.Decr(context.Background(), counter).Err(); err != nil {
					t.Error(err)
				}
				s.Release(p)
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Close())
	fmt.Printf("admitted=%d\ncounter_peak=%d\nlocal_peak=%d\nexpired=%d\n",
		admitted.Load(), counterPeak.Load(), localPeak.Load(), s.Stats().Expired)
}

// TestSemaphoreKilledHolderFreesItsPermits: a process holding 5 permits is
// killed with SIGKILL; its leases, renewed until then, return within TTL +
// one renewal period of the kill, and this process's 3 leases stay held.
func TestSemaphoreKilledHolderFreesItsPermits(t *testing.T) {
	// A renewal may be late by TTL - RenewEvery before a lease is lost:
	// 1.75 s, for a machine shared with other work.
	const ttl, renew = 2 * time.Second, 250 * time.Millisecond
	if os.Getenv(semHelperEnv) == "hold" {
		runSemaphoreHold(t, ttl, renew)
		return
	}
	defer noLeaks(t)()
	c := newClient(t)
	name := uniqueKey(t)
	s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: name, Max: 10, TTL: ttl, RenewEvery: renew, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	var mine []Permit
	for range 3 {
		p, err := s.Acquire(ctx)
		require.NoError(t, err)
		mine = append(mine, p)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSemaphoreKilledHolderFreesItsPermits$")
	cmd.Env = append(os.Environ(), semHelperEnv+"=hold", "REDIS_ADDR="+redisAddr, "SEM_NAME="+name)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe() // never written: the child holds its permits until killed (or until this process exits)
	require.NoError(t, err)
	defer stdin.Close()
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "held\n", line)
	// The child's leases are renewed: they outlive a TTL.
	start := time.Now()
	for time.Since(start) < ttl+2*renew {
		require.EqualValues(t, 8, countHeld(t, c, s.Key()))
		<-time.After(10 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	killed := time.Now()
	killedAt := redisMicros(t, c)
	// The killed process's leases return when Redis' clock passes their
	// expiry, their score: the latest score seen before they are gone is
	// the moment they returned, on the clock that decides it (a poll's
	// own delay on a loaded machine is not counted).
	mineTok := map[string]bool{}
	for _, p := range mine {
		mineTok[p.h.token] = true
	}
	var returnedAt float64
	require.True(t, waitFor(ttl+renew+5*time.Second, func() bool {
		zs, err := liveLeases.Run(ctx, c, []string{s.Key()}).Slice()
		require.NoError(t, err)
		others := 0
		for i := 0; i+1 < len(zs); i += 2 {
			if !mineTok[zs[i].(string)] {
				others++
				score, err := strconv.ParseFloat(zs[i+1].(string), 64)
				require.NoError(t, err)
				returnedAt = max(returnedAt, score)
			}
		}
		return others == 0 && len(zs) == 2*len(mine)
	}))
	after := time.Duration(returnedAt-killedAt) * time.Microsecond
	t.Logf("the killed process's 5 permits returned %v after the kill on Redis' clock (%v here; TTL %v, renewal period %v)",
		after, time.Since(killed), ttl, renew)
	require.LessOrEqual(t, after, ttl+renew)
	require.EqualValues(t, 3, countHeld(t, c, s.Key()))
	for _, p := range mine {
		_, err := c.ZScore(ctx, s.Key(), p.h.token).Result()
		require.NoError(t, err, "this process's lease is untouched")
	}
	require.Zero(t, s.Stats().Expired)
	for _, p := range mine {
		s.Release(p)
	}
	require.Zero(t, countHeld(t, c, s.Key()))
}

// runSemaphoreHold is the process TestSemaphoreKilledHolderFreesItsPermits
// kills: it takes 5 permits, says so, and holds them until killed.
func runSemaphoreHold(t *testing.T, ttl, renew time.Duration) {
	redisAddr = os.Getenv("REDIS_ADDR")
	s, err := NewSemaphore(SemaphoreConfig{Client: newClient(t), Name: os.Getenv("SEM_NAME"), Max: 10,
		TTL: ttl, RenewEvery: renew, Timeout: 5 * time.Second})
	require.NoError(t, err)
	for range 5 {
		_, err := s.Acquire(context.Background())
		require.NoError(t, err)
	}
	os.Stdout.WriteString("held\n")
	io.Copy(io.Discard, os.Stdin) // killed before the parent closes it
}

// TestSemaphoreRedisHung: with the semaphore's Redis stopped (SIGSTOP, as a
// stalled or partitioned server behaves), every acquire returns within the
// timeout, whatever the client's own options, and follows the Failure mode;
// once the breaker has opened no acquire reaches the network. After SIGCONT
// the acquires that timed out, which the server then runs, are removed by
// the next renewal, and the count is exact again: Max permits, then a
// rejection.
func TestSemaphoreRedisHung(t *testing.T) {
	for _, mode := range []FailureMode{FailOpen, FailClosed, FailLocal} {
		t.Run([]string{"FailOpen", "FailClosed", "FailLocal"}[mode], func(t *testing.T) {
			defer noLeaks(t)()
			addr, srv, err := startRedisProcess()
			require.NoError(t, err)
			defer func() { srv.Process.Kill(); srv.Wait() }()
			c := redis.NewClient(&redis.Options{Addr: addr}) // default options: socket reads ignore ctx
			defer c.Close()
			var acquires atomic.Int64
			c.AddHook(countScriptHook{sha: semAcquireScript.Hash(), n: &acquires})
			clock := rampart.NewManualTicker(1)
			const timeout = 100 * time.Millisecond
			s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: "hung", Max: 4, Failure: mode, Replicas: 2,
				TTL: time.Minute, RenewEvery: 50 * time.Millisecond, // leases that time out are removed, not expired
				Timeout: timeout, BreakerFailures: 3, BreakerOpen: time.Second, Ticker: clock})
			require.NoError(t, err)
			defer s.Close()
			ctx := context.Background()
			p, err := s.Acquire(ctx) // dials and loads the script
			require.NoError(t, err)
			s.Release(p)

			require.NoError(t, srv.Process.Signal(syscall.SIGSTOP))
			defer srv.Process.Signal(syscall.SIGCONT) // runs before the kill above
			sent := acquires.Load()
			var ps []Permit
			for i := range 10 {
				start := time.Now()
				p, err := s.Acquire(ctx)
				elapsed := time.Since(start)
				require.Less(t, elapsed, 1500*time.Millisecond, "acquire %d blocked past the timeout", i) // the client's own read waits 3 s
				if i < 3 {
					t.Logf("acquire %d against the stopped server returned after %v", i, elapsed)
				}
				switch mode {
				case FailOpen:
					require.NoError(t, err)
				case FailClosed:
					require.ErrorIs(t, err, ErrUnavailable)
					require.ErrorIs(t, err, rampart.ErrRejected)
				case FailLocal:
					if i < 2 { // this replica's share: 4/2
						require.NoError(t, err)
					} else {
						require.ErrorIs(t, err, ErrSemaphoreFull)
					}
				}
				if err == nil {
					require.Equal(t, SourceFallback, p.Source())
					ps = append(ps, p)
				}
			}
			// Three consecutive timeouts opened the breaker; from then on
			// no acquire reaches the network. RedisErrors also counts the
			// renewal goroutine's failures (it removes the timed-out
			// acquires' leases, and goes past the open breaker, since a
			// renewal has no caller: TestSemaphoreRenewsPastAnOpenBreaker).
			st := s.Stats()
			require.True(t, st.BreakerOpen)
			require.GreaterOrEqual(t, st.RedisErrors, uint64(3))
			require.Equal(t, uint64(10), st.Fallbacks)
			require.LessOrEqual(t, acquires.Load()-sent, int64(3), "acquires sent to redis")
			for _, p := range ps {
				s.Release(p)
			}
			require.Zero(t, s.Stats().InFlight)

			require.NoError(t, srv.Process.Signal(syscall.SIGCONT))
			clock.Advance(time.Second) // the probe may now reach Redis: the renewal goroutine's or an acquire's
			admin := redis.NewClient(&redis.Options{Addr: addr})
			defer admin.Close()
			require.True(t, waitFor(5*time.Second, func() bool {
				return !s.Stats().BreakerOpen && countHeld(t, admin, s.Key()) == 0
			}), "the timed-out acquires' leases are removed: %d held, %+v", countHeld(t, admin, s.Key()), s.Stats())
			for i := range 4 {
				p, err := s.Acquire(ctx)
				require.NoError(t, err, "permit %d", i)
				require.Equal(t, SourceRedis, p.Source())
				defer s.Release(p)
			}
			_, err = s.Acquire(ctx)
			require.ErrorIs(t, err, ErrSemaphoreFull)
		})
	}
}

// TestReplicasCount: replicas of one group count each other from their
// heartbeats; one that closes leaves the count at the others' next
// heartbeat, one that stops heartbeating (its Redis connection gone) within
// TTL.
func TestReplicasCount(t *testing.T) {
	defer noLeaks(t)()
	name := uniqueKey(t)
	var rs []*Replicas
	for i := range 3 {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
		defer c.Close()
		r, err := NewReplicas(ReplicasConfig{Client: c, Name: name, TTL: time.Second, Every: 50 * time.Millisecond})
		require.NoError(t, err)
		require.Zero(t, r.Count())
		require.NoError(t, r.Start(context.Background()))
		require.Equal(t, i+1, r.Count(), "the first heartbeat's reply counts the replicas started before")
		defer r.Close()
		rs = append(rs, r)
	}
	require.Error(t, rs[0].Start(context.Background()))
	require.True(t, waitFor(2*time.Second, func() bool { return rs[0].Count() == 3 && rs[1].Count() == 3 && rs[2].Count() == 3 }))
	require.NoError(t, rs[2].Close())
	require.True(t, waitFor(2*time.Second, func() bool { return rs[0].Count() == 2 && rs[1].Count() == 2 }))
	require.ErrorIs(t, rs[2].Start(context.Background()), ErrClosed)

	rs[1].cfg.Client.Close() // heartbeats fail from now on: its member expires
	require.True(t, waitFor(3*time.Second, func() bool { return rs[0].Count() == 1 }))
	require.Equal(t, 2, rs[1].Count(), "a replica that cannot reach Redis keeps its last count")
	require.Positive(t, rs[1].Stats().RedisErrors)
}

// TestFailLocalSharesByLiveReplicas: with LiveReplicas, FailLocal divides
// the limit (and the semaphore's Max) by the live count, not by the static
// Replicas.
func TestFailLocalSharesByLiveReplicas(t *testing.T) {
	defer noLeaks(t)()
	name := uniqueKey(t)
	var live *Replicas
	for range 2 {
		r, err := NewReplicas(ReplicasConfig{Client: newClient(t), Name: name})
		require.NoError(t, err)
		require.NoError(t, r.Start(context.Background()))
		defer r.Close()
		live = r
	}
	require.Equal(t, 2, live.Count())
	dead := deadClient(t)
	for _, tc := range []struct {
		live           *Replicas
		events, leases int // burst 10 and Max 8 shared by 1 or 2 replicas
	}{{nil, 10, 8}, {live, 5, 4}} {
		l, err := New(Config{Client: dead, Limit: Limit{Rate: 1, Period: time.Hour, Burst: 10}, Failure: FailLocal,
			LiveReplicas: tc.live, Ticker: rampart.NewManualTicker(1)})
		require.NoError(t, err)
		admitted := 0
		for range 12 {
			d, err := l.Allow(context.Background(), "k")
			require.NoError(t, err)
			require.Equal(t, SourceFallback, d.Source)
			if d.Allowed {
				admitted++
			}
		}
		require.Equal(t, tc.events, admitted, "limiter, live %v", tc.live != nil)

		s, err := NewSemaphore(SemaphoreConfig{Client: dead, Name: "n", Max: 8, Failure: FailLocal,
			LiveReplicas: tc.live, Ticker: rampart.NewManualTicker(1)})
		require.NoError(t, err)
		held := 0
		for range 10 {
			if _, err := s.Acquire(context.Background()); err == nil {
				held++
			} else {
				require.ErrorIs(t, err, ErrSemaphoreFull)
			}
		}
		require.Equal(t, tc.leases, held, "semaphore, live %v", tc.live != nil)
		require.Error(t, s.Close(), "the timed-out acquires' tokens cannot be removed")
	}
}

// deadClient is a client of an address where nothing listens: every call
// fails at once.
func deadClient(t *testing.T) redis.UniversalClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSemaphoreRenewsPastAnOpenBreaker: a renewal that the breaker in front
// of Redis refuses (open, or its one half-open probe taken by an acquire)
// is sent anyway: no caller waits on it, and renewals skipped for TTL -
// RenewEvery lose every lease while its call runs, Redis healthy again, so
// that another process gets a permit past Max. One renewal against a
// stopped server opens the breaker for an hour; the lease outlives its TTL.
func TestSemaphoreRenewsPastAnOpenBreaker(t *testing.T) {
	addr, srv, err := startRedisProcess()
	require.NoError(t, err)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	// A renewal may be late by TTL - RenewEvery - Timeout (2.4 s) before
	// the lease is lost, for a loaded machine.
	const ttl, renew = 3 * time.Second, 100 * time.Millisecond
	cfg := SemaphoreConfig{Client: c, Name: "brk", Max: 1, TTL: ttl, RenewEvery: renew,
		Timeout: 500 * time.Millisecond, BreakerFailures: 1, BreakerOpen: time.Hour}
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	p, err := s.Acquire(ctx)
	require.NoError(t, err)
	require.Equal(t, SourceRedis, p.Source())
	defer s.Release(p)
	require.NoError(t, srv.Process.Signal(syscall.SIGSTOP))
	opened := waitFor(10*time.Second, func() bool { return s.Stats().BreakerOpen })
	require.NoError(t, srv.Process.Signal(syscall.SIGCONT))
	require.True(t, opened, "a renewal against the stopped server opens the breaker: %+v", s.Stats())
	// Renewals come at most one per RenewEvery: these span more than a TTL.
	base := s.Stats().Renewals
	require.True(t, waitFor(20*time.Second, func() bool { return s.Stats().Renewals >= base+uint64(ttl/renew)+2 }),
		"renewals while the breaker is open: %+v", s.Stats())
	st := s.Stats()
	require.True(t, st.BreakerOpen, "no acquire has probed: the renewals went past the breaker")
	require.Zero(t, st.Expired)
	require.EqualValues(t, 1, countHeld(t, c, s.Key()))
	other, err := NewSemaphore(cfg) // another process's
	require.NoError(t, err)
	defer other.Close()
	q, err := other.Acquire(ctx)
	if err == nil {
		other.Release(q)
	}
	require.ErrorIs(t, err, ErrSemaphoreFull, "p is held and renewed, yet another process got a second permit of Max 1")
}

// TestSemaphoreWaitAdmitGoexitReleasesThePermit: an OnWaitAdmit that calls
// runtime.Goexit ends AcquireWait after Redis granted the lease and before
// the caller got it: the permit is given back, not renewed for good with
// nobody to release it.
func TestSemaphoreWaitAdmitGoexitReleasesThePermit(t *testing.T) {
	c := newClient(t)
	cfg := semConfig(t, c, 1)
	cfg.MaxWait, cfg.Timeout = time.Minute, 10*time.Second // no fallback permit on a loaded machine
	cfg.OnWaitAdmit = func(time.Duration) { runtime.Goexit() }
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	p, err := s.Acquire(ctx)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.AcquireWait(ctx) // never returns: the listener ends the goroutine
	}()
	require.True(t, waitFor(5*time.Second, func() bool { return s.Stats().Waiting == 1 }))
	s.Release(p)
	<-done
	st := s.Stats()
	require.EqualValues(t, 1, st.Waited, "%+v", st)
	require.Zero(t, st.InFlight, "%+v", st)
	require.Zero(t, countHeld(t, c, s.Key()))
	q, err := s.Acquire(ctx)
	require.NoError(t, err)
	s.Release(q)
}

// failScriptHook fails the n-th call (1-based) of one script with
// errInjected.
type failScriptHook struct {
	sha  string
	n    int64
	seen *atomic.Int64
}

var errInjected = errors.New("injected")

func (h failScriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "evalsha" && a[1] == h.sha && h.seen.Add(1) == h.n {
			cmd.SetErr(errInjected)
			return errInjected
		}
		return next(ctx, cmd)
	}
}
func (h failScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSemaphoreRenewalSurvivesAListenerGoexit: an OnExpired or OnRedisError
// that calls runtime.Goexit ends the renewal goroutine; another takes its
// place, so the leases still held are renewed (they used to expire while
// their calls ran, no goroutine ever renewing again).
func TestSemaphoreRenewalSurvivesAListenerGoexit(t *testing.T) {
	for _, listener := range []string{"OnExpired", "OnRedisError"} {
		t.Run(listener, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redisAddr})
			defer c.Close()
			var seen atomic.Int64
			c.AddHook(failScriptHook{sha: semRenewScript.Hash(), n: 1, seen: &seen}) // the first renewal fails
			const ttl, renew = 2 * time.Second, 50 * time.Millisecond
			cfg := semConfig(t, c, 2)
			cfg.TTL, cfg.RenewEvery, cfg.Timeout = ttl, renew, 2*time.Second
			if listener == "OnExpired" {
				cfg.OnExpired = func(int) { runtime.Goexit() }
			} else {
				cfg.OnRedisError = func(error) { runtime.Goexit() }
			}
			s, err := NewSemaphore(cfg)
			require.NoError(t, err)
			defer s.Close()
			ctx := context.Background()
			a, err := s.Acquire(ctx)
			require.NoError(t, err)
			b, err := s.Acquire(ctx)
			require.NoError(t, err)
			defer s.Release(b)
			if listener == "OnExpired" {
				require.NoError(t, c.ZRem(ctx, s.Key(), a.h.token).Err()) // a expires behind its holder's back
				require.True(t, waitFor(10*time.Second, func() bool { return s.Stats().Expired == 1 }))
			} else {
				defer s.Release(a)
				require.True(t, waitFor(10*time.Second, func() bool { return s.Stats().RedisErrors == 1 }))
			}
			// Renewals come at most one per RenewEvery: these span more than a TTL.
			base := s.Stats().Renewals
			require.True(t, waitFor(20*time.Second, func() bool { return s.Stats().Renewals >= base+uint64(ttl/renew)+2 }),
				"renewals after the listener's Goexit: %+v", s.Stats())
			want := int64(2)
			if listener == "OnExpired" {
				want = 1
			}
			require.Equal(t, want, countHeld(t, c, s.Key()), "the leases held are renewed")
		})
	}
}

// panicScriptHook panics in the client on every call of one script past
// the first after calls.
type panicScriptHook struct {
	sha   string
	after int64
	seen  *atomic.Int64
}

func (h panicScriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h panicScriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "evalsha" && a[1] == h.sha && h.seen.Add(1) > h.after {
			panic("hook")
		}
		return next(ctx, cmd)
	}
}
func (h panicScriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// runInChild runs test (the calling test's name) again in a child process
// with semHelperEnv set to mode, and fails unless it passes there: a
// process crash (a panic on a goroutine of the package's own) fails the
// child only.
func runInChild(t *testing.T, test, mode string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), semHelperEnv+"="+mode, "REDIS_ADDR="+redisAddr)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child process failed:\n%.2000s", out)
	require.Contains(t, string(out), "--- PASS: "+test, "%.2000s", out)
}

// TestSemaphoreRenewalRecoversAClientPanic: a panic in the client (a hook)
// during a renewal, re-raised by within on the renewal goroutine where no
// caller takes it, is a failed renewal counted in RedisErrors, not a crash
// of the process.
func TestSemaphoreRenewalRecoversAClientPanic(t *testing.T) {
	if os.Getenv(semHelperEnv) != "renew-panic" {
		runInChild(t, "TestSemaphoreRenewalRecoversAClientPanic", "renew-panic")
		return
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	var seen atomic.Int64
	c.AddHook(panicScriptHook{sha: semRenewScript.Hash(), seen: &seen})
	var errs atomic.Int64
	s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: uniqueKey(t), Max: 1, TTL: time.Second, RenewEvery: 20 * time.Millisecond,
		Timeout: 10 * time.Second, OnRedisError: func(error) { errs.Add(1) }})
	require.NoError(t, err)
	defer s.Close()
	p, err := s.Acquire(context.Background())
	require.NoError(t, err)
	defer s.Release(p)
	require.True(t, waitFor(10*time.Second, func() bool { return s.Stats().RedisErrors >= 3 }), "%+v", s.Stats())
	require.Positive(t, errs.Load(), "OnRedisError hears of the panic")
	require.EqualValues(t, 1, s.Stats().InFlight)
}

// TestReplicasHeartbeatRecoversAClientPanic: a panic in the client (a
// hook) during a heartbeat of the loop is a failed heartbeat, counted in
// RedisErrors, not a crash of the process; the heartbeats go on.
func TestReplicasHeartbeatRecoversAClientPanic(t *testing.T) {
	if os.Getenv(semHelperEnv) != "heartbeat-panic" {
		runInChild(t, "TestReplicasHeartbeatRecoversAClientPanic", "heartbeat-panic")
		return
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	var seen atomic.Int64
	c.AddHook(panicScriptHook{sha: heartbeatScript.Hash(), after: 1, seen: &seen}) // Start's heartbeat passes
	r, err := NewReplicas(ReplicasConfig{Client: c, Name: uniqueKey(t), TTL: time.Second, Every: 20 * time.Millisecond,
		Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	require.True(t, waitFor(10*time.Second, func() bool { return r.Stats().RedisErrors >= 3 }), "%+v", r.Stats())
	require.Equal(t, 1, r.Count(), "the count Start's heartbeat read")
	require.NoError(t, r.Close())
}

// TestReplicasCloseAfterStartEndedEarly: a Start whose first heartbeat
// ended its goroutine (an OnRedisError that calls runtime.Goexit) or
// panicked (the client's hook, re-raised to Start's caller) still starts
// the heartbeat loop, and Close returns (it used to wait for good for a
// loop never started).
func TestReplicasCloseAfterStartEndedEarly(t *testing.T) {
	for _, end := range []string{"Goexit", "panic"} {
		t.Run(end, func(t *testing.T) {
			cfg := ReplicasConfig{Client: deadClient(t), Name: uniqueKey(t), Every: 20 * time.Millisecond}
			if end == "Goexit" {
				cfg.OnRedisError = func(error) { runtime.Goexit() }
			} else {
				c := redis.NewClient(&redis.Options{Addr: redisAddr})
				defer c.Close()
				var seen atomic.Int64
				c.AddHook(panicScriptHook{sha: heartbeatScript.Hash(), seen: &seen})
				cfg.Client = c
			}
			r, err := NewReplicas(cfg)
			require.NoError(t, err)
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				_ = r.Start(context.Background())
			}()
			p := <-done
			if end == "panic" {
				require.Equal(t, "hook", p)
			}
			closed := make(chan error, 1)
			go func() { closed <- r.Close() }()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("Close still waits 10 s on: for a heartbeat loop that was never started")
			}
		})
	}
}

// TestReplicasHeartbeatsSurviveAListenerGoexit: an OnRedisError that calls
// runtime.Goexit in the heartbeat loop ends that goroutine; another takes
// its place, so the replica goes on heartbeating (it used to stop for good,
// leave the others' count within TTL and keep its own count frozen).
func TestReplicasHeartbeatsSurviveAListenerGoexit(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	var seen atomic.Int64
	c.AddHook(failScriptHook{sha: heartbeatScript.Hash(), n: 2, seen: &seen}) // the loop's first heartbeat fails
	r, err := NewReplicas(ReplicasConfig{Client: c, Name: uniqueKey(t), TTL: time.Second, Every: 20 * time.Millisecond,
		Timeout: 10 * time.Second, OnRedisError: func(error) { runtime.Goexit() }})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	require.True(t, waitFor(10*time.Second, func() bool { return r.Stats().Heartbeats > 5 }), "%+v", r.Stats())
	require.EqualValues(t, 1, r.Stats().RedisErrors)
	require.NoError(t, r.Close())
}

// TestSemaphoreCloseEndsWaits: Close ends the waits under way with
// ErrClosed at once, not at their next poll or MaxWait.
func TestSemaphoreCloseEndsWaits(t *testing.T) {
	c := newClient(t)
	cfg := semConfig(t, c, 1)
	cfg.MaxWait, cfg.Timeout = time.Hour, 10*time.Second // no fallback permit on a loaded machine
	cfg.PollMin, cfg.PollMax = time.Hour, time.Hour
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() { _, err := s.AcquireWait(ctx); got <- err }()
	require.True(t, waitFor(5*time.Second, func() bool { return s.Stats().Waiting == 1 }))
	require.NoError(t, s.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("AcquireWait still waits 10 s after Close")
	}
	st := s.Stats()
	require.Zero(t, st.Waiting)
	require.Zero(t, st.Rejected, "ErrClosed is not a refusal")
}

// TestSemaphoreHugePollBounds: PollMin up to time.Duration(math.MaxInt64)
// (only a local Release wakes a waiter) is valid, and the backoff's
// doubling stops at PollMax without overflowing.
func TestSemaphoreHugePollBounds(t *testing.T) {
	require.NotPanics(t, func() { _ = jitter(math.MaxInt64) })
	require.Equal(t, time.Duration(math.MaxInt64), nextPoll(1<<62+1, math.MaxInt64))
	require.Equal(t, time.Duration(math.MaxInt64), nextPoll(math.MaxInt64, math.MaxInt64))
	require.Equal(t, 4*time.Millisecond, nextPoll(2*time.Millisecond, 50*time.Millisecond))
	require.Equal(t, 50*time.Millisecond, nextPoll(32*time.Millisecond, 50*time.Millisecond))
	c := newClient(t)
	cfg := semConfig(t, c, 1)
	cfg.MaxWait, cfg.Timeout = 50*time.Millisecond, 10*time.Second // no fallback permit on a loaded machine
	cfg.PollMin = time.Duration(math.MaxInt64)
	s, err := NewSemaphore(cfg)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	p, err := s.Acquire(ctx)
	require.NoError(t, err)
	defer s.Release(p)
	require.NotPanics(t, func() {
		_, err = s.AcquireWait(ctx)
		require.ErrorIs(t, err, ErrSemaphoreFull)
	})
}

// TestSemaphoreFallbacksCountedPerAcquire: Stats.Fallbacks counts the
// acquires the Failure mode decided, a waiting one once (by its last try),
// not each poll of a wait against a dead Redis.
func TestSemaphoreFallbacksCountedPerAcquire(t *testing.T) {
	s, err := NewSemaphore(SemaphoreConfig{Client: deadClient(t), Name: "fb", Max: 1, Failure: FailLocal,
		MaxWait: 200 * time.Millisecond, PollMin: time.Millisecond, PollMax: 2 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	p, err := s.Acquire(ctx) // the local share, 1
	require.NoError(t, err)
	defer s.Release(p)
	_, err = s.AcquireWait(ctx)
	require.ErrorIs(t, err, ErrSemaphoreFull)
	st := s.Stats()
	require.Equal(t, uint64(1), st.Admitted, "%+v", st)
	require.Equal(t, uint64(1), st.Rejected, "%+v", st)
	require.Equal(t, uint64(2), st.Fallbacks, "%+v", st)
}

// TestSemaphoreCallerDeadlineIsNotHeldAgainstRedis: an acquire whose
// caller's deadline comes before Timeout's returns its context's error at
// that deadline, and Redis is judged by Timeout alone, as the Limiter's
// calls are: a Redis slower than the caller's deadline but within Timeout
// is not a failure (its late grant is given back), and one that does not
// answer within Timeout opens the breaker, with no lease held (no renewal
// to judge it) and every caller short of time.
func TestSemaphoreCallerDeadlineIsNotHeldAgainstRedis(t *testing.T) {
	t.Run("slow", func(t *testing.T) {
		c, h := newGatedClient(t, semAcquireScript.Hash())
		s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: uniqueKey(t), Max: 1, Failure: FailClosed,
			Timeout: time.Minute, BreakerFailures: 1, Ticker: rampart.NewManualTicker(1)})
		require.NoError(t, err)
		defer s.Close()
		p, err := s.Acquire(context.Background()) // dials and loads the script
		require.NoError(t, err)
		s.Release(p)
		h.armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = s.Acquire(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		st := s.Stats()
		require.Zero(t, st.RedisErrors, "%+v", st)
		require.False(t, st.BreakerOpen)
		close(h.gate) // Redis answers within Timeout: the late grant is removed
		require.True(t, waitFor(10*time.Second, func() bool { return h.passed.Load() == 1 && countHeld(t, c, s.Key()) == 0 }),
			"%+v", s.Stats())
		p, err = s.Acquire(context.Background())
		require.NoError(t, err)
		require.Equal(t, SourceRedis, p.Source())
		s.Release(p)
		require.Zero(t, s.Stats().RedisErrors)
	})
	t.Run("hung", func(t *testing.T) {
		c, h := newGatedClient(t, semAcquireScript.Hash())
		s, err := NewSemaphore(SemaphoreConfig{Client: c, Name: uniqueKey(t), Max: 1, Failure: FailClosed,
			Timeout: 2 * time.Second, BreakerFailures: 1, TTL: time.Minute, Ticker: rampart.NewManualTicker(1)})
		require.NoError(t, err)
		defer s.Close()
		p, err := s.Acquire(context.Background())
		require.NoError(t, err)
		s.Release(p)
		h.armed.Store(true)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = s.Acquire(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.True(t, waitFor(10*time.Second, func() bool { return s.Stats().BreakerOpen }), "%+v", s.Stats())
		require.EqualValues(t, 1, s.Stats().RedisErrors)
		_, err = s.Acquire(context.Background())
		require.ErrorIs(t, err, ErrUnavailable, "the breaker is open: no round trip")
	})
}
