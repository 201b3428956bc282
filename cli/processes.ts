/**
 * The long-running parts of the control plane, each started from validated
 * config and returning a stop function. `worker`, `bridge`, `api` and
 * `gateway` run one each; `dev` runs them all in one process. Each start
 * defers what it brings up to a Lifecycle of its own (lifecycle.ts): a start
 * that fails stops it, and so does stop(), newest first.
 */
import { hostname } from 'node:os';
import { Client, type Connection } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { ResilientInformer } from '../kube/informer.js';
import type { ProviderHealth, Proxy, ProxyPool } from '../resources/proxy-schema.js';
import { Registry } from 'prom-client';
import {
  createApi,
  createInformerProxyCatalog,
  type InformerProxyCatalog,
  MemoryLeaseStore,
  parseListenAddress,
  RedisLeaseStore,
  registerProcessMetrics,
  serveApi,
  type ApiOptions,
  type LeaseStore,
  type LeaseStoreConfig,
  type ProxyCatalog,
} from '../api/index.js';
import { createGateway, describeEgressPolicy, type GatewayOptions } from '../gateway/index.js';
import {
  createProber,
  createProxyProbeTargets,
  createTemporalHealthSignaller,
  followGatewayTraffic,
  proxyKey,
  type EntryHealthLookup,
} from '../prober/index.js';
import type { TrafficReport } from '../api/lease-store.js';
import { createDrainNotifier } from '../api/drain-notifier.js';
import { createPoolDemand, type PoolDemand } from '../api/pool-demand.js';
import { createProxyPoolInformer } from '../kube/proxy-pool-informer.js';
import { createCustomResourceInformer, watchScopes } from '../kube/namespaced-informer.js';
import { createCustomResourceClient } from '../kube/custom-resources.js';
import { PROVIDER_HEALTH_KIND } from '../kube/provider-healths.js';
import { createDashboard, type Dashboard, type TemporalUiLink } from '../dashboard/server/index.js';
import { poolWorkflowId } from '../workflows/pool/ids.js';
import { poolDemandSignal } from '../workflows/pool/messages.js';
import { leasesDrainedSignal } from '../workflows/proxy/messages.js';
import { signalProxy } from '../workflows/proxy/client.js';
import { createBridge } from '../k8s-bridge/bridge.js';
import { createProxyInformer } from '../kube/proxy-informer.js';
import { cachedCredentials, createCredentialsSecretInformer } from '../kube/proxy-credentials.js';
import { kubeClaimStores, kubeSecretReader } from '../kube/claims.js';
import type { CredentialsLookup } from '../credentials/proxy-credentials.js';
import {
  buildProviders,
  loadProvidersConfig,
  devProvidersConfig,
  priceBookOf,
  type ProvidersConfig,
} from '../providers/config.js';
import { EMPTY_PRICE_BOOK } from '../providers/prices.js';
import { createCostMeter, registerPoolBudgetMetrics, type CostMeter } from '../api/cost-meter.js';
import { registerProviderRequestMetrics } from '../providers/metrics.js';
import type { ApiPartConfig, BridgeConfig, GatewayPartConfig, WorkerConfig } from './plan.js';
import { deriveInstallation } from './kube.js';
import { registerBuildInfo } from './build-info.js';
import { scrapeText, serveMetrics, type Readiness } from './metrics-server.js';
import { Lifecycle } from './lifecycle.js';
import { freePort } from './ports.js';
import { checkNamespace, registerSearchAttributes } from './temporal-setup.js';
import { connectClient, connectNative, describeTemporal } from './temporal.js';
import { ensureSchedules, scheduleIds, validateSchedulesConfig, type SchedulesConfig } from './schedules.js';
import { createProxyWorker, installTemporalRuntime } from './worker.js';
import { TRACING_OFF, type Tracing } from '../tracing/index.js';
import { createTenantDirectory, type TenantDirectory } from '../tenants/directory.js';

export interface Running {
  name: string;
  /** Resolves when the part stops by itself (a worker failure); never for servers. */
  done: Promise<void>;
  stop(): Promise<void>;
  /** Where to reach it, for the start-up banner. */
  describe(): string;
}

/** Ready while the check passes; the answer is kept a few seconds so probes do not load Temporal. */
function cachedReadiness(check: () => Promise<Readiness>, ttlMs = 5_000): () => Promise<Readiness> {
  let last: { at: number; value: Promise<Readiness> } | undefined;
  return () => {
    if (last === undefined || Date.now() - last.at > ttlMs) last = { at: Date.now(), value: check() };
    return last.value;
  };
}

async function temporalReachable(connection: Connection | NativeConnection): Promise<Readiness> {
  try {
    await connection.workflowService.getSystemInfo({});
    return { ready: true };
  } catch (error) {
    return { ready: false, reason: `Temporal: ${(error as Error).message.split('\n')[0]}` };
  }
}

/** The worker's checks that need no connection; `dev` runs them before it starts any server. */
export function preflightWorkerConfig(config: WorkerConfig): SchedulesConfig {
  const schedulesConfig: SchedulesConfig = {
    taskQueue: config.taskQueue,
    gc: { intervalMs: config.gc.intervalMs, minAgeMs: config.gc.minAgeMs, dryRun: config.gc.dryRun },
    providerChecks: { intervalMs: config.providerCheckIntervalMs },
    driftSweep: { intervalMs: config.driftSweepMs },
  };
  const problems = validateSchedulesConfig(schedulesConfig);
  if (problems.length > 0) throw new Error(problems.join('; '));
  return schedulesConfig;
}

/**
 * How long in-flight provider calls get to finish on SIGTERM before the
 * worker cancels them; a Deployment's terminationGracePeriodSeconds must
 * exceed it.
 */
const WORKER_SHUTDOWN_GRACE_MS = 20_000;

export async function startWorker(
  config: WorkerConfig,
  kc: KubeConfig,
  logger: Logger,
  opts: {
    dev?: boolean;
    /** dev --node: the node's kubernetes provider joins the embedded config. */
    devNode?: { kubeconfig: string; image: string; gateway: string };
    metrics?: Registry;
    tracing?: Tracing;
  } = {},
): Promise<Running> {
  const plugins = (opts.tracing ?? TRACING_OFF).temporalPlugins;
  // Everything that can be checked without a connection first: a bad flag
  // must not leave a polling worker behind (it used to run with no schedules).
  const schedulesConfig = preflightWorkerConfig(config);
  let providersConfig: ProvidersConfig;
  if (config.providersConfig) providersConfig = await loadProvidersConfig(config.providersConfig);
  else if (opts.dev) providersConfig = devProvidersConfig(opts.devNode);
  else throw new Error('--providers-config (or PROVIDERS_CONFIG) is required for the worker');
  const listen = config.metricsAddr ? parseListenAddress(config.metricsAddr, '--metrics-addr') : undefined;

  const scope = new Lifecycle(logger, { name: 'worker' });
  return scope.start(async () => {
    const metrics = opts.metrics ?? new Registry();
    registerBuildInfo(metrics);
    const requestMetrics = registerProviderRequestMetrics(metrics);
    registerProcessMetrics(metrics);
    let readiness: () => Promise<Readiness> = () => Promise.resolve({ ready: false, reason: 'starting' });
    let temporalMetrics: (() => Promise<string>) | undefined;
    let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined;
    if (listen) {
      metricsServer = await serveMetrics(
        metrics,
        listen.host,
        listen.port,
        () => readiness(),
        () => temporalMetrics?.() ?? Promise.resolve(''),
      );
      scope.defer('metrics server', () => metricsServer!.close());
      logger.info({ url: metricsServer.baseUrl }, 'health and metrics listening');
    }
    const installation = config.installation ?? (await deriveInstallation(kc));
    // Built once the installation is known: a provider that owns resources
    // besides instances (the gcp firewall rule) names and marks them by it.
    const registry = buildProviders(providersConfig, {
      logger,
      stateRoot: config.stateDir,
      requestMetrics,
      installation,
      ...(config.watchNamespaces ? { watchNamespaces: config.watchNamespaces } : {}),
      claims: kubeClaimStores(kc),
      readSecret: kubeSecretReader(kc),
    });
    scope.defer('providers', () => registry.close());
    if (listen) {
      // The SDK's Prometheus exporter serves its own endpoint; it gets a
      // loopback port nobody else sees, and /metrics appends what it says.
      const sdkAddress = `127.0.0.1:${await freePort()}`;
      if (installTemporalRuntime(logger, 'WARN', sdkAddress))
        temporalMetrics = scrapeText(`http://${sdkAddress}/metrics`);
    } else {
      installTemporalRuntime(logger);
    }
    const connection = await connectNative(config.temporalAddress, config.temporalConnection);
    scope.defer('Temporal connection', () => connection.close());
    const clientConnection = await connectClient(config.temporalAddress, config.temporalConnection);
    // Only the start uses it (search attributes, schedules): closed once the worker is ready to poll.
    const closeClientConnection = scope.defer('Temporal client connection', () => clientConnection.close());
    const client = new Client({ connection: clientConnection, namespace: config.temporalNamespace, plugins });
    await registerSearchAttributes(clientConnection, config.temporalNamespace, logger);
    const worker = await createProxyWorker({
      connection,
      namespace: config.temporalNamespace,
      taskQueue: config.taskQueue,
      kubeConfig: kc,
      registry,
      prices: priceBookOf(providersConfig),
      installation,
      logger,
      metrics,
      maxCachedWorkflows: config.maxCachedWorkflows,
      timing: config.timing,
      driftSweepOn: config.driftSweepMs > 0,
      ...(config.watchNamespaces ? { namespaces: config.watchNamespaces } : {}),
      shutdownGraceTimeMs: WORKER_SHUTDOWN_GRACE_MS,
      plugins,
    });
    // The worker owns the schedules that drive GC, provider checks and the drift sweep:
    // created or updated to match this config at every start, before it polls.
    const schedules = await ensureSchedules(client, schedulesConfig, logger);
    if (config.driftSweepMs > 0) {
      // A sweep now rather than in up to one period: a worker that restarts
      // (a deploy, a crash, `dev` again) looks at every provider at once, and
      // the local provider, whose instances live in this process, reopens
      // their listeners on its first call.
      await client.schedule
        .getHandle(scheduleIds(config.taskQueue).driftSweep)
        .trigger()
        .catch((error: unknown) =>
          logger.warn({ err: (error as Error).message }, 'could not start a drift sweep at start'),
        );
    }
    await closeClientConnection();
    const done = worker.run();
    scope.defer(
      'worker',
      async () => {
        // Shutdown stops polling and waits for in-flight activities up to
        // the worker's shutdownGraceTime, then cancels them.
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await done.catch(() => undefined);
      },
      { timeoutMs: WORKER_SHUTDOWN_GRACE_MS + 10_000 },
    );
    readiness = cachedReadiness(async () =>
      worker.getState() === 'RUNNING'
        ? temporalReachable(connection)
        : { ready: false, reason: `worker ${worker.getState().toLowerCase()}` },
    );
    logger.info(
      {
        taskQueue: config.taskQueue,
        providers: registry.names(),
        installation,
        temporal: describeTemporal(config.temporalAddress, config.temporalConnection),
      },
      'worker started',
    );
    return {
      name: 'worker',
      done,
      describe: () =>
        `worker on task queue ${config.taskQueue}, providers: ${registry.names().join(', ')}; schedules: gc ${schedules.gc}, provider checks ${schedules.providerChecks}, drift sweep ${schedules.driftSweep ?? 'unchanged'}` +
        (metricsServer ? `; metrics ${metricsServer.url}` : ''),
      stop: () => scope.close(),
    };
  });
}

export async function startBridge(
  config: BridgeConfig,
  kc: KubeConfig,
  logger: Logger,
  opts: { tracing?: Tracing } = {},
): Promise<Running> {
  const listen = config.metricsAddr ? parseListenAddress(config.metricsAddr, '--metrics-addr') : undefined;
  const scope = new Lifecycle(logger, { name: 'bridge' });
  return scope.start(async () => {
    const metrics = new Registry();
    registerBuildInfo(metrics);
    registerProcessMetrics(metrics);
    let readiness: () => Promise<Readiness> = () =>
      Promise.resolve({ ready: false, reason: 'connecting to Temporal' });
    let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined;
    if (listen) {
      metricsServer = await serveMetrics(metrics, listen.host, listen.port, () => readiness());
      scope.defer('metrics server', () => metricsServer!.close());
      logger.info({ url: metricsServer.baseUrl }, 'health and metrics listening');
    }
    const connection = await connectClient(config.temporalAddress, config.temporalConnection);
    scope.defer('Temporal connection', () => connection.close());
    await checkNamespace(connection, config.temporalNamespace);
    // With tracing on, the plugin carries the reconcile span's context in the signal's headers.
    const client = new Client({
      connection,
      namespace: config.temporalNamespace,
      plugins: (opts.tracing ?? TRACING_OFF).temporalPlugins,
    });
    const bridge = createBridge({
      kubeConfig: kc,
      client,
      taskQueue: config.taskQueue,
      logger,
      reconcilePeriodMs: config.reconcilePeriodMs,
      metrics,
      ...(config.watchNamespaces ? { namespaces: config.watchNamespaces } : {}),
    });
    let synced = false;
    let stopping = false;
    readiness = cachedReadiness(async () => {
      if (stopping) return { ready: false, reason: 'stopping' };
      if (!synced) return { ready: false, reason: 'informers not synced' };
      return temporalReachable(connection);
    });
    scope.defer('bridge', () => {
      stopping = true;
      return bridge.stop();
    });
    await bridge.start();
    synced = true;
    return {
      name: 'bridge',
      done: new Promise(() => undefined),
      describe: () =>
        `bridge watching Proxies and cloud-init Secrets in ${config.watchNamespaces ? `namespaces ${config.watchNamespaces.join(', ')}` : 'all namespaces'}` +
        (metricsServer ? `; metrics ${metricsServer.url}` : ''),
      stop: () => scope.close(),
    };
  });
}

/**
 * The api process: the lease API and the health prober. Both read Proxies
 * from the apiserver; the prober signals verdict transitions to the Proxy
 * workflows, which write status.
 */
export async function startApi(
  apiOptions: ApiOptions,
  config: Pick<
    ApiPartConfig,
    | 'temporalAddress'
    | 'temporalNamespace'
    | 'temporalConnection'
    | 'metricsAddr'
    | 'watchNamespaces'
    | 'providersConfig'
  >,
  kc: KubeConfig,
  logger: Logger,
  registry: Registry = new Registry(),
  opts: { metricsServedElsewhere?: boolean; tracing?: Tracing } = {},
): Promise<
  Running & {
    /** Where a gateway in this process (`dev`) sends its traffic reports: the prober (a no-op without one). */
    traffic: (reports: TrafficReport[]) => void;
    url: string;
    registry: Registry;
    metricsUrl: string;
    catalog: ProxyCatalog;
    leaseStore: LeaseStore;
    tenants: TenantDirectory;
    demand: PoolDemand;
    credentials: CredentialsLookup;
    /** What the fleet costs: instance time when this replica probes; a gateway in this process (`dev`) adds its traffic. */
    cost: CostMeter;
  }
> {
  const tracing = opts.tracing ?? TRACING_OFF;
  // The prober's per-entry probe settings (the entries' `health:` blocks); read before anything starts.
  // And its prices, for what the fleet costs (api/cost-meter.ts).
  const providersConfig = config.providersConfig
    ? await loadProvidersConfig(config.providersConfig)
    : undefined;
  const entryHealth = providersConfig ? entryHealthOf(providersConfig) : undefined;
  const prices = providersConfig ? priceBookOf(providersConfig) : EMPTY_PRICE_BOOK;
  // A failure (the port in use, Temporal unreachable, ...) stops what
  // already runs, newest first, then rethrows: the informer's watch and the
  // server would otherwise keep the process alive, and it would hang.
  const scope = new Lifecycle(logger, { name: 'api' });
  return scope.start(async () => {
    // One Proxy cache for the lease API and the prober; the credentials for the prober, leases'
    // proxyURL and (in `dev`) the gateway.
    const { proxies, catalog, credentials } = await startProxyCaches(
      scope,
      kc,
      logger,
      config.watchNamespaces,
    );
    const { leaseStore, stop: stopLeaseStore } = await openLeaseStore(
      apiOptions.leaseStore,
      apiOptions.leaseCooldownMs,
      logger,
    );
    scope.defer('lease store', stopLeaseStore);
    // With --metrics-addr the metrics (which name every proxy) leave the discovery port.
    let metricsServer: { url: string; close(): Promise<void> } | undefined;
    if (config.metricsAddr) {
      const { host, port } = parseListenAddress(config.metricsAddr, '--metrics-addr');
      metricsServer = await serveMetrics(registry, host, port);
      scope.defer('metrics server', () => metricsServer!.close());
    }
    // The pools that want demand reports (autoscaling, rotation on bans).
    const pools = createProxyPoolInformer({
      kubeConfig: kc,
      logger,
      scopes: watchScopes(config.watchNamespaces),
    });
    await pools.start();
    scope.defer('ProxyPool informer', () => pools.stop());
    registerPoolBudgetMetrics(registry, pools);
    // The Temporal client comes after the server is up; reports start only then.
    const temporal: { client?: Client } = {};
    const demand = createPoolDemand({
      catalog,
      pools,
      leaseStore,
      sharedStore: apiOptions.leaseStore.kind === 'redis',
      reporter: `${hostname()}/${process.pid}`,
      logger,
      registry,
      tickMs: apiOptions.poolDemandIntervalMs,
      // Twelve intervals: a minute at the default.
      peakWindowMs: 12 * apiOptions.poolDemandIntervalMs,
      signal: async (pool, report) => {
        if (!temporal.client) throw new Error('no Temporal connection yet');
        await temporal.client.workflow.getHandle(poolWorkflowId(pool)).signal(poolDemandSignal, report);
      },
    });
    const tenants = createTenantDirectory({
      token: apiOptions.token,
      tenantsFile: apiOptions.tenantsFile,
      logger,
    });
    // Instance time is counted by the replica that probes, the one of its
    // kind (docs/architecture.md, "What the fleet costs"): replicas serving
    // leases only would each count the same instances again.
    const cost = createCostMeter({ prices, registry, ...(apiOptions.prober ? { catalog } : {}) });
    cost.start();
    scope.defer('cost meter', () => cost.stop());
    scope.defer('tenants file watch', () => tenants.close());
    const dashboard = apiOptions.dashboard
      ? await startDashboard(scope, {
          kc,
          logger,
          proxies,
          pools,
          leaseStore,
          registry,
          openTenantReadOnly: apiOptions.insecureNoAuth,
          ...(apiOptions.temporalWebUrl
            ? { temporalUi: { url: apiOptions.temporalWebUrl, namespace: config.temporalNamespace } }
            : {}),
        })
      : undefined;
    const app = createApi({
      ...(dashboard ? { dashboard } : {}),
      serveMetrics: !config.metricsAddr && !opts.metricsServedElsewhere,
      demand,
      catalog,
      leaseStore,
      tenants,
      authFailuresPerMinute: apiOptions.authFailuresPerMinute,
      token: apiOptions.token,
      insecureNoAuth: apiOptions.insecureNoAuth,
      credentials,
      logger,
      registry,
      maxLeaseTtlSeconds: apiOptions.maxLeaseTtlSeconds,
      defaultLeaseTtlSeconds: apiOptions.defaultLeaseTtlSeconds,
      ...(tracing.traceHook ? { traceHook: tracing.traceHook } : {}),
    });
    const server = await serveApi(app, { host: apiOptions.host, port: apiOptions.port });
    scope.defer('lease API server', () => server.close());
    logger.info({ url: server.url, tenants: tenants.names() }, 'lease API listening');

    const connection = await connectClient(config.temporalAddress, config.temporalConnection);
    scope.defer('Temporal connection', () => connection.close());
    await checkNamespace(connection, config.temporalNamespace);
    const temporalClient = new Client({
      connection,
      namespace: config.temporalNamespace,
      plugins: tracing.temporalPlugins,
    });
    const drainNotifier = createDrainNotifier({
      catalog,
      leaseStore,
      logger,
      registry,
      signal: (target, report) => signalProxy(temporalClient, target, leasesDrainedSignal, report),
    });
    drainNotifier.start();
    scope.defer('drain notifier', () => drainNotifier.stop());
    temporal.client = temporalClient;
    demand.start();
    scope.defer('pool demand reports', () => demand.stop());
    let traffic: (reports: TrafficReport[]) => void = () => undefined;
    if (apiOptions.prober) {
      const targets = createProxyProbeTargets(proxies, entryHealth);
      const healthSignaller = createTemporalHealthSignaller(temporalClient, {
        logger,
        // A report for a Proxy that is still there waits for its workflow to start.
        stillWanted: (ref, report) => {
          const target = targets.get(proxyKey(ref));
          return target?.ref.uid === ref.uid && target.host === report.ip;
        },
      });
      scope.defer('health signaller', () => healthSignaller.stop());
      const healthProber = createProber({
        targets,
        credentials,
        signal: healthSignaller.signal,
        logger,
        registry,
      });
      // Stopped even when its start fails half-way.
      scope.defer('prober', () => healthProber.stop());
      await healthProber.start();
      traffic = (reports) => reports.forEach((r) => healthProber.observeTraffic(r));
      // Standalone gateways' traffic (passive health), through the shared store.
      const take = leaseStore.takeTraffic?.bind(leaseStore);
      if (take && apiOptions.leaseStore.kind === 'redis') {
        const follower = followGatewayTraffic({
          take,
          observe: (r) => healthProber.observeTraffic(r),
          logger,
        });
        follower.start();
        scope.defer('gateway traffic follower', () => follower.stop());
      }
    } else {
      logger.info('health prober off (--no-prober): this replica serves leases only');
    }
    const metricsUrl = metricsServer?.url ?? (opts.metricsServedElsewhere ? '' : `${server.url}/metrics`);
    return {
      name: 'api',
      url: server.url,
      registry,
      metricsUrl,
      catalog,
      leaseStore,
      tenants,
      demand,
      credentials,
      cost,
      traffic: (reports) => traffic(reports),
      done: new Promise(() => undefined),
      describe: () =>
        `lease API ${server.url} (${dashboard ? `dashboard ${server.url}/ui; ` : ''}OpenAPI ${server.url}/openapi.json${metricsUrl ? `, metrics ${metricsUrl}` : ''}; lease store ${apiOptions.leaseStore.kind}); health prober ${apiOptions.prober ? 'on' : 'off'}; a proxy with its credentials: curl -s -d '{"ttlSeconds":60}' ${tenants.open ? '' : '-H "Authorization: Bearer $TOKEN" '}${server.url}/v1/leases | jq -r .proxyURL`,
      stop: () => scope.close(),
    };
  });
}

/**
 * The dashboard at `/ui`, over the api's own caches. Its ProviderHealth
 * informer starts in the background: the Providers page fills in once it
 * has listed, and an install whose api may not list ProviderHealths (an
 * old Role) still serves leases.
 */
async function startDashboard(
  scope: Lifecycle,
  parts: {
    kc: KubeConfig;
    logger: Logger;
    proxies: ResilientInformer<Proxy>;
    pools: ResilientInformer<ProxyPool>;
    leaseStore: LeaseStore;
    registry: Registry;
    openTenantReadOnly: boolean;
    temporalUi?: TemporalUiLink;
  },
): Promise<Dashboard> {
  const providerHealths = createCustomResourceInformer({
    kubeConfig: parts.kc,
    logger: parts.logger,
    objects: createCustomResourceClient<ProviderHealth>(parts.kc, PROVIDER_HEALTH_KIND),
    scopes: [undefined],
  });
  providerHealths
    .start()
    .catch((error: unknown) =>
      parts.logger.debug(
        { err: (error as Error).message },
        'ProviderHealth informer stopped before it listed',
      ),
    );
  scope.defer('ProviderHealth informer', () => providerHealths.stop());
  const dashboard = await createDashboard({
    proxies: parts.proxies,
    pools: parts.pools,
    providerHealths,
    leaseStore: parts.leaseStore,
    gatewayRegistry: parts.registry,
    kubeConfig: parts.kc,
    openTenantReadOnly: parts.openTenantReadOnly,
    logger: parts.logger,
    ...(parts.temporalUi ? { temporalUi: parts.temporalUi } : {}),
  });
  scope.defer('dashboard', () => dashboard.close());
  return dashboard;
}

/** The providers-config entries' `health:` blocks, by entry name. */
function entryHealthOf(config: ProvidersConfig): EntryHealthLookup {
  const byName = new Map(config.providers.flatMap((p) => (p.health ? [[p.name, p.health] as const] : [])));
  return (provider) => byName.get(provider);
}

/**
 * The lease store a lease API or a gateway uses: Redis (connected, or the
 * start fails with a clear message) or one in this process's memory.
 */
async function openLeaseStore(
  config: LeaseStoreConfig,
  cooldownMs: number,
  logger: Logger,
): Promise<{ leaseStore: LeaseStore; stop: () => Promise<void> }> {
  if (config.kind === 'redis') {
    const redisStore = new RedisLeaseStore({
      url: config.url,
      ...(config.password !== undefined ? { password: config.password } : {}),
      ...(config.caFile !== undefined ? { caFile: config.caFile } : {}),
      cooldownMs,
      logger,
    });
    // Fails the start with a clear message when Redis is unreachable or refuses us.
    await redisStore.connect();
    return { leaseStore: redisStore, stop: () => redisStore.close() };
  }
  const memoryStore = new MemoryLeaseStore({ cooldownMs });
  // Only frees memory: every read already ignores ended leases.
  const stopSweep = memoryStore.startSweeping();
  return {
    leaseStore: memoryStore,
    stop: () => {
      stopSweep();
      return Promise.resolve();
    },
  };
}

/**
 * The Proxy informer, the catalog over it and the proxies' credentials (an
 * informer of labelled Secrets): what the api and a gateway of its own read.
 */
async function startProxyCaches(
  scope: Lifecycle,
  kc: KubeConfig,
  logger: Logger,
  watchNamespaces: string[] | undefined,
): Promise<{
  proxies: ResilientInformer<Proxy>;
  catalog: InformerProxyCatalog;
  credentials: CredentialsLookup;
}> {
  const proxies = createProxyInformer({ kubeConfig: kc, logger, namespaces: watchNamespaces });
  await proxies.start();
  scope.defer('Proxy informer', () => proxies.stop());
  const catalog = createInformerProxyCatalog(proxies);
  scope.defer('catalog', () => catalog.close());
  const secrets = createCredentialsSecretInformer({
    kubeConfig: kc,
    logger,
    scopes: watchScopes(watchNamespaces),
  });
  await secrets.start();
  scope.defer('credentials Secret informer', () => secrets.stop());
  return { proxies, catalog, credentials: cachedCredentials(secrets) };
}

/**
 * The gateway: the crawlers' one proxy endpoint. On its own it has its own
 * Proxy informer and lease store (Redis to share leases with the api
 * replicas; memory leases only among its own connections); `dev` hands it
 * the lease API's catalog and store, so both lease from one pool.
 */
export async function startGateway(
  options: GatewayOptions,
  config: Pick<GatewayPartConfig, 'metricsAddr' | 'watchNamespaces' | 'providersConfig'>,
  kc: KubeConfig | undefined,
  logger: Logger,
  registry: Registry = new Registry(),
  opts: {
    tracing?: Tracing;
    /** The lease API's in this process (`dev`): one pool, one set of tenants, one demand for both. */
    shared?: {
      catalog: ProxyCatalog;
      leaseStore: LeaseStore;
      tenants?: TenantDirectory;
      demand?: Pick<PoolDemand, 'noteDenied' | 'noteBanned'>;
      credentials?: CredentialsLookup;
      /** The prober in this process: the gateway's traffic reports (passive health). */
      traffic?: (reports: TrafficReport[]) => void;
      /** The lease API's cost meter: the gateway's bytes add to the same counters. */
      cost?: CostMeter;
    };
  } = {},
): Promise<Running & { url: string; metricsUrl: string }> {
  const tracing = opts.tracing ?? TRACING_OFF;
  const scope = new Lifecycle(logger, { name: 'gateway' });
  return scope.start(async () => {
    let catalog: ProxyCatalog;
    let leaseStore: LeaseStore;
    let credentials: CredentialsLookup | undefined;
    // What relayed bytes cost: the entries' per-GiB prices (--providers-config), or the lease API's meter in this process.
    const cost =
      opts.shared?.cost ??
      createCostMeter({
        prices: config.providersConfig
          ? priceBookOf(await loadProvidersConfig(config.providersConfig))
          : EMPTY_PRICE_BOOK,
        registry,
      });
    if (opts.shared) {
      ({ catalog, leaseStore, credentials } = opts.shared);
    } else {
      if (!kc) throw new Error('the gateway needs a kubeconfig or an in-cluster config to read Proxies');
      ({ catalog, credentials } = await startProxyCaches(scope, kc, logger, config.watchNamespaces));
      const opened = await openLeaseStore(options.leaseStore, options.leaseCooldownMs, logger);
      scope.defer('lease store', opened.stop);
      leaseStore = opened.leaseStore;
      registerProcessMetrics(registry);
    }
    if (options.token === '')
      logger.warn(
        options.insecureNoAuth
          ? 'gateway: --insecure-no-auth: no API token, served off the loopback: anyone who can reach it can use the fleet'
          : 'gateway: no API token configured (DISCOVERY_TOKEN or --discovery-token-file): anyone on this machine can use the fleet',
      );
    const gateway = createGateway({
      catalog,
      leaseStore,
      logger,
      registry,
      settings: options,
      ...(credentials ? { credentials } : {}),
      ...(opts.shared?.tenants ? { tenants: opts.shared.tenants } : {}),
      ...(opts.shared?.demand ? { demand: opts.shared.demand } : {}),
      ...(opts.shared?.traffic ? { traffic: opts.shared.traffic } : {}),
      cost,
      ...(tracing.traceHook ? { traceHook: tracing.traceHook } : {}),
    });
    let metricsServer: { url: string; close(): Promise<void> } | undefined;
    if (config.metricsAddr && !opts.shared) {
      const { host, port } = parseListenAddress(config.metricsAddr, '--metrics-addr');
      metricsServer = await serveMetrics(registry, host, port, () =>
        Promise.resolve(
          catalog.synced() ? { ready: true } : { ready: false, reason: 'Proxies not loaded yet' },
        ),
      );
      scope.defer('metrics server', () => metricsServer!.close());
    }
    const address = await gateway.listen(options.host, options.port);
    scope.defer('gateway', () => gateway.close());
    const socks = options.socks
      ? await gateway.listenSocks(options.socks.host, options.socks.port)
      : undefined;
    const egress = describeEgressPolicy(options);
    const metricsUrl = metricsServer?.url ?? '';
    logger.info(
      {
        url: address.url,
        ...(socks ? { socks: socks.url } : {}),
        ...(metricsUrl ? { metrics: metricsUrl } : {}),
        egress,
      },
      'gateway listening',
    );
    return {
      name: 'gateway',
      url: address.url,
      metricsUrl,
      done: new Promise(() => undefined),
      describe: () =>
        `proxy endpoint ${address.url} (curl -x http://session-1:TOKEN@${address.url.slice('http://'.length)} ...${socks ? `; SOCKS5 ${socks.url}: curl --socks5-hostname session-1:TOKEN@${socks.url.slice('socks5://'.length)} ...` : ''}; lease store ${opts.shared ? "the lease API's" : options.leaseStore.kind}${metricsUrl ? `, metrics ${metricsUrl}` : ''}${opts.shared ? '' : `; ${egress}`})`,
      stop: () => scope.close(),
    };
  });
}
