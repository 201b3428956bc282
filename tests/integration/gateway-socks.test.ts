/**
 * The gateway's second front door and what both doors promise, end to end
 * on real parts: an `egress-proxies gateway` process (leasing through
 * Debian's redis-server) with its HTTP listener and its SOCKS5 listener,
 * External Proxies at real forward proxies on the test apiserver, and real
 * clients: curl (`--socks5-hostname user:TOKEN@...`, `--http2`), Node's
 * `socks-proxy-agent`, Node's TLS client and raw sockets.
 *
 * - SOCKS5 (RFC 1928/1929): a target reached through a fleet proxy, a
 *   session's ten connections on one proxy, wrong credentials refused with
 *   RFC 1929's status, BIND and UDP ASSOCIATE answered 0x07, and malformed
 *   or abandoned handshakes that leave no lease held and the process serving.
 * - A pure tunnel: a loopback recorder of our own takes the raw ClientHello;
 *   through either listener it is the client's direct one (byte for byte
 *   when the same bytes are sent; for two runs of Node's TLS client, equal
 *   with the fields TLS makes random masked, see maskRandomFields), and
 *   `curl --http2` negotiates HTTP/2 by ALPN through both.
 * - IPv6: a second gateway listening on [::1] reaches a [::1] target through
 *   a proxy at [::1], with `--egress-allow-cidrs ::1/128`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { createSecureServer, type Http2SecureServer } from 'node:http2';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect, createSecureContext } from 'node:tls';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { SocksProxyAgent } from 'socks-proxy-agent';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { DEFAULT_REDIS_PREFIX } from '../../api/redis-lease-store.js';
import { startForwardProxy, type ForwardProxy } from '../../providers/local/forward-proxy.js';
import { startRedis, type RunningRedis } from '../../local-servers/redis.js';
import { startCli, type CliProcess } from '../helpers/cli.js';
import { createNamespace, getProxy, kubeConfig, proxyClient } from '../helpers/kube.js';
import { selfSignedCert } from '../helpers/prober-fixtures.js';
import { eventually } from '../helpers/temporal.js';
import {
  curlThrough,
  gatewayConnect,
  registerProxy,
  startForwardProxies,
  startGatewayCli,
  startLoopbackTarget,
  type LoopbackTarget,
} from './gateway-helpers.js';

const run = promisify(execFile);
const TOKEN = 'socks-test-token';
const SOCKS_LISTENING = /"socks":"socks5:\/\/127\.0\.0\.1:(\d+)"[^\n]*gateway listening/;

const greeting = (...methods: number[]) => Buffer.from([5, methods.length, ...methods]);
const userPass = (user: string, password: string) =>
  Buffer.concat([
    Buffer.from([1, Buffer.byteLength(user)]),
    Buffer.from(user),
    Buffer.from([Buffer.byteLength(password)]),
    Buffer.from(password),
  ]);

/** 16 bytes of an IPv6 address written with at most one `::`. */
function ipv6Bytes(address: string): Buffer {
  const [head = '', tail = ''] = address.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const groups = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/** A SOCKS5 request: an IPv4 or IPv6 literal as its address type, anything else as a domain name. */
function socksRequest(command: number, host: string | Buffer, port: number): Buffer {
  let address: Buffer;
  if (Buffer.isBuffer(host)) address = Buffer.concat([Buffer.from([3, host.length]), host]);
  else if (/^\d+\.\d+\.\d+\.\d+$/.test(host)) address = Buffer.from([1, ...host.split('.').map(Number)]);
  else if (host.includes(':')) address = Buffer.concat([Buffer.from([4]), ipv6Bytes(host)]);
  else address = Buffer.concat([Buffer.from([3, host.length]), Buffer.from(host)]);
  const portBytes = Buffer.alloc(2);
  portBytes.writeUInt16BE(port);
  return Buffer.concat([Buffer.from([5, command, 0]), address, portBytes]);
}

interface Exchange {
  received: Buffer;
  /** The gateway closed the connection (rather than we, after closeAfterMs). */
  serverClosed: boolean;
}

/** Writes `bytes` and reads until the gateway closes, or until `closeAfterMs` when we leave first. */
function exchange(
  port: number,
  bytes: Buffer,
  opts: { host?: string; closeAfterMs?: number } = {},
): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = connect({ host: opts.host ?? '127.0.0.1', port });
    const parts: Buffer[] = [];
    let done = false;
    const finish = (serverClosed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(leave);
      socket.destroy();
      resolve({ received: Buffer.concat(parts), serverClosed });
    };
    let leave: NodeJS.Timeout | undefined;
    socket.on('data', (d: Buffer) => parts.push(d));
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    socket.once('connect', () => {
      socket.write(bytes);
      leave = setTimeout(() => finish(false), opts.closeAfterMs ?? 30_000);
    });
  });
}

/** A SOCKS5 CONNECT with username/password, left open once the gateway answers success. */
function socksTunnel(
  port: number,
  user: string,
  target: { host: string; port: number },
  gatewayHost = '127.0.0.1',
): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: gatewayHost, port });
    let got: Buffer = Buffer.alloc(0);
    // Method choice (2) + auth status (2) + reply with an IPv4 bound address (10).
    const expected = 14;
    socket.once('connect', () =>
      socket.write(
        Buffer.concat([greeting(2), userPass(user, TOKEN), socksRequest(1, target.host, target.port)]),
      ),
    );
    const onData = (chunk: Buffer) => {
      got = Buffer.concat([got, chunk]);
      if (got.length < expected) return;
      socket.off('data', onData);
      if (got[0] !== 5 || got[1] !== 2 || got[2] !== 1 || got[3] !== 0 || got[5] !== 0) {
        socket.destroy();
        reject(new Error(`SOCKS5 handshake answered ${got.toString('hex')}`));
        return;
      }
      resolve(socket);
    };
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error(`closed after ${got.toString('hex')}`)));
  });
}

/**
 * A loopback server that records the first TLS record (the ClientHello) of
 * each connection, byte for byte, then closes it.
 */
async function startHelloRecorder(): Promise<{ port: number; next(): Promise<Buffer>; close(): void }> {
  const seen: Buffer[] = [];
  const waiting: Array<(b: Buffer) => void> = [];
  const server: Server = createServer((socket) => {
    let got: Buffer = Buffer.alloc(0);
    socket.on('error', () => undefined);
    socket.on('data', (chunk: Buffer) => {
      got = Buffer.concat([got, chunk]);
      if (got.length < 5 || got.length < 5 + got.readUInt16BE(3)) return;
      const hello = got.subarray(0, 5 + got.readUInt16BE(3));
      const w = waiting.shift();
      if (w) w(hello);
      else seen.push(hello);
      socket.destroy();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: (server.address() as AddressInfo).port,
    next: () => {
      const ready = seen.shift();
      return ready ? Promise.resolve(ready) : new Promise((r) => waiting.push(r));
    },
    close: () => server.close(),
  };
}

/**
 * The ClientHello with the fields TLS fills with fresh randomness on every
 * handshake zeroed, and nothing else: the 32-byte client_random, the legacy
 * session id (TLS 1.3's middlebox compatibility mode sends 32 random bytes)
 * and each key_share entry's public key (an ephemeral key). Every length,
 * version, cipher suite, extension and its order stays compared.
 */
function maskRandomFields(hello: Buffer): Buffer {
  const b = Buffer.from(hello);
  // Record header (5), handshake type and length (4), legacy_version (2): the random.
  b.fill(0, 11, 43);
  const sessionIdLength = b[43]!;
  b.fill(0, 44, 44 + sessionIdLength);
  let o = 44 + sessionIdLength;
  o += 2 + b.readUInt16BE(o); // cipher suites
  o += 1 + b[o]!; // compression methods
  const end = o + 2 + b.readUInt16BE(o);
  o += 2;
  while (o < end) {
    const type = b.readUInt16BE(o);
    const length = b.readUInt16BE(o + 2);
    if (type === 0x0033) {
      // key_share: client_shares<2..> of (group(2), key_exchange<2..>).
      for (let p = o + 6; p < o + 4 + length;) {
        const keyLength = b.readUInt16BE(p + 2);
        b.fill(0, p + 4, p + 4 + keyLength);
        p += 4 + keyLength;
      }
    }
    o += 4 + length;
  }
  return b;
}

/** Node's TLS client on `socket` (or dialling the recorder): one fixed configuration for every run. */
function helloFrom(recorderPort: number, socket?: Socket): void {
  const client = tlsConnect({
    ...(socket ? { socket } : { host: '127.0.0.1', port: recorderPort }),
    servername: 'hello.test',
    ALPNProtocols: ['h2', 'http/1.1'],
    secureContext: HELLO_CONTEXT,
    rejectUnauthorized: false,
  });
  // The recorder closes after the hello: the handshake fails, as meant.
  client.on('error', () => undefined);
}
const HELLO_CONTEXT = createSecureContext({ minVersion: 'TLSv1.2', maxVersion: 'TLSv1.3' });

/** `curl` with `args`; its stdout (curl's exit status fails the test with its stderr). */
async function curl(args: string[]): Promise<string> {
  const { stdout } = await run('curl', ['-sS', '--max-time', '20', ...args], { encoding: 'utf8' });
  return stdout;
}

describe('gateway: SOCKS5, a pure tunnel, IPv6', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  let namespace = '';
  let redis: RunningRedis;
  let inspect: Redis;
  let target: LoopbackTarget;
  let gateway: { cli: CliProcess; url: string };
  let socksPort = 0;
  const forwardProxies: ForwardProxy[] = [];
  let ips: string[] = [];
  let stickyIps: string[] = [];
  const mainUids: string[] = [];
  const tmp = mkdtempSync(join(tmpdir(), 'ep-gateway-socks-'));
  const user = (extra = '') => `${extra}suite-${namespace}_group-main`;

  /** Leases held on the `main` proxies (the sticky session's proxies hold theirs on purpose). */
  async function slotsHeld(): Promise<number> {
    const flat = await inspect.hgetall(`${DEFAULT_REDIS_PREFIX}active`);
    return mainUids.reduce((sum, uid) => sum + Number(flat[uid] ?? 0), 0);
  }

  beforeAll(async () => {
    redis = await startRedis();
    inspect = new Redis(redis.url, { lazyConnect: true });
    await inspect.connect();
    target = await startLoopbackTarget();
    namespace = await createNamespace(kc, 'gateway-socks');
    const started = await startForwardProxies(3);
    forwardProxies.push(...started);
    ips = started.map((p) => p.host);
    for (const [i, p] of started.entries())
      await registerProxy(
        objects,
        namespace,
        `main-${i}`,
        { host: p.host, port: p.port },
        { attributes: { suite: namespace, group: 'main' }, maxLeases: 100, latencyMillis: 10 + i },
      );
    for (let i = 0; i < started.length; i++)
      mainUids.push((await getProxy(objects, namespace, `main-${i}`)).metadata.uid!);
    const sticky = await startForwardProxies(3);
    forwardProxies.push(...sticky);
    stickyIps = sticky.map((p) => p.host);
    for (const [i, p] of sticky.entries())
      await registerProxy(
        objects,
        namespace,
        `sticky-${i}`,
        { host: p.host, port: p.port },
        { attributes: { suite: namespace, group: 'sticky' }, maxLeases: 100, latencyMillis: 10 + i },
      );
    gateway = await startGatewayCli(
      namespace,
      ['--lease-store', redis.url, '--gateway-socks-addr', '127.0.0.1:0', '--auth-failures-per-minute', '0'],
      { DISCOVERY_TOKEN: TOKEN },
    );
    socksPort = Number(SOCKS_LISTENING.exec(gateway.cli.output())?.[1] ?? 0);
    expect(socksPort, gateway.cli.output().slice(-2000)).toBeGreaterThan(0);
    await eventually(
      'the gateway to know the proxies',
      async () => {
        const r = await curlThrough(gateway.url, user(), TOKEN, `${target.url}/ip`);
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
    rmSync(tmp, { recursive: true, force: true });
  });

  it('curl --socks5-hostname reaches the target through a fleet proxy; a session keeps one proxy for ten connections', async () => {
    const sessionUser = `session-a_suite-${namespace}_group-sticky`;
    const seen: string[] = [];
    for (let i = 0; i < 10; i++) {
      const body = await curl([
        '--socks5-hostname',
        `${sessionUser}:${TOKEN}@127.0.0.1:${socksPort}`,
        `${target.url}/ip`,
      ]);
      seen.push((JSON.parse(body) as { ip: string }).ip);
    }
    expect(stickyIps).toContain(seen[0]);
    expect(new Set(seen)).toEqual(new Set([seen[0]]));
    // The same session over the HTTP listener: the same lease, so the same proxy.
    const http = await curlThrough(gateway.url, sessionUser, TOKEN, `${target.url}/ip`, {
      tunnel: true,
    });
    expect((JSON.parse(http.body) as { ip: string }).ip).toBe(seen[0]);
    // The access log tells the SOCKS5 listener's tunnels apart.
    expect(gateway.cli.output()).toMatch(/"kind":"connect","via":"socks5"[^\n]*"session":"a"/);
  });

  it('a Node client (socks-proxy-agent, socks5h://) reaches the target through a fleet proxy', async () => {
    const agent = new SocksProxyAgent(`socks5h://${user()}:${TOKEN}@127.0.0.1:${socksPort}`);
    const body = await new Promise<string>((resolve, reject) => {
      get(`${target.url}/ip`, { agent }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve(text));
      }).on('error', reject);
    });
    agent.destroy();
    expect(ips).toContain((JSON.parse(body) as { ip: string }).ip);
  });

  it('refuses wrong credentials with RFC 1929 status 1 and closes; BIND and UDP ASSOCIATE get reply 0x07', async () => {
    const wrong = await exchange(socksPort, Buffer.concat([greeting(0, 2), userPass(user(), 'nope')]));
    expect(wrong.received.toString('hex')).toBe('05020101');
    expect(wrong.serverClosed).toBe(true);
    // No password method offered to a gateway with a token: no acceptable method.
    const noAuth = await exchange(socksPort, greeting(0));
    expect(noAuth.received.toString('hex')).toBe('05ff');
    for (const command of [2, 3]) {
      const r = await exchange(
        socksPort,
        Buffer.concat([
          greeting(2),
          userPass(user(), TOKEN),
          socksRequest(command, '127.0.0.1', target.port),
        ]),
      );
      expect(r.received.toString('hex')).toBe('0502' + '0100' + '05070001000000000000');
      expect(r.serverClosed).toBe(true);
    }
  });

  it('answers or drops malformed and abandoned SOCKS5 handshakes, holds no lease after, and keeps serving', async () => {
    const ok = Buffer.concat([greeting(2), userPass(user(), TOKEN)]);
    const cases: Record<string, { bytes: Buffer; closeAfterMs?: number; expect?: string }> = {
      'truncated greeting': { bytes: Buffer.from([5]), closeAfterMs: 200 },
      'greeting short of its methods': { bytes: Buffer.from([5, 3, 2]), closeAfterMs: 200 },
      'unknown methods': { bytes: greeting(0x80, 0x03, 0xfe), expect: '05ff' },
      'not SOCKS5': { bytes: Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), expect: '' },
      SOCKS4: { bytes: Buffer.from([4, 1, 0, 80, 127, 0, 0, 1, 0]), expect: '' },
      'truncated credentials': {
        bytes: Buffer.concat([greeting(2), Buffer.from([1, 200, 97])]),
        closeAfterMs: 200,
      },
      'bad auth version': {
        bytes: Buffer.concat([greeting(2), Buffer.from([9, 1, 97, 1, 97])]),
        expect: '0502',
      },
      'oversized username (255, not options)': {
        bytes: Buffer.concat([greeting(2), userPass('x'.repeat(255), TOKEN)]),
        expect: '05020101',
      },
      'oversized domain name (255 bytes, not a host name)': {
        bytes: Buffer.concat([ok, socksRequest(1, Buffer.alloc(255, 0xfe), 80)]),
        expect: '0502010005010001000000000000',
      },
      'empty domain name': {
        bytes: Buffer.concat([ok, Buffer.from([5, 1, 0, 3, 0, 0, 80])]),
        expect: '0502010005010001000000000000',
      },
      'unknown address type': {
        bytes: Buffer.concat([ok, Buffer.from([5, 1, 0, 9, 1, 2, 3, 4, 0, 80])]),
        expect: '0502010005080001000000000000',
      },
      BIND: {
        bytes: Buffer.concat([ok, socksRequest(2, '127.0.0.1', target.port)]),
        expect: '0502010005070001000000000000',
      },
      'unknown command': {
        bytes: Buffer.concat([ok, socksRequest(9, '127.0.0.1', target.port)]),
        expect: '0502010005070001000000000000',
      },
      'truncated request': { bytes: Buffer.concat([ok, Buffer.from([5, 1, 0, 1, 127])]), closeAfterMs: 200 },
      'leaves after the greeting': { bytes: greeting(2), closeAfterMs: 0 },
      // Closed by the gateway at its handshake bound (10 s), not left waiting forever.
      'stalls after the greeting': { bytes: greeting(2), expect: '0502' },
      'leaves right after its request': {
        bytes: Buffer.concat([ok, socksRequest(1, '127.0.0.1', target.port)]),
        closeAfterMs: 0,
      },
      'leaves an open tunnel': {
        bytes: Buffer.concat([
          ok,
          socksRequest(1, '127.0.0.1', target.port),
          Buffer.from('GET /ip HTTP/1.1\r\nHost: x\r\n\r\n'),
        ]),
        closeAfterMs: 1_000,
      },
      'random bytes': { bytes: Buffer.from(Array.from({ length: 600 }, (_, i) => (i * 7919 + 5) % 256)) },
    };
    const failures: string[] = [];
    await Promise.all(
      Object.entries(cases).flatMap(([name, c]) =>
        Array.from({ length: 5 }, async () => {
          const r = await exchange(
            socksPort,
            c.bytes,
            c.closeAfterMs !== undefined ? { closeAfterMs: c.closeAfterMs } : {},
          );
          if (c.expect !== undefined && (r.received.toString('hex') !== c.expect || !r.serverClosed))
            failures.push(
              `${name}: got ${r.received.toString('hex')} (closed by gateway: ${r.serverClosed}), expected ${c.expect}`,
            );
        }),
      ),
    );
    expect(failures).toEqual([]);
    await eventually('no lease held after the fuzz', async () => (await slotsHeld()) === 0 || undefined, {
      timeoutMs: 30_000,
    });
    expect(gateway.cli.proc.exitCode).toBeNull();
    const body = await curl([
      '--socks5-hostname',
      `${user()}:${TOKEN}@127.0.0.1:${socksPort}`,
      `${target.url}/ip`,
    ]);
    expect(ips).toContain((JSON.parse(body) as { ip: string }).ip);
  });

  it('carries the ClientHello unchanged through CONNECT and SOCKS5', async () => {
    const recorder = await startHelloRecorder();
    try {
      const authority = { host: '127.0.0.1', port: recorder.port };
      helloFrom(recorder.port);
      const direct = await recorder.next();
      helloFrom(recorder.port);
      const directAgain = await recorder.next();
      const viaHttp = await gatewayConnect(gateway.url, `127.0.0.1:${recorder.port}`, {
        credentials: `${user()}:${TOKEN}`,
      });
      expect(viaHttp.status).toBe(200);
      helloFrom(recorder.port, viaHttp.socket);
      const http = await recorder.next();
      helloFrom(recorder.port, await socksTunnel(socksPort, user(), authority));
      const socks = await recorder.next();
      // The method holds: two direct runs differ only where TLS is random by design.
      expect(maskRandomFields(directAgain).equals(maskRandomFields(direct))).toBe(true);
      expect(maskRandomFields(http).toString('hex')).toBe(maskRandomFields(direct).toString('hex'));
      expect(maskRandomFields(socks).toString('hex')).toBe(maskRandomFields(direct).toString('hex'));
      expect([http.length, socks.length]).toEqual([direct.length, direct.length]);

      // The very bytes of the direct ClientHello, sent through each listener: received byte for byte.
      const raw = await gatewayConnect(gateway.url, `127.0.0.1:${recorder.port}`, {
        credentials: `${user()}:${TOKEN}`,
      });
      raw.socket.write(direct);
      expect((await recorder.next()).toString('hex')).toBe(direct.toString('hex'));
      const rawSocks = await socksTunnel(socksPort, user(), authority);
      rawSocks.write(direct);
      expect((await recorder.next()).toString('hex')).toBe(direct.toString('hex'));
      rawSocks.destroy();
      raw.socket.destroy();
    } finally {
      recorder.close();
    }
  });

  it('curl --http2 negotiates HTTP/2 by ALPN with a local TLS target through both listeners', async () => {
    const tls = await selfSignedCert('127.0.0.1');
    const caFile = join(tmp, 'ca.pem');
    writeFileSync(caFile, tls.cert);
    const h2: Http2SecureServer = createSecureServer(
      { key: tls.key, cert: tls.cert, allowHTTP1: true },
      (req, res) => res.end(`HTTP/${req.httpVersion}`),
    );
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(h2.address() as AddressInfo).port}/`;
    try {
      const format = ['--http2', '--cacert', caFile, '-w', ' %{http_version}'];
      const viaHttp = await curl([
        ...format,
        '-x',
        gateway.url.replace('http://', `http://${user()}:${TOKEN}@`),
        url,
      ]);
      const viaSocks = await curl([
        ...format,
        '--socks5-hostname',
        `${user()}:${TOKEN}@127.0.0.1:${socksPort}`,
        url,
      ]);
      expect(viaHttp).toBe('HTTP/2.0 2');
      expect(viaSocks).toBe('HTTP/2.0 2');
    } finally {
      h2.close();
    }
  });

  it('listens on [::1] and reaches a [::1] target through a proxy at [::1] (egress allows ::1/128)', async () => {
    const proxy = await startForwardProxy({ host: '::1', port: 0, connectTimeoutMs: 3_000 });
    forwardProxies.push(proxy);
    await registerProxy(
      objects,
      namespace,
      'v6',
      { host: '::1', port: proxy.port },
      { attributes: { suite: namespace, group: 'v6' }, maxLeases: 100 },
    );
    const v6Target = createServer((socket) => {
      socket.on('error', () => undefined);
      socket.once('data', () =>
        socket.end(
          `HTTP/1.1 200 OK\r\nContent-Length: ${socket.remoteAddress!.length}\r\nConnection: close\r\n\r\n${socket.remoteAddress!}`,
        ),
      );
    });
    await new Promise<void>((r) => v6Target.listen(0, '::1', r));
    const targetPort = (v6Target.address() as AddressInfo).port;
    const v6 = startCli(
      [
        'gateway',
        '--gateway-addr',
        '[::1]:0',
        '--gateway-socks-addr',
        '[::1]:0',
        '--kubeconfig',
        inject('kubeconfigPath'),
        '--watch-namespaces',
        namespace,
        '--egress-allow-cidrs',
        '::1/128',
      ],
      { env: { DISCOVERY_TOKEN: TOKEN } },
    );
    try {
      const listening = await v6.waitFor(
        /"url":"http:\/\/\[::1\]:(\d+)","socks":"socks5:\/\/\[::1\]:(\d+)"[^\n]*gateway listening/,
        120_000,
      );
      const [httpPort, v6SocksPort] = [listening[1]!, listening[2]!];
      const v6User = `suite-${namespace}_group-v6`;
      const viaHttp = await eventually(
        'the IPv6 gateway to carry a CONNECT',
        async () => {
          const r = await curlThrough(
            `http://[::1]:${httpPort}`,
            v6User,
            TOKEN,
            `http://[::1]:${targetPort}/`,
            {
              tunnel: true,
            },
          );
          return r.status === 200 ? r : undefined;
        },
        { timeoutMs: 60_000, intervalMs: 250 },
      );
      // The proxy at ::1 dialled the target: the target saw ::1.
      expect(viaHttp.body).toBe('::1');
      const viaSocks = await curl([
        '--socks5-hostname',
        `${v6User}:${TOKEN}@[::1]:${v6SocksPort}`,
        `http://[::1]:${targetPort}/`,
      ]);
      expect(viaSocks).toBe('::1');
      // SOCKS5's IPv6 address type, raw.
      const tunnel = await socksTunnel(Number(v6SocksPort), v6User, { host: '::1', port: targetPort }, '::1');
      const answer = await new Promise<string>((resolve) => {
        let text = '';
        tunnel.on('data', (d: Buffer) => (text += d.toString('latin1')));
        tunnel.once('close', () => resolve(text));
        tunnel.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      });
      expect(answer).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\n::1$/);
      // Only what is allowed: this gateway allows ::1/128, not 127.0.0.0/8.
      const refused = await curlThrough(`http://[::1]:${httpPort}`, v6User, TOKEN, `${target.url}/ip`, {
        tunnel: true,
      });
      expect(refused.status).toBe(403);
    } finally {
      await v6.stop();
      v6Target.close();
    }
  });
});
