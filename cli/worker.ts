/**
 * The Temporal worker: the Proxy workflow plus provider and Kubernetes
 * activities on one task queue.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { NativeConnection, WorkerPlugin } from '@temporalio/worker';
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
import { Registry } from 'prom-client';
import { createDriftActivities, createTimingActivities } from '../activities/drift-activities.js';
import { createGcActivities } from '../activities/gc-activities.js';
import { createProviderCircuits } from '../activities/provider-circuit.js';
import { createKubeActivities } from '../activities/kube-activities.js';
import { createProviderCheckActivities } from '../activities/provider-check-activities.js';
import { createProviderActivities } from '../activities/provider-activities.js';
import type { ProviderRegistry } from '../providers/config.js';
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
 */
export function installTemporalRuntime(logger: Logger, level: LogLevel = 'WARN'): void {
  const sdk = logger.child({ component: 'temporal-sdk' });
  try {
    Runtime.install({
      logger: new DefaultLogger(level, (entry) =>
        sdk[SDK_LEVELS[entry.level]]({ ...entry.meta }, entry.message),
      ),
    });
  } catch {
    // Already installed in this process (dev runs several parts in one).
  }
}

/** The workflows entry point, from source (tsx, vitest) or from dist/. */
export function workflowsPath(): string {
  for (const ext of ['.ts', '.js']) {
    const path = fileURLToPath(new URL(`../workflows/index${ext}`, import.meta.url));
    if (existsSync(path)) return path;
  }
  throw new Error('workflows/index not found next to cli/');
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
  /**
   * Worker plugins (tracing's: activity and workflow spans). A plugin's
   * workflow interceptors join the bundle only when the worker bundles from
   * source; a prebuilt `workflowBundle` must have been built with them.
   */
  plugins?: WorkerPlugin[];
}

export async function createProxyWorker(deps: WorkerDeps): Promise<Worker> {
  const circuitLog = deps.logger.child({ component: 'provider-circuit' });
  // One circuit per provider for the whole worker: every workflow's calls
  // and the drift sweep's lists see the same backend health.
  const circuits = createProviderCircuits({
    onChange: (provider, view) =>
      circuitLog.warn({ provider, ...view }, view.open ? 'provider calls paused' : 'provider calls resumed'),
  });
  const activities = {
    ...createProviderActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      installation: deps.installation,
      logger: deps.logger,
      circuits,
    }),
    ...createDriftActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      logger: deps.logger,
      circuits,
    }),
    ...createTimingActivities({
      registry: deps.registry,
      timing: deps.timing ?? DEFAULT_TIMING,
      sweepOn: deps.driftSweepOn ?? false,
    }),
    ...createKubeActivities({ kubeConfig: deps.kubeConfig, logger: deps.logger }),
    ...createGcActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      installation: deps.installation,
      logger: deps.logger,
    }),
    ...createProviderCheckActivities({
      registry: deps.registry,
      kubeConfig: deps.kubeConfig,
      installation: deps.installation,
      logger: deps.logger,
      metrics: deps.metrics ?? new Registry(),
    }),
  };
  return Worker.create({
    connection: deps.connection,
    namespace: deps.namespace,
    taskQueue: deps.taskQueue,
    ...(deps.workflowBundle ? { workflowBundle: deps.workflowBundle } : { workflowsPath: workflowsPath() }),
    activities,
    maxCachedWorkflows: deps.maxCachedWorkflows ?? 500,
    ...(deps.shutdownGraceTimeMs ? { shutdownGraceTime: deps.shutdownGraceTimeMs } : {}),
    ...(deps.plugins?.length ? { plugins: deps.plugins } : {}),
  });
}
