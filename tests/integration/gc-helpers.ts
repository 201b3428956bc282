/**
 * A worker for the GC and provider-check workflows on the shared Temporal dev
 * server and apiserver: the real activities (GC and provider checks, wired
 * as the production worker wires them) over a registry the test controls.
 *
 * Its log lines are captured, so tests assert the lines operators rely on:
 * the activities' pino lines, and the workflows' `log` lines, which the
 * Temporal Runtime's logger routes (by task queue) into the same pino logger,
 * as `installTemporalRuntime` does in production. `EP_TEST_LOG_LEVEL=info`
 * also prints them.
 */
import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual, inspect } from 'node:util';
import { Client, Connection, type ScheduleHandle } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker, type LogEntry } from '@temporalio/worker';
import { KubeConfig } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import { inject } from 'vitest';
import { createGcActivities } from '../../activities/gc-activities.js';
import { createProviderCheckActivities } from '../../activities/provider-check-activities.js';
import type { ProviderRegistry } from '../../providers/config.js';
import type { Provider } from '../../providers/types.js';
import {
  eventually,
  temporalClient,
  uniqueTaskQueue,
  workerConnection,
  workflowBundle,
} from '../helpers/temporal.js';

export interface MutableRegistry extends ProviderRegistry {
  set(providers: Provider[]): void;
}

export function mutableRegistry(initial: Provider[]): MutableRegistry {
  let current = [...initial];
  return {
    get: (name) => current.find((p) => p.name === name),
    names: () => current.map((p) => p.name),
    set: (providers) => {
      current = [...providers];
    },
    close: async () => {
      await Promise.allSettled(initial.map((p) => (p.close ? p.close() : Promise.resolve())));
    },
  };
}

/** One pino line, parsed. */
export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface LogCapture {
  /** Every line so far, oldest first. */
  readonly lines: readonly LogLine[];
  /** The lines with this message whose fields include `fields` (deep-equal values). */
  find(msg: string, fields?: Record<string, unknown>): LogLine[];
  /** Waits for the first line `find` returns (workflow lines arrive after the activation that logged them). */
  waitFor(msg: string, fields?: Record<string, unknown>): Promise<LogLine>;
}

/** pino's numeric levels. */
export const LEVEL = { debug: 20, info: 30, warn: 40, error: 50 } as const;

/** A pino logger (level debug) writing into memory; echoed to stdout at EP_TEST_LOG_LEVEL and above. */
export function capturingLogger(): { logger: Logger; capture: LogCapture } {
  const lines: LogLine[] = [];
  const echoName = process.env.EP_TEST_LOG_LEVEL;
  const echoAt = echoName === undefined ? Infinity : (pino.levels.values[echoName] ?? Infinity);
  const logger: Logger = pino(
    { level: 'debug' },
    {
      write(line: string) {
        const parsed = JSON.parse(line) as LogLine;
        lines.push(parsed);
        if (parsed.level >= echoAt) process.stdout.write(line);
      },
    },
  );
  const find = (msg: string, fields: Record<string, unknown> = {}) =>
    lines.filter(
      (l) => l.msg === msg && Object.entries(fields).every(([k, v]) => isDeepStrictEqual(l[k], v)),
    );
  return {
    logger,
    capture: {
      lines,
      find,
      waitFor: (msg, fields = {}) =>
        eventually(
          `log line "${msg}" ${JSON.stringify(fields)}`,
          () => Promise.resolve(find(msg, fields)[0]),
          {
            timeoutMs: 10_000,
            intervalMs: 50,
          },
        ),
    },
  };
}

/** Task queue → the logger of the test worker polling it: where the Runtime's lines for it go. */
const runtimeRoutes = new Map<string, Logger>();
let runtimeInstalled = false;

/**
 * Installs the process's Temporal Runtime (once) with a logger that sends each
 * entry carrying a task queue (workflow `log` lines, worker lines) to that
 * test worker's logger, as production's `installTemporalRuntime` sends them
 * to the worker's pino logger. Other warnings and errors go to stderr.
 */
function installRoutingRuntime(): void {
  if (runtimeInstalled) return;
  try {
    Runtime.install({
      logger: new DefaultLogger('INFO', (entry: LogEntry) => {
        const taskQueue: unknown = entry.meta?.taskQueue;
        const target = typeof taskQueue === 'string' ? runtimeRoutes.get(taskQueue) : undefined;
        const level = entry.level.toLowerCase() as 'trace' | 'debug' | 'info' | 'warn' | 'error';
        if (target) target.child({ component: 'temporal-sdk' })[level]({ ...entry.meta }, entry.message);
        else if (entry.level === 'WARN' || entry.level === 'ERROR')
          process.stderr.write(`${entry.level} ${entry.message} ${inspect(entry.meta ?? {})}\n`);
      }),
    });
    runtimeInstalled = true;
  } catch {
    // Installed already in this process by something else: workflow lines are not captured.
  }
}

export interface ScheduleWorker {
  client: Client;
  taskQueue: string;
  installation: string;
  metrics: Registry;
  logger: Logger;
  /** Everything `logger` wrote: activity lines and, routed by task queue, the workflows' lines. */
  logs: LogCapture;
  worker: Worker;
  close(): Promise<void>;
}

export async function startScheduleWorker(opts: {
  prefix: string;
  kubeConfig: KubeConfig;
  registry: ProviderRegistry;
  /** A Temporal server of the test's own; default: the shared one from the global setup. */
  temporal?: { address: string; namespace: string };
}): Promise<ScheduleWorker> {
  installRoutingRuntime();
  const installation = `${opts.prefix}-${randomBytes(4).toString('hex')}`;
  const { logger, capture } = capturingLogger();
  const metrics = new Registry();
  const taskQueue = uniqueTaskQueue(opts.prefix);
  runtimeRoutes.set(taskQueue, logger);
  const own = opts.temporal;
  const { client, connection }: { client: Client; connection: Connection } = own
    ? await Connection.connect({ address: own.address }).then((c) => ({
        connection: c,
        client: new Client({ connection: c, namespace: own.namespace }),
      }))
    : await temporalClient();
  const native: NativeConnection = own
    ? await NativeConnection.connect({ address: own.address })
    : await workerConnection();
  const worker = await Worker.create({
    connection: native,
    namespace: own?.namespace ?? inject('temporalNamespace'),
    taskQueue,
    workflowBundle: workflowBundle(),
    activities: {
      ...createGcActivities({ registry: opts.registry, kubeConfig: opts.kubeConfig, installation, logger }),
      ...createProviderCheckActivities({
        registry: opts.registry,
        kubeConfig: opts.kubeConfig,
        installation,
        logger,
        metrics,
      }),
    },
  });
  const running = worker.run();
  return {
    client,
    taskQueue,
    installation,
    metrics,
    logger,
    logs: capture,
    worker,
    async close() {
      worker.shutdown();
      await running;
      runtimeRoutes.delete(taskQueue);
      await native.close();
      await connection.close();
    },
  };
}

/** Waits until the schedule has completed its `n`th action (1-based) and returns that run's result. */
export async function nthResult<T>(
  client: Client,
  handle: ScheduleHandle,
  n: number,
  timeoutMs = 60_000,
): Promise<T> {
  const action = await eventually(
    `schedule ${handle.scheduleId} action ${n}`,
    async () => {
      const d = await handle.describe();
      return d.info.recentActions.length >= n ? d.info.recentActions[n - 1] : undefined;
    },
    { timeoutMs, intervalMs: 100 },
  );
  const wf = action.action.workflow;
  return (await client.workflow.getHandle(wf.workflowId, wf.firstExecutionRunId).result()) as T;
}

/** A copy of `kc` whose clusters are reached through `127.0.0.1:port` (a relay) instead. */
export function kubeConfigVia(kc: KubeConfig, port: number): KubeConfig {
  const relayed = new KubeConfig();
  relayed.loadFromOptions({
    clusters: kc.clusters.map((c) => ({ ...c, server: `https://127.0.0.1:${port}` })),
    users: kc.users,
    contexts: kc.contexts,
    currentContext: kc.getCurrentContext(),
  });
  return relayed;
}
