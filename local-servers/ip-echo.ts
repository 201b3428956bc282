/**
 * An IP-echo target on the loopback, as api.ipify.org or ifconfig.me are on
 * the internet: every GET answers `{"ip":"<the caller's address>"}`. Through
 * a `local` proxy the caller is the proxy's own address (its stand-in egress
 * IP), so `dev` serves one to show which proxy carried a request, and tests
 * use it (with `egressIpThrough`) to tell proxies apart: rotation, sticky
 * sessions, bans.
 *
 * A factory, no shared state: each call is its own server.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface IpEchoServer {
  readonly host: string;
  readonly port: number;
  /** `http://host:port/`: what to fetch through a proxy. */
  readonly url: string;
  close(): Promise<void>;
}

export interface IpEchoOptions {
  /** Default 127.0.0.1: the echo is for loopback proxies. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
}

/** The caller's address as the echo reports it: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) shown as a.b.c.d. */
export function callerAddress(socket: Socket): string {
  const address = socket.remoteAddress ?? '';
  return address.startsWith('::ffff:') ? address.slice('::ffff:'.length) : address;
}

export async function startIpEcho(options: IpEchoOptions = {}): Promise<IpEchoServer> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('GET only\n');
      return;
    }
    const body = `${JSON.stringify({ ip: callerAddress(req.socket) })}\n`;
    res
      .writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        // Every answer is about one connection: never cache it.
        'cache-control': 'no-store',
      })
      .end(req.method === 'HEAD' ? undefined : body);
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: options.host ?? '127.0.0.1', port: options.port ?? 0, exclusive: true }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const hostInUrl = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    host: address.address,
    port: address.port,
    url: `http://${hostInUrl}:${address.port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface EgressIpOptions {
  /**
   * `absolute`: a plain-HTTP request in absolute form (`curl -x`);
   * `connect`: a CONNECT tunnel, then the request inside it (`curl -p -x`).
   */
  via?: 'absolute' | 'connect';
  timeoutMs?: number;
}

/**
 * The address `echoUrl` (an IP-echo target) saw when fetched through the
 * HTTP proxy at proxyHost:proxyPort. Throws with what went wrong (the
 * proxy's status, an unparsable answer, the socket error, a timeout), so a
 * caller can print the failure instead of an address.
 */
export async function egressIpThrough(
  proxyHost: string,
  proxyPort: number,
  echoUrl: string,
  options: EgressIpOptions = {},
): Promise<string> {
  const via = options.via ?? 'absolute';
  const timeoutMs = options.timeoutMs ?? 10_000;
  const target = new URL(echoUrl);
  if (target.protocol !== 'http:') throw new Error(`echo URL must be http://, got ${echoUrl}`);
  const targetPort = Number(target.port || 80);
  const path = target.pathname + target.search;
  const signal = AbortSignal.timeout(timeoutMs);

  const body = await new Promise<string>((resolve, reject) => {
    const fail = (what: string) => (err: Error) =>
      reject(new Error(`${what} via ${proxyHost}:${proxyPort}: ${err.message}`));
    const read = (res: IncomingMessage, what: string) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () =>
        res.statusCode === 200
          ? resolve(text)
          : reject(new Error(`${what} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`)),
      );
      res.on('error', fail(what));
    };
    if (via === 'absolute') {
      const req = httpRequest({
        host: proxyHost,
        port: proxyPort,
        path: target.href,
        headers: { host: target.host },
        agent: false,
        signal,
      });
      req.on('response', (res) => read(res, `GET ${target.href}`));
      req.on('error', fail(`GET ${target.href}`));
      req.end();
      return;
    }
    const authority = `${target.hostname}:${targetPort}`;
    const tunnel = httpRequest({
      host: proxyHost,
      port: proxyPort,
      method: 'CONNECT',
      path: authority,
      headers: { host: authority },
      agent: false,
      signal,
    });
    tunnel.on('error', fail(`CONNECT ${authority}`));
    tunnel.on('response', (res) => {
      // A proxy that refuses the tunnel answers with an ordinary response.
      res.resume();
      reject(new Error(`CONNECT ${authority} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`));
    });
    tunnel.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        reject(new Error(`CONNECT ${authority} via ${proxyHost}:${proxyPort}: HTTP ${res.statusCode}`));
        return;
      }
      const req = httpRequest({
        createConnection: () => socket,
        path,
        headers: { host: target.host, connection: 'close' },
        signal,
      });
      req.on('response', (inner) => read(inner, `GET ${target.href} in the tunnel`));
      req.on('error', fail(`GET ${target.href} in the tunnel`));
      req.on('close', () => socket.destroy());
      req.end();
    });
    tunnel.end();
  });

  let ip: unknown;
  try {
    ip = (JSON.parse(body) as { ip?: unknown }).ip;
  } catch {
    ip = undefined;
  }
  if (typeof ip !== 'string' || ip === '')
    throw new Error(`${echoUrl} via ${proxyHost}:${proxyPort} answered no "ip": ${body.slice(0, 80)}`);
  return ip;
}
