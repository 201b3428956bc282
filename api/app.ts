/**
 * The lease API as a Hono app. Contract: the seed's docs/api.md (status
 * codes, error codes, field names, defaults), with the seed's Go handlers
 * deciding where that document is silent. One sub-app per route group
 * (routes/): meta (/healthz, /metrics, /openapi.json), /v1/proxies and
 * /v1/leases; this file puts them together behind the request log and the
 * token check, and answers what none of them serves (405 with Allow, 404),
 * as Go's mux did.
 */
import { Hono } from 'hono';
import type { CredentialsLookup } from '../credentials/proxy-credentials.js';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { DEFAULT_LEASE_TTL_SECONDS, DEFAULT_MAX_LEASE_TTL_SECONDS } from './config.js';
import type { LeaseStore } from './lease-store.js';
import { registerApiMetrics, registerProcessMetrics } from './metrics.js';
import type { ProxyCatalog } from './proxy-catalog.js';
import { buildOpenApiDocument } from './schemas.js';
import type { TraceHook } from '../tracing/http.js';
import type { PoolDemand } from './pool-demand.js';
import { createTenantDirectory, type TenantDirectory } from '../tenants/directory.js';
import { createGuessLimiter, DEFAULT_MAX_AUTH_FAILURES } from '../tenants/guess-limiter.js';
import { createTenantRates } from '../tenants/rate.js';
import { createLeaseRoutes } from './routes/leases.js';
import { createMetaRoutes } from './routes/meta.js';
import { authAndCleanPaths, failure, requestLog } from './routes/middleware.js';
import { createProxyRoutes } from './routes/proxies.js';
import { fail } from './routes/responses.js';

export { MAX_BODY_BYTES } from './routes/middleware.js';
export { rfc3339 } from './routes/responses.js';

export interface CreateApiOptions {
  catalog: ProxyCatalog;
  leaseStore: LeaseStore;
  /** Bearer token; '' serves unauthenticated (logged loudly). */
  token: string;
  /** Served with no token off the loopback on purpose (`--insecure-no-auth`): said in the warning. */
  /**
   * The proxies' credentials: a lease of a proxy that has them carries
   * `proxyURL` with them. Not with an open API off the loopback.
   */
  credentials?: CredentialsLookup;
  insecureNoAuth?: boolean;
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
  /** Told of refused lease requests and `banned` reports, for ProxyPool autoscaling and rotation. */
  demand?: Pick<PoolDemand, 'noteDenied' | 'noteBanned'>;
  /** Who may call (tenants/); by default the single `token`'s tenant, or the open one when it is ''. */
  tenants?: TenantDirectory;
  /** Wrong tokens per client address per minute before 429 (default 20; 0 off). */
  authFailuresPerMinute?: number;
  /** The dashboard (dashboard/server/), mounted at `/ui`: its page and assets public, its data behind the token. */
  dashboard?: { routes: Hono; isPublic(path: string): boolean };
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
  const tenants = options.tenants ?? createTenantDirectory({ token: options.token, logger });
  const auth = {
    tenants,
    guesses: createGuessLimiter({ maxFailures: options.authFailuresPerMinute ?? DEFAULT_MAX_AUTH_FAILURES }),
    rates: createTenantRates(),
  };
  const openApi = JSON.stringify(
    buildOpenApiDocument({ maxLeaseTtlSeconds: maxTtl, bearer: !tenants.open, metrics: serveMetrics }),
  );
  if (tenants.open) {
    logger.warn(
      options.insecureNoAuth === true
        ? 'WARNING: --insecure-no-auth: the lease API is served WITHOUT AUTHENTICATION off the loopback; anyone who can reach it can lease proxies'
        : 'WARNING: DISCOVERY_TOKEN is empty: the lease API is served WITHOUT AUTHENTICATION (on the loopback); anyone on this machine can lease proxies',
    );
  }

  const app = new Hono();
  app.use(requestLog(logger, options.traceHook));
  const dashboard = options.dashboard;
  app.use(authAndCleanPaths(auth, dashboard ? (path) => dashboard.isPublic(path) : undefined));

  app.route('/', createMetaRoutes({ registry, serveMetrics, openApi }));
  app.route('/v1/proxies', createProxyRoutes({ catalog, leaseStore }));
  if (dashboard) {
    app.get('/ui/', (c) => c.redirect('/ui', 308));
    app.route('/ui', dashboard.routes);
  }
  const sealLeaseIds = tenants.sealsLeaseIds;
  app.route(
    '/v1/leases',
    createLeaseRoutes({
      catalog,
      leaseStore,
      metrics,
      defaultTtlSeconds: defaultTtl,
      maxTtlSeconds: maxTtl,
      sealLeaseIds,
      rates: auth.rates,
      // Off the loopback with no token, anyone could read the proxies' credentials: none are handed out.
      ...(options.credentials && !(tenants.open && options.insecureNoAuth === true)
        ? { credentials: options.credentials }
        : {}),
      ...(options.demand ? { demand: options.demand } : {}),
    }),
  );

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
