#!/usr/bin/env bash
# Installs Debian's squid (bookworm: 5.7) into a cache outside the repository
# and outside the system, once per pinned version, for the tests that want a
# real Squid (tests/integration/kubernetes-squid.test.ts). Prints the path of
# the squid binary; run it with LD_LIBRARY_PATH set to the tree's
# usr/lib/<multiarch> (and lib/<multiarch>, when present).
#
# Never `apt-get install`: squid's postinst would start a system Squid on
# 0.0.0.0:3128. Instead `apt-get download` fetches squid, squid-common,
# squid-langpack (the error pages) and those of squid's library dependencies
# (followed through their own library dependencies) that are not installed
# on this machine, and `dpkg -x` unpacks each into the cache: no maintainer
# script runs, nothing is registered with dpkg, nothing outside the cache is
# written. `apt-get update` runs only when the pinned version is not in the
# package lists (a fresh machine has none).
#
# Concurrency: like build-kube.sh, the install runs under an exclusive flock
# on $CACHE_ROOT/squid/install.lock; a second caller waits, then finds the
# first one's stamp and reuses its tree. The stamp is written last.
set -euo pipefail

# Debian 12's squid (bookworm-security). When the mirrors no longer carry
# this exact version (a newer security update replaced it), the candidate
# from `apt-cache policy` is used instead and the script says so.
SQUID_VERSION="${SQUID_VERSION:-5.7-2+deb12u6}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
BASE="$CACHE_ROOT/squid"

say() { echo "install-squid: $*" >&2; }
fail() {
  say "$*"
  exit 1
}
binary() { echo "$BASE/$1/usr/sbin/squid"; }
installed() { [[ -f "$BASE/$1/.complete" && -x "$(binary "$1")" ]]; }

if installed "$SQUID_VERSION"; then
  binary "$SQUID_VERSION"
  exit 0
fi

for tool in apt-get apt-cache dpkg dpkg-query ldd; do
  command -v "$tool" >/dev/null 2>&1 || fail "'$tool' is not on PATH; this script needs Debian's apt and dpkg (Debian 12 bookworm) to fetch squid $SQUID_VERSION"
done
command -v flock >/dev/null 2>&1 || fail "'flock' is not on PATH; apt-get install -y util-linux"

# One install at a time per cache: wait for a running one, then re-check its stamp.
mkdir -p "$BASE"
LOCK="$BASE/install.lock"
exec 9>>"$LOCK"
if ! flock -n 9; then
  say "another install is running (lock $LOCK); waiting for it"
  flock 9
fi
if installed "$SQUID_VERSION"; then
  binary "$SQUID_VERSION"
  exit 0
fi

# Versions of squid in the local package lists (empty before any apt-get update).
# (No early exits in these pipelines: under pipefail a SIGPIPE would read as failure.)
has_pin() { apt-cache madison squid 2>/dev/null | awk -F'|' -v want="$SQUID_VERSION" '{gsub(/ /, "", $2)} $2 == want {found = 1} END {exit !found}'; }
candidate() { apt-cache policy squid 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" && !v {v = $2} END {print v}' || true; }

VERSION="$SQUID_VERSION"
if ! has_pin; then
  # An earlier run may have installed the candidate already: reuse it offline.
  cand="$(candidate)"
  if [[ -n "$cand" ]] && installed "$cand"; then
    say "squid $SQUID_VERSION is not in the package lists; reusing the installed candidate $cand"
    binary "$cand"
    exit 0
  fi
  say "squid $SQUID_VERSION is not in the package lists; running apt-get update"
  if ! apt-get update >"$BASE/apt-update.log" 2>&1; then
    fail "apt-get update failed (run it as root; log $BASE/apt-update.log): $(tail -1 "$BASE/apt-update.log")"
  fi
  if ! has_pin; then
    VERSION="$(candidate)"
    [[ -n "$VERSION" ]] || fail "Debian's package lists have no squid at all (is this Debian 12 with its main archive configured?)"
    say "squid $SQUID_VERSION is not available from the configured mirrors; using Debian's candidate $VERSION instead"
    if installed "$VERSION"; then
      binary "$VERSION"
      exit 0
    fi
  fi
fi

OUT="$BASE/$VERSION"
STAMP="$OUT/.complete"

# The library packages `pkg` depends on (first alternatives and virtual
# packages aside), without perl modules (only squid's helper scripts use them).
lib_deps() {
  apt-cache depends --no-pre-depends --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$1" 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^lib/ && $2 !~ /-perl$/ {print $2}' | sort -u
}
is_installed() { [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]; }

# squid's library dependencies not installed here, and theirs, transitively.
missing=()
seen=" "
mapfile -t queue < <(lib_deps "squid=$VERSION")
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

# A half-finished install (no stamp) is thrown away, never used.
rm -rf "$OUT"
WORK="$(mktemp -d "$BASE/download.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# apt drops to the _apt user to download; let it write here (it warns otherwise).
chmod 0755 "$WORK"
if id _apt >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then chown _apt "$WORK"; fi

say "downloading squid $VERSION, squid-common, squid-langpack${missing[*]:+ and ${missing[*]}} from Debian's mirrors"
if ! (cd "$WORK" && apt-get download "squid=$VERSION" "squid-common=$VERSION" squid-langpack "${missing[@]}") >"$WORK/download.log" 2>&1; then
  fail "apt-get download failed: $(grep -E '^(E|W):' "$WORK/download.log" | head -3 | tr '\n' ' ')"
fi

mkdir -p "$OUT"
for deb in "$WORK"/*.deb; do
  dpkg -x "$deb" "$OUT"
done

# The extracted libraries must satisfy every library the binary needs.
libpath=""
for dir in "$OUT"/usr/lib/*-linux-* "$OUT"/lib/*-linux-*; do
  [[ -d "$dir" ]] && libpath="${libpath:+$libpath:}$dir"
done
SQUID="$(binary "$VERSION")"
[[ -x "$SQUID" ]] || fail "the squid package did not provide usr/sbin/squid"
unresolved="$(LD_LIBRARY_PATH="$libpath" ldd "$SQUID" 2>&1 | awk '/not found/ {printf "%s ", $1}' || true)"
[[ -z "$unresolved" ]] || fail "squid $VERSION still misses libraries after extraction: $unresolved(install the packages that provide them)"
banner="$(LD_LIBRARY_PATH="$libpath" "$SQUID" -v 2>&1 | awk 'NR == 1' || true)"
[[ "$banner" == *"Version ${VERSION%%-*}"* ]] || fail "squid -v did not report version ${VERSION%%-*}: $banner"

echo "squid=$VERSION extra=${missing[*]:-none}" >"$STAMP"
echo "$SQUID"
