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
# $CACHE_ROOT/jaeger/build.lock (lib/go-build.sh); a second caller waits and
# reuses the first one's binary. The binary is written under another name
# and renamed, so a killed build never leaves a half-written binary behind.
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-1.76.0}"
GB_NAME=build-jaeger
GB_DIR=jaeger
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
OUT="$CACHE_ROOT/jaeger/v$JAEGER_VERSION"
BIN="$OUT/bin/jaeger"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
gb_require_tools "Go >= 1.24 from go.dev or your distribution's backports"
gb_lock
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$OUT/bin"
gb_workdir
gb_say "building Jaeger v$JAEGER_VERSION (cmd/jaeger); the first run takes 5-30 minutes"
gb_module github.com/jaegertracing/jaeger "v$JAEGER_VERSION"

cat >go.mod <<MOD
module egress-proxies.local/jaeger-build

go $GB_GO

require github.com/jaegertracing/jaeger v$JAEGER_VERSION
MOD
# Single-line replace directives of jaeger's go.mod, repeated here.
grep -E '^replace [^ ]+ => [^ ]+ v[^ ]+$' "$GB_GOMOD" >>go.mod || true
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
