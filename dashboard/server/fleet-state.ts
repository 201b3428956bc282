/**
 * The dashboard's live model of the fleet, kept from what the api process
 * already holds: its Proxy and ProxyPool informers, a ProviderHealth
 * informer, the lease store's counts and the gateway's metrics (when a
 * gateway runs in this process). A page costs no apiserver or Temporal
 * call: it is sent this model's changes.
 *
 * Changes reach a page within a tick (500 ms by default): each Proxy row
 * carries a version, each page remembers the versions it was sent, and a
 * tick sends it the rows whose version moved and the ids that are gone.
 * Pools, providers and the gateway's figures are small and sent whole when
 * they change. The pools' history (desired, Ready, leases held) is sampled
 * every 10 s into a ring buffer of the last hour, whether or not a page is
 * open; a restart starts it empty.
 */
import type { Registry } from 'prom-client';
import type { Logger } from 'pino';
import type { ResilientInformer } from '../../kube/informer.js';
import { storeKey, type LeaseStore } from '../../api/lease-store.js';
import type { ProviderHealth, Proxy, ProxyPool } from '../../resources/proxy-schema.js';
import { inScope, poolAllowed, unscoped, type Tenant } from '../../tenants/tenants.js';
import type {
  CostView,
  DashboardEvents,
  GatewayView,
  PoolHistoryPoint,
  PoolRow,
  ProviderRow,
  ProxyRow,
} from '../protocol.js';
import { costView, gatewayView, type GatewaySample } from './gateway-figures.js';
import { poolIdOf, poolRow, providerRow, proxyRow, type TemporalUiLink } from './rows.js';

export const DEFAULT_TICK_MS = 500;
export const HISTORY_SAMPLE_MS = 10_000;
/** An hour of samples at the default sampling period. */
export const HISTORY_POINTS = 360;
const GATEWAY_EVERY_TICKS = 4;

export interface FleetStateOptions {
  proxies: ResilientInformer<Proxy>;
  pools: ResilientInformer<ProxyPool>;
  /** Absent: the Providers page says none is known. */
  providerHealths?: ResilientInformer<ProviderHealth>;
  leaseStore: Pick<LeaseStore, 'activeCounts' | 'coolingCounts'>;
  /** This process's metrics: the gateway's (when one runs in it) and the cost meter's. */
  gatewayRegistry?: Registry;
  temporalUi?: TemporalUiLink;
  logger: Logger;
  tickMs?: number;
  historySampleMs?: number;
}

/** What a page is sent: one event at a time, in order. */
export type Send = <K extends keyof DashboardEvents>(event: K, data: DashboardEvents[K]) => void;

export interface FleetState {
  /** Starts following the sources; pages may subscribe before it has synced (they get what there is). */
  start(): void;
  stop(): void;
  /** Sends the page everything in its tenant's scope now, then the changes; returns the unsubscribe. */
  subscribe(tenant: Tenant, send: Send): () => void;
  /** The Proxy row of this id when the tenant may see it (for the write actions' checks). */
  proxy(tenant: Tenant, id: string): ProxyRow | undefined;
  /** The pool row of this id when the tenant may see it. */
  pool(tenant: Tenant, id: string): PoolRow | undefined;
  /** Pages open now. */
  subscribers(): number;
}

interface Kept {
  row: ProxyRow;
  key: string;
  version: number;
}

interface Subscriber {
  tenant: Tenant;
  send: Send;
  sent: Map<string, number>;
  seenVersion: number;
  poolsJson: string;
  providersJson: string;
  gatewayVersion: number;
}

export function createFleetState(options: FleetStateOptions): FleetState {
  const tickMs = options.tickMs ?? DEFAULT_TICK_MS;
  const historyMs = options.historySampleMs ?? HISTORY_SAMPLE_MS;
  const log = options.logger.child({ component: 'dashboard' });
  const rows = new Map<string, Kept>();
  const history = new Map<string, PoolHistoryPoint[]>();
  const subscribers = new Set<Subscriber>();
  let version = 0;
  let counts: ReadonlyMap<string, number> = new Map();
  let cooling: ReadonlyMap<string, number> | undefined;
  /** Whether the lease store can say (the memory store; Redis keeps cooldowns where a count costs a scan). */
  const coolingKnown = options.leaseStore.coolingCounts !== undefined;
  let gateway: GatewayView = emptyGateway(options.gatewayRegistry !== undefined);
  let gatewayVersion = 0;
  let cost: CostView = { currency: '', providers: [], tenants: [] };
  let previousGateway: GatewaySample | undefined;
  let ticks = 0;
  const unsubscribes: Array<() => void> = [];
  const timers: NodeJS.Timeout[] = [];
  let ticking = false;

  const keep = (proxy: Proxy) => {
    const row = proxyRow(proxy, options.temporalUi);
    const key = storeKey({ id: row.id, ...(proxy.metadata.uid ? { uid: proxy.metadata.uid } : {}) });
    row.leases = counts.get(key) ?? 0;
    row.cooling = coolingKnown ? (cooling?.get(key) ?? 0) : -1;
    rows.set(row.id, { row, key, version: ++version });
  };
  const reloadProxies = () => {
    rows.clear();
    for (const p of options.proxies.list()) keep(p);
    version++;
  };

  /** Lease figures changed since the rows were made: only the rows whose figures moved get a new version. */
  const applyCounts = () => {
    for (const kept of rows.values()) {
      const leases = counts.get(kept.key) ?? 0;
      const cool = coolingKnown ? (cooling?.get(kept.key) ?? 0) : -1;
      if (leases !== kept.row.leases || cool !== kept.row.cooling) {
        kept.row = { ...kept.row, leases, cooling: cool };
        kept.version = ++version;
      }
    }
  };
  const refreshCounts = async () => {
    counts = await options.leaseStore.activeCounts();
    cooling = options.leaseStore.coolingCounts ? await options.leaseStore.coolingCounts() : undefined;
    applyCounts();
  };

  const visibleRows = (tenant: Tenant): ProxyRow[] => {
    const all = [...rows.values()].map((k) => k.row);
    return unscoped(tenant) ? all : all.filter((r) => inScope(tenant, r));
  };
  const poolRows = (tenant: Tenant, visible: readonly ProxyRow[]): PoolRow[] => {
    const members = new Map<string, ProxyRow[]>();
    for (const r of visible) {
      const id = poolIdOf(r);
      if (id === '') continue;
      let list = members.get(id);
      if (!list) members.set(id, (list = []));
      list.push(r);
    }
    const out: PoolRow[] = [];
    for (const pool of options.pools.list()) {
      const id = `${pool.metadata.namespace ?? ''}/${pool.metadata.name}`;
      const mine = members.get(id) ?? [];
      if (!unscoped(tenant)) {
        if (!poolAllowed(tenant, pool.metadata.name)) continue;
        // A tenant with an attribute selector sees the pools it has members in.
        if (tenant.selector.length > 0 && mine.length === 0) continue;
      }
      out.push(poolRow(pool, mine, history.get(id) ?? []));
    }
    return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  };
  const providerRows = (tenant: Tenant, visible: readonly ProxyRow[]): ProviderRow[] => {
    const all = (options.providerHealths?.list() ?? []).map(providerRow);
    all.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (unscoped(tenant)) return all;
    const used = new Set(visible.map((r) => r.provider));
    return all.filter((p) => used.has(p.name));
  };
  const gatewayFor = (tenant: Tenant, visible: readonly ProxyRow[]): GatewayView => {
    if (unscoped(tenant)) return gateway;
    const ids = new Set(visible.map((r) => r.id));
    const proxies = gateway.proxies.filter((p) => ids.has(p.key));
    return {
      ...gateway,
      proxies,
      targets: [],
      bytesPerSecond: proxies.reduce((s, p) => s + p.bytesPerSecond, 0),
    };
  };

  const push = (s: Subscriber, first: boolean) => {
    const visible = visibleRows(s.tenant);
    if (first || s.seenVersion !== version) {
      const upsert: ProxyRow[] = [];
      const present = new Set<string>();
      for (const r of visible) {
        present.add(r.id);
        const v = rows.get(r.id)!.version;
        if (s.sent.get(r.id) !== v) {
          upsert.push(r);
          s.sent.set(r.id, v);
        }
      }
      const remove: string[] = [];
      for (const id of s.sent.keys()) {
        if (!present.has(id)) {
          remove.push(id);
          s.sent.delete(id);
        }
      }
      if (first || upsert.length > 0 || remove.length > 0) s.send('proxies', { full: first, upsert, remove });
      s.seenVersion = version;
    }
    const pools = poolRows(s.tenant, visible);
    const poolsJson = JSON.stringify(pools);
    if (first || poolsJson !== s.poolsJson) {
      s.poolsJson = poolsJson;
      s.send('pools', pools);
    }
    const providers = providerRows(s.tenant, visible);
    const providersJson = JSON.stringify(providers);
    if (first || providersJson !== s.providersJson) {
      s.providersJson = providersJson;
      s.send('providers', providers);
    }
    if (first || s.gatewayVersion !== gatewayVersion) {
      s.gatewayVersion = gatewayVersion;
      s.send('gateway', gatewayFor(s.tenant, visible));
      s.send('cost', unscoped(s.tenant) ? cost : { currency: cost.currency, providers: [], tenants: [] });
    }
  };

  const tick = async () => {
    if (ticking || subscribers.size === 0) return;
    ticking = true;
    try {
      await refreshCounts();
      if (options.gatewayRegistry && ticks++ % GATEWAY_EVERY_TICKS === 0) {
        const sample = await gatewayView(options.gatewayRegistry, previousGateway, Date.now());
        previousGateway = sample.sample;
        gateway = sample.view;
        cost = await costView(options.gatewayRegistry);
        gatewayVersion++;
      }
      for (const s of subscribers) {
        try {
          push(s, false);
        } catch (error) {
          log.warn({ err: (error as Error).message }, 'a dashboard page could not be sent its changes');
        }
      }
    } catch (error) {
      log.warn({ err: (error as Error).message }, 'dashboard refresh failed; the next tick tries again');
    } finally {
      ticking = false;
    }
  };

  const sampleHistory = async () => {
    try {
      if (subscribers.size === 0) await refreshCounts();
    } catch {
      // The lease store is out of reach: the sample keeps the last counts.
    }
    const t = Math.floor(Date.now() / 1000);
    const byPool = new Map<string, { ready: number; leases: number }>();
    for (const { row } of rows.values()) {
      const id = poolIdOf(row);
      if (id === '') continue;
      const agg = byPool.get(id) ?? { ready: 0, leases: 0 };
      if (row.phase === 'Ready' && !row.deleting) agg.ready++;
      agg.leases += row.leases;
      byPool.set(id, agg);
    }
    const live = new Set<string>();
    for (const pool of options.pools.list()) {
      const id = `${pool.metadata.namespace ?? ''}/${pool.metadata.name}`;
      live.add(id);
      const agg = byPool.get(id) ?? { ready: 0, leases: 0 };
      let points = history.get(id);
      if (!points) history.set(id, (points = []));
      points.push({
        t,
        desired: pool.status?.desiredReplicas ?? pool.spec.replicas ?? 1,
        ready: agg.ready,
        leases: agg.leases,
      });
      if (points.length > HISTORY_POINTS) points.splice(0, points.length - HISTORY_POINTS);
    }
    for (const id of history.keys()) if (!live.has(id)) history.delete(id);
  };

  return {
    start() {
      reloadProxies();
      unsubscribes.push(
        options.proxies.onChange((proxy, event) => {
          const id = `${proxy.metadata.namespace ?? ''}/${proxy.metadata.name}`;
          if (event === 'delete') {
            rows.delete(id);
            version++;
          } else keep(proxy);
        }),
        options.proxies.onReconnect(reloadProxies),
        // A new pool gets its first point now, not up to a sampling period later.
        options.pools.onChange((pool, event) => {
          if (event === 'add' && !history.has(`${pool.metadata.namespace ?? ''}/${pool.metadata.name}`))
            void sampleHistory();
        }),
      );
      void sampleHistory();
      timers.push(
        setInterval(() => void tick(), tickMs),
        setInterval(() => void sampleHistory(), historyMs),
      );
      for (const t of timers) t.unref();
    },
    stop() {
      for (const t of timers) clearInterval(t);
      timers.length = 0;
      for (const off of unsubscribes) off();
      unsubscribes.length = 0;
      subscribers.clear();
    },
    subscribe(tenant, send) {
      const s: Subscriber = {
        tenant,
        send,
        sent: new Map(),
        seenVersion: -1,
        poolsJson: '',
        providersJson: '',
        gatewayVersion: -1,
      };
      subscribers.add(s);
      push(s, true);
      return () => subscribers.delete(s);
    },
    proxy(tenant, id) {
      const row = rows.get(id)?.row;
      return row && (unscoped(tenant) || inScope(tenant, row)) ? row : undefined;
    },
    pool(tenant, id) {
      return poolRows(tenant, visibleRows(tenant)).find((p) => p.id === id);
    },
    subscribers: () => subscribers.size,
  };
}

function emptyGateway(present: boolean): GatewayView {
  return { present, activeTunnels: 0, requests: {}, bytesPerSecond: 0, proxies: [], targets: [] };
}
