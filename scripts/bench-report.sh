#!/usr/bin/env bash
# Runs the bench module's suite BENCHCOUNT times, summarises it with
# benchstat, and regenerates the README's benchmark table from the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${BENCHCOUNT:-5}
filter=${BENCH:-.}
benchtime=${BENCHTIME:-1s}
mkdir -p bench/results
out=bench/results/latest.txt
(cd bench && go test -run '^$' -bench "$filter" -benchmem -count "$count" -benchtime "$benchtime" ./...) | tee "$out"
(cd bench && go run golang.org/x/perf/cmd/benchstat@"${BENCHSTAT_VERSION:-latest}" results/latest.txt) > bench/results/benchstat.txt
cat bench/results/benchstat.txt
(cd bench && go run ./cmd/benchtable -in results/latest.txt -readme ../README.md -count "$count")
echo "README.md table regenerated from $out"
