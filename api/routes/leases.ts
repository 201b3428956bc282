/**
 * `/v1/leases`: acquire, release and report. Bodies are decoded as the
 * seed's Go decoder read them (go-compat.ts), not by the zod schemas: its
 * answers to odd JSON (duplicate keys, case-folded names, trailing data)
 * are part of the contract crawlers depend on.
 */
import { Hono } from 'hono';
import { decodeLeaseRequest, decodeReportRequest, goQuote } from '../go-compat.js';
import { REPORT_RESULTS, type LeaseStore, type ReportResult } from '../lease-store.js';
import type { ApiMetrics } from '../metrics.js';
import type { PoolDemand } from '../pool-demand.js';
import { credentialsOfView, type ProxyCatalog, type ProxyView } from '../proxy-catalog.js';
import { proxyUrl, type CredentialsLookup } from '../../credentials/proxy-credentials.js';
import type { leaseSchema, noMatchSchema } from '../schemas.js';
import { openLeaseId, sealLeaseId } from '../../tenants/lease-ids.js';
import type { TenantRates } from '../../tenants/rate.js';
import { inScope, poolAllowed, unscoped } from '../../tenants/tenants.js';
import { limitBody, readBody } from './middleware.js';
import { fail, notSynced, rfc3339, send, toJson } from './responses.js';
import { partition, type Partition } from './selection.js';

export interface LeaseRoutesOptions {
  catalog: ProxyCatalog;
  leaseStore: LeaseStore;
  metrics: ApiMetrics;
  defaultTtlSeconds: number;
  maxTtlSeconds: number;
  /** Told of refused requests and `banned` cooldowns (pool autoscaling and rotation). */
  demand?: Pick<PoolDemand, 'noteDenied' | 'noteBanned'>;
  /** Lease ids carry their tenant's seal (tenants/lease-ids.ts): a tenants file is in use. */
  sealLeaseIds?: boolean;
  /** Each tenant's requests per second. */
  rates?: TenantRates;
  /** Where proxies' credentials are read: a lease of a proxy with credentials carries `proxyURL`. */
  credentials?: CredentialsLookup;
}

export function createLeaseRoutes(opts: LeaseRoutesOptions): Hono {
  const { catalog, leaseStore, metrics } = opts;
  const seal = opts.sealLeaseIds ?? false;
  const bounded = limitBody();

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

  const routes = new Hono();

  routes.post('/', bounded, async (c) => {
    const body = await readBody(c);
    if (typeof body !== 'string') return body;
    const decoded = decodeLeaseRequest(body);
    if (!decoded.ok) return fail(c, 400, 'invalid_body', decoded.message);
    const ttlSeconds = decoded.value.ttlSeconds || opts.defaultTtlSeconds;
    if (ttlSeconds < 1 || ttlSeconds > opts.maxTtlSeconds) {
      return fail(c, 400, 'invalid_ttl', `ttlSeconds must be between 1 and ${opts.maxTtlSeconds}`);
    }
    const { target } = decoded.value;
    const selector = decoded.value.selector ? [...decoded.value.selector] : [];
    if (!catalog.synced()) return notSynced(c);

    const pool = decoded.value.pool ?? undefined;
    const tenant = c.get('tenant');
    if (!poolAllowed(tenant, pool)) {
      metrics.leaseRequest('forbidden', tenant.name);
      return fail(c, 403, 'forbidden', `tenant ${tenant.name} may not use pool ${goQuote(pool ?? '')}`);
    }
    if (opts.rates && !opts.rates.take(tenant)) {
      c.header('Retry-After', '1');
      return fail(c, 429, 'too_many_requests', `tenant ${tenant.name} is over its requests per second`);
    }
    // A tenant's scope narrows what it sees, before the selector (so its counts are its own).
    const views = unscoped(tenant) ? catalog.list() : catalog.list().filter((v) => inScope(tenant, v));
    const { candidates, unhealthy } =
      selector.length > 0 || pool !== undefined || !unscoped(tenant)
        ? partition(views, selector, pool)
        : unselected(views);

    const outcome = await leaseStore.acquire({ candidates, target, ttlMs: ttlSeconds * 1000 });
    if (!outcome.granted) {
      metrics.leaseRequest('no_match', tenant.name);
      opts.demand?.noteDenied(selector, pool);
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
    metrics.leaseRequest('granted', tenant.name);
    return send<typeof leaseSchema>(c, 201, {
      leaseID: sealLeaseId(seal, tenant, outcome.granted.id),
      proxy: toJson(outcome.candidate, outcome.activeLeases),
      expiresAt: rfc3339(outcome.granted.expiresAt),
      ttlSeconds,
      ...proxyUrlOf(opts.credentials, outcome.candidate),
    });
  });

  routes.delete('/:id', async (c) => {
    // Another tenant's id is not this caller's to release: as for any unknown id, nothing happens.
    const id = openLeaseId(seal, c.get('tenant'), c.req.param('id'));
    if (id !== undefined) await leaseStore.release(id);
    return c.body(null, 204);
  });

  routes.post('/:id/report', bounded, async (c) => {
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
    const id = openLeaseId(seal, c.get('tenant'), c.req.param('id'));
    if (id === undefined) return fail(c, 404, 'unknown_lease', 'no such lease');
    const receipt = await leaseStore.reportWithReceipt(id, result, target);
    if (receipt.outcome === 'unknown_lease') return fail(c, 404, 'unknown_lease', 'no such lease');
    if (result === 'banned' && receipt.proxy !== undefined)
      opts.demand?.noteBanned(receipt.proxy, receipt.target ?? target);
    return c.body(null, 204);
  });

  return routes;
}

/**
 * `proxyURL` with the proxy's credentials, for the tenant the lease went to
 * (its scope already allowed this proxy). Absent for a proxy without
 * credentials, so a lease of one is as the seed's.
 */
function proxyUrlOf(lookup: CredentialsLookup | undefined, proxy: ProxyView): { proxyURL?: string } {
  const credentials = credentialsOfView(lookup, proxy);
  if (!credentials || proxy.host === '') return {};
  return { proxyURL: proxyUrl(proxy.host, proxy.port, credentials) };
}

function isReportResult(result: string): result is ReportResult {
  return (REPORT_RESULTS as readonly string[]).includes(result);
}
