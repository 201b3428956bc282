/**
 * The apiserver goes away for 30 s while 50 Proxies are being taken in by
 * the bridge: every reconcile that needs the apiserver (the finalizer patch)
 * fails, and the bridge's work queue retries each key with exponential
 * backoff instead of a fixed timer, so a key is tried a bounded number of
 * times during the outage. When the apiserver is back, everything converges.
 *
 * This file runs its own apiserver (persistent etcd, same port on restart):
 * the harness's is shared by every test file. Temporal is the harness's.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as outageLasts } from 'node:timers/promises';
import { Writable } from 'node:stream';
import { KubeConfig } from '@kubernetes/client-node';
import type { Worker } from '@temporalio/worker';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ProxyClient } from '../../kube/proxies.js';
import { FINALIZER } from '../../resources/proxy-schema.js';
import { buildProviders, parseProvidersConfig, type ProviderRegistry } from '../../providers/config.js';
import { createBridge, type Bridge } from '../../k8s-bridge/bridge.js';
import { createProxyWorker } from '../../cli/worker.js';
import { installCrds } from '../../local-servers/install-crds.js';
import { startLocalKubeApiServer, type LocalKubeApiServer } from '../../local-servers/kube.js';
import { createProxy, isProvisioned, proxyClient } from '../helpers/kube.js';
import { FAST_TIMING, privateLoopbackRange } from '../helpers/control-plane.js';
import {
  eventually,
  temporalClient,
  uniqueTaskQueue,
  workerConnection,
  workflowBundle,
} from '../helpers/temporal.js';
import { portBelowEphemeralRange } from '../helpers/net.js';

const PROXIES = 50;
const OUTAGE_MS = 30_000;
/**
 * Failed attempts one key may make. With a 1 s base doubling per failure a
 * key fails at about 0, 1, 3, 7, 15, 31 and 63 s: 7 in the outage plus the
 * apiserver's restart. A fixed 2 s retry would make 20 or more.
 */
const MAX_ATTEMPTS_PER_KEY = 8;

describe('an apiserver outage while 50 Proxies change', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-outage-'));
  const ns = 'default';
  let kube: LocalKubeApiServer;
  // Below the ephemeral range: nothing else takes it while the server is down.
  let kubePort = portBelowEphemeralRange();
  let kc: KubeConfig;
  let api: ProxyClient;
  let registry: ProviderRegistry;
  let worker: Worker;
  let running: Promise<void>;
  let closeTemporal: () => Promise<void>;
  let bridge: Bridge;
  const metrics = new Registry();
  /** The bridge's log lines, parsed. */
  const lines: Array<Record<string, unknown>> = [];
  /** Called on every bridge log line (set by the test). */
  let onLine: (line: Record<string, unknown>) => void = () => undefined;

  const startKube = async () => {
    kube = await startLocalKubeApiServer({
      binDir: inject('kubeBinDir'),
      dataDir: join(dir, 'kube'),
      persist: true,
      port: kubePort,
    });
    kubePort = Number(new URL(kube.url).port);
  };

  beforeAll(async () => {
    await startKube();
    kc = new KubeConfig();
    kc.loadFromFile(kube.kubeconfigPath);
    await installCrds(kc);
    api = proxyClient(kc);
    const logger = pino({ level: process.env.EP_TEST_LOG_LEVEL ?? 'silent' });
    registry = buildProviders(
      parseProvidersConfig(
        `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n`,
        'test',
      ),
      { logger, stateRoot: dir, installation: 'outage' },
    );
    const { client, connection } = await temporalClient();
    const nativeConnection = await workerConnection();
    const taskQueue = uniqueTaskQueue('outage');
    worker = await createProxyWorker({
      connection: nativeConnection,
      namespace: inject('temporalNamespace'),
      taskQueue,
      kubeConfig: kc,
      registry,
      installation: 'outage',
      logger,
      workflowBundle: workflowBundle(),
      timing: FAST_TIMING,
    });
    running = worker.run();
    closeTemporal = async () => {
      await connection.close();
      await nativeConnection.close();
    };
    // The bridge logs at debug into the test, which reads its retries from them.
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const text of chunk.toString('utf8').split('\n')) {
          if (!text) continue;
          const line = JSON.parse(text) as Record<string, unknown>;
          lines.push(line);
          onLine(line);
        }
        done();
      },
    });
    bridge = createBridge({
      kubeConfig: kc,
      client,
      taskQueue,
      logger: pino({ level: 'debug' }, sink),
      namespace: ns,
      concurrency: 2,
      metrics,
    });
  });

  afterAll(async () => {
    await bridge?.stop();
    if (worker?.getState() === 'RUNNING') worker.shutdown();
    await running?.catch(() => undefined);
    await registry?.close();
    await closeTemporal?.();
    await kube?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('backs off per key during the outage and converges after it', async () => {
    const names = Array.from({ length: PROXIES }, (_, i) => `churn-${i}`);
    // Created while no bridge runs: the bridge takes all 50 in at once when it starts.
    await Promise.all(
      names.map((name, i) =>
        createProxy(api, ns, name, { mode: 'Managed', provider: 'local', port: 19000 + i }),
      ),
    );

    // The apiserver is stopped the moment the bridge starts its first reconcile
    // (the log line is written synchronously, before the finalizer patch).
    let stopping: Promise<void> | undefined;
    onLine = (line) => {
      if (line.msg === 'reconciling' && !stopping) stopping = kube.stop();
    };
    // start() waits for a synced watch, which the outage delays: not awaited yet.
    const started = bridge.start();
    await eventually('the apiserver stopped by the first reconcile', async () =>
      stopping ? stopping.then(() => true) : undefined,
    );
    const stoppedAt = Date.now();
    // The outage's length is the scenario, not a wait for an outcome.
    await outageLasts(OUTAGE_MS - (Date.now() - stoppedAt));
    await startKube();
    await started;

    // Everything converges: every Proxy has the finalizer and an instance.
    const converged = await eventually(
      'all 50 Proxies provisioned',
      async () => {
        const list = await api.list(ns);
        const done = list.items.filter((p) => isProvisioned(p) && p.metadata.finalizers?.includes(FINALIZER));
        return done.length === PROXIES ? list.items : undefined;
      },
      { timeoutMs: 180_000, intervalMs: 1_000 },
    );
    const instances = await registry.get('local')!.listByTag(AbortSignal.timeout(10_000));
    for (const p of converged) expect(instances.filter((i) => i.uid === p.metadata.uid)).toHaveLength(1);
    expect(instances).toHaveLength(PROXIES);

    // The retries happened, and backed off: per key, a bounded number of attempts.
    const failures = lines.filter((l) => l.msg === 'reconcile failed; retrying after backoff');
    expect(failures.length).toBeGreaterThan(0);
    const attemptsPerKey = new Map<string, number>();
    for (const f of failures) {
      const key = f.proxy as string;
      attemptsPerKey.set(key, Math.max(attemptsPerKey.get(key) ?? 0, f.attempt as number));
    }
    expect(Math.max(...attemptsPerKey.values())).toBeLessThanOrEqual(MAX_ATTEMPTS_PER_KEY);
    // Each failure of a key waited twice as long as the one before (capped).
    for (const [key, count] of attemptsPerKey) {
      const delays = failures.filter((f) => f.proxy === key).map((f) => f.retryInMs as number);
      expect(delays, key).toEqual(delays.map((_, i) => Math.min(1_000 * 2 ** i, 120_000)));
      expect(delays).toHaveLength(count);
    }
    // The same in the bridge's metrics; the queue is empty again.
    const text = await metrics.metrics();
    expect(text).toMatch(new RegExp(`egress_bridge_workqueue_retries_total ${failures.length}\\b`));
    await bridge.idle();
    expect(text).toContain('egress_bridge_workqueue_depth');
    expect((await metrics.getSingleMetric('egress_bridge_workqueue_depth')!.get()).values[0]!.value).toBe(0);
  });
});
