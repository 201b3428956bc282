#!/usr/bin/env bash
# Installs what the one-node cluster (local-servers/kube-node.ts, `dev --node`)
# runs beside the kubelet: Debian's containerd (1.6, which the kubelet 1.36
# still accepts: it falls back to its own cgroupDriver setting for a runtime
# without the RuntimeConfig call), runc, the CNI plugins (the node's pod
# network is their `bridge` + `host-local`), and mmdebstrap (the Squid and
# pause images are root filesystems built from Debian packages; nothing is
# pulled from a registry).
#
# Like install-libvirt.sh: installed with `apt-get install`, no service is
# started (the helper starts containerd itself, on its own socket and
# directories), idempotent (`ok` when every binary is present), root only,
# `apt-get update` only when something is missing.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins mmdebstrap iptables)
BINARIES=(containerd ctr runc mmdebstrap)
CNI_DIR=/usr/lib/cni

say() { echo "install-node: $*" >&2; }

have_all() {
  local b
  for b in "${BINARIES[@]}"; do
    command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || return 1
  done
  [[ -x $CNI_DIR/bridge && -x $CNI_DIR/host-local && -x $CNI_DIR/loopback ]]
}

if have_all; then
  echo ok
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { say "missing packages and not root; run as root: apt-get install -y --no-install-recommends ${PACKAGES[*]}"; exit 1; }
command -v flock >/dev/null 2>&1 || { say "'flock' is not on PATH; apt-get install -y util-linux"; exit 1; }

exec 9>>/tmp/egress-proxies-install-node.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
say "installing ${PACKAGES[*]}"
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
have_all || { say "containerd, runc or the CNI plugins (bridge, host-local, loopback in $CNI_DIR) still missing after install"; exit 1; }
echo ok
