#!/usr/bin/env bash
# Builds Jaeger (the v2 all-in-one binary, cmd/jaeger) from the Go module
# proxy, once per pinned version, into a cache outside the repository. The
# tracing test and `dev --tracing` run it with in-memory storage.
#
# Why a wrapper module: jaeger's go.mod has a replace directive (sarama),
# which `go install pkg@version` refuses. A throwaway module that requires
# github.com/jaegertracing/jaeger and repeats its replace builds the same code.
#
# Concurrency: the build runs under an exclusive flock on
# $CACHE_ROOT/jaeger/build.lock; a second caller waits and reuses the first
# one's binary. The binary is written under another name and renamed, so a
# killed build never leaves a half-written binary behind.
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-1.76.0}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
OUT="$CACHE_ROOT/jaeger/v$JAEGER_VERSION"
BIN="$OUT/bin/jaeger"

source "$(dirname "${BASH_SOURCE[0]}")/go-version.sh"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "build-jaeger: 'go' is not on PATH; install Go >= 1.24 from go.dev or your distribution's backports" >&2
  exit 1
}
command -v flock >/dev/null 2>&1 || {
  echo "build-jaeger: 'flock' is not on PATH; apt-get install -y util-linux" >&2
  exit 1
}

mkdir -p "$CACHE_ROOT/jaeger"
LOCK="$CACHE_ROOT/jaeger/build.lock"
exec 9>>"$LOCK"
if ! flock -n 9; then
  echo "build-jaeger: another build is running (lock $LOCK); waiting for it" >&2
  flock 9
fi
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$OUT/bin"
WORK="$(mktemp -d "$CACHE_ROOT/jaeger-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "build-jaeger: building Jaeger v$JAEGER_VERSION (cmd/jaeger); the first run takes 5-30 minutes" >&2
cd "$WORK"

downloaded=1
GOFLAGS=-mod=mod go mod download -json "github.com/jaegertracing/jaeger@v$JAEGER_VERSION" >dl.json 2>dl.err || downloaded=0
dl_field() { python3 -c 'import json,sys;print(json.load(open("dl.json")).get(sys.argv[1]) or "")' "$1" 2>/dev/null || true; }
GOMOD_FILE="$(dl_field GoMod)"
if ((downloaded == 0)) || [[ -z "$GOMOD_FILE" || ! -f "$GOMOD_FILE" ]]; then
  why="$(dl_field Error)"
  echo "build-jaeger: cannot download github.com/jaegertracing/jaeger@v$JAEGER_VERSION from the Go module proxy (${why:-$(tail -1 dl.err)})" >&2
  exit 1
fi
GO_REQUIRED="$(awk '$1=="go"{print $2; exit}' "$GOMOD_FILE")"
GO_FOUND="$(go env GOVERSION)"
if [[ -n "$GO_REQUIRED" ]] && ! go_at_least "$GO_FOUND" "$GO_REQUIRED"; then
  echo "build-jaeger: jaeger v$JAEGER_VERSION needs Go >= $GO_REQUIRED (its go.mod); found $GO_FOUND" >&2
  exit 1
fi

cat >go.mod <<MOD
module egress-proxies.local/jaeger-build

go ${GO_REQUIRED:-1.24}

require github.com/jaegertracing/jaeger v$JAEGER_VERSION
MOD
# Single-line replace directives of jaeger's go.mod, repeated here.
grep -E '^replace [^ ]+ => [^ ]+ v[^ ]+$' "$GOMOD_FILE" >>go.mod || true
cat >tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
GO
GOFLAGS=-mod=mod go mod tidy >tidy.log 2>&1 || { cat tidy.log >&2; exit 1; }

export CGO_ENABLED=0
go build -trimpath -ldflags "-s -w" -o "$OUT/bin/.jaeger.tmp" github.com/jaegertracing/jaeger/cmd/jaeger
mv "$OUT/bin/.jaeger.tmp" "$BIN"
echo "$BIN"
