package main

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/bulkhead"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/httpguard"
	"github.com/rampart-go/rampart/pipeline"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/retry"
	"github.com/rampart-go/rampart/timeout"
)

// errNoTime: the request's remaining budget cannot cover a database visit
// and what follows it, so the visit is not started (a shed, not a failure).
var errNoTime = errors.New("not enough time left for a database visit")

// guard is the protected mode, built from rampart's policies and composed
// by package pipeline, served through httpguard:
//
//   - entry (httpguard + pipeline): a fail-fast admission bulkhead (about
//     twice the concurrency Little's law predicts at the offered rate) and an
//     end-to-end deadline (timeout, deadline mode); a rejection is a fast 503
//     with Retry-After, a request still running at its deadline a 504;
//   - database (pipeline): bounded retries of transient errors sharing an A6
//     token-bucket budget, a circuit breaker, and a per-dependency bulkhead
//     as large as the connection pool that waits at most dbMaxWait for a
//     permit, so nobody queues on the pool itself; a visit that cannot end
//     within the request's remaining budget is not started. A database
//     rejection is a fast 503 with Retry-After too.
type guard struct {
	entry     *pipeline.Pipeline
	db        *pipeline.Pipeline
	admission *bulkhead.Bulkhead
	dbLimit   *bulkhead.Bulkhead
	breaker   *circuitbreaker.Breaker
	deadline  *timeout.Timeout
	retry     *retry.Policy
	budget    *retry.TokenBucket
	visitAvg  atomic.Int64 // moving average of a database visit (ns)
	visitBase int64        // the nominal visit (ns, -db-visit): what a refusal decays the average toward
}

// The guard's instances in the registry, by the names and groups an
// operator finds them under (the status page, /metrics, the registry's
// group operations): the entry tier "api" and the dependency "db". The
// pipelines count their calls by ending (CountStats: a few ns a call,
// per-P counters), which /metrics reports as rampart_pipeline_*.
const (
	groupAPI = "api"
	groupDB  = "db"
)

// newGuard builds the protected mode's policies in reg (create-or-get: reg
// must not hold a previous run's instances under these names).
func newGuard(o options, reg *registry.Registry) (*guard, error) {
	tk := rampart.DefaultTicker()
	admission, err := registry.Bulkhead(reg, "api-admission", bulkhead.Config{Name: "api", Max: o.admission()}, groupAPI)
	if err != nil {
		return nil, err
	}
	// Tick set: a watchdog of its own, stopped by close (no goroutine outlives the run).
	deadline, err := registry.Timeout(reg, "api-deadline", timeout.Config{Name: "api", Duration: o.deadline, Tick: time.Millisecond}, groupAPI)
	if err != nil {
		return nil, err
	}
	entry, err := registry.Pipeline(reg, "api", pipeline.Config{Name: "api", Ticker: tk, Bulkhead: admission, Timeout: deadline, CountStats: true}, groupAPI)
	if err != nil {
		deadline.Close()
		return nil, err
	}
	g := &guard{entry: entry, admission: admission, deadline: deadline}
	if err := g.buildDB(o, reg, tk); err != nil {
		g.close()
		return nil, err
	}
	g.visitAvg.Store(int64(o.dbVisit))
	g.visitBase = int64(o.dbVisit)
	return g, nil
}

// buildDB builds the policies in front of the database.
func (g *guard) buildDB(o options, reg *registry.Registry, tk rampart.Ticker) error {
	dbLimit, err := registry.Bulkhead(reg, "db-bulkhead", bulkhead.Config{Name: "db", Max: o.pool(), MaxWait: o.dbMaxWait, Ticker: tk}, groupDB)
	if err != nil {
		return err
	}
	breaker, err := registry.Breaker(reg, "db-breaker", circuitbreaker.Config{
		Name:                 "db",
		Ticker:               tk,
		WindowSize:           200,
		MinimumCalls:         50,
		FailureRateThreshold: 20,
		OpenDuration:         time.Second,
		MaxOpenDuration:      time.Second, // a fixed probe period, the demo's phases are seconds long
		HalfOpenProbes:       10,
		HalfOpenSuccesses:    8,
		Classify:             classifyDB,
	}, groupDB)
	if err != nil {
		return err
	}
	budget, err := retryBudget(reg)
	if err != nil {
		return err
	}
	rp, err := registry.Retry(reg, "db-retry", retry.Config{
		Name:        "db",
		MaxAttempts: 3,
		BaseDelay:   time.Millisecond,
		MaxDelay:    5 * time.Millisecond,
		ShouldRetry: isTransient,
		Budget:      budget,
		Ticker:      tk,
	}, groupDB)
	if err != nil {
		return err
	}
	db, err := registry.Pipeline(reg, "db", pipeline.Config{Name: "db", Ticker: tk, Retry: rp, Breaker: breaker, Bulkhead: dbLimit, CountStats: true}, groupDB)
	if err != nil {
		return err
	}
	g.db, g.dbLimit, g.breaker, g.retry, g.budget = db, dbLimit, breaker, rp, budget
	return nil
}

// classifyDB is the database breaker's classification: a visit not
// started for lack of time (errNoTime) asked nothing of the database.
// A package-level func: a configuration reload (-config) must hand the
// breaker the same func each time.
func classifyDB(err error) rampart.Result {
	if errors.Is(err, errNoTime) {
		return rampart.Ignored
	}
	return circuitbreaker.DefaultClassify(err)
}

// isTransient is the database retry's ShouldRetry.
func isTransient(err error) bool { return errors.Is(err, errTransient) }

// retryBudget returns the database retries' A6 token bucket registered in
// reg as "db-retry-budget", creating and registering it when absent (a
// -config run creates it before the configured retry that uses it).
func retryBudget(reg *registry.Registry) (*retry.TokenBucket, error) {
	if b, ok := registry.Lookup[*retry.TokenBucket](reg, "db-retry-budget"); ok {
		return b, nil
	}
	b, err := retry.NewTokenBucket(retry.TokenBucketConfig{MaxTokens: 100, TokenRatio: 0.1})
	if err != nil {
		return nil, err
	}
	if err := reg.Add("db-retry-budget", b, groupDB); err != nil {
		return nil, err
	}
	return b, nil
}

// handler wraps the service's protected handler in httpguard's middleware.
func (g *guard) handler(s *service) (http.Handler, error) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		write := r.Method == http.MethodPost
		var hint time.Duration
		err := s.work(r.Context(), write, func(ctx context.Context, after time.Duration) error {
			o := g.db.Try(ctx, func(ctx context.Context) error { return g.visit(ctx, s.db, after) })
			if o.Code == pipeline.Rejected || errors.Is(o.Err, errNoTime) {
				hint = o.RetryAfter
				return g.dbLimit.RejectedError()
			}
			return o.Err
		})
		switch {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, rampart.ErrRejected):
			writeShed(w, max(hint, time.Second))
		case errors.Is(err, context.DeadlineExceeded):
			http.Error(w, "deadline exceeded", http.StatusGatewayTimeout)
		default:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return httpguard.NewHandler(inner, httpguard.ServerConfig{
		Pipeline:      g.entry,
		TimeoutStatus: http.StatusGatewayTimeout,
		// The database's sheds are 503s written by the handler: they are
		// not failures of the entry.
		IsFailure: func(status int) bool { return status >= 500 && status != http.StatusServiceUnavailable },
	})
}

// visit is one database attempt inside the pipeline: it refuses to start a
// visit that cannot end within the request's remaining budget (deadline
// propagation: each stage gets what is left of the request's budget, as in
// the Google SRE book's "Addressing Cascading Failures" chapter), so a slow database turns into fast
// 503s rather than into requests that fail at their deadline after holding a
// connection.
//
// The estimate learns only from visits made, so each refusal also moves it
// a sixteenth of the way back toward the nominal visit: otherwise one
// stall (visits of hundreds of milliseconds while the process got no CPU)
// would leave an estimate that no budget covers, refuse every visit from
// then on, and never see a visit that brings it down again.
func (g *guard) visit(ctx context.Context, db *database, after time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl)-after < g.visitEstimate() {
		g.observeVisit(g.visitBase)
		return errNoTime
	}
	start := time.Now()
	err := db.query(ctx)
	g.observeVisit(int64(time.Since(start)))
	return err
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

// snapshot reads the policies' state into p, for the series.
func (g *guard) snapshot(p *point) {
	bs := g.breaker.Stats()
	p.BreakerState, p.BreakerFailureRate = bs.State.String(), bs.FailureRate
	as, ds := g.admission.Stats(), g.dbLimit.Stats()
	p.AdmissionInFlight, p.AdmissionMax = as.InFlight, as.Max
	p.DBInFlight, p.DBMax = ds.InFlight, ds.Max
}

// close stops the timeout's own watchdog.
func (g *guard) close() { g.deadline.Close() }

// writeShed answers a fast 503 with Retry-After (whole seconds, rounded up).
func writeShed(w http.ResponseWriter, retryAfter time.Duration) {
	secs := int((retryAfter + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	w.WriteHeader(http.StatusServiceUnavailable)
}
