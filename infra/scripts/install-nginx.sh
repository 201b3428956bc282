#!/usr/bin/env bash
# Installs Debian's nginx with its stream module (bookworm: 1.22) into a
# cache outside the repository and outside the system, for the tests that
# put a TLS terminator requiring client certificates in front of the
# Temporal dev server (tests/integration/temporal-mtls.test.ts). Prints the
# path of the nginx binary; the stream module is at
# <tree>/usr/lib/nginx/modules/ngx_stream_module.so.
#
# Why nginx and not stunnel4: Temporal's Rust core (tonic) insists on ALPN
# "h2" over TLS (H2NotNegotiated otherwise) and Debian 12's stunnel 5.68
# cannot answer ALPN; nginx's stream module can (`ssl_alpn h2`).
#
# Like install-squid.sh: `apt-get download` + `dpkg -x`, never `apt-get
# install` (the package's postinst would start a system nginx on port 80);
# `apt-get update` only when the package lists do not know nginx. Serialised
# by a flock on $CACHE_ROOT/nginx/install.lock; the stamp is written last.
set -euo pipefail

CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
BASE="$CACHE_ROOT/nginx"

say() { echo "install-nginx: $*" >&2; }
fail() {
  say "$*"
  exit 1
}
current() { [[ -f "$BASE/current" ]] && cat "$BASE/current"; }
binary() { echo "$BASE/$1/usr/sbin/nginx"; }
installed() { [[ -n "$1" && -f "$BASE/$1/.complete" && -x "$(binary "$1")" ]]; }

if installed "$(current || true)"; then
  binary "$(current)"
  exit 0
fi
for tool in apt-get apt-cache dpkg dpkg-query ldd flock; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not on PATH; this script needs Debian's apt and dpkg (Debian 12 bookworm)"
done

mkdir -p "$BASE"
exec 9>>"$BASE/install.lock"
if ! flock -n 9; then
  say "another install is running; waiting for it"
  flock 9
fi
if installed "$(current || true)"; then
  binary "$(current)"
  exit 0
fi

candidate() { apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" && !v {v = $2} END {print v}' || true; }
VERSION="$(candidate nginx)"
if [[ -z "$VERSION" ]]; then
  say "nginx is not in the package lists; running apt-get update"
  apt-get update >"$BASE/apt-update.log" 2>&1 || fail "apt-get update failed (run it as root; log $BASE/apt-update.log)"
  VERSION="$(candidate nginx)"
  [[ -n "$VERSION" ]] || fail "Debian's package lists have no nginx (is this Debian 12 with its main archive configured?)"
fi
DIR="${VERSION//:/_}"
OUT="$BASE/$DIR"

is_installed() { [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]; }
missing=()
for lib in libcrypt1 libpcre2-8-0 libssl3 zlib1g; do
  is_installed "$lib" || missing+=("$lib")
done

rm -rf "$OUT"
WORK="$(mktemp -d "$BASE/download.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
chmod 0755 "$WORK"
if id _apt >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then chown _apt "$WORK"; fi
say "downloading nginx $VERSION, libnginx-mod-stream${missing[*]:+ and ${missing[*]}}"
(cd "$WORK" && apt-get download "nginx=$VERSION" "libnginx-mod-stream=$VERSION" "${missing[@]}") >"$WORK/download.log" 2>&1 ||
  fail "apt-get download failed: $(grep -E '^(E|W):' "$WORK/download.log" | head -3 | tr '\n' ' ')"
mkdir -p "$OUT"
for deb in "$WORK"/*.deb; do dpkg -x "$deb" "$OUT"; done

NGINX="$(binary "$DIR")"
[[ -x "$NGINX" ]] || fail "the nginx package did not provide usr/sbin/nginx"
[[ -f "$OUT/usr/lib/nginx/modules/ngx_stream_module.so" ]] || fail "libnginx-mod-stream did not provide ngx_stream_module.so"
libpath=""
for dir in "$OUT"/usr/lib/*-linux-* "$OUT"/lib/*-linux-*; do
  [[ -d "$dir" ]] && libpath="${libpath:+$libpath:}$dir"
done
unresolved="$(LD_LIBRARY_PATH="$libpath" ldd "$NGINX" 2>&1 | awk '/not found/ {printf "%s ", $1}' || true)"
[[ -z "$unresolved" ]] || fail "nginx $VERSION misses libraries after extraction: $unresolved"
LD_LIBRARY_PATH="$libpath" "$NGINX" -v 2>&1 | grep -q 'nginx/1\.' || fail "nginx -v did not answer"

echo "nginx=$VERSION extra=${missing[*]:-none}" >"$OUT/.complete"
echo "$DIR" >"$BASE/current"
echo "$NGINX"
