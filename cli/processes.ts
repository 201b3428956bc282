/**
 * The long-running parts of the control plane, each started from validated
 * config and returning a stop function. `worker`, `bridge` and `api` run one
 * each; `dev` runs all three in one process.
 */
import { Client, Connection } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Registry } from 'prom-client';
import {
  createApi,
  createInformerProxyCatalog,
  MemoryLeaseStore,
  parseListenAddress,
  RedisLeaseStore,
  serveApi,
  type ApiOptions,
  type LeaseStore,
} from '../api/index.js';
import { createProber, createProxyProbeTargets, createTemporalHealthSignaller } from '../api/prober/index.js';
import { createBridge } from '../k8s-bridge/bridge.js';
import { createProxyInformer } from '../kube/proxy-informer.js';
import {
  buildProviders,
  loadProvidersConfig,
  devProvidersConfig,
  type ProvidersConfig,
} from '../providers/config.js';
import type { CommonConfig } from './config.js';
import type { BridgeConfig, WorkerConfig } from './plan.js';
import { deriveInstallation } from './kube.js';
import { serveMetrics } from './metrics-server.js';
import { ensureSchedules, validateSchedulesConfig, type SchedulesConfig } from './schedules.js';
import { createProxyWorker, installTemporalRuntime } from './worker.js';

export interface Running {
  name: string;
  /** Resolves when the part stops by itself (a worker failure); never for servers. */
  done: Promise<void>;
  stop(): Promise<void>;
  /** Where to reach it, for the start-up banner. */
  describe(): string;
}

export async function startWorker(
  config: WorkerConfig,
  kc: KubeConfig,
  logger: Logger,
  opts: { dev?: boolean; metrics?: Registry } = {},
): Promise<Running> {
  let providersConfig: ProvidersConfig;
  if (config.providersConfig) providersConfig = await loadProvidersConfig(config.providersConfig);
  else if (opts.dev) providersConfig = devProvidersConfig();
  else throw new Error('--providers-config (or PROVIDERS_CONFIG) is required for the worker');
  const registry = buildProviders(providersConfig, { logger, stateRoot: config.stateDir });
  const installation = config.installation ?? (await deriveInstallation(kc));
  installTemporalRuntime(logger);
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const metrics = opts.metrics ?? new Registry();
  const worker = await createProxyWorker({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    kubeConfig: kc,
    registry,
    installation,
    logger,
    metrics,
    maxCachedWorkflows: config.maxCachedWorkflows,
    timing: config.timing,
    driftSweepOn: config.driftSweepMs > 0,
  });
  const done = worker.run();
  logger.info({ taskQueue: config.taskQueue, providers: registry.names(), installation }, 'worker started');

  // The worker owns the schedules that drive GC and provider checks:
  // created or updated to match this config at every start.
  const schedulesConfig: SchedulesConfig = {
    taskQueue: config.taskQueue,
    gc: { intervalMs: config.gc.intervalMs, minAgeMs: config.gc.minAgeMs, dryRun: config.gc.dryRun },
    providerChecks: { intervalMs: config.providerCheckIntervalMs },
    driftSweep: { intervalMs: config.driftSweepMs },
  };
  const problems = validateSchedulesConfig(schedulesConfig);
  if (problems.length > 0) throw new Error(problems.join('; '));
  const clientConnection = await Connection.connect({ address: config.temporalAddress });
  const schedules = await ensureSchedules(
    new Client({ connection: clientConnection, namespace: config.temporalNamespace }),
    schedulesConfig,
    logger,
  );
  await clientConnection.close();

  let metricsServer: { url: string; close(): Promise<void> } | undefined;
  if (config.metricsAddr) {
    const { host, port } = parseListenAddress(config.metricsAddr, '--metrics-addr');
    metricsServer = await serveMetrics(metrics, host, port);
  }
  return {
    name: 'worker',
    done,
    describe: () =>
      `worker on task queue ${config.taskQueue}, providers: ${registry.names().join(', ')}; schedules: gc ${schedules.gc}, provider checks ${schedules.providerChecks}, drift sweep ${schedules.driftSweep ?? 'unchanged'}` +
      (metricsServer ? `; metrics ${metricsServer.url}` : ''),
    async stop() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
      await metricsServer?.close();
      await registry.close();
      await connection.close();
    },
  };
}

export async function startBridge(config: BridgeConfig, kc: KubeConfig, logger: Logger): Promise<Running> {
  const connection = await Connection.connect({ address: config.temporalAddress });
  const client = new Client({ connection, namespace: config.temporalNamespace });
  const bridge = createBridge({
    kubeConfig: kc,
    client,
    taskQueue: config.taskQueue,
    logger,
    reconcilePeriodMs: config.reconcilePeriodMs,
  });
  await bridge.start();
  return {
    name: 'bridge',
    done: new Promise(() => undefined),
    describe: () => 'bridge watching Proxies and cloud-init Secrets in all namespaces',
    async stop() {
      await bridge.stop();
      await connection.close();
    },
  };
}

/**
 * The api process: the lease API and the health prober. Both read Proxies
 * from the apiserver; the prober signals verdict transitions to the Proxy
 * workflows, which write status.
 */
export async function startApi(
  apiOptions: ApiOptions,
  config: Pick<CommonConfig, 'temporalAddress' | 'temporalNamespace' | 'metricsAddr'>,
  kc: KubeConfig,
  logger: Logger,
  registry: Registry = new Registry(),
  opts: { metricsServedElsewhere?: boolean } = {},
): Promise<Running & { url: string; registry: Registry; metricsUrl: string }> {
  // One Proxy cache for the lease API and the prober.
  const proxies = createProxyInformer({ kubeConfig: kc, logger });
  await proxies.start();
  // From here on a failure (the port in use, Temporal unreachable, ...) stops
  // what already runs, newest first, then rethrows: the informer's watch and
  // the server would otherwise keep the process alive, and it would hang.
  const started: Array<{ what: string; stop: () => unknown }> = [
    { what: 'Proxy informer', stop: () => proxies.stop() },
  ];
  try {
    const catalog = createInformerProxyCatalog(proxies);
    started.push({ what: 'catalog', stop: () => catalog.close() });
    let leaseStore: LeaseStore;
    let stopSweep = () => undefined as void;
    if (apiOptions.leaseStore.kind === 'redis') {
      const redisStore = new RedisLeaseStore({
        url: apiOptions.leaseStore.url,
        ...(apiOptions.leaseStore.password !== undefined ? { password: apiOptions.leaseStore.password } : {}),
        ...(apiOptions.leaseStore.caFile !== undefined ? { caFile: apiOptions.leaseStore.caFile } : {}),
        cooldownMs: apiOptions.leaseCooldownMs,
        logger,
      });
      // Fails the start with a clear message when Redis is unreachable or refuses us.
      await redisStore.connect();
      started.push({ what: 'lease store', stop: () => redisStore.close() });
      leaseStore = redisStore;
    } else {
      const memoryStore = new MemoryLeaseStore({ cooldownMs: apiOptions.leaseCooldownMs });
      // Only frees memory: every read already ignores ended leases.
      stopSweep = memoryStore.startSweeping();
      started.push({ what: 'lease sweep', stop: stopSweep });
      leaseStore = memoryStore;
    }
    // With --metrics-addr the metrics (which name every proxy) leave the discovery port.
    let metricsServer: { url: string; close(): Promise<void> } | undefined;
    if (config.metricsAddr) {
      const { host, port } = parseListenAddress(config.metricsAddr, '--metrics-addr');
      metricsServer = await serveMetrics(registry, host, port);
      started.push({ what: 'metrics server', stop: () => metricsServer!.close() });
    }
    const app = createApi({
      serveMetrics: !config.metricsAddr && !opts.metricsServedElsewhere,
      catalog,
      leaseStore,
      token: apiOptions.token,
      logger,
      registry,
      maxLeaseTtlSeconds: apiOptions.maxLeaseTtlSeconds,
      defaultLeaseTtlSeconds: apiOptions.defaultLeaseTtlSeconds,
    });
    const server = await serveApi(app, { host: apiOptions.host, port: apiOptions.port });
    started.push({ what: 'lease API server', stop: () => server.close() });
    logger.info({ url: server.url }, 'lease API listening');

    const connection = await Connection.connect({ address: config.temporalAddress });
    started.push({ what: 'Temporal connection', stop: () => connection.close() });
    const signaller = createTemporalHealthSignaller(
      new Client({ connection, namespace: config.temporalNamespace }),
      {
        logger,
      },
    );
    started.push({ what: 'health signaller', stop: () => signaller.stop() });
    const prober = createProber({
      targets: createProxyProbeTargets(proxies),
      signal: signaller.signal,
      logger,
      registry,
    });
    // Stopped even when its start fails half-way.
    started.push({ what: 'prober', stop: () => prober.stop() });
    await prober.start();
    const metricsUrl = metricsServer?.url ?? (opts.metricsServedElsewhere ? '' : `${server.url}/metrics`);
    return {
      name: 'api',
      url: server.url,
      registry,
      metricsUrl,
      done: new Promise(() => undefined),
      describe: () =>
        `lease API ${server.url} (OpenAPI ${server.url}/openapi.json${metricsUrl ? `, metrics ${metricsUrl}` : ''}; lease store ${apiOptions.leaseStore.kind}); health prober on`,
      async stop() {
        await server.close();
        await metricsServer?.close();
        stopSweep();
        await leaseStore.close?.();
        await prober.stop();
        await signaller.stop();
        await connection.close();
        catalog.close();
        await proxies.stop();
      },
    };
  } catch (error) {
    for (const part of started.reverse()) {
      try {
        await part.stop();
      } catch (stopError) {
        logger.warn({ err: stopError, part: part.what }, 'stopping after a failed start failed');
      }
    }
    throw error;
  }
}
