/**
 * The Kubernetes bridge: turns Proxy and Secret events into workflow
 * signals. It never computes status. Events are coalesced by key
 * (namespace/name) and each key is reconciled from the latest cached object,
 * so a burst of updates becomes one signal, and a status-only update (new
 * resourceVersion, same generation) changes nothing the bridge sends and is
 * dropped: the workflow's own status writes cannot feed it a storm.
 */
import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import { bridgeMetrics } from './metrics.js';
import { reconcilePass } from './reconcile-pass.js';
import { FINALIZER, LABEL_CLOUD_INIT, type Proxy, type ProxyPhase } from '../resources/proxy-schema.js';
import { proxyWorkflowId } from '../workflows/proxy/ids.js';
import { deletionRequestedSignal, specChangedSignal } from '../workflows/proxy/messages.js';
import {
  ProxyModeKey,
  ProxyNameKey,
  ProxyNamespaceKey,
  ProxyPhaseKey,
  ProxyProviderKey,
} from '../workflows/proxy/search-attributes.js';
import type { DesiredSpec, ProxyWorkflowInput } from '../workflows/proxy/types.js';
import { PROXY_WORKFLOW_TYPE, signalProxy, type ProxyWorkflow } from '../workflows/proxy/client.js';
import { desiredSpecOf, type SecretView } from './desired.js';
import { createResilientInformer, type ResilientInformer } from '../kube/informer.js';
import { createProxyInformer } from '../kube/proxy-informer.js';
import { unionInformers, watchScopes } from '../kube/namespaced-informer.js';
import { createProxyClient, proxyKey, refOf, type ProxyRef } from '../kube/proxies.js';
import { secretViewOf } from '../kube/cloud-init.js';
import { recordedStatusOf } from '../kube/recorded-status.js';
import { createWorkQueue } from './workqueue.js';
import { createPoolBridge } from './pools.js';
import type { PoolTiming } from '../workflows/pool/types.js';
import { DEFAULT_RECONCILE_PERIOD_MS } from './defaults.js';
import { withSpan, type SpanHandle } from '../tracing/seam.js';

/** The ProxyPhase search attribute a run starts with (its status says Pending until its first write). */
const START_PHASE: ProxyPhase = 'Pending';

export interface BridgeOptions {
  kubeConfig: KubeConfig;
  client: Client;
  taskQueue: string;
  logger: Logger;
  maxHistoryEvents?: number;
  /** Keys reconciled at once. */
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

export interface Bridge {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Resolves when no key is queued or in flight (tests, shutdown). */
  idle(): Promise<void>;
  /** Where its metrics are (`metrics` when given, else a registry of its own): what it did, in Prometheus form. */
  readonly registry: Registry;
  /** Consecutive failures of a key (namespace/name); 0 after a success. */
  failures(key: string): number;
}

export function createBridge(opts: BridgeOptions): Bridge {
  const log = opts.logger.child({ component: 'bridge' });
  const core = opts.kubeConfig.makeApiClient(CoreV1Api);
  const concurrency = opts.concurrency ?? 8;
  const proxyClient = createProxyClient(opts.kubeConfig);

  /** What was last sent per key: a re-send of the same thing is skipped. Cleared on resync. */
  const lastSent = new Map<string, string>();
  /** When each key was last sent to Temporal (a reconcile pass skips what it sent since the pass began). */
  const sentAt = new Map<string, number>();
  /** The last UID seen per key, to address the workflow after the object is gone. */
  const lastRef = new Map<string, ProxyRef>();
  const registry = opts.metrics ?? new Registry();
  const metrics = bridgeMetrics(registry);
  const scopes = watchScopes(opts.namespace ? [opts.namespace] : opts.namespaces);
  const proxies = createProxyInformer({
    kubeConfig: opts.kubeConfig,
    logger: log,
    namespaces: scopes.filter((n) => n !== undefined),
    onRestart: () => metrics.informerRestarts.inc({ resource: 'proxies' }),
  });
  proxies.onChange((obj, event) => {
    metrics.watchEvents.inc({ resource: 'proxies', event });
    enqueue(proxyKey(refOf(obj)));
  });
  proxies.onReconnect(() => {
    // The informer replays what changed during an outage; a full pass on top
    // is the safety net for what it cannot see (a run an operator terminated
    // meanwhile). Forget what was sent so every Proxy is re-signalled (the
    // workflow dedupes by generation and hash). Not on the watch's routine
    // timeouts, which would add history to every Proxy workflow each time.
    lastSent.clear();
    for (const p of proxies.list()) enqueue(proxyKey(refOf(p)));
    void reconcileRuns();
  });

  const pools = createPoolBridge({
    kubeConfig: opts.kubeConfig,
    client: opts.client,
    taskQueue: opts.taskQueue,
    logger: log,
    proxies,
    scopes,
    signals: metrics.signals,
    ...(opts.maxHistoryEvents ? { maxHistoryEvents: opts.maxHistoryEvents } : {}),
    ...(opts.poolTiming ? { poolTiming: opts.poolTiming } : {}),
    ...(opts.retryBaseMs !== undefined ? { retryBaseMs: opts.retryBaseMs } : {}),
    ...(opts.retryMaxMs !== undefined ? { retryMaxMs: opts.retryMaxMs } : {}),
  });

  const secrets: ResilientInformer<V1Secret> = unionInformers(
    scopes.map((namespace) =>
      createResilientInformer<V1Secret>({
        kubeConfig: opts.kubeConfig,
        path: namespace ? `/api/v1/namespaces/${namespace}/secrets` : '/api/v1/secrets',
        labelSelector: `${LABEL_CLOUD_INIT}=true`,
        list: () =>
          namespace
            ? core.listNamespacedSecret({ namespace, labelSelector: `${LABEL_CLOUD_INIT}=true` })
            : core.listSecretForAllNamespaces({ labelSelector: `${LABEL_CLOUD_INIT}=true` }),
        logger: log,
        onRestart: () => metrics.informerRestarts.inc({ resource: 'secrets' }),
      }),
    ),
  );
  secrets.onChange((secret, event) => {
    metrics.watchEvents.inc({ resource: 'secrets', event });
    const ns = secret.metadata?.namespace ?? 'default';
    const name = secret.metadata?.name;
    for (const p of proxies.list(ns)) {
      if (p.spec.cloudInit?.secretRef?.name === name)
        enqueue(proxyKey({ namespace: ns, name: p.metadata.name }));
    }
  });

  const lookupSecret = (namespace: string, name: string): SecretView | undefined => {
    const s = secrets.get(name, namespace);
    return s && secretViewOf(s);
  };

  const queue = createWorkQueue({
    concurrency,
    baseDelayMs: opts.retryBaseMs ?? 1_000,
    maxDelayMs: opts.retryMaxMs ?? 2 * 60_000,
    // One span per reconcile: the root of the trace a Proxy change starts
    // (the Temporal client plugin carries it into the signal's headers).
    process: (k) =>
      withSpan('bridge reconcile', { 'proxy.key': k, attempt: queue.failures(k) + 1 }, (span) =>
        reconcile(k, span),
      ),
    onFailure(k, error, failures, delayMs) {
      metrics.retries.inc();
      metrics.errors.inc({ stage: 'reconcile' });
      log.warn(
        {
          proxy: k,
          attempt: failures,
          retryInMs: delayMs,
          depth: queue.depth(),
          waitingRetry: queue.waitingRetry(),
          err: error instanceof Error ? error.message : String(error),
        },
        'reconcile failed; retrying after backoff',
      );
    },
    onProcessed(_k, ok) {
      metrics.reconciles.inc({ result: ok ? 'ok' : 'error' });
      metrics.depth.set(queue.depth());
      metrics.waitingRetry.set(queue.waitingRetry());
    },
  });
  function enqueue(k: string): void {
    queue.add(k);
    metrics.depth.set(queue.depth());
  }

  /** The Proxy's resourceVersion after the patch; undefined when it was not added. */
  async function addFinalizer(proxy: Proxy): Promise<string | undefined> {
    // A conflict (another bridge changed it) or a Proxy already gone: its next event brings us back.
    const { result, resourceVersion } = await proxyClient.addFinalizer(proxy, FINALIZER);
    if (result !== 'added') return undefined;
    metrics.finalizers.inc();
    return resourceVersion;
  }

  async function reconcile(k: string, span: SpanHandle): Promise<void> {
    const [namespace, name] = k.split('/') as [string, string];
    log.debug({ proxy: k, attempt: queue.failures(k) + 1 }, 'reconciling');
    const proxy = proxies.get(name, namespace);
    if (!proxy) {
      // Gone from the cache: External proxies (no finalizer) and Managed ones
      // whose finalizer was just removed. Signal only: never start a workflow.
      const ref = lastRef.get(k);
      lastRef.delete(k);
      lastSent.delete(k);
      sentAt.delete(k);
      if (!ref) return;
      span.setAttributes({ action: 'signal-deletion' });
      try {
        await signalProxy(opts.client, ref, deletionRequestedSignal, { skipCleanup: false });
        metrics.signals.inc({ signal: 'deletionRequested' });
      } catch (error) {
        if (!(error instanceof WorkflowNotFoundError)) throw error;
      }
      return;
    }
    const ref = refOf(proxy);
    lastRef.set(k, ref);
    // The version the status below was read at: this bridge's own finalizer
    // patch moves it on.
    let recordedVersion = proxy.metadata.resourceVersion;
    if (
      proxy.spec.mode === 'Managed' &&
      !proxy.metadata.deletionTimestamp &&
      !(proxy.metadata.finalizers ?? []).includes(FINALIZER)
    ) {
      recordedVersion = (await addFinalizer(proxy)) ?? recordedVersion;
    }
    const desired = desiredSpecOf(proxy, lookupSecret);
    const fingerprint = JSON.stringify([ref.uid, desired]);
    if (lastSent.get(k) === fingerprint) {
      metrics.unchanged.inc();
      span.setAttributes({ action: 'unchanged' });
      return;
    }
    span.setAttributes({ action: 'signal-with-start', 'proxy.mode': desired.mode });
    // The status as this bridge last saw it: the run starts from it without
    // a read of its own, and knows the ProxyPhase set here.
    const input: ProxyWorkflowInput = {
      ref,
      desired,
      recorded: recordedStatusOf(proxy.status),
      indexedPhase: START_PHASE,
      ...(recordedVersion ? { recordedVersion } : {}),
    };
    if (opts.maxHistoryEvents) input.maxHistoryEvents = opts.maxHistoryEvents;
    const start = {
      workflowId: proxyWorkflowId(ref),
      taskQueue: opts.taskQueue,
      args: [input] as [ProxyWorkflowInput],
      // A run that completed (the Proxy was deleted) is never restarted by
      // a late event; one that failed or was terminated by an operator is.
      workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY' as const,
      typedSearchAttributes: [
        { key: ProxyNamespaceKey, value: ref.namespace },
        { key: ProxyNameKey, value: ref.name },
        { key: ProxyProviderKey, value: desired.provider ?? '' },
        { key: ProxyModeKey, value: desired.mode },
        { key: ProxyPhaseKey, value: START_PHASE },
      ],
    };
    const signalWithStart = () =>
      opts.client.workflow.signalWithStart<ProxyWorkflow, [DesiredSpec]>(PROXY_WORKFLOW_TYPE, {
        ...start,
        signal: specChangedSignal,
        signalArgs: [desired],
      });
    // A Proxy no run has written a status to, that this bridge has sent
    // nothing for, most likely has no run yet: a plain start carries the spec
    // in its input, where a signal beside it would be one more history event
    // and one more job in the run's first activation. A run that does exist
    // (a bridge restarted before the first status write) refuses the start,
    // and gets the signal.
    const firstSend = !lastSent.has(k) && proxy.status === undefined;
    try {
      if (!firstSend) await signalWithStart();
      else {
        try {
          await opts.client.workflow.start<ProxyWorkflow>(PROXY_WORKFLOW_TYPE, start);
        } catch (error) {
          if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
          await signalWithStart();
        }
      }
      metrics.signals.inc({ signal: 'specChanged' });
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
      log.debug({ proxy: k }, 'workflow already completed; not restarting');
    }
    lastSent.set(k, fingerprint);
    sentAt.set(k, Date.now());
  }

  const reconcileRunsOnce = () =>
    reconcilePass({
      client: opts.client,
      taskQueue: opts.taskQueue,
      namespaces: scopes.filter((n) => n !== undefined),
      restartsPerSecond: opts.restartsPerSecond ?? 10,
      proxies,
      proxyClient,
      queue,
      lastSent,
      sentAt,
      metrics,
      log,
    });

  // One pass at a time: a reconnect during the start-up pass joins it.
  let sweeping: Promise<void> | undefined;
  let sweepTimer: NodeJS.Timeout | undefined;
  let running = false;
  function reconcileRuns(): Promise<void> {
    sweeping ??= reconcileRunsOnce()
      .catch((error: unknown) => {
        metrics.errors.inc({ stage: 'list_runs' });
        log.warn(
          { err: error instanceof Error ? error.message : String(error) },
          'could not list the running Proxy workflows; the next pass tries again',
        );
      })
      .finally(() => {
        sweeping = undefined;
      });
    return sweeping;
  }
  function scheduleSweep(): void {
    if (!running) return;
    const base = opts.reconcilePeriodMs ?? DEFAULT_RECONCILE_PERIOD_MS;
    sweepTimer = setTimeout(
      () => {
        void reconcileRuns().finally(scheduleSweep);
      },
      base * (0.8 + Math.random() * 0.4),
    );
    sweepTimer.unref();
  }

  return {
    registry,
    async start() {
      queue.resume();
      await secrets.start();
      await proxies.start();
      await pools.start();
      log.info({ proxies: proxies.list().length }, 'bridge started');
      running = true;
      await reconcileRuns();
      scheduleSweep();
    },
    async stop() {
      running = false;
      if (sweepTimer) clearTimeout(sweepTimer);
      await sweeping;
      await pools.stop();
      await proxies.stop();
      await secrets.stop();
      await queue.shutDown();
    },
    idle: async () => {
      await queue.idle();
      await pools.idle();
    },
    failures: (k) => queue.failures(k),
  };
}
