/**
 * Sticky sessions (`session-<id>` in the username): the session holds one
 * lease shared by all its connections. Each connection renews it (renewed by
 * use), open ones keep renewing it, and it ends its TTL after the last use.
 * A connection to a new target takes a lease on the same proxy for that
 * target (the old one is then released), so a cooldown for that target
 * still applies: a proxy cooling down for it moves the session to another
 * proxy. A proxy that leaves the candidates (unhealthy, draining, deleted)
 * or fails an upstream attempt moves it too.
 *
 * Sessions live in this process: with several gateway replicas a session
 * is sticky per replica (the lease itself is in the shared store).
 */
import type { Logger } from 'pino';
import type { LeaseStore, ReportReceipt } from '../api/lease-store.js';
import type { ProxyView } from '../api/proxy-catalog.js';
import { KeyedMutex } from '../providers/concurrency.js';
import { renewAtHalfTtl } from './connection-lease.js';
import type { LeaseCandidates } from './lease-candidates.js';
import type { ConnectionLease, LeaseOutcome, LeaseRequest, TakeLease } from './leases.js';

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

export interface SessionLeases {
  acquire(request: LeaseRequest, sessionId: string, ttlMs: number, onLost: () => void): Promise<LeaseOutcome>;
  /**
   * A crawler reports its session's proxy `banned` or `rate_limited` for a
   * target: the cooldown is recorded against the lease, and the session lets
   * go of it, so its next connection takes a fresh lease, which avoids that
   * proxy for the target. One receipt per session of the tenant with this id
   * (one per pool and selector it used); none: no such live session.
   */
  report(
    tenant: string,
    sessionId: string,
    result: 'banned' | 'rate_limited',
    target: string,
  ): Promise<Array<ReportReceipt & { proxyId: string }>>;
  /** Sessions whose lease has not ended. */
  count(): number;
  /** Releases every session's lease and stops the timers (shutdown). */
  close(): Promise<void>;
}

interface SessionDeps {
  store: LeaseStore;
  logger: Logger;
  candidates: LeaseCandidates;
  takeLease: TakeLease;
  now: () => number;
}

/** The live sessions of this process, by session id, pool and selector, and what they need. */
interface SessionTable extends SessionDeps {
  sessions: Map<string, Session>;
}

export function createSessionLeases(deps: SessionDeps): SessionLeases {
  const table: SessionTable = { ...deps, sessions: new Map() };
  const { sessions, now } = table;
  const sessionLocks = new KeyedMutex();

  // Sessions whose lease ended with no connection open are forgotten; only memory depends on this.
  const sweep = setInterval(() => {
    const t = now();
    for (const session of sessions.values()) {
      if (session.attached.size === 0 && session.expiresAt <= t) sessions.delete(session.key);
    }
  }, 10_000);
  sweep.unref();

  return {
    acquire(request, sessionId, ttlMs, onLost) {
      // A tenant's sessions are its own: another tenant with the same id gets a session of its own.
      const key = `${request.tenant.name}\n${sessionId}\n${request.options.pool ?? ''}\n${request.options.selector.map(([k, v]) => `${k}=${v}`).join('\n')}`;
      return sessionLocks.run(key, () => acquireLocked(table, key, sessionId, request, ttlMs, onLost));
    },
    async report(tenant, sessionId, result, target) {
      const prefix = `${tenant}\n${sessionId}\n`;
      const t = now();
      const matched = [...sessions.values()].filter((s) => s.key.startsWith(prefix) && s.expiresAt > t);
      const receipts: Array<ReportReceipt & { proxyId: string }> = [];
      for (const session of matched) {
        await sessionLocks.run(session.key, async () => {
          if (!isCurrent(table, session)) return;
          const receipt = await table.store.reportWithReceipt(session.leaseId, result, target);
          receipts.push({ ...receipt, proxyId: session.proxy.id });
          forget(table, session);
          await table.store.release(session.leaseId);
        });
      }
      return receipts;
    },
    count() {
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
      await Promise.all(all.map((s) => table.store.release(s.leaseId).catch(() => undefined)));
    },
  };
}

/** Under the session's lock: its current lease if it may still serve the request, else a fresh one. */
async function acquireLocked(
  table: SessionTable,
  key: string,
  sessionId: string,
  request: LeaseRequest,
  ttlMs: number,
  onLost: () => void,
): Promise<LeaseOutcome> {
  const existing = table.sessions.get(key);
  if (existing) {
    if (existing.ttlMs !== ttlMs) existing.ttlMs = ttlMs;
    if (await reuse(table, existing, request)) return { granted: sessionLease(table, existing, onLost) };
    await dropSession(table, existing);
  }
  const taken = await table.takeLease(request, ttlMs);
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
  table.sessions.set(key, session);
  return { granted: sessionLease(table, session, onLost) };
}

/** Keeps the session on its proxy if it may still be used for this target; false: start over. */
async function reuse(table: SessionTable, session: Session, request: LeaseRequest): Promise<boolean> {
  const current = table.candidates.still(session.proxy, request.options, request.tenant);
  if (!current || request.excluded.has(session.proxy.id) || session.expiresAt <= table.now()) return false;
  session.proxy = current;
  if (request.target === session.target) return renew(table, session);
  // A new target: a lease on the same proxy for it, so its cooldowns are checked.
  const outcome = await table.store.acquire({
    candidates: [current],
    target: request.target,
    ttlMs: session.ttlMs,
  });
  if (outcome.granted) {
    const old = session.leaseId;
    session.leaseId = outcome.granted.id;
    session.target = request.target;
    session.expiresAt = outcome.granted.expiresAt;
    await table.store.release(old);
    return true;
  }
  // Cooling down for this target: move. At capacity (our own slot counts): keep the lease, renewed.
  if (outcome.stats.inCooldown > 0) return false;
  return renew(table, session);
}

async function renew(table: SessionTable, session: Session): Promise<boolean> {
  const lease = await table.store.renew(session.leaseId, session.ttlMs);
  if (!lease) return false;
  session.expiresAt = lease.expiresAt;
  return true;
}

/** One connection's use of the session; while any is attached, the session's lease is renewed. */
function sessionLease(table: SessionTable, session: Session, onLost: () => void): ConnectionLease {
  const { store } = table;
  // A handler per connection (a function identity of its own, so one connection detaches only itself).
  const lost = () => onLost();
  session.attached.add(lost);
  session.timer ??= renewAtHalfTtl(
    store,
    table.logger,
    'a session lease',
    session.ttlMs,
    () => ({ id: session.leaseId, ttlMs: session.ttlMs }),
    (lease) => {
      if (lease) session.expiresAt = lease.expiresAt;
      else lostLease(table, session);
    },
  );
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
      if (!isCurrent(table, session)) return;
      try {
        await store.report(session.leaseId, 'rate_limited', target);
      } finally {
        await dropSession(table, session);
      }
    },
    async rateLimited(target) {
      if (!isCurrent(table, session)) return;
      await store.report(session.leaseId, 'rate_limited', target);
      // Its next connection takes a fresh lease, which avoids this proxy for the target.
      forget(table, session);
      await store.release(session.leaseId);
    },
  };
}

const isCurrent = (table: SessionTable, session: Session) => table.sessions.get(session.key) === session;

function forget(table: SessionTable, session: Session): void {
  table.sessions.delete(session.key);
  stopRenewing(session);
}

/** Forgets the session and lets go of its lease (a no-op when it was already replaced). */
async function dropSession(table: SessionTable, session: Session): Promise<void> {
  if (!isCurrent(table, session)) return;
  forget(table, session);
  await table.store.release(session.leaseId);
}

/** The store no longer holds the session's lease: every connection on it is closed. */
function lostLease(table: SessionTable, session: Session): void {
  if (!isCurrent(table, session)) return;
  forget(table, session);
  table.logger.warn({ proxy: session.proxy.id }, 'a session lost its lease; closing its connections');
  for (const handler of [...session.attached]) handler();
}

function stopRenewing(session: Session): void {
  if (session.timer) clearInterval(session.timer);
  session.timer = undefined;
}
