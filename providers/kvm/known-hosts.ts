/**
 * OpenSSH known_hosts matching for the hosts this provider dials: plain and
 * hashed (`|1|salt|hmac`) host patterns, `[host]:port` for non-22 ports,
 * `*`/`?` wildcards, `!` negation and `@revoked`. Certificates
 * (`@cert-authority`) are not supported and never match.
 */
import { createHmac } from 'node:crypto';
import type { ServerHostKeyAlgorithm } from 'ssh2';

export interface KnownHostEntry {
  marker?: 'revoked' | 'cert-authority';
  patterns: string;
  keyType: string;
  key: string;
}

export function parseKnownHosts(text: string): KnownHostEntry[] {
  const out: KnownHostEntry[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const fields = line.split(/\s+/);
    let marker: KnownHostEntry['marker'];
    if (fields[0] === '@revoked' || fields[0] === '@cert-authority') {
      marker = fields[0] === '@revoked' ? 'revoked' : 'cert-authority';
      fields.shift();
    }
    if (fields.length < 3) continue;
    out.push({ ...(marker ? { marker } : {}), patterns: fields[0]!, keyType: fields[1]!, key: fields[2]! });
  }
  return out;
}

function glob(pattern: string, text: string): boolean {
  const re = new RegExp(
    '^' +
      pattern
        .replace(/[.+^${}()|[\]\\]/g, '\\$&')
        .replace(/\*/g, '.*')
        .replace(/\?/g, '.') +
      '$',
    'i',
  );
  return re.test(text);
}

/** What known_hosts calls the host: `name` on port 22, `[name]:port` otherwise. */
export function knownHostsName(host: string, port: number): string {
  return port === 22 ? host : `[${host}]:${port}`;
}

function matchesPatterns(patterns: string, name: string): boolean {
  if (patterns.startsWith('|1|')) {
    const [, , salt, hash] = patterns.split('|');
    if (salt === undefined || hash === undefined) return false;
    const mac = createHmac('sha1', Buffer.from(salt, 'base64')).update(name).digest('base64');
    return mac === hash;
  }
  let matched = false;
  for (const p of patterns.split(',')) {
    if (p.startsWith('!')) {
      if (glob(p.slice(1), name)) return false;
    } else if (glob(p, name)) matched = true;
  }
  return matched;
}

/** True when `keyBlob` (the SSH wire encoding of the host key) is listed for the host and not revoked. */
export function hostKeyAccepted(
  entries: KnownHostEntry[],
  host: string,
  port: number,
  keyBlob: Buffer,
): boolean {
  const name = knownHostsName(host, port);
  const key = keyBlob.toString('base64');
  if (entries.some((e) => e.marker === 'revoked' && e.key === key)) return false;
  return entries.some((e) => e.marker === undefined && e.key === key && matchesPatterns(e.patterns, name));
}

/** known_hosts key types → the SSH host-key algorithms that prove them, best first. */
const ALGORITHMS_OF: Record<string, ServerHostKeyAlgorithm[]> = {
  'ssh-ed25519': ['ssh-ed25519'],
  'ecdsa-sha2-nistp256': ['ecdsa-sha2-nistp256'],
  'ecdsa-sha2-nistp384': ['ecdsa-sha2-nistp384'],
  'ecdsa-sha2-nistp521': ['ecdsa-sha2-nistp521'],
  'ssh-rsa': ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'],
};

/**
 * The host-key algorithms to offer for this host: those of the key types
 * known_hosts lists for it, in the file's order. Without this the client
 * asks for its own first choice (ed25519), the server proves that key, and a
 * host listed only with its ecdsa or rsa key is refused. Undefined when no
 * entry names the host (the client's defaults; verification refuses anyway).
 */
export function hostKeyAlgorithms(
  entries: KnownHostEntry[],
  host: string,
  port: number,
): ServerHostKeyAlgorithm[] | undefined {
  const name = knownHostsName(host, port);
  const out: ServerHostKeyAlgorithm[] = [];
  for (const e of entries) {
    if (e.marker !== undefined || !matchesPatterns(e.patterns, name)) continue;
    for (const a of ALGORITHMS_OF[e.keyType] ?? []) if (!out.includes(a)) out.push(a);
  }
  return out.length > 0 ? out : undefined;
}
