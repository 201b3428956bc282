#!/usr/bin/env bash
# Builds Prometheus's promtool from the Go module proxy, once per pinned
# version, into a cache outside the repository. The observability test runs
# `promtool check rules` on infra/observability/prometheus-rules.yaml: the
# rules are checked by the parser Prometheus itself loads them with.
#
# Prometheus 3.x is published to the module proxy as v0.3XY.Z
# (3.16.0 = v0.316.0). Its go.mod has no replace directive, so
# `go install pkg@version` builds it as released, with no wrapper module.
#
# Concurrency: the build runs under an exclusive flock on
# $CACHE_ROOT/promtool/build.lock (lib/go-build.sh); a second caller waits
# and reuses the first one's binary. The binary is installed under another
# directory and moved into place, so a killed build leaves nothing half-made.
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-0.316.0}"
GB_NAME=build-promtool
GB_DIR=promtool
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
OUT="$CACHE_ROOT/promtool/v$PROMETHEUS_MODULE_VERSION"
BIN="$OUT/bin/promtool"

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
gb_require_tools "Go >= 1.26 from go.dev or your distribution's backports"
gb_lock
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

gb_workdir
gb_say "building promtool (Prometheus module v$PROMETHEUS_MODULE_VERSION); the first run takes a few minutes"
gb_module github.com/prometheus/prometheus "v$PROMETHEUS_MODULE_VERSION"
grep -qE '^replace|^\s*[^ ]+ => ' "$GB_GOMOD" &&
  gb_fail "github.com/prometheus/prometheus@v$PROMETHEUS_MODULE_VERSION's go.mod has replace directives; go install cannot build it"

mkdir -p "$OUT"
CGO_ENABLED=0 GOBIN="$GB_WORK/bin" go install -trimpath -ldflags "-s -w" \
  "github.com/prometheus/prometheus/cmd/promtool@v$PROMETHEUS_MODULE_VERSION"
rm -rf "$OUT/bin"
mv "$GB_WORK/bin" "$OUT/bin"
echo "$BIN"
