/**
 * The real control plane for the pool benches (autoscale, rotation), in
 * this process: its own Temporal dev server and kube-apiserver, the worker
 * with the `local` provider, the bridge and the api (lease API, prober,
 * demand reports), and a probe target. Nothing is faked; only the pool
 * workflows' timing and the api's report interval can be set.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { readApiConfig, type ApiFlags } from '../../api/config.js';
import { startApi } from '../../cli/processes.js';
import { ensureSchedules } from '../../cli/schedules.js';
import { bundleWorkflows, createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer } from '../../local-servers/temporal.js';
import { ensureKubeBinaries, ensureTemporalCli } from '../../local-servers/tools.js';
import { createBridge } from '../../k8s-bridge/bridge.js';
import { createProxyClient, type ProxyClient } from '../../kube/proxies.js';
import { createProxyPoolClient, type ProxyPoolClient } from '../../kube/proxy-pools.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import type { PoolTiming } from '../../workflows/pool/types.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';

export interface BenchPlane {
  kc: KubeConfig;
  client: Client;
  pools: ProxyPoolClient;
  proxies: ProxyClient;
  namespace: string;
  apiUrl: string;
  targetUrl: string;
  targetPort: number;
  /** The local provider's state directory (an outage renames it away). */
  stateDir: string;
  /** Triggers a provider-checks round now (ProviderHealth `local` follows). */
  checkProviders(): Promise<void>;
  stop(): Promise<void>;
}

export async function startBenchPlane(opts: {
  name: string;
  poolTiming?: Partial<PoolTiming>;
  apiFlags?: ApiFlags;
}): Promise<BenchPlane> {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const logger = pino({ level: process.env.EP_BENCH_LOG_LEVEL ?? 'silent' });
  const dir = mkdtempSync(join(tmpdir(), `ep-bench-${opts.name}-`));
  const [cli, binDir] = await Promise.all([ensureTemporalCli(), ensureKubeBinaries()]);
  const [temporalServer, kube] = await Promise.all([
    startTemporalDevServer({ cli, dataDir: join(dir, 'temporal'), headless: true }),
    startLocalKubeApiServer({ binDir, dataDir: join(dir, 'kube') }),
  ]);
  const kc = new KubeConfig();
  kc.loadFromFile(kube.kubeconfigPath);
  await installCrds(kc);
  const namespace = `bench-${opts.name}`;
  await kc.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: namespace } } });
  const connection = await Connection.connect({ address: temporalServer.address });
  const client = new Client({ connection });
  const native = await NativeConnection.connect({ address: temporalServer.address });
  const stateDir = join(dir, 'local');
  const registry = buildProviders(
    parseProvidersConfig(
      `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${stateDir}, addressRange: 127.94.0.0/16 }\n`,
      'bench',
    ),
    { logger, stateRoot: dir, installation: `bench-${opts.name}` },
  );
  const target: Server = createServer((_req, res) => res.writeHead(204).end());
  await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
  const targetPort = (target.address() as { port: number }).port;
  const taskQueue = `bench-${opts.name}`;
  const worker = await createProxyWorker({
    connection: native,
    namespace: 'default',
    taskQueue,
    kubeConfig: kc,
    registry,
    installation: `bench-${opts.name}`,
    logger,
    workflowBundle: await bundleWorkflows(),
    timing: { ...DEFAULT_TIMING, provisioningPollMs: 500, deletionPollMs: 500 },
    driftSweepOn: true,
  });
  const running = worker.run();
  const idPrefix = `bench-${opts.name}`;
  await ensureSchedules(
    client,
    // Checks by hand (checkProviders); GC and the sweep at their defaults.
    { taskQueue, idPrefix, gc: { intervalMs: 10 * 60_000 }, providerChecks: { intervalMs: 3_600_000 } },
    logger,
  );
  const bridge = createBridge({
    kubeConfig: kc,
    client,
    taskQueue,
    logger,
    ...(opts.poolTiming ? { poolTiming: opts.poolTiming } : {}),
  });
  await bridge.start();
  const api = await startApi(
    readApiConfig({}, { discoveryAddr: '127.0.0.1:0', ...opts.apiFlags }),
    { temporalAddress: temporalServer.address, temporalNamespace: 'default' },
    kc,
    logger,
  );
  return {
    kc,
    client,
    pools: createProxyPoolClient(kc),
    proxies: createProxyClient(kc),
    namespace,
    apiUrl: api.url,
    targetUrl: `http://127.0.0.1:${targetPort}/`,
    targetPort,
    stateDir,
    async checkProviders() {
      await client.schedule.getHandle(`${idPrefix}-provider-checks`).trigger();
    },
    async stop() {
      await api.stop();
      await bridge.stop();
      worker.shutdown();
      await running;
      await registry.close();
      await native.close();
      await connection.close();
      target.close();
      await temporalServer.stop();
      await kube.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The 1-minute load average over a run: min-max of samples every 10 s. */
export function sampleLoad(): { stop: () => string } {
  const samples: number[] = [loadavg()[0]!];
  const timer = setInterval(() => samples.push(loadavg()[0]!), 10_000);
  return {
    stop: () => {
      clearInterval(timer);
      samples.push(loadavg()[0]!);
      return `load average ${Math.min(...samples).toFixed(1)}-${Math.max(...samples).toFixed(1)}`;
    },
  };
}

export async function waitUntil(
  what: string,
  test: () => Promise<boolean>,
  timeoutMs: number,
): Promise<number> {
  const t0 = Date.now();
  while (!(await test())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  return Date.now() - t0;
}
