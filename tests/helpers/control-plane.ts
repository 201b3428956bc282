/**
 * A real control plane for one test file: the worker (real activities, real
 * providers from a providers config), the bridge scoped to a fresh
 * namespace, on the shared Temporal dev server and apiserver.
 */
import { kubeClaimStores, kubeSecretReader } from '../../kube/claims.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomInt } from 'node:crypto';
import type { Client, Connection } from '@temporalio/client';
import { DefaultLogger, Runtime, type NativeConnection, type Worker } from '@temporalio/worker';
import type { KubeConfig } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { inject } from 'vitest';
import {
  buildProviders,
  parseProvidersConfig,
  priceBookOf,
  type ProviderRegistry,
} from '../../providers/config.js';
import type { Instance, Provider } from '../../providers/types.js';
import { createBridge, type Bridge, type BridgeOptions } from '../../k8s-bridge/bridge.js';
import { createProxyWorker } from '../../cli/worker.js';
import type { ProxyClient } from '../../kube/proxies.js';
import type { PoolTiming } from '../../workflows/pool/types.js';
import type { ProxyTiming } from '../../workflows/proxy/types.js';
import { createNamespace, kubeConfig, proxyClient } from './kube.js';
import { temporalClient, uniqueTaskQueue, workerConnection, workflowBundle } from './temporal.js';

export const FAST_TIMING: ProxyTiming = {
  provisioningPollMs: 200,
  deletionPollMs: 200,
  driftPollMs: 1_000,
  safetyPollMs: 60_000,
  quotaRetryMs: 1_000,
  errorRetryMs: 500,
};

/** A registry that can gain providers while running ("a provider added later"). */
export interface TestRegistry extends ProviderRegistry {
  add(provider: Provider): void;
}

export interface ControlPlane {
  kc: KubeConfig;
  api: ProxyClient;
  namespace: string;
  client: Client;
  taskQueue: string;
  registry: TestRegistry;
  stateRoot: string;
  logger: Logger;
  bridge: Bridge;
  /** Another bridge on this plane (a restart or a second replica), not started; same options as `bridge`. */
  createBridge(extra?: Pick<BridgeOptions, 'reconcilePeriodMs'>): Bridge;
  worker: Worker;
  /** The instances a provider lists (listByTag) carrying this Proxy UID's mark. */
  instancesOf(uid: string, provider?: string): Promise<Instance[]>;
  /** Stops the running worker (as a crash would, with no grace) and starts a fresh one, with other timing if given. */
  restartWorker(timing?: Partial<ProxyTiming>): Promise<void>;
  stopWorker(): Promise<void>;
  startWorker(): Promise<void>;
  close(): Promise<void>;
}

/** A /24 of its own inside 127/8 per test file, so parallel files never contend for addresses. */
export function privateLoopbackRange(): string {
  return `127.${randomInt(100, 200)}.${randomInt(1, 250)}.0/24`;
}

let runtimeInstalled = false;
/** The SDK logs every worker state change at INFO; tests want warnings only. Once per process. */
function quietTemporalRuntime(): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // Already installed by another helper in this process.
  }
}

export async function startControlPlane(opts: {
  prefix: string;
  providersYaml?: (stateRoot: string, range: string) => string;
  /** Factories swapped in by type (buildProviders' third argument). */
  providerTypes?: Parameters<typeof buildProviders>[2];
  /** The worker's timing (FAST_TIMING by default). */
  timing?: Partial<ProxyTiming>;
  /** Whether the worker counts the drift sweep as on (default false: every Proxy polls at driftPollMs). */
  driftSweepOn?: boolean;
  maxHistoryEvents?: number;
  installation?: string;
  /** The pool workflows' timing (the bridge passes it to each pool it starts). */
  poolTiming?: Partial<PoolTiming>;
  /**
   * Start the in-process worker now (default). False: the test runs the
   * task queue's worker itself (e.g. in a child process it can kill), and may
   * call `startWorker()` later.
   */
  startWorker?: boolean;
  /** An apiserver of the test's own (default: the shared one from the global setup). */
  kubeconfigPath?: string;
  /** Where the worker, bridge and providers log (default: silent, or EP_TEST_LOG_LEVEL). */
  logger?: Logger;
}): Promise<ControlPlane> {
  quietTemporalRuntime();
  const kc = kubeConfig(opts.kubeconfigPath);
  const api = proxyClient(kc);
  const namespace = await createNamespace(kc, opts.prefix);
  const stateRoot = mkdtempSync(join(tmpdir(), `ep-${opts.prefix}-`));
  const logger = opts.logger ?? pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });
  const range = privateLoopbackRange();
  const yaml =
    opts.providersYaml?.(stateRoot, range) ??
    `providers:\n  - name: local\n    type: local\n    local:\n      stateDir: ${stateRoot}/local\n      addressRange: ${range}\n`;
  const installation = opts.installation ?? 'test-installation';
  const parsed = parseProvidersConfig(yaml, 'test providers config');
  const base = buildProviders(
    parsed,
    { logger, stateRoot, installation, claims: kubeClaimStores(kc), readSecret: kubeSecretReader(kc) },
    opts.providerTypes,
  );
  const extra = new Map<string, Provider>();
  const registry: TestRegistry = {
    get: (name) => extra.get(name) ?? base.get(name),
    unbuilt: (name) => (extra.has(name) ? undefined : base.unbuilt?.(name)),
    names: () => [...base.names(), ...extra.keys()],
    add: (p) => extra.set(p.name, p),
    close: async () => {
      await base.close();
      await Promise.allSettled([...extra.values()].map(async (p) => p.close?.()));
    },
  };

  const { client, connection }: { client: Client; connection: Connection } = await temporalClient();
  const taskQueue = uniqueTaskQueue(opts.prefix);
  let nativeConnection: NativeConnection = await workerConnection();
  let timing = { ...FAST_TIMING, ...opts.timing };

  let worker: Worker | undefined;
  let running: Promise<void> | undefined;
  const startWorker = async () => {
    worker = await createProxyWorker({
      connection: nativeConnection,
      namespace: inject('temporalNamespace'),
      taskQueue,
      kubeConfig: kc,
      registry,
      prices: priceBookOf(parsed),
      installation,
      logger,
      workflowBundle: workflowBundle(),
      timing,
      driftSweepOn: opts.driftSweepOn ?? false,
    });
    running = worker.run();
  };
  const stopWorker = async () => {
    if (worker?.getState() === 'RUNNING') worker.shutdown();
    await running;
  };
  if (opts.startWorker ?? true) await startWorker();

  const bridgeOptions: BridgeOptions = {
    kubeConfig: kc,
    client,
    taskQueue,
    logger,
    namespace,
    ...(opts.maxHistoryEvents ? { maxHistoryEvents: opts.maxHistoryEvents } : {}),
    ...(opts.poolTiming ? { poolTiming: opts.poolTiming } : {}),
  };
  const bridge = createBridge(bridgeOptions);
  await bridge.start();

  const plane: ControlPlane = {
    kc,
    api,
    namespace,
    client,
    taskQueue,
    registry,
    stateRoot,
    logger,
    bridge,
    createBridge: (extra = {}) => createBridge({ ...bridgeOptions, ...extra }),
    async instancesOf(uid, provider = 'local') {
      const listed = await registry.get(provider)!.listByTag(AbortSignal.timeout(5_000));
      return listed.filter((i) => i.uid === uid);
    },
    get worker() {
      if (!worker) throw new Error('no in-process worker started (startWorker: false)');
      return worker;
    },
    stopWorker,
    startWorker,
    async restartWorker(changed) {
      if (changed) timing = { ...timing, ...changed };
      await stopWorker();
      await nativeConnection.close();
      nativeConnection = await workerConnection();
      await startWorker();
    },
    async close() {
      await bridge.stop();
      await stopWorker();
      await registry.close();
      await nativeConnection.close();
      await connection.close();
      rmSync(stateRoot, { recursive: true, force: true });
    },
  };
  return plane;
}
