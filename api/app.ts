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
import { DEFAULT_LEASE_TTL_SECONDS, DEFAULT_MAX_LEASE_TTL_SECONDS } from './config.js';
import type { LeaseStore } from './lease-store.js';
import { metricsHandler, registerApiMetrics, registerProcessMetrics } from './metrics.js';
import type { ProxyCatalog, ProxyView } from './proxy-catalog.js';
import {
  buildOpenApiDocument,
  leaseRequestSchema,
  reportRequestSchema,
  type ErrorCode,
  type ProxyJson,
  type leaseSchema,
  type noMatchSchema,
  type proxyListSchema,
} from './schemas.js';
import { parseTraceparent, type TraceHook } from './tracing.js';

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
  const leaseRequest = leaseRequestSchema(maxTtl);
  const openApi = JSON.stringify(buildOpenApiDocument({ maxLeaseTtlSeconds: maxTtl }));
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
    if (checkToken && !AUTH_EXEMPT.has(c.req.path) && !checkToken(c.req.header('Authorization'))) {
      return fail(c, 401, 'unauthorized', 'missing or invalid bearer token');
    }
    await next();
  });

  const limitBody = boundedBody(
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: (c) => fail(c, 400, 'invalid_body', `request body exceeds ${MAX_BODY_BYTES} bytes`),
    }),
  );

  app.get('/healthz', (c) => c.body('ok\n', 200, { 'Content-Type': 'text/plain; charset=utf-8' }));
  app.get('/metrics', metricsHandler(registry));
  app.get('/openapi.json', (c) => c.body(openApi, 200, { 'Content-Type': 'application/json' }));

  app.get('/v1/proxies', async (c) => {
    const query = new URL(c.req.url).searchParams;
    let healthy: boolean | undefined;
    const selector: Array<[string, string]> = [];
    const seen = new Set<string>();
    for (const [key, value] of query) {
      // Like Go's url.Values lookups, the first value of a repeated key wins.
      if (seen.has(key)) continue;
      seen.add(key);
      if (key === 'healthy') {
        if (value !== 'true' && value !== 'false') {
          return fail(c, 400, 'invalid_query', `healthy must be true or false, got ${JSON.stringify(value)}`);
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
      proxies.push(toJson(p, counts.get(p.id) ?? 0));
    }
    return send<typeof proxyListSchema>(c, 200, { proxies, count: proxies.length });
  });

  app.post('/v1/leases', limitBody, async (c) => {
    const body = await readJson(c);
    if (!body.ok) return body.response;
    const parsed = leaseRequest.safeParse(body.value);
    if (!parsed.success) {
      const ttlRange = parsed.error.issues.every(
        (i) =>
          i.path.length === 1 &&
          i.path[0] === 'ttlSeconds' &&
          (i.code === 'too_big' || i.code === 'too_small'),
      );
      return ttlRange
        ? fail(c, 400, 'invalid_ttl', `ttlSeconds must be between 1 and ${maxTtl}`)
        : fail(c, 400, 'invalid_body', describeIssues(parsed.error));
    }
    const ttlSeconds = parsed.data?.ttlSeconds || defaultTtl;
    const target = parsed.data?.target ?? '';
    // Own keys of the decoded JSON: zod's record output drops a "__proto__"
    // key, which would silently widen the selector.
    const rawSelector = (body.value as { selector?: Record<string, string> | null } | null)?.selector;
    const selector = rawSelector ? Object.entries(rawSelector) : [];
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
    const body = await readJson(c);
    if (!body.ok) return body.response;
    const parsed = reportRequestSchema.safeParse(body.value);
    if (!parsed.success) {
      const raw = body.value as { result?: unknown } | null;
      const result = raw === null || typeof raw !== 'object' || Array.isArray(raw) ? undefined : raw.result;
      const onlyResult = parsed.error.issues.every((i) => i.path.length === 1 && i.path[0] === 'result');
      // A result of the right type but an unknown value is invalid_result; a
      // wrong type anywhere is a malformed body.
      return onlyResult && (result === undefined || result === null || typeof result === 'string')
        ? fail(
            c,
            400,
            'invalid_result',
            `result must be one of ok, rate_limited, banned; got ${JSON.stringify(result ?? '')}`,
          )
        : fail(c, 400, 'invalid_body', describeIssues(parsed.error));
    }
    const outcome = await leaseStore.report(c.req.param('id'), parsed.data.result, parsed.data.target ?? '');
    if (outcome === 'unknown_lease') return fail(c, 404, 'unknown_lease', 'no such lease');
    return c.body(null, 204);
  });

  // Known paths with another method: 405 with Allow, as Go's mux answers.
  const allowed: Record<string, string> = {
    '/healthz': 'GET, HEAD',
    '/metrics': 'GET, HEAD',
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
  app.onError((err, c) => {
    logger.error({ err, method: c.req.method, path: c.req.path }, 'lease API handler failed');
    return fail(c, 500, 'internal', 'internal server error');
  });

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
      logger.error({ err, method: c.req.method, path: c.req.path }, 'lease API handler failed');
      c.res = fail(c, 500, 'internal', 'internal server error');
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

/** Compares SHA-256 digests, so neither the comparison nor an early length check leaks the token. */
function tokenChecker(token: string): (header: string | undefined) => boolean {
  const expected = createHash('sha256').update(token).digest();
  return (header) => {
    if (header === undefined || !header.startsWith('Bearer ')) return false;
    const got = createHash('sha256').update(header.slice('Bearer '.length)).digest();
    return timingSafeEqual(got, expected);
  };
}

type ReadResult = { ok: true; value: unknown } | { ok: false; response: Response };

async function readJson(c: Context): Promise<ReadResult> {
  let text: string;
  try {
    text = await c.req.text();
  } catch {
    return { ok: false, response: fail(c, 400, 'invalid_body', 'could not read the request body') };
  }
  if (text.trim() === '') return { ok: false, response: fail(c, 400, 'invalid_body', 'empty request body') };
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { ok: false, response: fail(c, 400, 'invalid_body', `malformed JSON: ${(err as Error).message}`) };
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

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((i) => `${i.path.length ? i.path.join('.') : 'body'}: ${i.message}`)
    .join('; ');
}

function matches(p: ProxyView, selector: ReadonlyArray<[string, string]>): boolean {
  for (const [key, value] of selector) {
    if (!Object.hasOwn(p.attributes, key) || p.attributes[key] !== value) return false;
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
