#!/usr/bin/env bash
# browser-check.sh: the status page and the overload demo's chart in a real
# browser. Installs Debian's chromium (headless) with apt-get when missing,
# serves a status page (statuspage/internal/browsercheck) on 127.0.0.1 at a
# free port, runs a short overload demo with -out, and for both pages takes
# a screenshot (decoded with Go's image/png: not blank) and dumps the DOM
# (it must hold the rendered SVG charts and their series); any console
# message or refused resource in chromium's log fails the check. Idempotent;
# the server and the temporary files are always cleaned up.
#
# Usage: statuspage/scripts/browser-check.sh   (from anywhere; KEEP=1 keeps the files)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
GO=${GO:-go}

browser=""
for b in chromium chromium-browser; do
	if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
	if ! apt-cache policy chromium 2>/dev/null | grep -q 'Candidate: [0-9]'; then
		echo "browser-check: no chromium installed and apt-cache has no candidate for it (apt-get update first?)" >&2
		exit 1
	fi
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo=sudo; fi
	echo "browser-check: installing chromium with apt-get"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
	browser=chromium
fi
echo "browser-check: $("$browser" --version 2>/dev/null || echo "$browser")"

tmp=$(mktemp -d)
server=""
cleanup() {
	if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
	if [ "${KEEP:-}" = 1 ]; then echo "browser-check: files kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

"$GO" build -o "$tmp/browsercheck" ./statuspage/internal/browsercheck
(cd examples/overload && "$GO" build -o "$tmp/overload" .) # a module of its own

# headless NAME URL WIDTH HEIGHT: NAME.png, NAME.html (the DOM) and NAME.log.
headless() {
	local name=$1 url=$2 w=$3 h=$4
	local flags=(--headless --disable-gpu --no-sandbox --no-first-run --hide-scrollbars
		--user-data-dir="$tmp/profile" --enable-logging=stderr --v=0 --window-size="$w,$h")
	if ! timeout 120 "$browser" "${flags[@]}" --screenshot="$tmp/$name.png" "$url" 2>"$tmp/$name.shot.log" >/dev/null; then
		echo "browser-check: $name: the screenshot failed" >&2; tail -20 "$tmp/$name.shot.log" >&2; exit 1
	fi
	if ! timeout 120 "$browser" "${flags[@]}" --dump-dom "$url" >"$tmp/$name.html" 2>"$tmp/$name.log"; then
		echo "browser-check: $name: --dump-dom failed" >&2; tail -20 "$tmp/$name.log" >&2; exit 1
	fi
	if [ ! -s "$tmp/$name.png" ]; then echo "browser-check: $name: no screenshot" >&2; cat "$tmp/$name.shot.log" >&2; exit 1; fi
	"$tmp/browsercheck" png "$tmp/$name.png"
	# Console messages (errors, CSP violations) are logged as CONSOLE lines.
	if grep -hE 'CONSOLE|Uncaught|Refused to|Failed to load resource' "$tmp/$name.log" "$tmp/$name.shot.log"; then
		echo "browser-check: $name: the browser logged the messages above" >&2
		exit 1
	fi
}

# The status page.
"$tmp/browsercheck" serve -ready "$tmp/url" &
server=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.1; done
if [ ! -s "$tmp/url" ]; then echo "browser-check: the status page server did not start" >&2; exit 1; fi
url=$(cat "$tmp/url")
echo "browser-check: status page at $url"
headless status "$url" 1200 1000
# Eight instances, each with a chart; the bulkhead's two series; the
# breaker's state strip with its open stretch and its successes; the
# pipeline's calls and the fallback's answers.
"$tmp/browsercheck" dom "$tmp/status.html" \
	'<section class="instance":8' '<svg class="spark"':8 '<polyline class="series"':14 \
	'data-series="in flight"':1 'class="state"':60 'data-state="open"':5 'data-state="closed"':40 \
	'data-series="successes/s"':1 'data-series="calls/s"':1 'data-series="answered/s"':1

# The demo's chart, from a short real run.
"$tmp/overload" -quiet -status "" -rate 100 -warmup 500ms -steady 1s -slowdown 2s -recovery 1s -db-pool 2 -slow-factor 8 -out "$tmp/demo" >"$tmp/demo.log"
headless chart "file://$tmp/demo/overload.html" 1280 1250
"$tmp/browsercheck" dom "$tmp/chart.html" \
	'class="panel"':8 'data-series="succeeded"':2 'data-series="p99"':2 'class="phase"':32 \
	'class="legend"':4 'class="state"':3 'class="axis-label"':8
echo "browser-check: ok"
