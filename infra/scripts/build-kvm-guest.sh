#!/usr/bin/env bash
# Builds the kvm provider's test guest: a small Debian 12 disk made here from
# Debian's packages with mmdebstrap (kernel, cloud-init with NoCloud only,
# qemu-guest-agent, squid installed but not started, systemd-networkd doing
# DHCP on every wired NIC),
# bootable the way the provider's domain XML boots an image with
# `firmware: uefi` (OVMF, which starts EFI/BOOT/BOOTX64.EFI from the ESP:
# here systemd-boot, whose single entry boots the kernel with root=LABEL=root).
#
# No loop devices and no mounts: the root filesystem is made from the
# directory with `mkfs.ext4 -d`, the ESP with mtools, and the two are copied
# into a GPT laid out by sfdisk; qemu-img compresses the result to qcow2.
# The guest never needs the internet (everything is in the image). The
# packages come from the Debian mirror this machine's apt uses
# (lib/apt-mirror.sh), or from KVM_GUEST_MIRROR when it is set.
#
# Cached under ~/.cache/egress-proxies/kvm-guest/<sha256 of this script>/:
# a changed script builds a new image, an unchanged one is reused. Prints the
# image's path on stdout (and its sha256 next to it in <image>.sha256); the
# build time goes to stderr. Needs root (mmdebstrap's root mode, apt-get for
# its own tools); `apt-get update` runs only when a tool is missing.
set -euo pipefail

SUITE=bookworm
ESP_MIB=96
TOOLS=(mmdebstrap mtools dosfstools e2fsprogs fdisk qemu-utils)
TOOL_BINARIES=(mmdebstrap mcopy mkfs.vfat mkfs.ext4 sfdisk qemu-img)

say() { echo "build-kvm-guest: $*" >&2; }

script_path="$(readlink -f "${BASH_SOURCE[0]}")"
source "$(dirname "$script_path")/lib/apt-mirror.sh"
key="$(sha256sum "$script_path" | cut -c1-16)"
cache="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}/kvm-guest/$key"
image="$cache/debian-12-egress-guest.qcow2"

if [[ -f "$image" && -f "$image.sha256" ]]; then
  echo "$image"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { say "needs root (mmdebstrap root mode); run as root"; exit 1; }
command -v flock >/dev/null 2>&1 || { say "'flock' is not on PATH; apt-get install -y util-linux"; exit 1; }
mkdir -p "$(dirname "$cache")"
# One build per key at a time; a second caller waits, then finds the image.
exec 9>>"$(dirname "$cache")/.build-$key.lock"
flock 9
if [[ -f "$image" && -f "$image.sha256" ]]; then
  echo "$image"
  exit 0
fi

started=$(date +%s)
missing=0
for b in "${TOOL_BINARIES[@]}"; do
  command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" || -x "/sbin/$b" ]] || missing=1
done
if [[ $missing -eq 1 ]]; then
  # Other scripts may run apt at the same time: apt's lock is waited for.
  exec 8>>/tmp/egress-proxies-install-libvirt.lock
  flock 8
  export DEBIAN_FRONTEND=noninteractive
  say "installing ${TOOLS[*]}"
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${TOOLS[@]}" >/dev/null
  flock -u 8
fi
export PATH="$PATH:/usr/sbin:/sbin"
# The mirror this machine's apt uses, or KVM_GUEST_MIRROR.
MIRROR="$(apt_mirror "$SUITE" KVM_GUEST_MIRROR)"

work="$(mktemp -d "$(dirname "$cache")/.build-$key.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"

# The guest's own configuration, written before the packages' scripts run
# where that matters (datasource list), the rest after.
customize=$(
  cat <<'EOF'
set -e
r="$1"
# NoCloud only: no probing of cloud metadata services that are not there.
mkdir -p "$r/etc/cloud/cloud.cfg.d"
cat >"$r/etc/cloud/cloud.cfg.d/90-egress-proxies.cfg" <<'CFG'
datasource_list: [NoCloud, None]
# systemd-networkd below brings every wired NIC up with DHCP; cloud-init's
# renderer would need ifupdown or netplan, which this image leaves out.
network: {config: disabled}
# No SSH server in this image: no host keys to make.
ssh_genkeytypes: []
ssh_deletekeys: false
# The image carries no locales but C.UTF-8 (cloud-init's default en_US.UTF-8 fails).
locale: C.UTF-8
# Only the modules a proxy's user-data uses (files, users, commands,
# scripts, CA certificates): every stage imports and runs what it lists, and
# under software emulation the unused ones (growpart, grub-dpkg, locale, apt,
# keys to console...) cost 10-15 s of a boot.
cloud_init_modules: [seed_random, bootcmd, write_files, set_hostname, update_hostname, update_etc_hosts, ca_certs, users_groups]
cloud_config_modules: [runcmd]
cloud_final_modules: [write_files_deferred, scripts_vendor, scripts_per_once, scripts_per_boot, scripts_per_instance, scripts_user, final_message]
CFG
mkdir -p "$r/etc/systemd/network"
cat >"$r/etc/systemd/network/20-wired.network" <<'NET'
[Match]
Name=en* eth*

[Network]
DHCP=ipv4

[DHCPv4]
# The bridge's dnsmasq and libvirt's leases key on the MAC; keep it so.
ClientIdentifier=mac
NET
chroot "$r" systemctl enable systemd-networkd.service >/dev/null 2>&1
# Nothing waits for "online": the guest serves whatever address it gets.
chroot "$r" systemctl mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
  e2scrub_all.timer e2scrub_reap.service fstrim.timer man-db.timer >/dev/null 2>&1 || true
echo 'LABEL=root / ext4 defaults,noatime 0 1' >"$r/etc/fstab"
echo egress-guest >"$r/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 egress-guest\n::1 localhost ip6-localhost ip6-loopback\n' >"$r/etc/hosts"
# Not the build machine's resolvers: the guest has none unless DHCP or the user-data gives one
# (Squid waits on an unreachable resolver at start).
: >"$r/etc/resolv.conf"
# A fresh machine-id per boot of a new instance (systemd writes it at first boot).
: >"$r/etc/machine-id"
rm -f "$r/var/lib/dbus/machine-id"
# Squid is installed but not started: the Proxy's user-data writes its
# configuration and starts it (one start, not a default one then a restart).
chroot "$r" systemctl disable squid.service >/dev/null 2>&1
# systemd starts both from their own units. Without the SysV scripts beside
# them, `systemctl enable` (the user-data's for Squid, the vendor-data's for the
# agent) does not run update-rc.d, a Perl script that takes 10-15 s under
# software emulation.
rm -f "$r/etc/init.d/squid" "$r/etc/init.d/qemu-guest-agent"
# Serial console for `virsh console` and the domain's log.
chroot "$r" systemctl enable serial-getty@ttyS0.service >/dev/null 2>&1 || true
rm -rf "$r/var/cache/apt/"*.bin "$r/var/lib/apt/lists/"* "$r/var/log/"*.log
EOF
)

# Before the kernel's package makes its initramfs: only what this guest's
# disk and its NoCloud seed need (a smaller initramfs unpacks faster under software
# emulation; the seed's cdrom is there before cloud-init looks for it).
essential=$(
  cat <<'EOF'
set -e
mkdir -p "$1/etc/initramfs-tools/conf.d"
echo 'MODULES=list' >"$1/etc/initramfs-tools/conf.d/egress-proxies.conf"
printf '%s\n' virtio_pci virtio_blk virtio_scsi sr_mod isofs ext4 >>"$1/etc/initramfs-tools/modules"
EOF
)

say "mmdebstrap $SUITE from $MIRROR"
mmdebstrap --mode=root --variant=apt --quiet \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/squid/errors/*' \
  --dpkgopt='path-include=/usr/share/squid/errors/templates/*' \
  --dpkgopt='path-include=/usr/share/squid/errors/en/*' \
  --include=linux-image-cloud-amd64,initramfs-tools,systemd-sysv,udev,systemd-boot-efi,cloud-init,cloud-guest-utils,qemu-guest-agent,squid,ca-certificates,iproute2 \
  --essential-hook="$essential" \
  --customize-hook="$customize" \
  "$SUITE" "$root" "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main"

# The ESP: systemd-boot as the removable-media loader, one entry, no menu.
kernel=$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)
esp="$work/esp.img"
mkfs.vfat -C -n ESP "$esp" $((ESP_MIB * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/loader ::/loader/entries
mcopy -i "$esp" "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$esp" "$kernel" ::/vmlinuz
mcopy -i "$esp" "$initrd" ::/initrd.img
printf 'default debian.conf\ntimeout 0\n' >"$work/loader.conf"
# mitigations=off: the guest runs nothing but its own services, and under
# software emulation the speculative-execution mitigations only cost time.
printf 'title Debian (egress-proxies guest)\nlinux /vmlinuz\ninitrd /initrd.img\noptions root=LABEL=root rw console=ttyS0,115200 quiet mitigations=off\n' \
  >"$work/debian.conf"
mcopy -i "$esp" "$work/loader.conf" ::/loader/loader.conf
mcopy -i "$esp" "$work/debian.conf" ::/loader/entries/debian.conf

# The root filesystem from the directory, with room for the first boot's writes.
used_mib=$(du -sm --apparent-size "$root" | cut -f1)
root_mib=$((used_mib + used_mib / 4 + 128))
rootfs="$work/root.img"
mkfs.ext4 -q -L root -E root_owner=0:0 -d "$root" -O ^metadata_csum_seed "$rootfs" "${root_mib}M" >/dev/null

# GPT: 1 MiB gap, the ESP, the root partition (x86-64 root type), 1 MiB for the backup table.
disk="$work/disk.raw"
total_mib=$((1 + ESP_MIB + root_mib + 1))
truncate -s "${total_mib}M" "$disk"
sfdisk --quiet "$disk" <<EOF
label: gpt
start=1MiB, size=${ESP_MIB}MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=$((1 + ESP_MIB))MiB, size=${root_mib}MiB, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name=root
EOF
dd if="$esp" of="$disk" bs=1M seek=1 conv=notrunc status=none
dd if="$rootfs" of="$disk" bs=1M seek=$((1 + ESP_MIB)) conv=notrunc status=none

mkdir -p "$cache"
qemu-img convert -c -O qcow2 "$disk" "$work/out.qcow2"
sha256sum "$work/out.qcow2" | cut -d' ' -f1 >"$work/out.sha256"
mv "$work/out.qcow2" "$image"
mv "$work/out.sha256" "$image.sha256"
# Images of earlier versions of this script are never used again.
find "$(dirname "$cache")" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build-*' -exec rm -rf {} +
say "built $(du -h "$image" | cut -f1) image (${total_mib} MiB disk, kernel $(basename "$kernel")) in $(($(date +%s) - started)) s"
echo "$image"
