/**
 * Two lease API replicas on one Redis: each a real `egress-proxies api`
 * process (its own informer on the shared kube-apiserver, its own prober),
 * both with `--lease-store redis://...` on Debian's redis-server. Checks
 * capacity across replicas under 64 concurrent clients (from the responses
 * and from Redis itself), 409 counts, a cooldown crossing replicas, and a
 * replica restart (and a SIGKILL mid-request) losing nothing.
 *
 * The proxies are External ones on a closed loopback port, so the
 * replicas' probers never send traffic off the machine; their Healthy
 * condition is written here, as a workflow would.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import { leaseApiUrl, startCli, type CliProcess, testServerArgs } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  getProxy,
  kubeConfig,
  proxyClient,
  setProxyStatus,
} from '../helpers/kube.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { redisActiveSlots } from './gateway-helpers.js';
import { eventually } from '../helpers/temporal.js';
import { freePort as closedPort } from '../../local-servers/ports.js';

const TOKEN = 'replica-token';
const PROXIES = 8;
const MAX_LEASES = 2;
const CLIENTS = 64;

interface Replica {
  name: string;
  cli: CliProcess;
  url: string;
}

interface Reply {
  status: number;
  body: Record<string, unknown>;
}

async function call(replica: Replica, method: string, path: string, body?: unknown): Promise<Reply> {
  const res = await fetch(replica.url + path, {
    method,
    headers: {
      authorization: `Bearer ${TOKEN}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

describe('two lease API processes on one Redis', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  /** Every process started, for the cleanup. */
  const replicas: Replica[] = [];
  let a: Replica;
  let b: Replica;
  let redis: RunningRedis;
  let inspect: Redis;
  let namespace = '';
  const pool = () => ({ suite: namespace, group: 'pool' });

  async function startReplica(name: string): Promise<Replica> {
    const cli = startCli(
      [
        'api',
        '--discovery-addr',
        '127.0.0.1:0',
        '--lease-store',
        redis.url,
        ...testServerArgs(),
        // Only this test's Proxies: its prober must not probe and signal other tests'.
        '--watch-namespaces',
        namespace,
      ],
      { env: { DISCOVERY_TOKEN: TOKEN } },
    );
    const replica: Replica = { name, cli, url: '' };
    replicas.push(replica);
    replica.url = await leaseApiUrl(cli, 150_000);
    // Its informer has every proxy of this test, healthy.
    await eventually(
      `${name} to see the proxies`,
      async () => {
        const r = await call(replica, 'GET', `/v1/proxies?healthy=true&attr.suite=${namespace}`);
        return r.body.count === PROXIES + 1 || undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    return replica;
  }

  async function stopReplica(replica: Replica, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    await replica.cli.stop(30_000, signal);
  }

  const redisActive = () => redisActiveSlots(inspect);

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    namespace = await createNamespace(kc, 'replicas');
    const port = await closedPort();
    const status = (latencyMillis: number): ProxyStatus => ({
      phase: 'Ready',
      latencyMillis,
      conditions: [
        {
          type: 'Healthy',
          status: 'True',
          lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
          reason: 'Probe',
          message: 'ok',
        },
      ],
    });
    const names = [...Array.from({ length: PROXIES }, (_, i) => `p${i}`), 'solo'];
    for (const [i, name] of names.entries()) {
      await createProxy(objects, namespace, name, {
        mode: 'External',
        endpoint: { host: '127.0.0.1', port },
        maxLeases: name === 'solo' ? 1 : MAX_LEASES,
        attributes: name === 'solo' ? { suite: namespace, group: 'solo' } : pool(),
      });
      await setProxyStatus(objects, await getProxy(objects, namespace, name), status(10 + i));
    }
    [a, b] = await Promise.all([startReplica('replica-a'), startReplica('replica-b')]);
  }, 400_000);

  afterAll(async () => {
    for (const r of replicas) await stopReplica(r);
    inspect?.disconnect();
    await redis?.stop();
  });

  it('64 concurrent clients over both replicas never get a third lease on a proxy, and every 409 adds up', async () => {
    // Round one: everyone at once, nobody releases: exactly the 16 slots are granted.
    const first = await Promise.all(
      Array.from({ length: CLIENTS }, (_, i) =>
        call(i % 2 ? b : a, 'POST', '/v1/leases', { selector: pool(), ttlSeconds: 60 }),
      ),
    );
    const granted = first.filter((r) => r.status === 201);
    const refused = first.filter((r) => r.status === 409);
    expect(granted).toHaveLength(PROXIES * MAX_LEASES);
    expect(refused).toHaveLength(CLIENTS - PROXIES * MAX_LEASES);
    const perProxy = new Map<string, number>();
    for (const r of granted) {
      const id = (r.body.proxy as { id: string }).id;
      perProxy.set(id, (perProxy.get(id) ?? 0) + 1);
      expect((r.body.proxy as { activeLeases: number }).activeLeases).toBeLessThanOrEqual(MAX_LEASES);
    }
    expect([...perProxy.values()]).toEqual(Array.from({ length: PROXIES }, () => MAX_LEASES));
    for (const r of refused) {
      expect(r.body).toMatchObject({ error: 'no_match', considered: PROXIES, atCapacity: PROXIES });
      const { considered, atCapacity, inCooldown, unhealthy } = r.body as Record<string, number>;
      expect(atCapacity! + inCooldown! + unhealthy!).toBe(considered);
    }
    const held = await redisActive();
    expect([...held.values()].filter((n) => n > MAX_LEASES)).toEqual([]);
    expect([...held.values()].reduce((x, y) => x + y, 0)).toBe(PROXIES * MAX_LEASES);
    await Promise.all(
      granted.map((r, i) => call(i % 2 ? a : b, 'DELETE', `/v1/leases/${String(r.body.leaseID)}`)),
    );
    expect((await redisActive()).size).toBe(0);

    // Round two: churn. Each client acquires on one replica and releases on
    // the other. A lease counts as live here from its 201 until just before
    // its DELETE is sent, inside the interval the server holds it, so more
    // than 2 here would mean more than 2 there.
    const live = new Map<string, number>();
    let peak = 0;
    let grants = 0;
    let conflicts = 0;
    let overRedis = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const n of (await redisActive()).values()) if (n > MAX_LEASES) overRedis++;
      }
    })();
    const client = async (i: number) => {
      for (let round = 0; round < 15; round++) {
        const [acq, rel] = (i + round) % 2 ? [a, b] : [b, a];
        const r = await call(acq, 'POST', '/v1/leases', { selector: pool(), ttlSeconds: 60 });
        if (r.status === 409) {
          conflicts++;
          const { considered, atCapacity, inCooldown, unhealthy } = r.body as Record<string, number>;
          expect(atCapacity! + inCooldown! + unhealthy!).toBe(considered);
          continue;
        }
        expect(r.status).toBe(201);
        grants++;
        const id = (r.body.proxy as { id: string }).id;
        const n = (live.get(id) ?? 0) + 1;
        live.set(id, n);
        peak = Math.max(peak, n);
        // Hold it across one more request.
        await call(rel, 'GET', `/v1/proxies?attr.suite=${namespace}&attr.group=pool`);
        live.set(id, live.get(id)! - 1);
        expect((await call(rel, 'DELETE', `/v1/leases/${String(r.body.leaseID)}`)).status).toBe(204);
      }
    };
    await Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i)));
    sampling = false;
    await sampler;
    expect(peak).toBeLessThanOrEqual(MAX_LEASES);
    expect(overRedis).toBe(0);
    expect(grants + conflicts).toBe(CLIENTS * 15);
    expect(grants).toBeGreaterThan(PROXIES * MAX_LEASES);
    expect((await redisActive()).size).toBe(0);
  }, 240_000);

  it('a cooldown reported on one replica holds on the other', async () => {
    const solo = { suite: namespace, group: 'solo' };
    const lease = await call(a, 'POST', '/v1/leases', { selector: solo, target: 'shop.example' });
    expect(lease.status).toBe(201);
    const path = `/v1/leases/${String(lease.body.leaseID)}`;
    expect((await call(b, 'POST', `${path}/report`, { result: 'banned' })).status).toBe(204);
    expect((await call(b, 'DELETE', path)).status).toBe(204);
    for (const replica of [a, b]) {
      const r = await call(replica, 'POST', '/v1/leases', { selector: solo, target: 'shop.example' });
      expect(r.status, replica.name).toBe(409);
      expect(r.body).toMatchObject({ considered: 1, inCooldown: 1, atCapacity: 0 });
    }
    const elsewhere = await call(b, 'POST', '/v1/leases', { selector: solo, target: 'other.example' });
    expect(elsewhere.status).toBe(201);
    expect((await call(a, 'DELETE', `/v1/leases/${String(elsewhere.body.leaseID)}`)).status).toBe(204);
  });

  it('a restarted replica still knows the active lease and the cooldown', async () => {
    const solo = { suite: namespace, group: 'solo' };
    const lease = await call(a, 'POST', '/v1/leases', { selector: solo, target: 'third.example' });
    expect(lease.status).toBe(201);
    await stopReplica(a);
    const restarted = await startReplica('replica-a2');
    expect(restarted.cli.output()).toMatch(/joined the lease state in Redis/);

    // The slot is still taken, the cooldown from the test before still holds.
    expect(
      (await call(restarted, 'POST', '/v1/leases', { selector: solo, target: 'fourth.example' })).body,
    ).toMatchObject({ error: 'no_match', atCapacity: 1 });
    const path = `/v1/leases/${String(lease.body.leaseID)}`;
    expect((await call(restarted, 'POST', `${path}/report`, { result: 'ok' })).status).toBe(204);
    expect((await call(restarted, 'DELETE', path)).status).toBe(204);
    expect((await call(restarted, 'POST', `${path}/report`, { result: 'ok' })).status).toBe(404);
    const cooled = await call(restarted, 'POST', '/v1/leases', { selector: solo, target: 'shop.example' });
    expect(cooled.body).toMatchObject({ error: 'no_match', inCooldown: 1 });
    a = restarted;
  }, 180_000);

  it('a replica killed mid-request loses no slot: what it granted expires with its TTL', async () => {
    // A burst of short leases on b, then SIGKILL while some are in flight.
    const burst = Array.from({ length: 32 }, () =>
      call(b, 'POST', '/v1/leases', { selector: pool(), ttlSeconds: 2 }).catch(() => undefined),
    );
    await stopReplica(b, 'SIGKILL');
    await Promise.all(burst);
    // Whatever b granted (answered or not) holds a slot only until its TTL:
    // then all 16 slots are free again, seen from a.
    await eventually(
      'the killed replica’s leases to expire',
      async () => {
        const r = await call(a, 'GET', `/v1/proxies?attr.suite=${namespace}&attr.group=pool`);
        const active = (r.body.proxies as Array<{ activeLeases: number }>).reduce(
          (s, p) => s + p.activeLeases,
          0,
        );
        return active === 0 || undefined;
      },
      { timeoutMs: 20_000, intervalMs: 200 },
    );
    const all = await Promise.all(
      Array.from({ length: PROXIES * MAX_LEASES }, () =>
        call(a, 'POST', '/v1/leases', { selector: pool(), ttlSeconds: 60 }),
      ),
    );
    expect(all.map((r) => r.status)).toEqual(Array.from({ length: PROXIES * MAX_LEASES }, () => 201));
    await Promise.all(all.map((r) => call(a, 'DELETE', `/v1/leases/${String(r.body.leaseID)}`)));
  }, 120_000);
});
