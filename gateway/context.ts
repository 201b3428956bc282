/**
 * What the CONNECT and plain-HTTP handlers share, built once per gateway by
 * createGateway (server.ts), and the steps both take the same way: running
 * the upstream policy for a connection, and recording how it ended
 * (metrics, span, access log).
 */
import type { Logger } from 'pino';
import type { ProxyView } from '../api/proxy-catalog.js';
import type { TraceHook, TraceSpan } from '../tracing/http.js';
import { refusedEntry, type AccessLog } from './access-log.js';
import type { GatewayOptions } from './config.js';
import type { EgressPolicy } from '../forwarding/egress-policy.js';
import type { ConnectionOptions } from './credentials.js';
import type { DestinationResolver } from './destination.js';
import type { ConnectionLease, GatewayLeases } from './leases.js';
import type { ConnectionKind, GatewayMetrics } from './metrics.js';
import type { Refusal } from './refusal.js';
import { attemptUpstream, type Carried } from './upstream-policy.js';
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
>;

export interface GatewayContext {
  settings: GatewaySettings;
  /** The API token as bytes (empty: no token required). */
  token: Buffer;
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
  /** Counts open tunnels and plain-HTTP requests in flight. */
  carrying: { opened(): void; closed(): void };
}

/** One connection's run of the upstream policy (upstream-policy.ts) with this gateway's leases. */
export function pickUpstream<T>(
  ctx: GatewayContext,
  kind: ConnectionKind,
  target: string,
  options: ConnectionOptions,
  hooks: {
    isAborted: () => boolean;
    /** The lease was lost mid-connection: end it. */
    onLost: () => void;
    attempt: (proxy: ProxyView) => Promise<T>;
  },
): Promise<Carried<T> | undefined> {
  return attemptUpstream({
    kind,
    target,
    maxAttempts: ctx.settings.attempts,
    acquire: (excluded) => ctx.leases.acquire({ target, options, excluded }, hooks.onLost),
    isAborted: hooks.isAborted,
    attempt: hooks.attempt,
    metrics: ctx.metrics,
    log: ctx.log,
  });
}

/** A connection refused (its answer already written): counted, its span ended, one access line. */
export function recordRefused(
  ctx: GatewayContext,
  kind: ConnectionKind,
  refusal: Refusal,
  where: { target: string; started: number; session: string | undefined; span?: TraceSpan | undefined },
): void {
  ctx.metrics.outcome(kind, refusal.outcome);
  where.span?.end(refusal.status);
  ctx.accessLog(refusedEntry(kind, where.target, refusal.status, where.started, where.session));
}

/** A connection carried to its end: its bytes counted, one access line. */
export function recordCarried(
  ctx: GatewayContext,
  kind: ConnectionKind,
  carried: { lease: ConnectionLease; attempts: number },
  where: { target: string; logTarget: string; started: number; status: number },
  bytes: { sent: number; received: number },
): void {
  const { lease, attempts } = carried;
  ctx.metrics.bytes(lease.proxy.id, where.target, bytes.sent, bytes.received);
  ctx.accessLog({
    kind,
    target: where.logTarget,
    proxy: lease.proxy.id,
    session: lease.session,
    status: where.status,
    started: where.started,
    attempts,
    sentBytes: bytes.sent,
    receivedBytes: bytes.received,
  });
}
