/**
 * CIDR ranges as cloud firewalls echo them (the gcp firewall rule, the aws
 * security group): one canonical text per range, so a configured range and
 * the backend's copy of it compare equal. Pure.
 */
import { isIP } from 'node:net';

function ipValue(addr: string, family: 4 | 6): bigint {
  if (family === 4) return addr.split('.').reduce((v, o) => (v << 8n) | BigInt(Number(o)), 0n);
  let text = addr;
  // An embedded IPv4 tail (::ffff:1.2.3.4) is two groups.
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)?.[1];
  if (v4 !== undefined) {
    const n = ipValue(v4, 4);
    text = `${text.slice(0, -v4.length)}${(n >> 16n).toString(16)}:${(n & 0xffffn).toString(16)}`;
  }
  const [head = '', tail] = text.split('::') as [string, string | undefined];
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const all = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return all.reduce((v, g) => (v << 16n) | BigInt(parseInt(g, 16)), 0n);
}

/**
 * `address/prefix` with no host bits set, in canonical text (IPv6
 * lowercased and compressed, as GCE and EC2 echo it), or undefined.
 */
export function canonicalCidr(text: string): string | undefined {
  const m = /^([^/]+)\/(0|[1-9]\d{0,2})$/.exec(text);
  if (m === null) return undefined;
  const family = isIP(m[1]!);
  if (family !== 4 && family !== 6) return undefined;
  const bits = family === 4 ? 32 : 128;
  const prefix = Number(m[2]);
  if (prefix > bits) return undefined;
  const host = (1n << BigInt(bits - prefix)) - 1n;
  if ((ipValue(m[1]!, family) & host) !== 0n) return undefined;
  const address = family === 4 ? m[1]! : new URL(`http://[${m[1]!}]/`).hostname.slice(1, -1);
  return `${address}/${prefix}`;
}
