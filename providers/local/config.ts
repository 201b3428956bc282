/**
 * The `local` provider's config block and its pure helpers (loopback CIDR
 * arithmetic, address allocation order). No I/O here.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { egressConfigSchema } from '../shared/egress-config.js';

export const FAILURE_MODES = ['none', 'quota', 'permanent', 'transient'] as const;
export type FailureMode = (typeof FAILURE_MODES)[number];

export const DEFAULT_ADDRESS_RANGE = '127.77.0.0/16';

export interface LoopbackRange {
  /** First address of the block, as a 32-bit unsigned integer. */
  base: number;
  prefix: number;
  /** Number of addresses in the block. */
  size: number;
}

/**
 * Parses `a.b.c.d/n` inside 127.0.0.0/8 with 8 <= n <= 30 and host bits zero.
 * Returns an error message (no field path: the caller adds it) or the range.
 */
export function parseLoopbackCidr(text: string): LoopbackRange | string {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  if (m === null) return `"${text}" is not an IPv4 CIDR like ${DEFAULT_ADDRESS_RANGE}`;
  const octets = m.slice(1, 5).map(Number);
  if (octets.some((o) => o > 255)) return `"${text}" has an octet above 255`;
  const prefix = Number(m[5]);
  if (octets[0] !== 127 || prefix < 8)
    return `"${text}" is not inside 127.0.0.0/8 (everything local listens on the loopback only)`;
  if (prefix > 30) return `"${text}" is too small (prefix at most /30)`;
  const [a, b, c, d] = octets as [number, number, number, number];
  const base = ((a << 24) | (b << 16) | (c << 8) | d) >>> 0;
  const size = 2 ** (32 - prefix);
  if (base % size !== 0)
    return `"${text}" has host bits set (did you mean ${formatIPv4(base - (base % size))}/${prefix}?)`;
  return { base, prefix, size };
}

export function formatIPv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export function parseIPv4(text: string): number | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
  if (m === null) return undefined;
  const o = m.slice(1, 5).map(Number);
  if (o.some((x) => x > 255)) return undefined;
  return ((o[0]! << 24) | (o[1]! << 16) | (o[2]! << 8) | o[3]!) >>> 0;
}

/** 127.0.0.1 is what everything else on the machine uses; never hand it out. */
const RESERVED = parseIPv4('127.0.0.1')!;

/**
 * Usable host addresses of the range, in the order `create` tries them for
 * `key` (the provider passes the instance name and the spec hash): starting
 * at a slot derived from the key's SHA-256 (so the same key usually gets its
 * old address back, and keys spread over the range), then upwards with
 * wrap-around. Skips the block's first and last address and 127.0.0.1. A
 * generator: a /8 has 16 million entries.
 */
export function* candidateAddresses(range: LoopbackRange, key: string): Generator<string> {
  const first = range.base + 1;
  const count = range.size - 2;
  const start = createHash('sha256').update(key, 'utf8').digest().readUInt32BE(0) % count;
  for (let i = 0; i < count; i++) {
    const n = first + ((start + i) % count);
    if (n !== RESERVED) yield formatIPv4(n);
  }
}

export function isInRange(range: LoopbackRange, address: string): boolean {
  const n = parseIPv4(address);
  return n !== undefined && n >= range.base && n < range.base + range.size;
}

export const localConfigSchema = z.strictObject({
  /** Where instance records live. Default: `<stateRoot>/local/<provider name>` from the composition root. */
  stateDir: z.string().min(1).optional(),
  /** Loopback block instance addresses are allocated from. */
  addressRange: z
    .string()
    .default(DEFAULT_ADDRESS_RANGE)
    .superRefine((value, ctx) => {
      const parsed = parseLoopbackCidr(value);
      if (typeof parsed === 'string') ctx.addIssue({ code: 'custom', message: parsed });
    }),
  /** An instance reports Provisioning for this long after create (a VM's boot window). */
  startDelaySeconds: z.number().min(0).max(86_400).default(0),
  /** Every create throws this class: exercises error paths with no special code path. */
  failureMode: z.enum(FAILURE_MODES).default('none'),
  /** Let instances dial targets outside 127.0.0.0/8, as `egress` allows. Off by default: nothing leaves the machine. */
  allowNonLoopbackEgress: z.boolean().default(false),
  /** With allowNonLoopbackEgress, where instances may go off the loopback (providers/shared/egress-config.ts). */
  egress: egressConfigSchema.prefault({}),
  /** Upper bound of each operation's own I/O (the caller's signal can only shorten it). */
  operationTimeoutSeconds: z.number().positive().max(600).default(10),
});

export type LocalConfig = z.output<typeof localConfigSchema>;
