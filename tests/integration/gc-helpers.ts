/**
 * A worker for the GC and provider-check workflows on the shared Temporal dev
 * server and apiserver: the real activities (GC and provider checks, wired
 * as the production worker wires them) over a registry the test controls.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection, type ScheduleHandle } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
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

export interface ScheduleWorker {
  client: Client;
  taskQueue: string;
  installation: string;
  metrics: Registry;
  logger: Logger;
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
  try {
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // Installed already in this process.
  }
  const installation = `${opts.prefix}-${randomBytes(4).toString('hex')}`;
  const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });
  const metrics = new Registry();
  const taskQueue = uniqueTaskQueue(opts.prefix);
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
    worker,
    async close() {
      worker.shutdown();
      await running;
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
