/**
 * Which proxies a connection may lease: the same candidate rule
 * (`partition`) as the lease API, over the Proxy catalog, so selectors,
 * pools, health and drain apply alike.
 */
import type { ProxyCatalog, ProxyView } from '../api/proxy-catalog.js';
import { partition } from '../api/routes/selection.js';
import { inScope, unscoped, type Tenant } from '../tenants/tenants.js';
import type { ConnectionOptions } from './credentials.js';

/** The Proxy catalog has not loaded yet: the gateway answers 503 (as the lease API does). */
export class CatalogNotSyncedError extends Error {
  override name = 'CatalogNotSyncedError';
  constructor() {
    super('the gateway has not loaded the Proxies yet; retry shortly');
  }
}

export interface LeaseCandidates {
  /** The candidates and the unhealthy count for a tenant's connection's selector and pool; throws CatalogNotSyncedError. */
  of(options: ConnectionOptions, tenant: Tenant): ReturnType<typeof partition>;
  /** The proxy's current view while it is still a candidate for these options. */
  still(proxy: ProxyView, options: ConnectionOptions, tenant: Tenant): ProxyView | undefined;
}

export function createLeaseCandidates(catalog: ProxyCatalog): LeaseCandidates {
  // Candidates depend on the catalog snapshot and the selector only; the
  // catalog hands out the same array until something changes, so a small
  // cache keyed by selector is dropped whenever the array does.
  let cachedFor: readonly ProxyView[] | undefined;
  const cache = new Map<string, ReturnType<typeof partition>>();
  const of = ({ selector, pool }: ConnectionOptions, tenant: Tenant) => {
    if (!catalog.synced()) throw new CatalogNotSyncedError();
    const views = catalog.list();
    if (views !== cachedFor) {
      cache.clear();
      cachedFor = views;
    }
    const key = `${scopeKey(tenant)}\u0000${pool ?? ''}\u0000${selector.map(([k, v]) => `${k}=${v}`).join('\n')}`;
    let found = cache.get(key);
    if (!found) {
      // A tenant's scope narrows what it sees, before the selector (so its counts are its own).
      found = partition(unscoped(tenant) ? views : views.filter((v) => inScope(tenant, v)), selector, pool);
      // Bounded: crawler-chosen selectors must not grow it without end.
      if (cache.size > 256) cache.clear();
      cache.set(key, found);
    }
    return found;
  };
  return {
    of,
    still: (proxy, options, tenant) =>
      of(options, tenant).candidates.find((c) => c.id === proxy.id && c.uid === proxy.uid),
  };
}

/** What a tenant's scope is, as a cache key: '' for the whole fleet. */
function scopeKey(tenant: Tenant): string {
  if (unscoped(tenant)) return '';
  const pools = tenant.pools ? [...tenant.pools].sort().join(',') : '*';
  return `${pools}\u0001${tenant.selector.map(([k, v]) => `${k}=${v}`).join('\n')}`;
}
