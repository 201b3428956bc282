/**
 * The `list` provider's config block, and the pure parsing of a proxy list:
 * `host:port` or `host:port:user:pass` lines (the form proxy sellers
 * export), or JSON (an array of those strings, or of objects with host,
 * port, username, password). No I/O here.
 */
import { z } from 'zod';
import { shortDigest } from '../names.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export const listConfigSchema = z
  .strictObject({
    /** A static list (`host:port[:user:pass]` each). */
    entries: z.array(z.string().min(1)).min(1, 'must list at least one proxy').optional(),
    /** Or a list fetched over HTTP(S), refreshed every `refreshSeconds`. */
    url: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).optional(),
    format: z.enum(['lines', 'json']).default('lines'),
    refreshSeconds: z.number().int().min(1).max(86_400).default(300),
    requestTimeoutSeconds: z.number().positive().max(300).default(10),
    /** Where the claims (which Proxy has which entry) are kept: ConfigMaps in this namespace. */
    claimsNamespace: z
      .string()
      .max(63)
      .regex(DNS_LABEL, 'must be a lowercase DNS-1123 label')
      .default('egress-proxies'),
  })
  .superRefine((c, ctx) => {
    if ((c.entries === undefined) === (c.url === undefined))
      ctx.addIssue({ code: 'custom', path: [], message: 'set exactly one of entries and url' });
    c.entries?.forEach((line, i) => {
      const parsed = parseEntryLine(line);
      if ('problem' in parsed)
        ctx.addIssue({ code: 'custom', path: ['entries', i], message: parsed.problem });
    });
  });

export type ListConfig = z.output<typeof listConfigSchema>;

export interface ListEntry {
  host: string;
  port: number;
  username?: string;
  password?: string;
}

const HOST =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

function checkEntry(e: {
  host: unknown;
  port: unknown;
  username?: unknown;
  password?: unknown;
}): ListEntry | { problem: string } {
  if (typeof e.host !== 'string' || !HOST.test(e.host) || e.host.length > 253)
    return {
      problem: `host ${JSON.stringify(String(e.host).slice(0, 80))} is not a host name or IPv4 address`,
    };
  const port = typeof e.port === 'string' && /^\d+$/.test(e.port) ? Number(e.port) : e.port;
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65_535)
    return { problem: `port of ${e.host} is not in 1-65535` };
  const entry: ListEntry = { host: e.host.toLowerCase(), port };
  if (e.username !== undefined || e.password !== undefined) {
    // Never quoted: a list's credentials are secrets.
    if (typeof e.username !== 'string' || e.username === '' || /[:\r\n]/.test(e.username))
      return { problem: `the username of ${e.host}:${port} is empty or holds ":" or a line break` };
    if (typeof e.password !== 'string' || /[\r\n]/.test(e.password))
      return { problem: `the password of ${e.host}:${port} is missing or holds a line break` };
    entry.username = e.username;
    entry.password = e.password;
  }
  return entry;
}

/** One `host:port[:user:pass]` line. */
export function parseEntryLine(line: string): ListEntry | { problem: string } {
  const parts = line.trim().split(':');
  if (parts.length === 2) return checkEntry({ host: parts[0], port: parts[1] });
  if (parts.length >= 4)
    // A password may hold ":"; the name may not (Basic authentication).
    return checkEntry({
      host: parts[0],
      port: parts[1],
      username: parts[2],
      password: parts.slice(3).join(':'),
    });
  return { problem: 'expected host:port or host:port:user:pass' };
}

/** A whole list; any bad entry refuses it all (the last good list stays), naming the line. */
export function parseList(text: string, format: 'lines' | 'json'): ListEntry[] | { problem: string } {
  const entries: ListEntry[] = [];
  if (format === 'json') {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      return { problem: 'not JSON' };
    }
    if (!Array.isArray(raw)) return { problem: 'JSON list: expected an array' };
    for (const [i, item] of raw.entries()) {
      const e =
        typeof item === 'string'
          ? parseEntryLine(item)
          : item && typeof item === 'object'
            ? checkEntry(item as Record<string, unknown> as { host: unknown; port: unknown })
            : { problem: 'expected a string or an object' };
      if ('problem' in e) return { problem: `item ${i}: ${e.problem}` };
      entries.push(e);
    }
  } else {
    for (const [i, raw] of text.split(/\r?\n/).entries()) {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) continue;
      const e = parseEntryLine(line);
      if ('problem' in e) return { problem: `line ${i + 1}: ${e.problem}` };
      entries.push(e);
    }
  }
  if (entries.length === 0) return { problem: 'no entries' };
  return dedupe(entries);
}

/** The same proxy twice (same host, port and user) is one entry. */
function dedupe(entries: ListEntry[]): ListEntry[] {
  const seen = new Set<string>();
  return entries.filter((e) => {
    const k = entryKey(e);
    if (seen.has(k)) return false;
    seen.add(k);
    return true;
  });
}

/** What identifies an entry across refreshes: host, port and user (a new password is the same entry). */
export function entryKey(e: ListEntry): string {
  return `${e.host}:${e.port}:${e.username ?? ''}`;
}

/** The entry's digest in claims and IDs: no host, user or password in a name anyone lists. */
export function entryDigest(e: ListEntry): string {
  return shortDigest(entryKey(e));
}
