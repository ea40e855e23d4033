#!/usr/bin/env bash
# End-to-end test of rampartprom against a real Prometheus server:
# installs Debian's prometheus package if it is missing, starts the e2e
# helper (a Collector of a breaker and a rate limiter on 127.0.0.1 at a
# free port) and prometheus on 127.0.0.1 at a free port with a temporary
# config (scrape every 1 s) and storage, drives load that trips the breaker
# and makes the limiter reject, and polls Prometheus's /api/v1/query until
# the breaker's open series and the rejection counter have moved. Both
# processes are always stopped. Idempotent; run from anywhere.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd) # the rampartprom module
PROMETHEUS=${PROMETHEUS:-prometheus}
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi

apt_install() { # apt_install PACKAGE...: install Debian packages, refreshing the lists once if needed
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null ||
    { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}

command -v curl >/dev/null 2>&1 || apt_install curl
if ! command -v "$PROMETHEUS" >/dev/null 2>&1; then
  echo "test-e2e: installing Debian's prometheus package"
  apt_install prometheus
  # The package's service is not wanted: this script runs its own server.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    $sudo systemctl stop prometheus || true
  fi
fi
command -v "$PROMETHEUS" >/dev/null || { echo "test-e2e: no prometheus binary" >&2; exit 1; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "test-e2e: building the helper"
(cd "$here" && go build -o "$tmp/e2e" ./internal/e2e)

"$tmp/e2e" serve -addr-file "$tmp/addr" >"$tmp/e2e.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$tmp/addr" ] && break; sleep 0.1; done
target=$(cat "$tmp/addr")
echo "test-e2e: collector at http://$target/metrics"

port=$("$tmp/e2e" freeport)
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: rampart-e2e
    static_configs:
      - targets: ["$target"]
YML
"$PROMETHEUS" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
  --web.listen-address="127.0.0.1:$port" >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
prom="http://127.0.0.1:$port"
ready=""
for _ in $(seq 300); do
  if curl -fsS "$prom/-/ready" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "test-e2e: prometheus did not start" >&2; tail -20 "$tmp/prometheus.log" >&2; exit 1; }
echo "test-e2e: prometheus at $prom"

q() { "$tmp/e2e" query -prom "$prom" -timeout 30s "$@"; }
fail() { echo "test-e2e: FAIL: $*" >&2; tail -20 "$tmp/prometheus.log" >&2; exit 1; }

# Before the load: the breaker is scraped closed, nothing rejected.
q -expr 'rampart_circuitbreaker_state{rampart_name="e2e-breaker",rampart_state="closed"}' -min 1 || fail "breaker not scraped closed"
q -expr 'rampart_ratelimit_admitted_total{rampart_name="e2e-limiter"} == 0' -min 0 || fail "limiter not scraped"

echo "test-e2e: driving load: $(curl -fsS "http://$target/drive")"

q -expr 'rampart_circuitbreaker_state{rampart_name="e2e-breaker",rampart_state="open"}' -min 1 || fail "breaker open series did not move"
q -expr 'rampart_circuitbreaker_rejected_total{rampart_name="e2e-breaker"}' -min 20 || fail "breaker rejections did not move"
q -expr 'rampart_circuitbreaker_trips_total{rampart_name="e2e-breaker"}' -min 1 || fail "breaker trips did not move"
q -expr 'rampart_ratelimit_rejected_total{rampart_name="e2e-limiter"}' -min 45 || fail "limiter rejections did not move"
q -expr 'increase(rampart_ratelimit_rejected_total{rampart_name="e2e-limiter"}[1m])' -min 1 || fail "limiter rejections did not increase"
echo "test-e2e: PASS"
