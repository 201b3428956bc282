/**
 * Lease API metrics on an injected prom-client Registry. The two gauges are
 * read from their source at scrape time (never incremented by hand), so they
 * cannot drift or keep series for proxies that are gone.
 */
import type { Context } from 'hono';
import { Counter, Gauge, collectDefaultMetrics, type Registry } from 'prom-client';
import { PHASES } from '../resources/proxy-schema.js';
import type { ProxyCatalog } from './proxy-catalog.js';
import { LeaseStoreUnavailableError, storeKey, type LeaseStore } from './lease-store.js';
import { partition } from './routes/selection.js';

export type LeaseOutcome = 'granted' | 'no_match' | 'forbidden';

export interface ApiMetrics {
  /** `tenant`: also counted per tenant (names bounded by the tenants file). */
  leaseRequest(outcome: LeaseOutcome, tenant?: string): void;
}

export function registerApiMetrics(
  registry: Registry,
  sources: { catalog: ProxyCatalog; leaseStore: LeaseStore },
): ApiMetrics {
  const requests = new Counter({
    name: 'proxy_operator_lease_requests_total',
    help: 'Lease acquisition requests by outcome.',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  // Both outcomes exist from the start, so rate() works before the first 409.
  requests.inc({ outcome: 'granted' }, 0);
  requests.inc({ outcome: 'no_match' }, 0);

  new Gauge({
    name: 'proxy_operator_leases_active',
    help: 'Currently active leases.',
    registers: [registry],
    async collect() {
      let counts: ReadonlyMap<string, number>;
      try {
        counts = await sources.leaseStore.activeCounts();
      } catch (err) {
        // The store is unreachable: the scrape still answers, with no number rather than a stale one.
        if (err instanceof LeaseStoreUnavailableError) {
          this.set(NaN);
          return;
        }
        throw err;
      }
      let total = 0;
      for (const n of counts.values()) total += n;
      this.set(total);
    },
  });

  new Gauge({
    name: 'proxy_operator_proxies',
    help: 'Proxy objects by phase (including proxies being deleted; no phase yet counts as Pending).',
    labelNames: ['phase'] as const,
    registers: [registry],
    collect() {
      this.reset();
      // Before the cache has synced, report nothing rather than zeros.
      if (!sources.catalog.synced()) return;
      const counts = new Map<string, number>(PHASES.map((p) => [p, 0]));
      for (const proxy of sources.catalog.list()) {
        const phase = proxy.phase === '' ? 'Pending' : proxy.phase;
        counts.set(phase, (counts.get(phase) ?? 0) + 1);
      }
      for (const [phase, n] of counts) this.set({ phase }, n);
    },
  });

  // Per ProxyPool: what its members offer and what crawlers hold, by the
  // lease API's own rules (what an HPA or KEDA would scale the pool on).
  new Gauge({
    name: 'egress_pool_proxies_leasable',
    help: 'Members of each ProxyPool the lease API would lease now (healthy, addressed, not draining or deleting).',
    labelNames: ['namespace', 'pool'] as const,
    registers: [registry],
    collect() {
      this.reset();
      if (!sources.catalog.synced()) return;
      const { candidates } = partition(sources.catalog.list(), []);
      for (const [key, members] of byPool(sources.catalog.list())) {
        const [namespace, pool] = key.split('/') as [string, string];
        this.set({ namespace, pool }, candidates.filter((c) => members.has(c.id)).length);
      }
    },
  });
  new Gauge({
    name: 'egress_pool_leases_active',
    help: 'Active leases on the members of each ProxyPool (draining members included).',
    labelNames: ['namespace', 'pool'] as const,
    registers: [registry],
    async collect() {
      this.reset();
      if (!sources.catalog.synced()) return;
      const views = sources.catalog.list();
      const pools = byPool(views);
      if (pools.size === 0) return;
      let counts: ReadonlyMap<string, number>;
      try {
        counts = await sources.leaseStore.activeCounts();
      } catch (err) {
        if (err instanceof LeaseStoreUnavailableError) return;
        throw err;
      }
      const byId = new Map(views.map((v) => [v.id, v]));
      for (const [key, members] of pools) {
        const [namespace, pool] = key.split('/') as [string, string];
        let total = 0;
        for (const id of members) total += counts.get(storeKey(byId.get(id)!)) ?? 0;
        this.set({ namespace, pool }, total);
      }
    },
  });

  const byTenant = new Counter({
    name: 'egress_api_tenant_lease_requests_total',
    help: 'Lease acquisition requests by tenant and outcome (granted, no_match, forbidden).',
    labelNames: ['tenant', 'outcome'] as const,
    registers: [registry],
  });
  return {
    leaseRequest: (outcome, tenant) => {
      requests.inc({ outcome });
      if (tenant !== undefined) byTenant.inc({ tenant, outcome });
    },
  };
}

/** Member ids per `namespace/pool`. */
function byPool(views: ReturnType<ProxyCatalog['list']>): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const v of views) {
    if (!v.pool) continue;
    const key = `${v.id.split('/')[0]}/${v.pool}`;
    let members = out.get(key);
    if (!members) out.set(key, (members = new Set()));
    members.add(v.id);
  }
  return out;
}

/**
 * Node process metrics (CPU, memory, event loop, GC) on the given registry.
 * A second call on the same registry does nothing (`dev` gives worker and
 * api one registry).
 */
export function registerProcessMetrics(registry: Registry): void {
  if (registry.getSingleMetric('process_cpu_user_seconds_total')) return;
  collectDefaultMetrics({ register: registry });
}

/** A Hono handler serving everything registered on `registry` (ours, the prober's, the process's). */
export function metricsHandler(registry: Registry) {
  return async (c: Context): Promise<Response> => {
    const body = await registry.metrics();
    return c.body(body, 200, { 'Content-Type': registry.contentType });
  };
}
