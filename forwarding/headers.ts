/**
 * The header rules every forward proxy this product runs follows: the
 * gateway and the `local` provider's proxies. A proxy passes a message's
 * end-to-end headers on and drops the ones that belong to one connection
 * (RFC 9110 §7.6.1); it adds none of its own (no Via, no X-Forwarded-For,
 * like the Squid config's `via off`, `forwarded_for off`), so a target sees
 * only what the crawler sent.
 *
 * A bottom layer: pure, imports nothing.
 */

/** Headers that belong to one connection (RFC 9110 §7.6.1), never forwarded. */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/** A message's headers as Node's HTTP parser hands them over (lowercase names). */
export type MessageHeaders = Readonly<Record<string, string | string[] | undefined>>;

/** The names a message's Connection header lists: hop-by-hop for that one message too. */
export function connectionListed(headers: MessageHeaders): ReadonlySet<string> {
  return new Set(
    String(headers.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase()),
  );
}

/**
 * The headers a proxy passes on: all but the hop-by-hop ones and those in
 * `alsoDropped` (e.g. `connectionListed(headers)`).
 */
export function endToEndHeaders(
  headers: MessageHeaders,
  alsoDropped: ReadonlySet<string> = new Set(),
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || alsoDropped.has(name)) continue;
    out[name] = value;
  }
  return out;
}
