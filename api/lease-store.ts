/**
 * Lease state: which proxy slots are taken, until when, and which
 * (proxy, target) pairs are cooling down after a bad report.
 *
 * `LeaseStore` is the seam between the API and where that state lives, so
 * its methods return promises: `MemoryLeaseStore` (here, one process, the
 * default) and `RedisLeaseStore` (api/redis-lease-store.ts, shared by every
 * replica). `MemoryLeaseStore`: every method body runs synchronously to
 * completion before its promise settles, so selection and insertion in
 * `acquire` form one critical section on Node's single thread. Keep it that
 * way: an `await` between choosing a proxy and recording the lease would let
 * concurrent requests overcommit a proxy.
 *
 * Nothing here depends on the expiry sweep for correctness: every read
 * compares against the clock. The sweep only bounds memory.
 */
import { randomFillSync } from 'node:crypto';

/** Milliseconds since the Unix epoch. Injected so tests can move time. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export const REPORT_RESULTS = ['ok', 'rate_limited', 'banned'] as const;
export type ReportResult = (typeof REPORT_RESULTS)[number];

export const DEFAULT_LEASE_COOLDOWN_MS = 15 * 60_000;
export const DEFAULT_SWEEP_INTERVAL_MS = 30_000;

/**
 * One leasable proxy as the caller sees it when asking for a lease. The
 * store hands the chosen object back, so callers can pass their own richer
 * records (the API passes its ProxyView objects as they are).
 */
export interface Candidate {
  /** `namespace/name`: the selection's last tie-break. */
  id: string;
  /**
   * The Proxy's metadata.uid when known: state is kept under it (see
   * `storeKey`), so a deleted-and-recreated Proxy never inherits its
   * predecessor's slots or cooldowns.
   */
  uid?: string;
  /** Concurrent lease capacity; 0 means the proxy is never leased. */
  maxLeases: number;
  /** Last probe latency; the second selection key. */
  latencyMillis: number;
}

export interface AcquireRequest<C extends Candidate = Candidate> {
  /** Healthy, selector-matching proxies. Selection happens inside the store. */
  candidates: readonly C[];
  /** Site the lease is for; '' means none (only global cooldowns apply). */
  target: string;
  ttlMs: number;
}

/**
 * Why each candidate did or did not get the lease. The four counts always
 * add up to `considered`, minus the one granted candidate on success:
 * `considered = inCooldown + atCapacity + outranked + (granted ? 1 : 0)`.
 * A cooldown is checked before capacity, so a proxy that is both counts once,
 * as `inCooldown`.
 */
export interface AcquireStats {
  /**
   * Candidates examined. Always every candidate when nothing is granted; on
   * a grant both stores stop at the first candidate no later one can beat
   * (an eligible one with no lease, in `selectionOrder`), and `considered`
   * then counts those examined.
   */
  considered: number;
  inCooldown: number;
  atCapacity: number;
  /** Eligible but beaten by the chosen proxy (always 0 when nothing is granted). */
  outranked: number;
}

export interface Lease {
  id: string;
  /** The proxy's store key (`storeKey`). */
  proxy: string;
  target: string;
  /** Epoch milliseconds. */
  expiresAt: number;
}

export type AcquireOutcome<C extends Candidate = Candidate> =
  | { granted: Lease; candidate: C; activeLeases: number; stats: AcquireStats }
  | { granted: null; stats: AcquireStats };

/**
 * `cooldown`: a rate_limited/banned report started a cooldown.
 * `acknowledged`: an `ok` report, nothing recorded.
 * `unknown_lease`: the id was never issued, was released, or expired more
 * than one cooldown window ago.
 */
export type ReportOutcome = 'cooldown' | 'acknowledged' | 'unknown_lease';

/** A report's outcome, and for a cooldown the proxy (store key) and target it was recorded for. */
export interface ReportReceipt {
  outcome: ReportOutcome;
  proxy?: string;
  target?: string;
}

/** The key a store keeps a proxy's state under: its UID, or its id when it has none (fixtures). */
export function storeKey(c: { id: string; uid?: string }): string {
  return c.uid || c.id;
}

/**
 * The store cannot answer right now (Redis unreachable, a command timed
 * out): the API answers 503 `unavailable`. Thrown only when the outcome is
 * unknown to the caller, never after a slot was handed out in its reply.
 */
export class LeaseStoreUnavailableError extends Error {
  override name = 'LeaseStoreUnavailableError';
}

/**
 * What a gateway process saw that a ProxyPool's demand counts (a `banned`
 * report by session, a refused connection), passed through a shared store
 * to the api replicas, which send the pools their reports: a standalone
 * gateway has no Temporal connection of its own.
 */
export type PoolEvent =
  | { kind: 'banned'; proxy: string; target: string }
  | { kind: 'denied'; selector: Array<[string, string]>; pool?: string };

/**
 * What a gateway saw of one proxy's traffic over a short window, for the
 * prober's passive health (prober/traffic.ts): successes, and the failures
 * that are the proxy's own (it refused, did not answer the TCP connect,
 * closed before answering, refused its credentials) since the last success.
 * `uid`, `host` and `port` say which instance carried it: a report about an
 * earlier address is dropped. The message is the gateway's own text (no
 * address, no credentials).
 */
export interface TrafficReport {
  /** `namespace/name`. */
  proxy: string;
  uid: string;
  host: string;
  port: number;
  /** Exchanges the proxy carried in the window. */
  ok: number;
  /** Failures after the window's last success (all of them when there was none). */
  failures: number;
  /** Of the last failure: a probe failure reason (ConnectFailed, ConnectTimeout, ProtocolError, AuthFailed). */
  reason?: string;
  message?: string;
}

export interface LeaseStore {
  /** Shared stores only: queue traffic reports for the probing api replica (bounded; the oldest go first). */
  postTraffic?(reports: readonly TrafficReport[]): Promise<void>;
  /** Shared stores only: take up to `max` queued traffic reports, each given to one taker. */
  takeTraffic?(max: number): Promise<TrafficReport[]>;
  /** Shared stores only: queue a pool event for whichever api replica takes it next (bounded; the oldest go first). */
  postPoolEvent?(event: PoolEvent): Promise<void>;
  /** Shared stores only: take up to `max` queued pool events, each given to one taker. */
  takePoolEvents?(max: number): Promise<PoolEvent[]>;
  acquire<C extends Candidate>(req: AcquireRequest<C>): Promise<AcquireOutcome<C>>;
  /** Forgets the lease (a later report is `unknown_lease`); idempotent, unknown ids are a no-op. */
  release(id: string): Promise<void>;
  /**
   * Extends a lease that still holds its slot to `ttlMs` from now (the
   * gateway renews the leases of open tunnels and live sessions). Null when
   * the lease ended, was released or was never issued: its slot may already
   * be someone else's, so the caller must not go on using the proxy as if
   * it held one.
   */
  renew(id: string, ttlMs: number): Promise<Lease | null>;
  /** `target` '' falls back to the lease's own target, then to the global pool. */
  report(id: string, result: ReportResult, target: string): Promise<ReportOutcome>;
  /** `report`, also saying which proxy and target a cooldown was recorded for (a pool's ban tally). */
  reportWithReceipt(id: string, result: ReportResult, target: string): Promise<ReportReceipt>;
  /** Unexpired, unreleased leases per proxy store key (`storeKey`); proxies with none are absent. */
  activeCounts(): Promise<ReadonlyMap<string, number>>;
  /** Per proxy store key, the targets ('' = every target) cooling down on it now; the memory store's (the dashboard's column). */
  coolingCounts?(): Promise<ReadonlyMap<string, number>>;
  /** Releases what the store holds open (connections, timers). */
  close?(): Promise<void>;
}

interface LeaseRecord {
  readonly id: string;
  readonly proxy: string;
  readonly target: string;
  /** When the lease stops holding a slot (its TTL); reportable until one cooldown window later. */
  readonly endsAt: number;
}

const GLOBAL = '';
const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';

const ID_LENGTH = 26;
// One CSPRNG call per 157 ids instead of one per id.
const pool = Buffer.alloc(ID_LENGTH * 157);
let poolOffset = pool.length;

/** 26 characters of RFC 4648 base32, 130 random bits: the seed's lease ID shape. */
export function newLeaseId(): string {
  if (poolOffset + ID_LENGTH > pool.length) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  let out = '';
  // 256 is a multiple of 32, so taking the low five bits is unbiased.
  for (let i = 0; i < ID_LENGTH; i++) out += BASE32[pool[poolOffset + i]! & 31];
  poolOffset += ID_LENGTH;
  return out;
}

export interface MemoryLeaseStoreOptions {
  clock?: Clock;
  /** How long a rate_limited/banned report blocks the (proxy, target) pair; also how long an expired lease stays reportable. */
  cooldownMs?: number;
  newId?: () => string;
}

export class MemoryLeaseStore implements LeaseStore {
  readonly cooldownMs: number;
  private readonly clock: Clock;
  private readonly newId: () => string;
  /** Every lease still reportable (unreleased, and expired less than one cooldown window ago), by id. */
  private readonly leases = new Map<string, LeaseRecord>();
  /** Per proxy, the leases that may still hold a slot; ended ones are pruned when read. */
  private readonly holding = new Map<string, Set<LeaseRecord>>();
  /** Per proxy, per target ('' = global), the end of the cooldown. */
  private readonly cooldowns = new Map<string, Map<string, number>>();
  /**
   * Candidate lists in selection order, by the caller's array identity: the
   * API hands the same array until its catalog changes, so the sort runs
   * once per change, not per acquire.
   */
  private readonly orderFor = new WeakMap<readonly Candidate[], readonly Candidate[]>();

  constructor(options: MemoryLeaseStoreOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.cooldownMs = options.cooldownMs ?? DEFAULT_LEASE_COOLDOWN_MS;
    this.newId = options.newId ?? newLeaseId;
    if (!(this.cooldownMs > 0)) throw new RangeError(`cooldownMs must be positive, got ${this.cooldownMs}`);
  }

  acquire<C extends Candidate>(req: AcquireRequest<C>): Promise<AcquireOutcome<C>> {
    return Promise.resolve(this.acquireNow(req));
  }

  release(id: string): Promise<void> {
    this.releaseNow(id);
    return Promise.resolve();
  }

  renew(id: string, ttlMs: number): Promise<Lease | null> {
    return Promise.resolve(this.renewNow(id, ttlMs));
  }

  report(id: string, result: ReportResult, target: string): Promise<ReportOutcome> {
    return Promise.resolve(this.reportNow(id, result, target));
  }

  reportWithReceipt(id: string, result: ReportResult, target: string): Promise<ReportReceipt> {
    const outcome = this.reportNow(id, result, target);
    const record = this.leases.get(id);
    if (outcome !== 'cooldown' || !record) return Promise.resolve({ outcome });
    return Promise.resolve({ outcome, proxy: record.proxy, target: target !== '' ? target : record.target });
  }

  activeCounts(): Promise<ReadonlyMap<string, number>> {
    return Promise.resolve(this.activeCountsNow());
  }

  coolingCounts(): Promise<ReadonlyMap<string, number>> {
    const now = this.clock.now();
    const out = new Map<string, number>();
    for (const [key, targets] of this.cooldowns) {
      let n = 0;
      for (const until of targets.values()) if (until > now) n++;
      if (n > 0) out.set(key, n);
    }
    return Promise.resolve(out);
  }

  /** The critical section: choose and record in one synchronous pass. */
  acquireNow<C extends Candidate>(req: AcquireRequest<C>): AcquireOutcome<C> {
    if (!Number.isFinite(req.ttlMs) || req.ttlMs <= 0)
      throw new RangeError(`ttlMs must be positive, got ${req.ttlMs}`);
    const now = this.clock.now();
    const { target } = req;
    const candidates = this.ordered(req.candidates);
    const stats: AcquireStats = { considered: 0, inCooldown: 0, atCapacity: 0, outranked: 0 };
    // Candidates come in selection order, so among equally loaded proxies the
    // first wins and an eligible proxy with no lease ends the search: with
    // free capacity an acquire reads a handful of the 10,000, not all of them.
    const anyCooldown = this.cooldowns.size > 0;
    const anyHeld = this.holding.size > 0;
    let best: C | undefined;
    let bestActive = 0;
    let eligible = 0;
    let examined = 0;
    while (examined < candidates.length) {
      const c = candidates[examined++]!;
      const key = storeKey(c);
      if (anyCooldown && this.inCooldown(key, target, now)) {
        stats.inCooldown++;
        continue;
      }
      const active = anyHeld ? this.activeCount(key, now) : 0;
      if (active >= c.maxLeases) {
        stats.atCapacity++;
        continue;
      }
      eligible++;
      if (best === undefined || active < bestActive) {
        best = c;
        bestActive = active;
        if (active === 0) break;
      }
    }
    stats.considered = examined;
    if (best === undefined) return { granted: null, stats };
    stats.outranked = eligible - 1;

    const record: LeaseRecord = { id: this.newId(), proxy: storeKey(best), target, endsAt: now + req.ttlMs };
    this.leases.set(record.id, record);
    let set = this.holding.get(record.proxy);
    if (!set) this.holding.set(record.proxy, (set = new Set<LeaseRecord>()));
    set.add(record);
    return { granted: toLease(record), candidate: best, activeLeases: bestActive + 1, stats };
  }

  /**
   * Frees the slot and forgets the lease, as the seed's `Release` did
   * (`dropLocked`): only an expired lease stays reportable, so a crawler
   * reports before it releases.
   */
  releaseNow(id: string): void {
    const record = this.leases.get(id);
    if (record) this.forget(record);
  }

  renewNow(id: string, ttlMs: number): Lease | null {
    if (!Number.isFinite(ttlMs) || ttlMs <= 0) throw new RangeError(`ttlMs must be positive, got ${ttlMs}`);
    const now = this.clock.now();
    const record = this.leases.get(id);
    if (!record || record.endsAt <= now) return null;
    // Records are immutable (the holding sets key on them): swap in a new one.
    const renewed: LeaseRecord = { ...record, endsAt: now + ttlMs };
    this.unhold(record);
    this.leases.set(id, renewed);
    let set = this.holding.get(renewed.proxy);
    if (!set) this.holding.set(renewed.proxy, (set = new Set<LeaseRecord>()));
    set.add(renewed);
    return toLease(renewed);
  }

  reportNow(id: string, result: ReportResult, target: string): ReportOutcome {
    const now = this.clock.now();
    const record = this.leases.get(id);
    if (!record) return 'unknown_lease';
    if (now > record.endsAt + this.cooldownMs) {
      this.forget(record);
      return 'unknown_lease';
    }
    if (result === 'ok') return 'acknowledged';
    const key = target !== '' ? target : record.target;
    let byTarget = this.cooldowns.get(record.proxy);
    if (!byTarget) this.cooldowns.set(record.proxy, (byTarget = new Map<string, number>()));
    byTarget.set(key, now + this.cooldownMs);
    return 'cooldown';
  }

  activeCountsNow(): Map<string, number> {
    const now = this.clock.now();
    const counts = new Map<string, number>();
    for (const proxy of [...this.holding.keys()]) {
      const n = this.activeCount(proxy, now);
      if (n > 0) counts.set(proxy, n);
    }
    return counts;
  }

  /** Sum of active leases over all proxies. */
  activeTotalNow(): number {
    let total = 0;
    for (const n of this.activeCountsNow().values()) total += n;
    return total;
  }

  /** Drops leases past their reporting window and elapsed cooldowns. Memory only; never needed for correctness. */
  sweep(): void {
    const now = this.clock.now();
    for (const record of this.leases.values()) {
      if (now > record.endsAt + this.cooldownMs) this.forget(record);
    }
    for (const [proxy, byTarget] of this.cooldowns) {
      for (const [target, until] of byTarget) if (until <= now) byTarget.delete(target);
      if (byTarget.size === 0) this.cooldowns.delete(proxy);
    }
    for (const proxy of [...this.holding.keys()]) this.activeCount(proxy, now);
  }

  /** Runs `sweep` on an unref'd timer; returns the function that stops it. */
  startSweeping(intervalMs = DEFAULT_SWEEP_INTERVAL_MS): () => void {
    const timer = setInterval(() => this.sweep(), intervalMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  private ordered<C extends Candidate>(candidates: readonly C[]): readonly C[] {
    let order = this.orderFor.get(candidates);
    if (!order) this.orderFor.set(candidates, (order = [...candidates].sort(selectionOrder)));
    return order as readonly C[];
  }

  /** Number of lease records kept (active, or expired and still reportable); for tests and memory accounting. */
  get retainedLeases(): number {
    return this.leases.size;
  }

  private activeCount(proxy: string, now: number): number {
    const set = this.holding.get(proxy);
    if (!set) return 0;
    for (const record of set) if (record.endsAt <= now) set.delete(record);
    if (set.size === 0) this.holding.delete(proxy);
    return set.size;
  }

  /** A global cooldown blocks every request; a targeted one only requests for that target. */
  private inCooldown(proxy: string, target: string, now: number): boolean {
    const byTarget = this.cooldowns.get(proxy);
    if (!byTarget) return false;
    const global = byTarget.get(GLOBAL);
    if (global !== undefined && now < global) return true;
    if (target === GLOBAL) return false;
    const until = byTarget.get(target);
    return until !== undefined && now < until;
  }

  private unhold(record: LeaseRecord): void {
    const set = this.holding.get(record.proxy);
    if (!set) return;
    set.delete(record);
    if (set.size === 0) this.holding.delete(record.proxy);
  }

  private forget(record: LeaseRecord): void {
    this.leases.delete(record.id);
    this.unhold(record);
  }
}

/**
 * Selection order among equally loaded proxies: lower latency, then the
 * byte-wise smaller id. Fewer active leases beats both; the stores scan in
 * this order and take the first of the least loaded.
 */
export function selectionOrder(a: Candidate, b: Candidate): number {
  if (a.latencyMillis !== b.latencyMillis) return a.latencyMillis - b.latencyMillis;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

function toLease(record: LeaseRecord): Lease {
  return { id: record.id, proxy: record.proxy, target: record.target, expiresAt: record.endsAt };
}
