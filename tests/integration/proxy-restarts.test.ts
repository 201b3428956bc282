/**
 * The apiserver and the Temporal server restarted mid-flight: everything
 * converges without manual action. This file runs its own apiserver (with
 * persistent etcd) and its own Temporal dev server (with a database file) so
 * it can restart them without disturbing other test files.
 *
 * Besides a restart while a Proxy is steady, restarts land inside an
 * operation: the `held` provider (the real local provider, its new instances
 * held in Provisioning until the test releases them, tests/helpers/held-provisioning.ts)
 * keeps the operation open across the restart however long that takes, the
 * test checks the provider still says Provisioning, then releases it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from 'node:net';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Proxy } from '../../resources/proxy-schema.js';
import { buildProviders, parseProvidersConfig, type ProviderRegistry } from '../../providers/config.js';
import { createBridge, type Bridge } from '../../k8s-bridge/bridge.js';
import { createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../local-servers/temporal.js';
import { portInUse } from '../../local-servers/ports.js';
import type { ProxyClient } from '../../kube/proxies.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { stateQuery } from '../../workflows/proxy/messages.js';
import {
  createProxy,
  deleteProxy,
  editProxySpec,
  getProxy,
  isProvisioned,
  proxyClient,
  proxyCondition,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { throughProxy } from '../helpers/kube.js';
import { FAST_TIMING, privateLoopbackRange } from '../helpers/control-plane.js';
import { activityCalls, eventually, instanceCreates, workflowBundle } from '../helpers/temporal.js';
import { portBelowEphemeralRange, startTarget } from '../helpers/net.js';
import { holdProvisioning, type HeldProvisioning } from '../helpers/held-provisioning.js';

describe('restarts of the apiserver and the Temporal server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-restarts-'));
  const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });
  let kube: LocalKubeApiServer;
  let temporal: TemporalDevServer;
  // Below the ephemeral range: nothing else takes it while the server is down.
  let kubePort = portBelowEphemeralRange();
  // Below the ephemeral range: nothing else takes it while the server is down.
  let temporalPort = portBelowEphemeralRange();
  let kc: KubeConfig;
  let api: ProxyClient;
  let registry: ProviderRegistry;
  /** Holds the `held` provider's new instances in Provisioning: the window a restart lands in. */
  let held: HeldProvisioning;
  let connection: Connection;
  let client: Client;
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
    api = proxyClient(kc);
    // Two neighbouring /24s, so the providers never hand out the same address.
    const localRange = privateLoopbackRange();
    const [, second, third] = localRange.split('.').map(Number) as [number, number, number];
    const heldRange = `127.${second}.${third + 1}.0/24`;
    held = holdProvisioning(
      buildProviders(
        parseProvidersConfig(
          `providers:\n` +
            `  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${localRange} }\n` +
            `  - name: held\n    type: local\n    local: { stateDir: ${dir}/held, addressRange: ${heldRange} }\n`,
          'test',
        ),
        { logger, stateRoot: dir, installation: 'restarts' },
      ),
      'held',
    );
    registry = held.registry;
    connection = await Connection.connect({ address: temporal.address });
    client = new Client({ connection });
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
      timing: FAST_TIMING,
    });
    running = worker.run();
    bridge = createBridge({ kubeConfig: kc, client, taskQueue, logger, namespace: ns });
    await bridge.start();
    target = await startTarget('restart ok');
  });

  // A test that failed while holding leaves nothing held for the next one.
  afterEach(() => held?.release());

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

  /** Resolves once the port can be bound again, so a restart gets the same port. */
  const portFree = (port: number) =>
    eventually(`port ${port} free`, async () => ((await portInUse(port)) ? undefined : true), {
      timeoutMs: 30_000,
      intervalMs: 100,
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
    await portFree(kubePort);
    await startKube();
    await editProxySpec(api, ns, 'survivor', (spec) => ({ ...spec, port: 18381 }));
    const replaced = await waitFor(
      'survivor',
      'replaced after the apiserver restart',
      (p) =>
        provisioned(p) && p.status?.observedGeneration === 2 && p.status.specHash !== first.status?.specHash,
    );
    expect(await throughProxy(kc, replaced, target.port)).toBe('restart ok');

    // The Temporal server goes away and comes back with its database.
    await temporal.stop();
    await portFree(temporalPort);
    await startTemporal();
    await deleteProxy(api, ns, 'survivor');
    await waitForProxyGone(api, ns, 'survivor', { timeoutMs: 90_000, intervalMs: 250 });
    const instances = await registry.get('local')!.listByTag(AbortSignal.timeout(5_000));
    expect(instances.filter((i) => i.uid === created.metadata.uid)).toHaveLength(0);
    const status = await eventually('workflow completed', async () => {
      const d = await client.workflow
        .getHandle(proxyWorkflowId({ namespace: ns, name: 'survivor', uid: created.metadata.uid! }))
        .describe();
      return d.status.name === 'COMPLETED' ? d.status.name : undefined;
    });
    expect(status).toBe('COMPLETED');
  });

  // ---- Restarts inside an operation ----

  const handleOf = (name: string, uid: string) =>
    client.workflow.getHandle(proxyWorkflowId({ namespace: ns, name, uid }));
  /** Every instance carrying this UID mark, on either provider. */
  const instancesOf = async (uid: string) => {
    const listed = await Promise.all(
      ['local', 'held'].map((p) => registry.get(p)!.listByTag(AbortSignal.timeout(5_000))),
    );
    return listed.flat().filter((i) => i.uid === uid);
  };
  const activities = async (name: string, uid: string, type: string) =>
    activityCalls((await handleOf(name, uid).fetchHistory()).events ?? [], type);
  const creates = async (name: string, uid: string) =>
    instanceCreates((await handleOf(name, uid).fetchHistory()).events ?? []);
  /** The create returned and the instance is held in Provisioning: the window a restart lands in. */
  const heldInProvisioning = (p: Proxy) =>
    Boolean(p.status?.providerID) && proxyCondition(p, 'Provisioned')?.reason === 'Provisioning';
  /** The provider itself (not the workflow) still says Provisioning: the restart really is mid-create. */
  const expectStillProvisioning = async (id: string) =>
    expect((await registry.get('held')!.get(id, AbortSignal.timeout(5_000))).state).toBe('Provisioning');
  /** Resolves once nothing accepts connections on the port any more. */
  const portClosed = (port: number) =>
    eventually(
      `port ${port} closed`,
      () =>
        new Promise<true | undefined>((resolve) => {
          const socket = connect({ host: '127.0.0.1', port });
          socket.once('connect', () => {
            socket.destroy();
            resolve(undefined);
          });
          socket.once('error', () => resolve(true));
        }),
      { timeoutMs: 15_000, intervalMs: 50 },
    );
  /**
   * Stops a server and runs `whileDown` as soon as its port is closed (the
   * process itself may take up to its kill timeout to exit), then starts it
   * again on the same port and data, also when `whileDown` fails.
   */
  const restart = async (
    server: { stop(): Promise<void> },
    port: number,
    start: () => Promise<void>,
    whileDown: () => Promise<void>,
  ) => {
    const stopped = server.stop();
    try {
      await portClosed(port);
      await whileDown();
    } finally {
      await stopped;
      await portFree(port);
      await start();
    }
  };
  const restartKube = (whileDown: () => Promise<void>) => restart(kube, kubePort, startKube, whileDown);
  const restartTemporal = (whileDown: () => Promise<void>) =>
    restart(temporal, temporalPort, startTemporal, whileDown);
  const remove = (name: string) => deleteProxy(api, ns, name);
  const gone = (name: string) => waitForProxyGone(api, ns, name, { timeoutMs: 90_000, intervalMs: 250 });
  /** Delete: the finalizer is removed (object gone), no instance left, the workflow completed. */
  const deleteAndExpectCleanup = async (name: string, uid: string) => {
    await remove(name);
    await gone(name);
    expect(await instancesOf(uid)).toHaveLength(0);
    const status = await eventually('workflow completed', async () => {
      const d = await handleOf(name, uid).describe();
      return d.status.name === 'COMPLETED' ? d.status.name : undefined;
    });
    expect(status).toBe('COMPLETED');
  };

  it('an apiserver restart while a create is provisioning: Running, one instance, clean delete', async () => {
    held.hold();
    const created = await createProxy(api, ns, 'mid-create-kube', {
      mode: 'Managed',
      provider: 'held',
      port: 18382,
    });
    const uid = created.metadata.uid!;
    const provisioning = await waitFor('mid-create-kube', 'held in Provisioning', heldInProvisioning);
    const id = provisioning.status!.providerID!;

    await restartKube(() => expectStillProvisioning(id));
    held.release();

    const running = await waitFor('mid-create-kube', 'Running after the apiserver restart', provisioned);
    expect(running.status?.providerID).toBe(id);
    expect(running.status?.observedGeneration).toBe(1);
    expect(await throughProxy(kc, running, target.port)).toBe('restart ok');
    expect((await instancesOf(uid)).map((i) => i.id)).toEqual([id]);
    expect(await creates('mid-create-kube', uid)).toBe(1);

    await deleteAndExpectCleanup('mid-create-kube', uid);
  });

  it('a Temporal server restart while a create is provisioning: Running, one instance, clean delete', async () => {
    held.hold();
    const created = await createProxy(api, ns, 'mid-create-temporal', {
      mode: 'Managed',
      provider: 'held',
      port: 18383,
    });
    const uid = created.metadata.uid!;
    const provisioning = await waitFor('mid-create-temporal', 'held in Provisioning', heldInProvisioning);
    const id = provisioning.status!.providerID!;
    const { runId } = await handleOf('mid-create-temporal', uid).describe();

    await restartTemporal(() => expectStillProvisioning(id));
    held.release();

    const running = await waitFor('mid-create-temporal', 'Running after the Temporal restart', provisioned);
    expect(running.status?.providerID).toBe(id);
    expect(await throughProxy(kc, running, target.port)).toBe('restart ok');
    expect((await instancesOf(uid)).map((i) => i.id)).toEqual([id]);
    expect(await creates('mid-create-temporal', uid)).toBe(1);
    // The run that was polling before the restart carried on (no new run was started).
    const view = await handleOf('mid-create-temporal', uid).query(stateQuery);
    expect(view).toMatchObject({ providerID: id, instanceState: 'Running' });
    expect((await handleOf('mid-create-temporal', uid).describe()).runId).toBe(runId);

    await deleteAndExpectCleanup('mid-create-temporal', uid);
  });

  it('a Temporal server restart while a replacement is provisioning: one instance on the new spec', async () => {
    const created = await createProxy(api, ns, 'mid-replace', {
      mode: 'Managed',
      provider: 'held',
      port: 18384,
    });
    const uid = created.metadata.uid!;
    const first = await waitFor('mid-replace', 'Running', provisioned);
    held.hold();
    await editProxySpec(api, ns, 'mid-replace', (spec) => ({ ...spec, port: 18385 }));
    // The old instance is deleted and the new one created: it is held in Provisioning.
    const replacing = await waitFor(
      'mid-replace',
      'replacement held in Provisioning',
      (p) =>
        p.status?.observedGeneration === 2 &&
        p.status.specHash !== first.status?.specHash &&
        heldInProvisioning(p),
    );
    const id = replacing.status!.providerID!;

    await restartTemporal(() => expectStillProvisioning(id));
    held.release();

    const replaced = await waitFor(
      'mid-replace',
      'replacement Running after the Temporal restart',
      (p) => provisioned(p) && p.status?.observedGeneration === 2,
    );
    expect(replaced.status?.specHash).toBe(replacing.status?.specHash);
    expect(await throughProxy(kc, replaced, target.port)).toBe('restart ok');
    expect(await instancesOf(uid)).toHaveLength(1);
    expect(await creates('mid-replace', uid)).toBe(2);
    expect(await activities('mid-replace', uid, 'deleteInstance')).toBe(1);

    await deleteAndExpectCleanup('mid-replace', uid);
  });

  it('a Proxy deleted while the Temporal server is down is cleaned up once it is back', async () => {
    const created = await createProxy(api, ns, 'delete-while-down', {
      mode: 'Managed',
      provider: 'local',
      port: 18386,
    });
    const uid = created.metadata.uid!;
    await waitFor('delete-while-down', 'Running', provisioned);

    await restartTemporal(async () => {
      await remove('delete-while-down');
      // Nobody can act on it yet: the bridge has seen the deletion and failed
      // to pass it on (Temporal is down), and the finalizer holds the Proxy.
      await eventually('the bridge failed to signal the deletion', () =>
        Promise.resolve(bridge.failures(`${ns}/delete-while-down`) > 0 || undefined),
      );
      const held = await getProxy(api, ns, 'delete-while-down');
      expect(held.metadata.deletionTimestamp).toBeDefined();
      expect(await instancesOf(uid)).toHaveLength(1);
    });

    await gone('delete-while-down');
    expect(await instancesOf(uid)).toHaveLength(0);
    const status = await eventually('workflow completed', async () => {
      const d = await handleOf('delete-while-down', uid).describe();
      return d.status.name === 'COMPLETED' ? d.status.name : undefined;
    });
    expect(status).toBe('COMPLETED');
  });
});
