/**
 * `/ui`: the page and its assets (public: they hold no data), and the data
 * it reads under `/ui/api/` behind the lease API's own token check, which
 * names the tenant. A tenant sees the pools and Proxies its scope allows;
 * an operator may also scale a pool and cordon a Proxy.
 *
 * The page sends its token in the Authorization header (it keeps it in the
 * tab's sessionStorage), never in a cookie, so another site cannot make a
 * browser send it; the write actions also refuse a request whose Origin
 * is not the page's own (a browser sends Origin on every POST) and
 * anything but a JSON body (which a cross-site form cannot send).
 */
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import { streamSSE } from 'hono/streaming';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Tenant } from '../../tenants/tenants.js';
import { unscoped } from '../../tenants/tenants.js';
import type { DashboardEvents, SessionInfo } from '../protocol.js';
import { ASSET_NAMES, type DashboardAssets } from './assets.js';
import type { FleetState } from './fleet-state.js';
import type { FleetWrites } from './writes.js';

/** Paths served with no token: the page and its assets. */
export function isPublicDashboardPath(path: string): boolean {
  return path === '/ui' || path === '/ui/' || path.startsWith('/ui/assets/');
}

export interface DashboardRoutesOptions {
  state: FleetState;
  assets: DashboardAssets;
  /** Absent: nobody may write (a lease-only replica with no kubeconfig rights). */
  writes?: FleetWrites;
  /** The open tenant off the loopback (`--insecure-no-auth`) looks but never writes. */
  openTenantReadOnly: boolean;
  logger: Logger;
  /** A page's stream is dropped once this many events wait unsent (a stalled browser). */
  maxPendingEvents?: number;
  /** How often an idle stream gets a comment, so proxies and browsers keep it open. */
  keepAliveMs?: number;
}

const CSP = {
  defaultSrc: ["'none'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  imgSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  baseUri: ["'none'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
};

const scaleBody = z.strictObject({ replicas: z.int().min(0).max(10_000) });
const cordonBody = z.strictObject({ cordoned: z.boolean() });

export function createDashboardRoutes(options: DashboardRoutesOptions): Hono {
  const { state, assets } = options;
  const log = options.logger.child({ component: 'dashboard' });
  const maxPending = options.maxPendingEvents ?? 256;
  const keepAliveMs = options.keepAliveMs ?? 15_000;
  const app = new Hono();
  app.use(
    secureHeaders({
      contentSecurityPolicy: CSP,
      referrerPolicy: 'no-referrer',
      crossOriginResourcePolicy: 'same-origin',
      xFrameOptions: 'DENY',
    }),
  );

  const session = (tenant: Tenant): SessionInfo => ({
    tenant: tenant.name,
    role: tenant.role,
    canWrite: canWrite(tenant),
    scoped: !unscoped(tenant),
  });
  const canWrite = (tenant: Tenant) =>
    tenant.role === 'operator' &&
    options.writes !== undefined &&
    !(options.openTenantReadOnly && tenant.digest.length === 0);

  const html = (c: Context) => {
    c.header('Cache-Control', 'no-cache');
    return c.html(assets.html);
  };
  app.get('/', html);
  app.get('/assets/:file', (c) => {
    const file = c.req.param('file');
    const body = file === ASSET_NAMES.js ? assets.js : file === ASSET_NAMES.css ? assets.css : undefined;
    if (!body) return fail(c, 404, 'not_found', `no asset ${file}`);
    c.header(
      'Content-Type',
      file.endsWith('.js') ? 'text/javascript; charset=utf-8' : 'text/css; charset=utf-8',
    );
    // The URL carries the content hash (?v=): a new build is a new URL.
    c.header('Cache-Control', 'public, max-age=31536000, immutable');
    return c.body(new Uint8Array(body));
  });

  app.get('/api/session', (c) => {
    c.header('Cache-Control', 'no-store');
    return c.json(session(c.get('tenant')));
  });

  app.get('/api/events', (c) => {
    const tenant = c.get('tenant');
    c.header('Cache-Control', 'no-store');
    // Buffering proxies (nginx) would hold the events back.
    c.header('X-Accel-Buffering', 'no');
    return streamSSE(c, async (stream) => {
      let pending = 0;
      let closed = false;
      let unsubscribe = () => {};
      const done = new Promise<void>((resolve) => {
        stream.onAbort(() => {
          closed = true;
          resolve();
        });
        const send = <K extends keyof DashboardEvents>(event: K, data: DashboardEvents[K]) => {
          if (closed) return;
          if (pending >= maxPending) {
            log.warn({ tenant: tenant.name }, 'a dashboard page fell too far behind; its stream is closed');
            closed = true;
            resolve();
            return;
          }
          pending++;
          stream
            .writeSSE({ event, data: JSON.stringify(data) })
            .catch(() => {
              closed = true;
              resolve();
            })
            .finally(() => pending--);
        };
        send('session', session(tenant));
        unsubscribe = state.subscribe(tenant, send);
      });
      const keepAlive = setInterval(() => {
        if (!closed) void stream.write(': keep-alive\n\n').catch(() => undefined);
      }, keepAliveMs);
      try {
        await done;
      } finally {
        clearInterval(keepAlive);
        unsubscribe();
      }
    });
  });

  // The write actions: same-origin JSON from an operator whose scope holds the object.
  const writeGuard: MiddlewareHandler = async (c, next) => {
    const origin = c.req.header('Origin');
    if (origin !== undefined && !sameHost(origin, c.req.header('Host')))
      return fail(c, 403, 'forbidden', 'cross-origin requests may not change the fleet');
    await next();
  };
  app.post('/api/pools/:namespace/:name/scale', writeGuard, async (c) => {
    const tenant = c.get('tenant');
    const refused = refuseWrite(c, tenant);
    if (refused) return refused;
    const id = `${c.req.param('namespace')}/${c.req.param('name')}`;
    if (!state.pool(tenant, id)) return fail(c, 404, 'not_found', `no ProxyPool ${id} in your scope`);
    const body = await jsonBody(c, scaleBody);
    if (body instanceof Response) return body;
    try {
      await options.writes!.scalePool(c.req.param('namespace'), c.req.param('name'), body.replicas);
    } catch (error) {
      return upstreamFailure(c, log, error, `scale ProxyPool ${id}`);
    }
    log.info(
      { tenant: tenant.name, pool: id, replicas: body.replicas },
      'ProxyPool scaled from the dashboard',
    );
    return c.json({ pool: id, replicas: body.replicas });
  });
  app.post('/api/proxies/:namespace/:name/cordon', writeGuard, async (c) => {
    const tenant = c.get('tenant');
    const refused = refuseWrite(c, tenant);
    if (refused) return refused;
    const id = `${c.req.param('namespace')}/${c.req.param('name')}`;
    if (!state.proxy(tenant, id)) return fail(c, 404, 'not_found', `no Proxy ${id} in your scope`);
    const body = await jsonBody(c, cordonBody);
    if (body instanceof Response) return body;
    try {
      await options.writes!.cordonProxy(c.req.param('namespace'), c.req.param('name'), body.cordoned);
    } catch (error) {
      return upstreamFailure(c, log, error, `cordon Proxy ${id}`);
    }
    log.info(
      { tenant: tenant.name, proxy: id, cordoned: body.cordoned },
      'Proxy cordon set from the dashboard',
    );
    return c.json({ proxy: id, cordoned: body.cordoned });
  });

  function refuseWrite(c: Context, tenant: Tenant): Response | undefined {
    if (!canWrite(tenant))
      return fail(
        c,
        403,
        'forbidden',
        options.writes === undefined
          ? 'this api replica cannot change the fleet'
          : `tenant ${tenant.name} may look but not change the fleet (the tenants file gives the operator role)`,
      );
    if (!(c.req.header('Content-Type') ?? '').startsWith('application/json'))
      return fail(c, 415, 'unsupported_media_type', 'send the body as application/json');
    return undefined;
  }

  return app;
}

async function jsonBody<T>(c: Context, schema: z.ZodType<T>): Promise<T | Response> {
  let value: unknown;
  try {
    value = await c.req.json();
  } catch {
    return fail(c, 400, 'invalid_body', 'the body is not JSON');
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return fail(c, 400, 'invalid_body', `${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  return parsed.data;
}

function upstreamFailure(c: Context, log: Logger, error: unknown, what: string): Response {
  const code = (error as { code?: number }).code;
  log.warn({ err: (error as Error).message, code }, `dashboard: could not ${what}`);
  if (code === 403)
    return fail(c, 502, 'forbidden_upstream', `the apiserver refused to ${what} (the api's RBAC)`);
  if (code === 404) return fail(c, 404, 'not_found', `${what}: gone from the apiserver`);
  if (code === 422) return fail(c, 422, 'invalid', `${what}: the apiserver refused the value`);
  return fail(c, 502, 'upstream', `could not ${what}; try again`);
}

/** The lease API's error shape, `{error, message}`. */
function fail(c: Context, status: ContentfulStatusCode, error: string, message: string): Response {
  c.header('Cache-Control', 'no-store');
  return c.json({ error, message }, status);
}

/**
 * Whether the Origin header names the host and port the request was sent
 * to. The scheme is not compared: behind a TLS-terminating ingress the page
 * is https while the api hears http, and the Host header is kept.
 */
function sameHost(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host;
  } catch {
    return false;
  }
}
