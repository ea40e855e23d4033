package main

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/rampart-go/rampart"
	"github.com/rampart-go/rampart/circuitbreaker"
	"github.com/rampart-go/rampart/rampartconfig"
	"github.com/rampart-go/rampart/registry"
	"github.com/rampart-go/rampart/retry"
)

// liveLimits is -config FILE: the protected database run's policies built
// from a rampartconfig document in the run's registry, and the file
// watched while the run lasts, every valid change applied at once (all or
// nothing; an invalid one keeps the configuration in force). The guard's
// create-or-get calls (registry.Bulkhead, registry.Breaker, ...) then
// return the document's instances under their names; a name the document
// leaves out gets the guard's default. The document gives the numbers;
// the code-level fields (the breaker's classification, the retry's
// ShouldRetry and budget) are set by configureDB.
type liveLimits struct {
	live    *rampartconfig.Live
	watcher *rampartconfig.Watcher
	built   []string // the names the document registered
}

// startConfig loads path, builds its instances in reg and watches it,
// reporting each reload attempt on w.
func startConfig(ctx context.Context, path string, reg *registry.Registry, w io.Writer, onEvent func(rampartconfig.Event)) (*liveLimits, error) {
	doc, err := rampartconfig.LoadFile(path)
	if err != nil {
		return nil, err
	}
	budget, err := retryBudget(reg)
	if err != nil {
		return nil, err
	}
	before := map[string]bool{}
	for _, n := range instanceNames(reg) {
		before[n] = true
	}
	live, err := rampartconfig.Build(doc, rampartconfig.Options{Registry: reg, Ticker: rampart.DefaultTicker(), Configure: configureDB(budget)})
	if err != nil {
		return nil, err
	}
	watcher, err := rampartconfig.Watch(ctx, path, live, func(e rampartconfig.Event) {
		if e.Err != nil {
			fmt.Fprintf(w, "config: %s not applied, version %d kept: %v\n", e.Path, e.Version, e.Err)
		} else {
			fmt.Fprintf(w, "config: %s applied, version %d (sha256 %.12s)\n", e.Path, e.Version, e.Hash)
		}
		if onEvent != nil {
			onEvent(e)
		}
	})
	if err != nil {
		_ = live.Close()
		return nil, err
	}
	l := &liveLimits{live: live, watcher: watcher}
	for _, n := range instanceNames(reg) {
		if !before[n] {
			l.built = append(l.built, n)
		}
	}
	return l, nil
}

// configureDB sets the fields a document cannot say: the database
// breaker's classification and the database retry's ShouldRetry and
// budget, the same values at every reload.
func configureDB(budget *retry.TokenBucket) func(name string, cfg any) {
	return func(name string, cfg any) {
		switch c := cfg.(type) {
		case *circuitbreaker.Config:
			if name == "db-breaker" {
				c.Classify = classifyDB
			}
		case *retry.Config:
			if name == "db-retry" {
				c.ShouldRetry, c.Budget = isTransient, budget
			}
		}
	}
}

// close stops watching and closes what the document built (its timeouts'
// watchdogs); the run's registry is cleared after it.
func (l *liveLimits) close() {
	if l != nil {
		_ = l.watcher.Close()
		_ = l.live.Close()
	}
}

// lockedWriter serialises writes to w: the progress lines and the config
// watcher's lines come from goroutines of their own.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
