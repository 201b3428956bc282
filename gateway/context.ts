/**
 * What the CONNECT and plain-HTTP handlers share, built once per gateway by
 * createGateway (server.ts), and the steps both take the same way: running
 * the upstream policy for a connection, and recording how it ended
 * (metrics, span, access log).
 */
import type { Logger } from 'pino';
import type { GuessLimiter } from '../tenants/guess-limiter.js';
import type { TenantDirectory } from '../tenants/directory.js';
import type { TenantRates } from '../tenants/rate.js';
import type { Tenant } from '../tenants/tenants.js';
import type { ConnectionSlots } from './connection-slots.js';
import type { PoolDemand } from '../api/pool-demand.js';
import type { CostMeter } from '../api/cost-meter.js';
import { credentialsOfView, type ProxyView } from '../api/proxy-catalog.js';
import { proxyAuthorization, type CredentialsLookup } from '../credentials/proxy-credentials.js';
import type { TraceHook, TraceSpan } from '../tracing/http.js';
import { refusedEntry, type AccessLog } from './access-log.js';
import type { GatewayOptions } from './config.js';
import type { EgressPolicy } from '../forwarding/egress-policy.js';
import type { ConnectionOptions } from './credentials.js';
import type { DestinationResolver } from './destination.js';
import type { ConnectionLease, GatewayLeases } from './leases.js';
import type { ConnectionKind, GatewayMetrics } from './metrics.js';
import type { Refusal } from './refusal.js';
import { attemptUpstream, type Carried, type PassiveOutcome } from './upstream-policy.js';
import type { TrafficHealth } from './traffic-health.js';
import type { UpstreamAgents } from './upstream-request.js';

export type GatewaySettings = Pick<
  GatewayOptions,
  | 'token'
  | 'maxLeaseTtlSeconds'
  | 'defaultLeaseTtlSeconds'
  | 'connectTimeoutMs'
  | 'attempts'
  | 'rateLimitStatuses'
  | 'maxTargetLabels'
  | 'egressDenyCidrs'
  | 'egressAllowCidrs'
  | 'egressAllowPorts'
  | 'egressResolver'
> &
  // The limits and tenants: their defaults (gateway/config.ts) when absent.
  Partial<
    Pick<
      GatewayOptions,
      | 'tunnelIdleTimeoutMs'
      | 'tunnelMaxLifetimeMs'
      | 'responseTimeoutMs'
      | 'maxTunnelsPerClient'
      | 'maxConnections'
      | 'authFailuresPerMinute'
      | 'tenantsFile'
    >
  >;

/** The limits with their defaults filled in. */
export interface GatewayLimits {
  tunnelIdleTimeoutMs: number;
  tunnelMaxLifetimeMs: number;
  responseTimeoutMs: number;
}

export interface GatewayContext {
  settings: GatewaySettings;
  limits: GatewayLimits;
  /** Who may connect (the single token's tenant, a tenants file's, or anyone when open). */
  tenants: TenantDirectory;
  /** Wrong passwords per client address. */
  guesses: GuessLimiter;
  rates: TenantRates;
  /** Open connections per tenant and per client address. */
  slots: ConnectionSlots;
  rateLimitStatuses: ReadonlySet<number>;
  leases: GatewayLeases;
  metrics: GatewayMetrics;
  log: Logger;
  accessLog: AccessLog;
  traceHook: TraceHook | undefined;
  /** Where crawlers may reach, checked before any lease is taken. */
  egress: EgressPolicy;
  resolver: DestinationResolver;
  /** Keep-alive connections to the upstream proxies, for plain HTTP. */
  agents: UpstreamAgents;
  /** Told of refusals and bans for ProxyPool autoscaling and rotation, when the lease API's demand is at hand (`dev`). */
  demand: Pick<PoolDemand, 'noteDenied' | 'noteBanned'> | undefined;
  /** Counts open tunnels and plain-HTTP requests in flight. */
  carrying: { opened(): void; closed(): void };
  /** The upstream proxies' credentials (a cache of labelled Secrets); none: none are sent. */
  credentials: CredentialsLookup | undefined;
  /** Tells the prober how each proxy's traffic went (passive health). */
  traffic: TrafficHealth;
  /** What relayed bytes cost, by proxy and by tenant (api/cost-meter.ts). */
  cost: Pick<CostMeter, 'traffic'> | undefined;
}

/**
 * The `Proxy-Authorization` for a proxy: its own credentials, when it has
 * readable ones. Unreadable ones send none (the prober has already called
 * it unhealthy; a 407 moves the connection to another proxy).
 */
export function upstreamAuthorization(ctx: GatewayContext, proxy: ProxyView): string | undefined {
  const credentials = credentialsOfView(ctx.credentials, proxy);
  return credentials && proxyAuthorization(credentials);
}

/** One connection's run of the upstream policy (upstream-policy.ts) with this gateway's leases. */
export function pickUpstream<T>(
  ctx: GatewayContext,
  kind: ConnectionKind,
  target: string,
  admitted: { tenant: Tenant; options: ConnectionOptions },
  hooks: {
    isAborted: () => boolean;
    /** The lease was lost mid-connection: end it. */
    onLost: () => void;
    attempt: (proxy: ProxyView) => Promise<T>;
    /** What a carried attempt's result says of the proxy's health (default: it carried it, `ok`). */
    passive?: (result: T) => PassiveOutcome;
  },
): Promise<Carried<T> | undefined> {
  return attemptUpstream({
    kind,
    target,
    maxAttempts: ctx.settings.attempts,
    acquire: (excluded) =>
      ctx.leases.acquire(
        { target, options: admitted.options, tenant: admitted.tenant, excluded },
        hooks.onLost,
      ),
    isAborted: hooks.isAborted,
    attempt: hooks.attempt,
    metrics: ctx.metrics,
    log: ctx.log,
    traffic: ctx.traffic,
    ...(hooks.passive ? { passive: hooks.passive } : {}),
  });
}

/** A connection refused (its answer already written): counted, its span ended, one access line. */
export function recordRefused(
  ctx: GatewayContext,
  kind: ConnectionKind,
  refusal: Refusal,
  where: {
    target: string;
    started: number;
    client: string;
    admitted?: { tenant: Tenant; options: ConnectionOptions } | undefined;
    span?: TraceSpan | undefined;
    /** The SOCKS5 listener's connections say so; the HTTP listener's say nothing. */
    via?: 'socks5' | undefined;
  },
): void {
  ctx.metrics.outcome(kind, refusal.outcome);
  if (refusal.outcome === 'no_match' && where.admitted)
    ctx.demand?.noteDenied(where.admitted.options.selector, where.admitted.options.pool);
  where.span?.end(refusal.status);
  ctx.accessLog({
    ...refusedEntry(kind, where.target, refusal.status, where.started, {
      client: where.client,
      tenant: where.admitted?.tenant.name,
      session: where.admitted?.options.session,
    }),
    ...(where.via ? { via: where.via } : {}),
  });
}

/** A connection carried to its end: its bytes counted, one access line. */
export function recordCarried(
  ctx: GatewayContext,
  kind: ConnectionKind,
  carried: { lease: ConnectionLease; attempts: number },
  where: {
    target: string;
    logTarget: string;
    started: number;
    status: number;
    client: string;
    tenant: string;
    via?: 'socks5' | undefined;
  },
  bytes: { sent: number; received: number },
): void {
  const { lease, attempts } = carried;
  ctx.metrics.bytes(lease.proxy, where.target, bytes.sent, bytes.received);
  ctx.metrics.tenantConnection(where.tenant, kind);
  ctx.cost?.traffic(lease.proxy, where.tenant, bytes.sent + bytes.received);
  ctx.accessLog({
    kind,
    client: where.client,
    tenant: where.tenant,
    target: where.logTarget,
    proxy: lease.proxy.id,
    session: lease.session,
    status: where.status,
    started: where.started,
    attempts,
    sentBytes: bytes.sent,
    receivedBytes: bytes.received,
    ...(where.via ? { via: where.via } : {}),
  });
}
