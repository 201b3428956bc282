/**
 * Deterministic instance names (contract §6): `proxy-` plus the first 16
 * characters of the lowercase RFC 4648 base32 encoding (no padding) of the
 * SHA-256 of the Proxy UID. 22 characters, a valid DNS-1123 label, the same
 * on every call: create's idempotency depends on it.
 *
 * Uses node:crypto: call it from activities, not from workflow code.
 */
import { createHash } from 'node:crypto';

const BASE32_ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

/** Lowercase RFC 4648 base32 without padding. */
export function base32Lower(bytes: Uint8Array): string {
  let out = '';
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += BASE32_ALPHABET[(buffer >>> (bits - 5)) & 31];
      bits -= 5;
    }
    buffer &= (1 << bits) - 1;
  }
  if (bits > 0) out += BASE32_ALPHABET[(buffer << (5 - bits)) & 31];
  return out;
}

export const INSTANCE_NAME_PREFIX = 'proxy-';

export function instanceNameFromUid(uid: string): string {
  if (uid === '') throw new Error('instanceNameFromUid: empty UID');
  return INSTANCE_NAME_PREFIX + shortDigest(uid);
}

/** The first 16 lowercase base32 characters of the SHA-256 of `text`: a DNS-safe name part (80 bits). */
export function shortDigest(text: string): string {
  return base32Lower(createHash('sha256').update(text, 'utf8').digest()).slice(0, 16);
}
