/**
 * What the gateway reads from a crawler's request before it leases: the
 * credentials (the API token, then the username's options), the lease
 * target, and the set-up span the trace hook starts.
 */
import type { IncomingMessage } from 'node:http';
import { clientKey, type GuessLimiter } from '../tenants/guess-limiter.js';
import type { TenantDirectory } from '../tenants/directory.js';
import type { TenantRates } from '../tenants/rate.js';
import { poolAllowed, type Tenant } from '../tenants/tenants.js';
import { parseTraceparent, type TraceHook, type TraceSpan } from '../tracing/http.js';
import {
  decodeProxyAuthorization,
  GatewayCredentialsError,
  parseUsername,
  type ConnectionOptions,
  type ProxyCredentials,
} from './credentials.js';
import type { GatewayMetrics } from './metrics.js';
import { Refusal } from './refusal.js';

const PROXY_AUTHENTICATE = { 'Proxy-Authenticate': 'Basic realm="egress-proxies"' };

/** What admission reads: who may connect, and what guessing and rates cost. */
export interface AdmissionDeps {
  tenants: TenantDirectory;
  guesses: GuessLimiter;
  rates: TenantRates;
  metrics: GatewayMetrics;
  settings: { maxLeaseTtlSeconds: number };
}

/** A connection let in: whose it is and what its username asked for. */
export interface Admitted {
  tenant: Tenant;
  options: ConnectionOptions;
}

/**
 * Finds the tenant by the password (its token) and parses the username;
 * throws Refusal: 429 for an address that guessed wrong too often (before
 * any check) or a tenant over its requests per second, 407 for missing or
 * wrong credentials, 400 for a malformed username, 403 for a pool outside
 * the tenant's scope. `credentials` reads them from the front door (the
 * HTTP listener's Proxy-Authorization header, the SOCKS5 listener's RFC
 * 1929 sub-negotiation); it may throw GatewayCredentialsError, answered as
 * a wrong password is.
 */
export function admit(
  deps: AdmissionDeps,
  credentialsOf: () => ProxyCredentials | undefined,
  client: string,
): Admitted {
  if (!deps.tenants.open) {
    const wait = deps.guesses.blocked(client);
    if (wait) {
      deps.metrics.limitTripped('auth_failures');
      throw new Refusal(
        429,
        `too many wrong proxy passwords from this address; retry in ${wait.retryAfterSeconds} s`,
        'throttled',
        { 'Retry-After': String(wait.retryAfterSeconds) },
      );
    }
  }
  let tenant: Tenant;
  let options: ConnectionOptions;
  try {
    const credentials = credentialsOf();
    const found = deps.tenants.authenticate(credentials?.password);
    if (!found) {
      if (!credentials)
        throw new GatewayCredentialsError('proxy credentials required (password: your API token)', 407);
      deps.guesses.failed(client);
      throw new GatewayCredentialsError(
        deps.tenants.fromFile
          ? 'the proxy password is not a known API token'
          : 'the proxy password is not the API token',
        407,
      );
    }
    tenant = found;
    options = parseUsername(credentials?.username ?? '', deps.settings.maxLeaseTtlSeconds);
  } catch (error) {
    if (error instanceof GatewayCredentialsError) {
      throw new Refusal(
        error.status,
        error.message,
        error.status === 407 ? 'unauthorized' : 'bad_request',
        error.status === 407 ? PROXY_AUTHENTICATE : {},
      );
    }
    throw error;
  }
  if (!poolAllowed(tenant, options.pool))
    throw new Refusal(403, `tenant ${tenant.name} may not use pool ${options.pool}`, 'forbidden');
  if (!deps.rates.take(tenant)) {
    deps.metrics.limitTripped('requests_per_second');
    throw new Refusal(429, `tenant ${tenant.name} is over its requests per second`, 'over_limit', {
      'Retry-After': '1',
    });
  }
  return { tenant, options };
}

/** The HTTP listener's credentials: its Proxy-Authorization header, decoded (throws GatewayCredentialsError). */
export function headerCredentials(req: IncomingMessage): () => ProxyCredentials | undefined {
  return () => decodeProxyAuthorization(req.headers['proxy-authorization']);
}

/** The client's address as its connection shows it, an IPv4-mapped IPv6 address as the IPv4 one. */
export function clientAddress(req: IncomingMessage): string {
  return clientKey(req.socket.remoteAddress);
}

/** The lease target of a host: lowercase, brackets and a trailing dot dropped. */
export function hostOf(host: string): string {
  return host
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
}

/** Starts the connection's set-up span from the crawler's traceparent, when tracing is on. */
export function traceOf(
  hook: TraceHook | undefined,
  req: IncomingMessage,
  path: string,
): TraceSpan | undefined {
  if (!hook) return undefined;
  const traceparent = req.headers.traceparent;
  const header = Array.isArray(traceparent) ? traceparent[0] : traceparent;
  return hook({
    method: req.method ?? '',
    path,
    traceparent: header,
    trace: parseTraceparent(header),
  });
}
