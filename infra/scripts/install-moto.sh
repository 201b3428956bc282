#!/usr/bin/env bash
# Installs the pinned moto (its EC2 server: `moto_server`) from PyPI into a
# venv in the cache, never into the system, for the aws provider's tests
# (issue 59): the SDK talks to it over the loopback with real request
# signing. Prints the path of `moto_server`.
set -euo pipefail

MOTO_VERSION="${MOTO_VERSION:-5.2.6}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
VENV="$CACHE_ROOT/moto/$MOTO_VERSION"
STAMP="$VENV/.complete"

if [[ -f "$STAMP" && -x "$VENV/bin/moto_server" ]]; then
  echo "$VENV/bin/moto_server"
  exit 0
fi

PY="$(command -v python3 || true)"
[[ -n "$PY" ]] || { echo "install-moto: python3 is missing; apt-get install -y python3 python3-venv" >&2; exit 1; }
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" 2>/dev/null || { echo "install-moto: python3 cannot create a venv; apt-get install -y python3-venv" >&2; exit 1; }
# The [server] extra brings the Flask app behind moto_server; the EC2 backend itself needs no other extra.
if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION" >&2; then
  echo "install-moto: pip could not install moto[server]==$MOTO_VERSION from PyPI" >&2
  rm -rf "$VENV"
  exit 1
fi
[[ -x "$VENV/bin/moto_server" ]] || { echo "install-moto: the wheel did not provide bin/moto_server" >&2; exit 1; }
touch "$STAMP"
echo "$VENV/bin/moto_server"
