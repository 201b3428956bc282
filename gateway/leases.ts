/**
 * What the gateway leases, and when: every connection (a CONNECT tunnel, or
 * one plain-HTTP request) holds a lease on one Ready proxy, taken through
 * the same store and the same candidate rule (`partition`,
 * lease-candidates.ts) as the lease API, so maxLeases, cooldowns, selectors
 * and drain apply alike.
 *
 * - Without a session, a connection takes its own lease for its target (the
 *   CONNECT host or the request's host), renewed while it lasts and
 *   released the moment it ends (connection-lease.ts).
 * - With `session-<id>`, the session holds one lease shared by all its
 *   connections, which follows the session's targets and moves when its
 *   proxy can no longer serve it (session-leases.ts).
 */
import type { Logger } from 'pino';
import type { AcquireStats, LeaseStore } from '../api/lease-store.js';
import type { ProxyCatalog, ProxyView } from '../api/proxy-catalog.js';
import { connectionLease } from './connection-lease.js';
import type { Tenant } from '../tenants/tenants.js';
import type { ConnectionOptions } from './credentials.js';
import { createLeaseCandidates } from './lease-candidates.js';
import { createSessionLeases, type SessionLeases } from './session-leases.js';

export { CatalogNotSyncedError } from './lease-candidates.js';

export interface LeaseRequest {
  /** Whose connection it is: its candidates are the tenant's scope, its session the tenant's own. */
  tenant: Tenant;
  /** The lease's target: the CONNECT host or the request's host, lowercase, no port. */
  target: string;
  options: ConnectionOptions;
  /** Proxies (ids) that already failed this connection. */
  excluded: ReadonlySet<string>;
}

/** One connection's hold on a proxy. */
export interface ConnectionLease {
  readonly proxy: ProxyView;
  readonly session: string | undefined;
  /** The connection is over: its own lease is released; a session's lease lives on until its TTL. */
  done(): Promise<void>;
  /** The upstream proxy refused, timed out or rejected: cool it down for the target and let go of it. */
  failed(target: string): Promise<void>;
  /** The target answered a rate-limit status: cool the proxy down for it (a session then moves on its next use). */
  rateLimited(target: string): Promise<void>;
}

export type LeaseOutcome =
  { granted: ConnectionLease } | { granted: null; stats: AcquireStats & { unhealthy: number } };

/**
 * The headers that tell a crawler which proxy carried its connection (and
 * in which session): what it reports a ban against. Header values hold no
 * address, only the Proxy's `namespace/name`.
 */
export function identityHeaders(lease: Pick<ConnectionLease, 'proxy' | 'session'>): Record<string, string> {
  return {
    'X-Egress-Proxy': lease.proxy.id,
    ...(lease.session !== undefined ? { 'X-Egress-Session': lease.session } : {}),
  };
}

/** A fresh lease on one of the request's candidates (not one it excludes), or why none. */
export type TakeLease = (
  request: LeaseRequest,
  ttlMs: number,
) => Promise<
  | { proxy: ProxyView; leaseId: string; expiresAt: number }
  | { proxy: null; stats: AcquireStats & { unhealthy: number } }
>;

export interface GatewayLeasesOptions {
  catalog: ProxyCatalog;
  store: LeaseStore;
  logger: Logger;
  defaultTtlSeconds: number;
  /** Injected time for tests. */
  now?: () => number;
}

export interface GatewayLeases {
  acquire(request: LeaseRequest, onLost: () => void): Promise<LeaseOutcome>;
  /** A ban or rate limit reported by session (session-leases.ts, `report`). */
  reportSession: SessionLeases['report'];
  /** Sessions whose lease has not ended. */
  sessionCount(): number;
  /** Releases every session's lease and stops the timers (shutdown). */
  close(): Promise<void>;
}

export function createGatewayLeases(opts: GatewayLeasesOptions): GatewayLeases {
  const { store, logger } = opts;
  const candidates = createLeaseCandidates(opts.catalog);
  const ttlOf = (options: ConnectionOptions) => (options.ttlSeconds ?? opts.defaultTtlSeconds) * 1000;

  const takeLease: TakeLease = async (request, ttlMs) => {
    const { candidates: all, unhealthy } = candidates.of(request.options, request.tenant);
    const usable = request.excluded.size === 0 ? all : all.filter((c) => !request.excluded.has(c.id));
    const outcome = await store.acquire({ candidates: usable, target: request.target, ttlMs });
    if (!outcome.granted) return { proxy: null, stats: { ...outcome.stats, unhealthy } };
    return { proxy: outcome.candidate, leaseId: outcome.granted.id, expiresAt: outcome.granted.expiresAt };
  };

  const sessions = createSessionLeases({ store, logger, candidates, takeLease, now: opts.now ?? Date.now });

  return {
    async acquire(request, onLost) {
      const ttlMs = ttlOf(request.options);
      if (request.options.session !== undefined)
        return sessions.acquire(request, request.options.session, ttlMs, onLost);
      const taken = await takeLease(request, ttlMs);
      if (!taken.proxy) return { granted: null, stats: taken.stats };
      return {
        granted: connectionLease(
          store,
          logger,
          { proxy: taken.proxy, leaseId: taken.leaseId, ttlMs },
          onLost,
        ),
      };
    },
    reportSession: (...args) => sessions.report(...args),
    sessionCount: () => sessions.count(),
    close: () => sessions.close(),
  };
}
