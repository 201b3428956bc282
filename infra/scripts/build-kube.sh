#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd and kubectl from the
# Go module proxy, once per pinned version, into a cache outside the
# repository.
#
# Why a wrapper module: k8s.io/kubernetes replaces every k8s.io/<staging>
# module with ./staging/..., which `go install` refuses. A throwaway module
# that requires k8s.io/kubernetes and replaces each staging module with its
# published v0.X.Y builds the same code. etcd is built from the version the
# apiserver's own module graph pins (Debian's etcd-server 3.4.23 is below
# the supported minimum).
#
# Concurrency: two cold builds at once (make dev and make test in two shells)
# would each `rm -rf` the other's output. The build runs under an exclusive
# flock on $CACHE_ROOT/kube/build.lock (lib/go-build.sh); a second caller
# waits for it and then finds the first one's stamp and reuses its build.
#
# `build-kube.sh node` also builds kubelet and kube-scheduler (the one-node
# cluster of local-servers/kube-node.ts and `dev --node`), added to the same
# cached build; without the argument they are neither built nor required.
set -euo pipefail

WITH_NODE=0
[[ "${1:-}" == node ]] && WITH_NODE=1

K8S_VERSION="${K8S_VERSION:-1.36.3}"
# The go directive of k8s.io/kubernetes@v1.36.3's go.mod: the oldest Go that
# builds it. check-prereqs.sh reads this line; the build checks the real
# directive after downloading (so a K8S_VERSION override is checked too).
GO_MIN=1.26.0
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
OUT="$CACHE_ROOT/kube/v$K8S_VERSION"
STAMP="$OUT/.complete"

GB_NAME=build-kube
GB_DIR=kube
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-build.sh"

base_built() {
  [[ -f "$STAMP" && -x "$OUT/bin/kube-apiserver" && -x "$OUT/bin/etcd" && -x "$OUT/bin/kubectl" ]]
}
# kube-controller-manager came later: a cache built before it gets only that
# binary added (minutes), never a rebuild of the others.
kcm_built() {
  base_built && [[ -x "$OUT/bin/kube-controller-manager" ]]
}
node_built() {
  [[ -x "$OUT/bin/kubelet" && -x "$OUT/bin/kube-scheduler" ]]
}
built() {
  kcm_built && { ((WITH_NODE == 0)) || node_built; }
}

if built; then
  echo "$OUT/bin"
  exit 0
fi

gb_require_tools "Go >= 1.26 (apt-get install golang-go is too old; use the Go toolchain from go.dev or your distribution's backports)"
# One build at a time per cache: wait for a running one, then re-check its stamp.
gb_lock
if built; then
  echo "$OUT/bin"
  exit 0
fi

# A half-finished build (no stamp) is thrown away, never used.
ONLY_KCM=0
if base_built; then
  ONLY_KCM=1
  KCM_MISSING=1
  kcm_built && KCM_MISSING=0
else
  rm -rf "$OUT"
fi
mkdir -p "$OUT/bin"
gb_workdir

if ((ONLY_KCM)); then
  gb_say "adding $( ((KCM_MISSING)) && echo "kube-controller-manager ")$( ((WITH_NODE)) && echo "kubelet and kube-scheduler ")v$K8S_VERSION to the cached build; takes a few minutes"
else
  gb_say "building Kubernetes v$K8S_VERSION (kube-apiserver, kube-controller-manager, kubectl, etcd); first run takes 5-20 minutes"
fi
# The Go this Kubernetes needs is its go.mod's go directive (1.36.x: go 1.26.0).
gb_module k8s.io/kubernetes "v$K8S_VERSION"
GOMOD_FILE="$GB_GOMOD"
GO_REQUIRED="$GB_GO"
STAGING_MINOR="0.${K8S_VERSION#1.}"

# etcd: the version the apiserver's own module graph pins. Empty means the
# go.mod changed shape; building some other etcd silently would be worse.
ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2; exit}' "$GOMOD_FILE")"
[[ -n "$ETCD_VERSION" ]] ||
  gb_fail "k8s.io/kubernetes@v$K8S_VERSION's go.mod pins no go.etcd.io/etcd/server/v3 version; cannot choose an etcd to build"

cat >go.mod <<MOD
module egress-proxies.local/kube-build

go $GO_REQUIRED

require k8s.io/kubernetes v$K8S_VERSION
MOD
# Every staging module the kubernetes go.mod replaces points at its published tag.
grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$GOMOD_FILE" | awk '{print $1}' | while read -r mod; do
  echo "replace $mod => $mod v$STAGING_MINOR" >>go.mod
done

mkdir -p etcd
cat >etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >get.log 2>&1 ||
  gb_fail "cannot get go.etcd.io/etcd/server/v3@$ETCD_VERSION ($(tail -1 get.log))"
GOFLAGS=-mod=mod go mod tidy >tidy.log 2>&1 || { cat tidy.log >&2; exit 1; }

export CGO_ENABLED=0
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}"
LDFLAGS="${LDFLAGS%.*}"
if ((ONLY_KCM == 0)); then
  go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/kubectl" k8s.io/kubernetes/cmd/kubectl
  go build -trimpath -ldflags "-s -w" -o "$OUT/bin/etcd" ./etcd
  echo "k8s=v$K8S_VERSION etcd=$ETCD_VERSION" >"$STAMP"
fi
# Built under another name and renamed: a killed build never leaves a
# half-written binary that built() would take for a finished one.
build_renamed() {
  go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/.$1.tmp" "k8s.io/kubernetes/cmd/$1"
  mv "$OUT/bin/.$1.tmp" "$OUT/bin/$1"
}
[[ -x "$OUT/bin/kube-controller-manager" ]] || build_renamed kube-controller-manager
if ((WITH_NODE)); then
  [[ -x "$OUT/bin/kube-scheduler" ]] || build_renamed kube-scheduler
  [[ -x "$OUT/bin/kubelet" ]] || build_renamed kubelet
fi
echo "$OUT/bin"
