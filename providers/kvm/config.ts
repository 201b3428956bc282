/**
 * The `kvm` provider's config block: the seed's `kvm` block field for field
 * (files/internal/provider/config_kvm.go), validated once. Pure: no I/O.
 *
 *   kvm:
 *     sshKeyFile: /etc/egress-proxies/kvm/id_ed25519
 *     knownHostsFile: /etc/egress-proxies/kvm/known_hosts   # unless insecureIgnoreHostKey
 *     images: { debian-13: { url: https://..., sha256: ..., format: qcow2, firmware: uefi } }
 *     machineTypes: { small: { vcpus: 1, memoryMiB: 1024 } }
 *     hosts: [{ name: nas1, address: nas1.lan:22, user: virt, bridge: br0 }]
 *
 * Two additive per-host fields that the seed did not have (both default to
 * the seed's behaviour): `domainType` (`qemu` for hosts without usable KVM,
 * such as CI) and `network` (`user` for QEMU user-mode networking instead of
 * the bridge). See docs/providers/kvm.md.
 */
import { z } from 'zod';
import { requireUniqueNames } from '../shared/unique-names.js';

/**
 * Config names that end up inside identifiers: a host name is a segment of the
 * providerID `hosts/<host>/domains/<name>` and an image key a volume name.
 * A slash, a space or a quote in either would make an ID that never parses
 * again or a name the remote shell must interpret.
 */
export const KVM_IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
const IDENTIFIER_MESSAGE =
  'must be letters, digits, dots, dashes or underscores, starting with a letter or digit';

/** libvirt pool and bridge names, SSH user names: a conservative set every shell and libvirt accept as is. */
const SAFE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$/;
/** An absolute path of plain characters (the libvirt socket). */
const SAFE_PATH = /^\/[A-Za-z0-9_./-]{1,255}$/;

export const DEFAULT_SOCKET = '/var/run/libvirt/libvirt-sock';
export const DEFAULT_POOL = 'default';
export const DEFAULT_DISK_SIZE_GB = 10;

export function isHttpUrl(text: string): boolean {
  try {
    const u = new URL(text);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== '';
  } catch {
    return false;
  }
}

const imageSchema = z.strictObject({
  url: z.string().refine(isHttpUrl, 'must be an http(s) URL'),
  sha256: z
    .string()
    .regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hex characters')
    .transform((s) => s.toLowerCase())
    .optional(),
  format: z.enum(['qcow2', 'raw']).default('qcow2'),
  firmware: z.enum(['uefi', 'bios']).default('uefi'),
});

const machineTypeSchema = z.strictObject({
  vcpus: z.number().int().positive('must be > 0').max(1024),
  memoryMiB: z.number().int().positive('must be > 0'),
});

const hostSchema = z
  .strictObject({
    name: z.string().regex(KVM_IDENTIFIER, `${IDENTIFIER_MESSAGE} (it becomes part of the providerID)`),
    address: z
      .string()
      .min(1, 'is required')
      .refine((a) => parseAddress(a) !== undefined, 'must be host:port (or [ipv6]:port)'),
    user: z.string().regex(SAFE_NAME, 'must be a plain user name'),
    socket: z
      .string()
      .regex(SAFE_PATH, 'must be an absolute path of plain characters')
      .default(DEFAULT_SOCKET),
    pool: z.string().regex(SAFE_NAME, 'must be a plain libvirt pool name').default(DEFAULT_POOL),
    bridge: z.string().regex(SAFE_NAME, 'must be a plain interface name').optional(),
    /** Ours, not the seed's: `qemu` runs the guest under software emulation (hosts without KVM). */
    domainType: z.enum(['kvm', 'qemu']).default('kvm'),
    /** Ours, not the seed's: `user` gives the VM QEMU user-mode networking instead of the bridge. */
    network: z.enum(['bridge', 'user']).default('bridge'),
    /**
     * Ours, not the seed's: the dnsmasq lease file of the bridge's DHCP server
     * on this host, read when neither the host's ARP table nor the guest agent
     * gives the guest's address (a guest without the agent on a bridged LAN).
     */
    dhcpLeasesFile: z.string().regex(SAFE_PATH, 'must be an absolute path of plain characters').optional(),
  })
  .superRefine((h, ctx) => {
    if (h.network === 'bridge' && h.bridge === undefined)
      ctx.addIssue({ code: 'custom', path: ['bridge'], message: 'is required (unless network is "user")' });
  });

export const kvmConfigSchema = z
  .strictObject({
    sshKeyFile: z.string().min(1, 'is required'),
    knownHostsFile: z.string().min(1).optional(),
    insecureIgnoreHostKey: z.boolean().default(false),
    diskSizeGb: z.number().int().min(1, 'must be at least 1').default(DEFAULT_DISK_SIZE_GB),
    installGuestAgent: z.boolean().default(true),
    vendorData: z.string().optional(),
    images: z.record(z.string().regex(KVM_IDENTIFIER, IDENTIFIER_MESSAGE), imageSchema).default({}),
    machineTypes: z
      .record(z.string().regex(KVM_IDENTIFIER, IDENTIFIER_MESSAGE), machineTypeSchema)
      .refine((m) => Object.keys(m).length > 0, 'must define at least one profile'),
    hosts: z.array(hostSchema).min(1, 'must list at least one host'),
    /** Upper bound of one remote command (not of an image download). */
    callTimeoutSeconds: z.number().positive().max(600).default(30),
    /** Upper bound of one base-image download and upload. */
    downloadTimeoutSeconds: z.number().positive().default(1800),
  })
  .superRefine((c, ctx) => {
    if (c.knownHostsFile === undefined && !c.insecureIgnoreHostKey)
      ctx.addIssue({
        code: 'custom',
        path: ['knownHostsFile'],
        message: 'is required unless insecureIgnoreHostKey is true',
      });
    requireUniqueNames(ctx, c.hosts, 'hosts', 'host');
  });

export type KvmConfig = z.output<typeof kvmConfigSchema>;
export type KvmHost = KvmConfig['hosts'][number];
export type KvmImage = KvmConfig['images'][string];

/** `host:port` or `[v6]:port` → parts; undefined when malformed. */
export function parseAddress(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})$/.exec(address);
  if (m === null) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: (m[1] ?? m[2])!, port };
}
