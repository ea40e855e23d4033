#!/usr/bin/env bash
# Runs the bench module's suite BENCHCOUNT times, summarises it with
# benchstat, and regenerates from the same run the full tables
# (bench/README.md) and the README's summary table and headline.
#
# The results file starts with two configuration lines of the Go benchmark
# format, goversion and benchcmd, so that the tables say how the run was
# made. To regenerate the tables from the committed run without benchmarking
# again:
#
#	cd bench && go run ./cmd/benchtable -in results/latest.txt -out README.md -readme ../README.md
set -euo pipefail
cd "$(dirname "$0")/.."
count=${BENCHCOUNT:-5}
filter=${BENCH:-.}
benchtime=${BENCHTIME:-1s}
mkdir -p bench/results
out=bench/results/latest.txt
cmd="cd bench && go test -run '^\$' -bench $filter -benchmem -count $count -benchtime $benchtime ./..."
{
	echo "goversion: $(cd bench && go env GOVERSION)"
	echo "benchcmd: $cmd"
	(cd bench && go test -run '^$' -bench "$filter" -benchmem -count "$count" -benchtime "$benchtime" ./...)
} | tee "$out"
(cd bench && go run golang.org/x/perf/cmd/benchstat@"${BENCHSTAT_VERSION:-latest}" results/latest.txt) > bench/results/benchstat.txt
cat bench/results/benchstat.txt
(cd bench && go run ./cmd/benchtable -in results/latest.txt -out README.md -readme ../README.md -count "$count")
echo "bench/README.md and README.md's summary regenerated from $out"
