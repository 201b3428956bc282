/**
 * Tells ProxyPools what the lease API sees of their demand: leases held on
 * their members, lease requests refused that the pool would have served,
 * and `banned` reports on their members. The pool workflow decides what to
 * do (autoscale, rotate); this only aggregates and sends.
 *
 * Only pools that ask (spec.autoscaling, or spec.rotation.afterBans) are
 * told, and at a bounded rate, since every report is a billable Temporal
 * signal: per pool and api replica, at most one report per `tickMs`
 * (default 5 s), and only when it would matter: a ban or a refusal since the
 * last report, the refusals having stopped, a recommendation that differs
 * from the last one sent, or a heartbeat every `heartbeatMs` (default
 * 10 min). The leases held are reported as their peak over the last minute,
 * so session churn at a steady demand changes nothing: steady demand costs
 * six signals a pool-hour.
 *
 * Refusals and held leases are also metrics (`egress_pool_lease_denials_total`
 * here, `egress_pool_leases_active` in metrics.ts), for an HPA or KEDA
 * driving the scale subresource instead.
 */
import type { Logger } from 'pino';
import { createPeriodic } from './periodic.js';
import { Counter, type Registry } from 'prom-client';
import type { ProxyPool } from '../resources/proxy-schema.js';
import { recommendReplicas } from '../workflows/pool/autoscale.js';
import type { PoolDemandReport, PoolRef } from '../workflows/pool/types.js';
import { storeKey, type LeaseStore } from './lease-store.js';
import type { ProxyCatalog, ProxyView } from './proxy-catalog.js';
import { matches } from './routes/selection.js';

export interface PoolDemandOptions {
  catalog: ProxyCatalog;
  /** The pools as the api's informer sees them. */
  pools: { list(): readonly ProxyPool[] };
  leaseStore: Pick<LeaseStore, 'activeCounts' | 'takePoolEvents'>;
  /** Every replica sees every lease (Redis). */
  sharedStore: boolean;
  /** This replica's name in reports. */
  reporter: string;
  /** Sends the pool workflow its report; may throw (logged; the figures go with the next report). */
  signal: (pool: PoolRef, report: PoolDemandReport) => Promise<void>;
  logger: Logger;
  registry?: Registry;
  tickMs?: number;
  heartbeatMs?: number;
  /**
   * Leases held are reported as their highest count over this window
   * (default 60 s; the api process uses twelve report intervals): crawler sessions end and start all the time, and the
   * raw count would flicker across a size boundary and send a report each
   * tick. Growth shows at once; a drop shows a window late (the pool's
   * scale-down window is longer anyway).
   */
  peakWindowMs?: number;
  now?: () => number;
}

export interface PoolDemand {
  start(): void;
  stop(): Promise<void>;
  /** A lease request was refused (409): every pool with a member the request selects is short. */
  noteDenied(selector: ReadonlyArray<[string, string]>, pool?: string): void;
  /** A `banned` report recorded a cooldown on this proxy (store key) for this target. */
  noteBanned(proxyKey: string, target: string): void;
  /** Reports sent so far. */
  sent(): number;
  /** Ticks completed (tests wait on these to see that nothing was sent). */
  passes(): number;
}

interface PoolPending {
  denials: number;
  bans: PoolDemandReport['bans'];
}

/** Held-lease samples per pool: the report carries their maximum over `peakWindowMs`. */
type Samples = Array<[atMs: number, activeLeases: number]>;

interface PoolSent {
  atMs: number;
  denials: number;
  recommendation?: number;
}

/** Gateway events taken from the shared store per tick. */
const MAX_EVENTS_PER_TICK = 1_000;

/** At most this many bans in one report (the rest wait for the next tick). */
const MAX_BANS_PER_REPORT = 100;

const poolKey = (namespace: string, name: string) => `${namespace}/${name}`;
const namespaceOf = (view: ProxyView) => view.id.slice(0, view.id.indexOf('/'));

function wantsReports(pool: ProxyPool): boolean {
  return Boolean(pool.spec.autoscaling || pool.spec.rotation?.afterBans) && !pool.metadata.deletionTimestamp;
}

export function createPoolDemand(opts: PoolDemandOptions): PoolDemand {
  const log = opts.logger.child({ component: 'pool-demand' });
  const tickMs = opts.tickMs ?? 5_000;
  const heartbeatMs = opts.heartbeatMs ?? 10 * 60_000;
  const peakWindowMs = opts.peakWindowMs ?? 60_000;
  const held = new Map<string, Samples>();
  const now = opts.now ?? Date.now;
  const pending = new Map<string, PoolPending>();
  const lastSent = new Map<string, PoolSent>();
  let sent = 0;
  const denialsMetric = opts.registry
    ? new Counter({
        name: 'egress_pool_lease_denials_total',
        help: 'Lease requests refused (409 no_match) that a ProxyPool would have served: unmet demand (an HPA or KEDA may scale on it)',
        labelNames: ['namespace', 'pool'] as const,
        registers: [opts.registry],
      })
    : undefined;
  const reportsMetric = opts.registry
    ? new Counter({
        name: 'egress_pool_demand_reports_total',
        help: 'Demand reports sent to ProxyPool workflows, by outcome (sent, failed)',
        labelNames: ['outcome'] as const,
        registers: [opts.registry],
      })
    : undefined;

  const pendingOf = (key: string): PoolPending => {
    let p = pending.get(key);
    if (!p) pending.set(key, (p = { denials: 0, bans: [] }));
    return p;
  };

  async function tick(): Promise<void> {
    // What standalone gateways saw (bans by session, refusals), through the shared store.
    if (opts.sharedStore && opts.leaseStore.takePoolEvents) {
      for (const event of await opts.leaseStore.takePoolEvents(MAX_EVENTS_PER_TICK)) {
        if (event.kind === 'banned') demand.noteBanned(event.proxy, event.target);
        else demand.noteDenied(event.selector, event.pool);
      }
    }
    const pools = opts.pools.list().filter(wantsReports);
    const wanted = new Set(pools.map((p) => poolKey(p.metadata.namespace ?? 'default', p.metadata.name)));
    for (const key of [...lastSent.keys()]) if (!wanted.has(key)) lastSent.delete(key);
    for (const key of [...pending.keys()]) if (!wanted.has(key)) pending.delete(key);
    for (const key of [...held.keys()]) if (!wanted.has(key)) held.delete(key);
    if (pools.length === 0) return;
    const members = new Map<string, ProxyView[]>();
    for (const view of opts.catalog.list()) {
      if (!view.pool || view.deleting) continue;
      const key = poolKey(namespaceOf(view), view.pool);
      if (!wanted.has(key)) continue;
      const list = members.get(key);
      if (list) list.push(view);
      else members.set(key, [view]);
    }
    const counts = await opts.leaseStore.activeCounts();
    const t = now();
    await Promise.all(
      pools.map(async (pool) => {
        const namespace = pool.metadata.namespace ?? 'default';
        const key = poolKey(namespace, pool.metadata.name);
        const mine = members.get(key) ?? [];
        const leasesByMember: Record<string, number> = {};
        let heldNow = 0;
        for (const view of mine) {
          const n = counts.get(storeKey(view)) ?? 0;
          if (n > 0 && view.uid) leasesByMember[view.uid] = n;
          heldNow += n;
        }
        let samples = held.get(key);
        if (!samples) held.set(key, (samples = []));
        samples.push([t, heldNow]);
        while (samples.length > 1 && t - samples[0]![0] > peakWindowMs) samples.shift();
        const activeLeases = Math.max(...samples.map(([, n]) => n));
        const waiting = pending.get(key) ?? { denials: 0, bans: [] };
        const before = lastSent.get(key);
        const autoscaling = pool.spec.autoscaling;
        const current = pool.status?.desiredReplicas ?? pool.spec.replicas;
        const recommendation = autoscaling
          ? recommendReplicas(
              { activeLeases, denials: waiting.denials },
              current,
              pool.spec.template.spec.maxLeases ?? 0,
              autoscaling,
            )
          : undefined;
        const due =
          !before ||
          waiting.bans.length > 0 ||
          waiting.denials > 0 ||
          before.denials > 0 ||
          (recommendation !== undefined && recommendation !== before.recommendation) ||
          t - before.atMs >= heartbeatMs;
        if (!due || !pool.metadata.uid) return;
        const bans = waiting.bans.splice(0, MAX_BANS_PER_REPORT);
        const report: PoolDemandReport = {
          reporter: opts.reporter,
          sharedStore: opts.sharedStore,
          activeLeases,
          leasesByMember,
          denials: waiting.denials,
          bans,
        };
        const denials = waiting.denials;
        waiting.denials = 0;
        try {
          await opts.signal({ namespace, name: pool.metadata.name, uid: pool.metadata.uid }, report);
          sent++;
          reportsMetric?.inc({ outcome: 'sent' });
          lastSent.set(key, {
            atMs: t,
            denials,
            ...(recommendation !== undefined ? { recommendation } : {}),
          });
        } catch (error) {
          // Keep what was not delivered for the next tick.
          const left = pendingOf(key);
          left.denials += denials;
          left.bans.unshift(...bans);
          reportsMetric?.inc({ outcome: 'failed' });
          log.warn(
            { pool: key, err: error instanceof Error ? error.message : String(error) },
            'could not send a pool its demand report; trying at the next tick',
          );
        }
      }),
    );
  }

  const periodic = createPeriodic(tick, tickMs, log, 'pool demand tick failed');

  const demand: PoolDemand = {
    start: () => periodic.start(),
    stop: () => periodic.stop(),
    noteDenied(selector, pool) {
      // Which pools would have served it: those with a member the request selects.
      const seen = new Set<string>();
      for (const view of opts.catalog.list()) {
        if (!view.pool || view.deleting) continue;
        if (pool !== undefined && view.pool !== pool) continue;
        const key = poolKey(namespaceOf(view), view.pool);
        if (seen.has(key) || !matches(view, selector)) continue;
        seen.add(key);
      }
      for (const key of seen) {
        const [namespace, name] = key.split('/') as [string, string];
        denialsMetric?.inc({ namespace, pool: name });
        pendingOf(key).denials++;
      }
    },
    noteBanned(proxyKey, target) {
      const view = opts.catalog.list().find((v) => storeKey(v) === proxyKey);
      if (!view?.pool || !view.uid) return;
      const bans = pendingOf(poolKey(namespaceOf(view), view.pool)).bans;
      bans.push({ uid: view.uid, target, atMs: now() });
      // A flood of reports keeps the newest: the tally only needs the window.
      if (bans.length > 10 * MAX_BANS_PER_REPORT) bans.splice(0, bans.length - 10 * MAX_BANS_PER_REPORT);
    },
    sent: () => sent,
    passes: () => periodic.passes(),
  };
  return demand;
}
