#!/usr/bin/env bash
# Runs every fuzz target of the core module for a short time each.
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
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "./$dir"
	done
done < <(git ls-files '*_test.go' | grep -v '^bench/' | xargs grep -l '^func Fuzz' || true)
[ "$found" = 1 ] || echo "no fuzz targets"
