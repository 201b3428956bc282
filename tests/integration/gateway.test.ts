/**
 * The gateway end to end on real servers: an `egress-proxies gateway`
 * process reading Proxies from the test apiserver (External Proxies at
 * real forward proxies, each egressing from its own loopback address, with
 * the status their workflow would write), leasing through Debian's
 * redis-server, and an `egress-proxies api` process on the same Redis.
 * Crawlers are curl (`curl -x http://user:TOKEN@gateway`) and raw sockets.
 *
 * Each test selects its own proxies through the username (`group-<name>`),
 * so the tests' leases and cooldowns never meet.
 */
import { connect, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import { leaseApiUrl, startCli, testServerArgs, type CliProcess } from '../helpers/cli.js';
import { createNamespace, proxyClient, getProxy, kubeConfig } from '../helpers/kube.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { eventually } from '../helpers/temporal.js';
import {
  curlThrough,
  redisActiveSlots,
  registerProxy,
  startForwardProxies,
  startGatewayCli,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';
import { freePort as closedPort } from '../../local-servers/ports.js';

const TOKEN = 'gateway-test-token';

interface Tunnel {
  socket: Socket;
  /** The gateway's status line for the CONNECT. */
  status: number;
}

/** Opens a CONNECT tunnel through the gateway and leaves it open. */
function openTunnel(gatewayUrl: string, user: string, targetPort: number): Promise<Tunnel> {
  const { hostname, port } = new URL(gatewayUrl);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) });
    const auth = Buffer.from(`${user}:${TOKEN}`).toString('base64');
    let head = '';
    socket.setEncoding('latin1');
    socket.once('connect', () =>
      socket.write(
        `CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nHost: 127.0.0.1:${targetPort}\r\nProxy-Authorization: Basic ${auth}\r\n\r\n`,
      ),
    );
    const onData = (chunk: string) => {
      head += chunk;
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      resolve({ socket, status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0) });
    };
    socket.on('data', onData);
    socket.once('error', reject);
  });
}

describe('egress-proxies gateway', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  let namespace = '';
  let redis: RunningRedis;
  let inspect: Redis;
  let target: LoopbackTarget;
  let gateway: { cli: CliProcess; url: string };
  const forwardProxies: ForwardProxy[] = [];
  /** Egress address of each proxy, by group. */
  const ips: Record<string, string[]> = {};
  const uids: Record<string, string> = {};
  const user = (group: string, extra = '') => `${extra}suite-${namespace}_group-${group}`;

  async function group(
    name: string,
    count: number,
    opts: { maxLeases?: number; behaviour?: ForwardProxy['behaviour'] } = {},
  ): Promise<ForwardProxy[]> {
    const started = await startForwardProxies(count, opts.behaviour);
    forwardProxies.push(...started);
    ips[name] = started.map((p) => p.host);
    for (const [i, p] of started.entries()) {
      const proxyName = `${name}-${i}`;
      await registerProxy(
        objects,
        namespace,
        proxyName,
        { host: p.host, port: p.port },
        {
          attributes: { suite: namespace, group: name },
          latencyMillis: 10 + i,
          ...(opts.maxLeases !== undefined ? { maxLeases: opts.maxLeases } : {}),
        },
      );
      uids[proxyName] = (await getProxy(objects, namespace, proxyName)).metadata.uid!;
    }
    return started;
  }

  const active = () => redisActiveSlots(inspect);

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    target = await startLoopbackTarget();
    namespace = await createNamespace(kc, 'gateway');
    await group('main', 3);
    // Unhealthy, and the fastest: chosen first if the gateway ever leased a proxy that is not Ready.
    const [sick] = await startForwardProxies(1);
    forwardProxies.push(sick!);
    ips.sick = [sick!.host];
    await registerProxy(
      objects,
      namespace,
      'sick',
      { host: sick!.host, port: sick!.port },
      {
        attributes: { suite: namespace, group: 'main' },
        healthy: false,
        latencyMillis: 1,
      },
    );
    await group('sticky', 3);
    await group('cool', 3);
    await group('solo', 1, { maxLeases: 1 });
    await group('cap', 3, { maxLeases: 2 });
    // Retries: the preferred proxy refuses (a closed port), the next accepts TCP and never answers.
    const refusing = await closedPort();
    await registerProxy(
      objects,
      namespace,
      'retry-0',
      { host: '127.0.0.1', port: refusing },
      {
        attributes: { suite: namespace, group: 'retry' },
        latencyMillis: 1,
      },
    );
    const [hanging] = await startForwardProxies(1, 'hang');
    forwardProxies.push(hanging!);
    await registerProxy(
      objects,
      namespace,
      'retry-1',
      { host: hanging!.host, port: hanging!.port },
      {
        attributes: { suite: namespace, group: 'retry' },
        latencyMillis: 2,
      },
    );
    const [working] = await startForwardProxies(1);
    forwardProxies.push(working!);
    ips.retry = [working!.host];
    await registerProxy(
      objects,
      namespace,
      'retry-2',
      { host: working!.host, port: working!.port },
      {
        attributes: { suite: namespace, group: 'retry' },
        latencyMillis: 3,
      },
    );

    gateway = await startGatewayCli(
      namespace,
      ['--lease-store', redis.url, '--gateway-connect-timeout', '1s', '--gateway-attempts', '3'],
      { DISCOVERY_TOKEN: TOKEN },
    );
    // Its informer has loaded this test's Proxies.
    await eventually(
      'the gateway to lease a proxy of this test',
      async () => {
        const r = await curlThrough(gateway.url, user('main'), TOKEN, `${target.url}/ip`);
        return r.status === 200 || undefined;
      },
      { timeoutMs: 60_000, intervalMs: 250 },
    );
  }, 300_000);

  afterAll(async () => {
    await gateway?.cli.stop();
    inspect?.disconnect();
    await redis?.stop();
    await target?.close();
    for (const p of forwardProxies) await p.close();
  });

  it('curl -x reaches the target over CONNECT and plain HTTP, always through a Ready proxy of the fleet', async () => {
    for (const tunnel of [false, true, false, true]) {
      const r = await curlThrough(gateway.url, user('main'), TOKEN, `${target.url}/ip`, { tunnel });
      expect(r.status, r.headers).toBe(200);
      const { ip } = JSON.parse(r.body) as { ip: string };
      expect(ips.main).toContain(ip);
      expect(ip).not.toBe(ips.sick![0]);
    }
    // A connection's own lease ends with it: nothing of group main is held.
    await eventually('the main leases to be released', async () => {
      const held = await active();
      return ['main-0', 'main-1', 'main-2'].every((n) => !held.has(uids[n]!)) || undefined;
    });
  });

  it('refuses wrong credentials with 407 and a malformed username with 400, naming the problem', async () => {
    const wrong = await curlThrough(gateway.url, user('main'), 'not-the-token', `${target.url}/ip`);
    expect(wrong.status).toBe(407);
    expect(wrong.headers).toMatch(/Proxy-Authenticate: Basic/i);
    expect(wrong.body).toContain('the proxy password is not the API token');
    expect(wrong.body).not.toContain(TOKEN);
    // A wrong password ends the connection: the next guess needs a new one.
    expect(wrong.headers).toMatch(/^Connection: close$/im);
    const { hostname, port } = new URL(gateway.url);
    const guess = connect({ host: hostname, port: Number(port) });
    const auth = Buffer.from(`${user('main')}:guess-1`).toString('base64');
    guess.write(
      `GET ${target.url}/ip HTTP/1.1\r\nHost: ${new URL(target.url).host}\r\nProxy-Authorization: Basic ${auth}\r\n\r\n`,
    );
    let answer = '';
    guess.setEncoding('latin1');
    guess.on('data', (c: string) => (answer += c));
    // The server closes it (no Connection: close was asked for), after its 407.
    await new Promise<void>((resolve, reject) => {
      guess.once('close', () => resolve());
      guess.once('error', reject);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 407 /);
    const bad = await curlThrough(gateway.url, 'session-a_Group-x', TOKEN, `${target.url}/ip`, {
      tunnel: true,
    });
    expect(bad.status).toBe(400);
    const badHttp = await curlThrough(gateway.url, 'ttl-99999', TOKEN, `${target.url}/ip`);
    expect(badHttp.status).toBe(400);
    expect(badHttp.body).toContain('ttl must be whole seconds between 1 and 3600');
    const none = await curlThrough(gateway.url, user('nothing-here'), TOKEN, `${target.url}/ip`);
    expect(none.status).toBe(503);
    expect(none.body).toContain('no healthy proxy with free capacity matched');
  });

  it('session-X: ten connections in a row use one proxy, while another session uses another', async () => {
    const seen = { a: [] as string[], b: [] as string[] };
    for (let i = 0; i < 10; i++) {
      for (const session of ['a', 'b'] as const) {
        const r = await curlThrough(
          gateway.url,
          user('sticky', `session-${session}${namespace}_`),
          TOKEN,
          `${target.url}/ip`,
          {
            tunnel: i % 2 === 0,
          },
        );
        expect(r.status, r.headers).toBe(200);
        seen[session].push((JSON.parse(r.body) as { ip: string }).ip);
      }
    }
    expect(new Set(seen.a).size).toBe(1);
    expect(new Set(seen.b).size).toBe(1);
    expect(seen.a[0]).not.toBe(seen.b[0]);
    expect(ips.sticky).toContain(seen.a[0]);
    // Each session holds one lease, not one per connection.
    const held = await active();
    expect(['sticky-0', 'sticky-1', 'sticky-2'].map((n) => held.get(uids[n]!) ?? 0).sort()).toEqual([
      0, 1, 1,
    ]);
  });

  it('a 429 on plain HTTP cools that proxy down for that target: the next request goes elsewhere, other targets still use it', async () => {
    // `localhost` is its own target: the other tests' requests go to 127.0.0.1.
    const limited = await curlThrough(
      gateway.url,
      user('cool'),
      TOKEN,
      `http://localhost:${target.port}/status/429`,
    );
    expect(limited.status).toBe(429);
    const cooled = /x-caller: (\S+)/i.exec(limited.headers)?.[1];
    expect(ips.cool).toContain(cooled);
    for (let i = 0; i < 3; i++) {
      const next = await curlThrough(gateway.url, user('cool'), TOKEN, `http://localhost:${target.port}/ip`);
      expect(next.status).toBe(200);
      expect((JSON.parse(next.body) as { ip: string }).ip).not.toBe(cooled);
    }
    const tunnelled = await curlThrough(
      gateway.url,
      user('cool'),
      TOKEN,
      `http://localhost:${target.port}/ip`,
      {
        tunnel: true,
      },
    );
    expect((JSON.parse(tunnelled.body) as { ip: string }).ip).not.toBe(cooled);
    // The cooldown is for localhost only: 127.0.0.1 gets the preferred (fastest, least loaded) proxy again.
    const other = await curlThrough(gateway.url, user('cool'), TOKEN, `${target.url}/ip`);
    expect((JSON.parse(other.body) as { ip: string }).ip).toBe(ips.cool![0]);
    expect(cooled).toBe(ips.cool![0]);
  });

  it('an upstream that refuses or times out is retried on another proxy (3 attempts) and reported for the target', async () => {
    // Three proxies: refusing (preferred), hanging, working.
    const started = Date.now();
    // CONNECT: the hanging proxy never answers it within the connect timeout.
    const first = await curlThrough(gateway.url, user('retry'), TOKEN, `${target.url}/ip`, { tunnel: true });
    expect(first.status, first.body).toBe(200);
    expect((JSON.parse(first.body) as { ip: string }).ip).toBe(ips.retry![0]);
    // The hanging proxy cost one connect timeout (1 s).
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    await gateway.cli.waitFor(/"proxy":"[^"]*\/retry-0"[^\n]*"reason":"refused"[^\n]*upstream proxy failed/);
    await gateway.cli.waitFor(/"proxy":"[^"]*\/retry-1"[^\n]*"reason":"timeout"[^\n]*upstream proxy failed/);
    // Both are cooling down for this target now: the next connections go straight to the working one.
    for (const tunnel of [true, false]) {
      const t0 = Date.now();
      const r = await curlThrough(gateway.url, user('retry'), TOKEN, `${target.url}/ip`, { tunnel });
      expect(r.status).toBe(200);
      expect((JSON.parse(r.body) as { ip: string }).ip).toBe(ips.retry![0]);
      expect(Date.now() - t0).toBeLessThan(900);
    }
  });

  it('a tunnel holds its lease while open and releases it the moment the client disconnects', async () => {
    const uid = uids['solo-0']!;
    const first = await openTunnel(gateway.url, user('solo'), target.port);
    expect(first.status).toBe(200);
    expect((await active()).get(uid)).toBe(1);
    // maxLeases 1: a second tunnel is refused while the first is open.
    const second = await openTunnel(gateway.url, user('solo'), target.port);
    expect(second.status).toBe(503);
    second.socket.destroy();
    first.socket.destroy();
    await eventually('the lease to be released', async () => !(await active()).has(uid) || undefined, {
      timeoutMs: 2_000,
      intervalMs: 20,
    });
    const third = await openTunnel(gateway.url, user('solo'), target.port);
    expect(third.status).toBe(200);
    third.socket.destroy();
    await eventually('the lease to be released', async () => !(await active()).has(uid) || undefined, {
      timeoutMs: 2_000,
      intervalMs: 20,
    });
  });

  it('maxLeases is never exceeded across the gateway and a lease API process sharing one Redis', async () => {
    const api = startCli(
      [
        'api',
        '--discovery-addr',
        '127.0.0.1:0',
        '--lease-store',
        redis.url,
        ...testServerArgs(),
        '--watch-namespaces',
        namespace,
      ],
      {
        env: { DISCOVERY_TOKEN: TOKEN },
      },
    );
    try {
      const apiUrl = await leaseApiUrl(api, 150_000);
      const capUids = ['cap-0', 'cap-1', 'cap-2'].map((n) => uids[n]!);
      const acquire = async () => {
        const res = await fetch(`${apiUrl}/v1/leases`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ selector: { suite: namespace, group: 'cap' }, ttlSeconds: 60 }),
        });
        return { status: res.status, body: (await res.json()) as { leaseID?: string } };
      };
      await eventually(
        'the api to see the cap proxies',
        async () => {
          const r = await acquire();
          if (r.status !== 201) return undefined;
          await fetch(`${apiUrl}/v1/leases/${r.body.leaseID}`, {
            method: 'DELETE',
            headers: { authorization: `Bearer ${TOKEN}` },
          });
          return true;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );

      let peak = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const held = await active();
          for (const uid of capUids) peak = Math.max(peak, held.get(uid) ?? 0);
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      // 3 proxies × 2 slots. The api takes 3, then 10 gateway tunnels and 4 more api leases race for the rest.
      const apiLeases = [await acquire(), await acquire(), await acquire()];
      expect(apiLeases.map((r) => r.status)).toEqual([201, 201, 201]);
      const [tunnels, more] = await Promise.all([
        Promise.all(Array.from({ length: 10 }, () => openTunnel(gateway.url, user('cap'), target.port))),
        Promise.all(Array.from({ length: 4 }, () => acquire())),
      ]);
      const tunnelsOpen = tunnels.filter((t) => t.status === 200).length;
      const moreGranted = more.filter((r) => r.status === 201).length;
      expect(tunnels.filter((t) => t.status !== 200).every((t) => t.status === 503)).toBe(true);
      expect(tunnelsOpen + moreGranted).toBe(3);
      const held = await active();
      expect(capUids.map((uid) => held.get(uid) ?? 0)).toEqual([2, 2, 2]);
      sampling = false;
      await sampler;
      expect(peak).toBeLessThanOrEqual(2);

      // Closing the tunnels frees their slots for the api at once.
      for (const t of tunnels) t.socket.destroy();
      await eventually(
        "the tunnels' slots to be free",
        async () => {
          const h = await active();
          const total = capUids.reduce((sum, uid) => sum + (h.get(uid) ?? 0), 0);
          return total === 3 + moreGranted || undefined;
        },
        { timeoutMs: 2_000, intervalMs: 20 },
      );
      for (const r of [...apiLeases, ...more].filter((x) => x.status === 201))
        await fetch(`${apiUrl}/v1/leases/${r.body.leaseID}`, {
          method: 'DELETE',
          headers: { authorization: `Bearer ${TOKEN}` },
        });
      const after = await active();
      expect(capUids.map((uid) => after.get(uid) ?? 0)).toEqual([0, 0, 0]);
    } finally {
      await api.stop();
    }
  });

  it('never logs the token or the Proxy-Authorization header', () => {
    const output = gateway.cli.output();
    expect(output).toContain('gateway access');
    expect(output).not.toContain(TOKEN);
    expect(output).not.toContain(Buffer.from(`${user('main')}:${TOKEN}`).toString('base64'));
    expect(output.toLowerCase()).not.toContain('proxy-authorization');
  });
});
