/**
 * The bridge's reconcile pass: running Proxy workflows against the Proxies
 * in its cache, both ways.
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
import type { WorkQueue } from './workqueue.js';

export interface ReconcilePassDeps {
  client: Client;
  taskQueue: string;
  /** The watched namespaces; empty for all. */
  namespaces: readonly string[];
  restartsPerSecond: number;
  proxies: ResilientInformer<Proxy>;
  proxyClient: ProxyClient;
  queue: WorkQueue;
  /** What was last sent per key: a Proxy found without a run has it forgotten, so it is sent again. */
  lastSent: Map<string, string>;
  /** When each key was last sent (a pass skips what it sent since the pass began). */
  sentAt: Map<string, number>;
  metrics: BridgeMetrics;
  log: Logger;
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
 * pass at a time (reconcileRuns).
 */
export async function reconcilePass(deps: ReconcilePassDeps): Promise<void> {
  const { proxies, proxyClient, queue, lastSent, sentAt, metrics, log } = deps;
  const query = runningProxyWorkflowsQuery(deps.taskQueue, deps.namespaces);
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
  const spacingMs = 1_000 / deps.restartsPerSecond;
  for (const p of cached) {
    const ref = refOf(p);
    if (runningIds.has(proxyWorkflowId(ref))) continue;
    const k = proxyKey(ref);
    // Still the same object, and not already being retried after a failure
    // (its retry sends again anyway; an earlier add would cut its backoff).
    if (proxies.get(ref.name, ref.namespace)?.metadata.uid !== ref.uid) continue;
    if (queue.failures(k) > 0 || (sentAt.get(k) ?? 0) >= passStartedAt) continue;
    lastSent.delete(k);
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
