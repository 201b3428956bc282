/**
 * CONNECT (HTTPS): a tunnel through a leased upstream proxy's own CONNECT.
 * The tunnel is piped both ways, so a slow reader slows its writer and
 * memory per tunnel stays a few socket buffers; its lease is held while it
 * is open and let go of the moment either side closes.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { TraceSpan } from '../tracing/http.js';
import { admit, clientAddress, hostOf, traceOf, type Admitted } from './admission.js';
import {
  pickUpstream,
  recordCarried,
  recordRefused,
  upstreamAuthorization,
  type GatewayContext,
} from './context.js';
import { checkDestination, type CheckedDestination } from './destination.js';
import { identityHeaders, type ConnectionLease } from './leases.js';
import { Refusal, refuseTunnel } from './refusal.js';
import { openTunnel } from './upstream-tunnel.js';

/** `host:port` of a CONNECT request (authority form); IPv6 in brackets. */
const AUTHORITY = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

export async function handleConnect(
  ctx: GatewayContext,
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
): Promise<void> {
  const started = performance.now();
  const authority = req.url ?? '';
  const address = clientAddress(req);
  const tunnel: { closed: boolean; upstream: Socket | undefined } = { closed: false, upstream: undefined };
  client.once('close', () => {
    tunnel.closed = true;
    tunnel.upstream?.destroy();
  });
  let target: string;
  let admitted: Admitted | undefined;
  let destination: CheckedDestination;
  let freeSlot: () => void;
  try {
    const { hostname, port } = parseAuthority(authority);
    target = hostOf(hostname);
    admitted = admit(ctx, req, address);
    destination = await checkDestination(ctx.egress, ctx.resolver, hostname, port);
    freeSlot = ctx.slots.take(admitted.tenant, address);
    // Given back the moment the crawler's connection closes, before the lease is let go of.
    client.once('close', freeSlot);
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'connect', error, { target: authority, started, client: address, admitted });
    refuseTunnel(client, error);
    return;
  }
  try {
    await carryTunnel(
      ctx,
      { req, client, head, tunnel },
      { authority, target, destination, admitted, address, started },
    );
  } finally {
    freeSlot();
  }
}

/** A CONNECT admitted and in its slot: an upstream picked and the tunnel relayed, or the refusal answered. */
async function carryTunnel(
  ctx: GatewayContext,
  ends: {
    req: IncomingMessage;
    client: Socket;
    head: Buffer;
    tunnel: { closed: boolean; upstream: Socket | undefined };
  },
  c: {
    authority: string;
    target: string;
    destination: CheckedDestination;
    admitted: Admitted;
    address: string;
    started: number;
  },
): Promise<void> {
  const { client, head, tunnel } = ends;
  const { authority, target, admitted, address, started } = c;
  const span = traceOf(ctx.traceHook, ends.req, authority);
  let picked;
  try {
    picked = await pickUpstream(ctx, 'connect', target, admitted, {
      isAborted: () => tunnel.closed,
      onLost: () => {
        client.destroy();
        tunnel.upstream?.destroy();
      },
      attempt: async (proxy) => {
        // The address checked, never the name: the upstream proxy does not resolve it again.
        const pinned = c.destination.authority;
        const { rest } = await openTunnel(
          proxy,
          pinned,
          ctx.settings.connectTimeoutMs,
          (socket) => {
            // Known from the first moment, so a crawler that leaves mid-setup ends the attempt at once.
            tunnel.upstream = socket;
            if (tunnel.closed) socket.destroy();
          },
          upstreamAuthorization(ctx, proxy),
        );
        return rest;
      },
    });
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'connect', error, { target: authority, started, client: address, admitted, span });
    refuseTunnel(client, error);
    return;
  }
  if (!picked || tunnel.closed || !tunnel.upstream) {
    tunnel.upstream?.destroy();
    if (picked) await picked.lease.done();
    ctx.metrics.outcome('connect', 'client_closed');
    span?.end(499);
    return;
  }
  const bytes = await relayTunnel(ctx, picked.lease, target, span, {
    client,
    upstream: tunnel.upstream,
    head,
    rest: picked.result,
  });
  recordCarried(
    ctx,
    'connect',
    picked,
    { target, logTarget: authority, started, status: 200, client: address, tenant: admitted.tenant.name },
    bytes,
  );
}

/**
 * The host and port of a CONNECT authority, the host normalised as a URL's
 * would be (so `0x7f.1` is 127.0.0.1, as for plain HTTP); throws Refusal
 * (400) when it is not `host:port`.
 */
function parseAuthority(authority: string): { hostname: string; port: number } {
  const m = AUTHORITY.exec(authority);
  const port = m ? Number(m[2]) : 0;
  if (!m || port < 1 || port > 65535)
    throw new Refusal(400, 'CONNECT needs host:port (authority form)', 'bad_request');
  try {
    return { hostname: new URL(`http://${m[1]!}`).hostname, port };
  } catch {
    throw new Refusal(400, 'CONNECT needs host:port (authority form)', 'bad_request');
  }
}

/**
 * Answers 200, then pipes the crawler and the upstream tunnel into each
 * other until either closes. Whatever happens, the lease is let go of when
 * the tunnel ends (a leaked one would renew forever).
 */
async function relayTunnel(
  ctx: GatewayContext,
  lease: ConnectionLease,
  target: string,
  span: TraceSpan | undefined,
  ends: { client: Socket; upstream: Socket; head: Buffer; rest: Buffer },
): Promise<{ sent: number; received: number }> {
  const { client, upstream: up, head, rest } = ends;
  let sent = 0;
  let received = 0;
  try {
    ctx.metrics.outcome('connect', 'ok');
    ctx.metrics.connection('connect', lease.proxy.id, target);
    ctx.carrying.opened();
    span?.end(200);
    client.write(`HTTP/1.1 200 Connection Established\r\n${identityHeaderLines(lease)}\r\n`);
    bound(ctx, client);
    const clientReadBefore = client.bytesRead;
    const clientWrittenBefore = client.bytesWritten;
    if (head.length > 0) up.write(head);
    if (rest.length > 0) client.write(rest);
    up.on('error', () => client.destroy());
    up.once('close', () => client.destroy());
    client.pipe(up);
    up.pipe(client);
    await new Promise<void>((resolve) => {
      if (client.destroyed) resolve();
      else client.once('close', () => resolve());
    });
    sent = client.bytesRead - clientReadBefore + head.length;
    received = client.bytesWritten - clientWrittenBefore;
  } finally {
    up.destroy();
    client.destroy();
    client.setTimeout(0);
    ctx.carrying.closed();
    await lease.done();
  }
  return { sent, received };
}

/** `X-Egress-Proxy` (and `X-Egress-Session`) lines for the CONNECT answer: which proxy carries the tunnel. */
function identityHeaderLines(lease: ConnectionLease): string {
  return Object.entries(identityHeaders(lease))
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
}

/**
 * The tunnel's limits: closed after carrying nothing either way for the idle
 * time (the client socket's timeout sees both directions, since everything
 * from upstream is written to it) and after its maximum lifetime.
 */
function bound(ctx: GatewayContext, client: Socket): void {
  const { tunnelIdleTimeoutMs: idle, tunnelMaxLifetimeMs: lifetime } = ctx.limits;
  if (idle > 0) {
    client.setTimeout(idle, () => {
      ctx.metrics.limitTripped('tunnel_idle');
      client.destroy();
    });
  }
  if (lifetime > 0) {
    const timer = setTimeout(() => {
      ctx.metrics.limitTripped('tunnel_lifetime');
      client.destroy();
    }, lifetime);
    timer.unref();
    client.once('close', () => clearTimeout(timer));
  }
}
