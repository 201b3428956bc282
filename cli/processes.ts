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
  serveApi,
  type ApiOptions,
} from '../api/index.js';
import { createBridge } from '../k8s-bridge/bridge.js';
import {
  buildProviders,
  loadProvidersConfig,
  devProvidersConfig,
  type ProvidersConfig,
} from '../providers/config.js';
import type { CommonConfig } from './config.js';
import { deriveInstallation } from './kube.js';
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
  config: CommonConfig,
  kc: KubeConfig,
  logger: Logger,
  opts: { dev?: boolean } = {},
): Promise<Running> {
  let providersConfig: ProvidersConfig;
  if (config.providersConfig) providersConfig = await loadProvidersConfig(config.providersConfig);
  else if (opts.dev) providersConfig = devProvidersConfig();
  else throw new Error('--providers-config (or PROVIDERS_CONFIG) is required for the worker');
  const registry = buildProviders(providersConfig, { logger, stateRoot: config.stateDir });
  const installation = config.installation ?? (await deriveInstallation(kc));
  installTemporalRuntime(logger);
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const worker = await createProxyWorker({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    kubeConfig: kc,
    registry,
    installation,
    logger,
  });
  const done = worker.run();
  logger.info({ taskQueue: config.taskQueue, providers: registry.names(), installation }, 'worker started');
  return {
    name: 'worker',
    done,
    describe: () => `worker on task queue ${config.taskQueue}, providers: ${registry.names().join(', ')}`,
    async stop() {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await done.catch(() => undefined);
      await registry.close();
      await connection.close();
    },
  };
}

export async function startBridge(config: CommonConfig, kc: KubeConfig, logger: Logger): Promise<Running> {
  const connection = await Connection.connect({ address: config.temporalAddress });
  const client = new Client({ connection, namespace: config.temporalNamespace });
  const bridge = createBridge({
    kubeConfig: kc,
    client,
    taskQueue: config.taskQueue,
    logger,
    timing: config.timing,
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

export async function startApi(
  apiOptions: ApiOptions,
  kc: KubeConfig,
  logger: Logger,
): Promise<Running & { url: string; registry: Registry }> {
  const registry = new Registry();
  const catalog = createInformerProxyCatalog({ kubeConfig: kc, logger });
  await catalog.start();
  const leaseStore = new MemoryLeaseStore({ cooldownMs: apiOptions.leaseCooldownMs });
  const app = createApi({
    catalog,
    leaseStore,
    token: apiOptions.token,
    logger,
    registry,
    maxLeaseTtlSeconds: apiOptions.maxLeaseTtlSeconds,
    defaultLeaseTtlSeconds: apiOptions.defaultLeaseTtlSeconds,
  });
  const server = await serveApi(app, { host: apiOptions.host, port: apiOptions.port });
  logger.info({ url: server.url }, 'lease API listening');
  return {
    name: 'api',
    url: server.url,
    registry,
    done: new Promise(() => undefined),
    describe: () =>
      `lease API ${server.url} (OpenAPI ${server.url}/openapi.json, metrics ${server.url}/metrics)`,
    async stop() {
      await server.close();
      await catalog.stop();
    },
  };
}
