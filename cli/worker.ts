/**
 * The Temporal worker: the Proxy workflow plus provider and Kubernetes
 * activities on one task queue.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import type { NativeConnection, WorkerPlugin } from '@temporalio/worker';
import { IllegalStateError } from '@temporalio/common';
import {
  bundleWorkflowCode,
  DefaultLogger,
  Runtime,
  type LogLevel,
  Worker,
  type WorkflowBundleOption,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { hostname } from 'node:os';
import { Counter, Registry } from 'prom-client';
import { createEventRecorder, type EventRecorder } from '../kube/events.js';
import { createDriftActivities, createTimingActivities } from '../activities/drift-activities.js';
import { createGcActivities } from '../activities/gc-activities.js';
import { createProviderCircuits } from '../activities/provider-circuit.js';
import { createKubeActivities } from '../activities/kube-activities.js';
import { createPoolActivities } from '../activities/pool-activities.js';
import { createProviderCheckActivities } from '../activities/provider-check-activities.js';
import { createProviderActivities } from '../activities/provider-activities.js';
import type { ProviderRegistry } from '../providers/config.js';
import type { PriceBook } from '../providers/prices.js';
import { DEFAULT_TIMING, type ProxyTiming } from '../workflows/proxy/types.js';

const SDK_LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/**
 * Routes the SDK's own logs (worker state, workflow `log`, webpack output)
 * through our logger at WARN and above: at INFO the SDK narrates every state
 * change and bundle step. Must run before the first NativeConnection.
 *
 * With `prometheusBindAddress` the SDK's own metrics (Core's Prometheus
 * exporter) are served there; the worker's /metrics appends them. Returns
 * whether this call installed the runtime with those metrics.
 */
export function installTemporalRuntime(
  logger: Logger,
  level: LogLevel = 'WARN',
  prometheusBindAddress?: string,
): boolean {
  const sdk = loggerFor(logger);
  const options = {
    logger: new DefaultLogger(level, (entry) =>
      sdk[SDK_LEVELS[entry.level]]({ ...entry.meta }, entry.message),
    ),
  };
  try {
    Runtime.install(
      prometheusBindAddress
        ? {
            ...options,
            telemetryOptions: { metrics: { prometheus: { bindAddress: prometheusBindAddress } } },
          }
        : options,
    );
    return prometheusBindAddress !== undefined;
  } catch (error) {
    // Already installed in this process (dev runs several parts in one; tests).
    if (error instanceof IllegalStateError) return false;
    // The exporter could not bind: run without SDK metrics rather than not at all.
    logger.warn({ err: String(error) }, 'Temporal SDK metrics unavailable');
    return prometheusBindAddress ? installTemporalRuntime(logger, level) && false : false;
  }
}

function loggerFor(logger: Logger): Logger {
  return logger.child({ component: 'temporal-sdk' });
}

/** The workflows entry point, from source (tsx, vitest) or from dist/. */
export function workflowsPath(): string {
  for (const ext of ['.ts', '.js']) {
    const path = fileURLToPath(new URL(`../workflows/index${ext}`, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error('workflows/index not found next to cli/');
}

/**
 * The bundle `npm run build` writes next to the compiled CLI
 * (infra/scripts/bundle-workflows.mjs), when running from dist/: the worker
 * then never runs webpack. Absent when running from source.
 */
export function prebuiltWorkflowBundle(): string | undefined {
  const path = fileURLToPath(new URL('../workflow-bundle.js', import.meta.url));
  return existsSync(path) ? path : undefined;
}

export async function bundleWorkflows(
  /** Workflow interceptor modules to bundle in (tracing's, for a replay with the plugin installed). */
  workflowInterceptorModules: string[] = [],
): Promise<WorkflowBundleWithSourceMap> {
  // Silence webpack's progress output; errors still throw.
  return bundleWorkflowCode({
    workflowsPath: workflowsPath(),
    ...(workflowInterceptorModules.length ? { workflowInterceptorModules } : {}),
    logger: { log() {}, info() {}, warn() {}, error() {}, debug() {}, trace() {} },
  });
}

export interface WorkerDeps {
  connection: NativeConnection;
  namespace: string;
  taskQueue: string;
  kubeConfig: KubeConfig;
  registry: ProviderRegistry;
  installation: string;
  logger: Logger;
  /** The providers config's prices: pools report what their members cost and keep their budgets. */
  prices?: PriceBook;
  /** A prebuilt bundle (tests bundle once per run); bundled from source when absent. */
  workflowBundle?: WorkflowBundleOption;
  /** Caps memory: a cached workflow costs on the order of 1 MB. */
  maxCachedWorkflows?: number;
  /** Where the provider-check gauges go (the process serving /metrics); a private registry when absent. */
  metrics?: Registry;
  /** Timing every Proxy workflow run on this worker reads at its start. Default DEFAULT_TIMING. */
  timing?: ProxyTiming;
  /** Whether the drift sweep Schedule runs (Proxies of swept providers then poll only at the safety poll). Default false. */
  driftSweepOn?: boolean;
  /** How long shutdown waits for in-flight activities before cancelling them (SDK default: none). */
  shutdownGraceTimeMs?: number;
  /** Where Proxy Events go; a recorder on `kubeConfig` when absent. */
  events?: EventRecorder;
  /** A namespace-scoped install's namespaces: GC and the drift sweep list Proxies there only. */
  namespaces?: readonly string[];
  /**
   * Worker plugins (tracing's: activity and workflow spans). A plugin's
   * workflow interceptors join the bundle only when the worker bundles from
   * source (it then ignores dist/workflow-bundle.js); a `workflowBundle`
   * given here must have been built with them.
   */
  plugins?: WorkerPlugin[];
}

/** The worker's Event recorder, counting into `metrics`. */
export function createWorkerEventRecorder(
  kubeConfig: KubeConfig,
  logger: Logger,
  metrics: Registry,
): EventRecorder {
  return createEventRecorder({
    kubeConfig,
    logger,
    reportingInstance: `egress-proxies-worker-${hostname()}-${process.pid}`,
    counter:
      (metrics.getSingleMetric('egress_kube_events_total') as Counter<'type' | 'outcome'> | undefined) ??
      new Counter({
        name: 'egress_kube_events_total',
        help: 'Kubernetes Events about Proxies by type and outcome (created; series: a repeat marked on its Event; counted: a repeat kept for the next series update; failed)',
        labelNames: ['type', 'outcome'] as const,
        registers: [metrics],
      }),
  });
}

/**
 * Young-generation cap of isolates created from now on, in MiB per
 * semi-space (V8's default on 64-bit is 16). The only such isolate is the
 * SDK's workflow thread, which it creates without resourceLimits: its
 * activations are small and short-lived, and at the default its young
 * generation grew to tens of MiB of RSS it kept between the rare wake-ups
 * of a steady fleet. The main isolate, created before this runs, keeps its
 * flags.
 */
const WORKFLOW_THREAD_SEMI_SPACE_MIB = 4;

export async function createProxyWorker(deps: WorkerDeps): Promise<Worker> {
  setFlagsFromString(`--max-semi-space-size=${WORKFLOW_THREAD_SEMI_SPACE_MIB}`);
  const circuitLog = deps.logger.child({ component: 'provider-circuit' });
  // One circuit per provider for the whole worker: every workflow's calls
  // and the drift sweep's lists see the same backend health.
  const circuits = createProviderCircuits({
    onChange: (provider, view) =>
      circuitLog.warn({ provider, ...view }, view.open ? 'provider calls paused' : 'provider calls resumed'),
  });
  const metrics = deps.metrics ?? new Registry();
  const events = deps.events ?? createWorkerEventRecorder(deps.kubeConfig, deps.logger, metrics);
  const providerActivities = createProviderActivities({
    events,
    registry: deps.registry,
    kubeConfig: deps.kubeConfig,
    installation: deps.installation,
    logger: deps.logger,
    circuits,
  });
  const kubeActivities = createKubeActivities({ kubeConfig: deps.kubeConfig, logger: deps.logger, events });
  const activities = {
    ...providerActivities,
    ...createDriftActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      logger: deps.logger,
      circuits,
      namespaces: deps.namespaces,
    }),
    ...createTimingActivities({
      registry: deps.registry,
      timing: deps.timing ?? DEFAULT_TIMING,
      sweepOn: deps.driftSweepOn ?? false,
      createInstance: (input) => providerActivities.createInstance(input),
      writeProxyStatus: (input) => kubeActivities.writeProxyStatus(input),
      logger: deps.logger,
    }),
    ...kubeActivities,
    ...createPoolActivities({
      kubeConfig: deps.kubeConfig,
      logger: deps.logger,
      events,
      ...(deps.prices ? { prices: deps.prices } : {}),
      providerPaused: (provider) => {
        const view = circuits.view(provider);
        return view.open ? `${view.consecutiveFailures} calls failed in a row` : undefined;
      },
    }),
    ...createGcActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      installation: deps.installation,
      logger: deps.logger,
      namespaces: deps.namespaces,
    }),
    ...createProviderCheckActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      installation: deps.installation,
      logger: deps.logger,
      metrics,
    }),
  };
  // The prebuilt bundle has no plugin's workflow interceptors (tracing's):
  // with plugins the worker bundles from source so they join it.
  const prebuilt = deps.workflowBundle || deps.plugins?.length ? undefined : prebuiltWorkflowBundle();
  deps.logger.info(
    { workflowBundle: deps.workflowBundle ? 'given' : (prebuilt ?? 'bundled at start from source') },
    'workflow code',
  );
  return Worker.create({
    connection: deps.connection,
    namespace: deps.namespace,
    taskQueue: deps.taskQueue,
    ...(deps.workflowBundle
      ? { workflowBundle: deps.workflowBundle }
      : prebuilt
        ? { workflowBundle: { codePath: prebuilt } }
        : { workflowsPath: workflowsPath() }),
    activities,
    maxCachedWorkflows: deps.maxCachedWorkflows ?? 500,
    ...(deps.shutdownGraceTimeMs ? { shutdownGraceTime: deps.shutdownGraceTimeMs } : {}),
    ...(deps.plugins?.length ? { plugins: deps.plugins } : {}),
  });
}
