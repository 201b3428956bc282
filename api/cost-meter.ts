/**
 * What the fleet costs, as metrics (issue 53), from the providers config's
 * prices (providers/prices.ts) and two facts, each counted where it is
 * known:
 *
 * - **Instance time**, from the Proxy catalog (`catalog` given): a Managed
 *   Proxy costs its entry's hourly price for as long as its phase is
 *   Provisioning, Ready, Unhealthy or Deleting (an instance exists: booting,
 *   serving, failing its checks or draining), from the moment this meter
 *   first sees it so (a sync every `tickMs`, and at every scrape) until it
 *   sees it otherwise. Pending (no instance asked for yet) and Failed cost
 *   nothing. A vendor entry's `perSession` is added once per Proxy, when it
 *   is first seen running.
 * - **Traffic**, from the gateway (`traffic()`): every byte it relayed
 *   through a proxy, both directions, at the entry's `perGiB`.
 *
 * Both add to `egress_proxy_cost_total{provider, pool, namespace}` (pool ''
 * for a Proxy of its own). A price the config does not give is unknown,
 * never zero: its instance time shows in `egress_proxy_cost_unknown_proxies`
 * and its bytes in `egress_proxy_unpriced_bytes_total`, and add nothing to
 * the cost. Which process counts which part is in docs/architecture.md
 * ("What the fleet costs").
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import {
  COSTING_PHASES,
  GIB,
  instanceHourPrice,
  perGiBPrice,
  perSessionPrice,
  type PriceBook,
} from '../providers/prices.js';
import type { ProxyPool } from '../resources/proxy-schema.js';
import type { ProxyCatalog, ProxyView } from './proxy-catalog.js';

export interface CostMeterOptions {
  prices: PriceBook;
  registry: Registry;
  /** The Proxies whose instance time this meter counts; absent: traffic only (a gateway of its own). */
  catalog?: ProxyCatalog;
  now?: () => number;
  /** How often instance time is synced besides each scrape (default 5 s): how late a start or an end is seen. */
  tickMs?: number;
}

export interface CostMeter {
  /** Counts instance time up to now (a scrape does too). */
  sync(): void;
  /** The gateway relayed `bytes` (both directions) through `proxy` for `tenant`. */
  traffic(proxy: Pick<ProxyView, 'id' | 'provider' | 'pool'>, tenant: string, bytes: number): void;
  start(): void;
  stop(): void;
}

interface Running {
  /** Instance time is counted up to here (epoch ms). */
  at: number;
  /** Per hour; undefined: unknown. */
  rate: number | undefined;
  labels: CostLabels;
}

interface CostLabels {
  provider: string;
  pool: string;
  namespace: string;
}

const namespaceOf = (id: string) => id.slice(0, Math.max(0, id.indexOf('/')));

export function createCostMeter(opts: CostMeterOptions): CostMeter {
  const now = opts.now ?? Date.now;
  const tickMs = opts.tickMs ?? 5_000;
  const { prices, catalog } = opts;
  const running = new Map<string, Running>();
  let timer: NodeJS.Timeout | undefined;
  const reg = [opts.registry];

  const cost = new Counter({
    name: 'egress_proxy_cost_total',
    help: `What Proxies cost, in the providers config's currency${prices.currency ? ` (${prices.currency})` : ''}: instance time at the entry's hourly price (Provisioning, Ready, Unhealthy and Deleting count), sessions, and gateway-relayed bytes at its per-GiB price. Unknown prices add nothing (see egress_proxy_cost_unknown_proxies)`,
    labelNames: ['provider', 'pool', 'namespace'] as const,
    registers: reg,
    // A scrape sees the cost up to the moment it is read, not up to the last tick.
    collect: catalog ? () => sync() : undefined,
  });
  const perHour = catalog
    ? new Gauge({
        name: 'egress_proxy_cost_per_hour',
        help: 'The current instance run rate per hour of the running Proxies with a known price, in the config currency',
        labelNames: ['provider', 'pool', 'namespace'] as const,
        registers: reg,
      })
    : undefined;
  const unknown = catalog
    ? new Gauge({
        name: 'egress_proxy_cost_unknown_proxies',
        help: 'Running Proxies whose entry gives no hourly price for them: their cost is unknown, not zero',
        labelNames: ['provider', 'pool', 'namespace'] as const,
        registers: reg,
      })
    : undefined;
  const unpriced = new Counter({
    name: 'egress_proxy_unpriced_bytes_total',
    help: 'Bytes the gateway relayed through proxies whose entry gives no per-GiB price: their cost is unknown, not zero',
    labelNames: ['provider'] as const,
    registers: reg,
  });
  const tenantBytes = new Counter({
    name: 'egress_tenant_traffic_bytes_total',
    help: 'Bytes the gateway relayed for a tenant (both directions), by providers-config entry',
    labelNames: ['tenant', 'provider'] as const,
    registers: reg,
  });
  const tenantCost = new Counter({
    name: 'egress_tenant_traffic_cost_total',
    help: "What a tenant's traffic cost at its entries' per-GiB prices, in the config currency (unpriced entries add nothing)",
    labelNames: ['tenant', 'provider'] as const,
    registers: reg,
  });
  if (prices.currency) {
    new Gauge({
      name: 'egress_cost_currency_info',
      help: "The currency every egress cost metric is in (the providers config's `currency`)",
      labelNames: ['currency'] as const,
      registers: reg,
    }).set({ currency: prices.currency }, 1);
  }

  const accrue = (r: Running, t: number): void => {
    if (r.rate !== undefined && t > r.at) cost.inc(r.labels, (r.rate * (t - r.at)) / 3_600_000);
    r.at = t;
  };

  function sync(): void {
    if (!catalog?.synced()) return;
    const t = now();
    const seen = new Set<string>();
    const rates = new Map<string, { labels: CostLabels; perHour: number; unknown: number }>();
    for (const view of catalog.list()) {
      if (!view.provider || !COSTING_PHASES.has(view.phase)) continue;
      const key = view.uid ?? view.id;
      seen.add(key);
      const labels = { provider: view.provider, pool: view.pool, namespace: namespaceOf(view.id) };
      const rate = instanceHourPrice(prices, view.provider, view.machineType);
      const known = running.get(key);
      if (known) {
        accrue(known, t);
        known.rate = rate;
        known.labels = labels;
      } else {
        running.set(key, { at: t, rate, labels });
        const session = perSessionPrice(prices, view.provider);
        if (session !== undefined && session > 0) cost.inc(labels, session);
      }
      const group = `${labels.provider}\u0000${labels.pool}\u0000${labels.namespace}`;
      const sum = rates.get(group) ?? { labels, perHour: 0, unknown: 0 };
      if (rate === undefined) sum.unknown++;
      else sum.perHour += rate;
      rates.set(group, sum);
    }
    for (const [key, r] of running) {
      if (seen.has(key)) continue;
      accrue(r, t);
      running.delete(key);
    }
    perHour?.reset();
    unknown?.reset();
    for (const { labels, perHour: rate, unknown: n } of rates.values()) {
      perHour?.set(labels, rate);
      unknown?.set(labels, n);
    }
  }

  return {
    sync,
    traffic(proxy, tenant, bytes) {
      if (!proxy.provider || bytes <= 0) return;
      tenantBytes.inc({ tenant, provider: proxy.provider }, bytes);
      const price = perGiBPrice(prices, proxy.provider);
      if (price === undefined) {
        unpriced.inc({ provider: proxy.provider }, bytes);
        return;
      }
      const amount = (bytes / GIB) * price;
      cost.inc({ provider: proxy.provider, pool: proxy.pool, namespace: namespaceOf(proxy.id) }, amount);
      tenantCost.inc({ tenant, provider: proxy.provider }, amount);
    },
    start() {
      if (!catalog || timer) return;
      timer = setInterval(sync, tickMs);
      timer.unref();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = undefined;
      // What ran until now is counted before the process lets go.
      sync();
    },
  };
}

/**
 * `egress_pool_budget_limited{namespace, pool}`: 1 while a ProxyPool's
 * BudgetLimited condition is True (its budget holds the autoscaler back,
 * spec.replicas is over it, or rotation waits for the day's budget), 0
 * while it is not, for every pool with a spec.budget, from the api's
 * ProxyPool informer. The alert EgressPoolBudgetLimited watches it.
 */
export function registerPoolBudgetMetrics(registry: Registry, pools: { list(): readonly ProxyPool[] }): void {
  const gauge: Gauge<'namespace' | 'pool'> = new Gauge({
    name: 'egress_pool_budget_limited',
    help: "1 while a ProxyPool's BudgetLimited condition is True (its spec.budget holds it back), 0 otherwise; pools with a budget only",
    labelNames: ['namespace', 'pool'] as const,
    registers: [registry],
    collect() {
      gauge.reset();
      for (const pool of pools.list()) {
        if (!pool.spec.budget) continue;
        const limited = (pool.status?.conditions ?? []).some(
          (c) => c.type === 'BudgetLimited' && c.status === 'True',
        );
        gauge.set({ namespace: pool.metadata.namespace ?? '', pool: pool.metadata.name }, limited ? 1 : 0);
      }
    },
  });
}
