/**
 * Passive health and traffic accounting (issue 58, items 3 and 4) on real
 * servers in this process, wired as a standalone gateway and a probing api
 * replica are on a cluster: real forward proxies (the `local` provider's),
 * a gateway on a static catalog and its own Redis lease store, a prober fed
 * by the traffic follower from a second connection to the same
 * redis-server, and loopback targets that count what reaches them. Health
 * reports go to an in-test recorder in place of Temporal (the workflow side
 * is covered in prober-temporal.test.ts).
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { RedisLeaseStore } from '../../api/redis-lease-store.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { createProber, type Prober } from '../../prober/prober.js';
import { createStaticProbeTargets, type ProbeTarget } from '../../prober/targets.js';
import { followGatewayTraffic } from '../../prober/traffic-follower.js';
import type { Periodic } from '../../api/periodic.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { HealthReport } from '../../workflows/proxy/types.js';
import { API_VERSION } from '../../kube/coordinates.js';
import { eventually } from '../helpers/temporal.js';
import {
  gatewayConnect,
  proxyStatus,
  startForwardProxies,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';

const TOKEN = 'passive-health-token';
const NS = 'passive';
/** p1 and p2's probe interval: short enough for a test, long against the 200 ms report path. */
const INTERVAL_S = 2;
const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });

/** A loopback HTTP server that answers 204 and remembers each request's path and arrival time. */
async function startCountingTarget(): Promise<{
  url: string;
  seen: Array<{ path: string; at: number }>;
  count(path: string): number;
  close(): Promise<void>;
}> {
  const seen: Array<{ path: string; at: number }> = [];
  const server: Server = createServer((req, res) => {
    seen.push({ path: req.url ?? '', at: Date.now() });
    res.writeHead(204).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    count: (path) => seen.filter((s) => s.path === path).length,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A plain-HTTP GET through the gateway; resolves with the status. */
function getThrough(gatewayUrl: string, user: string, url: string): Promise<number> {
  const gateway = new URL(gatewayUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: gateway.hostname,
        port: Number(gateway.port),
        method: 'GET',
        path: url,
        agent: false,
        headers: {
          host: new URL(url).host,
          'proxy-authorization': `Basic ${Buffer.from(`${user}:${TOKEN}`).toString('base64')}`,
        },
      },
      (res) => {
        res.resume();
        res.once('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.once('error', reject);
    req.end();
  });
}

function managedProxy(name: string, provider: string, upstream: ForwardProxy): Proxy {
  return {
    apiVersion: API_VERSION,
    kind: 'Proxy',
    metadata: { name, namespace: NS, uid: `uid-${name}` },
    spec: { mode: 'Managed', provider, port: upstream.port, maxLeases: 50, attributes: { who: name } },
    status: { ...proxyStatus(true), ip: upstream.host },
  } as unknown as Proxy;
}

function probeTarget(proxy: Proxy, probeURL: string, intervalSeconds: number): ProbeTarget {
  const { name, namespace, uid } = proxy.metadata as { name: string; namespace: string; uid: string };
  return {
    key: `${namespace}/${name}`,
    ref: { namespace, name, uid },
    host: proxy.status?.ip ?? '',
    port: proxy.spec.port,
    healthCheck: {
      probeURL,
      intervalSeconds,
      timeoutSeconds: 2,
      failureThreshold: 3,
      successThreshold: 1,
      expectedStatusCodes: [204],
    },
    condition: 'Healthy',
  };
}

/** `eventually` on a synchronous condition. */
function until<T>(what: string, fn: () => T | undefined, opts: { timeoutMs?: number } = {}): Promise<T> {
  return eventually(what, () => Promise.resolve(fn()), opts);
}

/** A counter's value in the exposition text (0 when the series is absent). */
function counter(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

describe('passive health and traffic accounting (gateway → Redis → prober)', () => {
  let redis: RunningRedis;
  let gatewayStore: RedisLeaseStore;
  let apiStore: RedisLeaseStore;
  let fleet: ForwardProxy[] = [];
  let probes: Awaited<ReturnType<typeof startCountingTarget>>;
  let site: LoopbackTarget;
  let gateway: Gateway;
  let prober: Prober;
  let follower: Periodic;
  let url = '';
  const gatewayRegistry = new Registry();
  const signals: Array<{ key: string; report: HealthReport }> = [];
  const activeProbes: string[] = [];
  const proxies: Record<string, Proxy> = {};

  beforeAll(async () => {
    redis = await startRedis();
    gatewayStore = new RedisLeaseStore({ url: redis.url, logger });
    apiStore = new RedisLeaseStore({ url: redis.url, logger });
    await gatewayStore.connect();
    await apiStore.connect();
    probes = await startCountingTarget();
    site = await startLoopbackTarget();
    fleet = await startForwardProxies(4);
    // p1: traffic flows, then stops; p2: never any traffic (the control);
    // p3: its proxy is gone (traffic fails); p4: bytes are counted.
    proxies.p1 = managedProxy('p1', 'vendor-a', fleet[0]!);
    proxies.p2 = managedProxy('p2', 'vendor-a', fleet[1]!);
    proxies.p3 = managedProxy('p3', 'vendor-b', fleet[2]!);
    proxies.p4 = managedProxy('p4', 'vendor-c', fleet[3]!);
    await fleet[2]!.close();

    gateway = createGateway({
      catalog: createStaticProxyCatalog(Object.values(proxies)),
      leaseStore: gatewayStore,
      logger,
      registry: gatewayRegistry,
      trafficFlushMs: 200,
      settings: {
        token: TOKEN,
        maxLeaseTtlSeconds: 3600,
        defaultLeaseTtlSeconds: 300,
        connectTimeoutMs: 2_000,
        attempts: 3,
        rateLimitStatuses: [429],
        maxTargetLabels: 10,
        egressDenyCidrs: [],
        egressAllowCidrs: ['127.0.0.0/8'],
        egressAllowPorts: [[1, 65535]],
      },
    });
    ({ url } = await gateway.listen('127.0.0.1', 0));

    prober = createProber({
      targets: createStaticProbeTargets([
        probeTarget(proxies.p1, `${probes.url}/probe/p1`, INTERVAL_S),
        probeTarget(proxies.p2, `${probes.url}/probe/p2`, INTERVAL_S),
        // Due in 0.99 x 300 s (the fixed random below): never within this test.
        probeTarget(proxies.p3, `${probes.url}/probe/p3`, 300),
        probeTarget(proxies.p4, `${probes.url}/probe/p4`, 300),
      ]),
      signal: (ref, report) => signals.push({ key: `${ref.namespace}/${ref.name}`, report }),
      onProbe: (e) => activeProbes.push(e.key),
      logger,
      registry: new Registry(),
      // Seeded proxies' first probes at 0.99 of their interval, and every period 1.098 intervals.
      random: () => 0.99,
    });
    await prober.start();
    follower = followGatewayTraffic({
      take: (max) => apiStore.takeTraffic(max),
      observe: (r) => prober.observeTraffic(r),
      logger,
      everyMs: 200,
    });
    follower.start();
  });

  afterAll(async () => {
    await follower?.stop();
    await prober?.stop();
    await gateway?.close();
    await gatewayStore?.close();
    await apiStore?.close();
    for (const p of fleet) await p.close().catch(() => undefined);
    await site?.close();
    await probes?.close();
    await redis?.stop();
  });

  it('sends no active probe while gateway traffic through the proxy succeeds, and probes again at the interval once it stops', async () => {
    // Both probed actively first: the prober is running and p1's probes reach the counting target.
    await until('a first active probe of p1 and p2', () =>
      probes.count('/probe/p1') >= 1 && probes.count('/probe/p2') >= 1 ? true : undefined,
    );
    const passedBefore = prober.stats().passiveSuccesses;
    let requests = 0;
    let failedRequests = 0;
    // Crawler traffic through p1, a request every 200 ms (a load generator's pace, not a wait).
    const traffic = setInterval(() => {
      getThrough(url, 'who-p1', `${site.url}/ip`)
        .then((status) => {
          requests++;
          if (status !== 200) failedRequests++;
        })
        .catch(() => failedRequests++);
    }, 200);
    try {
      // A due probe of p1 was passed because its traffic succeeded.
      await until('a due probe of p1 passed by its traffic', () =>
        prober.stats().passiveSuccesses > passedBefore ? true : undefined,
      );
      const p1Probes = probes.count('/probe/p1');
      const p2Probes = probes.count('/probe/p2');
      const passed = prober.stats().passiveSuccesses;
      // Three more of p1's periods go by (each a passed probe) while p2, with no traffic, is probed three times more.
      await until(
        'three more periods of p1 passed by traffic and three more probes of p2',
        () =>
          prober.stats().passiveSuccesses >= passed + 3 && probes.count('/probe/p2') >= p2Probes + 3
            ? true
            : undefined,
        { timeoutMs: 60_000 },
      );
      expect(probes.count('/probe/p1')).toBe(p1Probes);
      expect(failedRequests).toBe(0);
      expect(requests).toBeGreaterThan(10);
      expect(prober.verdict(`${NS}/p1`)).toBe('Healthy');
    } finally {
      clearInterval(traffic);
    }
    // Traffic stopped: active probes resume, one period apart (not a burst to catch up).
    const resumedFrom = probes.seen.length;
    await until(
      'two active probes of p1 after its traffic stopped',
      () =>
        probes.seen.slice(resumedFrom).filter((s) => s.path === '/probe/p1').length >= 2 ? true : undefined,
      { timeoutMs: 60_000 },
    );
    const resumed = probes.seen.slice(resumedFrom).filter((s) => s.path === '/probe/p1');
    expect(resumed[1]!.at - resumed[0]!.at).toBeGreaterThanOrEqual(0.85 * INTERVAL_S * 1000);
  });

  it('consecutive upstream failures in gateway traffic make the proxy Unhealthy, with no active probe sent', async () => {
    // p3's forward proxy is closed: each connection through it is refused. Three
    // targets, since a failed proxy cools down for the target it failed (the
    // next connection to that target would not try it).
    const statuses: number[] = [];
    for (const host of ['127.0.0.11', '127.0.0.12', '127.0.0.13'])
      statuses.push(await getThrough(url, 'who-p3', `http://${host}:9/`));
    expect(statuses).toEqual([502, 502, 502]);
    const report = await until('p3 reported unhealthy', () =>
      signals.find((s) => s.key === `${NS}/p3` && !s.report.healthy),
    );
    expect(report.report.reason).toBe('ConnectFailed');
    expect(report.report.message).toMatch(/^gateway traffic: /);
    expect(prober.verdict(`${NS}/p3`)).toBe('Unhealthy');
    expect(prober.stats().passiveFailures).toBeGreaterThanOrEqual(3);
    // Not one active probe of p3 (it is due at 297 s), and none reached the target.
    expect(activeProbes.filter((k) => k === `${NS}/p3`)).toEqual([]);
    expect(probes.count('/probe/p3')).toBe(0);
  });

  it('counts the bytes relayed per Proxy and per providers-config entry', async () => {
    const before = await gatewayRegistry.metrics();
    const tunnel = await gatewayConnect(url, `127.0.0.1:${site.port}`, { credentials: `who-p4:${TOKEN}` });
    expect(tunnel.status).toBe(200);
    expect(tunnel.proxy).toBe(`${NS}/p4`);
    let received = 0;
    tunnel.socket.on('data', (chunk: string) => (received += Buffer.byteLength(chunk, 'latin1')));
    const request = `GET /bytes/5000 HTTP/1.1\r\nHost: 127.0.0.1:${site.port}\r\nConnection: close\r\n\r\n`;
    tunnel.socket.write(request);
    await tunnel.closed;
    expect(received).toBeGreaterThan(5000);

    const moved = (text: string, name: string, labels: string) =>
      counter(text, name, labels) - counter(before, name, labels);
    const after = await eventually('the tunnel counted', async () => {
      const text = await gatewayRegistry.metrics();
      return moved(
        text,
        'egress_gateway_provider_bytes_total',
        'provider="vendor-c",direction="downstream"',
      ) > 0
        ? text
        : undefined;
    });
    const sent = Buffer.byteLength(request);
    expect(
      moved(after, 'egress_gateway_provider_bytes_total', 'provider="vendor-c",direction="upstream"'),
    ).toBe(sent);
    expect(
      moved(after, 'egress_gateway_provider_bytes_total', 'provider="vendor-c",direction="downstream"'),
    ).toBe(received);
    expect(moved(after, 'egress_gateway_proxy_bytes_total', `proxy="${NS}/p4",direction="upstream"`)).toBe(
      sent,
    );
    expect(moved(after, 'egress_gateway_proxy_bytes_total', `proxy="${NS}/p4",direction="downstream"`)).toBe(
      received,
    );
    // Another entry's series did not move.
    expect(
      moved(after, 'egress_gateway_provider_bytes_total', 'provider="vendor-a",direction="downstream"'),
    ).toBe(0);
    // p1's plain-HTTP traffic (the first test) counted under its own entry.
    expect(
      counter(after, 'egress_gateway_provider_bytes_total', 'provider="vendor-a",direction="downstream"'),
    ).toBeGreaterThan(0);
  });
});
