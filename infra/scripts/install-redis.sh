#!/usr/bin/env bash
# Installs Debian's redis-server (bookworm: 7.0) into a cache outside the
# repository and outside the system, once per version, for the tests and
# the benchmark that want a real Redis (the lease store). Prints the path of
# the redis-server binary; run it with LD_LIBRARY_PATH set to the tree's
# usr/lib/<multiarch> (tests/helpers/redis.ts does).
#
# Never `apt-get install`: redis-server's postinst would start a system
# Redis on port 6379. As install-squid.sh does, `apt-get download` fetches
# redis-server, redis-tools (which holds the binary; redis-server is a
# symlink to redis-check-rdb) and those of their library dependencies
# (followed through their own library dependencies) that are not installed
# here (jemalloc, lzf), and `dpkg -x` unpacks each into the cache: no
# maintainer script runs, nothing is registered with dpkg. `apt-get update`
# runs only when the pinned version is not in the package lists.
#
# Concurrency: one install at a time under an exclusive flock on
# $CACHE_ROOT/redis/install.lock; the stamp is written last.
set -euo pipefail

# Debian 12's redis (bookworm-security). When the mirrors no longer carry this
# exact version, the candidate from `apt-cache policy` is used and the script
# says so.
REDIS_VERSION="${REDIS_VERSION:-5:7.0.15-1~deb12u10}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
BASE="$CACHE_ROOT/redis"

say() { echo "install-redis: $*" >&2; }
fail() {
  say "$*"
  exit 1
}
# The epoch's colon stays out of the directory name.
dir_of() { echo "$BASE/${1//:/_}"; }
binary() { echo "$(dir_of "$1")/usr/bin/redis-server"; }
installed() { [[ -f "$(dir_of "$1")/.complete" && -x "$(binary "$1")" ]]; }

if installed "$REDIS_VERSION"; then
  binary "$REDIS_VERSION"
  exit 0
fi

for tool in apt-get apt-cache dpkg dpkg-query ldd; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not on PATH; this script needs Debian's apt and dpkg (Debian 12 bookworm) to fetch redis-server $REDIS_VERSION"
done
command -v flock >/dev/null 2>&1 || fail "'flock' is not on PATH; apt-get install -y util-linux"

mkdir -p "$BASE"
LOCK="$BASE/install.lock"
exec 9>>"$LOCK"
if ! flock -n 9; then
  say "another install is running (lock $LOCK); waiting for it"
  flock 9
fi
if installed "$REDIS_VERSION"; then
  binary "$REDIS_VERSION"
  exit 0
fi

has_pin() { apt-cache madison redis-server 2>/dev/null | awk -F'|' -v want="$REDIS_VERSION" '{gsub(/ /, "", $2)} $2 == want {found = 1} END {exit !found}'; }
candidate() { apt-cache policy redis-server 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" && !v {v = $2} END {print v}' || true; }

VERSION="$REDIS_VERSION"
if ! has_pin; then
  cand="$(candidate)"
  if [[ -n "$cand" ]] && installed "$cand"; then
    say "redis-server $REDIS_VERSION is not in the package lists; reusing the installed candidate $cand"
    binary "$cand"
    exit 0
  fi
  say "redis-server $REDIS_VERSION is not in the package lists; running apt-get update"
  if ! apt-get update >"$BASE/apt-update.log" 2>&1; then
    fail "apt-get update failed (run it as root; log $BASE/apt-update.log): $(tail -1 "$BASE/apt-update.log")"
  fi
  if ! has_pin; then
    VERSION="$(candidate)"
    [[ -n "$VERSION" ]] || fail "Debian's package lists have no redis-server at all (is this Debian 12 with its main archive configured?)"
    say "redis-server $REDIS_VERSION is not available from the configured mirrors; using Debian's candidate $VERSION instead"
    if installed "$VERSION"; then
      binary "$VERSION"
      exit 0
    fi
  fi
fi

OUT="$(dir_of "$VERSION")"
STAMP="$OUT/.complete"

lib_deps() {
  apt-cache depends --no-pre-depends --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$1" 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^lib/ {print $2}' | sort -u
}
is_installed() { [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]; }

# redis-tools' library dependencies not installed here, and theirs, transitively.
missing=()
seen=" "
mapfile -t queue < <(lib_deps "redis-tools=$VERSION")
while ((${#queue[@]} > 0)); do
  pkg="${queue[0]}"
  queue=("${queue[@]:1}")
  [[ "$seen" == *" $pkg "* ]] && continue
  seen+="$pkg "
  is_installed "$pkg" && continue
  missing+=("$pkg")
  mapfile -t more < <(lib_deps "$pkg")
  queue+=("${more[@]}")
done

rm -rf "$OUT"
WORK="$(mktemp -d "$BASE/download.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
chmod 0755 "$WORK"
if id _apt >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then chown _apt "$WORK"; fi

say "downloading redis-server $VERSION, redis-tools${missing[*]:+ and ${missing[*]}} from Debian's mirrors"
if ! (cd "$WORK" && apt-get download "redis-server=$VERSION" "redis-tools=$VERSION" "${missing[@]}") >"$WORK/download.log" 2>&1; then
  fail "apt-get download failed: $(grep -E '^(E|W):' "$WORK/download.log" | head -3 | tr '\n' ' ')"
fi

mkdir -p "$OUT"
for deb in "$WORK"/*.deb; do
  dpkg -x "$deb" "$OUT"
done

libpath=""
for dir in "$OUT"/usr/lib/*-linux-* "$OUT"/lib/*-linux-*; do
  [[ -d "$dir" ]] && libpath="${libpath:+$libpath:}$dir"
done
REDIS="$(binary "$VERSION")"
[[ -x "$REDIS" ]] || fail "the redis packages did not provide usr/bin/redis-server"
unresolved="$(LD_LIBRARY_PATH="$libpath" ldd "$REDIS" 2>&1 | awk '/not found/ {printf "%s ", $1}' || true)"
[[ -z "$unresolved" ]] || fail "redis-server $VERSION still misses libraries after extraction: $unresolved(install the packages that provide them)"
# "Redis server v=7.0.15 sha=..." ; the upstream version sits between the epoch and the Debian revision.
upstream="${VERSION#*:}"
upstream="${upstream%%-*}"
banner="$(LD_LIBRARY_PATH="$libpath" "$REDIS" --version 2>&1 | awk 'NR == 1' || true)"
[[ "$banner" == *"v=$upstream"* ]] || fail "redis-server --version did not report v=$upstream: $banner"

echo "redis=$VERSION extra=${missing[*]:-none}" >"$STAMP"
echo "$REDIS"
