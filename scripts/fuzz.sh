#!/usr/bin/env bash
# Runs every fuzz target (of the core module and of the modules of their
# own) for a short time each, from the target's own directory so that a
# nested module's go.mod applies.
# Usage: scripts/fuzz.sh [fuzztime]   (default 10s)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-10s}
found=0
while IFS= read -r file; do
	dir=$(dirname "$file")
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
		found=1
		echo "== $dir $fn ($t)"
		(cd "$dir" && go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" .)
	done
done < <(git ls-files '*_test.go' | grep -v '^bench/' | xargs grep -l '^func Fuzz' || true)
[ "$found" = 1 ] || echo "no fuzz targets"
