/**
 * The cost meter (issue 53) on a catalog it is handed and a clock of the
 * test's own: instance time at the entry's hourly price while the phase
 * costs, relayed bytes at its per-GiB price, unknown prices kept apart.
 */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createCostMeter } from '../../api/cost-meter.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { GIB, type PriceBook } from '../../providers/prices.js';
import type { Proxy, ProxyPhase } from '../../resources/proxy-schema.js';

const prices: PriceBook = {
  currency: 'USD',
  entries: {
    cheap: { spot: false, prices: { perInstanceHour: { onDemand: 0.36 }, perGiB: 0.5 } },
    vend: { spot: false, prices: { perSession: 0.01 } },
  },
};

function proxy(name: string, provider: string, phase: ProxyPhase, pool = 'p1'): Proxy {
  return {
    apiVersion: 'crawl.example.com/v1alpha1',
    kind: 'Proxy',
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, labels: { 'crawl.example.com/pool': pool } },
    spec: { mode: 'Managed', provider } as Proxy['spec'],
    status: { phase },
  };
}

async function value(
  registry: Registry,
  name: string,
  labels: Record<string, string>,
): Promise<number | undefined> {
  const metric = await registry.getSingleMetric(name)?.get();
  return metric?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))?.value;
}

describe('the cost meter', () => {
  it('counts running instance time at the hourly price, Provisioning included, Pending and Failed not', async () => {
    let t = 0;
    const registry = new Registry();
    const catalog = createStaticProxyCatalog([
      proxy('a', 'cheap', 'Provisioning'),
      proxy('b', 'cheap', 'Ready'),
      proxy('c', 'cheap', 'Pending'),
      proxy('d', 'cheap', 'Failed'),
    ]);
    const meter = createCostMeter({ prices, registry, catalog, now: () => t });
    meter.sync();
    t = 10_000;
    // Two running for 10 s at 0.36 an hour: 2 x 0.001.
    const labels = { provider: 'cheap', pool: 'p1', namespace: 'ns' };
    expect(await value(registry, 'egress_proxy_cost_total', labels)).toBeCloseTo(0.002, 12);
    expect(await value(registry, 'egress_proxy_cost_per_hour', labels)).toBeCloseTo(0.72, 12);
    // One goes; the other runs 10 s more.
    catalog.replace([proxy('b', 'cheap', 'Ready')]);
    // The next tick sees it gone.
    meter.sync();
    t = 20_000;
    expect(await value(registry, 'egress_proxy_cost_total', labels)).toBeCloseTo(0.003, 12);
  });

  it('keeps unknown prices apart (never zero), charges a session once, and prices relayed bytes', async () => {
    let t = 0;
    const registry = new Registry();
    const catalog = createStaticProxyCatalog([proxy('v', 'vend', 'Ready', ''), proxy('u', 'other', 'Ready')]);
    const meter = createCostMeter({ prices, registry, catalog, now: () => t });
    meter.sync();
    t = 60_000;
    meter.sync();
    expect(await value(registry, 'egress_proxy_cost_total', { provider: 'vend', pool: '' })).toBeCloseTo(
      0.01,
      12,
    );
    expect(await value(registry, 'egress_proxy_cost_total', { provider: 'other' })).toBeUndefined();
    expect(await value(registry, 'egress_proxy_cost_unknown_proxies', { provider: 'other' })).toBe(1);
    meter.traffic({ id: 'ns/x', provider: 'cheap', pool: 'p1' }, 'team-a', GIB / 4);
    meter.traffic({ id: 'ns/v', provider: 'vend', pool: '' }, 'team-a', 1000);
    expect(await value(registry, 'egress_proxy_cost_total', { provider: 'cheap', pool: 'p1' })).toBeCloseTo(
      0.125,
      12,
    );
    expect(
      await value(registry, 'egress_tenant_traffic_bytes_total', { tenant: 'team-a', provider: 'cheap' }),
    ).toBe(GIB / 4);
    expect(
      await value(registry, 'egress_tenant_traffic_cost_total', { tenant: 'team-a', provider: 'cheap' }),
    ).toBeCloseTo(0.125, 12);
    expect(await value(registry, 'egress_proxy_unpriced_bytes_total', { provider: 'vend' })).toBe(1000);
    expect(await value(registry, 'egress_cost_currency_info', { currency: 'USD' })).toBe(1);
  });
});
