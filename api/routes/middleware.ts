/**
 * The lease API's middleware: the request log and tracing seam, the bearer
 * token check (with the seed's clean-path redirects behind it), the body
 * limit, and the answer to a thrown error.
 */
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Logger } from 'pino';
import { cleanPathLocation, requestTarget, rewrittenByWhatwg, temporaryRedirect } from '../clean-path.js';
import { LeaseStoreUnavailableError } from '../lease-store.js';
import { parseTraceparent, type TraceHook } from '../../tracing/http.js';
import type { TenantDirectory } from '../../tenants/directory.js';
import { clientKey, type GuessLimiter } from '../../tenants/guess-limiter.js';
import type { TenantRates } from '../../tenants/rate.js';
import type { Tenant } from '../../tenants/tenants.js';
import { fail } from './responses.js';

export const MAX_BODY_BYTES = 64 * 1024;

/** Paths served without a bearer token. */
export const AUTH_EXEMPT = new Set(['/healthz', '/metrics']);

/**
 * Outermost middleware: the tracing seam and one log line per request
 * (liveness probes and scrapes are not logged). Also the last line of
 * defence: something thrown that is not an Error escapes Hono's onError,
 * and is turned into the same 500 here.
 */
export function requestLog(logger: Logger, traceHook: TraceHook | undefined): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now();
    const traceparent = c.req.header('traceparent');
    const trace = parseTraceparent(traceparent);
    const span = traceHook?.({ method: c.req.method, path: c.req.path, traceparent, trace });
    try {
      await next();
    } catch (err) {
      c.res = failure(logger, c, err);
    }
    const status = c.res.status;
    span?.end(status);
    if (!AUTH_EXEMPT.has(c.req.path)) {
      logger.info(
        {
          method: c.req.method,
          path: c.req.path,
          client: clientOf(c),
          ...(c.get('tenant') ? { tenant: c.get('tenant').name } : {}),
          status,
          durationMs: Math.round((performance.now() - started) * 1000) / 1000,
          ...(trace ? { traceId: trace.traceId, parentSpanId: trace.parentId } : {}),
        },
        'request',
      );
    }
  };
}

/**
 * The answer to a thrown error: the lease store being unreachable is a 503
 * the client may retry (the store guarantees no slot was handed out in a
 * reply it did not give); anything else is a 500.
 */
export function failure(logger: Logger, c: Context, err: unknown): Response {
  if (err instanceof LeaseStoreUnavailableError) {
    logger.warn({ method: c.req.method, path: c.req.path, reason: err.message }, 'lease store unavailable');
    return fail(c, 503, 'unavailable', 'the lease store is unreachable; retry shortly');
  }
  logger.error({ err, method: c.req.method, path: c.req.path }, 'lease API handler failed');
  return fail(c, 500, 'internal', 'internal server error');
}

declare module 'hono' {
  interface ContextVariableMap {
    /** The tenant whose token the request carried (the open tenant with no auth). */
    tenant: Tenant;
  }
}

/** What the token check reads: who may call, and what guessing costs. */
export interface ApiAuth {
  tenants: TenantDirectory;
  guesses: GuessLimiter;
  rates: TenantRates;
}

/**
 * The token check and the seed's clean-path redirects, in the seed's order:
 * its router sat behind its token check, which looked at the path as sent,
 * so "//healthz" needs the token before it is redirected. The token names
 * the tenant (tenants/); a wrong one is a 401 that closes the connection,
 * and an address past its wrong tokens per minute gets 429 unchecked.
 * `isPublic` names more paths served with no token (the dashboard's page).
 */
export function authAndCleanPaths(auth: ApiAuth, isPublic?: (path: string) => boolean): MiddlewareHandler {
  return async (c, next) => {
    const target = requestTarget(c);
    const location = cleanPathLocation(target);
    const exempt = location === undefined && (AUTH_EXEMPT.has(c.req.path) || isPublic?.(c.req.path) === true);
    if (auth.tenants.open) {
      c.set('tenant', auth.tenants.authenticate(undefined)!);
    } else if (!exempt) {
      const client = clientOf(c);
      const wait = auth.guesses.blocked(client);
      if (wait) {
        c.header('Retry-After', String(wait.retryAfterSeconds));
        c.header('Connection', 'close');
        return fail(c, 429, 'too_many_requests', 'too many invalid tokens from this address; retry later');
      }
      const header = c.req.header('Authorization');
      const tenant = header?.startsWith('Bearer ')
        ? auth.tenants.authenticate(header.slice('Bearer '.length))
        : undefined;
      if (!tenant) {
        if (header !== undefined) auth.guesses.failed(client);
        // The next guess costs a new connection.
        c.header('Connection', 'close');
        return fail(c, 401, 'unauthorized', 'missing or invalid bearer token');
      }
      c.set('tenant', tenant);
    }
    if (location !== undefined) return temporaryRedirect(c, location);
    if (rewrittenByWhatwg(target)) {
      return fail(c, 404, 'not_found', `no route for ${c.req.method} ${c.req.path}`);
    }
    await next();
  };
}

/** The caller's address as its connection shows it (an IPv4-mapped address as IPv4); '' when unknown. */
export function clientOf(c: Context): string {
  return clientKey((c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket.remoteAddress);
}

/** The 64 KiB body limit with the message Go's http.MaxBytesReader gives the seed's decoder. */
export function limitBody(): MiddlewareHandler {
  return boundedBody(
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: (c) => fail(c, 400, 'invalid_body', 'http: request body too large'),
    }),
  );
}

/** The body as text, or the 400 to answer when it cannot be read. */
export async function readBody(c: Context): Promise<string | Response> {
  try {
    return await c.req.text();
  } catch {
    return fail(c, 400, 'invalid_body', 'could not read the request body');
  }
}

/**
 * Hono's bodyLimit reads `c.req.raw.body` first, which makes
 * @hono/node-server build a full Web Request with a stream over the socket;
 * that was a fifth of the acquire path. When Content-Length is declared
 * (and no Transfer-Encoding), bodyLimit only compares that header, and
 * Node's parser never delivers more than it declares, so an in-limit
 * declaration goes straight to the handler, whose `c.req.text()` then takes
 * node-server's direct read. Everything else (chunked, undeclared, over the
 * limit) still goes through bodyLimit itself, so its answers are unchanged.
 */
function boundedBody(limit: MiddlewareHandler): MiddlewareHandler {
  return (c, next) => {
    const headers = c.req.raw.headers;
    const declared = headers.get('content-length');
    if (
      declared !== null &&
      !headers.has('transfer-encoding') &&
      !(parseInt(declared || '0', 10) > MAX_BODY_BYTES)
    ) {
      return next();
    }
    return limit(c, next);
  };
}
