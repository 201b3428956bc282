/**
 * Lease API metrics on an injected prom-client Registry. The two gauges are
 * read from their source at scrape time (never incremented by hand), so they
 * cannot drift or keep series for proxies that are gone.
 */
import type { Context } from 'hono';
import { Counter, Gauge, collectDefaultMetrics, type Registry } from 'prom-client';
import { PHASES } from '../resources/proxy-schema.js';
import type { ProxyCatalog } from './proxy-catalog.js';
import { LeaseStoreUnavailableError, type LeaseStore } from './lease-store.js';

export type LeaseOutcome = 'granted' | 'no_match';

export interface ApiMetrics {
  leaseRequest(outcome: LeaseOutcome): void;
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

  return { leaseRequest: (outcome) => requests.inc({ outcome }) };
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
