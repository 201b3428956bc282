import { createServer, request, type Server } from 'node:http';
import { connect, createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { connect as tlsConnect } from 'node:tls';

/** A plain HTTP server on the loopback that answers every request 200 with `body`. */
export async function startTarget(
  body = 'hello from the target',
): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer((_req, res) =>
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(body) }).end(body),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return { server, port, close: () => new Promise((r) => server.close(() => r())) };
}

/**
 * Opens a CONNECT tunnel through the proxy to 127.0.0.1:targetPort and sends
 * a GET through it. Resolves with the target's response body.
 */
export function getThroughConnect(
  proxyHost: string,
  proxyPort: number,
  targetPort: number,
  timeoutMs = 5_000,
  targetHost = '127.0.0.1',
  /** Sent as the CONNECT's Proxy-Authorization. */
  proxyAuthorization?: string,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: proxyHost, port: proxyPort });
    const timer = setTimeout(() => socket.destroy(new Error('timeout')), timeoutMs);
    let buffer = '';
    let tunnelled = false;
    socket.setEncoding('utf8');
    socket.once('connect', () =>
      socket.write(
        `CONNECT ${targetHost}:${targetPort} HTTP/1.1\r\nHost: ${targetHost}:${targetPort}\r\n` +
          (proxyAuthorization ? `Proxy-Authorization: ${proxyAuthorization}\r\n` : '') +
          '\r\n',
      ),
    );
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      if (!tunnelled) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        const statusLine = buffer.slice(0, buffer.indexOf('\r\n'));
        if (!/^HTTP\/1\.[01] 200/.test(statusLine)) {
          clearTimeout(timer);
          socket.destroy();
          reject(new Error(`CONNECT refused: ${statusLine}`));
          return;
        }
        tunnelled = true;
        buffer = buffer.slice(end + 4);
        socket.write(`GET / HTTP/1.1\r\nHost: ${targetHost}:${targetPort}\r\nConnection: close\r\n\r\n`);
      }
    });
    socket.once('end', () => {
      clearTimeout(timer);
      const body = buffer.slice(buffer.indexOf('\r\n\r\n') + 4);
      resolve(body);
    });
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** An absolute-form plain HTTP GET through the proxy. */
export function getThroughProxy(
  proxyHost: string,
  proxyPort: number,
  targetPort: number,
  /** Sent as Proxy-Authorization. */
  proxyAuthorization?: string,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxyHost,
        port: proxyPort,
        path: `http://127.0.0.1:${targetPort}/`,
        headers: {
          host: `127.0.0.1:${targetPort}`,
          ...(proxyAuthorization ? { 'proxy-authorization': proxyAuthorization } : {}),
        },
        timeout: 5_000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Both ends of one relayed connection. */
interface RelayedPair {
  client: Socket;
  upstream: Socket;
}

/** Unpiped and paused, a connection's bytes wait in the kernel until it flows again. */
function hold({ client, upstream }: RelayedPair): void {
  client.unpipe(upstream);
  upstream.unpipe(client);
  client.pause();
  upstream.pause();
}

function flow({ client, upstream }: RelayedPair): void {
  client.pipe(upstream);
  upstream.pipe(client);
}

/**
 * The first port of the kernel's ephemeral range. A port below it is never
 * handed out by `listen(0)` or an outgoing connect's autobind, so one a test
 * closes and binds again cannot be taken meanwhile by another process.
 */
function ephemeralRangeStart(): number {
  try {
    const first = Number(
      readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0],
    );
    return Number.isInteger(first) && first > 2_048 ? first : 32_768;
  } catch {
    return 32_768;
  }
}

/** A random port in [1024, ephemeral start): try it, and another on EADDRINUSE. */
export function portBelowEphemeralRange(): number {
  const high = ephemeralRangeStart();
  const low = Math.max(1_024, high - 16_384);
  return low + Math.floor(Math.random() * (high - low));
}

/** Listens on 127.0.0.1:`port`, or (port 0) on a free port below the ephemeral range. */
async function listenReopenable(server: TcpServer, port: number): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const candidate = port || portBelowEphemeralRange();
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(candidate, '127.0.0.1', () => {
          server.off('error', reject);
          resolve();
        });
      });
      return;
    } catch (error) {
      if (port !== 0 || (error as { code?: string }).code !== 'EADDRINUSE' || attempt >= 50) throw error;
    }
  }
}

/**
 * A TCP relay on the loopback in front of a server: `cut` drops every
 * connection and refuses new ones (the port is closed), `open` listens again
 * on the same port, `stall` holds every connection, open or new, until
 * released (a stuck backend, with nothing faked above the socket). The port
 * lies below the ephemeral range, so no other process's `listen(0)` or
 * outgoing connection takes it while the relay is cut.
 */
export class TcpRelay {
  private server: TcpServer | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly pairs = new Set<RelayedPair>();
  /** The connections `stall` holds; undefined while they flow. */
  private held: Set<RelayedPair> | undefined;
  port = 0;
  /** Connections accepted since the relay was created. */
  accepted = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  /** Client connections open through the relay now. */
  get live(): number {
    return this.pairs.size;
  }

  async open(): Promise<void> {
    const server = createTcpServer((client) => {
      this.accepted += 1;
      const upstream = connect(this.target.port, this.target.host);
      const pair = { client, upstream };
      this.pairs.add(pair);
      client.on('close', () => this.pairs.delete(pair));
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      // A new socket does not read until piped: a held one's first bytes (a
      // TLS ClientHello) wait for the release.
      if (this.held) this.held.add(pair);
      else flow(pair);
    });
    await listenReopenable(server, this.port);
    this.port = (server.address() as { port: number }).port;
    this.server = server;
  }

  /** Holds every connection, open and new, forwarding nothing either way; returns the release. */
  stall(): () => void {
    if (this.held) throw new Error('TcpRelay: already stalled');
    const held = new Set(this.pairs);
    for (const pair of held) hold(pair);
    this.held = held;
    return () => {
      if (this.held !== held) return;
      this.held = undefined;
      for (const pair of held) if (!pair.client.destroyed) flow(pair);
    };
  }

  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** CONNECT through the proxy (with `proxyAuthorization`, when given), then TLS to the target and a GET: both statuses. */
export function connectThrough(
  proxy: { host: string; port: number },
  target: URL,
  ca: string,
  proxyAuthorization?: string,
): Promise<{ connect: number; get: number }> {
  return new Promise((resolve, reject) => {
    const socket = connect(proxy.port, proxy.host);
    const timer = setTimeout(() => socket.destroy(new Error('CONNECT timed out')), 10_000);
    socket.once('error', (e: Error) => {
      clearTimeout(timer);
      reject(e);
    });
    socket.once('connect', () =>
      socket.write(
        `CONNECT ${target.host} HTTP/1.1\r\nHost: ${target.host}\r\n` +
          (proxyAuthorization ? `Proxy-Authorization: ${proxyAuthorization}\r\n` : '') +
          '\r\n',
      ),
    );
    let head = '';
    const onData = (d: Buffer) => {
      head += d.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      const connectStatus = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0);
      if (connectStatus !== 200) {
        clearTimeout(timer);
        socket.destroy();
        resolve({ connect: connectStatus, get: 0 });
        return;
      }
      const tls = tlsConnect({ socket, ca, host: target.hostname });
      tls.once('secureConnect', () =>
        tls.write(`GET / HTTP/1.1\r\nHost: ${target.host}\r\nConnection: close\r\n\r\n`),
      );
      let body = '';
      tls.on('data', (c: Buffer) => (body += c.toString('latin1')));
      tls.once('error', (e: Error) => {
        clearTimeout(timer);
        reject(e);
      });
      tls.once('end', () => {
        clearTimeout(timer);
        resolve({ connect: connectStatus, get: Number(/^HTTP\/1\.[01] (\d{3})/.exec(body)?.[1] ?? 0) });
      });
    };
    socket.on('data', onData);
  });
}
