/**
 * Lease flows against the real server on 127.0.0.1:0: listing, acquiring,
 * releasing and reporting, with an injected clock and no expiry sweep.
 * Every response is validated against the served OpenAPI document. The
 * whole suite runs twice: on the in-memory store and on the Redis store
 * (Debian's redis-server, started here), with the same expectations.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import {
  proxy,
  sample,
  startTestApi,
  STORE_KINDS,
  type StartOptions,
  type StoreKind,
  type TestApi,
} from './api-helpers.js';

const open: TestApi[] = [];
let redis: Promise<RunningRedis> | undefined;
afterEach(async () => {
  await Promise.all(open.splice(0).map((a) => a.close()));
});
afterAll(async () => {
  await (await redis)?.stop();
});

describe.each(STORE_KINDS)('on the %s store', (kind: StoreKind) => {
  async function start(options: StartOptions): Promise<TestApi> {
    const extra: StartOptions = { store: kind };
    if (kind === 'redis') extra.redisUrl = (await (redis ??= startRedis())).url;
    const api = await startTestApi({ ...options, ...extra });
    open.push(api);
    return api;
  }

  const ids = (body: Record<string, unknown>) => (body.proxies as Array<{ id: string }>).map((p) => p.id);

  describe('GET /v1/proxies', () => {
    const fleet = () => [
      proxy({ name: 'us-healthy', attributes: { geo: 'us' } }),
      proxy({ name: 'eu-sick', attributes: { geo: 'eu' }, healthy: false }),
      proxy({ name: 'eu-healthy', attributes: { geo: 'eu', purpose: 'crawl' }, latencyMillis: 42 }),
      proxy({ name: 'eu-leaving', attributes: { geo: 'eu' }, deleting: true, phase: 'Deleting' }),
      proxy({ name: 'plain', external: { host: 'proxy.example.net', port: 8080 } }),
    ];

    it.each([
      ['', ['default/eu-healthy', 'default/eu-sick', 'default/plain', 'default/us-healthy']],
      ['?healthy=true', ['default/eu-healthy', 'default/plain', 'default/us-healthy']],
      ['?healthy=false', ['default/eu-sick']],
      ['?attr.geo=eu', ['default/eu-healthy', 'default/eu-sick']],
      ['?attr.geo=eu&healthy=true', ['default/eu-healthy']],
      ['?attr.geo=eu&attr.purpose=crawl', ['default/eu-healthy']],
      ['?attr.geo=eu&attr.geo=us', ['default/eu-healthy', 'default/eu-sick']],
      ['?attr.geo=mars', []],
      ['?attr.purpose=crawl&unrelated=1', ['default/eu-healthy']],
      // A missing attribute reads as "", as a Go map lookup does (the seed's matchesAttributes).
      ['?attr.geo=', ['default/plain']],
      ['?attr.geo', ['default/plain']],
      ['?attr.purpose=', ['default/eu-sick', 'default/plain', 'default/us-healthy']],
      ['?attr.purpose=&healthy=true', ['default/plain', 'default/us-healthy']],
      // net/url's Query(): a pair with a bad escape or a ";" is dropped, not an error.
      ['?healthy=%zz', ['default/eu-healthy', 'default/eu-sick', 'default/plain', 'default/us-healthy']],
      ['?healthy=%zz&attr.geo=eu', ['default/eu-healthy', 'default/eu-sick']],
      ['?attr.geo=eu;x=1', ['default/eu-healthy', 'default/eu-sick', 'default/plain', 'default/us-healthy']],
      ['?attr.geo=%zz', ['default/eu-healthy', 'default/eu-sick', 'default/plain', 'default/us-healthy']],
      ['?attr%2Egeo=e%75&healthy=tru%65', ['default/eu-healthy']],
      ['?attr.geo=%ff', []],
      ['?attr.%ff=', ['default/eu-healthy', 'default/eu-sick', 'default/plain', 'default/us-healthy']],
    ])('%s lists the matching proxies, sorted, never the one being deleted', async (query, want) => {
      const api = await start({ proxies: fleet() });
      const r = await api.call('GET', `/v1/proxies${query}`);
      expect(r.status).toBe(200);
      expect(ids(r.body)).toEqual(want);
      expect(r.body.count).toBe(want.length);
    });

    it('shows the documented proxy shape: effective address, omitted empty attributes, live lease counts', async () => {
      const api = await start({ proxies: fleet() });
      expect(
        (await api.call('POST', '/v1/leases', { body: { selector: { purpose: 'crawl' } } })).status,
      ).toBe(201);
      const r = await api.call('GET', '/v1/proxies');
      const byId = new Map((r.body.proxies as Array<Record<string, unknown>>).map((p) => [p.id, p]));
      expect(byId.get('default/eu-healthy')).toEqual({
        id: 'default/eu-healthy',
        ip: '10.0.0.1',
        port: 3128,
        attributes: { geo: 'eu', purpose: 'crawl' },
        phase: 'Ready',
        healthy: true,
        latencyMillis: 42,
        activeLeases: 1,
        maxLeases: 5,
      });
      expect(byId.get('default/plain')).toMatchObject({
        ip: 'proxy.example.net',
        port: 8080,
        activeLeases: 0,
      });
      expect(byId.get('default/plain')).not.toHaveProperty('attributes');
      expect(r.text.endsWith('}\n')).toBe(true);
    });

    it.each([
      ['maybe', '"maybe"'],
      ['', '""'],
      ['True', '"True"'],
      ['1', '"1"'],
      ['%01%22', '"\\x01\\""'],
      ['%ff', '"\\xff"'],
    ])('rejects healthy=%s with invalid_query, quoting the value as Go did', async (value, quoted) => {
      const api = await start({ proxies: fleet() });
      const r = await api.call('GET', `/v1/proxies?healthy=${value}`);
      expect(r.status).toBe(400);
      expect(r.body).toEqual({
        error: 'invalid_query',
        message: `healthy must be true or false, got ${quoted}`,
      });
    });
  });

  describe('POST /v1/leases', () => {
    it('grants the least-loaded, then fastest proxy, with the default TTL and an exact expiry', async () => {
      const api = await start({
        proxies: [
          proxy({ name: 'eu1', attributes: { geo: 'eu' }, latencyMillis: 30 }),
          proxy({ name: 'eu2', attributes: { geo: 'eu' }, latencyMillis: 10 }),
          proxy({ name: 'us1', attributes: { geo: 'us' }, latencyMillis: 1 }),
        ],
      });
      const r = await api.call('POST', '/v1/leases', { body: { selector: { geo: 'eu' } } });
      expect(r.status).toBe(201);
      expect(r.body.leaseID).toMatch(/^[A-Z2-7]{26}$/);
      expect(r.body.ttlSeconds).toBe(300);
      expect(r.body.expiresAt).toBe(new Date(api.clock.now() + 300_000).toISOString().replace('.000Z', 'Z'));
      expect(r.body.proxy).toMatchObject({ id: 'default/eu2', activeLeases: 1 });

      const second = await api.call('POST', '/v1/leases', {
        body: { selector: { geo: 'eu' }, ttlSeconds: 60 },
      });
      expect(second.body.proxy).toMatchObject({ id: 'default/eu1', activeLeases: 1 });
      expect(second.body.ttlSeconds).toBe(60);
    });

    it('never leases a proxy without an address or one being deleted', async () => {
      const api = await start({
        proxies: [
          proxy({ name: 'no-ip', ip: '', attributes: { pool: 'a' } }),
          proxy({ name: 'leaving', deleting: true, attributes: { pool: 'a' } }),
        ],
      });
      const r = await api.call('POST', '/v1/leases', { body: { selector: { pool: 'a' } } });
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({
        error: 'no_match',
        considered: 1,
        atCapacity: 0,
        inCooldown: 0,
        unhealthy: 1,
      });
    });

    it.each([{ geo: '' }, { geo: null }])(
      'selector %j leases a proxy without that attribute, as Go reads a missing key',
      async (selector) => {
        const api = await start({
          proxies: [
            proxy({ name: 'eu', attributes: { geo: 'eu' } }),
            proxy({ name: 'anywhere', latencyMillis: 50 }),
          ],
        });
        const r = await api.call('POST', '/v1/leases', { body: { selector } });
        expect(r.status).toBe(201);
        expect(r.body.proxy).toMatchObject({ id: 'default/anywhere' });
      },
    );

    it('grants exactly maxLeases out of 40 concurrent acquires', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1', maxLeases: 5 })] });
      const replies = await Promise.all(
        Array.from({ length: 40 }, () => api.call('POST', '/v1/leases', { body: {} })),
      );
      const granted = replies.filter((r) => r.status === 201);
      const refused = replies.filter((r) => r.status === 409);
      expect(granted).toHaveLength(5);
      expect(refused).toHaveLength(35);
      expect(new Set(granted.map((r) => r.body.leaseID)).size).toBe(5);
      for (const r of refused) {
        expect(r.body).toMatchObject({ considered: 1, atCapacity: 1, inCooldown: 0, unhealthy: 0 });
      }
      const list = await api.call('GET', '/v1/proxies');
      expect((list.body.proxies as Array<Record<string, unknown>>)[0]!.activeLeases).toBe(5);

      const metrics = (await api.call('GET', '/metrics')).text;
      expect(sample(metrics, 'proxy_operator_lease_requests_total{outcome="granted"}')).toBe(5);
      expect(sample(metrics, 'proxy_operator_lease_requests_total{outcome="no_match"}')).toBe(35);
      expect(sample(metrics, 'proxy_operator_leases_active')).toBe(5);
    });

    it('fills a pool larger than a first selection pass in order: least loaded, then fastest, then id', async () => {
      // 300 proxies, one slot each: the Redis store first sends only the
      // fastest 128, so this walks it past them onto the whole list.
      const api = await start({
        proxies: Array.from({ length: 300 }, (_, i) =>
          proxy({ name: `p${String(i).padStart(3, '0')}`, maxLeases: 1, latencyMillis: 300 - i }),
        ),
      });
      const got: string[] = [];
      for (let i = 0; i < 300; i++) {
        const r = await api.call('POST', '/v1/leases', { body: {} });
        expect(r.status).toBe(201);
        got.push((r.body.proxy as { id: string }).id);
      }
      expect(got).toEqual(
        Array.from({ length: 300 }, (_, i) => `default/p${String(299 - i).padStart(3, '0')}`),
      );
      const full = await api.call('POST', '/v1/leases', { body: {} });
      expect(full.body).toMatchObject({ error: 'no_match', considered: 300, atCapacity: 300 });
    });

    it('frees capacity when the TTL passes, with no sweep running', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1', maxLeases: 1 })] });
      expect((await api.call('POST', '/v1/leases', { body: { ttlSeconds: 60 } })).status).toBe(201);
      expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(409);
      api.clock.advance(59_999);
      expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(409);
      api.clock.advance(1);
      expect(sample((await api.call('GET', '/metrics')).text, 'proxy_operator_leases_active')).toBe(0);
      expect((await api.call('POST', '/v1/leases', { body: {} })).status).toBe(201);
    });

    it('accepts the maximum TTL, treats 0 and null as the default, and ignores unknown fields', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1', maxLeases: 10 })], maxLeaseTtlSeconds: 3600 });
      for (const [body, ttl] of [
        [{ ttlSeconds: 3600 }, 3600],
        [{ ttlSeconds: 0 }, 300],
        [{ ttlSeconds: null, selector: null, target: null }, 300],
        [{ ttlSeconds: 1, colour: 'blue' }, 1],
        [null, 300],
      ] as const) {
        const r = await api.call('POST', '/v1/leases', { body });
        expect(r.status, JSON.stringify(body)).toBe(201);
        expect(r.body.ttlSeconds).toBe(ttl);
      }
    });
  });

  describe('reports and cooldowns', () => {
    const pool = () => [
      proxy({ name: 'p1', attributes: { geo: 'eu' }, latencyMillis: 5 }),
      proxy({ name: 'p2', attributes: { geo: 'eu' }, healthy: false }),
      proxy({ name: 'p3', attributes: { geo: 'eu' }, maxLeases: 1, latencyMillis: 50 }),
    ];

    it('report -> cooldown -> 409 with counts that add up, other targets unaffected', async () => {
      const api = await start({ proxies: pool() });
      const lease = await api.call('POST', '/v1/leases', {
        body: { selector: { geo: 'eu' }, target: 'example.com' },
      });
      expect(lease.body.proxy).toMatchObject({ id: 'default/p1' });
      const other = await api.call('POST', '/v1/leases', {
        body: { selector: { geo: 'eu' }, target: 'example.com' },
      });
      expect(other.body.proxy).toMatchObject({ id: 'default/p3' });

      const report = await api.call('POST', `/v1/leases/${String(lease.body.leaseID)}/report`, {
        body: { result: 'rate_limited', target: 'example.com' },
      });
      expect(report.status).toBe(204);
      expect(report.text).toBe('');

      const blocked = await api.call('POST', '/v1/leases', {
        body: { selector: { geo: 'eu' }, target: 'example.com' },
      });
      expect(blocked.status).toBe(409);
      expect(blocked.body).toEqual({
        error: 'no_match',
        message: 'no healthy proxy with free capacity matched the selector',
        considered: 3,
        atCapacity: 1,
        inCooldown: 1,
        unhealthy: 1,
      });
      const { considered, atCapacity, inCooldown, unhealthy } = blocked.body as Record<string, number>;
      expect(atCapacity! + inCooldown! + unhealthy!).toBe(considered);

      const elsewhere = await api.call('POST', '/v1/leases', {
        body: { selector: { geo: 'eu' }, target: 'other.org' },
      });
      expect(elsewhere.status).toBe(201);
      expect(elsewhere.body.proxy).toMatchObject({ id: 'default/p1' });

      api.clock.advance(15 * 60_000);
      expect(
        (await api.call('POST', '/v1/leases', { body: { selector: { geo: 'eu' }, target: 'example.com' } }))
          .status,
      ).toBe(201);
    });

    it("falls back to the lease's target, and without any target blocks the proxy for everyone", async () => {
      const api = await start({ proxies: [proxy({ name: 'p1' })] });
      const targeted = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
      await api.call('POST', `/v1/leases/${String(targeted.body.leaseID)}/report`, {
        body: { result: 'banned' },
      });
      expect((await api.call('POST', '/v1/leases', { body: { target: 'a.com' } })).status).toBe(409);
      expect((await api.call('POST', '/v1/leases', { body: { target: 'b.com' } })).status).toBe(201);

      const untargeted = await api.call('POST', '/v1/leases', { body: {} });
      await api.call('POST', `/v1/leases/${String(untargeted.body.leaseID)}/report`, {
        body: { result: 'rate_limited' },
      });
      for (const body of [{}, { target: 'b.com' }, { target: 'c.com' }]) {
        const r = await api.call('POST', '/v1/leases', { body });
        expect(r.status).toBe(409);
        expect(r.body).toMatchObject({ considered: 1, inCooldown: 1 });
      }
    });

    it('acknowledges ok without a cooldown', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1' })] });
      const lease = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
      expect(
        (
          await api.call('POST', `/v1/leases/${String(lease.body.leaseID)}/report`, {
            body: { result: 'ok' },
          })
        ).status,
      ).toBe(204);
      expect((await api.call('POST', '/v1/leases', { body: { target: 'a.com' } })).status).toBe(201);
    });

    it('accepts a late report for one cooldown window after expiry, then 404s', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1' })] });
      const lease = await api.call('POST', '/v1/leases', { body: { ttlSeconds: 60, target: 'a.com' } });
      const path = `/v1/leases/${String(lease.body.leaseID)}/report`;
      api.clock.advance(60_000 + 15 * 60_000);
      expect((await api.call('POST', path, { body: { result: 'rate_limited' } })).status).toBe(204);
      expect((await api.call('POST', '/v1/leases', { body: { target: 'a.com' } })).status).toBe(409);
      api.clock.advance(1);
      const late = await api.call('POST', path, { body: { result: 'rate_limited' } });
      expect(late.status).toBe(404);
      expect(late.body.error).toBe('unknown_lease');
    });
  });

  describe('DELETE /v1/leases/{id}', () => {
    it('frees the slot and is always 204, for repeats, unknown and expired ids', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1', maxLeases: 1 })] });
      const lease = await api.call('POST', '/v1/leases', { body: {} });
      const path = `/v1/leases/${String(lease.body.leaseID)}`;
      for (const p of [path, path, '/v1/leases/never-existed']) {
        const r = await api.call('DELETE', p);
        expect(r.status).toBe(204);
        expect(r.text).toBe('');
      }
      const again = await api.call('POST', '/v1/leases', { body: { ttlSeconds: 1 } });
      expect(again.status).toBe(201);
      api.clock.advance(5_000);
      expect((await api.call('DELETE', `/v1/leases/${String(again.body.leaseID)}`)).status).toBe(204);
    });

    it('forgets a released lease, as the seed did: a later report is 404 unknown_lease', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1' })] });
      const lease = await api.call('POST', '/v1/leases', { body: { target: 'a.com' } });
      await api.call('DELETE', `/v1/leases/${String(lease.body.leaseID)}`);
      const r = await api.call('POST', `/v1/leases/${String(lease.body.leaseID)}/report`, {
        body: { result: 'banned' },
      });
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: 'unknown_lease', message: 'no such lease' });
      // Nothing was recorded: the proxy is still leasable for that target.
      expect((await api.call('POST', '/v1/leases', { body: { target: 'a.com' } })).status).toBe(201);
    });

    it('forgets an expired lease on release too, though it was still reportable', async () => {
      const api = await start({ proxies: [proxy({ name: 'p1' })] });
      const lease = await api.call('POST', '/v1/leases', { body: { ttlSeconds: 60, target: 'a.com' } });
      const path = `/v1/leases/${String(lease.body.leaseID)}`;
      api.clock.advance(61_000);
      expect((await api.call('POST', `${path}/report`, { body: { result: 'ok' } })).status).toBe(204);
      expect((await api.call('DELETE', path)).status).toBe(204);
      expect((await api.call('POST', `${path}/report`, { body: { result: 'ok' } })).status).toBe(404);
    });
  });
});
