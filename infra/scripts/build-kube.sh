#!/usr/bin/env bash
# Builds kube-apiserver, etcd and kubectl from the Go module proxy, once per
# pinned version, into a cache outside the repository.
#
# Why a wrapper module: k8s.io/kubernetes replaces every k8s.io/<staging>
# module with ./staging/..., which `go install` refuses. A throwaway module
# that requires k8s.io/kubernetes and replaces each staging module with its
# published v0.X.Y builds the same code. etcd is built from the version the
# apiserver's own module graph pins (Debian's etcd-server 3.4.23 is below
# the supported minimum).
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.36.3}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
OUT="$CACHE_ROOT/kube/v$K8S_VERSION"
STAMP="$OUT/.complete"

if [[ -f "$STAMP" && -x "$OUT/bin/kube-apiserver" && -x "$OUT/bin/etcd" && -x "$OUT/bin/kubectl" ]]; then
  echo "$OUT/bin"
  exit 0
fi

command -v go >/dev/null 2>&1 || {
  echo "build-kube: 'go' is not on PATH; install Go >= 1.26 (apt-get install golang-go is too old; use the Go toolchain from go.dev or your distribution's backports)" >&2
  exit 1
}

# A half-finished build (no stamp) is thrown away, never used.
rm -rf "$OUT"
mkdir -p "$OUT/bin"
WORK="$(mktemp -d "$CACHE_ROOT/kube-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "build-kube: building Kubernetes v$K8S_VERSION (kube-apiserver, kubectl, etcd); first run takes 5-15 minutes" >&2
cd "$WORK"
if ! GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" >dl.json 2>dl.err; then
  echo "build-kube: cannot download k8s.io/kubernetes@v$K8S_VERSION from the Go module proxy ($(tail -1 dl.err))" >&2
  exit 1
fi
GOMOD_FILE="$(python3 -c 'import json,sys;print(json.load(open("dl.json"))["GoMod"])')"
STAGING_MINOR="0.${K8S_VERSION#1.}"
ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$GOMOD_FILE")"

cat >go.mod <<MOD
module egress-proxies.local/kube-build

go 1.26

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
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go mod tidy >tidy.log 2>&1 || { cat tidy.log >&2; exit 1; }

export CGO_ENABLED=0
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#1.}"
LDFLAGS="${LDFLAGS%.*}"
go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$LDFLAGS" -o "$OUT/bin/kubectl" k8s.io/kubernetes/cmd/kubectl
go build -trimpath -ldflags "-s -w" -o "$OUT/bin/etcd" ./etcd
echo "k8s=v$K8S_VERSION etcd=$ETCD_VERSION" >"$STAMP"
echo "$OUT/bin"
