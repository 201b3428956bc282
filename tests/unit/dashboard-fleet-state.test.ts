/**
 * The dashboard's live model (dashboard/server/fleet-state.ts) over
 * in-memory informers and the real memory lease store: what a page is sent
 * first, the changes after (only the rows that moved, the ids gone), lease
 * counts as they change, and a tenant's scope on every event.
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { createCostMeter } from '../../api/cost-meter.js';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { createFleetState, type FleetState } from '../../dashboard/server/fleet-state.js';
import type { DashboardEvents } from '../../dashboard/protocol.js';
import type { InformerEvent, ResilientInformer } from '../../kube/informer.js';
import {
  API_VERSION,
  type ProviderHealth,
  type Proxy,
  type ProxyPool,
} from '../../resources/proxy-schema.js';
import { defaultTenant, parseTenants } from '../../tenants/tenants.js';
import { eventually } from '../helpers/temporal.js';

/** An informer over a Map, whose changes the test makes. */
function memoryInformer<T extends { metadata: { name: string; namespace?: string } }>(initial: T[] = []) {
  const key = (o: T) => `${o.metadata.namespace ?? ''}/${o.metadata.name}`;
  const objects = new Map(initial.map((o) => [key(o), o]));
  const listeners = new Set<(o: T, e: InformerEvent) => void>();
  const informer: ResilientInformer<T> = {
    get: (name, namespace) => objects.get(`${namespace ?? ''}/${name}`),
    list: () => [...objects.values()],
    synced: () => true,
    onChange(l) {
      listeners.add(l);
      return () => listeners.delete(l);
    },
    onReconnect: () => () => undefined,
    start: () => Promise.resolve(),
    stop: () => Promise.resolve(),
  };
  return {
    informer,
    put(o: T) {
      const existed = objects.has(key(o));
      objects.set(key(o), o);
      for (const l of listeners) l(o, existed ? 'update' : 'add');
    },
    remove(o: T) {
      objects.delete(key(o));
      for (const l of listeners) l(o, 'delete');
    },
  };
}

function proxy(name: string, opts: { pool?: string; team?: string; ready?: boolean } = {}): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: {
      name,
      namespace: 'ns',
      uid: `uid-${name}`,
      creationTimestamp: '2026-12-06T10:00:00Z',
      ...(opts.pool ? { labels: { 'crawl.example.com/pool': opts.pool } } : {}),
    },
    spec: {
      mode: 'Managed',
      provider: 'local',
      port: 3128,
      maxLeases: 2,
      attributes: { team: opts.team ?? 'a' },
    } as unknown as Proxy['spec'],
    status: {
      phase: opts.ready === false ? 'Provisioning' : 'Ready',
      ip: '127.0.0.9',
      conditions: [
        {
          type: 'Healthy',
          status: opts.ready === false ? 'False' : 'True',
          reason: opts.ready === false ? 'ProbeFailed' : 'ProbeSucceeded',
          message: '<b>not markup</b>',
          lastTransitionTime: '2026-12-06T10:00:00Z',
        },
      ],
    },
  };
}

function pool(name: string, replicas: number): ProxyPool {
  return {
    apiVersion: API_VERSION,
    kind: 'ProxyPool',
    metadata: { name, namespace: 'ns', uid: `pool-${name}` },
    spec: { replicas, template: { spec: { mode: 'Managed', provider: 'local' } } } as ProxyPool['spec'],
    status: {
      desiredReplicas: replicas,
      readyReplicas: replicas,
      costPerHour: `${(replicas * 0.05).toFixed(4)} USD`,
    },
  };
}

function health(name: string): ProviderHealth {
  return {
    apiVersion: API_VERSION,
    kind: 'ProviderHealth',
    metadata: { name },
    status: {
      type: 'local',
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'CheckPassed',
          message: 'ok',
          lastTransitionTime: '2026-12-06T10:00:00Z',
        },
      ],
    },
  };
}

type Seen = Array<
  { [K in keyof DashboardEvents]: { event: K; data: DashboardEvents[K] } }[keyof DashboardEvents]
>;

describe('dashboard fleet state', () => {
  let state: FleetState | undefined;
  afterEach(() => state?.stop());

  const setup = () => {
    const proxies = memoryInformer([
      proxy('a1', { pool: 'alpha' }),
      proxy('a2', { pool: 'alpha' }),
      proxy('s1', { team: 'b' }),
    ]);
    const pools = memoryInformer([pool('alpha', 2), pool('beta', 1)]);
    const healths = memoryInformer([health('local'), health('gcp')]);
    const leaseStore = new MemoryLeaseStore({ cooldownMs: 60_000 });
    state = createFleetState({
      proxies: proxies.informer,
      pools: pools.informer,
      providerHealths: healths.informer,
      leaseStore,
      logger: pino({ level: 'silent' }),
      tickMs: 20,
      historySampleMs: 50,
    });
    state.start();
    return { proxies, pools, leaseStore };
  };
  const subscribe = (tenant = defaultTenant('t')) => {
    const seen: Seen = [];
    const off = state!.subscribe(tenant, (event, data) => seen.push({ event, data } as Seen[number]));
    return { seen, off };
  };
  const last = <K extends keyof DashboardEvents>(seen: Seen, event: K) =>
    seen.filter((s) => s.event === event).at(-1)?.data as DashboardEvents[K] | undefined;

  it('sends a new page everything, then only what changed: an added row, an updated row, a removed id', async () => {
    const { proxies } = setup();
    const { seen } = subscribe();
    const first = last(seen, 'proxies')!;
    expect(first.full).toBe(true);
    expect(first.upsert.map((r) => r.id)).toEqual(['ns/a1', 'ns/a2', 'ns/s1']);
    const a1 = first.upsert[0]!;
    expect(a1).toMatchObject({
      address: '127.0.0.9:3128',
      healthy: true,
      pool: 'alpha',
      provider: 'local',
      maxLeases: 2,
    });
    expect(a1.message).toBe('<b>not markup</b>');
    expect(last(seen, 'pools')!.map((p) => [p.id, p.readyMembers, p.costPerHour])).toEqual([
      ['ns/alpha', 2, '0.1000 USD'],
      ['ns/beta', 0, '0.0500 USD'],
    ]);
    expect(last(seen, 'providers')!.map((p) => p.name)).toEqual(['gcp', 'local']);

    const before = seen.length;
    proxies.put(proxy('a3', { pool: 'alpha', ready: false }));
    const added = await eventually('the added row', () =>
      Promise.resolve(seen.slice(before).find((s) => s.event === 'proxies')?.data),
    );
    expect(added).toMatchObject({ full: false, remove: [] });
    expect(added.upsert.map((r) => [r.id, r.healthy, r.reason])).toEqual([['ns/a3', false, 'ProbeFailed']]);

    const changedAt = seen.length;
    proxies.put(proxy('a1', { pool: 'alpha', ready: false }));
    const changed = await eventually('the updated row', () =>
      Promise.resolve(seen.slice(changedAt).find((s) => s.event === 'proxies')?.data),
    );
    expect(changed.upsert.map((r) => [r.id, r.healthy])).toEqual([['ns/a1', false]]);

    const mark = seen.length;
    proxies.remove(proxy('s1'));
    const removed = await eventually('the removal', () =>
      Promise.resolve(seen.slice(mark).find((s) => s.event === 'proxies')?.data),
    );
    expect(removed).toEqual({ full: false, upsert: [], remove: ['ns/s1'] });
  });

  it('follows the lease store: a lease held shows on its row (and its pool) at the next tick', async () => {
    const { leaseStore } = setup();
    const { seen } = subscribe();
    const mark = seen.length;
    const candidate = { id: 'ns/a2', uid: 'uid-a2', maxLeases: 2, latencyMillis: 1 };
    const outcome = leaseStore.acquireNow({ candidates: [candidate], ttlMs: 60_000, target: '' });
    expect(outcome.granted).not.toBeNull();
    const update = await eventually('the lease on the row', () =>
      Promise.resolve(seen.slice(mark).find((s) => s.event === 'proxies')?.data),
    );
    expect(update.upsert.map((r) => [r.id, r.leases])).toEqual([['ns/a2', 1]]);
    await eventually('the pool counts it', () =>
      Promise.resolve(last(seen, 'pools')?.find((p) => p.id === 'ns/alpha')?.leases === 1 || undefined),
    );
  });

  it("keeps to a tenant's scope: its pools' Proxies, its pools, the providers they use; no targets", () => {
    setup();
    const [scoped] = parseTenants(
      { tenants: [{ name: 'team', tokenSha256: 'a'.repeat(64), pools: ['alpha'] }] },
      'test',
    );
    const { seen } = subscribe(scoped);
    expect(last(seen, 'session')).toBeUndefined();
    expect(last(seen, 'proxies')!.upsert.map((r) => r.id)).toEqual(['ns/a1', 'ns/a2']);
    expect(last(seen, 'pools')!.map((p) => p.id)).toEqual(['ns/alpha']);
    expect(last(seen, 'providers')!.map((p) => p.name)).toEqual(['local']);
    expect(last(seen, 'gateway')!.targets).toEqual([]);
    expect(state!.proxy(scoped!, 'ns/s1')).toBeUndefined();
    expect(state!.proxy(scoped!, 'ns/a1')?.id).toBe('ns/a1');
    expect(state!.pool(scoped!, 'ns/beta')).toBeUndefined();
  });

  it('samples each pool into its history whether or not a page is open', async () => {
    setup();
    await eventually('two samples', () =>
      Promise.resolve((state!.pool(defaultTenant('t'), 'ns/alpha')?.history.length ?? 0) >= 2 || undefined),
    );
    const point = state!.pool(defaultTenant('t'), 'ns/alpha')!.history[0]!;
    expect(point).toMatchObject({ desired: 2, ready: 2, leases: 0 });
  });

  it('shows the cost meter of its process by provider and the top tenants by traffic; a scoped tenant sees none of it', async () => {
    const registry = new Registry();
    let t = 0;
    const meter = createCostMeter({
      prices: {
        currency: 'EUR',
        entries: { local: { spot: false, prices: { perInstanceHour: { onDemand: 3.6 }, perGiB: 1 } } },
      },
      registry,
      catalog: createStaticProxyCatalog([proxy('a1', { pool: 'alpha' })]),
      now: () => t,
    });
    meter.sync();
    t = 1_000;
    meter.traffic({ id: 'ns/a1', provider: 'local', pool: 'alpha' }, 'team-x', 2 ** 30);
    const proxies = memoryInformer([proxy('a1', { pool: 'alpha' })]);
    const pools = memoryInformer([pool('alpha', 1)]);
    state = createFleetState({
      proxies: proxies.informer,
      pools: pools.informer,
      leaseStore: new MemoryLeaseStore(),
      gatewayRegistry: registry,
      logger: pino({ level: 'silent' }),
      tickMs: 20,
    });
    state.start();
    const { seen } = subscribe();
    // The first event is sent at once, before a tick has read the metrics.
    const cost = await eventually('the cost event with the figures', () => {
      const latest = last(seen, 'cost');
      return Promise.resolve(latest && latest.providers.length > 0 ? latest : undefined);
    });
    expect(cost.currency).toBe('EUR');
    // One second at 3.6 an hour, and one GiB at 1.
    expect(cost.providers).toHaveLength(1);
    expect(cost.providers[0]!.provider).toBe('local');
    expect(cost.providers[0]!.total).toBeCloseTo(1.001, 6);
    expect(cost.tenants).toEqual([{ tenant: 'team-x', bytes: 2 ** 30, cost: 1 }]);
    const [scoped] = parseTenants(
      { tenants: [{ name: 'team', tokenSha256: 'b'.repeat(64), pools: ['alpha'] }] },
      'test',
    );
    const other = subscribe(scoped);
    // After a tick (a gateway event follows each reading), still nothing of the money.
    const ticks = seen.filter((s) => s.event === 'gateway').length;
    await eventually('a later reading', () =>
      Promise.resolve(seen.filter((s) => s.event === 'gateway').length > ticks || undefined),
    );
    expect(last(other.seen, 'cost')).toEqual({ currency: 'EUR', providers: [], tenants: [] });
  });
});
