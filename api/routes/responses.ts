/**
 * How the lease API answers, shared by its route groups: JSON bodies with a
 * trailing newline (as the seed's Go encoder wrote them), the error shape
 * `{error, message}`, the Proxy's JSON form, and times as Go prints them.
 */
import type { Context } from 'hono';
import type { z } from 'zod';
import type { ProxyView } from '../proxy-catalog.js';
import type { ErrorCode, ProxyJson } from '../schemas.js';

export function toJson(p: ProxyView, activeLeases: number): ProxyJson {
  // Field order follows the documentation; attributes are omitted when empty.
  return {
    id: p.id,
    ip: p.host,
    port: p.port,
    ...(Object.keys(p.attributes).length > 0 ? { attributes: p.attributes } : {}),
    phase: p.phase as ProxyJson['phase'],
    healthy: p.healthy,
    latencyMillis: p.latencyMillis,
    activeLeases,
    maxLeases: p.maxLeases,
    // Beyond the seed, and only when they say something: the seed's fields stay as they were.
    ...(p.pool ? { pool: p.pool } : {}),
    ...(p.draining ? { draining: true } : {}),
  };
}

/** RFC 3339 in UTC with trailing fraction zeros trimmed, as Go prints a time.Time: 2026-08-11T22:05:00Z. */
export function rfc3339(epochMs: number): string {
  const iso = new Date(epochMs).toISOString();
  // toISOString always prints three fraction digits (a year past 9999 aside): trim the zeros.
  if (iso.length !== 24) return iso.replace(/(\.\d*?)0+Z$/, '$1Z').replace(/\.Z$/, 'Z');
  let end = 23;
  while (end > 20 && iso.charCodeAt(end - 1) === 0x30) end--;
  return `${iso.slice(0, end === 20 ? 19 : end)}Z`;
}

/** JSON with a trailing newline, as the seed's encoder wrote it. */
export function send<S extends z.ZodType>(c: Context, status: 200 | 201 | 409, body: z.output<S>): Response {
  return c.body(`${JSON.stringify(body)}\n`, status, { 'Content-Type': 'application/json' });
}

export function fail(
  c: Context,
  status: 400 | 401 | 403 | 404 | 405 | 429 | 500 | 503,
  error: ErrorCode,
  message: string,
): Response {
  return c.body(`${JSON.stringify({ error, message })}\n`, status, { 'Content-Type': 'application/json' });
}

export function notSynced(c: Context): Response {
  return fail(c, 503, 'unavailable', 'the proxy cache has not synced yet; retry shortly');
}
