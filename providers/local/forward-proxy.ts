/**
 * A small real HTTP forward proxy: CONNECT tunnels and absolute-form plain
 * HTTP forwarding, the two things crawlers and the health prober use. The
 * `local` provider runs one per instance on its own loopback address, and
 * tests use it (and its `refuse-egress` behaviour) as a proxy that accepts
 * TCP but cannot egress.
 *
 * With `credentialsSha256` it asks for credentials as Squid's
 * basic_ncsa_auth does (407 and `Proxy-Authenticate: Basic`).
 *
 * It never adds Via/X-Forwarded-For (like the Squid config's `via off`,
 * `forwarded_for off`) and only dials loopback targets unless
 * `allowNonLoopback` is set: everything in this workplace must stay on
 * 127.0.0.0/8. With `allowNonLoopback`, a target off the loopback is
 * resolved here and judged by the egress policy (private, link-local and
 * reserved ranges refused, ports 80 and 443, unless the policy says
 * otherwise), and the address judged is the one dialled.
 *
 * Outgoing connections to loopback targets leave FROM the proxy's own listen
 * address (`localAddress`), so a target sees 127.77.x.y rather than
 * 127.0.0.1: that address is the local stand-in for a VM's egress IP, and
 * what tests and the dev IP-echo target use to tell proxies apart.
 */
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect, isIP, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import {
  createDestinationResolver,
  DestinationRefusedError,
  resolveAndCheck,
  type DestinationResolver,
} from '../../forwarding/destination.js';
import {
  createEgressPolicy,
  DEFAULT_EGRESS_POLICY,
  type EgressPolicy,
} from '../../forwarding/egress-policy.js';
import { endToEndHeaders } from '../../forwarding/headers.js';
import { authorizationMatches, PROXY_REALM } from '../../credentials/proxy-credentials.js';

export type ForwardProxyBehaviour =
  /** forwards traffic */
  | 'forward'
  /** accepts TCP and HTTP, answers every request 502: a proxy with no egress */
  | 'refuse-egress'
  /** accepts TCP and never answers */
  | 'hang';

export interface ForwardProxyOptions {
  host: string;
  port: number;
  behaviour?: ForwardProxyBehaviour;
  /** Dial targets outside 127.0.0.0/8 and ::1, as the egress policy allows. Off by default. */
  allowNonLoopback?: boolean;
  /** What `allowNonLoopback` may reach (default: the egress policy's defaults). */
  egress?: EgressPolicy;
  /** How target names are resolved for the policy (default: the system's resolver). */
  resolver?: DestinationResolver;
  /** Upper bound for dialling a target. */
  connectTimeoutMs?: number;
  /**
   * `credentialsDigest` of the only credentials accepted: any request
   * without them (in Proxy-Authorization: Basic) is answered 407. Unset:
   * no credentials asked for (tests' plain proxies).
   */
  credentialsSha256?: string;
}

export interface ForwardProxy {
  readonly host: string;
  readonly port: number;
  behaviour: ForwardProxyBehaviour;
  close(): Promise<void>;
}

/** A CONNECT host as the WHATWG URL parser normalises it; as written when it cannot. */
function urlHostname(host: string): string {
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return host;
  }
}

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1';
  return false;
}

/**
 * Where a connection to `targetHost` leaves from: the proxy's own listen
 * address when that is a specific loopback address and the target is a
 * loopback target of the same family. Otherwise undefined (the kernel picks):
 * an unspecified listen address (0.0.0.0, ::) names no one source; a loopback
 * source cannot reach a target off the machine (only dialled with
 * `allowNonLoopback`); an IPv4 source cannot reach ::1 and vice versa.
 * `family` steers the lookup of `localhost` to the source's family.
 */
export function egressSource(
  listenHost: string,
  targetHost: string,
): { localAddress: string; family: 4 | 6 } | undefined {
  const listen = listenHost.replace(/^\[|\]$/g, '');
  const family = isIP(listen);
  if ((family !== 4 && family !== 6) || !isLoopbackHost(listen)) return undefined;
  const target = targetHost.replace(/^\[|\]$/g, '');
  if (!isLoopbackHost(target)) return undefined;
  if (target !== 'localhost' && isIP(target) !== family) return undefined;
  return { localAddress: listen, family };
}

export async function startForwardProxy(options: ForwardProxyOptions): Promise<ForwardProxy> {
  const connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
  const sockets = new Set<Socket>();
  const state = { behaviour: options.behaviour ?? 'forward' };

  const policy = options.egress ?? createEgressPolicy(DEFAULT_EGRESS_POLICY);
  const resolver = options.resolver ?? createDestinationResolver(undefined);
  /**
   * Where to dial for a target: the loopback as named (the local provider's
   * own world), anything else only with allowNonLoopback and as the egress
   * policy allows, at the address it judged. A refusal is the status to
   * answer and why.
   */
  const route = async (
    host: string,
    port: number,
  ): Promise<{ dial: string } | { status: 403 | 502; reason: string }> => {
    if (isLoopbackHost(host)) return { dial: host.replace(/^\[|\]$/g, '') };
    if (options.allowNonLoopback !== true) return { status: 403, reason: 'target not allowed' };
    try {
      return { dial: (await resolveAndCheck(policy, resolver, host, port)).address };
    } catch (error) {
      if (!(error instanceof DestinationRefusedError)) throw error;
      return { status: error.kind === 'forbidden' ? 403 : 502, reason: error.message };
    }
  };
  const required = options.credentialsSha256;
  /** True when the request may go on; false when it lacks the credentials (and was answered 407). */
  const authorised = (req: IncomingMessage): boolean =>
    required === undefined || authorizationMatches(req.headers['proxy-authorization'], required);
  const PROXY_AUTHENTICATE = `Basic realm="${PROXY_REALM}"`;
  // Set once listening: the address actually bound (what `host` resolved to).
  let listenAddress = options.host;

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    forwardRequest(req, res).catch(() => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('upstream error\n');
      else res.destroy();
    });
  });

  const forwardRequest = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (state.behaviour === 'hang') return;
    if (state.behaviour === 'refuse-egress') {
      res.writeHead(502, { 'content-type': 'text/plain' }).end('no egress\n');
      return;
    }
    if (!authorised(req)) {
      res
        .writeHead(407, { 'content-type': 'text/plain', 'proxy-authenticate': PROXY_AUTHENTICATE })
        .end('proxy credentials required\n');
      return;
    }
    let target: URL;
    try {
      target = new URL(req.url ?? '');
      if (target.protocol !== 'http:') throw new Error('not http');
    } catch {
      res.writeHead(400, { 'content-type': 'text/plain' }).end('absolute-form http:// URL required\n');
      return;
    }
    const routed = await route(target.hostname, Number(target.port || 80));
    if ('status' in routed) {
      res.writeHead(routed.status, { 'content-type': 'text/plain' }).end(`${routed.reason}\n`);
      return;
    }
    const headers = endToEndHeaders(req.headers);
    const upstream = httpRequest(
      {
        ...egressSource(listenAddress, target.hostname),
        host: routed.dial,
        port: target.port || 80,
        method: req.method,
        path: target.pathname + target.search,
        headers,
        timeout: connectTimeoutMs,
      },
      (upstreamRes) => {
        res.writeHead(upstreamRes.statusCode ?? 502, endToEndHeaders(upstreamRes.headers));
        upstreamRes.pipe(res);
      },
    );
    upstream.on('timeout', () => upstream.destroy(new Error('upstream timeout')));
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('upstream error\n');
      else res.destroy();
    });
    req.pipe(upstream);
  };

  server.on('connect', (req: IncomingMessage, clientSocket: Socket, head: Buffer) => {
    clientSocket.on('error', () => clientSocket.destroy());
    tunnel(req, clientSocket, head).catch(() => clientSocket.destroy());
  });

  const tunnel = async (req: IncomingMessage, clientSocket: Socket, head: Buffer): Promise<void> => {
    if (state.behaviour === 'hang') return;
    if (state.behaviour === 'refuse-egress') {
      clientSocket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    if (!authorised(req)) {
      clientSocket.end(
        `HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: ${PROXY_AUTHENTICATE}\r\ncontent-length: 0\r\n\r\n`,
      );
      return;
    }
    const match = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(req.url ?? '');
    if (!match) {
      clientSocket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n');
      return;
    }
    const host = match[1]!.replace(/^\[|\]$/g, '');
    const port = Number(match[2]);
    // Judged as a URL's host would be (so `0x7f.1` is 127.0.0.1), as the gateway does.
    const routed = await route(urlHostname(match[1]!), port);
    if ('status' in routed) {
      const body = `${routed.reason}\n`;
      clientSocket.end(
        `HTTP/1.1 ${routed.status} ${routed.status === 403 ? 'Forbidden' : 'Bad Gateway'}\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      return;
    }
    const upstream = connect({
      ...egressSource(listenAddress, host),
      host: routed.dial,
      port,
      timeout: connectTimeoutMs,
    });
    let established = false;
    upstream.once('connect', () => {
      established = true;
      upstream.setTimeout(0);
      clientSocket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(clientSocket);
      clientSocket.pipe(upstream);
    });
    upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
    upstream.once('error', () => {
      if (clientSocket.writable && !established) {
        clientSocket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n');
      } else {
        clientSocket.destroy();
      }
    });
    clientSocket.once('close', () => upstream.destroy());
  };

  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: options.host, port: options.port, exclusive: true }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  listenAddress = address.address;

  return {
    host: address.address,
    port: address.port,
    get behaviour() {
      return state.behaviour;
    },
    set behaviour(value: ForwardProxyBehaviour) {
      state.behaviour = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
