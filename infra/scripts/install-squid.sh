#!/usr/bin/env bash
# Installs Debian's squid (bookworm: 5.7) into the project's cache, for the
# tests that want a real Squid (tests/integration/kubernetes-squid.test.ts).
# Prints the path of the squid binary; run it with LD_LIBRARY_PATH set to the
# tree's usr/lib/<multiarch> (and lib/<multiarch>, when present).
# How, and why never `apt-get install`: lib/debian-unpack.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-unpack.sh"

DU_NAME=squid
DU_PACKAGE=squid
# Debian 12's squid (bookworm-security).
DU_PIN="${SQUID_VERSION:-5.7-2+deb12u6}"
DU_SAME=(squid-common)
# The error pages.
DU_OTHERS=(squid-langpack)
DU_DEPS_OF=squid
# Only squid's helper scripts use perl modules.
DU_DEPS_SKIP='-perl$'
DU_BINARY=usr/sbin/squid
du_check() {
  local banner
  banner="$(LD_LIBRARY_PATH="$2" "$1" -v 2>&1 | awk 'NR == 1' || true)"
  [[ "$banner" == *"Version ${3%%-*}"* ]] || du_fail "squid -v did not report version ${3%%-*}: $banner"
}
debian_unpack
