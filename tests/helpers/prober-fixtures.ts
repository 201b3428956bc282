/**
 * Real network fixtures for the prober tests, all on the loopback: a probe
 * target over HTTP or HTTPS (self-signed certificate made per run) whose
 * answer can be switched, misbehaving "proxies" that accept TCP and then do
 * the wrong thing, and a TCP relay that can cut a client off from a server
 * (Temporal unreachable) and let it back. Also a manual clock and a seeded
 * random source for driving the scheduler and the prober without real time.
 */
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer as createNetServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { generate } from 'selfsigned';
import type { Clock, TimerHandle } from '../../prober/clock.js';

export interface SeenRequest {
  method: string;
  url: string;
  /** Header names and values exactly as received, in order. */
  rawHeaders: string[];
}

export interface ProbeTarget {
  url: string;
  port: number;
  /** The status every request to / gets; /redirect always answers 302 to /elsewhere. */
  status: number;
  requests: SeenRequest[];
  close(): Promise<void>;
}

export interface SelfSignedCert {
  key: string;
  cert: string;
}

/** A certificate for `ip` (127.0.0.1 by default) that is its own CA (a trust anchor when passed as `ca`). */
export async function selfSignedCert(ip = '127.0.0.1'): Promise<SelfSignedCert> {
  const pems = await generate([{ name: 'commonName', value: ip }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true },
      { name: 'keyUsage', digitalSignature: true, keyCertSign: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: [{ type: 7, ip }] },
    ],
  });
  return { key: pems.private, cert: pems.cert };
}

export async function startProbeTarget(
  options: { tls?: SelfSignedCert; status?: number; host?: string } = {},
): Promise<ProbeTarget> {
  const host = options.host ?? '127.0.0.1';
  const requests: SeenRequest[] = [];
  const state = { status: options.status ?? 204 };
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', rawHeaders: [...req.rawHeaders] });
    if (req.url === '/redirect') {
      res.writeHead(302, { location: '/elsewhere', 'content-length': 0 }).end();
      return;
    }
    res.writeHead(state.status, { 'content-length': 0 }).end();
  };
  const server: Server = options.tls
    ? createHttpsServer({ key: options.tls.key, cert: options.tls.cert }, handler)
    : createHttpServer(handler);
  server.keepAliveTimeout = 1_000;
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${options.tls ? 'https' : 'http'}://${host}:${port}/`,
    port,
    get status() {
      return state.status;
    },
    set status(value: number) {
      state.status = value;
    },
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type FaultMode =
  /** accepts and closes at once */
  | 'close'
  /** answers anything with bytes that are not HTTP */
  | 'garbage'
  /** answers every request with this status line and closes */
  | 'status-403'
  | 'status-407'
  | 'status-502';

export interface FaultProxy {
  host: string;
  port: number;
  /** TCP connections accepted so far. */
  connections: number;
  close(): Promise<void>;
}

/** A "proxy" that accepts TCP and then misbehaves in one way. */
export async function startFaultProxy(mode: FaultMode, host = '127.0.0.1'): Promise<FaultProxy> {
  const sockets = new Set<Socket>();
  let connections = 0;
  const server = createNetServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    if (mode === 'close') {
      socket.destroy();
      return;
    }
    socket.once('data', () => {
      if (mode === 'garbage') {
        socket.end('\x16\x03\x01\x00\x2a this is not HTTP at all\r\n\r\n');
        return;
      }
      const code = Number(mode.slice('status-'.length));
      const text =
        code === 403 ? 'Forbidden' : code === 407 ? 'Proxy Authentication Required' : 'Bad Gateway';
      const extra = code === 407 ? 'Proxy-Authenticate: Basic realm="proxy"\r\n' : '';
      socket.end(`HTTP/1.1 ${code} ${text}\r\n${extra}Content-Length: 0\r\n\r\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    host,
    port,
    get connections() {
      return connections;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface TcpRelay {
  address: string;
  /** Drops every connection and refuses new ones until `restore`. */
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

/** A TCP relay to `host:port` that a test can cut, as a network outage would. */
export async function startTcpRelay(target: string): Promise<TcpRelay> {
  const [host, port] = [
    target.slice(0, target.lastIndexOf(':')),
    Number(target.slice(target.lastIndexOf(':') + 1)),
  ];
  const sockets = new Set<Socket>();
  let cut = false;
  const server = createNetServer((client) => {
    if (cut) {
      client.destroy();
      return;
    }
    const upstream = connect({ host, port });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    address,
    cut() {
      cut = true;
      for (const s of sockets) s.destroy();
    },
    restore() {
      cut = false;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A clock that moves only when told, firing due timers in time order. */
export class ManualClock implements Clock {
  private t = 0;
  private timers: Array<{ at: number; fn: () => void; live: boolean }> = [];
  /** The most timers ever pending at once: the scheduler must hold one, not one per key. */
  maxPending = 0;

  now(): number {
    return this.t;
  }

  setTimer(fn: () => void, delayMs: number): TimerHandle {
    const timer = { at: this.t + Math.max(0, delayMs), fn, live: true };
    this.timers.push(timer);
    this.maxPending = Math.max(this.maxPending, this.pendingTimers());
    return { cancel: () => (timer.live = false) };
  }

  pendingTimers(): number {
    return this.timers.filter((t) => t.live).length;
  }

  advanceTo(target: number): void {
    for (;;) {
      const due = this.timers.filter((t) => t.live && t.at <= target).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.t = due.at;
      due.live = false;
      due.fn();
    }
    this.t = target;
    this.timers = this.timers.filter((t) => t.live);
  }
}

/** A deterministic uniform generator (mulberry32). */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
