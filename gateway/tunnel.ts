/**
 * What happens to a tunnel once a front door has read its request: one
 * implementation for both listeners, the HTTP one's CONNECT (connect.ts)
 * and the SOCKS5 one's CONNECT (socks.ts). Admission (token, username
 * options, tenant scope and rate), the egress policy, the per-client slots,
 * the lease and the upstream policy, the relay with its limits, the metrics
 * and the access log are all here; a door only parses its protocol and
 * words the answer (`200 Connection Established` or a SOCKS5 reply).
 *
 * The tunnel is piped both ways, so a slow reader slows its writer and
 * memory per tunnel stays a few socket buffers; its lease is held while it
 * is open and let go of the moment either side closes.
 */
import type { Socket } from 'node:net';
import type { TraceSpan } from '../tracing/http.js';
import { hostOf, type Admitted } from './admission.js';
import {
  pickUpstream,
  recordCarried,
  recordRefused,
  upstreamAuthorization,
  type GatewayContext,
} from './context.js';
import { checkDestination, type CheckedDestination } from './destination.js';
import type { ConnectionLease } from './leases.js';
import { Refusal } from './refusal.js';
import { openTunnel } from './upstream-tunnel.js';

/** `host:port` of a CONNECT request (authority form); IPv6 in brackets. */
const AUTHORITY = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

/** What a front door hands over: the crawler's socket, and how to speak to it. */
export interface TunnelDoor {
  /** Which listener: the access log's `via`. */
  via: 'http' | 'socks5';
  client: Socket;
  /** The client's address (an IPv4-mapped IPv6 address as the IPv4 one). */
  address: string;
  /** `host:port` as the crawler asked for it, for the access log. */
  authority: string;
  /**
   * Bytes the crawler sent after its request, before the answer: written
   * upstream first. Called once, right after `established`; from then on
   * the socket is piped.
   */
  takeHead(): Buffer;
  /** `performance.now()` when the connection arrived. */
  started: number;
  /**
   * Reads the request: the destination and the admitted tenant with its
   * options. Throws Refusal (a malformed request, wrong credentials...);
   * called once, before any check of the destination.
   */
  request(): { hostname: string; port: number; admitted: Admitted };
  /** Starts the set-up span, when tracing is on. */
  span(): TraceSpan | undefined;
  /** Writes the success answer (the tunnel starts right after it). */
  established(lease: ConnectionLease): void;
  /** Writes the refusal's answer and closes the socket. */
  refuse(refusal: Refusal): void;
}

/**
 * The host and port of a tunnel's authority (a CONNECT's, or a SOCKS5
 * request's written the same way), the host normalised as a URL's
 * would be (so `0x7f.1` is 127.0.0.1, as for plain HTTP); throws Refusal
 * (400) when it is not `host:port`.
 */
export function parseAuthority(authority: string): { hostname: string; port: number } {
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

/** Serves one tunnel from its request to its end; every refusal is answered through the door. */
export async function serveTunnel(ctx: GatewayContext, door: TunnelDoor): Promise<void> {
  const { client, address, authority, started } = door;
  const tunnel: { closed: boolean; upstream: Socket | undefined } = { closed: false, upstream: undefined };
  client.once('close', () => {
    tunnel.closed = true;
    tunnel.upstream?.destroy();
  });
  if (client.destroyed) tunnel.closed = true;
  let target: string;
  let admitted: Admitted | undefined;
  let destination: CheckedDestination;
  let freeSlot: () => void;
  try {
    const request = door.request();
    admitted = request.admitted;
    target = hostOf(request.hostname);
    destination = await checkDestination(ctx.egress, ctx.resolver, request.hostname, request.port);
    freeSlot = ctx.slots.take(admitted.tenant, address);
    // Given back the moment the crawler's connection closes, before the lease is let go of.
    client.once('close', freeSlot);
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'connect', error, {
      target: authority,
      started,
      client: address,
      admitted,
      ...viaOf(door),
    });
    door.refuse(error);
    return;
  }
  try {
    await carryTunnel(ctx, door, tunnel, { target, destination, admitted });
  } finally {
    freeSlot();
  }
}

/** A tunnel admitted and in its slot: an upstream picked and the tunnel relayed, or the refusal answered. */
async function carryTunnel(
  ctx: GatewayContext,
  door: TunnelDoor,
  tunnel: { closed: boolean; upstream: Socket | undefined },
  c: { target: string; destination: CheckedDestination; admitted: Admitted },
): Promise<void> {
  const { client, authority, address, started } = door;
  const { target, admitted } = c;
  const span = door.span();
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
    recordRefused(ctx, 'connect', error, {
      target: authority,
      started,
      client: address,
      admitted,
      span,
      ...viaOf(door),
    });
    door.refuse(error);
    return;
  }
  if (!picked || tunnel.closed || !tunnel.upstream) {
    tunnel.upstream?.destroy();
    if (picked) await picked.lease.done();
    ctx.metrics.outcome('connect', 'client_closed');
    span?.end(499);
    return;
  }
  const bytes = await relayTunnel(ctx, door, picked.lease, target, span, {
    upstream: tunnel.upstream,
    rest: picked.result,
  });
  recordCarried(
    ctx,
    'connect',
    picked,
    {
      target,
      logTarget: authority,
      started,
      status: 200,
      client: address,
      tenant: admitted.tenant.name,
      ...viaOf(door),
    },
    bytes,
  );
}

/**
 * Answers through the door, then pipes the crawler and the upstream tunnel
 * into each other until either closes. Whatever happens, the lease is let
 * go of when the tunnel ends (a leaked one would renew forever).
 */
async function relayTunnel(
  ctx: GatewayContext,
  door: TunnelDoor,
  lease: ConnectionLease,
  target: string,
  span: TraceSpan | undefined,
  ends: { upstream: Socket; rest: Buffer },
): Promise<{ sent: number; received: number }> {
  const { client } = door;
  const { upstream: up, rest } = ends;
  let head: Buffer = Buffer.alloc(0);
  let sent = 0;
  let received = 0;
  try {
    ctx.metrics.outcome('connect', 'ok');
    ctx.metrics.connection('connect', lease.proxy.id, target);
    ctx.carrying.opened();
    span?.end(200);
    door.established(lease);
    head = door.takeHead();
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

/** The access log's `via`: said for the SOCKS5 listener only, so the HTTP listener's lines stay as they were. */
function viaOf(door: TunnelDoor): { via?: 'socks5' } {
  return door.via === 'socks5' ? { via: 'socks5' } : {};
}
