/**
 * What the gateway leases, and when: every connection (a CONNECT tunnel, or
 * one plain-HTTP request) holds a lease on one Ready proxy, taken through
 * the same store and the same candidate rule (`partition`) as the lease
 * API, so maxLeases, cooldowns, selectors and drain apply alike.
 *
 * - Without a session, a connection takes its own lease (its target: the
 *   CONNECT host or the request's host) and releases it the moment it ends.
 *   A connection that outlives half its TTL renews it (store.renew), so a
 *   long tunnel never runs on a lease that lapsed and was handed to someone
 *   else; a renewal that finds the lease gone closes the connection.
 * - With `session-<id>`, the session holds one lease shared by all its
 *   connections: each connection renews it (renewed by use), open ones keep
 *   renewing it, and it ends its TTL after the last use. A connection to a
 *   new target takes a lease on the same proxy for that target (the old one
 *   is then released), so a cooldown for that target still applies: a
 *   proxy cooling down for it moves the session to another proxy. A proxy
 *   that leaves the candidates (unhealthy, draining, deleted) or fails an
 *   upstream attempt moves it too.
 *
 * Sessions live in this process: with several gateway replicas a session
 * is sticky per replica (the lease itself is in the shared store).
 */
import type { Logger } from 'pino';
import type { AcquireStats, LeaseStore } from '../api/lease-store.js';
import type { ProxyCatalog, ProxyView } from '../api/proxy-catalog.js';
import { partition } from '../api/routes/selection.js';
import { KeyedMutex } from '../providers/concurrency.js';
import type { ConnectionOptions } from './credentials.js';

/** The Proxy catalog has not loaded yet: the gateway answers 503 (as the lease API does). */
export class CatalogNotSyncedError extends Error {
  override name = 'CatalogNotSyncedError';
  constructor() {
    super('the gateway has not loaded the Proxies yet; retry shortly');
  }
}

export interface LeaseRequest {
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

export interface GatewayLeasesOptions {
  catalog: ProxyCatalog;
  store: LeaseStore;
  logger: Logger;
  defaultTtlSeconds: number;
  /** Injected time for tests. */
  now?: () => number;
}

interface Session {
  key: string;
  id: string;
  proxy: ProxyView;
  leaseId: string;
  target: string;
  ttlMs: number;
  expiresAt: number;
  /** Open connections using the session (their lost-lease handlers); while any, a timer renews the lease. */
  attached: Set<() => void>;
  timer: NodeJS.Timeout | undefined;
}

export interface GatewayLeases {
  acquire(request: LeaseRequest, onLost: () => void): Promise<LeaseOutcome>;
  /** Sessions whose lease has not ended. */
  sessionCount(): number;
  /** Releases every session's lease and stops the timers (shutdown). */
  close(): Promise<void>;
}

export function createGatewayLeases(opts: GatewayLeasesOptions): GatewayLeases {
  const { catalog, store, logger } = opts;
  const now = opts.now ?? Date.now;
  const sessions = new Map<string, Session>();
  const sessionLocks = new KeyedMutex();

  // Candidates depend on the catalog snapshot and the selector only; the
  // catalog hands out the same array until something changes, so a small
  // cache keyed by selector is dropped whenever the array does.
  let cachedFor: readonly ProxyView[] | undefined;
  const cache = new Map<string, ReturnType<typeof partition>>();
  const candidatesFor = (selector: ConnectionOptions['selector'], pool: string | undefined) => {
    if (!catalog.synced()) throw new CatalogNotSyncedError();
    const views = catalog.list();
    if (views !== cachedFor) {
      cache.clear();
      cachedFor = views;
    }
    const key = `${pool ?? ''}\u0000${selector.map(([k, v]) => `${k}=${v}`).join('\n')}`;
    let found = cache.get(key);
    if (!found) {
      found = partition(views, selector, pool);
      // Bounded: crawler-chosen selectors must not grow it without end.
      if (cache.size > 256) cache.clear();
      cache.set(key, found);
    }
    return found;
  };

  const stillCandidate = (proxy: ProxyView, options: ConnectionOptions): ProxyView | undefined =>
    candidatesFor(options.selector, options.pool).candidates.find(
      (c) => c.id === proxy.id && c.uid === proxy.uid,
    );

  const ttlOf = (options: ConnectionOptions) => (options.ttlSeconds ?? opts.defaultTtlSeconds) * 1000;

  const warnOnce = (what: string) => (err: unknown) =>
    logger.warn({ err: err instanceof Error ? err.message : String(err) }, what);

  async function takeLease(
    request: LeaseRequest,
    ttlMs: number,
  ): Promise<
    | { proxy: ProxyView; leaseId: string; expiresAt: number }
    | { proxy: null; stats: AcquireStats & { unhealthy: number } }
  > {
    const { candidates, unhealthy } = candidatesFor(request.options.selector, request.options.pool);
    const usable =
      request.excluded.size === 0 ? candidates : candidates.filter((c) => !request.excluded.has(c.id));
    const outcome = await store.acquire({ candidates: usable, target: request.target, ttlMs });
    if (!outcome.granted) return { proxy: null, stats: { ...outcome.stats, unhealthy } };
    return {
      proxy: outcome.candidate,
      leaseId: outcome.granted.id,
      expiresAt: outcome.granted.expiresAt,
    };
  }

  /** A connection's own lease, renewed at half its TTL while the connection lasts. */
  function ownLease(proxy: ProxyView, leaseId: string, ttlMs: number, onLost: () => void): ConnectionLease {
    let ended = false;
    const timer = setInterval(
      () => {
        store.renew(leaseId, ttlMs).then((lease) => {
          if (!lease && !ended) {
            logger.warn({ proxy: proxy.id }, 'a connection lost its lease; closing it');
            onLost();
          }
        }, warnOnce('renewing a connection lease failed'));
      },
      Math.max(1000, ttlMs / 2),
    );
    timer.unref();
    const end = () => {
      if (ended) return false;
      ended = true;
      clearInterval(timer);
      return true;
    };
    return {
      proxy,
      session: undefined,
      async done() {
        if (end()) await store.release(leaseId);
      },
      async failed(target) {
        if (!end()) return;
        try {
          await store.report(leaseId, 'rate_limited', target);
        } finally {
          await store.release(leaseId);
        }
      },
      async rateLimited(target) {
        // Reported while the lease is still held (a released lease is forgotten).
        if (!ended) await store.report(leaseId, 'rate_limited', target);
      },
    };
  }

  function stopRenewing(session: Session): void {
    if (session.timer) clearInterval(session.timer);
    session.timer = undefined;
  }

  /** Forgets the session and lets go of its lease (a no-op when it was already replaced). */
  async function dropSession(session: Session): Promise<void> {
    if (sessions.get(session.key) !== session) return;
    sessions.delete(session.key);
    stopRenewing(session);
    await store.release(session.leaseId);
  }

  function sessionLease(session: Session, onLost: () => void): ConnectionLease {
    // A handler per connection (a function identity of its own, so one connection detaches only itself).
    const lost = () => onLost();
    session.attached.add(lost);
    if (!session.timer) {
      session.timer = setInterval(
        () => {
          store.renew(session.leaseId, session.ttlMs).then((lease) => {
            if (lease) {
              session.expiresAt = lease.expiresAt;
            } else if (sessions.get(session.key) === session) {
              sessions.delete(session.key);
              stopRenewing(session);
              logger.warn({ proxy: session.proxy.id }, 'a session lost its lease; closing its connections');
              for (const handler of [...session.attached]) handler();
            }
          }, warnOnce('renewing a session lease failed'));
        },
        Math.max(1000, session.ttlMs / 2),
      );
      session.timer.unref();
    }
    const detach = () => {
      session.attached.delete(lost);
      if (session.attached.size === 0) stopRenewing(session);
    };
    return {
      proxy: session.proxy,
      session: session.id,
      done() {
        detach();
        return Promise.resolve();
      },
      async failed(target) {
        detach();
        if (sessions.get(session.key) !== session) return;
        try {
          await store.report(session.leaseId, 'rate_limited', target);
        } finally {
          await dropSession(session);
        }
      },
      async rateLimited(target) {
        if (sessions.get(session.key) !== session) return;
        await store.report(session.leaseId, 'rate_limited', target);
        // Its next connection takes a fresh lease, which avoids this proxy for the target.
        sessions.delete(session.key);
        stopRenewing(session);
        await store.release(session.leaseId);
      },
    };
  }

  /** Keeps the session on its proxy if it may still be used for this target; false: start over. */
  async function reuse(session: Session, request: LeaseRequest): Promise<boolean> {
    const current = stillCandidate(session.proxy, request.options);
    if (!current || request.excluded.has(session.proxy.id) || session.expiresAt <= now()) return false;
    session.proxy = current;
    if (request.target === session.target) {
      const lease = await store.renew(session.leaseId, session.ttlMs);
      if (!lease) return false;
      session.expiresAt = lease.expiresAt;
      return true;
    }
    // A new target: a lease on the same proxy for it, so its cooldowns are checked.
    const outcome = await store.acquire({
      candidates: [current],
      target: request.target,
      ttlMs: session.ttlMs,
    });
    if (outcome.granted) {
      const old = session.leaseId;
      session.leaseId = outcome.granted.id;
      session.target = request.target;
      session.expiresAt = outcome.granted.expiresAt;
      await store.release(old);
      return true;
    }
    // Cooling down for this target: move. At capacity (our own slot counts): keep the lease, renewed.
    if (outcome.stats.inCooldown > 0) return false;
    const lease = await store.renew(session.leaseId, session.ttlMs);
    if (!lease) return false;
    session.expiresAt = lease.expiresAt;
    return true;
  }

  async function acquireForSession(request: LeaseRequest, sessionId: string, onLost: () => void) {
    const ttlMs = ttlOf(request.options);
    const key = `${sessionId}\n${request.options.pool ?? ''}\n${request.options.selector.map(([k, v]) => `${k}=${v}`).join('\n')}`;
    return sessionLocks.run(key, async (): Promise<LeaseOutcome> => {
      const existing = sessions.get(key);
      if (existing) {
        if (existing.ttlMs !== ttlMs) existing.ttlMs = ttlMs;
        if (await reuse(existing, request)) return { granted: sessionLease(existing, onLost) };
        await dropSession(existing);
      }
      const taken = await takeLease(request, ttlMs);
      if (!taken.proxy) return { granted: null, stats: taken.stats };
      const session: Session = {
        key,
        id: sessionId,
        proxy: taken.proxy,
        leaseId: taken.leaseId,
        target: request.target,
        ttlMs,
        expiresAt: taken.expiresAt,
        attached: new Set(),
        timer: undefined,
      };
      sessions.set(key, session);
      return { granted: sessionLease(session, onLost) };
    });
  }

  // Sessions whose lease ended with no connection open are forgotten; only memory depends on this.
  const sweep = setInterval(() => {
    const t = now();
    for (const session of sessions.values()) {
      if (session.attached.size === 0 && session.expiresAt <= t) sessions.delete(session.key);
    }
  }, 10_000);
  sweep.unref();

  return {
    async acquire(request, onLost) {
      if (request.options.session !== undefined)
        return acquireForSession(request, request.options.session, onLost);
      const ttlMs = ttlOf(request.options);
      const taken = await takeLease(request, ttlMs);
      if (!taken.proxy) return { granted: null, stats: taken.stats };
      return { granted: ownLease(taken.proxy, taken.leaseId, ttlMs, onLost) };
    },
    sessionCount() {
      const t = now();
      let n = 0;
      for (const s of sessions.values()) if (s.expiresAt > t) n++;
      return n;
    },
    async close() {
      clearInterval(sweep);
      const all = [...sessions.values()];
      for (const session of all) stopRenewing(session);
      sessions.clear();
      await Promise.all(all.map((s) => store.release(s.leaseId).catch(() => undefined)));
    },
  };
}
