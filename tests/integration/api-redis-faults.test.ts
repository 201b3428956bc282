/**
 * The lease API on the Redis store when Redis fails: unreachable, every
 * lease call answers 503 `unavailable` (never a 500, never a grant), and the
 * API serves again once Redis is back; restarted empty, the API keeps
 * working and says in its log that lease state was lost.
 */
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisLeaseStore } from '../../api/redis-lease-store.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { eventually } from '../helpers/temporal.js';
import { proxy, sample, startTestApi, type TestApi } from './api-helpers.js';

describe('Redis lease store faults', () => {
  let redis: RunningRedis;
  const open: TestApi[] = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((a) => a.close()));
  });
  afterAll(async () => {
    await redis?.stop();
  });

  async function start(): Promise<TestApi> {
    const api = await startTestApi({
      store: 'redis',
      redisUrl: redis.url,
      proxies: [proxy({ name: 'p1', maxLeases: 1 })],
    });
    open.push(api);
    return api;
  }

  it('answers 503 unavailable while Redis is down, grants nothing, and serves again once it is back', async () => {
    const api = await start();
    const held = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
    expect(held.status).toBe(201);
    await redis.stop();

    const down = {
      error: 'unavailable',
      message: 'the lease store is unreachable; retry shortly',
    };
    for (const [method, path, body] of [
      ['POST', '/v1/leases', {}],
      ['POST', `/v1/leases/${String(held.body.leaseID)}/report`, { result: 'banned' }],
      ['DELETE', `/v1/leases/${String(held.body.leaseID)}`, undefined],
      ['GET', '/v1/proxies', undefined],
    ] as const) {
      const r = await api.call(method, path, body === undefined ? {} : { body });
      expect(r.status, `${method} ${path}`).toBe(503);
      expect(r.body).toEqual(down);
    }
    // Metrics still answer: the active-lease gauge has no number while Redis is away.
    const metrics = (await api.call('GET', '/metrics')).text;
    expect(sample(metrics, 'proxy_operator_lease_requests_total{outcome="granted"}')).toBe(1);
    expect(sample(metrics, 'proxy_operator_leases_active')).toBeNaN();
    // ioredis reports the outage on its first failed reconnect, a moment after the close.
    await eventually(
      'the outage log line',
      () => Promise.resolve(api.logs.lines.some((l) => /Redis unreachable/.test(String(l.msg))) || undefined),
      { timeoutMs: 10_000, intervalMs: 50 },
    );
    expect(api.logs.lines.filter((l) => l.level === 50 && l.msg === 'lease API handler failed')).toEqual([]);

    // Back, but empty (no persistence): a fresh start, said so in the log.
    await redis.restartEmpty();
    const again = await eventually(
      'acquire to work again',
      async () => {
        const r = await api.call('POST', '/v1/leases', { body: {} });
        return r.status === 201 ? r : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 100 },
    );
    expect(again.body.proxy).toMatchObject({ id: 'default/p1', activeLeases: 1 });
    expect(api.logs.lines.some((l) => /lease state was lost/.test(String(l.msg)))).toBe(true);
    // The lost lease is unknown now; the new one holds the only slot.
    expect(
      (await api.call('POST', `/v1/leases/${String(held.body.leaseID)}/report`, { body: { result: 'ok' } }))
        .status,
    ).toBe(404);
    expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(409);
  }, 60_000);

  it('a second API on the same keys joins the state: no lost-state warning, the slot is shared', async () => {
    const prefix = `joined-${Date.now()}:`;
    const first = await startTestApi({
      store: 'redis',
      redisUrl: redis.url,
      redisPrefix: prefix,
      proxies: [proxy({ name: 'p1', maxLeases: 1 })],
    });
    open.push(first);
    expect((await first.call('POST', '/v1/leases', { body: {} })).status).toBe(201);
    const second = await startTestApi({
      store: 'redis',
      redisUrl: redis.url,
      redisPrefix: prefix,
      proxies: [proxy({ name: 'p1', maxLeases: 1 })],
    });
    open.push(second);
    expect((await second.call('POST', '/v1/leases', { body: {} })).body).toMatchObject({
      error: 'no_match',
      atCapacity: 1,
    });
    expect(first.logs.lines.map((l) => l.msg)).toContain(
      'lease store: Redis held no lease state; starting empty',
    );
    expect(second.logs.lines.map((l) => l.msg)).toContain('lease store: joined the lease state in Redis');
    for (const api of [first, second]) {
      expect(api.logs.lines.some((l) => /lease state was lost/.test(String(l.msg)))).toBe(false);
    }
  });

  it('fails its start with the redacted URL and the cause when Redis refuses the password or is not there', async () => {
    const locked = await startRedis({ password: 'right-horse-battery' });
    try {
      const logger = pino({ level: 'silent' });
      const wrong = new RedisLeaseStore({ url: `redis://:wrong-staple@127.0.0.1:${locked.port}`, logger });
      const failure = await wrong.connect().then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(failure?.message).toMatch(
        /^lease store: cannot use Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+: /,
      );
      expect(failure?.message).toMatch(/WRONGPASS|invalid password/i);
      expect(failure?.message).not.toContain('wrong-staple');

      // The password from a Secret file overrides the URL's.
      const right = new RedisLeaseStore({
        url: `redis://127.0.0.1:${locked.port}`,
        password: 'right-horse-battery',
        logger,
      });
      await right.connect();
      const out = await right.acquire({
        candidates: [{ id: 'ns/p', uid: 'uid-1', maxLeases: 1, latencyMillis: 1 }],
        target: '',
        ttlMs: 60_000,
      });
      expect(out.granted?.proxy).toBe('uid-1');
      await right.close();
    } finally {
      await locked.stop();
    }
    const gone = new RedisLeaseStore({
      url: `redis://127.0.0.1:${locked.port}`,
      logger: pino({ level: 'silent' }),
    });
    await expect(gone.connect()).rejects.toThrow(
      /cannot use Redis at redis:\/\/127\.0\.0\.1:\d+.*ECONNREFUSED/,
    );
  });

  it('keys state by Proxy UID: a recreated Proxy (same name, new UID) does not inherit slots or cooldowns', async () => {
    const store = new RedisLeaseStore({
      url: redis.url,
      logger: pino({ level: 'silent' }),
      prefix: `uid-${Date.now()}:`,
    });
    await store.connect();
    try {
      const old = { id: 'ns/p', uid: 'uid-old', maxLeases: 1, latencyMillis: 1 };
      const lease = await store.acquire({ candidates: [old], target: 'a.com', ttlMs: 60_000 });
      expect(await store.report(lease.granted!.id, 'banned', '')).toBe('cooldown');
      expect((await store.acquire({ candidates: [old], target: 'a.com', ttlMs: 60_000 })).granted).toBeNull();
      const recreated = { ...old, uid: 'uid-new' };
      const fresh = await store.acquire({ candidates: [recreated], target: 'a.com', ttlMs: 60_000 });
      expect(fresh.granted?.proxy).toBe('uid-new');
      expect(Object.fromEntries(await store.activeCounts())).toEqual({ 'uid-old': 1, 'uid-new': 1 });
    } finally {
      await store.close();
    }
  });
});
