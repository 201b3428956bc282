#!/usr/bin/env bash
# Installs Debian's redis-server (bookworm: 7.0) into the project's cache, for
# the tests and the benchmark that want a real Redis (the lease store).
# Prints the path of the redis-server binary; run it with LD_LIBRARY_PATH set
# to the tree's usr/lib/<multiarch> (local-servers/redis.ts does).
# How, and why never `apt-get install`: lib/debian-unpack.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-unpack.sh"

DU_NAME=redis
DU_PACKAGE=redis-server
# Debian 12's redis (bookworm-security).
DU_PIN="${REDIS_VERSION:-5:7.0.15-1~deb12u10}"
# redis-tools holds the binary (redis-server is a symlink to redis-check-rdb).
DU_SAME=(redis-tools)
DU_OTHERS=()
DU_DEPS_OF=redis-tools
DU_DEPS_SKIP=''
DU_BINARY=usr/bin/redis-server
du_check() {
  # "Redis server v=7.0.15 sha=..."; the upstream version sits between the epoch and the Debian revision.
  local upstream="${3#*:}" banner
  upstream="${upstream%%-*}"
  banner="$(LD_LIBRARY_PATH="$2" "$1" --version 2>&1 | awk 'NR == 1' || true)"
  [[ "$banner" == *"v=$upstream"* ]] || du_fail "redis-server --version did not report v=$upstream: $banner"
}
debian_unpack
