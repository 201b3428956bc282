/**
 * Plain HTTP: an absolute-form request (GET http://host/path), forwarded to
 * a leased upstream proxy in absolute form, its answer piped back. Bodies
 * are never buffered; the lease is held for the one exchange.
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import { dialAddress, ipLiteralOf } from '../forwarding/egress-policy.js';
import { connectionListed, endToEndHeaders } from '../forwarding/headers.js';
import type { TraceSpan } from '../tracing/http.js';
import { admit, clientAddress, headerCredentials, hostOf, traceOf, type Admitted } from './admission.js';
import { checkDestination } from './destination.js';
import {
  pickUpstream,
  recordCarried,
  recordRefused,
  upstreamAuthorization,
  type GatewayContext,
} from './context.js';
import { handleGatewayApi } from './gateway-api.js';
import { identityHeaders, type ConnectionLease } from './leases.js';
import { Refusal, refuseRequest } from './refusal.js';
import { passiveOutcomeOfStatus, reportAnswer } from './upstream-policy.js';
import { forward } from './upstream-request.js';

/** One request's state shared by its handlers: whether the crawler left, and the upstream request. */
interface Exchange {
  aborted: boolean;
  upstream: ClientRequest | undefined;
}

export async function handleRequest(
  ctx: GatewayContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const rawUrl = req.url ?? '';
  // Addressed to the gateway itself (origin form): its own small API.
  if (rawUrl.startsWith('/v1/gateway/')) return handleGatewayApi(ctx, req, res);
  const started = performance.now();
  const address = clientAddress(req);
  const exchange: Exchange = { aborted: false, upstream: undefined };
  res.once('close', () => {
    exchange.aborted = !res.writableFinished;
    // The crawler left: the upstream request ends now, and with it the lease.
    if (exchange.aborted) exchange.upstream?.destroy();
  });
  let url: URL | undefined;
  let admitted: Admitted | undefined;
  let freeSlot: () => void;
  try {
    url = absoluteUrl(rawUrl);
    admitted = admit(ctx, headerCredentials(req), address);
    // Checked here, before the lease; the request goes on by name (a proxy
    // rewrites Host from the URL, so an address there would break virtual
    // hosts): the proxies this product configures re-check what they resolve.
    await checkDestination(ctx.egress, ctx.resolver, url.hostname, Number(url.port || 80));
    freeSlot = ctx.slots.take(admitted.tenant, address);
    // Given back the moment the exchange ends, before the lease is let go of.
    res.once('close', freeSlot);
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'http', error, { target: url?.host ?? '', started, client: address, admitted });
    refuseRequest(res, error);
    return;
  }
  try {
    await carryRequest(ctx, { req, res, exchange }, { rawUrl, url, admitted, address, started });
  } finally {
    freeSlot();
  }
}

/** A request admitted and in its slot: an upstream picked and the answer relayed, or the refusal answered. */
async function carryRequest(
  ctx: GatewayContext,
  ends: { req: IncomingMessage; res: ServerResponse; exchange: Exchange },
  c: { rawUrl: string; url: URL; admitted: Admitted; address: string; started: number },
): Promise<void> {
  const { req, res, exchange } = ends;
  const { url, admitted, address, started } = c;
  let sent = 0;
  const target = hostOf(url.hostname);
  const span = traceOf(ctx.traceHook, req, url.host);
  let picked;
  try {
    picked = await pickUpstream(ctx, 'http', target, admitted, {
      isAborted: () => exchange.aborted || res.destroyed,
      onLost: () => {
        exchange.upstream?.destroy();
        res.destroy();
      },
      attempt: (proxy) =>
        forward(proxy, ctx.agents.for(proxy), {
          req,
          rawUrl: canonicalAuthority(c.rawUrl, url),
          timeoutMs: ctx.settings.connectTimeoutMs,
          expose: (r) => {
            exchange.upstream = r;
          },
          countBody: (n) => (sent += n),
          authorization: upstreamAuthorization(ctx, proxy),
        }),
      passive: (response) => passiveOutcomeOfStatus(response.statusCode ?? 502),
    });
  } catch (error) {
    if (!(error instanceof Refusal)) throw error;
    recordRefused(ctx, 'http', error, { target: url.host, started, client: address, admitted, span });
    refuseRequest(res, error);
    return;
  }
  if (!picked) {
    exchange.upstream?.destroy();
    ctx.metrics.outcome('http', 'client_closed');
    span?.end(499);
    return;
  }
  const { status, received } = await relayResponse(ctx, picked.lease, target, span, {
    res,
    exchange,
    response: picked.result,
  });
  recordCarried(
    ctx,
    'http',
    picked,
    { target, logTarget: url.host, started, status, client: address, tenant: admitted.tenant.name },
    { sent, received },
  );
}

/**
 * The URL as sent on: its authority as the policy judged it (so `010.0.0.1`,
 * which the URL standard reads as 8.0.0.1 and a proxy might read as
 * 10.0.0.1, goes on as 8.0.0.1), the path and query as the crawler wrote them.
 */
function canonicalAuthority(rawUrl: string, url: URL): string {
  const rest = /^http:\/\/[^/?#]*(.*)$/is.exec(rawUrl)?.[1] ?? '/';
  const literal = ipLiteralOf(url.hostname);
  let host = url.host;
  if (literal !== undefined) {
    // An IPv4-mapped address goes on as the IPv4 address it is, as for CONNECT.
    const address = dialAddress(literal);
    host = `${address.includes(':') ? `[${address}]` : address}${url.port ? `:${url.port}` : ''}`;
  }
  return `http://${host}${rest === '' ? '/' : rest}`;
}

/** The request's absolute-form http:// URL; throws Refusal (400) for anything else. */
function absoluteUrl(rawUrl: string): URL {
  if (!/^http:\/\//i.test(rawUrl)) {
    throw new Refusal(
      400,
      /^https:\/\//i.test(rawUrl)
        ? 'https:// URLs go through CONNECT (set this gateway as the proxy for https too)'
        : 'this is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port',
      'bad_request',
    );
  }
  try {
    return new URL(rawUrl);
  } catch {
    throw new Refusal(400, 'the request URL cannot be parsed', 'bad_request');
  }
}

/**
 * Passes the upstream answer on (a rate-limit status reported first) and
 * waits until it has been sent or the crawler left. Whatever happens, the
 * lease is let go of when the exchange ends (a leaked one would renew forever).
 */
async function relayResponse(
  ctx: GatewayContext,
  lease: ConnectionLease,
  target: string,
  span: TraceSpan | undefined,
  ends: { res: ServerResponse; exchange: Exchange; response: IncomingMessage },
): Promise<{ status: number; received: number }> {
  const { res, exchange, response } = ends;
  const status = response.statusCode ?? 502;
  let received = 0;
  // Reported before the lease is let go of: a released lease is forgotten by the store.
  let reported: Promise<void> = Promise.resolve();
  try {
    ctx.metrics.outcome('http', 'ok');
    ctx.metrics.connection('http', lease.proxy.id, target);
    ctx.carrying.opened();
    span?.end(status);
    reported = reportAnswer(status, ctx.rateLimitStatuses, lease, target, ctx.metrics, ctx.log);
    response.on('data', (chunk: Buffer) => (received += chunk.length));
    response.on('error', () => res.destroy());
    res.writeHead(status, response.statusMessage, {
      ...withoutIdentity(endToEndHeaders(response.headers, connectionListed(response.headers))),
      ...identityHeaders(lease),
    });
    const unbind = bound(ctx, res, exchange);
    res.once('close', unbind);
    response.pipe(res);
    await new Promise<void>((resolve) => {
      if (res.destroyed || res.writableFinished) resolve();
      else res.once('close', () => resolve());
    });
  } finally {
    if (!res.writableFinished) {
      exchange.upstream?.destroy();
      res.destroy();
    }
    ctx.carrying.closed();
    await reported;
    await lease.done();
  }
  return { status, received };
}

/** Upstream's own X-Egress-* headers are dropped: only the gateway's say which proxy carried the answer. */
function withoutIdentity(headers: Record<string, string | string[]>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(headers)) {
    const lower = k.toLowerCase();
    if (lower !== 'x-egress-proxy' && lower !== 'x-egress-session') out[k] = v;
  }
  return out;
}

/**
 * The exchange's limits while its answer is relayed: idle (no byte either
 * way on the crawler's connection for the idle time) and a total bound, so
 * an answer that drips a byte now and then still ends. Returns what undoes
 * them (the connection may carry the next keep-alive request).
 */
function bound(ctx: GatewayContext, res: ServerResponse, exchange: Exchange): () => void {
  const { tunnelIdleTimeoutMs: idle, responseTimeoutMs: total } = ctx.limits;
  const socket = res.socket;
  const cut = (limit: 'tunnel_idle' | 'response_timeout') => {
    ctx.metrics.limitTripped(limit);
    exchange.upstream?.destroy();
    res.destroy();
  };
  const onIdle = () => cut('tunnel_idle');
  if (idle > 0 && socket) socket.setTimeout(idle, onIdle);
  const timer = total > 0 ? setTimeout(() => cut('response_timeout'), total) : undefined;
  timer?.unref();
  return () => {
    if (timer) clearTimeout(timer);
    // Only our listener: the server sets the socket's keep-alive timeout itself once the answer is sent.
    if (idle > 0 && socket) socket.off('timeout', onIdle);
  };
}
