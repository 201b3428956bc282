/**
 * An IP-echo target on the loopback, as api.ipify.org or ifconfig.me are on
 * the internet: every GET answers `{"ip":"<the caller's address>"}`. Through
 * a `local` proxy the caller is the proxy's own address (its stand-in egress
 * IP), so `dev` serves one to show which proxy carried a request, and tests
 * use it (with `egressIpThrough`, cli/egress-ip.ts) to tell proxies apart:
 * rotation, sticky sessions, bans.
 *
 * A factory, no shared state: each call is its own server.
 */
import { createServer, type Server } from 'node:http';
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
