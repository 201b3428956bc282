/**
 * The Gateway page's figures, read from the gateway's own metrics in this
 * process's registry: the same numbers `/metrics` carries, so the page and
 * a Prometheus graph never disagree. Rates are the change of a counter
 * between two readings.
 */
import type { Registry } from 'prom-client';
import type { CostView, GatewayView, TrafficRow } from '../protocol.js';

const TOP_TARGETS = 20;

/** Counter totals at one moment, kept for the next reading's rates. */
export interface GatewaySample {
  at: number;
  proxyBytes: Map<string, number>;
  targetBytes: Map<string, number>;
}

interface Series {
  labels: Record<string, string | number | undefined>;
  value: number;
}

async function series(registry: Registry, name: string): Promise<Series[]> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return [];
  const read = (await metric.get()) as { values: Series[] };
  return read.values;
}

function sumBy(values: readonly Series[], label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const v of values) {
    const key = String(v.labels[label] ?? '');
    out.set(key, (out.get(key) ?? 0) + v.value);
  }
  return out;
}

function errorsBy(values: readonly Series[], label: string): Map<string, Record<string, number>> {
  const out = new Map<string, Record<string, number>>();
  for (const v of values) {
    const key = String(v.labels[label] ?? '');
    const reason = String(v.labels.reason ?? '');
    const errors = out.get(key) ?? {};
    errors[reason] = (errors[reason] ?? 0) + v.value;
    out.set(key, errors);
  }
  return out;
}

function trafficRows(
  connections: Map<string, number>,
  bytes: Map<string, number>,
  previous: Map<string, number> | undefined,
  errors: Map<string, Record<string, number>>,
  seconds: number,
): TrafficRow[] {
  const keys = new Set([...connections.keys(), ...bytes.keys(), ...errors.keys()]);
  return [...keys].map((key) => {
    const total = bytes.get(key) ?? 0;
    const before = previous?.get(key);
    return {
      key,
      connections: connections.get(key) ?? 0,
      bytesTotal: total,
      bytesPerSecond: before !== undefined && seconds > 0 ? Math.max(0, (total - before) / seconds) : 0,
      errors: errors.get(key) ?? {},
    };
  });
}

/** Reads the gateway's series now; `previous` (the last reading) gives the rates. */
export async function gatewayView(
  registry: Registry,
  previous: GatewaySample | undefined,
  now: number,
): Promise<{ view: GatewayView; sample: GatewaySample }> {
  const [
    proxyConnections,
    targetConnections,
    proxyBytes,
    targetBytes,
    proxyErrors,
    targetErrors,
    requests,
    active,
  ] = await Promise.all([
    series(registry, 'egress_gateway_proxy_connections_total'),
    series(registry, 'egress_gateway_target_connections_total'),
    series(registry, 'egress_gateway_proxy_bytes_total'),
    series(registry, 'egress_gateway_target_bytes_total'),
    series(registry, 'egress_gateway_proxy_errors_total'),
    series(registry, 'egress_gateway_target_errors_total'),
    series(registry, 'egress_gateway_requests_total'),
    series(registry, 'egress_gateway_active_tunnels'),
  ]);
  const sample: GatewaySample = {
    at: now,
    proxyBytes: sumBy(proxyBytes, 'proxy'),
    targetBytes: sumBy(targetBytes, 'target'),
  };
  const seconds = previous ? (now - previous.at) / 1000 : 0;
  const proxies = trafficRows(
    sumBy(proxyConnections, 'proxy'),
    sample.proxyBytes,
    previous?.proxyBytes,
    errorsBy(proxyErrors, 'proxy'),
    seconds,
  ).sort((a, b) => b.bytesPerSecond - a.bytesPerSecond || (a.key < b.key ? -1 : 1));
  const targets = trafficRows(
    sumBy(targetConnections, 'target'),
    sample.targetBytes,
    previous?.targetBytes,
    errorsBy(targetErrors, 'target'),
    seconds,
  )
    .sort((a, b) => b.bytesPerSecond - a.bytesPerSecond || b.bytesTotal - a.bytesTotal)
    .slice(0, TOP_TARGETS);
  const byOutcome: Record<string, number> = {};
  for (const r of requests) {
    const outcome = String(r.labels.outcome ?? '');
    byOutcome[outcome] = (byOutcome[outcome] ?? 0) + r.value;
  }
  return {
    sample,
    view: {
      present: registry.getSingleMetric('egress_gateway_active_tunnels') !== undefined,
      activeTunnels: active.reduce((s, v) => s + v.value, 0),
      requests: byOutcome,
      bytesPerSecond: proxies.reduce((s, p) => s + p.bytesPerSecond, 0),
      proxies,
      targets,
    },
  };
}

const TOP_TENANTS = 10;

/** The cost metrics of this process (api/cost-meter.ts), by provider and by tenant. */
export async function costView(registry: Registry): Promise<CostView> {
  const [total, perHour, unknown, tenantBytes, tenantCost, currency] = await Promise.all([
    series(registry, 'egress_proxy_cost_total'),
    series(registry, 'egress_proxy_cost_per_hour'),
    series(registry, 'egress_proxy_cost_unknown_proxies'),
    series(registry, 'egress_tenant_traffic_bytes_total'),
    series(registry, 'egress_tenant_traffic_cost_total'),
    series(registry, 'egress_cost_currency_info'),
  ]);
  const totals = sumBy(total, 'provider');
  const rates = sumBy(perHour, 'provider');
  const unknowns = sumBy(unknown, 'provider');
  const providers = [...new Set([...totals.keys(), ...rates.keys(), ...unknowns.keys()])]
    .sort()
    .map((provider) => ({
      provider,
      total: totals.get(provider) ?? 0,
      perHour: rates.get(provider) ?? 0,
      unknownProxies: unknowns.get(provider) ?? 0,
    }));
  const bytes = sumBy(tenantBytes, 'tenant');
  const costs = sumBy(tenantCost, 'tenant');
  const tenants = [...bytes.keys()]
    .map((tenant) => ({ tenant, bytes: bytes.get(tenant) ?? 0, cost: costs.get(tenant) ?? 0 }))
    .sort((a, b) => b.bytes - a.bytes)
    .slice(0, TOP_TENANTS);
  return { currency: String(currency[0]?.labels.currency ?? ''), providers, tenants };
}
