/**
 * The gateway's egress policy end to end: `egress-proxies gateway`
 * processes in front of a Ready fleet of real forward proxies, leasing
 * through Debian's redis-server, and crawlers on raw sockets. Every
 * destination is on the loopback (the test's own listeners, its own DNS
 * server): nothing leaves the machine.
 *
 * - Default policy: every spelling of a loopback destination is refused 403
 *   before any lease is taken (Redis holds no lease record at all).
 * - The same flags plus `--egress-allow-cidrs 127.0.0.0/8`: relayed,
 *   on the target's own port (an allowance opens its range on every port).
 * - DNS rebinding: a name whose first answer is allowed (127.0.0.2) and whose
 *   later answers are not (127.0.0.1): the connection goes to the address
 *   checked, and the listener on the other address sees nothing.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import dnsPacket from 'dns-packet';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import type { CliProcess } from '../helpers/cli.js';
import { createNamespace, kubeConfig, proxyClient } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import { registerProxy, startForwardProxies, startGatewayCli } from './gateway-helpers.js';

const TOKEN = 'egress-test-token';

interface Answer {
  /** The gateway's status (for CONNECT, its answer to the CONNECT). */
  status: number;
  /** The gateway's body when it refused; the target's answer otherwise. */
  body: string;
}

/**
 * One exchange through the gateway on a raw socket, so the host reaches it
 * exactly as written (curl would normalise some spellings itself): CONNECT
 * `authority` then a GET inside the tunnel, or a plain-HTTP GET of `url`.
 */
function exchange(
  gatewayUrl: string,
  user: string,
  request: { connect: string } | { get: string },
): Promise<Answer> {
  const { hostname, port } = new URL(gatewayUrl);
  const auth = `Proxy-Authorization: Basic ${Buffer.from(`${user}:${TOKEN}`).toString('base64')}\r\n`;
  return new Promise((resolve, reject) => {
    const socket: Socket = connect({ host: hostname, port: Number(port) });
    socket.setEncoding('latin1');
    let text = '';
    let tunnelled = false;
    socket.once('connect', () => {
      if ('connect' in request)
        socket.write(`CONNECT ${request.connect} HTTP/1.1\r\nHost: ${request.connect}\r\n${auth}\r\n`);
      else
        socket.write(
          `GET ${request.get} HTTP/1.1\r\nHost: ${new URL(request.get).host}\r\n${auth}Connection: close\r\n\r\n`,
        );
    });
    socket.on('data', (chunk: string) => {
      text += chunk;
      if ('connect' in request && !tunnelled && text.includes('\r\n\r\n')) {
        const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
        if (status !== 200) return; // the refusal's body follows; the gateway closes
        tunnelled = true;
        text = '';
        socket.write('GET /ip HTTP/1.1\r\nHost: target\r\nConnection: close\r\n\r\n');
      }
    });
    socket.setTimeout(20_000, () => socket.destroy(new Error('no answer within 20 s')));
    socket.once('error', reject);
    socket.once('close', () => {
      const split = text.indexOf('\r\n\r\n');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      if ('connect' in request && tunnelled) resolve({ status: 200, body: text.slice(split + 4) });
      else resolve({ status, body: split < 0 ? '' : text.slice(split + 4) });
    });
  });
}

/** An HTTP listener that answers with the address it was reached on, and counts its requests. */
interface Listener {
  port: number;
  requests: number;
  close(): Promise<void>;
}

async function listen(host: string, port = 0): Promise<Listener> {
  const listener = { port: 0, requests: 0, close: () => Promise.resolve() };
  const server: Server = createServer((req, res) => {
    listener.requests += 1;
    const body = `${JSON.stringify({ reached: (req.socket.address() as AddressInfo).address })}\n`;
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  listener.port = (server.address() as AddressInfo).port;
  listener.close = () => {
    server.closeAllConnections();
    return new Promise((r) => server.close(() => r()));
  };
  return listener;
}

/** The same port on several loopback addresses (retried on a port taken on one of them). */
async function listenOnAll(hosts: string[]): Promise<Listener[]> {
  for (let attempt = 0; ; attempt++) {
    const first = await listen(hosts[0]!);
    const rest: Listener[] = [];
    try {
      for (const host of hosts.slice(1)) rest.push(await listen(host, first.port));
      return [first, ...rest];
    } catch (error) {
      for (const l of [first, ...rest]) await l.close();
      if (attempt === 5) throw error;
    }
  }
}

/**
 * A DNS server of the test's own on the loopback: `loopback.egress.test` is
 * 127.0.0.1; `rebind.egress.test` is 127.0.0.2 on its first A query and
 * 127.0.0.1 on every later one; no AAAA records; anything else NXDOMAIN.
 */
async function startDns(): Promise<{
  address: string;
  aQueries: Map<string, number>;
  close(): Promise<void>;
}> {
  const aQueries = new Map<string, number>();
  const socket: UdpSocket = createSocket('udp4');
  socket.on('message', (message, remote) => {
    let query;
    try {
      query = dnsPacket.decode(message);
    } catch {
      return;
    }
    const question = query.questions?.[0];
    if (!question) return;
    const name = question.name.toLowerCase();
    const known = name === 'loopback.egress.test' || name === 'rebind.egress.test';
    const answers: dnsPacket.Answer[] = [];
    if (known && question.type === 'A') {
      const seen = (aQueries.get(name) ?? 0) + 1;
      aQueries.set(name, seen);
      const data = name === 'rebind.egress.test' && seen === 1 ? '127.0.0.2' : '127.0.0.1';
      answers.push({ type: 'A', class: 'IN', name: question.name, ttl: 0, data });
    }
    const reply = dnsPacket.encode({
      id: query.id,
      type: 'response',
      flags: dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | (known ? 0 : 3),
      questions: [question],
      answers,
    });
    socket.send(reply, remote.port, remote.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    aQueries,
    close: () => new Promise((r) => socket.close(() => r())),
  };
}

describe('the gateway refuses what the egress policy denies, before any lease', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  let namespace = '';
  let redis: RunningRedis;
  let inspect: Redis;
  let dns: Awaited<ReturnType<typeof startDns>>;
  let target: Listener[];
  let rebound: Listener[];
  const proxies: ForwardProxy[] = [];
  const gateways: Array<{ cli: CliProcess; url: string }> = [];
  const user = () => `suite-${namespace}`;

  /** Slots held per proxy UID, as Redis has them. */
  const slotsHeld = async () => inspect.hgetall(`${DEFAULT_REDIS_PREFIX}active`);

  /** How many times the gateway asked the lease store for a lease (each connection that got that far). */
  async function leaseRequests(metricsUrl: string): Promise<number> {
    const text = await (await fetch(metricsUrl)).text();
    const count = /^egress_gateway_lease_wait_seconds_count(?:\{[^}]*\})? (\d+)$/m.exec(text);
    expect(count, 'the gateway exports egress_gateway_lease_wait_seconds').not.toBeNull();
    return Number(count![1]);
  }

  async function gateway(args: string[]): Promise<{ url: string; metrics: string }> {
    const started = await startGatewayCli(
      namespace,
      [
        '--lease-store',
        redis.url,
        '--egress-resolver',
        dns.address,
        '--metrics-addr',
        '127.0.0.1:0',
        ...args,
      ],
      { DISCOVERY_TOKEN: TOKEN },
    );
    gateways.push(started);
    const metrics = /"metrics":"(http:\/\/127\.0\.0\.1:\d+\/metrics)"[^\n]*gateway listening/.exec(
      started.cli.output(),
    )?.[1];
    expect(metrics, started.cli.output()).toBeDefined();
    // Its fleet loaded: a refusal below is the policy's, not an empty catalog's.
    await started.cli.waitFor(/informer synced/, 60_000);
    return { url: started.url, metrics: metrics! };
  }

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    dns = await startDns();
    target = await listenOnAll(['127.0.0.1', '::1']);
    rebound = await listenOnAll(['127.0.0.2', '127.0.0.1']);
    namespace = await createNamespace(kc, 'gateway-egress');
    proxies.push(...(await startForwardProxies(2)));
    for (const [i, p] of proxies.entries())
      await registerProxy(
        objects,
        namespace,
        `egress-${i}`,
        { host: p.host, port: p.port },
        { attributes: { suite: namespace }, latencyMillis: 10 + i },
      );
  }, 120_000);

  afterAll(async () => {
    for (const g of gateways) await g.cli.stop();
    inspect?.disconnect();
    await redis?.stop();
    await dns?.close();
    for (const l of [...(target ?? []), ...(rebound ?? [])]) await l.close();
    for (const p of proxies) await p.close();
  });

  const spellings = () => {
    const port = target[0]!.port;
    return [
      ['127.0.0.1', '127.0.0.0/8'],
      ['localhost', '127.0.0.0/8'],
      ['2130706433', '127.0.0.0/8'],
      ['0x7f000001', '127.0.0.0/8'],
      ['127.1', '127.0.0.0/8'],
      ['[::1]', '::1/128'],
      ['[::ffff:127.0.0.1]', '127.0.0.0/8'],
      ['loopback.egress.test', '127.0.0.0/8'],
      ['loopback.egress.test.', '127.0.0.0/8'],
    ].map(([host, range]) => ({ host: host!, range: range!, authority: `${host!}:${port}` }));
  };

  it('default policy: every spelling of the loopback is refused 403 over CONNECT and plain HTTP, naming the range, and no lease is taken', async () => {
    const { url, metrics } = await gateway([]);
    const slotsBefore = await slotsHeld();
    for (const { host, range, authority } of spellings()) {
      for (const request of [{ connect: authority }, { get: `http://${authority}/ip` }]) {
        const answer = await exchange(url, user(), request);
        expect(answer, `${JSON.stringify(request)}`).toEqual({
          status: 403,
          body: `refused by the egress policy: destination in ${range}\n`,
        });
        // The rule is named; the address a name resolved to never is.
        if (!/^[\d[]/.test(host)) expect(answer.body).not.toContain('127.0.0.1');
      }
    }
    expect(await leaseRequests(metrics)).toBe(0);
    expect(await slotsHeld()).toEqual(slotsBefore);
    expect(target.map((l) => l.requests)).toEqual([0, 0]);
  });

  it('with --egress-allow-cidrs 127.0.0.0/8 the same requests are relayed through the fleet, on the port they name, [::1] included', async () => {
    const port = target[0]!.port;
    // The allowance opens its range on every port: the target's is neither 80 nor 443.
    // 127.0.0.0/8 opens ::1 too: the same host.
    const { url, metrics } = await gateway(['--egress-allow-cidrs', '127.0.0.0/8']);
    // Its informer has loaded the fleet.
    await eventually('the allowing gateway to relay', async () => {
      const a = await exchange(url, user(), { get: `http://127.0.0.1:${port}/ip` });
      return a.status === 200 || undefined;
    });
    for (const { host, authority } of spellings()) {
      const reached = host === '[::1]' ? '::1' : '127.0.0.1';
      for (const request of [{ connect: authority }, { get: `http://${authority}/ip` }]) {
        // Plain HTTP goes on by name, and the forward proxies resolve with the
        // system's resolver, which has never heard of the test's names.
        if ('get' in request && host.startsWith('loopback.egress.test')) continue;
        const answer = await exchange(url, user(), request);
        expect(answer.status, `${JSON.stringify(request)}: ${answer.body}`).toBe(200);
        expect(JSON.parse(answer.body), JSON.stringify(request)).toEqual({ reached });
      }
    }
    // Every relayed exchange leased (the counter that stayed 0 above moves).
    expect(await leaseRequests(metrics)).toBeGreaterThanOrEqual(15);
    // The [::1] cases (CONNECT and GET) reached the listener on ::1.
    expect(target[1]!.requests).toBe(2);
  });

  it('DNS rebinding: the tunnel goes to the address the gateway checked, never to what the name says next', async () => {
    const [allowed, denied] = rebound as [Listener, Listener];
    const { url } = await gateway(['--egress-allow-cidrs', '127.0.0.2/32']);
    await eventually('the gateway to lease a proxy of this test', async () => {
      const a = await exchange(url, user(), { connect: `127.0.0.2:${allowed.port}` });
      return a.status === 200 || undefined;
    });
    const before = allowed.requests;
    const answer = await exchange(url, user(), { connect: `rebind.egress.test:${allowed.port}` });
    expect(answer.status, answer.body).toBe(200);
    expect(JSON.parse(answer.body)).toEqual({ reached: '127.0.0.2' });
    expect(allowed.requests).toBe(before + 1);
    // The name was asked once, and answered 127.0.0.2; asked again it says
    // 127.0.0.1, which the policy refuses: the gateway judges each answer.
    expect(dns.aQueries.get('rebind.egress.test')).toBe(1);
    expect(await exchange(url, user(), { connect: `rebind.egress.test:${allowed.port}` })).toEqual({
      status: 403,
      body: 'refused by the egress policy: destination in 127.0.0.0/8\n',
    });
    expect(dns.aQueries.get('rebind.egress.test')).toBe(2);
    expect(denied.requests).toBe(0);
  });
});
