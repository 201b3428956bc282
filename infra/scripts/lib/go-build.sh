# Sourced by build-kube.sh, build-jaeger.sh and build-promtool.sh: what every
# build of a Go program from the Go module proxy into the project's cache
# shares. Each script keeps its own module, binaries and stamp.
#
# The caller sets GB_NAME (the message prefix: build-kube) and GB_DIR (its
# directory under the cache: kube), then uses:
#   gb_require_tools HINT  go and flock on PATH, or one line naming the tool
#                          and how to get it (HINT: which Go, from where)
#   gb_lock                an exclusive flock on $CACHE_ROOT/$GB_DIR/build.lock,
#                          held until the script exits; a second caller says it
#                          waits, waits, and must then re-check for the first
#                          one's output
#   gb_workdir             a scratch directory under the cache (removed at
#                          exit), made the current directory
#   gb_module MOD VERSION  downloads MOD@VERSION's go.mod through the module
#                          proxy and checks the local Go against its go
#                          directive; sets GB_GOMOD (the go.mod's path) and
#                          GB_GO (its go directive). Fails with one line when
#                          the module cannot be downloaded, has no go
#                          directive, or needs a newer Go.
set -euo pipefail

CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
source "$(dirname "${BASH_SOURCE[0]}")/../go-version.sh"

gb_say() { echo "$GB_NAME: $*" >&2; }
gb_fail() {
  gb_say "$*"
  exit 1
}

gb_require_tools() {
  command -v go >/dev/null 2>&1 || gb_fail "'go' is not on PATH; install $1"
  command -v flock >/dev/null 2>&1 || gb_fail "'flock' is not on PATH; apt-get install -y util-linux"
}

gb_lock() {
  mkdir -p "$CACHE_ROOT/$GB_DIR"
  local lock="$CACHE_ROOT/$GB_DIR/build.lock"
  exec 9>>"$lock"
  if ! flock -n 9; then
    gb_say "another build is running (lock $lock); waiting for it"
    flock 9
  fi
}

gb_workdir() {
  GB_WORK="$(mktemp -d "$CACHE_ROOT/$GB_DIR-build.XXXXXX")"
  # shellcheck disable=SC2064 # the path is fixed now, on purpose
  trap "rm -rf '$GB_WORK'" EXIT
  cd "$GB_WORK"
}

# A field of `go mod download -json`'s answer ('' when absent or when go printed none).
gb_dl_field() {
  python3 -c 'import json,sys;print(json.load(open(sys.argv[2])).get(sys.argv[1]) or "")' "$1" "$2" 2>/dev/null || true
}

gb_module() {
  local module="$1" version="$2" downloaded=1 found why
  GOFLAGS=-mod=mod go mod download -json "$module@$version" >gb-dl.json 2>gb-dl.err || downloaded=0
  GB_GOMOD="$(gb_dl_field GoMod gb-dl.json)"
  # The go directive is checked first when the go.mod arrived: a Go too old
  # for the module also fails the download, less clearly.
  if [[ -n "$GB_GOMOD" && -f "$GB_GOMOD" ]]; then
    GB_GO="$(awk '$1=="go"{print $2; exit}' "$GB_GOMOD")"
    [[ -n "$GB_GO" ]] || gb_fail "$module@$version's go.mod has no go directive; cannot tell which Go it needs"
    found="$(go env GOVERSION)"
    go_at_least "$found" "$GB_GO" || gb_fail "$module@$version needs Go >= $GB_GO (its go.mod); found $found"
  fi
  if ((downloaded == 0)) || [[ -z "$GB_GOMOD" ]]; then
    why="$(gb_dl_field Error gb-dl.json)"
    gb_fail "cannot download $module@$version from the Go module proxy (${why:-$(tail -1 gb-dl.err)})"
  fi
}
