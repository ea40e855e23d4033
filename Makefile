# rampart — build, test and benchmark targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
GOFILES = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')
FUZZTIME ?= 10s
BENCHCOUNT ?= 5
BENCHTIME ?= 1s
STATICCHECK_VERSION ?= v0.8.2
# Every module of its own under the root (a go.mod below it): the adapters
# that bring a third-party dependency, the Redis limiter, the benchmarks.
MODULES := $(shell find . -name go.mod -not -path './go.mod' -not -path './.git/*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort)
BENCHSTAT_VERSION ?= v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: help test fmt-check vet test-race test-allocs test-modules test-386 test-redis test-prometheus bench bench-redis bench-smoke bench-report shed-compare demo demo-chart browser-check fuzz lint

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

test: fmt-check vet test-race test-allocs test-modules ## gofmt check, go vet, go test -race, the allocation gates, then every other module

fmt-check: ## fail if gofmt would change a file
	@out=$$(gofmt -l $(GOFILES)); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet the core module and every module of its own
	$(GO) vet ./...
	@set -e; for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...); done

test-race: ## every test of the core module (and the bench tooling) under the race detector, one line per package
	@echo "go test -race, package by package (about 2 minutes in all on 2 cores once built)"
	./scripts/gotest.sh -race -count=1 -- ./...
	cd bench && $(GO) test -race -count=1 ./cmd/...

# Allocation gates are tests whose name contains "Allocs"; they skip
# themselves under -race (the instrumentation allocates), so they run again
# here without it.
test-allocs: ## the allocation gates, without -race
	$(GO) test -count=1 -run 'Allocs' ./...

# The modules of their own: the adapters' tests under -race (the Redis
# limiter's skip the cases that need a server: test-redis runs them), then
# their allocation gates without it; the benchmark module's tests in short
# mode (its long cross-checks run by hand).
test-modules: ## every module of its own: go test -race, then its allocation gates
	@set -e; for m in $(filter-out bench,$(MODULES)); do echo "go test -race ($$m)"; (cd $$m && $(GO) test -race -count=1 ./... && $(GO) test -count=1 -run Allocs ./...); done
	cd bench && $(GO) test -short -count=1 ./...

test-386: ## the core module's tests built for a 32-bit target (GOARCH=386, which amd64 runs natively): 32-bit words, 4-byte pointers
	GOARCH=386 CGO_ENABLED=0 $(GO) test -count=1 ./...

test-redis: ## the Redis limiter's tests, against a throwaway redis-server (installed if missing)
	./scripts/ensure-redis.sh
	cd ratelimit/redislimit && REQUIRE_REDIS=1 $(GO) test -race -count=1 ./...

test-prometheus: ## rampartprom against a real Prometheus server on loopback (Debian's prometheus package, installed when missing)
	./rampartprom/scripts/test-e2e.sh

bench: ## every benchmark once, with allocations
	cd bench && $(GO) test -run '^$$' -bench . -benchmem ./...

bench-smoke: ## every benchmark for one iteration, so none rots
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...
	cd bench && $(GO) test -run '^$$' -bench . -benchtime 1x ./...
	./scripts/ensure-redis.sh
	@set -e; for m in $(filter-out bench,$(MODULES)); do echo "benchmarks, one iteration ($$m)"; (cd $$m && REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchtime 1x ./...); done

bench-redis: ## the Redis limiter against throttled/v2 on a local server, -count=$(BENCHCOUNT)
	./scripts/ensure-redis.sh
	cd ratelimit/redislimit && REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./...

bench-report: ## -count=$(BENCHCOUNT) run, benchstat summary, bench/README.md and the README summary regenerated
	BENCHCOUNT=$(BENCHCOUNT) BENCHTIME=$(BENCHTIME) BENCHSTAT_VERSION=$(BENCHSTAT_VERSION) ./scripts/bench-report.sh

demo-chart: ## the overload demo recorded: its per-second series (JSON, CSV) and charts (SVG, HTML) into docs/img (overload.* and overload-cpu.*)
	cd examples/overload && $(GO) run . -out ../../docs/img

browser-check: ## the status page and the demo's chart in headless Chromium (Debian's chromium, installed when missing)
	./statuspage/scripts/browser-check.sh

shed-compare: ## the CPU-bound overload scenario: no shedding, rampart's shed, go-zero's and aegis's shedders side by side (the table into bench/shedcompare/table.md)
	cd bench/shedcompare && $(GO) run . -duration 4s -sample 25ms -out table.md

demo: ## the overload demo: an API whose database slows down, and a CPU-bound handler, each unprotected then protected by rampart
	cd examples/overload && $(GO) run .

fuzz: ## every fuzz target for $(FUZZTIME)
	./scripts/fuzz.sh $(FUZZTIME)

lint: vet ## go vet plus staticcheck (installed from the Go module proxy), every module
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@set -e; for m in $(MODULES); do echo "staticcheck ($$m)"; (cd $$m && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...); done
