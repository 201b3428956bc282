#!/usr/bin/env bash
# Builds the images the one-node cluster runs, from Debian's packages, as
# OCI archives that local-servers/kube-node.ts imports into its containerd
# (no registry is reachable here, so nothing is ever pulled):
#
#   squid.oci.tar    egress-proxies.local/squid:debian12: Debian 12's squid on
#                    a minbase root (the kubernetes provider's command needs
#                    /bin/sh and squid, nothing else)
#   nosquid.oci.tar  egress-proxies.local/nosquid:debian12: the same root
#                    layer with /usr/sbin/squid deleted by a layer on top (a
#                    container that crashes on start, for the CrashLoopBackOff
#                    test; importing both unpacks the root once)
#   pause.oci.tar    egress-proxies.local/pause:1: the pod sandbox, a static Go
#                    program that sleeps until SIGTERM/SIGINT
#
# Cached under ~/.cache/egress-proxies/node-images/<sha256 of this script and
# its helpers>/; prints that directory on stdout, the build time on stderr.
# Needs root (mmdebstrap's root mode) and Go (for pause). The packages come
# from the Debian mirror this machine's apt uses (lib/apt-mirror.sh), or from
# NODE_IMAGE_MIRROR when it is set.
set -euo pipefail

SUITE=bookworm
say() { echo "build-node-images: $*" >&2; }

here="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")"
source "$here/lib/apt-mirror.sh"
key="$(cat "$here/build-node-images.sh" "$here/lib/oci-archive.py" | sha256sum | cut -c1-16)"
cache="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}/node-images/$key"

done_already() { [[ -f "$cache/.complete" ]]; }
if done_already; then
  echo "$cache"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || { say "needs root (mmdebstrap root mode); run as root"; exit 1; }
command -v mmdebstrap >/dev/null 2>&1 || { say "mmdebstrap missing; run infra/scripts/install-node.sh"; exit 1; }
command -v go >/dev/null 2>&1 || { say "'go' is not on PATH (pause is a Go program)"; exit 1; }
mkdir -p "$(dirname "$cache")"
exec 9>>"$(dirname "$cache")/.build-$key.lock"
flock 9
if done_already; then
  echo "$cache"
  exit 0
fi

# The mirror this machine's apt uses, or NODE_IMAGE_MIRROR.
MIRROR="$(apt_mirror "$SUITE" NODE_IMAGE_MIRROR)"
started=$(date +%s)
rm -rf "$cache"
mkdir -p "$cache"
work="$(mktemp -d "$(dirname "$cache")/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "mmdebstrap $SUITE minbase + squid from $MIRROR"
mmdebstrap --mode=root --variant=minbase --quiet \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/squid/errors/*' \
  --dpkgopt='path-include=/usr/share/squid/errors/templates/*' \
  --dpkgopt='path-include=/usr/share/squid/errors/en/*' \
  --include=squid \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$SUITE" "$work/root" "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main"

python3 "$here/lib/oci-archive.py" "$work/root" "$cache/squid.oci.tar" egress-proxies.local/squid:debian12 \
  --variant "$cache/nosquid.oci.tar=egress-proxies.local/nosquid:debian12=/usr/sbin/squid"

mkdir -p "$work/pause/root"
cat >"$work/pause/main.go" <<'GO'
// The pod sandbox: holds the pod's namespaces open until the runtime stops it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
GO
(cd "$work/pause" && printf 'module pause\n\ngo 1.21\n' >go.mod && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o root/pause .)
python3 "$here/lib/oci-archive.py" "$work/pause/root" "$cache/pause.oci.tar" egress-proxies.local/pause:1 --cmd /pause

touch "$cache/.complete"
say "built in $(($(date +%s) - started)) s: $(du -sh "$cache" | cut -f1)"
echo "$cache"
