/**
 * The bridge's reconcile pass: running Proxy workflows against the Proxies
 * in its cache, both ways; and the sweep that runs it, one pass at a time,
 * at start, after a watch outage and once per period.
 */
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Logger } from 'pino';
import type { Proxy } from '../resources/proxy-schema.js';
import type { ResilientInformer } from '../kube/informer.js';
import { proxyKey, refOf, type ProxyClient } from '../kube/proxies.js';
import { PROXY_WORKFLOW_TYPE, signalProxy } from '../workflows/proxy/client.js';
import { parseProxyWorkflowId, proxyWorkflowId } from '../workflows/proxy/ids.js';
import { deletionRequestedSignal } from '../workflows/proxy/messages.js';
import { ProxyNamespaceKey } from '../workflows/proxy/search-attributes.js';
import type { BridgeMetrics } from './metrics.js';
import type { ProxyReconciler } from './proxy-reconciler.js';

export interface SweepSettings {
  taskQueue: string;
  /** The watched namespaces; empty for all. */
  namespaces: readonly string[];
  /** How often a pass runs (±20 % jitter), besides at start and after every watch outage. */
  periodMs: number;
  /** Most workflows restarted per second by one pass. */
  restartsPerSecond: number;
}

export interface RunSweepDeps {
  settings: SweepSettings;
  client: Client;
  proxies: ResilientInformer<Proxy>;
  proxyClient: Pick<ProxyClient, 'read'>;
  /**
   * The Proxy reconciler's lane and what it sent: a Proxy found without a
   * run is queued again with what was sent forgotten, so it is sent again.
   */
  reconciler: Pick<ProxyReconciler, 'queue' | 'sent'>;
  metrics: BridgeMetrics;
  log: Logger;
}

export interface RunSweep {
  /** One pass now (a call during a pass joins it); a failure to list is logged and counted, never thrown. */
  run(): Promise<void>;
  /** A pass now, then one per period until stop. */
  start(): Promise<void>;
  /** No pass after this; resolves when the one running ends. */
  stop(): Promise<void>;
}

/**
 * The visibility query for this task queue's running Proxy workflows. A
 * namespace-scoped bridge neither sees nor may read the Proxies of other
 * namespaces, so it lists only theirs.
 */
export function runningProxyWorkflowsQuery(taskQueue: string, namespaces: readonly string[]): string {
  const scope =
    namespaces.length === 0
      ? ''
      : namespaces.length === 1
        ? ` AND ${ProxyNamespaceKey.name} = '${namespaces[0]}'`
        : ` AND ${ProxyNamespaceKey.name} IN (${namespaces.map((n) => `'${n}'`).join(', ')})`;
  return `WorkflowType = '${PROXY_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' AND TaskQueue = '${taskQueue}'${scope}`;
}

/**
 * One reconcile pass over the running Proxy workflows, both ways.
 *
 * A Proxy in the cache with no running workflow (an operator terminated it,
 * it failed on a bug, or a signalWithStart never reached Temporal) is
 * queued again with what was sent forgotten, so its reconcile starts a new
 * run with the current desired spec; that run adopts the instance by its
 * deterministic name and UID mark. Restarts are spread at
 * restartsPerSecond so a pass after an outage does not flood Temporal.
 * A run is "missing" by the visibility store, which lags: a false positive
 * costs one signal the workflow dedupes, never a second run (same ID).
 *
 * Proxy workflows still running for a Proxy that no longer exists: it was
 * deleted while no bridge was watching (an External one, or a Managed one
 * whose finalizer was removed by hand), so no delete event will ever come.
 * Each is told to delete; the run cleans up its instance and ends. A Proxy
 * missing from this bridge's cache is confirmed by a direct read first,
 * because another bridge may have started its workflow before this cache
 * saw it. Runs at start, after a watch outage and periodically, one
 * pass at a time (createRunSweep).
 */
async function reconcilePass(deps: RunSweepDeps): Promise<void> {
  const { proxies, proxyClient, metrics, log } = deps;
  const { queue, sent } = deps.reconciler;
  const query = runningProxyWorkflowsQuery(deps.settings.taskQueue, deps.settings.namespaces);
  let failures = 0;
  const runningIds = new Set<string>();
  // Proxies in the cache before the list: one created during it may not be listed yet.
  const cached = proxies.list();
  const passStartedAt = Date.now();
  for await (const run of deps.client.workflow.list({ query })) {
    runningIds.add(run.workflowId);
    const ref = parseProxyWorkflowId(run.workflowId);
    if (!ref || proxies.get(ref.name, ref.namespace)?.metadata.uid === ref.uid) continue;
    // One run that cannot be checked or told must not stop the others.
    try {
      if ((await proxyClient.read(ref)) !== undefined) continue;
      await signalProxy(deps.client, run, deletionRequestedSignal, { skipCleanup: false });
      metrics.orphanedRuns.inc();
      metrics.signals.inc({ signal: 'deletionRequested' });
      log.warn({ workflowId: run.workflowId }, 'the Proxy of a running workflow is gone; asked it to delete');
    } catch (error) {
      // Visibility lags: a run that just completed may still be listed.
      if (error instanceof WorkflowNotFoundError) continue;
      failures += 1;
      metrics.errors.inc({ stage: 'check_run' });
      log.warn(
        { workflowId: run.workflowId, err: error instanceof Error ? error.message : String(error) },
        'could not check whether the Proxy of a running workflow is gone; next sweep tries again',
      );
    }
  }
  let missing = 0;
  const spacingMs = 1_000 / deps.settings.restartsPerSecond;
  for (const p of cached) {
    const ref = refOf(p);
    if (runningIds.has(proxyWorkflowId(ref))) continue;
    const k = proxyKey(ref);
    // Still the same object, and not already being retried after a failure
    // (its retry sends again anyway; an earlier add would cut its backoff).
    if (proxies.get(ref.name, ref.namespace)?.metadata.uid !== ref.uid) continue;
    if (queue.failures(k) > 0 || sent.sentSince(k, passStartedAt)) continue;
    sent.forget(k);
    queue.addAfter(k, missing * spacingMs);
    missing += 1;
  }
  if (missing > 0) {
    metrics.restarts.inc(missing);
  }
  metrics.passes.inc();
  log.info(
    {
      proxies: cached.length,
      runningWorkflows: runningIds.size,
      withoutRun: missing,
      depth: queue.depth(),
      waitingRetry: queue.waitingRetry(),
    },
    'reconciled Proxies with running workflows',
  );
  if (missing > 0) log.warn({ proxies: missing }, 'Proxies without a running workflow; starting them again');
  if (failures > 0) log.warn({ failures }, 'reconcile pass: some runs could not be checked');
}

/** The passes: one at a time, at start, on demand (a watch outage) and once per period (jittered). */
export function createRunSweep(deps: RunSweepDeps): RunSweep {
  // One pass at a time: a reconnect during the start-up pass joins it.
  let sweeping: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  function run(): Promise<void> {
    sweeping ??= reconcilePass(deps)
      .catch((error: unknown) => {
        deps.metrics.errors.inc({ stage: 'list_runs' });
        deps.log.warn(
          { err: error instanceof Error ? error.message : String(error) },
          'could not list the running Proxy workflows; the next pass tries again',
        );
      })
      .finally(() => {
        sweeping = undefined;
      });
    return sweeping;
  }
  function schedule(): void {
    if (!running) return;
    timer = setTimeout(
      () => {
        void run().finally(schedule);
      },
      deps.settings.periodMs * (0.8 + Math.random() * 0.4),
    );
    timer.unref();
  }
  return {
    run,
    async start() {
      running = true;
      await run();
      schedule();
    },
    async stop() {
      running = false;
      if (timer) clearTimeout(timer);
      await sweeping;
    },
  };
}
