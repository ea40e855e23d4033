package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/retry"
)

// errTransient is a database error worth retrying (a dropped connection, a
// serialization failure): the simulated database returns it on a small
// share of visits.
var errTransient = errors.New("db: transient error")

// database simulates seed 003's database: a bounded connection pool, one
// visit per read-cache miss or write, each visit holding a connection for
// about visit (×slow during the slowdown phase). Waiting for a connection is
// part of the caller's latency, as with database/sql: the wait honours the
// caller's context.
type database struct {
	pool     chan struct{} // the connection pool: a send takes a connection (FIFO when full)
	visit    time.Duration
	slow     atomic.Int64 // current slowdown factor ×1000
	errRate  float64
	waiting  atomic.Int64 // callers waiting for a connection now
	visits   atomic.Int64 // visits started
	failures atomic.Int64 // transient errors returned
}

func newDatabase(pool int, visit time.Duration, errRate float64) *database {
	db := &database{pool: make(chan struct{}, pool), visit: visit, errRate: errRate}
	db.slow.Store(1000)
	return db
}

// setSlowdown multiplies every visit's duration by f from now on.
func (db *database) setSlowdown(f float64) { db.slow.Store(int64(f * 1000)) }

// query takes a connection (waiting as long as ctx allows), holds it for one
// visit, and gives it back.
func (db *database) query(ctx context.Context) error {
	db.waiting.Add(1)
	select {
	case db.pool <- struct{}{}:
		db.waiting.Add(-1)
	case <-ctx.Done():
		db.waiting.Add(-1)
		return ctx.Err()
	}
	defer func() { <-db.pool }()
	db.visits.Add(1)
	d := time.Duration(float64(db.visit) * float64(db.slow.Load()) / 1000 * (0.75 + 0.5*rand.Float64()))
	if err := sleep(ctx, d); err != nil {
		return err
	}
	if db.errRate > 0 && rand.Float64() < db.errRate {
		db.failures.Add(1)
		return errTransient
	}
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// service is the API of seed 003: 90 % reads, 10 % writes (the client
// chooses, GET or POST); 80 % of reads hit the cache; every miss and every
// write visits the database once; the rest of the time in the API is spent
// elsewhere (other services, serialization), about apiTime on average in all.
type service struct {
	db       *database
	other    time.Duration // mean time outside the database
	hitRate  float64
	inFlight atomic.Int64

	// protection, nil in the unprotected mode
	guard *guard
}

func newService(o options, db *database, g *guard) *service {
	// Mean time outside the database: apiTime minus the mean database time
	// per request (28 % of requests visit it at 90 % reads × 20 % misses +
	// 10 % writes).
	dbShare := 0.9*(1-o.hitRate) + 0.1
	other := o.apiTime - time.Duration(dbShare*float64(o.dbVisit))
	if other < 0 {
		other = 0
	}
	return &service{db: db, other: other, hitRate: o.hitRate, guard: g}
}

// work is the request's business logic, the same in both modes: half of the
// time outside the database, the database visit if any, the other half.
// query is how this mode reaches the database; after is the time the
// request still needs once the database has answered.
func (s *service) work(ctx context.Context, write bool, query func(ctx context.Context, after time.Duration) error) error {
	other := time.Duration(float64(s.other) * (0.5 + rand.Float64())) // uniform, mean s.other
	if err := sleep(ctx, other/2); err != nil {
		return err
	}
	after := other - other/2 // what remains to do once the database answered
	if write || rand.Float64() >= s.hitRate {
		if err := query(ctx, after); err != nil {
			return err
		}
	}
	return sleep(ctx, after)
}

// ServeHTTP answers 200 on success. Unprotected, every request is admitted
// and waits for the database as long as its client stays connected.
// Protected, see guard.serve.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	write := r.Method == http.MethodPost
	if s.guard != nil {
		s.guard.serve(w, r, s, write)
		return
	}
	query := func(ctx context.Context, _ time.Duration) error { return s.db.query(ctx) }
	if err := s.work(r.Context(), write, query); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// guard is the protected mode, built from rampart's policies:
//
//   - admission: a fail-fast bulkhead at the entry (about twice the
//     concurrency Little's law predicts at the offered rate);
//   - an end-to-end deadline on every request (context.WithTimeout);
//   - in front of the database, in the order package pipeline uses: bounded
//     retries sharing an A6 token-bucket budget, a circuit breaker, and a
//     per-dependency bulkhead as large as the connection pool that waits at
//     most dbMaxWait for a permit (so nobody queues on the pool itself);
//   - every rejection answers a fast 503 with Retry-After.
type guard struct {
	admission *bulkhead.Bulkhead
	dbLimit   *bulkhead.Bulkhead
	breaker   *circuitbreaker.Breaker
	retry     *retry.Policy
	ticker    rampart.Ticker
	deadline  time.Duration
	visitAvg  atomic.Int64 // moving average of a database visit (ns)
}

func newGuard(o options) (*guard, error) {
	tk := rampart.DefaultTicker()
	admission, err := bulkhead.New(bulkhead.Config{Name: "api", Max: o.admission()})
	if err != nil {
		return nil, err
	}
	dbLimit, err := bulkhead.New(bulkhead.Config{Name: "db", Max: o.pool(), MaxWait: o.dbMaxWait, Ticker: tk})
	if err != nil {
		return nil, err
	}
	breaker, err := circuitbreaker.New(circuitbreaker.Config{
		Name:                 "db",
		Ticker:               tk,
		WindowSize:           200,
		MinimumCalls:         50,
		FailureRateThreshold: 20,
		OpenDuration:         time.Second,
		HalfOpenProbes:       10,
		HalfOpenSuccesses:    8,
	})
	if err != nil {
		return nil, err
	}
	budget, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 100, TokenRatio: 0.1})
	if err != nil {
		return nil, err
	}
	rp, err := retry.New(retry.Config{
		Name:        "db",
		MaxAttempts: 3,
		BaseDelay:   time.Millisecond,
		MaxDelay:    5 * time.Millisecond,
		ShouldRetry: func(err error) bool { return errors.Is(err, errTransient) },
		Budget:      budget,
		Ticker:      tk,
	})
	if err != nil {
		return nil, err
	}
	g := &guard{admission: admission, dbLimit: dbLimit, breaker: breaker, retry: rp, ticker: tk, deadline: o.deadline}
	g.visitAvg.Store(int64(o.dbVisit))
	return g, nil
}

// serve runs one request under the guard.
func (g *guard) serve(w http.ResponseWriter, r *http.Request, s *service, write bool) {
	if !g.admission.TryEnter() {
		shed(w, time.Second)
		return
	}
	defer g.admission.Exit()
	ctx, cancel := context.WithTimeout(r.Context(), g.deadline)
	defer cancel()
	err := s.work(ctx, write, func(ctx context.Context, after time.Duration) error { return g.query(ctx, s.db, after) })
	switch {
	case err == nil:
		w.WriteHeader(http.StatusOK)
	case errors.Is(err, rampart.ErrRejected):
		retryAfter := time.Second
		if d := g.breaker.RemainingOpen(g.ticker.Now()); d > retryAfter {
			retryAfter = d
		}
		shed(w, retryAfter)
	case errors.Is(err, context.DeadlineExceeded):
		http.Error(w, "deadline exceeded", http.StatusGatewayTimeout)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// query is one database call through retry, breaker and bulkhead. after is
// the time the request still needs once the database has answered: a visit
// that cannot end in time for it is not started (seed 003: give each stage
// the remaining budget), so a slow database turns into fast 503s rather than
// into requests that fail at their deadline after holding a connection.
func (g *guard) query(ctx context.Context, db *database, after time.Duration) error {
	return g.retry.Do(ctx, func(ctx context.Context) error {
		start := g.ticker.Now()
		permit, err := g.breaker.Acquire(start)
		if err != nil {
			return err // open: shed, never retried
		}
		if err := g.dbLimit.Enter(ctx); err != nil {
			// Full for dbMaxWait, or the deadline came first: nothing was
			// started, so it is a shed, and it says nothing of the
			// database's health.
			g.breaker.RecordResult(permit, start, circuitbreaker.Ignored)
			return g.dbLimit.RejectedError()
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl)-after < g.visitEstimate() {
			g.dbLimit.Exit()
			g.breaker.RecordResult(permit, start, circuitbreaker.Ignored)
			return g.dbLimit.RejectedError()
		}
		visit := g.ticker.Now()
		err = db.query(ctx)
		g.dbLimit.Exit()
		end := g.ticker.Now()
		g.observeVisit(end - visit)
		g.breaker.Record(permit, end, err)
		return err
	})
}

// visitEstimate is a pessimistic guess of the next visit's duration: 1.3 ×
// the moving average of recent visits.
func (g *guard) visitEstimate() time.Duration {
	return time.Duration(g.visitAvg.Load() * 13 / 10)
}

// observeVisit folds one visit's duration into the moving average (weight
// 1/16). Concurrent updates may lose one another's sample: an estimate.
func (g *guard) observeVisit(d int64) {
	avg := g.visitAvg.Load()
	g.visitAvg.Store(avg + (d-avg)/16)
}

// shed answers a fast 503 with Retry-After (whole seconds, rounded up).
func shed(w http.ResponseWriter, retryAfter time.Duration) {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	w.WriteHeader(http.StatusServiceUnavailable)
}
