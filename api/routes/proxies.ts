/** `GET /v1/proxies`: the fleet as crawlers see it, filtered by health and attributes. */
import { Hono } from 'hono';
import { goQueryValues, goQuote, rawQuery } from '../go-compat.js';
import { storeKey, type LeaseStore } from '../lease-store.js';
import type { ProxyCatalog } from '../proxy-catalog.js';
import type { ProxyJson, proxyListSchema } from '../schemas.js';
import { fail, notSynced, send, toJson } from './responses.js';
import { inScope, unscoped } from '../../tenants/tenants.js';
import { matches } from './selection.js';

export function createProxyRoutes(opts: { catalog: ProxyCatalog; leaseStore: LeaseStore }): Hono {
  const { catalog, leaseStore } = opts;
  const routes = new Hono();
  routes.get('/', async (c) => {
    let healthy: boolean | undefined;
    let pool: string | undefined;
    const selector: Array<[string, string]> = [];
    // The query as Go's net/url reads it, not as URLSearchParams would.
    for (const [key, value] of goQueryValues(rawQuery(c.req.url))) {
      if (key === 'healthy') {
        if (value !== 'true' && value !== 'false') {
          return fail(c, 400, 'invalid_query', `healthy must be true or false, got ${goQuote(value)}`);
        }
        healthy = value === 'true';
      } else if (key === 'pool') {
        pool = value;
      } else if (key.startsWith('attr.')) {
        selector.push([key.slice('attr.'.length), value]);
      }
    }
    if (!catalog.synced()) return notSynced(c);

    const tenant = c.get('tenant');
    const views = unscoped(tenant) ? catalog.list() : catalog.list().filter((v) => inScope(tenant, v));
    const counts = await leaseStore.activeCounts();
    const proxies: ProxyJson[] = [];
    for (const p of views) {
      // A deleting proxy is listed only while it drains (its leases still work).
      if ((p.deleting && !p.draining) || !matches(p, selector)) continue;
      if (pool !== undefined && p.pool !== pool) continue;
      if (healthy !== undefined && p.healthy !== healthy) continue;
      proxies.push(toJson(p, counts.get(storeKey(p)) ?? 0));
    }
    return send<typeof proxyListSchema>(c, 200, { proxies, count: proxies.length });
  });
  return routes;
}
