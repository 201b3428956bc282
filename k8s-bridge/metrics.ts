/**
 * The bridge's Prometheus metrics: the one record of what it did (signals
 * sent, passes, restarts, retries), read by operators and by the tests.
 * Every labelled series exists from the start, so rate() and alerts work
 * before the first occurrence.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export type BridgeMetrics = ReturnType<typeof createBridgeMetrics>;

export function bridgeMetrics(registry: Registry): BridgeMetrics {
  const metrics = createBridgeMetrics(registry);
  for (const signal of ['specChanged', 'deletionRequested', 'poolChanged'])
    metrics.signals.inc({ signal }, 0);
  for (const stage of ['reconcile', 'list_runs', 'check_run']) metrics.errors.inc({ stage }, 0);
  for (const resource of ['proxies', 'secrets', 'proxypools']) metrics.informerRestarts.inc({ resource }, 0);
  return metrics;
}

function createBridgeMetrics(registry: Registry) {
  return {
    depth: new Gauge({
      name: 'egress_bridge_workqueue_depth',
      help: 'Proxy keys waiting in the bridge work queue',
      registers: [registry],
    }),
    waitingRetry: new Gauge({
      name: 'egress_bridge_workqueue_waiting_retry',
      help: 'Proxy keys waiting for their backoff delay after a failed reconcile',
      registers: [registry],
    }),
    retries: new Counter({
      name: 'egress_bridge_workqueue_retries_total',
      help: 'Failed reconciles of a Proxy key, each retried after an exponential per-key delay',
      registers: [registry],
    }),
    reconciles: new Counter({
      name: 'egress_bridge_reconciles_total',
      help: 'Reconciles of a Proxy key by result',
      labelNames: ['result'] as const,
      registers: [registry],
    }),
    passes: new Counter({
      name: 'egress_bridge_reconcile_passes_total',
      help: 'Passes comparing cached Proxies with running Proxy workflows',
      registers: [registry],
    }),
    watchEvents: new Counter({
      name: 'egress_bridge_watch_events_total',
      help: 'Watch events handled by the bridge, by resource (proxies, secrets) and event (add, update, delete)',
      labelNames: ['resource', 'event'] as const,
      registers: [registry],
    }),
    signals: new Counter({
      name: 'egress_bridge_signals_total',
      help: 'Signals sent to Proxy workflows (specChanged through signalWithStart, deletionRequested)',
      labelNames: ['signal'] as const,
      registers: [registry],
    }),
    errors: new Counter({
      name: 'egress_bridge_errors_total',
      help: 'Bridge failures by stage: reconcile (a key, retried), list_runs (a pass could not list workflows), check_run (one run could not be checked)',
      labelNames: ['stage'] as const,
      registers: [registry],
    }),
    informerRestarts: new Counter({
      name: 'egress_bridge_informer_restarts_total',
      help: 'Watches restarted after an error, by resource',
      labelNames: ['resource'] as const,
      registers: [registry],
    }),
    finalizers: new Counter({
      name: 'egress_bridge_finalizers_added_total',
      help: 'Finalizers added to Managed Proxies',
      registers: [registry],
    }),
    restarts: new Counter({
      name: 'egress_bridge_workflows_restarted_total',
      help: 'Proxy workflows started again because a Proxy had no running workflow',
      registers: [registry],
    }),
    orphanedRuns: new Counter({
      name: 'egress_bridge_orphaned_runs_total',
      help: 'Running Proxy workflows whose Proxy was gone, told to delete by a reconcile pass',
      registers: [registry],
    }),
    unchanged: new Counter({
      name: 'egress_bridge_unchanged_total',
      help: 'Reconciles that sent nothing because the desired spec was already sent',
      registers: [registry],
    }),
  };
}
