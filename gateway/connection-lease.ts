/**
 * A connection's own lease (no session): taken for its target, released the
 * moment the connection ends. A connection that outlives half its TTL renews
 * it, so a long tunnel never runs on a lease that lapsed and was handed to
 * someone else; a renewal that finds the lease gone closes the connection.
 */
import type { Logger } from 'pino';
import type { Lease, LeaseStore } from '../api/lease-store.js';
import type { ProxyView } from '../api/proxy-catalog.js';
import type { ConnectionLease } from './leases.js';

/**
 * Renews a lease every half TTL (at least a second apart) until the timer
 * is cleared; `renewed` gets the lease, or null when the store no longer
 * holds it. `lease()` is read at each renewal (a session's lease changes).
 */
export function renewAtHalfTtl(
  store: LeaseStore,
  logger: Logger,
  what: string,
  ttlMs: number,
  lease: () => { id: string; ttlMs: number },
  renewed: (lease: Lease | null) => void,
): NodeJS.Timeout {
  const timer = setInterval(
    () => {
      const { id, ttlMs } = lease();
      store
        .renew(id, ttlMs)
        .then(renewed, (err: unknown) =>
          logger.warn({ err: err instanceof Error ? err.message : String(err) }, `renewing ${what} failed`),
        );
    },
    Math.max(1000, ttlMs / 2),
  );
  timer.unref();
  return timer;
}

export function connectionLease(
  store: LeaseStore,
  logger: Logger,
  taken: { proxy: ProxyView; leaseId: string; ttlMs: number },
  onLost: () => void,
): ConnectionLease {
  const { proxy, leaseId, ttlMs } = taken;
  let ended = false;
  const timer = renewAtHalfTtl(
    store,
    logger,
    'a connection lease',
    ttlMs,
    () => ({ id: leaseId, ttlMs }),
    (lease) => {
      if (!lease && !ended) {
        logger.warn({ proxy: proxy.id }, 'a connection lost its lease; closing it');
        onLost();
      }
    },
  );
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
