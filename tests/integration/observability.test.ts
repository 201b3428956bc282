/**
 * What a person sees, from the real processes: worker, bridge and api
 * started from the CLI (real Temporal, real apiserver, the `local` provider's
 * real forward proxy, the api's prober probing the api's own /healthz
 * through it). `kubectl wait --for=condition=Ready` returns when the lease
 * API will lease the Proxy; `kubectl describe px` shows Events for the
 * create, the health changes and the delete; each process's /metrics has
 * what the metrics table says (the provider request counter with real
 * labels and the Temporal SDK's metrics on the worker, bridge metrics on the
 * bridge, Node process metrics on all); the example dashboard and alert
 * rules name only metrics that exist there; and no cloud-init text reaches
 * Events or metrics.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { EventsV1Api } from '@kubernetes/client-node';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { FINALIZER, type Proxy } from '../../resources/proxy-schema.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { type CliProcess, leaseApiUrl, ROOT, startCli, testServerArgs } from '../helpers/cli.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  editProxySpec,
  getProxy,
  kubeConfig,
  kubectl,
  proxyClient,
  proxyCondition,
  removeFinalizers,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { eventually, uniqueTaskQueue, freshTemporalNamespace } from '../helpers/temporal.js';
import {
  metricFamilies,
  metricNamesInDashboard,
  metricNamesInRules,
  metricsExposed,
  seedMetrics,
} from '../helpers/observability.js';

const run = promisify(execFile);
const HOLD = 'test.example.com/hold';
const SENTINEL = 'SENTINEL-observability-77e1c4';
const TOKEN = 'observability-test';

describe('observability of a Proxy’s life, from the real processes', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-obs-'));
  const children: CliProcess[] = [];
  afterAll(async () => {
    for (const c of children) await c.stop(30_000).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it('Ready when leasable, Events in describe, metrics on every process', async () => {
    const providers = join(dir, 'providers.yaml');
    writeFileSync(
      providers,
      `providers:\n  - name: local\n    type: local\n    local: { stateDir: ${dir}/local, addressRange: ${privateLoopbackRange()} }\n`,
    );
    const taskQueue = uniqueTaskQueue('obs');
    const temporalNamespace = await freshTemporalNamespace('obs');
    const kc = kubeConfig();
    const objects = proxyClient(kc);
    const namespace = await createNamespace(kc, 'obs');
    const common = (command: 'worker' | 'bridge' | 'api') => [
      ...testServerArgs(temporalNamespace),
      ...(command === 'api' ? [] : ['--task-queue', taskQueue]),
      ...(command === 'worker' ? ['--installation', 'obs-test'] : []),
      // Only this test's namespace: other tests' Proxies on the shared apiserver are theirs.
      '--watch-namespaces',
      namespace,
    ];
    const start = (args: string[]) => {
      const child = startCli(args, { env: { DISCOVERY_TOKEN: TOKEN } });
      children.push(child);
      return child;
    };
    const listening = /"url":"(http:\/\/127\.0\.0\.1:\d+)"[^\n]*health and metrics listening/;
    const worker = start([
      'worker',
      ...common('worker'),
      '--providers-config',
      providers,
      '--metrics-addr',
      '127.0.0.1:0',
    ]);
    const bridge = start(['bridge', ...common('bridge'), '--metrics-addr', '127.0.0.1:0']);
    const api = start(['api', ...common('api'), '--discovery-addr', '127.0.0.1:0']);
    const workerUrl = (await worker.waitFor(listening, 120_000))[1]!;
    const bridgeUrl = (await bridge.waitFor(listening, 120_000))[1]!;
    const apiUrl = await leaseApiUrl(api);
    await worker.waitFor(/worker started/, 180_000);
    await bridge.waitFor(/bridge started/, 120_000);

    const run1 = `obs-${Date.now()}`;
    const created = await createProxy(
      objects,
      namespace,
      'watched',
      {
        mode: 'Managed',
        provider: 'local',
        port: 18411,
        attributes: { run: run1 },
        cloudInit: { inline: `#cloud-config\npassword: ${SENTINEL}\n` },
        healthCheck: {
          probeURL: `${apiUrl}/healthz`,
          intervalSeconds: 1,
          timeoutSeconds: 2,
          successThreshold: 1,
          failureThreshold: 1,
        },
      },
      // A second finalizer keeps the Proxy visible after ours is released, so describe can show the delete.
      { finalizers: [HOLD] },
    );

    // kubectl wait returns once the Proxy is usable: the lease API leases it at that moment.
    const waited = await run(
      join(inject('kubeBinDir'), 'kubectl'),
      [
        '--kubeconfig',
        inject('kubeconfigPath'),
        'wait',
        '--for=condition=Ready',
        '--timeout=150s',
        '-n',
        namespace,
        'px/watched',
      ],
      { timeout: 160_000 },
    );
    expect(waited.stdout).toContain('condition met');
    const lease = await fetch(`${apiUrl}/v1/leases`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ selector: { run: run1 }, ttlSeconds: 30 }),
    });
    expect(lease.status, await lease.clone().text()).toBe(201);
    expect(((await lease.json()) as { proxy: { id: string } }).proxy.id).toBe(`${namespace}/watched`);
    const ready = await getProxy(objects, namespace, 'watched');
    expect(proxyCondition(ready, 'Ready')).toMatchObject({ status: 'True', reason: 'Ready' });
    expect(ready.status?.lastHealthReportTime).toEqual(expect.any(String));

    // Unhealthy: the probe now goes through the proxy to a closed port.
    await editProxySpec(objects, namespace, 'watched', (spec) => ({
      ...spec,
      healthCheck: { ...spec.healthCheck, probeURL: 'http://127.0.0.1:9/nothing' },
    }));
    const down = await waitForProxy(
      objects,
      namespace,
      'watched',
      'Healthy=False',
      (p: Proxy) => proxyCondition(p, 'Healthy')?.status === 'False',
    );
    expect(proxyCondition(down, 'Ready')).toMatchObject({ status: 'False' });

    // Delete: our finalizer goes once the instance is gone; the hold keeps the object for describe.
    await deleteProxy(objects, namespace, 'watched');
    await waitForProxy(
      objects,
      namespace,
      'watched',
      'our finalizer released',
      (p: Proxy) => !(p.metadata.finalizers ?? []).includes(FINALIZER),
    );
    const events = kc.makeApiClient(EventsV1Api);
    const reasons = await eventually(
      'the Deleted event',
      async () => {
        const items = (await events.listNamespacedEvent({ namespace })).items.filter(
          (e) => e.regarding?.uid === created.metadata.uid,
        );
        return items.some((e) => e.reason === 'Deleted') ? items : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 250 },
    );
    const described = await kubectl(['describe', 'px', 'watched', '-n', namespace]);
    // The local instance runs at once: no Provisioning phase, so one Event for the create.
    expect(described).not.toMatch(/Normal\s+Provisioning\s/);
    expect(described).toMatch(/Normal\s+Running\s+.*instance local\/\S+ is running at /);
    expect(described).toMatch(/Normal\s+ProbeSucceeded\s+.*became healthy/);
    expect(described).toMatch(/Normal\s+Ready\s+.*usable by crawlers/);
    expect(described).toMatch(/Warning\s+\w+\s+.*became unhealthy/);
    expect(described).toMatch(/Normal\s+Deleting\s/);
    expect(described).toMatch(/Normal\s+Deleted\s+.*instance local\/\S+ deleted; finalizer removed/);
    expect(JSON.stringify(reasons)).not.toContain(SENTINEL);
    // (describe prints the spec, which holds the inline cloud-init the user wrote; the Events must not.)
    expect(described.slice(described.indexOf('Events:'))).not.toContain(SENTINEL);

    await removeFinalizers(objects, namespace, 'watched');
    await waitForProxyGone(objects, namespace, 'watched');

    // /metrics of each process after the Proxy's life.
    const scrape = async (url: string) => {
      const response = await fetch(url);
      expect(response.status).toBe(200);
      return response.text();
    };
    const workerText = await eventually(
      'the worker counted the deletion poll',
      async () => {
        const text = await scrape(`${workerUrl}/metrics`);
        return /proxy_operator_provider_requests_total\{provider="local",op="get",result="not_found"\} [1-9]/.test(
          text,
        )
          ? text
          : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    const bridgeText = await scrape(`${bridgeUrl}/metrics`);
    const apiText = await scrape(`${apiUrl}/metrics`);

    expect(workerText).toMatch(
      /proxy_operator_provider_requests_total\{provider="local",op="create",result="ok"\} 1\n/,
    );
    expect(workerText).toMatch(
      /proxy_operator_provider_requests_total\{provider="local",op="get",result="ok"\} [1-9]/,
    );
    expect(workerText).toMatch(
      /proxy_operator_provider_requests_total\{provider="local",op="delete",result="ok"\} [1-9]/,
    );
    expect(workerText).toMatch(
      /egress_provider_request_duration_seconds_count\{provider="local",op="create"\} 1\n/,
    );
    expect(workerText).toMatch(/egress_kube_events_total\{type="Normal",outcome="created"\} [1-9]/);
    // The Temporal SDK's own metrics, appended from its exporter.
    expect(workerText).toMatch(/^temporal_request\{.*\} [1-9]/m);
    expect(workerText).toMatch(/^temporal_workflow_completed\{.*task_queue="[^"]+".*\} [1-9]/m);
    expect(workerText).toMatch(/^process_cpu_user_seconds_total /m);
    expect(workerText).toMatch(/^nodejs_heap_size_used_bytes /m);

    expect(bridgeText).toMatch(/egress_bridge_signals_total\{signal="specChanged"\} [1-9]/);
    expect(bridgeText).toMatch(/egress_bridge_watch_events_total\{resource="proxies",event="add"\} [1-9]/);
    expect(bridgeText).toMatch(/egress_bridge_watch_events_total\{resource="proxies",event="delete"\} [1-9]/);
    expect(bridgeText).toMatch(/egress_bridge_informer_restarts_total\{resource="proxies"\} 0/);
    expect(bridgeText).toMatch(/egress_bridge_finalizers_added_total [1-9]/);
    expect(bridgeText).toMatch(/egress_bridge_workqueue_depth \d/);
    expect(bridgeText).toMatch(/^process_resident_memory_bytes /m);

    expect(apiText).toMatch(/proxy_operator_lease_requests_total\{outcome="granted"\} [1-9]/);
    expect(apiText).toMatch(/^process_cpu_user_seconds_total /m);

    for (const text of [workerText, bridgeText, apiText]) expect(text).not.toContain(SENTINEL);

    // The examples under infra/observability name only metrics these processes export.
    const exposed = metricsExposed([workerText, bridgeText, apiText]);
    const dashboard: unknown = JSON.parse(
      readFileSync(join(ROOT, 'infra/observability/grafana-dashboard.json'), 'utf8'),
    );
    const rules = readFileSync(join(ROOT, 'infra/observability/prometheus-rules.yaml'), 'utf8');
    const used = [...metricNamesInDashboard(dashboard), ...metricNamesInRules(rules)];
    expect(used.length).toBeGreaterThan(10);
    // `up` is the one name Prometheus makes itself, per scrape target.
    expect(used.filter((name) => name !== 'up' && !exposed.has(name))).toEqual([]);

    // The seed's metrics keep the seed's names, types and labels, on the process that does the seed's work;
    // everything else this project exports is egress_* (or the SDK's and Node's own families).
    const byProcess = { worker: metricFamilies([workerText]), api: metricFamilies([apiText]) };
    const seed = seedMetrics();
    expect(seed).toHaveLength(9);
    for (const metric of seed) {
      const family = byProcess[metric.process].get(metric.name);
      expect(family, `${metric.name} on the ${metric.process}`).toBeDefined();
      expect(family!.type, metric.name).toBe(metric.type);
      if (family!.samples > 0)
        expect([...family!.labelNames].sort(), metric.name).toEqual([...metric.labels].sort());
    }
    expect(byProcess.worker.get('proxy_operator_provider_requests_total')!.samples).toBeGreaterThan(0);
    expect(byProcess.api.get('proxy_operator_lease_requests_total')!.samples).toBeGreaterThan(0);
    const seedNames = new Set(seed.map((m) => m.name));
    const offPrefix = [...metricFamilies([workerText, bridgeText, apiText]).keys()].filter(
      (name) => !seedNames.has(name) && !/^(egress_|temporal_|process_|nodejs_)/.test(name),
    );
    expect(offPrefix).toEqual([]);

    for (const child of [worker, bridge, api]) expect(await child.stop(60_000), child.output()).toBe(0);
    const logs = [worker, bridge, api].map((c) => c.output()).join('\n');
    expect(logs).not.toContain(SENTINEL);
  }, 420_000);
});
