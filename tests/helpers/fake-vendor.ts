/**
 * A fake proxy vendor's super-proxy on the loopback: one endpoint that hands
 * out a different exit address per session named in the credentials, as
 * Bright Data, Oxylabs, Decodo, IPRoyal and SOAX do.
 *
 * - CONNECT and absolute-form HTTP; `Proxy-Authorization: Basic` required.
 * - The credentials are read with the same template grammar the provider
 *   renders with (parseCredentials, given the account): not the account, or
 *   unreadable, is 407 with `Proxy-Authenticate: Basic realm="fake-vendor"`;
 *   the account with bad options (an unsupported parameter, a session id
 *   with forbidden characters or length, a country that is not two letters,
 *   a lifetime over `maxLifetimeSeconds`) is 400 with an
 *   `X-Error-Description` header, like Oxylabs.
 * - Each session egresses from its own loopback address (`localAddress` on
 *   the outgoing socket; any 127/8 address works on Linux without setup),
 *   kept until the session's lifetime has passed since its first use; then
 *   the same session id gets a new address. A request without a session
 *   gets a fresh address each time (rotating).
 * - Only loopback targets are dialled (403 otherwise): nothing leaves the machine.
 */
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { basicCredentials, type ProxyCredentials } from '../../credentials/proxy-credentials.js';
import { endToEndHeaders } from '../../forwarding/headers.js';
import { isLoopbackHost } from '../../providers/local/forward-proxy.js';
import { formatIPv4, parseLoopbackCidr } from '../../providers/local/config.js';
import { parseCredentials, type VendorTemplates } from '../../providers/vendor/template.js';

export const FAKE_VENDOR_REALM = 'fake-vendor';
/** The default block exit addresses come from. */
export const FAKE_VENDOR_RANGE = '127.91.0.0/16';

export interface FakeVendorOptions {
  templates: VendorTemplates;
  params?: Record<string, string>;
  /** The only account accepted. */
  account: ProxyCredentials;
  /** A session's lifetime when the credentials name none (Bright Data style). */
  lifetimeSeconds: number;
  /** Longer lifetimes in the credentials are refused with a 400. Default: no bound. */
  maxLifetimeSeconds?: number;
  /** Where exit addresses come from: a loopback CIDR (default FAKE_VENDOR_RANGE) or a function giving the next one. */
  egressAddresses?: string | (() => string);
  /** Listen address; default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
}

export interface FakeVendorRequest {
  kind: 'connect' | 'http';
  session?: string;
  country?: string;
  lifetimeSeconds?: number;
  /** `host:port` for CONNECT, the absolute URL for HTTP. */
  target: string;
  status: number;
  /** The exit address the request left from, when it was forwarded. */
  exitAddress?: string;
}

export interface FakeVendorSession {
  id: string;
  address: string;
  /** When the current address was first used (ms since the epoch). */
  firstUsedAt: number;
  lifetimeSeconds: number;
  /** Addresses this session id has had before the current one, oldest first. */
  previousAddresses: string[];
  requests: number;
}

export interface FakeVendor {
  readonly host: string;
  readonly port: number;
  requests(): FakeVendorRequest[];
  sessions(): FakeVendorSession[];
  close(): Promise<void>;
}

/** Successive addresses of a loopback block, from a random start, skipping the block's ends and 127.0.0.1. */
function addressCycle(cidr: string): () => string {
  const range = parseLoopbackCidr(cidr);
  if (typeof range === 'string') throw new Error(`fake vendor: ${range}`);
  const count = range.size - 2;
  let next = Math.floor(Math.random() * count);
  return () => {
    for (;;) {
      const address = formatIPv4(range.base + 1 + (next++ % count));
      if (address !== '127.0.0.1') return address;
    }
  };
}

type Verdict =
  | { ok: true; exitAddress: string; session?: string; country?: string; lifetimeSeconds?: number }
  | { ok: false; status: 407 | 400; description: string; session?: string; country?: string };

export async function startFakeVendor(options: FakeVendorOptions): Promise<FakeVendor> {
  const params = options.params ?? {};
  const nextAddress =
    typeof options.egressAddresses === 'function'
      ? options.egressAddresses
      : addressCycle(options.egressAddresses ?? FAKE_VENDOR_RANGE);
  const log: FakeVendorRequest[] = [];
  const sessions = new Map<string, FakeVendorSession>();
  const sockets = new Set<Socket>();

  /** The request's exit address, or why it is refused. */
  const judge = (header: string | undefined): Verdict => {
    const sent = basicCredentials(header);
    if (!sent) return { ok: false, status: 407, description: 'proxy credentials required' };
    const parsed = parseCredentials(options.templates, params, sent, options.account);
    if ('error' in parsed)
      return {
        ok: false,
        status: parsed.kind === 'credentials' ? 407 : 400,
        description:
          parsed.kind === 'credentials' ? 'Access denied: user authentication failed' : parsed.error,
      };
    const seen = { session: parsed.session, country: parsed.country };
    const lifetime = parsed.lifetimeSeconds ?? options.lifetimeSeconds;
    if (lifetime < 1)
      return {
        ok: false,
        status: 400,
        description: 'Unsupported parameters: session lifetime below 1 s',
        ...seen,
      };
    if (options.maxLifetimeSeconds !== undefined && lifetime > options.maxLifetimeSeconds)
      return {
        ok: false,
        status: 400,
        description: `Unsupported parameters: session lifetime over ${options.maxLifetimeSeconds} s`,
        ...seen,
      };
    const base = { ok: true as const, ...seen, lifetimeSeconds: lifetime };
    if (parsed.session === undefined) return { ...base, exitAddress: nextAddress() };
    const now = Date.now();
    let s = sessions.get(parsed.session);
    if (!s) {
      s = {
        id: parsed.session,
        address: nextAddress(),
        firstUsedAt: now,
        lifetimeSeconds: lifetime,
        previousAddresses: [],
        requests: 0,
      };
      sessions.set(s.id, s);
    } else if (now - s.firstUsedAt >= s.lifetimeSeconds * 1_000) {
      s.previousAddresses.push(s.address);
      s.address = nextAddress();
      s.firstUsedAt = now;
      s.lifetimeSeconds = lifetime;
    }
    s.requests += 1;
    return { ...base, exitAddress: s.address };
  };

  const record = (entry: FakeVendorRequest) => log.push(entry);
  const refusalHeaders = (v: Extract<Verdict, { ok: false }>): Record<string, string> =>
    v.status === 407
      ? { 'proxy-authenticate': `Basic realm="${FAKE_VENDOR_REALM}"`, 'x-error-description': v.description }
      : { 'x-error-description': v.description };
  const fields = (v: Verdict) => ({
    ...(v.session === undefined ? {} : { session: v.session }),
    ...(v.country === undefined ? {} : { country: v.country }),
    ...(v.ok && v.lifetimeSeconds !== undefined ? { lifetimeSeconds: v.lifetimeSeconds } : {}),
  });

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const target = req.url ?? '';
    const verdict = judge(req.headers['proxy-authorization']);
    if (!verdict.ok) {
      const body = `${verdict.description}\n`;
      res.writeHead(verdict.status, { 'content-type': 'text/plain', ...refusalHeaders(verdict) }).end(body);
      record({ kind: 'http', target, status: verdict.status, ...fields(verdict) });
      return;
    }
    let url: URL;
    try {
      url = new URL(target);
      if (url.protocol !== 'http:') throw new Error('not http');
    } catch {
      res.writeHead(400, { 'x-error-description': 'absolute-form http:// URL required' }).end();
      record({ kind: 'http', target, status: 400, ...fields(verdict) });
      return;
    }
    if (!isLoopbackHost(url.hostname)) {
      res.writeHead(403, { 'x-error-description': 'the fake vendor reaches the loopback only' }).end();
      record({ kind: 'http', target, status: 403, ...fields(verdict) });
      return;
    }
    const upstream = httpRequest(
      {
        localAddress: verdict.exitAddress,
        family: 4,
        host: url.hostname.replace(/^\[|\]$/g, ''),
        port: url.port || 80,
        method: req.method,
        path: url.pathname + url.search,
        headers: endToEndHeaders(req.headers),
        timeout: 10_000,
      },
      (upstreamRes) => {
        const status = upstreamRes.statusCode ?? 502;
        record({ kind: 'http', target, status, exitAddress: verdict.exitAddress, ...fields(verdict) });
        res.writeHead(status, endToEndHeaders(upstreamRes.headers));
        upstreamRes.pipe(res);
      },
    );
    upstream.on('timeout', () => upstream.destroy(new Error('upstream timeout')));
    upstream.on('error', () => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      record({ kind: 'http', target, status: 502, ...fields(verdict) });
      res.writeHead(502, { 'x-error-description': 'exit connection failed' }).end();
    });
    req.pipe(upstream);
  });

  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    client.on('error', () => client.destroy());
    const target = req.url ?? '';
    const answer = (status: number, reason: string, headers: Record<string, string>) => {
      const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
      client.end(`HTTP/1.1 ${status} ${reason}\r\n${lines.join('')}content-length: 0\r\n\r\n`);
    };
    const verdict = judge(req.headers['proxy-authorization']);
    if (!verdict.ok) {
      answer(
        verdict.status,
        verdict.status === 407 ? 'Proxy Authentication Required' : 'Bad Request',
        refusalHeaders(verdict),
      );
      record({ kind: 'connect', target, status: verdict.status, ...fields(verdict) });
      return;
    }
    const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(target);
    if (!m || !isLoopbackHost(m[1]!)) {
      const status = m ? 403 : 400;
      answer(status, m ? 'Forbidden' : 'Bad Request', {
        'x-error-description': m ? 'the fake vendor reaches the loopback only' : 'host:port expected',
      });
      record({ kind: 'connect', target, status, ...fields(verdict) });
      return;
    }
    const upstream = connect({
      localAddress: verdict.exitAddress,
      family: 4,
      host: m[1]!.replace(/^\[|\]$/g, ''),
      port: Number(m[2]),
      timeout: 10_000,
    });
    let established = false;
    upstream.once('connect', () => {
      established = true;
      upstream.setTimeout(0);
      record({ kind: 'connect', target, status: 200, exitAddress: verdict.exitAddress, ...fields(verdict) });
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
    upstream.once('error', () => {
      if (!established && client.writable) {
        record({ kind: 'connect', target, status: 502, ...fields(verdict) });
        answer(502, 'Bad Gateway', { 'x-error-description': 'exit connection failed' });
      } else client.destroy();
    });
    client.once('close', () => upstream.destroy());
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
  return {
    host: address.address,
    port: address.port,
    requests: () => log.map((r) => ({ ...r })),
    sessions: () =>
      [...sessions.values()].map((s) => ({ ...s, previousAddresses: [...s.previousAddresses] })),
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
