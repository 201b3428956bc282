/**
 * The lease API as a Hono app. Contract: the seed's docs/api.md (status
 * codes, error codes, field names, defaults), with the seed's Go handlers
 * deciding where that document is silent.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { z } from 'zod';
import { cleanPathLocation, requestTarget, rewrittenByWhatwg, temporaryRedirect } from './clean-path.js';
import { DEFAULT_LEASE_TTL_SECONDS, DEFAULT_MAX_LEASE_TTL_SECONDS } from './config.js';
import {
  LeaseStoreUnavailableError,
  REPORT_RESULTS,
  storeKey,
  type LeaseStore,
  type ReportResult,
} from './lease-store.js';
import { metricsHandler, registerApiMetrics, registerProcessMetrics } from './metrics.js';
import type { ProxyCatalog, ProxyView } from './proxy-catalog.js';
import { decodeLeaseRequest, decodeReportRequest, goQueryValues, goQuote, rawQuery } from './go-compat.js';
import {
  buildOpenApiDocument,
  type ErrorCode,
  type ProxyJson,
  type leaseSchema,
  type noMatchSchema,
  type proxyListSchema,
} from './schemas.js';
import { parseTraceparent, type TraceHook } from '../tracing/http.js';

export const MAX_BODY_BYTES = 64 * 1024;

/** Paths served without a bearer token. */
const AUTH_EXEMPT = new Set(['/healthz', '/metrics']);

export interface CreateApiOptions {
  catalog: ProxyCatalog;
  leaseStore: LeaseStore;
  /** Bearer token; '' serves unauthenticated (logged loudly). */
  token: string;
  logger: Logger;
  /** Where the API's metrics go and what `/metrics` serves; other components may register on it too. */
  registry: Registry;
  maxLeaseTtlSeconds?: number;
  defaultLeaseTtlSeconds?: number;
  /** Register Node process metrics on `registry` (default true; turn off if something else already did). */
  processMetrics?: boolean;
  /** Called for every request with its W3C trace context; the seam for tracing. */
  traceHook?: TraceHook;
  /**
   * Serve `/metrics` on this app (default true). Off when `--metrics-addr`
   * serves it elsewhere: the metrics name every proxy, so they can be kept
   * off the port crawlers reach, as the seed kept them.
   */
  serveMetrics?: boolean;
}

export function createApi(options: CreateApiOptions): Hono {
  const { catalog, leaseStore, registry } = options;
  const logger = options.logger.child({ component: 'lease-api' });
  const maxTtl = options.maxLeaseTtlSeconds ?? DEFAULT_MAX_LEASE_TTL_SECONDS;
  const defaultTtl = options.defaultLeaseTtlSeconds ?? DEFAULT_LEASE_TTL_SECONDS;
  if (!(Number.isSafeInteger(maxTtl) && maxTtl > 0 && Number.isSafeInteger(defaultTtl) && defaultTtl > 0)) {
    throw new RangeError('lease TTLs must be positive whole seconds');
  }
  if (defaultTtl > maxTtl)
    throw new RangeError(`default lease TTL ${defaultTtl}s exceeds the maximum ${maxTtl}s`);

  const metrics = registerApiMetrics(registry, { catalog, leaseStore });
  if (options.processMetrics ?? true) registerProcessMetrics(registry);
  const serveMetrics = options.serveMetrics ?? true;
  const openApi = JSON.stringify(
    buildOpenApiDocument({ maxLeaseTtlSeconds: maxTtl, bearer: options.token !== '', metrics: serveMetrics }),
  );
  const checkToken = options.token === '' ? undefined : tokenChecker(options.token);
  if (!checkToken) {
    logger.warn(
      'WARNING: DISCOVERY_TOKEN is empty: the lease API is served WITHOUT AUTHENTICATION; anyone who can reach it can lease proxies',
    );
  }

  // Most acquires carry no selector, so their candidates depend only on the
  // catalog snapshot. Catalogs hand out the same array until something
  // changes (a replace, an informer event), so the partition is cached
  // against that array's identity and recomputed only when it changes.
  let unselectedFor: readonly ProxyView[] | undefined;
  let unselectedPartition: Partition = { candidates: [], unhealthy: 0 };
  const unselected = (views: readonly ProxyView[]): Partition => {
    if (views !== unselectedFor) {
      unselectedPartition = partition(views, []);
      unselectedFor = views;
    }
    return unselectedPartition;
  };

  const app = new Hono();

  app.use(requestLog(logger, options.traceHook));

  app.use(async (c, next) => {
    const target = requestTarget(c);
    const location = cleanPathLocation(target);
    // As the seed's router sat behind its token check, which looked at the
    // path as sent: "//healthz" needs the token before it is redirected.
    const exempt = location === undefined && AUTH_EXEMPT.has(c.req.path);
    if (checkToken && !exempt && !checkToken(c.req.header('Authorization'))) {
      return fail(c, 401, 'unauthorized', 'missing or invalid bearer token');
    }
    if (location !== undefined) return temporaryRedirect(c, location);
    if (rewrittenByWhatwg(target)) {
      return fail(c, 404, 'not_found', `no route for ${c.req.method} ${c.req.path}`);
    }
    await next();
  });

  const limitBody = boundedBody(
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      // The message Go's http.MaxBytesReader gives the seed's decoder.
      onError: (c) => fail(c, 400, 'invalid_body', 'http: request body too large'),
    }),
  );

  app.get('/healthz', (c) => c.body('ok\n', 200, { 'Content-Type': 'text/plain; charset=utf-8' }));
  if (serveMetrics) app.get('/metrics', metricsHandler(registry));
  app.get('/openapi.json', (c) => c.body(openApi, 200, { 'Content-Type': 'application/json' }));

  app.get('/v1/proxies', async (c) => {
    let healthy: boolean | undefined;
    const selector: Array<[string, string]> = [];
    for (const [key, value] of goQueryValues(rawQuery(c.req.url))) {
      if (key === 'healthy') {
        if (value !== 'true' && value !== 'false') {
          return fail(c, 400, 'invalid_query', `healthy must be true or false, got ${goQuote(value)}`);
        }
        healthy = value === 'true';
      } else if (key.startsWith('attr.')) {
        selector.push([key.slice('attr.'.length), value]);
      }
    }
    if (!catalog.synced()) return notSynced(c);

    const views = catalog.list();
    const counts = await leaseStore.activeCounts();
    const proxies: ProxyJson[] = [];
    for (const p of views) {
      if (p.deleting || !matches(p, selector)) continue;
      if (healthy !== undefined && p.healthy !== healthy) continue;
      proxies.push(toJson(p, counts.get(storeKey(p)) ?? 0));
    }
    return send<typeof proxyListSchema>(c, 200, { proxies, count: proxies.length });
  });

  app.post('/v1/leases', limitBody, async (c) => {
    const body = await readBody(c);
    if (typeof body !== 'string') return body;
    const decoded = decodeLeaseRequest(body);
    if (!decoded.ok) return fail(c, 400, 'invalid_body', decoded.message);
    const ttlSeconds = decoded.value.ttlSeconds || defaultTtl;
    if (ttlSeconds < 1 || ttlSeconds > maxTtl) {
      return fail(c, 400, 'invalid_ttl', `ttlSeconds must be between 1 and ${maxTtl}`);
    }
    const { target } = decoded.value;
    const selector = decoded.value.selector ? [...decoded.value.selector] : [];
    if (!catalog.synced()) return notSynced(c);

    const { candidates, unhealthy } =
      selector.length > 0 ? partition(catalog.list(), selector) : unselected(catalog.list());

    const outcome = await leaseStore.acquire({ candidates, target, ttlMs: ttlSeconds * 1000 });
    if (!outcome.granted) {
      metrics.leaseRequest('no_match');
      const { stats } = outcome;
      return send<typeof noMatchSchema>(c, 409, {
        error: 'no_match',
        message: 'no healthy proxy with free capacity matched the selector',
        considered: stats.considered + unhealthy,
        atCapacity: stats.atCapacity,
        inCooldown: stats.inCooldown,
        unhealthy,
      });
    }
    metrics.leaseRequest('granted');
    return send<typeof leaseSchema>(c, 201, {
      leaseID: outcome.granted.id,
      proxy: toJson(outcome.candidate, outcome.activeLeases),
      expiresAt: rfc3339(outcome.granted.expiresAt),
      ttlSeconds,
    });
  });

  app.delete('/v1/leases/:id', async (c) => {
    await leaseStore.release(c.req.param('id'));
    return c.body(null, 204);
  });

  app.post('/v1/leases/:id/report', limitBody, async (c) => {
    const body = await readBody(c);
    if (typeof body !== 'string') return body;
    const decoded = decodeReportRequest(body);
    if (!decoded.ok) return fail(c, 400, 'invalid_body', decoded.message);
    const { result, target } = decoded.value;
    if (!isReportResult(result)) {
      return fail(
        c,
        400,
        'invalid_result',
        `result must be one of ok, rate_limited, banned; got ${goQuote(result)}`,
      );
    }
    const outcome = await leaseStore.report(c.req.param('id'), result, target);
    if (outcome === 'unknown_lease') return fail(c, 404, 'unknown_lease', 'no such lease');
    return c.body(null, 204);
  });

  // Known paths with another method: 405 with Allow, as Go's mux answers.
  const allowed: Record<string, string> = {
    '/healthz': 'GET, HEAD',
    ...(serveMetrics ? { '/metrics': 'GET, HEAD' } : {}),
    '/openapi.json': 'GET, HEAD',
    '/v1/proxies': 'GET, HEAD',
    '/v1/leases': 'POST',
    '/v1/leases/:id': 'DELETE',
    '/v1/leases/:id/report': 'POST',
  };
  for (const [path, allow] of Object.entries(allowed)) {
    app.all(path, (c) => {
      c.header('Allow', allow);
      return fail(c, 405, 'method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}`);
    });
  }

  app.notFound((c) => fail(c, 404, 'not_found', `no route for ${c.req.method} ${c.req.path}`));
  app.onError((err, c) => failure(logger, c, err));

  return app;
}

/**
 * Outermost middleware: the tracing seam and one log line per request
 * (liveness probes and scrapes are not logged). Also the last line of
 * defence: something thrown that is not an Error escapes Hono's onError,
 * and is turned into the same 500 here.
 */
function requestLog(logger: Logger, traceHook: TraceHook | undefined): MiddlewareHandler {
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
function failure(logger: Logger, c: Context, err: unknown): Response {
  if (err instanceof LeaseStoreUnavailableError) {
    logger.warn({ method: c.req.method, path: c.req.path, reason: err.message }, 'lease store unavailable');
    return fail(c, 503, 'unavailable', 'the lease store is unreachable; retry shortly');
  }
  logger.error({ err, method: c.req.method, path: c.req.path }, 'lease API handler failed');
  return fail(c, 500, 'internal', 'internal server error');
}

/** Compares SHA-256 digests, so neither the comparison nor an early length check leaks the token. */
function tokenChecker(token: string): (header: string | undefined) => boolean {
  const expected = createHash('sha256').update(token).digest();
  return (header) => {
    if (header === undefined || !header.startsWith('Bearer ')) return false;
    const got = createHash('sha256').update(header.slice('Bearer '.length)).digest();
    return timingSafeEqual(got, expected);
  };
}

/** The body as text, or the 400 to answer when it cannot be read. */
async function readBody(c: Context): Promise<string | Response> {
  try {
    return await c.req.text();
  } catch {
    return fail(c, 400, 'invalid_body', 'could not read the request body');
  }
}

function isReportResult(result: string): result is ReportResult {
  return (REPORT_RESULTS as readonly string[]).includes(result);
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

interface Partition {
  /** Healthy, addressed, selector-matching proxies not being deleted: what the store chooses from. */
  candidates: readonly ProxyView[];
  /** Selector-matching proxies not being deleted that cannot be leased. */
  unhealthy: number;
}

/**
 * Unhealthy matches never reach the store, so they are counted here. A
 * proxy without an address cannot be used even if a stale Healthy
 * condition says True; it counts as unhealthy.
 */
function partition(views: readonly ProxyView[], selector: ReadonlyArray<[string, string]>): Partition {
  const candidates: ProxyView[] = [];
  let unhealthy = 0;
  for (let i = 0; i < views.length; i++) {
    const p = views[i]!;
    if (p.deleting || (selector.length > 0 && !matches(p, selector))) continue;
    if (!p.healthy || p.host === '') unhealthy++;
    else candidates.push(p);
  }
  return { candidates, unhealthy };
}

/**
 * Every selector pair must equal the proxy's attribute, and a missing
 * attribute reads as "" (a Go map lookup), so `attr.geo=` selects the
 * proxies without a geo.
 */
function matches(p: ProxyView, selector: ReadonlyArray<[string, string]>): boolean {
  for (const [key, value] of selector) {
    if ((Object.hasOwn(p.attributes, key) ? p.attributes[key] : '') !== value) return false;
  }
  return true;
}

function toJson(p: ProxyView, activeLeases: number): ProxyJson {
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
  };
}

/** RFC 3339 in UTC with trailing fraction zeros trimmed, as Go prints a time.Time: 2026-08-11T22:05:00Z. */
export function rfc3339(epochMs: number): string {
  return new Date(epochMs)
    .toISOString()
    .replace(/(\.\d*?)0+Z$/, '$1Z')
    .replace(/\.Z$/, 'Z');
}

/** JSON with a trailing newline, as the seed's encoder wrote it. */
function send<S extends z.ZodType>(c: Context, status: 200 | 201 | 409, body: z.output<S>): Response {
  return c.body(`${JSON.stringify(body)}\n`, status, { 'Content-Type': 'application/json' });
}

function fail(
  c: Context,
  status: 400 | 401 | 404 | 405 | 500 | 503,
  error: ErrorCode,
  message: string,
): Response {
  return c.body(`${JSON.stringify({ error, message })}\n`, status, { 'Content-Type': 'application/json' });
}

function notSynced(c: Context): Response {
  return fail(c, 503, 'unavailable', 'the proxy cache has not synced yet; retry shortly');
}
