/**
 * Malformed and abandoned proxy requests against a real `egress-proxies
 * gateway` process (leasing through Debian's redis-server): bad CONNECT
 * lines, bad auth, oversized heads, random bytes, slow-loris heads, and
 * clients that leave mid-setup or mid-request. The gateway must answer
 * what it can, never crash, hold no lease afterwards (Redis's slot counts
 * back to zero) and keep its memory bounded over repeated rounds.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import type { ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { CliProcess } from '../helpers/cli.js';
import { createNamespace, proxyClient, kubeConfig } from '../helpers/kube.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { eventually } from '../helpers/temporal.js';
import {
  curlThrough,
  registerProxy,
  rssBytes,
  startForwardProxies,
  startGatewayCli,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';

const TOKEN = 'fuzz-token';

interface Exchange {
  /** The status the gateway answered, 0 for none. */
  status: number;
  /** Milliseconds until the gateway closed the connection (or we did). */
  closedAfterMs: number;
  /** The answer's status line and the start of its body, for a failure message. */
  answer: string;
}

/**
 * Writes `chunks` (a string is one chunk; `pauseMs` between chunks) and
 * reads what comes back until the connection closes, or until `closeAfterMs`
 * when we leave first.
 */
function exchange(
  port: number,
  chunks: Array<string | Buffer>,
  opts: { pauseMs?: number; closeAfterMs?: number; deadlineMs?: number } = {},
): Promise<Exchange> {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect({ host: '127.0.0.1', port });
    let received = '';
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      socket.destroy();
      resolve({
        status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(received)?.[1] ?? 0),
        closedAfterMs: Date.now() - started,
        answer: received
          .split('\r\n\r\n')
          .map((part) => part.split('\r\n')[0])
          .join(' | ')
          .slice(0, 300),
      });
    };
    const deadline = setTimeout(finish, opts.deadlineMs ?? 30_000);
    socket.on('data', (d: Buffer) => (received += d.toString('latin1')));
    socket.on('error', finish);
    socket.on('close', finish);
    const write = async () => {
      for (const [i, chunk] of chunks.entries()) {
        if (socket.destroyed) return;
        if (i > 0 && opts.pauseMs) await new Promise((r) => setTimeout(r, opts.pauseMs));
        socket.write(chunk);
      }
      if (opts.closeAfterMs !== undefined) setTimeout(finish, opts.closeAfterMs);
    };
    socket.once('connect', () => void write());
  });
}

describe('gateway under malformed and abandoned requests', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  let namespace = '';
  let redis: RunningRedis;
  let inspect: Redis;
  let target: LoopbackTarget;
  let gateway: { cli: CliProcess; url: string };
  let port = 0;
  const forwardProxies: ForwardProxy[] = [];
  const auth = (user: string, password = TOKEN) =>
    `Proxy-Authorization: Basic ${Buffer.from(`${user}:${password}`).toString('base64')}\r\n`;
  const user = () => `suite-${namespace}`;

  async function slotsHeld(): Promise<number> {
    const flat = await inspect.hgetall(`${DEFAULT_REDIS_PREFIX}active`);
    return Object.values(flat).reduce((sum, n) => sum + Number(n), 0);
  }

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    target = await startLoopbackTarget();
    namespace = await createNamespace(kc, 'gateway-fuzz');
    // The preferred proxy never answers: every connection that reaches it waits out the connect timeout,
    // so a client that leaves early leaves mid-setup.
    const [hanging] = await startForwardProxies(1, 'hang');
    const working = await startForwardProxies(2);
    forwardProxies.push(hanging!, ...working);
    await registerProxy(
      objects,
      namespace,
      'hang',
      { host: hanging!.host, port: hanging!.port },
      {
        attributes: { suite: namespace },
        maxLeases: 1000,
        latencyMillis: 1,
      },
    );
    for (const [i, p] of working.entries())
      await registerProxy(
        objects,
        namespace,
        `ok-${i}`,
        { host: p.host, port: p.port },
        {
          attributes: { suite: namespace },
          maxLeases: 1000,
          latencyMillis: 10 + i,
        },
      );
    gateway = await startGatewayCli(
      namespace,
      // The fuzz sends wrong passwords by the hundred from one address: the
      // wrong-password limiter (tested in gateway-tenants.test.ts) is off here.
      ['--lease-store', redis.url, '--gateway-connect-timeout', '2s', '--auth-failures-per-minute', '0'],
      { DISCOVERY_TOKEN: TOKEN },
    );
    port = Number(new URL(gateway.url).port);
    // Over CONNECT: the hanging proxy times out (2 s) and is cooled down for 127.0.0.1, so the
    // well-formed requests below reach a working proxy (a plain-HTTP request is not retried once
    // its upstream accepted the connection).
    await eventually(
      'the gateway to carry a request',
      async () => {
        const r = await curlThrough(gateway.url, user(), TOKEN, `${target.url}/ip`, { tunnel: true });
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

  /** One round of every malformed or abandoned request, `width` of each at once. Returns the answers by case. */
  async function round(width: number, salt: number): Promise<Map<string, Exchange[]>> {
    const t = target.port;
    const cases: Record<string, () => Promise<Exchange>> = {
      garbage: () => exchange(port, ['HELLO THERE\r\n\r\n']),
      random: () => exchange(port, [randomBytes(1500)]),
      'no authority': () => exchange(port, [`CONNECT nohostport HTTP/1.1\r\n${auth(user())}\r\n`]),
      'port out of range': () => exchange(port, [`CONNECT 127.0.0.1:99999 HTTP/1.1\r\n${auth(user())}\r\n`]),
      'empty host': () => exchange(port, [`CONNECT :80 HTTP/1.1\r\n${auth(user())}\r\n`]),
      'bad version': () => exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/9\r\n\r\n`]),
      'no auth': () => exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\n\r\n`]),
      'not basic': () =>
        exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\nProxy-Authorization: Bearer x\r\n\r\n`]),
      'bad base64': () =>
        exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\nProxy-Authorization: Basic !!!\r\n\r\n`]),
      'wrong token': () => exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\n${auth(user(), 'nope')}\r\n`]),
      'bad username': () => exchange(port, [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\n${auth('ttl-x_')}\r\n`]),
      'origin form': () => exchange(port, [`GET /ip HTTP/1.1\r\nHost: x\r\n${auth(user())}\r\n`]),
      'https absolute': () => exchange(port, [`GET https://127.0.0.1:${t}/ HTTP/1.1\r\nHost: x\r\n\r\n`]),
      oversized: () =>
        exchange(port, [
          `CONNECT 127.0.0.1:${t} HTTP/1.1\r\n${auth(user())}X-Big: ${'a'.repeat(64 * 1024)}\r\n\r\n`,
        ]),
      'half request line': () => exchange(port, ['CONNECT 127.0.0.1:'], { closeAfterMs: 20 }),
      // A distinct target per connection (127.0.0.x): no cooldown of the hanging proxy shortens the next.
      'leaves mid-setup (CONNECT)': () =>
        exchange(port, [`CONNECT 127.0.0.${(salt % 200) + 2}:${t} HTTP/1.1\r\n${auth(user())}\r\n`], {
          closeAfterMs: 50,
        }),
      'leaves mid-setup (plain HTTP)': () =>
        exchange(
          port,
          [`GET http://127.0.0.${(salt % 200) + 2}:${t}/ip HTTP/1.1\r\nHost: x\r\n${auth(user())}\r\n`],
          {
            closeAfterMs: 50,
          },
        ),
      'leaves mid-body (plain HTTP POST)': () =>
        exchange(
          port,
          [
            `POST ${target.url}/ip HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n${auth(user())}\r\n`,
            'partial',
          ],
          { closeAfterMs: 2_500 },
        ),
      'leaves an open tunnel': () =>
        exchange(
          port,
          [`CONNECT 127.0.0.1:${t} HTTP/1.1\r\n${auth(user())}\r\n`, `GET /ip HTTP/1.1\r\nHost: x\r\n\r\n`],
          {
            closeAfterMs: 2_500,
          },
        ),
    };
    const answers = new Map<string, Exchange[]>();
    await Promise.all(
      Object.entries(cases).flatMap(([name, run]) =>
        Array.from({ length: width }, async () => {
          const r = await run();
          answers.set(name, [...(answers.get(name) ?? []), r]);
        }),
      ),
    );
    return answers;
  }

  it('answers every malformed request, crashes never, leaks no lease, and its memory stays bounded', async () => {
    const pid = gateway.cli.proc.pid!;
    const first = await round(10, 1);
    // What the gateway answered, where it can answer; a failure shows each answer it gave.
    const expected: Record<string, number> = {
      garbage: 400,
      'no authority': 400,
      'port out of range': 400,
      'empty host': 400,
      'no auth': 407,
      'not basic': 407,
      'bad base64': 407,
      'wrong token': 407,
      'bad username': 400,
      'origin form': 400,
      'https absolute': 400,
      oversized: 431,
      'leaves an open tunnel': 200,
    };
    for (const [name, status] of Object.entries(expected)) {
      const got = first.get(name) ?? [];
      expect(
        new Set(got.map((r) => r.status)),
        `${name}: ${got.map((r) => `${r.status} after ${r.closedAfterMs} ms (${r.answer})`).join('; ')}`,
      ).toEqual(new Set([status]));
    }
    await eventually(
      'every slot to be given back',
      async () => ((await slotsHeld()) === 0 ? true : undefined),
      {
        timeoutMs: 5_000,
        intervalMs: 50,
      },
    );
    const rssAfterFirst = rssBytes(pid, (p) => readFileSync(p, 'utf8'));

    for (let i = 2; i <= 6; i++) await round(10, i);
    expect(gateway.cli.proc.exitCode).toBeNull();
    await eventually(
      'every slot to be given back',
      async () => ((await slotsHeld()) === 0 ? true : undefined),
      {
        timeoutMs: 5_000,
        intervalMs: 50,
      },
    );
    const rssAfterMore = rssBytes(pid, (p) => readFileSync(p, 'utf8'));
    // Five more rounds of ~190 connections each: growth stays within allocator noise.
    expect(rssAfterMore - rssAfterFirst).toBeLessThan(48 * 1024 * 1024);
    // Still serving.
    const ok = await curlThrough(gateway.url, user(), TOKEN, `${target.url}/ip`, { tunnel: true });
    expect(ok.status).toBe(200);
  });

  it('closes a slow-loris head after the head timeout (10 s) and holds no lease for it', async () => {
    const slow = Array.from({ length: 20 }, () =>
      exchange(
        port,
        [
          `CONNECT 127.0.0.1:${target.port} HTTP/1.1\r\n`,
          ...Array.from({ length: 60 }, (_, i) => `X-Slow-${i}: 1\r\n`),
        ],
        { pauseMs: 500, deadlineMs: 25_000 },
      ),
    );
    const results = await Promise.all(slow);
    for (const r of results) {
      expect(r.closedAfterMs).toBeLessThan(20_000);
      expect(r.closedAfterMs).toBeGreaterThanOrEqual(9_000);
    }
    expect(gateway.cli.proc.exitCode).toBeNull();
    expect(await slotsHeld()).toBe(0);
  });
});
