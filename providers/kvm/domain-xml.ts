/**
 * Pure builders and parsers for libvirt XML: the domain, the overlay
 * volume, and the marks the provider keeps in the domain's `<metadata>`
 * (libvirt has no labels). Every value is XML-escaped; names are validated
 * by the caller as well.
 */

/** Our metadata element's namespace; `virsh metadata <domain> <uri>` reads it back. */
export const METADATA_URI = 'https://crawl.example.com/egress-proxies/kvm';
export const METADATA_KEY = 'egress';

export function xmlEscape(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&apos;');
}

function xmlUnescape(text: string): string {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&amp;/g, '&');
}

export interface InstanceMarks {
  managed: boolean;
  uid: string;
  installation: string;
  createdAt?: Date;
  namespace?: string;
  proxyName?: string;
}

/** The metadata element alone, as `virsh metadata --set` and the domain XML take it. */
export function marksElement(marks: InstanceMarks): string {
  const parts = [
    `<managed>${marks.managed ? 'true' : 'false'}</managed>`,
    `<uid>${xmlEscape(marks.uid)}</uid>`,
    `<installation>${xmlEscape(marks.installation)}</installation>`,
  ];
  if (marks.createdAt !== undefined) parts.push(`<createdAt>${marks.createdAt.toISOString()}</createdAt>`);
  if (marks.namespace !== undefined) parts.push(`<namespace>${xmlEscape(marks.namespace)}</namespace>`);
  if (marks.proxyName !== undefined) parts.push(`<proxyName>${xmlEscape(marks.proxyName)}</proxyName>`);
  return `<${METADATA_KEY}:instance xmlns:${METADATA_KEY}="${METADATA_URI}">${parts
    .map((p) => p.replace(/<(\/?)(\w+)>/g, `<$1${METADATA_KEY}:$2>`))
    .join('')}</${METADATA_KEY}:instance>`;
}

function childText(xml: string, local: string): string | undefined {
  // libvirt hands the element back with our prefix, another prefix or none.
  const m = new RegExp(
    `<(?:[A-Za-z_][\\w.-]*:)?${local}(?:\\s[^>]*)?>([^<]*)</(?:[A-Za-z_][\\w.-]*:)?${local}>`,
  ).exec(xml);
  if (m !== null) return xmlUnescape(m[1]!);
  if (new RegExp(`<(?:[A-Za-z_][\\w.-]*:)?${local}(?:\\s[^>]*)?/>`).test(xml)) return '';
  return undefined;
}

/** Reads our marks from the metadata element (or from a whole domain XML); undefined when absent. */
export function parseMarks(xml: string): InstanceMarks | undefined {
  const managed = childText(xml, 'managed');
  if (managed === undefined) return undefined;
  const createdText = childText(xml, 'createdAt');
  const created = createdText === undefined ? undefined : new Date(createdText);
  return {
    managed: managed.trim() === 'true',
    uid: childText(xml, 'uid') ?? '',
    installation: childText(xml, 'installation') ?? '',
    ...(created !== undefined && !Number.isNaN(created.getTime()) ? { createdAt: created } : {}),
  };
}

export interface DomainSpec {
  name: string;
  domainType: 'kvm' | 'qemu';
  vcpus: number;
  memoryMiB: number;
  firmware: 'uefi' | 'bios';
  overlayPath: string;
  seedPath: string;
  network: { kind: 'bridge'; bridge: string } | { kind: 'user' };
  marks: InstanceMarks;
}

/**
 * The seed's domain: q35, the overlay on virtio, the NoCloud seed on a cdrom
 * (on virtio-scsi, not the seed's SATA: Debian's cloud kernel, the one its
 * genericcloud images and our test guest boot, has no AHCI driver, so a guest
 * never saw a SATA seed and cloud-init fell back to no datasource),
 * one virtio NIC, a serial console, the guest-agent channel, a virtio RNG,
 * no graphics. UEFI (firmware auto-selection, secure boot off) unless the
 * image says bios. Host-passthrough CPU only under KVM: software emulation
 * has no host CPU to pass through.
 */
export function buildDomainXml(spec: DomainSpec): string {
  const e = xmlEscape;
  const os =
    spec.firmware === 'uefi'
      ? `<os firmware="efi"><type arch="x86_64" machine="q35">hvm</type><firmware><feature enabled="no" name="secure-boot"/></firmware><boot dev="hd"/></os>`
      : `<os><type arch="x86_64" machine="q35">hvm</type><boot dev="hd"/></os>`;
  const cpu = spec.domainType === 'kvm' ? `<cpu mode="host-passthrough"/>` : '';
  const nic =
    spec.network.kind === 'bridge'
      ? `<interface type="bridge"><source bridge="${e(spec.network.bridge)}"/><model type="virtio"/></interface>`
      : `<interface type="user"><model type="virtio"/></interface>`;
  return [
    `<domain type="${spec.domainType}">`,
    `<name>${e(spec.name)}</name>`,
    `<metadata>${marksElement(spec.marks)}</metadata>`,
    `<memory unit="MiB">${spec.memoryMiB}</memory>`,
    `<vcpu>${spec.vcpus}</vcpu>`,
    os,
    `<features><acpi/><apic/></features>`,
    cpu,
    `<on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>`,
    `<devices>`,
    `<disk type="file" device="disk"><driver name="qemu" type="qcow2"/><source file="${e(spec.overlayPath)}"/><target dev="vda" bus="virtio"/></disk>`,
    `<controller type="scsi" model="virtio-scsi"/>`,
    `<disk type="file" device="cdrom"><driver name="qemu" type="raw"/><source file="${e(spec.seedPath)}"/><target dev="sda" bus="scsi"/><readonly/></disk>`,
    nic,
    `<serial type="pty"><target port="0"/></serial><console type="pty"><target type="serial" port="0"/></console>`,
    `<channel type="unix"><target type="virtio" name="org.qemu.guest_agent.0"/></channel>`,
    `<rng model="virtio"><backend model="random">/dev/urandom</backend></rng>`,
    `</devices>`,
    `</domain>`,
  ]
    .filter((l) => l !== '')
    .join('\n');
}

/** The overlay volume: qcow2 over the base image, capacity spelled in bytes (libvirt's G vs GB ambiguity). */
export function buildOverlayVolumeXml(v: {
  name: string;
  capacityBytes: number;
  basePath: string;
  baseFormat: 'qcow2' | 'raw';
}): string {
  return [
    `<volume type="file">`,
    `<name>${xmlEscape(v.name)}</name>`,
    `<capacity unit="bytes">${v.capacityBytes}</capacity>`,
    `<target><format type="qcow2"/></target>`,
    `<backingStore><path>${xmlEscape(v.basePath)}</path><format type="${v.baseFormat}"/></backingStore>`,
    `</volume>`,
  ].join('\n');
}

/** A raw volume of `capacityBytes` (seed ISOs, base images, markers) to upload into. */
export function buildRawVolumeXml(name: string, capacityBytes: number): string {
  return `<volume type="file"><name>${xmlEscape(name)}</name><capacity unit="bytes">${capacityBytes}</capacity><target><format type="raw"/></target></volume>`;
}

/** MAC addresses of the domain's NICs, from its XML (for ARP lookups). */
export function macAddresses(domainXml: string): string[] {
  const out: string[] = [];
  for (const m of domainXml.matchAll(/<mac address=['"]([0-9a-fA-F:]{17})['"]/g))
    out.push(m[1]!.toLowerCase());
  return out;
}
