/**
 * The Kubernetes bridge: turns Proxy, ProxyPool and cloud-init Secret
 * events into workflow starts and signals; it never computes status. One
 * reconciler per kind (`proxy-reconciler.ts`, `pool-reconciler.ts`) over
 * one set of informers (`informers.ts`) and one work queue with a lane per
 * kind (`kind-queue.ts`), wired here; the options are read once
 * (`settings.ts`). Events are coalesced by key (namespace/name) and each key
 * is reconciled from the latest cached object, so a burst of updates
 * becomes one signal. A periodic pass (`reconcile-pass.ts`) compares the
 * Proxies with the running Proxy workflows, both ways.
 */
import { Registry } from 'prom-client';
import { createProxyClient, proxyKey, refOf } from '../kube/proxies.js';
import { createGeneratedSecret } from '../kube/proxy-credentials.js';
import { createBridgeInformers, type BridgeInformers } from './informers.js';
import { createKindQueue } from './kind-queue.js';
import { bridgeMetrics } from './metrics.js';
import { createPoolReconciler, type PoolReconciler } from './pool-reconciler.js';
import { createProxyReconciler, type ProxyReconciler } from './proxy-reconciler.js';
import { createRunSweep, type RunSweep } from './reconcile-pass.js';
import { bridgeSettings, type BridgeOptions } from './settings.js';

export type { BridgeOptions } from './settings.js';

export interface Bridge {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Resolves when no key is queued or in flight (tests, shutdown). */
  idle(): Promise<void>;
  /** Where its metrics are (`metrics` when given, else a registry of its own): what it did, in Prometheus form. */
  readonly registry: Registry;
  /** Consecutive failures of a Proxy key (namespace/name); 0 after a success. */
  failures(key: string): number;
}

export function createBridge(opts: BridgeOptions): Bridge {
  const settings = bridgeSettings(opts);
  const { client } = opts;
  const log = opts.logger.child({ component: 'bridge' });
  const poolLog = log.child({ component: 'pool-bridge' });
  const registry = opts.metrics ?? new Registry();
  const metrics = bridgeMetrics(registry);
  const informers = createBridgeInformers({
    kubeConfig: opts.kubeConfig,
    scopes: settings.scopes,
    metrics,
    log,
    poolLog,
  });
  const { proxies, pools, secrets, credentialSecrets } = informers;
  const queue = createKindQueue(settings.backoff);
  const proxyClient = createProxyClient(opts.kubeConfig);
  const proxyReconciler = createProxyReconciler({
    settings: settings.proxies,
    client,
    proxyClient,
    proxies,
    secrets,
    credentialSecrets,
    createCredentialsSecret: (ref) => createGeneratedSecret(opts.kubeConfig, ref),
    queue,
    metrics,
    log,
  });
  const poolReconciler = createPoolReconciler({
    settings: settings.pools,
    client,
    pools,
    proxies,
    queue,
    signals: metrics.signals,
    log: poolLog,
  });
  const sweep = createRunSweep({
    settings: settings.sweep,
    client,
    proxies,
    proxyClient,
    reconciler: proxyReconciler,
    metrics,
    log,
  });

  routeEvents(informers, proxyReconciler, poolReconciler, sweep);
  let offMembers: (() => void) | undefined;

  return {
    registry,
    async start() {
      queue.resume();
      await secrets.start();
      await credentialSecrets.start();
      await proxies.start();
      // A member's events reach its pool from here on: the Proxies are listed, the pools next.
      offMembers ??= proxies.onChange((proxy) => poolReconciler.enqueueOwnerOf(proxy));
      await pools.start();
      poolLog.info({ pools: pools.list().length }, 'pool bridge started');
      log.info({ proxies: proxies.list().length }, 'bridge started');
      await sweep.start();
    },
    async stop() {
      await sweep.stop();
      offMembers?.();
      offMembers = undefined;
      await pools.stop();
      await proxies.stop();
      await secrets.stop();
      await credentialSecrets.stop();
      await queue.shutDown();
    },
    idle: () => queue.idle(),
    failures: (k) => proxyReconciler.queue.failures(k),
  };
}

/** Each watch event to the reconciler of its kind; a watch outage's end to a resync and a pass. */
function routeEvents(
  { proxies, pools, secrets, credentialSecrets }: BridgeInformers,
  proxyReconciler: ProxyReconciler,
  poolReconciler: PoolReconciler,
  sweep: RunSweep,
): void {
  proxies.onChange((proxy) => proxyReconciler.enqueue(proxyKey(refOf(proxy))));
  secrets.onChange((secret) => proxyReconciler.enqueueUsersOf(secret));
  credentialSecrets.onChange((secret) => proxyReconciler.enqueueOwnerOf(secret));
  proxies.onReconnect(() => {
    // The informer replays what changed during an outage; a full pass on top
    // is the safety net for what it cannot see (a run an operator terminated
    // meanwhile). Every Proxy is signalled again. Not on the watch's routine
    // timeouts, which would add history to every Proxy workflow each time.
    proxyReconciler.resync();
    void sweep.run();
  });
  pools.onChange((pool) => poolReconciler.enqueue(pool));
  pools.onReconnect(() => poolReconciler.resync());
}
