#!/usr/bin/env bash
# Builds Helm from the Go module proxy, once per pinned version, into a cache
# outside the repository. The chart's test (tests/integration/helm-chart.test.ts)
# runs the real `helm` (lint, template, install, upgrade, uninstall) against
# the suite's kube-apiserver.
#
# Helm 4 (helm.sh/helm/v4): its go.mod has no replace directive, so
# `go install pkg@version` builds it as released, with no wrapper module
# (checked below; a version that grows one fails with one line).
#
# Concurrency: the build runs under an exclusive flock on
# $CACHE_ROOT/helm/build.lock (lib/go-build.sh); a second caller waits and
# reuses the first one's binary. The binary is installed under another
# directory and moved into place, so a killed build leaves nothing half-made.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-4.3.2}"
GB_NAME=build-helm
GB_DIR=helm
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"
OUT="$CACHE_ROOT/helm/v$HELM_VERSION"
BIN="$OUT/bin/helm"

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
gb_say "building helm v$HELM_VERSION; the first run takes a few minutes"
gb_module helm.sh/helm/v4 "v$HELM_VERSION"
grep -qE '^replace|^\s*[^ ]+ => ' "$GB_GOMOD" &&
  gb_fail "helm.sh/helm/v4@v$HELM_VERSION's go.mod has replace directives; go install cannot build it"

mkdir -p "$OUT"
# The version is stamped as Helm's own Makefile does, so `helm version`
# names the pinned release instead of "v4.x-dev".
CGO_ENABLED=0 GOBIN="$GB_WORK/bin" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
  "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
rm -rf "$OUT/bin"
mv "$GB_WORK/bin" "$OUT/bin"
echo "$BIN"
