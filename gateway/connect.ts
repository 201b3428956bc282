/**
 * The HTTP listener's front door for tunnels: a CONNECT request read by
 * Node's HTTP parser, answered `200 Connection Established` (with the proxy
 * that carries it) or with the refusal's HTTP answer. Everything between is
 * tunnel.ts, shared with the SOCKS5 listener.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { admit, clientAddress, headerCredentials, traceOf } from './admission.js';
import type { GatewayContext } from './context.js';
import { identityHeaders, type ConnectionLease } from './leases.js';
import { refuseTunnel } from './refusal.js';
import { parseAuthority, serveTunnel } from './tunnel.js';

export async function handleConnect(
  ctx: GatewayContext,
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
): Promise<void> {
  const authority = req.url ?? '';
  const address = clientAddress(req);
  await serveTunnel(ctx, {
    via: 'http',
    client,
    address,
    authority,
    takeHead: () => head,
    started: performance.now(),
    request: () => {
      const { hostname, port } = parseAuthority(authority);
      return { hostname, port, admitted: admit(ctx, headerCredentials(req), address) };
    },
    span: () => traceOf(ctx.traceHook, req, authority),
    established: (lease) =>
      client.write(`HTTP/1.1 200 Connection Established\r\n${identityHeaderLines(lease)}\r\n`),
    refuse: (refusal) => refuseTunnel(client, refusal),
  });
}

/** `X-Egress-Proxy` (and `X-Egress-Session`) lines for the CONNECT answer: which proxy carries the tunnel. */
function identityHeaderLines(lease: ConnectionLease): string {
  return Object.entries(identityHeaders(lease))
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
}
