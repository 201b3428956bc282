#!/usr/bin/env bash
# Installs Debian's nginx with its stream module (bookworm: 1.22) into the
# project's cache, for the tests that put a TLS terminator requiring client
# certificates in front of the Temporal dev server
# (tests/integration/temporal-mtls.test.ts). Prints the path of the nginx
# binary; the stream module is at <tree>/usr/lib/nginx/modules/ngx_stream_module.so.
#
# Why nginx and not stunnel4: Temporal's Rust core (tonic) insists on ALPN
# "h2" over TLS (H2NotNegotiated otherwise) and Debian 12's stunnel 5.68
# cannot answer ALPN; nginx's stream module can (`ssl_alpn h2`).
# How, and why never `apt-get install`: lib/debian-unpack.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-unpack.sh"

DU_NAME=nginx
DU_PACKAGE=nginx
# Debian's candidate: nothing here depends on a particular 1.22 revision.
DU_PIN=''
DU_SAME=(libnginx-mod-stream)
DU_OTHERS=()
DU_DEPS_OF=nginx
DU_DEPS_SKIP=''
DU_BINARY=usr/sbin/nginx
du_check() {
  local tree="${1%/usr/sbin/nginx}"
  [[ -f "$tree/usr/lib/nginx/modules/ngx_stream_module.so" ]] || du_fail "libnginx-mod-stream did not provide ngx_stream_module.so"
  LD_LIBRARY_PATH="$2" "$1" -v 2>&1 | grep -q 'nginx/1\.' || du_fail "nginx -v did not answer"
}
debian_unpack
