/**
 * Tenants end to end (issue 56): an `egress-proxies gateway` and an
 * `egress-proxies api` process with one tenants file and one Redis, two
 * tenants with pools of their own (External Proxies at real forward
 * proxies, each egressing from its own loopback address). Crawlers are raw
 * sockets from loopback addresses of their own (so "another client" is
 * another address), curl, and fetch.
 *
 * A second gateway with short limits (idle 1 s, a whole exchange 2 s) shows
 * the limits closing what they bound; the first keeps the defaults, so its
 * held tunnels are never closed under a slow run.
 */
import { createHash, randomInt } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import { LABEL_POOL } from '../../resources/proxy-schema.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { createNamespace, getProxy, kubeConfig, proxyClient } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import {
  curlThrough,
  gatewayConnect,
  redisActiveSlots,
  registerProxy,
  startForwardProxies,
  startGatewayCli,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';

const TOKEN_A = 'tenant-a-token-0123456789';
const TOKEN_B = 'tenant-b-token-9876543210';
/** The limits tests' own tenant and pool: their slot counts are theirs alone. */
const TOKEN_C = 'tenant-c-token-5555555555';
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** A loopback address of this file's own, so clients are told apart by address. */
const octet = randomInt(1, 250);
const clientAddress = (n: number) => `127.91.${octet}.${n}`;

/** A CONNECT through the gateway from `from` with `user:password`, left open. */
const connectThrough = (
  gatewayUrl: string,
  from: string,
  credentials: string | undefined,
  authority: string,
) => gatewayConnect(gatewayUrl, authority, { from, ...(credentials !== undefined ? { credentials } : {}) });

/** Sends an HTTP GET down an open tunnel and reads the answer's body (the target's `/ip`). */
function getThroughTunnel(socket: Socket, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (chunk: string) => {
      text += chunk;
      const end = text.indexOf('\r\n\r\n');
      const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? -1);
      if (end >= 0 && length >= 0 && text.length >= end + 4 + length) {
        socket.off('data', onData);
        resolve(text.slice(end + 4, end + 4 + length));
      }
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: target\r\n\r\n`);
  });
}

const header = (head: string, name: string) => new RegExp(`^${name}: (.*)$`, 'im').exec(head)?.[1]?.trim();

/** An HTTP call to the lease API from a loopback address of the caller's choosing. */
function apiCall(
  url: string,
  opts: { method: string; token?: string; body?: unknown; from?: string },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    const req = request(
      url,
      {
        method: opts.method,
        ...(opts.from ? { localAddress: opts.from } : {}),
        headers: {
          ...(opts.token !== undefined ? { authorization: `Bearer ${opts.token}` } : {}),
          ...(payload !== undefined
            ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }
            : {}),
        },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.once('error', reject);
    req.end(payload);
  });
}

/** The `/metrics` URL a gateway process logged when it started listening. */
function metricsUrlOf(cli: CliProcess): string {
  const base = /"metrics":"(http:\/\/127\.0\.0\.1:\d+)[^"]*"[^\n]*gateway listening/.exec(cli.output())?.[1];
  if (!base) throw new Error(`no metrics address in the gateway's log:\n${cli.output()}`);
  return `${base}/metrics`;
}

/** One metric's value from a Prometheus text page, 0 when absent. */
async function metric(metricsUrl: string, line: string): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  const found = text.split('\n').find((l) => l.startsWith(`${line} `));
  return found ? Number(found.slice(line.length + 1)) : 0;
}

describe('tenants: two teams on one gateway and one lease API', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  const dir = mkdtempSync(join(tmpdir(), 'ep-tenants-'));
  let namespace = '';
  let redis: RunningRedis;
  let inspect: Redis;
  let target: LoopbackTarget;
  let gateway: { cli: CliProcess; url: string; metrics: string };
  let apiCli: CliProcess;
  let apiUrl = '';
  const forwardProxies: ForwardProxy[] = [];
  /** Proxy id (namespace/name) → its egress address, and → its UID. */
  const egressOf = new Map<string, string>();
  const uidOf = new Map<string, string>();
  const poolOf = (id: string) => (id.split('/')[1] ?? '').replace(/-\d+$/, '');
  const authority = () => `127.0.0.1:${target.port}`;

  async function pool(name: string, count: number): Promise<void> {
    const started = await startForwardProxies(count);
    forwardProxies.push(...started);
    for (const [i, p] of started.entries()) {
      const proxyName = `${name}-${i}`;
      await registerProxy(
        objects,
        namespace,
        proxyName,
        { host: p.host, port: p.port },
        { attributes: { suite: namespace }, latencyMillis: 10 + i, labels: { [LABEL_POOL]: name } },
      );
      egressOf.set(`${namespace}/${proxyName}`, p.host);
      uidOf.set(`${namespace}/${proxyName}`, (await getProxy(objects, namespace, proxyName)).metadata.uid!);
    }
  }

  const active = () => redisActiveSlots(inspect);

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    target = await startLoopbackTarget();
    namespace = await createNamespace(kc, 'tenants');
    await pool('pool-a', 2);
    await pool('pool-b', 2);
    await pool('pool-c', 1);
    const tenantsFile = join(dir, 'tenants.yaml');
    writeFileSync(
      tenantsFile,
      [
        'tenants:',
        '  - name: team-a',
        `    tokenSha256: ${sha256(TOKEN_A)}`,
        '    pools: [pool-a]',
        '  - name: team-b',
        `    tokenSha256: ${sha256(TOKEN_B)}`,
        '    pools: [pool-b]',
        '    limits:',
        '      tunnels: 3',
        '  - name: team-c',
        `    tokenSha256: ${sha256(TOKEN_C)}`,
        '    pools: [pool-c]',
        '',
      ].join('\n'),
    );
    const common = ['--tenants-file', tenantsFile, '--lease-store', redis.url];
    const main = await startGatewayCli(namespace, [
      ...common,
      '--gateway-max-tunnels-per-client',
      '2',
      '--metrics-addr',
      '127.0.0.1:0',
    ]);
    gateway = { ...main, metrics: metricsUrlOf(main.cli) };
    apiCli = startCli([
      'api',
      '--discovery-addr',
      '127.0.0.1:0',
      '--no-prober',
      ...common,
      ...testServerArgs(),
      '--watch-namespaces',
      namespace,
    ]);
    apiUrl = await leaseApiUrl(apiCli, 150_000);
    await eventually(
      'the gateway to carry a request for team-a',
      async () => {
        const r = await curlThrough(gateway.url, '', TOKEN_A, `${target.url}/ip`);
        return r.status === 200 || undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
    await eventually(
      'the api to see the Proxies',
      async () => {
        const r = await apiCall(`${apiUrl}/v1/proxies`, { method: 'GET', token: TOKEN_B });
        return (JSON.parse(r.body) as { count?: number }).count === 2 || undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  }, 300_000);

  afterAll(async () => {
    await gateway?.cli.stop();
    await apiCli?.stop();
    inspect?.disconnect();
    await redis?.stop();
    await target?.close();
    for (const p of forwardProxies) await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('each tenant leases and tunnels with its own token, inside its own pools; X-Egress-Proxy names the Ready proxy that carried it', async () => {
    for (const [token, pool] of [
      [TOKEN_A, 'pool-a'],
      [TOKEN_B, 'pool-b'],
    ] as const) {
      const lease = await apiCall(`${apiUrl}/v1/leases`, { method: 'POST', token, body: { ttlSeconds: 60 } });
      expect(lease.status, lease.body).toBe(201);
      const granted = JSON.parse(lease.body) as { leaseID: string; proxy: { id: string; pool?: string } };
      expect(granted.proxy.pool).toBe(pool);
      // Sealed to the tenant: the store's 26 characters, a dot, a tag.
      expect(granted.leaseID).toMatch(/^[A-Z2-7]{26}\.[A-Za-z0-9_-]{16}$/);
      expect(
        (await apiCall(`${apiUrl}/v1/leases/${granted.leaseID}`, { method: 'DELETE', token })).status,
      ).toBe(204);

      const tunnel = await connectThrough(gateway.url, clientAddress(1), `:${token}`, authority());
      expect(tunnel.status, tunnel.head).toBe(200);
      const carrier = header(tunnel.head, 'X-Egress-Proxy')!;
      expect(poolOf(carrier)).toBe(pool);
      const ip = (JSON.parse(await getThroughTunnel(tunnel.socket, '/ip')) as { ip: string }).ip;
      // The proxy the header names is the one the target saw.
      expect(ip).toBe(egressOf.get(carrier));
      tunnel.socket.destroy();

      const plain = await curlThrough(gateway.url, '', token, `${target.url}/ip`);
      expect(plain.status).toBe(200);
      const plainCarrier = header(plain.headers, 'X-Egress-Proxy')!;
      expect(poolOf(plainCarrier)).toBe(pool);
      expect((JSON.parse(plain.body) as { ip: string }).ip).toBe(egressOf.get(plainCarrier));
    }
  });

  it("A's token is refused on B's pool (403), on the lease API and on the gateway", async () => {
    const lease = await apiCall(`${apiUrl}/v1/leases`, {
      method: 'POST',
      token: TOKEN_A,
      body: { pool: 'pool-b', ttlSeconds: 60 },
    });
    expect(lease.status).toBe(403);
    expect(JSON.parse(lease.body)).toEqual({
      error: 'forbidden',
      message: 'tenant team-a may not use pool "pool-b"',
    });
    const tunnel = await connectThrough(gateway.url, clientAddress(1), `pool-pool-b:${TOKEN_A}`, authority());
    expect(tunnel.status).toBe(403);
    await tunnel.closed;
    const plain = await curlThrough(gateway.url, 'pool-pool-b', TOKEN_A, `${target.url}/ip`);
    expect(plain.status).toBe(403);
    expect(plain.body).toContain('tenant team-a may not use pool pool-b');
  });

  it("a tenant cannot see, release or report another's leases, nor join its session", async () => {
    const listed = await apiCall(`${apiUrl}/v1/proxies`, { method: 'GET', token: TOKEN_B });
    const ids = (JSON.parse(listed.body) as { proxies: Array<{ id: string }> }).proxies.map((p) => p.id);
    expect(ids.sort()).toEqual([`${namespace}/pool-b-0`, `${namespace}/pool-b-1`]);

    // The owner is team-c, whose one proxy nothing else here uses: its slot count is this lease's alone.
    const lease = await apiCall(`${apiUrl}/v1/leases`, {
      method: 'POST',
      token: TOKEN_C,
      body: { ttlSeconds: 60 },
    });
    const granted = JSON.parse(lease.body) as { leaseID: string; proxy: { id: string } };
    expect(granted.proxy.id).toBe(`${namespace}/pool-c-0`);
    const uid = uidOf.get(granted.proxy.id)!;
    expect((await active()).get(uid)).toBe(1);
    // B's release is the no-op of an unknown id; the slot stays C's.
    const release = await apiCall(`${apiUrl}/v1/leases/${granted.leaseID}`, {
      method: 'DELETE',
      token: TOKEN_B,
    });
    expect(release.status).toBe(204);
    const unsealed = granted.leaseID.split('.')[0]!;
    expect(
      (await apiCall(`${apiUrl}/v1/leases/${unsealed}`, { method: 'DELETE', token: TOKEN_B })).status,
    ).toBe(204);
    expect((await active()).get(uid)).toBe(1);
    const report = await apiCall(`${apiUrl}/v1/leases/${granted.leaseID}/report`, {
      method: 'POST',
      token: TOKEN_B,
      body: { result: 'ok' },
    });
    expect(report.status).toBe(404);
    expect(
      (
        await apiCall(`${apiUrl}/v1/leases/${granted.leaseID}/report`, {
          method: 'POST',
          token: TOKEN_C,
          body: { result: 'ok' },
        })
      ).status,
    ).toBe(204);
    expect(
      (await apiCall(`${apiUrl}/v1/leases/${granted.leaseID}`, { method: 'DELETE', token: TOKEN_C })).status,
    ).toBe(204);
    expect((await active()).get(uid) ?? 0).toBe(0);

    // The same session id is a different session per tenant.
    const a = await connectThrough(gateway.url, clientAddress(1), `session-shared1:${TOKEN_A}`, authority());
    const b = await connectThrough(gateway.url, clientAddress(1), `session-shared1:${TOKEN_B}`, authority());
    expect(poolOf(header(a.head, 'X-Egress-Proxy')!)).toBe('pool-a');
    expect(poolOf(header(b.head, 'X-Egress-Proxy')!)).toBe('pool-b');
    expect(header(a.head, 'X-Egress-Session')).toBe('shared1');
    a.socket.destroy();
    b.socket.destroy();
    // B's report by A's session id finds nothing of B's.
    const foreign = await fetch(`${gateway.url}/v1/gateway/sessions/only-a/report`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN_B}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'banned', target: '127.0.0.1' }),
    });
    expect(foreign.status).toBe(404);
  });

  it('a wrong token gets 407 and the connection closed; the 21st wrong guess in a minute from one address gets 429, while a right token from another address still works', async () => {
    const guesser = clientAddress(50);
    for (let i = 1; i <= 20; i++) {
      const wrong = await connectThrough(gateway.url, guesser, `:wrong-${i}`, authority());
      expect(wrong.status).toBe(407);
      expect(wrong.head).toMatch(/^Connection: close$/im);
      await wrong.closed;
    }
    const throttled = await connectThrough(gateway.url, guesser, `:wrong-21`, authority());
    expect(throttled.status).toBe(429);
    expect(header(throttled.head, 'Retry-After')).toMatch(/^\d+$/);
    await throttled.closed;
    // Unchecked while throttled: even the right token from that address waits.
    expect((await connectThrough(gateway.url, guesser, `:${TOKEN_A}`, authority())).status).toBe(429);
    const other = await connectThrough(gateway.url, clientAddress(51), `:${TOKEN_A}`, authority());
    expect(other.status).toBe(200);
    other.socket.destroy();

    // The lease API: a 401 closes the connection, and the same limit applies.
    const apiGuesser = clientAddress(52);
    for (let i = 1; i <= 20; i++) {
      const r = await apiCall(`${apiUrl}/v1/proxies`, {
        method: 'GET',
        token: `wrong-${i}`,
        from: apiGuesser,
      });
      expect(r.status).toBe(401);
      expect(r.headers.connection).toBe('close');
    }
    const limited = await apiCall(`${apiUrl}/v1/proxies`, {
      method: 'GET',
      token: TOKEN_A,
      from: apiGuesser,
    });
    expect(limited.status).toBe(429);
    expect(JSON.parse(limited.body)).toMatchObject({ error: 'too_many_requests' });
    const fine = await apiCall(`${apiUrl}/v1/proxies`, {
      method: 'GET',
      token: TOKEN_A,
      from: clientAddress(53),
    });
    expect(fine.status).toBe(200);
  });

  it("a client over its tunnel cap gets 429 at once while another client gets 200; a tenant's cap counts all its clients", async () => {
    // The tunnels of the tests above have all ended (their slots given back) before the caps are counted.
    await eventually(
      'no tunnel open on the gateway',
      async () => ((await metric(gateway.metrics, 'egress_gateway_active_tunnels')) === 0 ? true : undefined),
      { timeoutMs: 10_000 },
    );
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        const t = await connectThrough(gateway.url, clientAddress(60), `:${TOKEN_A}`, authority());
        expect(t.status).toBe(200);
        held.push(t.socket);
      }
      const over = await connectThrough(gateway.url, clientAddress(60), `:${TOKEN_A}`, authority());
      expect(over.status).toBe(429);
      expect(over.head).toContain('Retry-After: 1');
      const other = await connectThrough(gateway.url, clientAddress(61), `:${TOKEN_A}`, authority());
      expect(other.status).toBe(200);
      held.push(other.socket);

      // team-b may hold 3, from any addresses.
      for (const n of [62, 63, 64]) {
        const t = await connectThrough(gateway.url, clientAddress(n), `:${TOKEN_B}`, authority());
        expect(t.status).toBe(200);
        held.push(t.socket);
      }
      const fourth = await connectThrough(gateway.url, clientAddress(65), `:${TOKEN_B}`, authority());
      expect(fourth.status).toBe(429);
      expect(fourth.head).not.toContain(TOKEN_B);
    } finally {
      for (const s of held) s.destroy();
    }
  });

  it('a ban reported by session moves its next CONNECT to that target to another proxy; the cooldown is in the store', async () => {
    const first = await connectThrough(
      gateway.url,
      clientAddress(70),
      `session-ban1:${TOKEN_A}`,
      authority(),
    );
    expect(first.status).toBe(200);
    const banned = header(first.head, 'X-Egress-Proxy')!;
    first.socket.destroy();
    const again = await connectThrough(
      gateway.url,
      clientAddress(70),
      `session-ban1:${TOKEN_A}`,
      authority(),
    );
    expect(header(again.head, 'X-Egress-Proxy')).toBe(banned);
    again.socket.destroy();

    const report = await fetch(`${gateway.url}/v1/gateway/sessions/ban1/report`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN_A}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'banned', target: '127.0.0.1' }),
    });
    expect(report.status).toBe(204);
    const cooling = await inspect.hget(`${DEFAULT_REDIS_PREFIX}cool`, `${uidOf.get(banned)!}\t127.0.0.1`);
    expect(Number(cooling)).toBeGreaterThan(Date.now());

    const moved = await connectThrough(
      gateway.url,
      clientAddress(70),
      `session-ban1:${TOKEN_A}`,
      authority(),
    );
    expect(moved.status).toBe(200);
    const carrier = header(moved.head, 'X-Egress-Proxy')!;
    expect(carrier).not.toBe(banned);
    expect(poolOf(carrier)).toBe('pool-a');
    moved.socket.destroy();

    // Malformed reports are named; a session that is not live is 404.
    const bad = await fetch(`${gateway.url}/v1/gateway/sessions/ban1/report`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN_A}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'angry', target: '127.0.0.1' }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { message: string }).message).toContain('reason');
    const gone = await fetch(`${gateway.url}/v1/gateway/sessions/never/report`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN_A}`, 'content-type': 'application/json' },
      body: JSON.stringify({ reason: 'banned', target: '127.0.0.1' }),
    });
    expect(gone.status).toBe(404);
  });

  describe('limits that close what they bound', () => {
    let short: { cli: CliProcess; url: string; metrics: string };

    beforeAll(async () => {
      const started = await startGatewayCli(namespace, [
        '--tenants-file',
        join(dir, 'tenants.yaml'),
        '--lease-store',
        redis.url,
        '--gateway-tunnel-idle-timeout',
        '1s',
        '--gateway-response-timeout',
        '2s',
        '--metrics-addr',
        '127.0.0.1:0',
      ]);
      short = { ...started, metrics: metricsUrlOf(started.cli) };
      await eventually(
        'the short-limits gateway to carry a request',
        async () =>
          (await curlThrough(short.url, '', TOKEN_A, `${target.url}/ip`)).status === 200 ? true : undefined,
        { timeoutMs: 60_000, intervalMs: 250 },
      );
    }, 120_000);

    afterAll(async () => {
      await short?.cli.stop();
    });

    it('an idle tunnel is closed after the idle time and its lease slot is free again', async () => {
      const tunnel = await connectThrough(short.url, clientAddress(80), `:${TOKEN_C}`, authority());
      expect(tunnel.status).toBe(200);
      const uid = uidOf.get(`${namespace}/pool-c-0`)!;
      expect(tunnel.proxy).toBe(`${namespace}/pool-c-0`);
      // It carries a request first: only idleness closes it.
      expect(JSON.parse(await getThroughTunnel(tunnel.socket, '/ip'))).toHaveProperty('ip');
      expect((await active()).get(uid)).toBe(1);
      await tunnel.closed;
      await eventually(
        'the slot to be free',
        async () => ((await active()).get(uid) ?? 0) === 0 || undefined,
        {
          timeoutMs: 10_000,
        },
      );
      expect(await metric(short.metrics, 'egress_gateway_limit_trips_total{limit="tunnel_idle"}')).toBe(1);
    });

    it('a drip-fed plain-HTTP answer is cut at its total bound', async () => {
      const before = await metric(
        short.metrics,
        'egress_gateway_limit_trips_total{limit="response_timeout"}',
      );
      const dripped = await curlThrough(short.url, '', TOKEN_A, `${target.url}/drip`).catch(
        (e: unknown) => e,
      );
      // curl reports the cut transfer (its output still holds the 200 head).
      expect(dripped).not.toBeInstanceOf(Error);
      expect((dripped as { status: number }).status).toBe(200);
      await eventually(
        'the cut to be counted',
        async () =>
          (await metric(short.metrics, 'egress_gateway_limit_trips_total{limit="response_timeout"}')) >
            before || undefined,
        { timeoutMs: 10_000 },
      );
    });
  });
});
