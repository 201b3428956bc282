/**
 * What the gateway reads from a crawler's request before it leases: the
 * credentials (the API token, then the username's options), the lease
 * target, and the set-up span the trace hook starts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { parseTraceparent, type TraceHook, type TraceSpan } from '../tracing/http.js';
import {
  decodeProxyAuthorization,
  GatewayCredentialsError,
  parseUsername,
  type ConnectionOptions,
} from './credentials.js';
import { Refusal } from './refusal.js';

const PROXY_AUTHENTICATE = { 'Proxy-Authenticate': 'Basic realm="egress-proxies"' };

/**
 * Checks the password against `token` (none configured: no check) and parses
 * the username; throws Refusal (407 or 400).
 */
export function admit(req: IncomingMessage, token: Buffer, maxLeaseTtlSeconds: number): ConnectionOptions {
  try {
    const credentials = decodeProxyAuthorization(req.headers['proxy-authorization']);
    if (token.length > 0) {
      if (!credentials)
        throw new GatewayCredentialsError('proxy credentials required (password: the API token)', 407);
      // Digests of both sides, so the comparison's time says nothing of the token's length either.
      if (!timingSafeEqual(sha256(Buffer.from(credentials.password)), sha256(token)))
        throw new GatewayCredentialsError('the proxy password is not the API token', 407);
    }
    return parseUsername(credentials?.username ?? '', maxLeaseTtlSeconds);
  } catch (error) {
    if (error instanceof GatewayCredentialsError) {
      throw new Refusal(
        error.status,
        error.message,
        error.status === 407 ? 'unauthorized' : 'bad_request',
        error.status === 407 ? PROXY_AUTHENTICATE : {},
      );
    }
    throw error;
  }
}

/** The lease target of a host: lowercase, brackets and a trailing dot dropped. */
export function hostOf(host: string): string {
  return host
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
}

/** Starts the connection's set-up span from the crawler's traceparent, when tracing is on. */
export function traceOf(
  hook: TraceHook | undefined,
  req: IncomingMessage,
  path: string,
): TraceSpan | undefined {
  if (!hook) return undefined;
  const traceparent = req.headers.traceparent;
  const header = Array.isArray(traceparent) ? traceparent[0] : traceparent;
  return hook({
    method: req.method ?? '',
    path,
    traceparent: header,
    trace: parseTraceparent(header),
  });
}

function sha256(bytes: Buffer): Buffer {
  return createHash('sha256').update(bytes).digest();
}
