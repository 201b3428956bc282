/**
 * The Kubernetes bridge: turns Proxy and Secret events into workflow
 * signals. It never computes status. Events are coalesced by key
 * (namespace/name) and each key is reconciled from the latest cached object,
 * so a burst of updates becomes one signal, and a status-only update (new
 * resourceVersion, same generation) changes nothing the bridge sends and is
 * dropped: the workflow's own status writes cannot feed it a storm.
 */
import {
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Secret,
} from '@kubernetes/client-node';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import {
  FINALIZER,
  GROUP,
  LABEL_CLOUD_INIT,
  PROXY_PLURAL,
  VERSION,
  type Proxy,
} from '../resources/proxy-schema.js';
import { parseProxyWorkflowId, proxyWorkflowId } from '../workflows/proxy/ids.js';
import { deletionRequestedSignal, specChangedSignal } from '../workflows/proxy/messages.js';
import {
  ProxyModeKey,
  ProxyNameKey,
  ProxyNamespaceKey,
  ProxyPhaseKey,
  ProxyProviderKey,
} from '../workflows/proxy/search-attributes.js';
import type { ProxyRef, ProxyWorkflowInput } from '../workflows/proxy/types.js';
import { desiredSpecOf, refOf, type SecretView } from './desired.js';
import { createResilientInformer, type ResilientInformer } from '../kube/informer.js';
import { createProxyInformer } from '../kube/proxy-informer.js';
import { createProxyReader } from '../kube/proxy-reader.js';

export interface BridgeOptions {
  kubeConfig: KubeConfig;
  client: Client;
  taskQueue: string;
  logger: Logger;
  maxHistoryEvents?: number;
  /** Keys reconciled at once. */
  concurrency?: number;
  /** Watch one namespace only (a namespace-restricted install); all namespaces when unset. */
  namespace?: string;
  /** How often to look for running workflows whose Proxy is gone (default 10 min, ±20 % jitter). */
  orphanedRunSweepMs?: number;
}

export interface Bridge {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Resolves when no key is queued or in flight (tests, shutdown). */
  idle(): Promise<void>;
  /** Signals sent, by kind (for tests and metrics). */
  readonly counters: {
    signalWithStart: number;
    deletion: number;
    skipped: number;
    finalizersAdded: number;
    /** Running workflows whose Proxy was gone, told to delete. */
    orphanedRuns: number;
    /** Completed sweeps for such workflows. */
    orphanedRunSweeps: number;
  };
}

const key = (namespace: string, name: string) => `${namespace}/${name}`;

export function createBridge(opts: BridgeOptions): Bridge {
  const log = opts.logger.child({ component: 'bridge' });
  const objects = opts.kubeConfig.makeApiClient(CustomObjectsApi);
  const core = opts.kubeConfig.makeApiClient(CoreV1Api);
  const concurrency = opts.concurrency ?? 8;
  const counters = {
    signalWithStart: 0,
    deletion: 0,
    skipped: 0,
    finalizersAdded: 0,
    orphanedRuns: 0,
    orphanedRunSweeps: 0,
  };
  const reader = createProxyReader(opts.kubeConfig);

  /** What was last sent per key: a re-send of the same thing is skipped. Cleared on resync. */
  const lastSent = new Map<string, string>();
  /** The last UID seen per key, to address the workflow after the object is gone. */
  const lastRef = new Map<string, ProxyRef>();
  const queued = new Set<string>();
  const inFlight = new Set<string>();
  const again = new Set<string>();
  const order: string[] = [];
  let idleWaiters: Array<() => void> = [];

  const proxies = createProxyInformer({
    kubeConfig: opts.kubeConfig,
    logger: log,
    namespace: opts.namespace,
  });
  proxies.onChange((obj) => enqueue(key(obj.metadata.namespace ?? 'default', obj.metadata.name)));
  proxies.onReconnect(() => {
    // The informer replays what changed during an outage; a full pass on top
    // is the safety net for what it cannot see (a run an operator terminated
    // meanwhile). Forget what was sent so every Proxy is re-signalled (the
    // workflow dedupes by generation and hash). Not on the watch's routine
    // timeouts, which would add history to every Proxy workflow each time.
    lastSent.clear();
    for (const p of proxies.list()) enqueue(key(p.metadata.namespace ?? 'default', p.metadata.name));
    void endOrphanedRuns();
  });

  const secrets: ResilientInformer<V1Secret> = createResilientInformer<V1Secret>({
    kubeConfig: opts.kubeConfig,
    path: opts.namespace ? `/api/v1/namespaces/${opts.namespace}/secrets` : '/api/v1/secrets',
    labelSelector: `${LABEL_CLOUD_INIT}=true`,
    list: () =>
      opts.namespace
        ? core.listNamespacedSecret({ namespace: opts.namespace, labelSelector: `${LABEL_CLOUD_INIT}=true` })
        : core.listSecretForAllNamespaces({ labelSelector: `${LABEL_CLOUD_INIT}=true` }),
    logger: log,
  });
  secrets.onChange((secret) => {
    const ns = secret.metadata?.namespace ?? 'default';
    const name = secret.metadata?.name;
    for (const p of proxies.list(ns)) {
      if (p.spec.cloudInit?.secretRef?.name === name) enqueue(key(ns, p.metadata.name));
    }
  });

  const lookupSecret = (namespace: string, name: string): SecretView | undefined => {
    const s = secrets.get(name, namespace);
    if (!s) return undefined;
    return { labels: s.metadata?.labels ?? {}, data: s.data ?? {} };
  };

  function enqueue(k: string): void {
    if (inFlight.has(k)) {
      again.add(k);
      return;
    }
    if (queued.has(k)) return;
    queued.add(k);
    order.push(k);
    pump();
  }

  function pump(): void {
    while (inFlight.size < concurrency && order.length > 0) {
      const k = order.shift()!;
      queued.delete(k);
      inFlight.add(k);
      void reconcile(k)
        .catch((error: unknown) => {
          log.warn(
            { proxy: k, err: error instanceof Error ? error.message : String(error) },
            'reconcile failed; retrying',
          );
          setTimeout(() => enqueue(k), 2_000).unref();
        })
        .finally(() => {
          inFlight.delete(k);
          if (again.delete(k)) enqueue(k);
          pump();
          if (inFlight.size === 0 && order.length === 0) {
            const waiters = idleWaiters;
            idleWaiters = [];
            for (const w of waiters) w();
          }
        });
    }
  }

  async function addFinalizer(proxy: Proxy): Promise<void> {
    const finalizers = proxy.metadata.finalizers ?? [];
    try {
      await objects.patchNamespacedCustomObject(
        {
          group: GROUP,
          version: VERSION,
          namespace: proxy.metadata.namespace ?? 'default',
          plural: PROXY_PLURAL,
          name: proxy.metadata.name,
          body: {
            metadata: {
              resourceVersion: proxy.metadata.resourceVersion,
              finalizers: [...finalizers, FINALIZER],
            },
          },
        },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
      counters.finalizersAdded += 1;
    } catch (error) {
      // 409: someone else (another bridge) changed it; the update event brings us back.
      const code = (error as { code?: number }).code;
      if (code !== 409 && code !== 404) throw error;
    }
  }

  async function reconcile(k: string): Promise<void> {
    const [namespace, name] = k.split('/') as [string, string];
    const proxy = proxies.get(name, namespace);
    if (!proxy) {
      // Gone from the cache: External proxies (no finalizer) and Managed ones
      // whose finalizer was just removed. Signal only: never start a workflow.
      const ref = lastRef.get(k);
      lastRef.delete(k);
      lastSent.delete(k);
      if (!ref) return;
      try {
        await opts.client.workflow
          .getHandle(proxyWorkflowId(ref))
          .signal(deletionRequestedSignal, { skipCleanup: false });
        counters.deletion += 1;
      } catch (error) {
        if (!(error instanceof WorkflowNotFoundError)) throw error;
      }
      return;
    }
    const ref = refOf(proxy);
    lastRef.set(k, ref);
    if (
      proxy.spec.mode === 'Managed' &&
      !proxy.metadata.deletionTimestamp &&
      !(proxy.metadata.finalizers ?? []).includes(FINALIZER)
    ) {
      await addFinalizer(proxy);
    }
    const desired = desiredSpecOf(proxy, lookupSecret);
    const fingerprint = JSON.stringify([ref.uid, desired]);
    if (lastSent.get(k) === fingerprint) {
      counters.skipped += 1;
      return;
    }
    const input: ProxyWorkflowInput = { ref, desired };
    if (opts.maxHistoryEvents) input.maxHistoryEvents = opts.maxHistoryEvents;
    try {
      await opts.client.workflow.signalWithStart('proxyWorkflow', {
        workflowId: proxyWorkflowId(ref),
        taskQueue: opts.taskQueue,
        args: [input],
        signal: specChangedSignal,
        signalArgs: [desired],
        // A run that completed (the Proxy was deleted) is never restarted by
        // a late event; one that failed or was terminated by an operator is.
        workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
        typedSearchAttributes: [
          { key: ProxyNamespaceKey, value: ref.namespace },
          { key: ProxyNameKey, value: ref.name },
          { key: ProxyProviderKey, value: desired.provider ?? '' },
          { key: ProxyModeKey, value: desired.mode },
          { key: ProxyPhaseKey, value: 'Pending' },
        ],
      });
      counters.signalWithStart += 1;
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
      log.debug({ proxy: k }, 'workflow already completed; not restarting');
    }
    lastSent.set(k, fingerprint);
  }

  /**
   * Proxy workflows still running for a Proxy that no longer exists: it was
   * deleted while no bridge was watching (an External one, or a Managed one
   * whose finalizer was removed by hand), so no delete event will ever come.
   * Each is told to delete; the run cleans up its instance and ends. A Proxy
   * missing from this bridge's cache is confirmed by a direct read first,
   * because another bridge may have started its workflow before this cache
   * saw it. Runs at start, after a watch outage and periodically, one
   * sweep at a time (endOrphanedRuns).
   */
  async function sweepOrphanedRuns(): Promise<void> {
    const scope = opts.namespace ? ` AND ${ProxyNamespaceKey.name} = '${opts.namespace}'` : '';
    const query = `WorkflowType = 'proxyWorkflow' AND ExecutionStatus = 'Running' AND TaskQueue = '${opts.taskQueue}'${scope}`;
    let failures = 0;
    for await (const run of opts.client.workflow.list({ query })) {
      const ref = parseProxyWorkflowId(run.workflowId);
      if (!ref || proxies.get(ref.name, ref.namespace)?.metadata.uid === ref.uid) continue;
      // One run that cannot be checked or told must not stop the others.
      try {
        if ((await reader.readProxy(ref)) !== undefined) continue;
        await opts.client.workflow
          .getHandle(run.workflowId)
          .signal(deletionRequestedSignal, { skipCleanup: false });
        counters.orphanedRuns += 1;
        log.warn(
          { workflowId: run.workflowId },
          'the Proxy of a running workflow is gone; asked it to delete',
        );
      } catch (error) {
        // Visibility lags: a run that just completed may still be listed.
        if (error instanceof WorkflowNotFoundError) continue;
        failures += 1;
        log.warn(
          { workflowId: run.workflowId, err: error instanceof Error ? error.message : String(error) },
          'could not check whether the Proxy of a running workflow is gone; next sweep tries again',
        );
      }
    }
    counters.orphanedRunSweeps += 1;
    if (failures > 0) log.warn({ failures }, 'orphaned-run sweep finished with failures');
  }

  // One sweep at a time: a reconnect during the start-up sweep joins it.
  let sweeping: Promise<void> | undefined;
  let sweepTimer: NodeJS.Timeout | undefined;
  let running = false;
  function endOrphanedRuns(): Promise<void> {
    sweeping ??= sweepOrphanedRuns()
      .catch((error: unknown) => {
        log.warn(
          { err: error instanceof Error ? error.message : String(error) },
          'could not list workflows to look for deleted Proxies; next sweep tries again',
        );
      })
      .finally(() => {
        sweeping = undefined;
      });
    return sweeping;
  }
  function scheduleSweep(): void {
    if (!running) return;
    const base = opts.orphanedRunSweepMs ?? 10 * 60_000;
    sweepTimer = setTimeout(
      () => {
        void endOrphanedRuns().finally(scheduleSweep);
      },
      base * (0.8 + Math.random() * 0.4),
    );
    sweepTimer.unref();
  }

  return {
    counters,
    async start() {
      await secrets.start();
      await proxies.start();
      log.info({ proxies: proxies.list().length }, 'bridge started');
      running = true;
      await endOrphanedRuns();
      scheduleSweep();
    },
    async stop() {
      running = false;
      if (sweepTimer) clearTimeout(sweepTimer);
      await sweeping;
      await proxies.stop();
      await secrets.stop();
    },
    idle() {
      if (inFlight.size === 0 && order.length === 0) return Promise.resolve();
      return new Promise((resolve) => idleWaiters.push(resolve));
    },
  };
}
