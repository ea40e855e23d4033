package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/rampart-go/rampart/chaos"
	"github.com/rampart-go/rampart/registry"
)

// errTransient is a database error worth retrying (a dropped connection, a
// serialization failure): the simulated database returns it on a small
// share of visits, injected by package chaos.
var errTransient = errors.New("db: transient error")

// database simulates the API's database: a bounded connection pool, one
// visit per read-cache miss or write, each visit holding a connection for
// about visit (×slow during the slowdown phase). Waiting for a connection is
// part of the caller's latency, as with database/sql: the wait honours the
// caller's context. A share errRate of the visits ends in errTransient,
// which a chaos.Injector decides (its Stats().Errored counts them).
type database struct {
	pool    chan struct{} // the connection pool: a send takes a connection (FIFO when full)
	visit   time.Duration
	slow    atomic.Int64 // current slowdown factor ×1000
	faults  *chaos.Injector
	waiting atomic.Int64 // callers waiting for a connection now
	visits  atomic.Int64 // visits started
}

// newDatabase builds the database; its fault injector is registered in reg
// as "db-faults", in the group of the dependency "db".
func newDatabase(reg *registry.Registry, pool int, visit time.Duration, errRate float64) (*database, error) {
	faults, err := registry.Injector(reg, "db-faults", chaos.Config{ErrorRate: errRate, Error: errTransient}, groupDB)
	if err != nil {
		return nil, err
	}
	db := &database{pool: make(chan struct{}, pool), visit: visit, faults: faults}
	db.slow.Store(1000)
	return db, nil
}

// answered is a visit's own result once it has held its connection: the
// injector replaces it with errTransient on its share of visits.
func answered(context.Context) error { return nil }

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
	return db.faults.Do(ctx, answered)
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

// service is the simulated API: 90 % reads, 10 % writes (the client
// chooses, GET or POST); 80 % of reads hit the cache; every miss and every
// write visits the database once; the rest of the time in the API is spent
// elsewhere (other services, serialization), about apiTime on average in all.
type service struct {
	db      *database
	other   time.Duration // mean time outside the database
	hitRate float64
}

func newService(o options, db *database) *service {
	// Mean time outside the database: apiTime minus the mean database time
	// per request (28 % of requests visit it at 90 % reads × 20 % misses +
	// 10 % writes).
	dbShare := 0.9*(1-o.hitRate) + 0.1
	other := o.apiTime - time.Duration(dbShare*float64(o.dbVisit))
	if other < 0 {
		other = 0
	}
	return &service{db: db, other: other, hitRate: o.hitRate}
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

// ServeHTTP is the unprotected handler: every request is admitted and waits
// for the database as long as its client stays connected. It answers 200 on
// success. (The protected handler is guard.handler.)
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	write := r.Method == http.MethodPost
	query := func(ctx context.Context, _ time.Duration) error { return s.db.query(ctx) }
	if err := s.work(r.Context(), write, query); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}
