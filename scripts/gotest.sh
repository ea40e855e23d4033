#!/usr/bin/env bash
# Runs `go test` one package at a time with a progress line per package, so a
# long run is never silent: "[3/27] github.com/rampart-go/rampart/circuitbreaker", then go test's own
# "ok ... 4.1s" line.
# Usage: scripts/gotest.sh [go test flags...] -- [packages...]
# (packages default to ./...). Exits non-zero if any package fails, after
# running them all.
set -uo pipefail
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
mapfile -t list < <(go list "${pkgs[@]}")
n=${#list[@]}
failed=()
start=$SECONDS
for i in "${!list[@]}"; do
	p=${list[$i]}
	printf '[%d/%d] %s\n' $((i + 1)) "$n" "$p"
	if ! go test "${flags[@]}" "$p"; then
		failed+=("$p")
	fi
done
printf 'go test %s: %d packages in %ds, %d failed\n' "${flags[*]}" "$n" $((SECONDS - start)) ${#failed[@]}
if [ ${#failed[@]} -gt 0 ]; then
	printf 'FAIL %s\n' "${failed[@]}"
	exit 1
fi
