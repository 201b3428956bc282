/**
 * CONNECT (HTTPS): a tunnel through a leased upstream proxy's own CONNECT.
 * The tunnel is piped both ways, so a slow reader slows its writer and
 * memory per tunnel stays a few socket buffers; its lease is held while it
 * is open and let go of the moment either side closes.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { TraceSpan } from '../tracing/http.js';
import { admit, hostOf, traceOf } from './admission.js';
import { pickUpstream, recordCarried, recordRefused, type GatewayContext } from './context.js';
import type { ConnectionOptions } from './credentials.js';
import { checkDestination, type CheckedDestination } from './destination.js';
import type { ConnectionLease } from './leases.js';
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
  const tunnel: { closed: boolean; upstream: Socket | undefined } = { closed: false, upstream: undefined };
  client.once('close', () => {
    tunnel.closed = true;
    tunnel.upstream?.destroy();
  });
  let target: string;
  let options: ConnectionOptions | undefined;
  let destination: CheckedDestination;
  try {
    const { hostname, port } = parseAuthority(authority);
    target = hostOf(hostname);
    options = admit(req, ctx.token, ctx.settings.maxLeaseTtlSeconds);
    destination = await checkDestination(ctx.egress, ctx.resolver, hostname, port);
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'connect', error, { target: authority, started, session: options?.session });
    refuseTunnel(client, error);
    return;
  }
  const span = traceOf(ctx.traceHook, req, authority);
  let picked;
  try {
    picked = await pickUpstream(ctx, 'connect', target, options, {
      isAborted: () => tunnel.closed,
      onLost: () => {
        client.destroy();
        tunnel.upstream?.destroy();
      },
      attempt: async (proxy) => {
        // The address checked, never the name: the upstream proxy does not resolve it again.
        const pinned = destination.authority;
        const { rest } = await openTunnel(proxy, pinned, ctx.settings.connectTimeoutMs, (socket) => {
          // Known from the first moment, so a crawler that leaves mid-setup ends the attempt at once.
          tunnel.upstream = socket;
          if (tunnel.closed) socket.destroy();
        });
        return rest;
      },
    });
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'connect', error, { target: authority, started, session: options.session, span });
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
  recordCarried(ctx, 'connect', picked, { target, logTarget: authority, started, status: 200 }, bytes);
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
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
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
    ctx.carrying.closed();
    await lease.done();
  }
  return { sent, received };
}
