import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { registerGatewayMetrics } from '../../gateway/metrics.js';

/** The sample lines of one metric on the page. */
const samples = (page: string, name: string) => page.split('\n').filter((l) => l.startsWith(`${name}{`));

describe('gateway per-proxy series', () => {
  it("drop a Proxy's series at the scrape after it leaves the catalog; the entry's and target's stay", async () => {
    const registry = new Registry();
    let known: Set<string> | undefined;
    const metrics = registerGatewayMetrics(registry, {
      maxTargetLabels: 10,
      sessions: () => 0,
      knownProxies: () => known,
    });
    for (const id of ['ns/a', 'ns/b']) {
      metrics.connection('connect', id, 'example.test:443');
      metrics.bytes({ id, provider: 'vend' }, 'example.test:443', 10, 100);
      metrics.upstreamError(id, 'example.test:443', 'refused');
    }
    // Not loaded yet: nothing is pruned.
    let page = await registry.metrics();
    expect(samples(page, 'egress_gateway_proxy_bytes_total')).toHaveLength(4);

    known = new Set(['ns/a']);
    page = await registry.metrics();
    for (const name of [
      'egress_gateway_proxy_connections_total',
      'egress_gateway_proxy_bytes_total',
      'egress_gateway_proxy_errors_total',
    ]) {
      const lines = samples(page, name);
      expect(lines.length, name).toBeGreaterThan(0);
      expect(
        lines.every((l) => l.includes('proxy="ns/a"')),
        `${name}: ${lines.join('; ')}`,
      ).toBe(true);
    }
    // What an account costs outlives its sessions.
    expect(samples(page, 'egress_gateway_provider_bytes_total')).toEqual([
      'egress_gateway_provider_bytes_total{provider="vend",direction="upstream"} 20',
      'egress_gateway_provider_bytes_total{provider="vend",direction="downstream"} 200',
    ]);
    expect(samples(page, 'egress_gateway_target_bytes_total')).toHaveLength(2);

    // Traffic through a Proxy that comes back counts again from zero.
    known = new Set(['ns/a', 'ns/b']);
    metrics.bytes({ id: 'ns/b', provider: 'vend' }, 'example.test:443', 1, 2);
    page = await registry.metrics();
    expect(samples(page, 'egress_gateway_proxy_bytes_total')).toContain(
      'egress_gateway_proxy_bytes_total{proxy="ns/b",direction="upstream"} 1',
    );
  });
});
