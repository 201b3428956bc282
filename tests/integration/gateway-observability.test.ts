/**
 * What the gateway tells operators, on real servers in this process (a
 * forward proxy, a loopback target, the gateway on a static catalog and
 * the memory store): the `egress_gateway_*` series per proxy and per
 * target, the set-up span joining the crawler's `traceparent` (through the
 * same TraceHook seam the lease API uses), and an access log line per
 * connection that carries no credential.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { createStaticProxyCatalog } from '../../api/proxy-catalog.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import type { TraceRequest } from '../../tracing/http.js';
import { eventually } from '../helpers/temporal.js';
import {
  curlThrough,
  proxyStatus,
  startForwardProxies,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';
import { API_VERSION } from '../../kube/coordinates.js';

const TOKEN = 'observability-token';
const TRACEPARENT = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';

describe('gateway metrics, spans and access log', () => {
  let fleet: ForwardProxy[] = [];
  let target: LoopbackTarget;
  let gateway: Gateway;
  let url = '';
  const registry = new Registry();
  const store = new MemoryLeaseStore();
  const spans: Array<TraceRequest & { status?: number }> = [];
  let logged = '';

  beforeAll(async () => {
    target = await startLoopbackTarget();
    fleet = await startForwardProxies(1);
    const proxy = {
      apiVersion: API_VERSION,
      kind: 'Proxy',
      metadata: { name: 'p0', namespace: 'obs', uid: 'uid-p0' },
      spec: {
        mode: 'External',
        endpoint: { host: fleet[0]!.host, port: fleet[0]!.port },
        maxLeases: 5,
        attributes: {},
      },
      status: proxyStatus(true),
    } as unknown as Proxy;
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        logged += chunk.toString();
        done();
      },
    });
    gateway = createGateway({
      catalog: createStaticProxyCatalog([proxy]),
      leaseStore: store,
      logger: pino({ level: 'info' }, sink),
      registry,
      settings: {
        token: TOKEN,
        maxLeaseTtlSeconds: 3600,
        defaultLeaseTtlSeconds: 300,
        connectTimeoutMs: 2_000,
        attempts: 3,
        rateLimitStatuses: [429],
        maxTargetLabels: 1,
        // Its targets are on the loopback, on ports of their own.
        egressDenyCidrs: [],
        egressAllowCidrs: ['127.0.0.0/8'],
        egressAllowPorts: [[1, 65535]],
      },
      traceHook: (request) => {
        const span: TraceRequest & { status?: number } = { ...request };
        spans.push(span);
        return { end: (status) => (span.status = status) };
      },
    });
    ({ url } = await gateway.listen('127.0.0.1', 0));
  });

  afterAll(async () => {
    await gateway?.close();
    await target?.close();
    for (const p of fleet) await p.close();
  });

  it('counts connections, bytes and rate limits per proxy and per target, with targets past the cap as "other"', async () => {
    expect((await curlThrough(url, '', TOKEN, `${target.url}/bytes/1000`, { tunnel: true })).status).toBe(
      200,
    );
    expect((await curlThrough(url, '', TOKEN, `${target.url}/status/429`)).status).toBe(429);
    // A second target: past maxTargetLabels (1), so it is counted as "other".
    expect((await curlThrough(url, '', TOKEN, `http://localhost:${target.port}/ip`)).status).toBe(200);
    await eventually('every lease to be released', () =>
      Promise.resolve(store.activeTotalNow() === 0 ? true : undefined),
    );
    const text = await registry.metrics();
    expect(text).toContain('egress_gateway_proxy_connections_total{proxy="obs/p0",kind="connect"} 1');
    expect(text).toContain('egress_gateway_proxy_connections_total{proxy="obs/p0",kind="http"} 2');
    expect(text).toContain('egress_gateway_target_connections_total{target="127.0.0.1",kind="connect"} 1');
    expect(text).toContain('egress_gateway_target_connections_total{target="other",kind="http"} 1');
    expect(text).toContain('egress_gateway_rate_limited_total{target="127.0.0.1"} 1');
    expect(text).toContain('egress_gateway_requests_total{kind="http",outcome="ok"} 2');
    expect(text).toContain('egress_gateway_active_tunnels 0');
    expect(text).toMatch(/egress_gateway_lease_wait_seconds_count 3/);
    const downstream =
      /egress_gateway_proxy_bytes_total\{proxy="obs\/p0",direction="downstream"\} (\d+)/.exec(text);
    expect(Number(downstream?.[1])).toBeGreaterThan(1000);
    // A wrong password is counted, not carried.
    expect((await curlThrough(url, '', 'wrong', `${target.url}/ip`)).status).toBe(407);
    expect(await registry.metrics()).toContain(
      'egress_gateway_requests_total{kind="http",outcome="unauthorized"} 1',
    );
  });

  it("starts a set-up span per connection from the crawler's traceparent, ended with the status", async () => {
    spans.length = 0;
    const { execFile } = await import('node:child_process');
    const { promisify } = await import('node:util');
    const proxyUrl = url.replace('http://', `http://session-t:${TOKEN}@`);
    await promisify(execFile)('curl', [
      '-sS',
      '-x',
      proxyUrl,
      '-H',
      `traceparent: ${TRACEPARENT}`,
      // Not 127.0.0.1: the only proxy is cooling down for it after the 429 above.
      `http://localhost:${target.port}/ip`,
    ]);
    expect(spans).toHaveLength(1);
    expect(spans[0]).toMatchObject({
      method: 'GET',
      path: `localhost:${target.port}`,
      traceparent: TRACEPARENT,
      trace: { traceId: '0af7651916cd43dd8448eb211c80319c', parentId: 'b7ad6b7169203331', flags: 1 },
      status: 200,
    });
  });

  it('writes one access line per connection, without the token or the Proxy-Authorization header', () => {
    const lines = logged
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === 'gateway access');
    expect(lines.length).toBeGreaterThanOrEqual(5);
    expect(lines[0]).toMatchObject({ kind: 'connect', proxy: 'obs/p0', status: 200, attempts: 1 });
    expect(logged).not.toContain(TOKEN);
    expect(logged.toLowerCase()).not.toContain('proxy-authorization');
    expect(logged).not.toContain('/bytes/1000');
  });
});
