/**
 * The `proxmox` provider's config block, validated once. Pure: no I/O (the
 * token secret and the CA are files read at call time, so a Secret mounted
 * later or rotated is picked up without a restart).
 *
 *   proxmox:
 *     url: https://pve1.lan:8006
 *     tokenId: egress@pve!proxies
 *     tokenSecretFile: /etc/egress-proxies/proxmox/token
 *     caFile: /etc/egress-proxies/proxmox/pve-root-ca.pem
 *     machineTypes: { small: { cores: 1, memoryMiB: 1024 } }
 *     nodes: [{ name: pve1, templates: { debian-12: 9000 }, isoStorage: local }]
 *
 * See docs/providers/proxmox.md (section 15) for every field.
 */
import { z } from 'zod';
import { requireUniqueNames } from '../shared/unique-names.js';

/** PVE's node names (`pve-node`): a DNS label. They become URL path segments. */
export const PVE_NODE = /^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$/;
/** PVE storage and pool ids (`pve-storage-id`, `pve-poolid`). URL segments and volume ids. */
export const PVE_STORAGE_ID = /^[a-z][a-z0-9\-_.]*[a-z0-9]$/i;
/** A catalogue key (machine types, templates): plain characters. */
export const CATALOGUE_KEY = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** `USER@REALM!TOKENID`, PVE's token id grammar (userid with a token name). */
export const TOKEN_ID = /^[^\s:/@!=]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+$/;
/** A SHA-256 fingerprint: 32 bytes in hex, colons optional. */
const FINGERPRINT = /^(?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}$|^[0-9A-Fa-f]{64}$/;
/** Drives a cdrom may sit on, in PVE's names. */
const SEED_DRIVE = /^(?:ide[0-3]|sata[0-5]|scsi(?:[0-9]|[12][0-9]|30))$/;

export const DEFAULT_VMID_RANGE = { min: 100_000, max: 199_999 } as const;

const vmid = z.number().int().min(100, 'must be at least 100').max(999_999_999, 'must be at most 999999999');

const nodeSchema = z.strictObject({
  name: z.string().regex(PVE_NODE, 'must be a PVE node name (letters, digits, dashes)'),
  /** placement.image -> the template's VMID on this node. */
  templates: z
    .record(z.string().regex(CATALOGUE_KEY, 'must be letters, digits, dots, dashes or underscores'), vmid)
    .refine((t) => Object.keys(t).length > 0, 'must name at least one template'),
  /** A storage with `iso` content on this node: where the NoCloud seeds go. */
  isoStorage: z.string().regex(PVE_STORAGE_ID, 'must be a PVE storage id'),
  /** Clones in flight on this node at once (PVE's storage locks time out under more). */
  maxConcurrentClones: z.number().int().min(1).max(32).default(2),
});

const machineTypeSchema = z.strictObject({
  cores: z.number().int().min(1, 'must be at least 1').max(512),
  memoryMiB: z.number().int().min(16, 'must be at least 16'),
});

export const proxmoxConfigSchema = z
  .strictObject({
    url: z.string().refine((u) => {
      try {
        const p = new URL(u);
        return p.protocol === 'https:' && p.hostname !== '' && (p.pathname === '/' || p.pathname === '');
      } catch {
        return false;
      }
    }, 'must be an https URL without a path (https://host:8006)'),
    tokenId: z.string().regex(TOKEN_ID, 'must be USER@REALM!TOKENID'),
    tokenSecretFile: z.string().min(1, 'is required'),
    caFile: z.string().min(1, 'is required (the cluster CA, /etc/pve/pve-root-ca.pem)'),
    fingerprint: z
      .string()
      .regex(FINGERPRINT, 'must be a SHA-256 fingerprint (64 hex digits, colons optional)')
      .transform((f) => f.replace(/:/g, '').toUpperCase())
      .optional(),
    pool: z.string().regex(PVE_STORAGE_ID, 'must be a PVE pool id').optional(),
    vmidRange: z
      .strictObject({ min: vmid, max: vmid })
      .refine((r) => r.min < r.max, 'min must be below max')
      .default({ ...DEFAULT_VMID_RANGE }),
    machineTypes: z
      .record(
        z.string().regex(CATALOGUE_KEY, 'must be letters, digits, dots, dashes or underscores'),
        machineTypeSchema,
      )
      .refine((m) => Object.keys(m).length > 0, 'must define at least one profile'),
    nodes: z.array(nodeSchema).min(1, 'must list at least one node'),
    ipconfig0: z.string().min(1).max(512).optional(),
    seedDrive: z.string().regex(SEED_DRIVE, 'must be ide0-3, sata0-5 or scsi0-30').default('ide3'),
    installGuestAgent: z.boolean().default(true),
    vendorData: z.string().optional(),
    callTimeoutSeconds: z.number().positive().max(600).default(30),
    taskTimeoutSeconds: z.number().positive().default(600),
    taskPollMillis: z.number().int().min(10).max(60_000).default(1000),
  })
  .superRefine((c, ctx) => requireUniqueNames(ctx, c.nodes, 'nodes', 'node'));

export type ProxmoxConfig = z.output<typeof proxmoxConfigSchema>;
export type ProxmoxNode = ProxmoxConfig['nodes'][number];
