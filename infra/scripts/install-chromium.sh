#!/usr/bin/env bash
# Installs Debian's Chromium headless shell (and a font, so screenshots
# have readable text) for the dashboard's browser tests
# (tests/integration/dashboard-browser.test.ts), driven by playwright-core:
# no browser download, the distribution's build with its security updates.
# Prints the browser's path.
#
# Idempotent: when the binary is present it only prints its path. Needs root
# for the install; `apt-get update` runs only when the package is missing.
set -euo pipefail

PACKAGES=(chromium-headless-shell fonts-dejavu-core)
BIN=/usr/bin/chromium-headless-shell

say() { echo "install-chromium: $*" >&2; }

if [[ -x $BIN && -d /usr/share/fonts/truetype/dejavu ]]; then
  echo "$BIN"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { say "missing packages and not root; run as root: apt-get install -y --no-install-recommends ${PACKAGES[*]}"; exit 1; }
command -v flock >/dev/null 2>&1 || { say "'flock' is not on PATH; apt-get install -y util-linux"; exit 1; }

# The same lock as the other apt installs: one apt at a time.
exec 9>>/tmp/egress-proxies-install-libvirt.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
if [[ ! -x $BIN || ! -d /usr/share/fonts/truetype/dejavu ]]; then
  say "installing ${PACKAGES[*]}"
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
fi
[[ -x $BIN ]] || { say "$BIN still missing after install"; exit 1; }
echo "$BIN"
