/**
 * Shared by the gateway's integration tests: a fleet of real forward
 * proxies (the `local` provider's, each egressing from its own loopback
 * address) registered as External Proxies on the test apiserver with the
 * status a Proxy workflow writes, a loopback target that tells callers
 * apart, curl through the gateway, and the `gateway` CLI process.
 */
import { execFile } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import { promisify } from 'node:util';
import { inject } from 'vitest';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import type { ProxyClient } from '../../kube/proxies.js';
import { callerAddress } from '../../local-servers/ip-echo.js';
import { startCli, type CliProcess } from '../helpers/cli.js';
import { createProxy, getProxy, setProxyStatus } from '../helpers/kube.js';

const run = promisify(execFile);

/** `count` forward proxies on 127.77.<one random octet>.1..count, each on a free port. */
export async function startForwardProxies(
  count: number,
  behaviour: ForwardProxy['behaviour'] = 'forward',
): Promise<ForwardProxy[]> {
  const octet = randomInt(1, 250);
  const out: ForwardProxy[] = [];
  for (let i = 1; i <= count; i++)
    out.push(
      await startForwardProxy({ host: `127.77.${octet}.${i}`, port: 0, behaviour, connectTimeoutMs: 3_000 }),
    );
  return out;
}

export function proxyStatus(healthy: boolean, latencyMillis = 5): ProxyStatus {
  return {
    phase: healthy ? 'Ready' : 'Unhealthy',
    latencyMillis,
    conditions: [
      {
        type: 'Healthy',
        status: healthy ? 'True' : 'False',
        lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        reason: healthy ? 'Probe' : 'ConnectFailed',
        message: healthy ? 'ok' : 'test',
      },
    ],
  };
}

/** Creates an External Proxy at host:port and writes its status, as its workflow would. */
export async function registerProxy(
  objects: ProxyClient,
  namespace: string,
  name: string,
  endpoint: { host: string; port: number },
  opts: {
    attributes: Record<string, string>;
    maxLeases?: number;
    healthy?: boolean;
    latencyMillis?: number;
    labels?: Record<string, string>;
  },
): Promise<void> {
  await createProxy(
    objects,
    namespace,
    name,
    {
      mode: 'External',
      endpoint,
      maxLeases: opts.maxLeases ?? 5,
      attributes: opts.attributes,
      // The api process's prober (gateway-redis) probes through the proxy to the loopback only.
      healthCheck: { probeURL: 'http://127.0.0.1:9/' },
    },
    opts.labels ? { labels: opts.labels } : {},
  );
  const current = await getProxy(objects, namespace, name);
  await setProxyStatus(objects, current, proxyStatus(opts.healthy ?? true, opts.latencyMillis ?? 5));
}

export interface LoopbackTarget {
  /** `http://127.0.0.1:port` (and the same server as `http://localhost:port`). */
  url: string;
  port: number;
  close(): Promise<void>;
}

/**
 * `/ip` answers `{"ip": caller}`; `/status/N` answers status N with the
 * caller in `x-caller`; `/bytes/N` streams N bytes; `/drip` sends its head
 * and then a byte every 100 ms, never ending. The caller is the egress
 * address of the proxy that carried the request.
 */
export async function startLoopbackTarget(): Promise<LoopbackTarget> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const caller = callerAddress(req.socket);
    const path = (req.url ?? '/').split('?')[0]!;
    const status = /^\/status\/(\d{3})$/.exec(path);
    const bytes = /^\/bytes\/(\d+)$/.exec(path);
    if (path === '/drip') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const timer = setInterval(() => res.write('.'), 100);
      res.once('close', () => clearInterval(timer));
    } else if (status) {
      res
        .writeHead(Number(status[1]), { 'x-caller': caller, 'content-type': 'text/plain' })
        .end(`${status[1]}\n`);
    } else if (bytes) {
      const n = Number(bytes[1]);
      res.writeHead(200, { 'content-length': n, 'content-type': 'application/octet-stream' });
      res.end(Buffer.alloc(n, 120));
    } else {
      const body = `${JSON.stringify({ ip: caller })}\n`;
      res
        .writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
        .end(body);
    }
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface CurlResult {
  status: number;
  headers: string;
  body: string;
}

/**
 * curl through the gateway with `user:password` in the proxy URL, as the
 * README shows. `tunnel` uses CONNECT (`-p`) for an http:// URL, which is
 * what curl does for https:// (there is no TLS target on the loopback).
 */
export async function curlThrough(
  gatewayUrl: string,
  user: string,
  password: string,
  url: string,
  opts: { tunnel?: boolean } = {},
): Promise<CurlResult> {
  const proxy = gatewayUrl.replace('http://', `http://${user}:${password}@`);
  const args = ['-sS', '-i', '--max-time', '20', '-x', proxy, ...(opts.tunnel ? ['-p'] : []), url];
  let stdout: string;
  try {
    ({ stdout } = await run('curl', args, { encoding: 'utf8' }));
  } catch (error) {
    // curl exits non-zero when the proxy refuses CONNECT; its output still holds the answer.
    stdout = (error as { stdout?: string }).stdout ?? '';
    if (!stdout) throw error;
  }
  // With -p, curl prints the CONNECT answer first: the last response is the one that counts.
  const responses = stdout.split(/\r?\n\r?\n(?=HTTP\/)/);
  const last = responses.at(-1)!;
  const split = last.indexOf('\r\n\r\n');
  const head = split < 0 ? last : last.slice(0, split);
  return {
    status: Number(/^HTTP\/[\d.]+ (\d{3})/.exec(head)?.[1] ?? 0),
    headers: head,
    body: split < 0 ? '' : last.slice(split + 4),
  };
}

/** The gateway's log line when it listens; group 1 is its URL. */
export const GATEWAY_LISTENING = /"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*gateway listening/;

/** An `egress-proxies gateway` process on the test apiserver, watching `namespace`. */
export async function startGatewayCli(
  namespace: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<{ cli: CliProcess; url: string }> {
  const cli = startCli(
    [
      'gateway',
      '--gateway-addr',
      '127.0.0.1:0',
      '--kubeconfig',
      inject('kubeconfigPath'),
      '--watch-namespaces',
      namespace,
      // The test's targets live on the loopback, on ports of their own; a
      // test of the policy itself names its own flags (a later flag wins).
      ...(args.some((a) => a.startsWith('--egress-')) ? [] : ['--egress-allow-cidrs', '127.0.0.0/8,::1/128']),
      ...args,
    ],
    { env },
  );
  try {
    const url = (await cli.waitFor(GATEWAY_LISTENING, 120_000))[1]!;
    return { cli, url };
  } catch (error) {
    // The caller never gets the process to stop: stop it here.
    await cli.stop();
    throw error;
  }
}

/** The process's resident set, from /proc (Linux). */
export function rssBytes(pid: number, readFile: (p: string) => string): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFile(`/proc/${pid}/status`));
  return m ? Number(m[1]) * 1024 : NaN;
}

/** Slots per proxy UID as the Redis lease store holds them. */
export async function redisActiveSlots(redis: Redis): Promise<Map<string, number>> {
  const flat = await redis.hgetall(`${DEFAULT_REDIS_PREFIX}active`);
  return new Map(Object.entries(flat).map(([uid, n]) => [uid, Number(n)]));
}

export interface GatewayTunnel {
  /** The gateway's status for the CONNECT. */
  status: number;
  /** Its answer's head, status line and headers. */
  head: string;
  /** The proxy that carries it (X-Egress-Proxy), '' when refused. */
  proxy: string;
  socket: Socket;
  /** Resolves when either side closes the connection. */
  closed: Promise<void>;
}

/**
 * A CONNECT through the gateway, left open: `credentials` is `user:password`
 * (none: no Proxy-Authorization), `from` a local address to connect from (a
 * client of its own).
 */
export function gatewayConnect(
  gatewayUrl: string,
  authority: string,
  opts: { credentials?: string; from?: string } = {},
): Promise<GatewayTunnel> {
  const { hostname, port } = new URL(gatewayUrl);
  return new Promise((resolve, reject) => {
    const socket = connect({
      host: hostname,
      port: Number(port),
      ...(opts.from ? { localAddress: opts.from } : {}),
    });
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    let head = '';
    socket.setEncoding('latin1');
    socket.once('connect', () => {
      const auth = opts.credentials
        ? `Proxy-Authorization: Basic ${Buffer.from(opts.credentials).toString('base64')}\r\n`
        : '';
      socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n${auth}\r\n`);
    });
    const onData = (chunk: string) => {
      head += chunk;
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      const answer = head.slice(0, end);
      resolve({
        status: Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0),
        head: answer,
        proxy: /^X-Egress-Proxy: (.*)$/im.exec(answer)?.[1]?.trim() ?? '',
        socket,
        closed,
      });
    };
    socket.on('data', onData);
    socket.once('error', reject);
  });
}
