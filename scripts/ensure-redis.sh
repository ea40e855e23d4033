#!/usr/bin/env bash
# Installs Debian's redis-server when it is missing (the Redis limiter's
# tests start their own throwaway server from it on a loopback port).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "redis-server is missing; install it (apt-get install redis-server) or run as root" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq redis-server >/dev/null
# Debian starts a system service on install; the tests start their own.
(systemctl stop redis-server 2>/dev/null || service redis-server stop 2>/dev/null || true) >/dev/null
redis-server --version
