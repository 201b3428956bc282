/**
 * The apiserver and the Temporal server restarted mid-flight: everything
 * converges without manual action. This file runs its own apiserver (with
 * persistent etcd) and its own Temporal dev server (with a database file) so
 * it can restart them without disturbing other test files.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { GROUP, PROXY_PLURAL, VERSION, type Proxy } from '../../resources/proxy-schema.js';
import { buildProviders, parseProvidersConfig, type ProviderRegistry } from '../../providers/config.js';
import { createBridge, type Bridge } from '../../k8s-bridge/bridge.js';
import { createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../cli/local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../cli/local-servers/kube.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../cli/local-servers/temporal.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { createProxy, getProxy, isProvisioned, waitForProxy } from '../helpers/kube.js';
import { FAST_TIMING, privateLoopbackRange } from '../helpers/control-plane.js';
import { eventually, workflowBundle } from '../helpers/temporal.js';
import { getThroughConnect, startTarget } from '../helpers/net.js';

describe('restarts of the apiserver and the Temporal server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-restarts-'));
  const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });
  let kube: LocalKubeApiServer;
  let temporal: TemporalDevServer;
  let kubePort: number;
  let temporalPort: number;
  let kc: KubeConfig;
  let api: CustomObjectsApi;
  let registry: ProviderRegistry;
  let connection: Connection;
  let nativeConnection: NativeConnection;
  let worker: Worker;
  let running: Promise<void>;
  let bridge: Bridge;
  let target: Awaited<ReturnType<typeof startTarget>>;
  const ns = 'default';
  const taskQueue = 'restarts';

  const startKube = async () => {
    kube = await startLocalKubeApiServer({
      binDir: inject('kubeBinDir'),
      dataDir: join(dir, 'kube'),
      persist: true,
      port: kubePort,
    });
    kubePort = Number(new URL(kube.url).port);
  };
  const startTemporal = async () => {
    temporal = await startTemporalDevServer({
      cli: inject('temporalCli'),
      dataDir: join(dir, 'temporal'),
      persist: true,
      headless: true,
      port: temporalPort,
    });
    temporalPort = Number(temporal.address.split(':')[1]);
  };

  beforeAll(async () => {
    await Promise.all([startKube(), startTemporal()]);
    kc = new KubeConfig();
    kc.loadFromFile(kube.kubeconfigPath);
    await installCrds(kc);
    api = kc.makeApiClient(CustomObjectsApi);
    registry = buildProviders(
      parseProvidersConfig(
        `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n`,
        'test',
      ),
      { logger, stateRoot: dir },
    );
    connection = await Connection.connect({ address: temporal.address });
    const client = new Client({ connection });
    nativeConnection = await NativeConnection.connect({ address: temporal.address });
    worker = await createProxyWorker({
      connection: nativeConnection,
      namespace: 'default',
      taskQueue,
      kubeConfig: kc,
      registry,
      installation: 'restarts',
      logger,
      workflowBundle: workflowBundle(),
    });
    running = worker.run();
    bridge = createBridge({ kubeConfig: kc, client, taskQueue, logger, timing: FAST_TIMING, namespace: ns });
    await bridge.start();
    target = await startTarget('restart ok');
  });

  afterAll(async () => {
    await bridge?.stop();
    if (worker?.getState() === 'RUNNING') worker.shutdown();
    await running?.catch(() => undefined);
    await registry?.close();
    await nativeConnection?.close();
    await connection?.close();
    await temporal?.stop();
    await kube?.stop();
    await target?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(api, ns, name, what, test, { timeoutMs: 60_000, intervalMs: 250 });
  const provisioned = isProvisioned;

  it('converges through an apiserver restart and a Temporal server restart', async () => {
    const created = await createProxy(api, ns, 'survivor', {
      mode: 'Managed',
      provider: 'local',
      port: 18380,
    });
    const first = await waitFor('survivor', 'Running', provisioned);

    // The apiserver goes away and comes back on the same port with the same etcd.
    await kube.stop();
    await new Promise((r) => setTimeout(r, 1_000));
    await startKube();
    await api.patchNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: PROXY_PLURAL,
      name: 'survivor',
      body: [{ op: 'replace', path: '/spec/port', value: 18381 }],
    });
    const replaced = await waitFor(
      'survivor',
      'replaced after the apiserver restart',
      (p) =>
        provisioned(p) && p.status?.observedGeneration === 2 && p.status.specHash !== first.status?.specHash,
    );
    expect(await getThroughConnect(replaced.status!.ip!, 18381, target.port)).toBe('restart ok');

    // The Temporal server goes away and comes back with its database.
    await temporal.stop();
    await new Promise((r) => setTimeout(r, 1_000));
    await startTemporal();
    await api.deleteNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: PROXY_PLURAL,
      name: 'survivor',
    });
    await eventually(
      'Proxy deleted after the Temporal restart',
      async () =>
        getProxy(api, ns, 'survivor').then(
          () => undefined,
          (e: { code?: number }) => (e.code === 404 ? true : undefined),
        ),
      { timeoutMs: 90_000, intervalMs: 250 },
    );
    const instances = await registry.get('local')!.listByTag(AbortSignal.timeout(5_000));
    expect(instances.filter((i) => i.uid === created.metadata.uid)).toHaveLength(0);
    const client = new Client({ connection });
    const status = await eventually('workflow completed', async () => {
      const d = await client.workflow
        .getHandle(proxyWorkflowId({ namespace: ns, name: 'survivor', uid: created.metadata.uid! }))
        .describe();
      return d.status.name === 'COMPLETED' ? d.status.name : undefined;
    });
    expect(status).toBe('COMPLETED');
  });
});
