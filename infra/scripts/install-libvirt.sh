#!/usr/bin/env bash
# Installs Debian's libvirt, QEMU (software emulation is enough), qemu-img,
# OVMF (UEFI guests, the provider's default) and OpenSSH's server for the kvm provider's tests
# (tests/integration/kvm-provider.test.ts). Unlike squid these are installed
# with `apt-get install`: libvirtd needs its package's setup (users, groups,
# /etc/libvirt, the firmware descriptors) and nothing here starts a service
# on a machine without systemd as PID 1 (the package scripts do not; the
# test helper starts libvirtd, virtlogd and a private sshd itself).
#
# Idempotent: when every binary is present it only prints `ok`. Needs root
# (the tests run as root: root over SSH uses the libvirt socket without
# polkit). `apt-get update` runs only when a package is missing.
set -euo pipefail

# dnsmasq-base: the DHCP server of the real-guest test's own bridge (tests/helpers/guest-net.ts).
PACKAGES=(libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils openssh-server ovmf dnsmasq-base)
BINARIES=(libvirtd virtlogd virsh qemu-img qemu-system-x86_64 sshd ssh-keygen dnsmasq)

say() { echo "install-libvirt: $*" >&2; }

# OVMF ships no binary: its firmware descriptor is what libvirt's UEFI auto-selection reads.
FIRMWARE=/usr/share/qemu/firmware/60-edk2-x86_64.json

missing=0
for b in "${BINARIES[@]}"; do
  command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || missing=1
done
[[ -f $FIRMWARE ]] || missing=1
if [[ $missing -eq 0 ]]; then
  echo ok
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { say "missing packages and not root; run as root: apt-get install -y --no-install-recommends ${PACKAGES[*]}"; exit 1; }
command -v flock >/dev/null 2>&1 || { say "'flock' is not on PATH; apt-get install -y util-linux"; exit 1; }

# Other engineers' scripts may run apt at the same time: one at a time here,
# and apt's own lock is waited for rather than failed on.
exec 9>>/tmp/egress-proxies-install-libvirt.lock
flock 9
export DEBIAN_FRONTEND=noninteractive
say "installing ${PACKAGES[*]}"
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
for b in "${BINARIES[@]}"; do
  command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || { say "$b still missing after install"; exit 1; }
done
[[ -f $FIRMWARE ]] || { say "$FIRMWARE still missing after installing ovmf"; exit 1; }
echo ok
