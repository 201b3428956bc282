#!/usr/bin/env bash
# Installs the pinned moto (its EC2 server: `moto_server`) from PyPI into a
# venv in the cache, never into the system, for the aws provider's tests
# (issue 59): the SDK talks to it over the loopback with real request
# signing. Prints the path of `moto_server`.
set -euo pipefail
# shellcheck source=lib/pip-venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pip-venv.sh"

MOTO_VERSION="${MOTO_VERSION:-5.2.6}"
PV_NAME=moto
PV_VERSION="$MOTO_VERSION"
# The [server] extra brings the Flask app behind moto_server; the EC2 backend itself needs no other extra.
PV_SPEC="moto[server]==$MOTO_VERSION"
PV_BIN=moto_server
PV_HINT=""
pip_venv
