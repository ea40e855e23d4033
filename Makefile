# rampart — build, test and benchmark targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
GOFILES = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')
FUZZTIME ?= 10s
BENCHCOUNT ?= 5
BENCHTIME ?= 1s
STATICCHECK_VERSION ?= v0.8.2
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: help test fmt-check vet test-race test-allocs test-redis bench bench-redis bench-smoke bench-report demo fuzz lint

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

test: fmt-check vet test-race test-allocs ## gofmt check, go vet, go test -race, then the allocation gates

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet the core module, the bench module and the Redis limiter module
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	cd ratelimit/redislimit && $(GO) vet ./...

test-race: ## every test of the core module (and the bench tooling) under the race detector, one line per package
	@echo "go test -race, package by package (about 2 minutes in all on 2 cores once built)"
	./scripts/gotest.sh -race -count=1 -- ./...
	cd bench && $(GO) test -race -count=1 ./cmd/...

# Allocation gates are tests whose name contains "Allocs"; they skip
# themselves under -race (the instrumentation allocates), so they run again
# here without it.
test-allocs: ## the allocation gates, without -race
	$(GO) test -count=1 -run 'Allocs' ./...

test-redis: ## the Redis limiter's tests, against a throwaway redis-server (installed if missing)
	./scripts/ensure-redis.sh
	cd ratelimit/redislimit && REQUIRE_REDIS=1 $(GO) test -race -count=1 ./...

bench: ## every benchmark once, with allocations
	cd bench && $(GO) test -run '^$$' -bench . -benchmem ./...

bench-smoke: ## every benchmark for one iteration, so none rots
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 1x ./...
	./scripts/ensure-redis.sh
	cd ratelimit/redislimit && REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchtime 1x ./...

bench-redis: ## the Redis limiter against throttled/v2 on a local server, -count=$(BENCHCOUNT)
	./scripts/ensure-redis.sh
	cd ratelimit/redislimit && REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./...

bench-report: ## -count=$(BENCHCOUNT) run, benchstat summary, bench/README.md and the README summary regenerated
	BENCHCOUNT=$(BENCHCOUNT) BENCHTIME=$(BENCHTIME) BENCHSTAT_VERSION=$(BENCHSTAT_VERSION) ./scripts/bench-report.sh

demo: ## the overload demo: an API under overload, unprotected vs protected by rampart
	$(GO) run ./examples/overload

fuzz: ## every fuzz target for $(FUZZTIME)
	./scripts/fuzz.sh $(FUZZTIME)

lint: vet ## go vet plus staticcheck (installed from the Go module proxy), every module
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd bench && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd ratelimit/redislimit && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
