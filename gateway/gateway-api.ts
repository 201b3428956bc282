/**
 * The gateway's own small API, on its proxy port in origin form (a crawler
 * reaches it with the credentials it already has): a crawler that sees a
 * ban reports it against its session, since over CONNECT the gateway never
 * sees the site's answer.
 *
 *   POST /v1/gateway/sessions/{id}/report   {"reason":"banned"|"rate_limited","target":"host"}
 *
 * Auth: `Authorization: Bearer <token>` or the proxy credentials
 * (`Proxy-Authorization: Basic`, the password is the token). Only the
 * caller's own tenant's sessions are found. 204 when recorded; 404
 * `unknown_session` when the tenant has no live session with that id.
 * Other origin-form requests are not this API (plain-http.ts answers 400).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { decodeProxyAuthorization, GatewayCredentialsError } from './credentials.js';
import { clientAddress, hostOf } from './admission.js';
import type { Tenant } from '../tenants/tenants.js';
import type { GatewayContext } from './context.js';

const REPORT_PATH = /^\/v1\/gateway\/sessions\/([A-Za-z0-9.-]{1,128})\/report$/;
const MAX_BODY_BYTES = 64 * 1024;

const reportSchema = z.strictObject({
  reason: z.enum(['banned', 'rate_limited']),
  target: z.string().min(1).max(253),
});

export async function handleGatewayApi(
  ctx: GatewayContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const path = (req.url ?? '').split('?')[0]!;
  const m = REPORT_PATH.exec(path);
  if (!m) return answer(res, 404, 'not_found', `no route for ${req.method ?? ''} ${path}`);
  if (req.method !== 'POST') {
    res.setHeader('Allow', 'POST');
    return answer(res, 405, 'method_not_allowed', `${req.method ?? ''} is not allowed on ${path}`);
  }
  const address = clientAddress(req);
  const tenant = authenticate(ctx, req, address);
  if (typeof tenant === 'string') {
    res.setHeader('Connection', 'close');
    if (tenant === 'throttled')
      return answer(res, 429, 'throttled', 'too many wrong tokens from this address');
    res.setHeader('WWW-Authenticate', 'Bearer');
    return answer(res, 401, 'unauthorized', 'missing or invalid bearer token');
  }
  const body = await readJson(req);
  if (body === undefined) return answer(res, 400, 'invalid_body', 'the body must be JSON of at most 64 KiB');
  const parsed = reportSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return answer(
      res,
      400,
      'invalid_body',
      `${issue.path.join('.') || 'body'}: ${issue.message} (expected {"reason":"banned"|"rate_limited","target":"host"})`,
    );
  }
  const target = hostOf(parsed.data.target);
  const receipts = await ctx.leases.reportSession(tenant.name, m[1]!, parsed.data.reason, target);
  if (receipts.length === 0)
    return answer(res, 404, 'unknown_session', `no live session ${m[1]!} of this tenant on this gateway`);
  for (const r of receipts) {
    ctx.log.info(
      { tenant: tenant.name, session: m[1]!, proxy: r.proxyId, target, reason: parsed.data.reason },
      'session report',
    );
    if (parsed.data.reason === 'banned' && r.outcome === 'cooldown' && r.proxy !== undefined)
      ctx.demand?.noteBanned(r.proxy, r.target ?? target);
  }
  res.writeHead(204).end();
}

/** The caller's tenant, or why not ('throttled' before any check, 'unauthorized'). */
function authenticate(
  ctx: GatewayContext,
  req: IncomingMessage,
  address: string,
): Tenant | 'throttled' | 'unauthorized' {
  if (ctx.tenants.open) return ctx.tenants.authenticate(undefined) ?? 'unauthorized';
  if (ctx.guesses.blocked(address)) {
    ctx.metrics.limitTripped('auth_failures');
    return 'throttled';
  }
  let token: string | undefined;
  const bearer = req.headers.authorization;
  if (bearer?.startsWith('Bearer ')) token = bearer.slice('Bearer '.length);
  else {
    try {
      token = decodeProxyAuthorization(req.headers['proxy-authorization'])?.password;
    } catch (error) {
      if (!(error instanceof GatewayCredentialsError)) throw error;
    }
  }
  if (token === undefined) return 'unauthorized';
  const tenant = ctx.tenants.authenticate(token);
  if (!tenant) ctx.guesses.failed(address);
  return tenant ?? 'unauthorized';
}

async function readJson(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return undefined;
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

function answer(res: ServerResponse, status: number, error: string, message: string): void {
  const body = `${JSON.stringify({ error, message })}\n`;
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}
