import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createPoolDemand } from '../../api/pool-demand.js';
import { createStaticProxyCatalog, proxyViewFromResource } from '../../api/proxy-catalog.js';
import { API_VERSION } from '../../kube/coordinates.js';
import type { Proxy, ProxyPool } from '../../resources/proxy-schema.js';
import type { PoolDemandReport } from '../../workflows/pool/types.js';

const at = '2026-12-03T10:00:00Z';

function member(name: string, pool: string, attributes: Record<string, string> = {}): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, labels: { 'crawl.example.com/pool': pool } },
    spec: { mode: 'Managed', provider: 'local', maxLeases: 20, attributes } as Proxy['spec'],
    status: {
      ip: '127.0.0.9',
      conditions: [
        { type: 'Healthy', status: 'True', reason: 'ProbeSucceeded', message: '', lastTransitionTime: at },
      ],
    },
  };
}

function pool(name: string, spec: Partial<ProxyPool['spec']>): ProxyPool {
  return {
    apiVersion: API_VERSION,
    kind: 'ProxyPool',
    metadata: { name, namespace: 'ns', uid: `pool-${name}` },
    spec: {
      replicas: 2,
      template: { spec: { mode: 'Managed', provider: 'local', maxLeases: 5 } },
      strategy: { maxSurge: 1, maxUnavailable: 0, drainTimeoutSeconds: 60 },
      ...spec,
    } as ProxyPool['spec'],
    status: { desiredReplicas: 2 },
  };
}

const autoscaling = {
  minReplicas: 2,
  maxReplicas: 40,
  targetUtilization: 0.8,
  scaleUpStabilizationSeconds: 30,
  scaleDownStabilizationSeconds: 300,
};

/** A reporter driven tick by tick on a clock the test moves (tickMs is huge: ticks are by hand). */
function harness(pools: ProxyPool[], members: Proxy[], fail = false) {
  let nowMs = Date.parse(at);
  const store = new MemoryLeaseStore({ clock: { now: () => nowMs } });
  const sent: Array<{ pool: string; report: PoolDemandReport }> = [];
  const registry = new Registry();
  const demand = createPoolDemand({
    catalog: createStaticProxyCatalog(members),
    pools: { list: () => pools },
    leaseStore: store,
    sharedStore: false,
    reporter: 'api-0',
    signal: (ref, report) => {
      if (fail) return Promise.reject(new Error('no Temporal'));
      sent.push({ pool: ref.name, report });
      return Promise.resolve();
    },
    logger: pino({ level: 'silent' }),
    registry,
    tickMs: 1,
    now: () => nowMs,
  });
  const tick = async () => {
    const before = demand.passes();
    demand.start();
    while (demand.passes() === before) await new Promise((r) => setTimeout(r, 1));
    await demand.stop();
  };
  const lease = async (m: Proxy) => {
    const out = await store.acquire({ candidates: [proxyViewFromResource(m)], target: '', ttlMs: 3_600_000 });
    if (!out.granted) throw new Error('no lease');
    return out.granted.id;
  };
  return {
    demand,
    store,
    sent,
    registry,
    tick,
    lease,
    advance: (ms: number) => {
      nowMs += ms;
    },
  };
}

describe('pool demand reports', () => {
  it('reports only pools that ask, once at first, then only when the recommendation moves or a heartbeat is due', async () => {
    const a = member('a-1', 'auto');
    const b = member('b-1', 'plain');
    const h = harness([pool('auto', { autoscaling }), pool('plain', {})], [a, b]);
    await h.tick();
    expect(h.sent.map((s) => s.pool)).toEqual(['auto']);
    expect(h.sent[0]!.report).toMatchObject({ reporter: 'api-0', activeLeases: 0, denials: 0, bans: [] });
    // Steady: nothing more.
    h.advance(5_000);
    await h.tick();
    expect(h.sent).toHaveLength(1);
    // 9 leases at 4 per member: 3 members, a new recommendation.
    for (let i = 0; i < 9; i++) await h.lease(a);
    h.advance(5_000);
    await h.tick();
    expect(h.sent).toHaveLength(2);
    expect(h.sent[1]!.report).toMatchObject({ activeLeases: 9, leasesByMember: { 'uid-a-1': 9 } });
    // The heartbeat, ten minutes later.
    h.advance(10 * 60_000);
    await h.tick();
    expect(h.sent).toHaveLength(3);
  });

  it('holds the peak of leases held over a minute, so churn at a steady demand sends nothing', async () => {
    const a = member('a-1', 'auto');
    const h = harness([pool('auto', { autoscaling })], [a]);
    const ids = [];
    for (let i = 0; i < 12; i++) ids.push(await h.lease(a));
    await h.tick();
    expect(h.sent.at(-1)!.report.activeLeases).toBe(12);
    // Sessions end and start: the count dips to 8 for a tick.
    for (const id of ids.splice(0, 4)) await h.store.release(id);
    h.advance(5_000);
    await h.tick();
    expect(h.sent).toHaveLength(1);
    // Still at 8 a minute later: the peak leaves the window and the drop is reported.
    h.advance(61_000);
    await h.tick();
    expect(h.sent).toHaveLength(2);
    expect(h.sent[1]!.report.activeLeases).toBe(8);
  });

  it('counts refusals for the pools a member of which the request selects, and says when they stop', async () => {
    const eu = member('eu-1', 'eu', { geo: 'eu' });
    const us = member('us-1', 'us', { geo: 'us' });
    const h = harness([pool('eu', { autoscaling }), pool('us', { autoscaling })], [eu, us]);
    await h.tick();
    h.sent.length = 0;
    h.demand.noteDenied([['geo', 'eu']]);
    h.demand.noteDenied([['geo', 'eu']]);
    h.demand.noteDenied([], 'us');
    h.advance(5_000);
    await h.tick();
    expect(h.sent.map((s) => [s.pool, s.report.denials]).sort()).toEqual([
      ['eu', 2],
      ['us', 1],
    ]);
    const metrics = await h.registry.getSingleMetricAsString('egress_pool_lease_denials_total');
    expect(metrics).toContain('egress_pool_lease_denials_total{namespace="ns",pool="eu"} 2');
    // No refusal since: one more report each saying so, then quiet.
    h.sent.length = 0;
    h.advance(5_000);
    await h.tick();
    expect(h.sent.map((s) => s.report.denials)).toEqual([0, 0]);
    h.advance(5_000);
    await h.tick();
    expect(h.sent.filter((s) => s.report.denials === 0)).toHaveLength(2);
  });

  it('batches ban reports to their pool, keeps them when a report cannot be sent', async () => {
    const m = member('r-1', 'rot');
    const rotating = pool('rot', {
      rotation: { afterBans: { reports: 3, distinctTargets: 3, windowSeconds: 600 } },
    });
    const failing = harness([rotating], [m], true);
    failing.demand.noteBanned('uid-r-1', 'a.example');
    await failing.tick();
    expect(failing.sent).toEqual([]);
    expect(await failing.registry.getSingleMetricAsString('egress_pool_demand_reports_total')).toContain(
      'outcome="failed"} 1',
    );

    const h = harness([rotating], [m]);
    h.demand.noteBanned('uid-r-1', 'a.example');
    h.demand.noteBanned('uid-r-1', 'b.example');
    h.demand.noteBanned('uid-unknown', 'c.example');
    await h.tick();
    expect(h.sent).toHaveLength(1);
    expect(h.sent[0]!.report.bans.map((b) => [b.uid, b.target])).toEqual([
      ['uid-r-1', 'a.example'],
      ['uid-r-1', 'b.example'],
    ]);
  });
});
