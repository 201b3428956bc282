# Sourced by install-squid.sh, install-redis.sh and install-nginx.sh: puts a
# Debian 12 package's files into a cache outside the repository and outside
# the system, once per version, and prints the path of its binary.
#
# Never `apt-get install`: these packages' maintainer scripts would start
# system daemons on fixed ports (Squid on 3128, Redis on 6379, nginx on 80).
# Instead `apt-get download` fetches the package, its companions and those of
# its library dependencies (followed through their own library dependencies)
# that are not installed on this machine, and `dpkg -x` unpacks each into the
# cache: no maintainer script runs, nothing is registered with dpkg, nothing
# outside the cache is written. `apt-get update` runs only when the package
# lists do not know the wanted version (a fresh machine has no lists).
#
# Concurrency: one install at a time per package under an exclusive flock on
# $CACHE_ROOT/<name>/install.lock; a second caller waits, then finds the
# first one's stamp and reuses its tree. The stamp (.complete) is written
# last, so a half-finished tree is thrown away and never used.
#
# The caller sets, then calls `debian_unpack`:
#   DU_NAME      cache directory and message prefix (squid)
#   DU_PACKAGE   the package whose version is pinned (squid)
#   DU_PIN       the pinned version, or empty for Debian's candidate. When
#                the mirrors no longer carry the pin (a security update
#                replaced it), the candidate is used and the script says so.
#   DU_SAME      companions at the same version (array)
#   DU_OTHERS    companions at their candidate version (array)
#   DU_DEPS_OF   the package whose library dependencies are followed
#   DU_DEPS_SKIP an awk regex of dependencies not to fetch (may be empty)
#   DU_BINARY    the binary's path inside the tree (usr/sbin/squid)
#   du_check     a function run as `du_check BINARY LIBPATH VERSION`; it
#                fails (with a message) when the unpacked binary is wrong
set -euo pipefail

CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"

du_say() { echo "install-$DU_NAME: $*" >&2; }
du_fail() {
  du_say "$*"
  exit 1
}
# An epoch's colon stays out of directory names.
du_dir() { echo "$CACHE_ROOT/$DU_NAME/${1//:/_}"; }
du_binary() { echo "$(du_dir "$1")/$DU_BINARY"; }
du_installed() { [[ -n "$1" && -f "$(du_dir "$1")/.complete" && -x "$(du_binary "$1")" ]]; }
du_current() { cat "$CACHE_ROOT/$DU_NAME/current" 2>/dev/null || true; }
du_done() {
  du_binary "$1"
  exit 0
}

# No early exits in these pipelines: under pipefail a SIGPIPE would read as failure.
du_has_pin() { apt-cache madison "$DU_PACKAGE" 2>/dev/null | awk -F'|' -v want="$DU_PIN" '{gsub(/ /, "", $2)} $2 == want {found = 1} END {exit !found}'; }
du_candidate() { apt-cache policy "$DU_PACKAGE" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" && !v {v = $2} END {print v}' || true; }
du_lib_deps() {
  apt-cache depends --no-pre-depends --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "$1" 2>/dev/null |
    awk -v skip="$DU_DEPS_SKIP" '$1 == "Depends:" && $2 ~ /^lib/ && (skip == "" || $2 !~ skip) {print $2}' | sort -u
}
du_is_installed() { [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]; }

# The version to unpack; already-unpacked versions are reused offline.
du_resolve_version() {
  if [[ -n "$DU_PIN" ]] && du_has_pin; then
    VERSION="$DU_PIN"
    return
  fi
  local cand
  cand="$(du_candidate)"
  if du_installed "$cand"; then
    [[ -z "$DU_PIN" ]] || du_say "$DU_PACKAGE $DU_PIN is not in the package lists; reusing the installed candidate $cand"
    du_done "$cand"
  fi
  if [[ -z "$cand" || -n "$DU_PIN" ]]; then
    du_say "$DU_PACKAGE ${DU_PIN:-(any version)} is not in the package lists; running apt-get update"
    apt-get update >"$CACHE_ROOT/$DU_NAME/apt-update.log" 2>&1 ||
      du_fail "apt-get update failed (run it as root; log $CACHE_ROOT/$DU_NAME/apt-update.log): $(tail -1 "$CACHE_ROOT/$DU_NAME/apt-update.log")"
    if [[ -n "$DU_PIN" ]] && du_has_pin; then
      VERSION="$DU_PIN"
      return
    fi
    cand="$(du_candidate)"
  fi
  [[ -n "$cand" ]] || du_fail "Debian's package lists have no $DU_PACKAGE at all (is this Debian 12 with its main archive configured?)"
  [[ -z "$DU_PIN" ]] || du_say "$DU_PACKAGE $DU_PIN is not available from the configured mirrors; using Debian's candidate $cand instead"
  du_installed "$cand" && du_done "$cand"
  VERSION="$cand"
}

debian_unpack() {
  local base="$CACHE_ROOT/$DU_NAME"
  du_installed "$DU_PIN" && du_done "$DU_PIN"
  [[ -n "$DU_PIN" ]] || ! du_installed "$(du_current)" || du_done "$(du_current)"

  local tool
  for tool in apt-get apt-cache dpkg dpkg-query ldd; do
    command -v "$tool" >/dev/null 2>&1 || du_fail "'$tool' is not on PATH; this script needs Debian's apt and dpkg (Debian 12 bookworm) to fetch $DU_PACKAGE"
  done
  command -v flock >/dev/null 2>&1 || du_fail "'flock' is not on PATH; apt-get install -y util-linux"

  mkdir -p "$base"
  exec 9>>"$base/install.lock"
  if ! flock -n 9; then
    du_say "another install is running (lock $base/install.lock); waiting for it"
    flock 9
  fi
  du_installed "$DU_PIN" && du_done "$DU_PIN"
  [[ -n "$DU_PIN" ]] || ! du_installed "$(du_current)" || du_done "$(du_current)"

  VERSION=""
  du_resolve_version
  local out
  out="$(du_dir "$VERSION")"

  # Library dependencies not installed here, and theirs, transitively.
  local missing=() seen=" " pkg queue more
  mapfile -t queue < <(du_lib_deps "$DU_DEPS_OF=$VERSION")
  while ((${#queue[@]} > 0)); do
    pkg="${queue[0]}"
    queue=("${queue[@]:1}")
    [[ "$seen" == *" $pkg "* ]] && continue
    seen+="$pkg "
    du_is_installed "$pkg" && continue
    missing+=("$pkg")
    mapfile -t more < <(du_lib_deps "$pkg")
    queue+=("${more[@]}")
  done

  rm -rf "$out"
  DU_WORK="$(mktemp -d "$base/download.XXXXXX")"
  trap 'rm -rf "$DU_WORK"' EXIT
  # apt drops to the _apt user to download; let it write here (it warns otherwise).
  chmod 0755 "$DU_WORK"
  if id _apt >/dev/null 2>&1 && [[ $EUID -eq 0 ]]; then chown _apt "$DU_WORK"; fi

  local wanted=("$DU_PACKAGE=$VERSION")
  for pkg in "${DU_SAME[@]}"; do wanted+=("$pkg=$VERSION"); done
  wanted+=("${DU_OTHERS[@]}" "${missing[@]}")
  du_say "downloading ${wanted[*]} from Debian's mirrors"
  (cd "$DU_WORK" && apt-get download "${wanted[@]}") >"$DU_WORK/download.log" 2>&1 ||
    du_fail "apt-get download failed: $(grep -E '^(E|W):' "$DU_WORK/download.log" | head -3 | tr '\n' ' ')"

  mkdir -p "$out"
  local deb
  for deb in "$DU_WORK"/*.deb; do dpkg -x "$deb" "$out"; done

  # The extracted libraries must satisfy every library the binary needs.
  local libpath="" dir binary unresolved
  for dir in "$out"/usr/lib/*-linux-* "$out"/lib/*-linux-*; do
    [[ -d "$dir" ]] && libpath="${libpath:+$libpath:}$dir"
  done
  binary="$(du_binary "$VERSION")"
  [[ -x "$binary" ]] || du_fail "the $DU_PACKAGE packages did not provide $DU_BINARY"
  unresolved="$(LD_LIBRARY_PATH="$libpath" ldd "$binary" 2>&1 | awk '/not found/ {printf "%s ", $1}' || true)"
  [[ -z "$unresolved" ]] || du_fail "$DU_PACKAGE $VERSION still misses libraries after extraction: $unresolved(install the packages that provide them)"
  du_check "$binary" "$libpath" "$VERSION"

  echo "$DU_NAME=$VERSION extra=${missing[*]:-none}" >"$out/.complete"
  echo "$VERSION" >"$base/current"
  echo "$binary"
}
