/**
 * What relaying costs the gateway itself, judged so the verdict holds on a
 * small machine: the relay process's own CPU per GiB and the time it adds
 * to the first byte, at a paced load that leaves the machine idle part of
 * the time, against the relays a user would otherwise put in its place.
 *
 *   direct         client → forward proxy → target (the baseline; its row's
 *                  CPU is the forward proxy's, one Node hop for scale)
 *   gateway-http   client → gateway's HTTP listener → forward proxy → target
 *   gateway-socks  client → gateway's SOCKS5 listener → forward proxy → target
 *   proxy-chain    client → a bare proxy-chain Server chaining to the proxy
 *   squid          client → Debian's Squid with `cache_peer` to the proxy and
 *                  `never_direct` (no cache, no access log)
 *
 * Two modes: `connect` (a new tunnel per request: HTTP CONNECT, or a SOCKS5
 * handshake done the way curl does it, one step per round trip; plain HTTP
 * inside so no TLS cost hides the relay's) and `http` (keep-alive: absolute-
 * form requests on one connection per client; over SOCKS5 there is no
 * absolute form, so each client keeps one tunnel open and sends its
 * requests inside it). Bodies of 64 KiB and 1 MiB.
 *
 * Each cell runs `--clients` (4) concurrent clients paced to a fixed request
 * rate per body size, chosen to keep the machine below saturation; the
 * machine's idle CPU during the cell (from /proc/stat) is printed beside it.
 * The relay's CPU is utime + stime from /proc/<pid>/stat (with Squid's
 * children, if any) across the cell, divided by the body bytes relayed.
 * TTFB runs from the start of the request (the TCP connect, in `connect`
 * mode) to the first byte of the target's answer; "added" is a cell's p50
 * or p99 minus the direct path's in the same round. Rounds interleave the
 * relays (the order rotates each round); the table shows medians and the
 * range over rounds. Then 10,000 idle CONNECT tunnels are held through the
 * gateway and its RSS printed.
 *
 *   npm run bench:gateway -- [--rounds 3] [--seconds 5] [--clients 4]
 *     [--rate-64k 250] [--rate-1m 40] [--idle 10000] [--relays gateway-http,squid]
 *     [--modes connect] [--sizes 64k] [--profile DIR] [--gateway-node-flags=]
 *
 * Every party runs in a process of its own; this one only generates load.
 * The gateway runs as the image runs it: the compiled dist/ (built first
 * when missing or stale), the image's ENV and its Deployment's Node flags
 * (gateway/node-flags.ts); `--gateway-node-flags=` (empty) measures it
 * with V8's defaults instead, `--profile DIR` writes its CPU profile.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type * as LeaseStoreModule from '../../api/lease-store.js';
import type * as MetricsModule from '../../api/metrics.js';
import type * as ProxyCatalogModule from '../../api/proxy-catalog.js';
import { GATEWAY_NODE_FLAGS } from '../../gateway/node-flags.js';
import type * as GatewayServerModule from '../../gateway/server.js';
import { API_VERSION } from '../../kube/coordinates.js';
import { freePort } from '../../local-servers/ports.js';
import {
  installSquid,
  prepareRunDir,
  startSquid,
  writeConf,
  type RunningSquid,
  type SquidRunDir,
} from '../../local-servers/squid.js';
import { imageEnvironment } from '../helpers/image-env.js';
import { distPath, REPO } from './dist.js';
import { CLOCK_TICKS_PER_SECOND, descendants, readProc } from './proc.js';

const SIZES = [64 * 1024, 1024 * 1024] as const;
const MODES = ['connect', 'http'] as const;
const RELAYS = ['direct', 'gateway-http', 'gateway-socks', 'proxy-chain', 'squid'] as const;
type Mode = (typeof MODES)[number];
type RelayName = (typeof RELAYS)[number];
const TOKEN = 'bench-token';
const GIB = 1024 ** 3;
const MIB = 1024 ** 2;

// ---------------------------------------------------------------- children

interface ChildInfo {
  proc: ChildProcess;
  info: Record<string, number | string>;
  ask(cmd: string): Promise<Record<string, number>>;
}

/** Starts this file as a child in `role`; resolves with what it reports when ready. */
function child(
  role: string,
  args: string[] = [],
  nodeFlags: string[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<ChildInfo> {
  const file = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', file, '--role', role, ...args], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env,
  });
  return new Promise((resolve, reject) => {
    proc.once('exit', (code) => reject(new Error(`${role} exited ${code}`)));
    proc.once('message', (info: Record<string, number | string>) => {
      resolve({
        proc,
        info,
        ask: (cmd) =>
          new Promise((res) => {
            proc.once('message', (m: Record<string, number>) => res(m));
            proc.send({ cmd });
          }),
      });
    });
  });
}

async function runChild(role: string, values: Record<string, string | undefined>): Promise<void> {
  const send = (m: Record<string, unknown>) => process.send!(m);
  process.on('message', (m: { cmd: string }) => {
    if (m.cmd === 'rss') {
      (globalThis as { gc?: () => void }).gc?.();
      const { rss, heapUsed, external } = process.memoryUsage();
      send({ rss, heapUsed, external });
    }
  });
  process.on('disconnect', () => process.exit(0));
  if (role === 'target') {
    const { createServer } = await import('node:http');
    const bodies = new Map(SIZES.map((n) => [String(n), Buffer.alloc(n, 120)]));
    const target = createServer((req, res) => {
      const body = bodies.get((req.url ?? '').slice(1)) ?? Buffer.from('ok\n');
      res.writeHead(200, { 'content-length': body.length, 'content-type': 'application/octet-stream' });
      res.end(body);
    });
    target.keepAliveTimeout = 60_000;
    target.maxConnections = 100_000;
    await new Promise<void>((r) => target.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, r));
    send({ targetPort: (target.address() as { port: number }).port });
    return;
  }
  if (role === 'proxy') {
    const { startForwardProxy } = await import('../../providers/local/forward-proxy.js');
    const proxy = await startForwardProxy({ host: '127.77.99.1', port: 0 });
    send({ proxyHost: proxy.host, proxyPort: proxy.port });
    return;
  }
  if (role === 'gateway') {
    // The compiled tree, as the image runs it (main() has built it): the
    // bench's own TypeScript goes through tsx, the gateway does not.
    const compiled = (file: string) => pathToFileURL(join(REPO, 'dist', file)).href;
    const { pino } = await import('pino');
    const { Registry } = await import('prom-client');
    const { MemoryLeaseStore } = (await import(compiled('api/lease-store.js'))) as typeof LeaseStoreModule;
    const { createStaticProxyCatalog } = (await import(
      compiled('api/proxy-catalog.js')
    )) as typeof ProxyCatalogModule;
    const { createGateway } = (await import(compiled('gateway/server.js'))) as typeof GatewayServerModule;
    const { registerProcessMetrics } = (await import(compiled('api/metrics.js'))) as typeof MetricsModule;
    const catalog = createStaticProxyCatalog([
      {
        apiVersion: API_VERSION,
        kind: 'Proxy',
        metadata: { name: 'upstream', namespace: 'bench', uid: '00000000-0000-4000-8000-000000000001' },
        spec: {
          mode: 'External',
          endpoint: { host: values.proxyHost!, port: Number(values.proxyPort) },
          maxLeases: 100_000,
          attributes: {},
        },
        status: {
          phase: 'Ready',
          latencyMillis: 1,
          conditions: [
            {
              type: 'Healthy',
              status: 'True',
              lastTransitionTime: '2026-01-01T00:00:00Z',
              reason: 'Probe',
              message: '',
            },
          ],
        },
      } as never,
    ]);
    const store = new MemoryLeaseStore();
    store.startSweeping();
    const registry = new Registry();
    registerProcessMetrics(registry);
    const gateway = createGateway({
      catalog,
      leaseStore: store,
      // As in production: the access log at info, written (here to /dev/null).
      logger: pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: false })),
      registry,
      settings: {
        token: TOKEN,
        maxLeaseTtlSeconds: 3600,
        defaultLeaseTtlSeconds: 300,
        connectTimeoutMs: 5_000,
        attempts: 3,
        rateLimitStatuses: [429, 403],
        maxTargetLabels: 500,
        // Its targets are on the loopback, on ports of their own.
        egressDenyCidrs: [],
        egressAllowCidrs: ['127.0.0.0/8'],
        egressAllowPorts: [[1, 65535]],
        // One client (this bench) holds the 10,000 idle tunnels: the per-client cap would refuse most.
        maxTunnelsPerClient: 100_000,
        maxConnections: 100_000,
      },
    });
    const { port } = await gateway.listen('127.0.0.1', 0);
    const socks = await gateway.listenSocks('127.0.0.1', 0);
    send({ port, socksPort: socks.port });
    return;
  }
  if (role === 'chain') {
    const { Server } = await import('proxy-chain');
    const upstreamProxyUrl = `http://${values.proxyHost}:${values.proxyPort}`;
    const server = new Server({
      port: 0,
      host: '127.0.0.1',
      verbose: false,
      prepareRequestFunction: () => ({ upstreamProxyUrl }),
    });
    await server.listen();
    send({ port: server.port });
    return;
  }
  throw new Error(`unknown role ${role}`);
}

/**
 * Squid as a chaining relay: every request and every CONNECT goes to the
 * one parent (`never_direct`), nothing is cached or logged per request.
 */
async function startSquidRelay(upstream: { host: string; port: number }): Promise<{
  squid: RunningSquid;
  runDir: SquidRunDir;
  port: number;
  version: string;
}> {
  const install = await installSquid();
  const runDir = prepareRunDir(install);
  const port = await freePort();
  writeConf(
    runDir,
    [
      `http_port 127.0.0.1:${port}`,
      `cache_peer ${upstream.host} parent ${upstream.port} 0 no-query no-digest no-netdb-exchange default name=upstream`,
      'never_direct allow all',
      'http_access allow all',
      'cache deny all',
      'access_log none',
      'cache_store_log none',
      'shutdown_lifetime 0 seconds',
      runDir.localDirectives,
    ].join('\n'),
  );
  const squid = await startSquid(install, runDir, port);
  return { squid, runDir, port, version: install.banner };
}

// ---------------------------------------------------------------- clients

const proxyAuth = `Basic ${Buffer.from(`:${TOKEN}`).toString('base64')}`;

/** Reads a socket as a byte stream: exact lengths, or up to a header's end. */
class StreamReader {
  private buffer: Buffer = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  private failure: Error | undefined;

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
      this.wake?.();
    });
    const fail = (error: Error) => {
      this.failure ??= error;
      this.wake?.();
    };
    socket.on('error', fail);
    socket.on('close', () => fail(new Error('connection closed')));
  }

  private async until(ready: () => boolean): Promise<void> {
    while (!ready()) {
      if (this.failure) throw this.failure;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }

  /** Resolves once at least one byte is buffered (the first byte of an answer). */
  async any(): Promise<void> {
    await this.until(() => this.buffer.length > 0);
  }

  async exactly(n: number): Promise<Buffer> {
    await this.until(() => this.buffer.length >= n);
    const out = this.buffer.subarray(0, n);
    this.buffer = this.buffer.subarray(n);
    return out;
  }

  /** Everything up to and including the blank line ending an HTTP head. */
  async head(): Promise<string> {
    let end = -1;
    await this.until(() => (end = this.buffer.indexOf('\r\n\r\n')) >= 0);
    const out = this.buffer.subarray(0, end + 4).toString('latin1');
    this.buffer = this.buffer.subarray(end + 4);
    return out;
  }

  /** Drops `n` body bytes without copying them. */
  async skip(n: number): Promise<void> {
    let left = n;
    for (;;) {
      const take = Math.min(left, this.buffer.length);
      this.buffer = this.buffer.subarray(take);
      left -= take;
      if (left === 0) return;
      await this.until(() => this.buffer.length > 0);
    }
  }
}

function open(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    socket.setNoDelay(true);
    socket.once('connect', () => {
      socket.off('error', reject);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

/** A SOCKS5 CONNECT as curl makes it: greeting, username/password, request, each awaited. */
async function socksHandshake(reader: StreamReader, targetPort: number): Promise<void> {
  const { socket } = reader;
  socket.write(Buffer.from([5, 1, 2]));
  const method = await reader.exactly(2);
  if (method[1] !== 2) throw new Error(`SOCKS5 method ${method.toString('hex')}`);
  socket.write(Buffer.concat([Buffer.from([1, 0, TOKEN.length]), Buffer.from(TOKEN)]));
  const auth = await reader.exactly(2);
  if (auth[1] !== 0) throw new Error(`SOCKS5 auth ${auth.toString('hex')}`);
  const port = Buffer.alloc(2);
  port.writeUInt16BE(targetPort);
  socket.write(Buffer.concat([Buffer.from([5, 1, 0, 1, 127, 0, 0, 1]), port]));
  const answer = await reader.exactly(10);
  if (answer[1] !== 0) throw new Error(`SOCKS5 reply ${answer.toString('hex')}`);
}

/** Reads one response; resolves with the body length (the status must be 200). */
async function readResponse(reader: StreamReader): Promise<number> {
  const head = await reader.head();
  if (!head.startsWith('HTTP/1.1 200')) throw new Error(`answered ${head.slice(0, 40)}`);
  const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? NaN);
  if (!Number.isFinite(length)) throw new Error('no content-length');
  await reader.skip(length);
  return length;
}

interface Endpoint {
  host: string;
  port: number;
  socks: boolean;
}

/** One request through a new tunnel; [ttfbMs, bodyBytes]. */
async function tunnelRequest(e: Endpoint, targetPort: number, size: number): Promise<[number, number]> {
  const t0 = performance.now();
  const socket = await open(e.host, e.port);
  const reader = new StreamReader(socket);
  try {
    if (e.socks) {
      await socksHandshake(reader, targetPort);
    } else {
      socket.write(
        `CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nHost: 127.0.0.1:${targetPort}\r\nProxy-Authorization: ${proxyAuth}\r\n\r\n`,
      );
      const head = await reader.head();
      if (!/^HTTP\/1\.[01] 200/.test(head)) throw new Error(`CONNECT answered ${head.slice(0, 40)}`);
    }
    socket.write(`GET /${size} HTTP/1.1\r\nHost: 127.0.0.1:${targetPort}\r\nConnection: close\r\n\r\n`);
    await reader.any();
    const ttfb = performance.now() - t0;
    return [ttfb, await readResponse(reader)];
  } finally {
    socket.destroy();
  }
}

/** One client's keep-alive connection: absolute-form through an HTTP proxy, origin-form inside a SOCKS5 tunnel. */
class KeepAliveClient {
  private reader: StreamReader | undefined;

  constructor(
    private readonly e: Endpoint,
    private readonly targetPort: number,
  ) {}

  async request(size: number): Promise<[number, number]> {
    if (!this.reader || this.reader.socket.destroyed) {
      const socket = await open(this.e.host, this.e.port);
      this.reader = new StreamReader(socket);
      if (this.e.socks) await socksHandshake(this.reader, this.targetPort);
    }
    const reader = this.reader;
    const target = `127.0.0.1:${this.targetPort}`;
    const t0 = performance.now();
    reader.socket.write(
      this.e.socks
        ? `GET /${size} HTTP/1.1\r\nHost: ${target}\r\n\r\n`
        : `GET http://${target}/${size} HTTP/1.1\r\nHost: ${target}\r\nProxy-Authorization: ${proxyAuth}\r\n\r\n`,
    );
    try {
      await reader.any();
      const ttfb = performance.now() - t0;
      return [ttfb, await readResponse(reader)];
    } catch (error) {
      reader.socket.destroy();
      throw error;
    }
  }

  close(): void {
    this.reader?.socket.destroy();
  }
}

// ---------------------------------------------------------------- measuring

/** Machine-wide CPU from /proc/stat: [idle + iowait, total], in ticks. */
function machineTicks(): [number, number] {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
  return [fields[3]! + fields[4]!, total];
}

/** [utime + stime, stime] of `pid` and every process below it, in ticks. */
function treeTicks(pid: number): [number, number] {
  let cpu = 0;
  let system = 0;
  for (const p of [pid, ...descendants(pid)]) {
    // Undefined when it ended between the listing and the read.
    const sample = readProc(p);
    cpu += sample?.cpuTicks ?? 0;
    system += sample?.systemTicks ?? 0;
  }
  return [cpu, system];
}

interface Cell {
  bytes: number;
  requests: number;
  errors: number;
  relayCpuSeconds: number;
  /** The part of it spent in the kernel (on the loopback, sending also runs the receiver's TCP). */
  relaySystemSeconds: number;
  idleFraction: number;
  p50: number;
  p99: number;
}

function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * `clients` workers take request slots paced at `rate` per second (an open
 * schedule: a slot missed is taken late, never dropped); the first second
 * warms connections and JIT and is not counted.
 */
async function measure(
  mode: Mode,
  e: Endpoint,
  relayPid: number,
  targetPort: number,
  size: number,
  opts: { clients: number; seconds: number; rate: number },
): Promise<Cell> {
  const keepAlive = Array.from({ length: opts.clients }, () => new KeepAliveClient(e, targetPort));
  const run = async (seconds: number) => {
    const ttfbs: number[] = [];
    let bytes = 0;
    let errors = 0;
    let slot = 0;
    const start = performance.now();
    const interval = 1000 / opts.rate;
    const until = start + seconds * 1000;
    await Promise.all(
      keepAlive.map(async (client) => {
        for (;;) {
          const at = start + slot++ * interval;
          if (at >= until) return;
          const wait = at - performance.now();
          if (wait > 0) await sleep(wait);
          try {
            const [ttfb, n] =
              mode === 'connect' ? await tunnelRequest(e, targetPort, size) : await client.request(size);
            ttfbs.push(ttfb);
            bytes += n;
          } catch {
            errors++;
          }
        }
      }),
    );
    return { ttfbs, bytes, errors };
  };
  await run(1);
  const cpuBefore = treeTicks(relayPid);
  const [idleBefore, totalBefore] = machineTicks();
  const { ttfbs, bytes, errors } = await run(opts.seconds);
  const cpuAfter = treeTicks(relayPid);
  const [idleAfter, totalAfter] = machineTicks();
  for (const c of keepAlive) c.close();
  ttfbs.sort((a, b) => a - b);
  return {
    bytes,
    requests: ttfbs.length,
    errors,
    relayCpuSeconds: (cpuAfter[0] - cpuBefore[0]) / CLOCK_TICKS_PER_SECOND,
    relaySystemSeconds: (cpuAfter[1] - cpuBefore[1]) / CLOCK_TICKS_PER_SECOND,
    idleFraction: (idleAfter - idleBefore) / Math.max(1, totalAfter - totalBefore),
    p50: percentile(ttfbs, 0.5),
    p99: percentile(ttfbs, 0.99),
  };
}

/** Opens `count` CONNECT tunnels through the gateway (each answered 200) and leaves them open. */
async function idleTunnels(gatewayPort: number, targetPort: number, count: number): Promise<Socket[]> {
  const sockets: Socket[] = [];
  const one = async () => {
    const socket = await open('127.0.0.1', gatewayPort);
    const reader = new StreamReader(socket);
    socket.write(`CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nProxy-Authorization: ${proxyAuth}\r\n\r\n`);
    const head = await reader.head();
    if (!head.startsWith('HTTP/1.1 200')) throw new Error(head.slice(0, 60));
    return socket;
  };
  for (let i = 0; i < count; i += 250) {
    sockets.push(...(await Promise.all(Array.from({ length: Math.min(250, count - i) }, one))));
  }
  return sockets;
}

/**
 * 10,000 tunnels when the file-descriptor limit allows: each is two
 * sockets in the gateway and two in the forward proxy.
 */
function defaultIdle(): number {
  let limit = 1_048_576;
  try {
    const m = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (m) limit = Number(m[1]);
  } catch {
    // Not Linux: assume enough.
  }
  return Math.min(10_000, Math.floor((limit - 100) / 2 / 100) * 100);
}

// ---------------------------------------------------------------- report

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const range = (xs: number[], digits: number) =>
  xs.length > 1 ? ` (${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)})` : '';
const withRange = (xs: number[], digits: number) => `${median(xs).toFixed(digits)}${range(xs, digits)}`;
const cpuPerGib = (c: Cell) => c.relayCpuSeconds / (c.bytes / GIB);
const verdict = (met: boolean) => (met ? 'MET' : 'MISSED');

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      role: { type: 'string' },
      proxyHost: { type: 'string' },
      proxyPort: { type: 'string' },
      seconds: { type: 'string', default: '5' },
      clients: { type: 'string', default: '4' },
      'rate-64k': { type: 'string', default: '250' },
      'rate-1m': { type: 'string', default: '40' },
      idle: { type: 'string', default: String(defaultIdle()) },
      rounds: { type: 'string', default: '3' },
      relays: { type: 'string', default: RELAYS.join(',') },
      modes: { type: 'string', default: MODES.join(',') },
      sizes: { type: 'string', default: '64k,1m' },
      profile: { type: 'string' },
      'gateway-node-flags': { type: 'string' },
    },
  });
  if (values.role) return runChild(values.role, values);
  const seconds = Number(values.seconds);
  const clients = Number(values.clients);
  const rounds = Number(values.rounds);
  const rates = new Map<number, number>([
    [SIZES[0], Number(values['rate-64k'])],
    [SIZES[1], Number(values['rate-1m'])],
  ]);
  for (const [name, n] of Object.entries({
    seconds,
    clients,
    rounds,
    'rate-64k': rates.get(SIZES[0]),
    'rate-1m': rates.get(SIZES[1]),
  })) {
    if (!(Number(n) > 0)) throw new Error(`--${name} must be a positive number, got ${String(n)}`);
  }

  const pick = <T extends string>(flag: string, given: string, known: readonly T[]): T[] => {
    const names = given.split(',').filter(Boolean);
    const unknown = names.filter((n) => !known.includes(n as T));
    if (unknown.length > 0)
      throw new Error(`--${flag}: unknown ${unknown.join(', ')} (known: ${known.join(', ')})`);
    return known.filter((k) => names.includes(k));
  };
  // The direct path is every comparison's baseline: always measured.
  const relayNames = [
    'direct' as const,
    ...pick('relays', values.relays, RELAYS).filter((r) => r !== 'direct'),
  ];
  const modes = pick('modes', values.modes, MODES);
  const sizeNames = pick('sizes', values.sizes, ['64k', '1m'] as const);
  const sizes = SIZES.filter((_, i) => sizeNames.includes((['64k', '1m'] as const)[i]!));

  const target = await child('target');
  const upstream = await child('proxy');
  const proxyHost = String(upstream.info.proxyHost);
  const proxyPort = Number(upstream.info.proxyPort);
  const targetPort = Number(target.info.targetPort);
  const passUpstream = ['--proxyHost', proxyHost, '--proxyPort', String(proxyPort)];
  // As its Deployment starts it (gateway/node-flags.ts); --gateway-node-flags '' measures V8's defaults.
  const gatewayNodeFlags =
    values['gateway-node-flags'] === undefined
      ? [...GATEWAY_NODE_FLAGS]
      : values['gateway-node-flags'].split(' ').filter(Boolean);
  // --profile DIR: a V8 CPU profile of the gateway, written to DIR when the bench ends.
  distPath('gateway/server.js');
  const gateway = await child(
    'gateway',
    passUpstream,
    [...gatewayNodeFlags, ...(values.profile ? ['--cpu-prof', '--cpu-prof-dir', values.profile] : [])],
    // The image's ENV (NODE_ENV=production, MALLOC_ARENA_MAX=2, ...).
    { ...process.env, ...imageEnvironment() },
  );
  const chain = await child('chain', passUpstream);
  const squid = await startSquidRelay({ host: proxyHost, port: proxyPort });
  const relays: Record<RelayName, { endpoint: Endpoint; pid: number }> = {
    direct: { endpoint: { host: proxyHost, port: proxyPort, socks: false }, pid: upstream.proc.pid! },
    'gateway-http': {
      endpoint: { host: '127.0.0.1', port: Number(gateway.info.port), socks: false },
      pid: gateway.proc.pid!,
    },
    'gateway-socks': {
      endpoint: { host: '127.0.0.1', port: Number(gateway.info.socksPort), socks: true },
      pid: gateway.proc.pid!,
    },
    'proxy-chain': {
      endpoint: { host: '127.0.0.1', port: Number(chain.info.port), socks: false },
      pid: chain.proc.pid!,
    },
    squid: { endpoint: { host: '127.0.0.1', port: squid.port, socks: false }, pid: squid.squid.pid },
  };
  const load = () =>
    loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  process.stdout.write(
    `gateway bench: ${clients} clients paced at ${rates.get(SIZES[0])} req/s (64 KiB) and ${rates.get(SIZES[1])} req/s (1 MiB), ${seconds} s per cell, ${rounds} round(s); node ${process.version}; gateway from dist/ with the image's ENV and ${gatewayNodeFlags.join(' ') || 'no Node flags'}; ${squid.version}; load average at start ${load()}\n`,
  );

  const cells = new Map<string, Cell[]>();
  const key = (mode: Mode, size: number, relay: RelayName) => `${mode} ${size} ${relay}`;
  try {
    for (let round = 0; round < rounds; round++) {
      // Rotate the order so no relay always runs first (or right after Squid).
      const order = relayNames.map((_, i) => relayNames[(i + round) % relayNames.length]!);
      for (const mode of modes) {
        for (const size of sizes) {
          for (const relay of order) {
            const { endpoint, pid } = relays[relay];
            const cell = await measure(mode, endpoint, pid, targetPort, size, {
              clients,
              seconds,
              rate: rates.get(size)!,
            });
            cells.set(key(mode, size, relay), [...(cells.get(key(mode, size, relay)) ?? []), cell]);
          }
        }
      }
      process.stdout.write(`round ${round + 1} done; load average ${load()}\n`);
    }

    const lines = [
      '',
      '| mode | body | relay | req/s | errors | machine idle % | relay CPU s/GiB | of it kernel % | TTFB p50 ms | TTFB p99 ms | added p50 ms | added p99 ms |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|',
    ];
    const verdicts: string[] = [];
    let allMet = true;
    for (const mode of modes) {
      for (const size of sizes) {
        const of = (relay: RelayName) => cells.get(key(mode, size, relay))!;
        const direct = of('direct');
        const added = (relay: RelayName, q: 'p50' | 'p99') => of(relay).map((c, i) => c[q] - direct[i]![q]);
        for (const relay of relayNames) {
          const cs = of(relay);
          lines.push(
            `| ${mode} | ${size / 1024} KiB | ${relay} | ${withRange(
              cs.map((c) => c.requests / seconds),
              0,
            )} | ${cs.reduce((a, c) => a + c.errors, 0)} | ${withRange(
              cs.map((c) => c.idleFraction * 100),
              0,
            )} | ${withRange(cs.map(cpuPerGib), 2)} | ${withRange(
              cs.map((c) => (100 * c.relaySystemSeconds) / Math.max(1e-9, c.relayCpuSeconds)),
              0,
            )} | ${withRange(
              cs.map((c) => c.p50),
              2,
            )} | ${withRange(
              cs.map((c) => c.p99),
              2,
            )} | ${relay === 'direct' ? '' : withRange(added(relay, 'p50'), 2)} | ${
              relay === 'direct' ? '' : withRange(added(relay, 'p99'), 2)
            } |`,
          );
        }
        const cpuOf = (relay: RelayName) =>
          relayNames.includes(relay) ? median(of(relay).map(cpuPerGib)) : undefined;
        const chainCpu = cpuOf('proxy-chain');
        const squidCpu = cpuOf('squid');
        for (const listener of (['gateway-http', 'gateway-socks'] as const).filter((r) =>
          relayNames.includes(r),
        )) {
          const cpu = cpuOf(listener)!;
          const p99 = median(added(listener, 'p99'));
          const errors = of(listener).reduce((a, c) => a + c.errors, 0);
          const goals: Array<[string, boolean]> = [];
          if (chainCpu !== undefined)
            goals.push([
              `CPU ${cpu.toFixed(2)} s/GiB vs proxy-chain ${chainCpu.toFixed(2)}, ${(cpu / chainCpu).toFixed(2)}x (goal ≤ 1x)`,
              cpu <= chainCpu,
            ]);
          if (squidCpu !== undefined)
            goals.push([
              `vs Squid ${squidCpu.toFixed(2)}, ${(cpu / squidCpu).toFixed(2)}x (goal ≤ 1.5x)`,
              cpu <= 1.5 * squidCpu,
            ]);
          goals.push([`added TTFB p99 ${p99.toFixed(2)} ms (goal ≤ 2)`, p99 <= 2]);
          goals.push([`errors ${errors}`, errors === 0]);
          allMet &&= goals.every(([, met]) => met);
          verdicts.push(
            `${mode} ${size / 1024} KiB ${listener}: ${goals.map(([what, met]) => `${what} ${verdict(met)}`).join('; ')}`,
          );
        }
      }
    }
    const idleCells = [...cells.values()].flat().map((c) => c.idleFraction * 100);
    process.stdout.write(
      `${lines.join('\n')}\n\nmachine idle CPU over every cell: ${Math.min(...idleCells).toFixed(0)}-${Math.max(...idleCells).toFixed(0)} % (below saturation when above 0)\n\n${verdicts.join('\n')}\n`,
    );

    const idle = Number(values.idle);
    if (idle > 0) {
      const heapBefore = await gateway.ask('rss');
      const before = heapBefore.rss!;
      const t0 = performance.now();
      const sockets = await idleTunnels(relays['gateway-http'].endpoint.port, targetPort, idle);
      const opened = (performance.now() - t0) / 1000;
      const held = await gateway.ask('rss');
      const after = held.rss!;
      const met = after <= 300 * MIB;
      allMet &&= met;
      process.stdout.write(
        `\n${sockets.length} idle CONNECT tunnels through the gateway (opened in ${opened.toFixed(1)} s): gateway RSS ${(after / MIB).toFixed(1)} MiB (${(before / MIB).toFixed(1)} MiB before; goal ≤ 300 MiB) ${verdict(met)}; ${((after - before) / sockets.length / 1024).toFixed(1)} KiB per tunnel (V8 heap ${(held.heapUsed! / MIB).toFixed(1)} MiB, ${(heapBefore.heapUsed! / MIB).toFixed(1)} before; external ${(held.external! / MIB).toFixed(1)} MiB)\n`,
      );
      for (const s of sockets) s.destroy();
    }
    process.stdout.write(`\nevery goal: ${verdict(allMet)}; load average at the end ${load()}\n`);
  } finally {
    await squid.squid.stop(10_000).catch(() => squid.squid.kill());
    rmSync(squid.runDir.dir, { recursive: true, force: true });
    // Disconnected, each child exits on its own (and writes a profile when run with --cpu-prof).
    for (const c of [gateway, chain, upstream, target]) c.proc.disconnect();
  }
}

await main();
