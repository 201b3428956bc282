/**
 * What the bridge is given, read once into what each part needs: the work
 * queue's backoff, and a small settings object for each reconciler and for
 * the run sweep. No part sees the options whole.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { watchScopes } from '../kube/namespaced-informer.js';
import type { PoolTiming } from '../workflows/pool/types.js';
import { DEFAULT_RECONCILE_PERIOD_MS } from './defaults.js';
import type { Backoff } from './kind-queue.js';
import type { PoolReconcilerSettings } from './pool-reconciler.js';
import type { ProxyReconcilerSettings } from './proxy-reconciler.js';
import type { SweepSettings } from './reconcile-pass.js';

export interface BridgeOptions {
  kubeConfig: KubeConfig;
  client: Client;
  taskQueue: string;
  logger: Logger;
  maxHistoryEvents?: number;
  /** Proxy keys reconciled at once (default 8; pools: 4). */
  concurrency?: number;
  /** Watch one namespace only (tests); all namespaces when unset. */
  namespace?: string;
  /** Watch these namespaces only, one watch each (`--watch-namespaces`); all namespaces when unset. */
  namespaces?: readonly string[];
  /**
   * How often the bridge compares the Proxies in its cache with the running
   * Proxy workflows (default 2 min, ±20 % jitter): a Proxy without a running
   * workflow gets one again, a workflow whose Proxy is gone is told to delete.
   * Also runs at start and after every watch outage.
   */
  reconcilePeriodMs?: number;
  /** Most workflows restarted per second by one reconcile pass (default 10). */
  restartsPerSecond?: number;
  /** First retry delay of a failed key; doubles per consecutive failure (default 1 s). */
  retryBaseMs?: number;
  /** Cap on a key's retry delay (default 2 min). */
  retryMaxMs?: number;
  /** Timing given to the ProxyPool workflows it starts (their defaults otherwise; benches compress it). */
  poolTiming?: Partial<PoolTiming>;
  /** Where the bridge's metrics are registered (a registry of its own when unset; see Bridge.registry). */
  metrics?: Registry;
}

export interface BridgeSettings {
  /** The namespaces watched, one list+watch each (`[undefined]`: all at once). */
  scopes: ReadonlyArray<string | undefined>;
  backoff: Backoff;
  proxies: ProxyReconcilerSettings;
  pools: PoolReconcilerSettings;
  sweep: SweepSettings;
}

export function bridgeSettings(opts: BridgeOptions): BridgeSettings {
  const scopes = watchScopes(opts.namespace ? [opts.namespace] : opts.namespaces);
  const history = opts.maxHistoryEvents ? { maxHistoryEvents: opts.maxHistoryEvents } : {};
  return {
    scopes,
    backoff: { baseDelayMs: opts.retryBaseMs ?? 1_000, maxDelayMs: opts.retryMaxMs ?? 2 * 60_000 },
    proxies: { taskQueue: opts.taskQueue, concurrency: opts.concurrency ?? 8, ...history },
    pools: {
      taskQueue: opts.taskQueue,
      concurrency: 4,
      ...history,
      ...(opts.poolTiming ? { timing: opts.poolTiming } : {}),
    },
    sweep: {
      taskQueue: opts.taskQueue,
      namespaces: scopes.filter((n) => n !== undefined),
      periodMs: opts.reconcilePeriodMs ?? DEFAULT_RECONCILE_PERIOD_MS,
      restartsPerSecond: opts.restartsPerSecond ?? 10,
    },
  };
}
