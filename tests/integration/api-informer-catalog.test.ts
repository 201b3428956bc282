/**
 * The informer-backed catalog against the real kube-apiserver from the
 * harness: it sees creates, status writes and deletions, the API built on
 * it never lists or leases a Proxy being deleted, and it recovers by itself
 * after the connection to the apiserver is cut (client-node 1.4's informer
 * stops for good on such errors).
 *
 * The cut goes through a TCP relay in front of the apiserver, so the shared
 * apiserver keeps running for the other test files.
 */
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../../api/app.js';
import { createInformerProxyCatalog, type InformerProxyCatalog } from '../../api/informer-catalog.js';
import type { ResilientInformer } from '../../kube/informer.js';
import { createProxyInformer } from '../../kube/proxy-informer.js';
import { MemoryLeaseStore } from '../../api/lease-store.js';
import { serveApi, type RunningServer } from '../../api/server.js';
import type { ProxyClient } from '../../kube/proxies.js';
import type { Proxy, ProxyStatus } from '../../resources/proxy-schema.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  getProxy,
  kubeConfig,
  proxyClient,
  removeFinalizers,
  setProxyStatus,
} from '../helpers/kube.js';
import { TcpRelay } from '../helpers/net.js';
import { captureLogs } from './api-helpers.js';
import { Registry } from 'prom-client';

async function waitFor<T>(what: string, probe: () => T | undefined | false, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const healthyStatus = (latencyMillis: number): ProxyStatus => ({
  phase: 'Ready',
  latencyMillis,
  conditions: [
    {
      type: 'Healthy',
      status: 'True',
      lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      reason: 'Probe',
      message: 'ok',
    },
  ],
});

async function writeStatus(
  api: ProxyClient,
  namespace: string,
  name: string,
  status: ProxyStatus,
): Promise<void> {
  await setProxyStatus(api, await getProxy(api, namespace, name), status);
}

describe('informer proxy catalog on a real apiserver', () => {
  const kc = kubeConfig();
  const objects = proxyClient(kc);
  const logs = captureLogs();
  let namespace = '';
  let relay: TcpRelay;
  let informer: ResilientInformer<Proxy>;
  let relayed: KubeConfig;
  let catalog: InformerProxyCatalog;
  let server: RunningServer;
  let token = '';

  const mine = () => catalog.list().filter((p) => p.id.startsWith(`${namespace}/`));

  beforeAll(async () => {
    namespace = await createNamespace(kc, 'api-informer');
    const apiserver = new URL(kc.getCurrentCluster()!.server);
    relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
    await relay.open();
    relayed = new KubeConfig();
    relayed.loadFromOptions({
      clusters: kc.clusters.map((c) => ({ ...c, server: `https://127.0.0.1:${relay.port}` })),
      users: kc.users,
      contexts: kc.contexts,
      currentContext: kc.getCurrentContext(),
    });
    informer = createProxyInformer({
      kubeConfig: relayed,
      logger: logs.logger,
      initialBackoffMs: 100,
      maxBackoffMs: 1000,
    });
    await informer.start();
    catalog = createInformerProxyCatalog(informer);
    token = 'informer-test';
    const app = createApi({
      catalog,
      leaseStore: new MemoryLeaseStore(),
      token,
      logger: logs.logger,
      registry: new Registry(),
      processMetrics: false,
    });
    server = await serveApi(app, { host: '127.0.0.1', port: 0, shutdownGraceMs: 1000 });
  });

  afterAll(async () => {
    await server?.close();
    catalog?.close();
    await informer?.stop();
    await relay?.cut();
  });

  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(server.url + path, {
      method,
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('is synced after start and follows creates and status writes', async () => {
    expect(catalog.synced()).toBe(true);
    await createProxy(objects, namespace, 'edge', {
      mode: 'External',
      endpoint: { host: 'edge.example.net', port: 8080 },
      attributes: { suite: namespace, tier: 'edge' },
      maxLeases: 2,
    });
    const created = await waitFor('the new proxy', () => mine().find((p) => p.id === `${namespace}/edge`));
    expect(created).toMatchObject({
      host: 'edge.example.net',
      port: 8080,
      healthy: false,
      phase: '',
      maxLeases: 2,
      deleting: false,
    });

    await writeStatus(objects, namespace, 'edge', healthyStatus(17));
    await waitFor('the status write', () => mine().find((p) => p.healthy));
    expect(mine()[0]).toMatchObject({
      phase: 'Ready',
      latencyMillis: 17,
      healthy: true,
      attributes: { suite: namespace, tier: 'edge' },
    });

    const lease = await call('POST', '/v1/leases', { selector: { suite: namespace } });
    expect(lease.status).toBe(201);
    expect(lease.body.proxy).toMatchObject({
      id: `${namespace}/edge`,
      ip: 'edge.example.net',
      port: 8080,
      activeLeases: 1,
    });
  });

  it('re-derives only the view of the Proxy an event is about, and keeps the list in id order', async () => {
    const spec = (tier: string) => ({
      mode: 'External' as const,
      endpoint: { host: `${tier}.example.net`, port: 3128 },
      attributes: { suite: namespace, tier },
    });
    await createProxy(objects, namespace, 'still', spec('still'));
    await createProxy(objects, namespace, 'moving', spec('moving'));
    await waitFor(
      'both proxies',
      () => mine().filter((p) => p.id.endsWith('/still') || p.id.endsWith('/moving')).length === 2,
    );
    const before = catalog.list();
    const still = before.find((p) => p.id === `${namespace}/still`)!;
    await writeStatus(objects, namespace, 'moving', healthyStatus(5));
    await waitFor('the status write', () => mine().find((p) => p.id.endsWith('/moving') && p.healthy));
    const after = catalog.list();
    expect(after).not.toBe(before);
    // The unchanged Proxy's view is the very object it was: nothing re-derived it.
    expect(after.find((p) => p.id === `${namespace}/still`)).toBe(still);
    // Still sorted by id, the order selection's last tie-break uses.
    const ids = after.map((p) => p.id);
    expect(ids).toEqual([...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    await deleteProxy(objects, namespace, 'still');
    await deleteProxy(objects, namespace, 'moving');
    await waitFor(
      'both gone',
      () => !mine().some((p) => p.id.endsWith('/still') || p.id.endsWith('/moving')) && true,
    );
  });

  it('stops listing and leasing a Proxy as soon as it has a deletionTimestamp, and forgets it once gone', async () => {
    await createProxy(
      objects,
      namespace,
      'leaving',
      {
        mode: 'External',
        endpoint: { host: 'leaving.example.net', port: 3128 },
        attributes: { suite: namespace, tier: 'leaving' },
      },
      { finalizers: ['crawl.example.com/api-test-hold'] },
    );
    await writeStatus(objects, namespace, 'leaving', healthyStatus(1));
    await waitFor('the second proxy to be healthy', () =>
      mine().find((p) => p.id.endsWith('/leaving') && p.healthy),
    );
    expect((await call('GET', `/v1/proxies?attr.tier=leaving&attr.suite=${namespace}`)).body.count).toBe(1);

    await deleteProxy(objects, namespace, 'leaving');
    await waitFor('the deletionTimestamp', () => mine().find((p) => p.id.endsWith('/leaving') && p.deleting));
    expect((await call('GET', `/v1/proxies?attr.suite=${namespace}`)).body.proxies).toEqual([
      expect.objectContaining({ id: `${namespace}/edge` }),
    ]);
    const refused = await call('POST', '/v1/leases', { selector: { tier: 'leaving' } });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ considered: 0 });

    await removeFinalizers(objects, namespace, 'leaving');
    await waitFor('the proxy to be gone', () => !mine().some((p) => p.id.endsWith('/leaving')) && true);
  });

  it('restarts itself with backoff after the apiserver connection is cut, and catches up', async () => {
    const warningsBefore = logs.lines.filter((l) => l.msg === 'watch stopped; restarting').length;
    let reconnects = 0;
    const unsubscribe = informer.onReconnect(() => (reconnects += 1));
    await relay.cut();
    await waitFor(
      'a restart warning',
      () => logs.lines.filter((l) => l.msg === 'watch stopped; restarting').length > warningsBefore,
    );

    // Changes made while the informer is cut off.
    await createProxy(objects, namespace, 'late', {
      mode: 'External',
      endpoint: { host: 'late.example.net', port: 3128 },
      attributes: { suite: namespace },
    });
    // Let at least one retry fail against the closed port first (a second restart warning).
    await waitFor(
      'a retry failed while cut off',
      () => logs.lines.filter((l) => l.msg === 'watch stopped; restarting').length > warningsBefore + 1,
    );
    expect(mine().some((p) => p.id.endsWith('/late'))).toBe(false);
    expect(catalog.synced()).toBe(true);
    expect((await call('GET', `/v1/proxies?attr.suite=${namespace}`)).body.count).toBe(1);

    await relay.open();
    await waitFor('the informer to catch up', () => mine().find((p) => p.id.endsWith('/late')), 20_000);
    // One outage, one reconnect notice, however many retries failed.
    await waitFor('the reconnect notice', () => reconnects > 0 || undefined, 20_000);
    // A later change delivered through the restored watch: any further notice
    // for this outage would have come before it.
    await createProxy(objects, namespace, 'after-notice', {
      mode: 'External',
      endpoint: { host: 'after.example.net', port: 3128 },
      attributes: { suite: namespace },
    });
    await waitFor(
      'a change after the notice',
      () => mine().find((p) => p.id.endsWith('/after-notice')),
      20_000,
    );
    expect(reconnects).toBe(1);
    unsubscribe();
    const restarts = logs.lines.filter((l) => l.msg === 'watch stopped; restarting').slice(warningsBefore);
    // At least one restart attempt hit the closed port, so recovery came from
    // a retry, not from the first reconnect; delays grow and stay capped.
    expect(restarts.some((l) => (l.err as { code?: unknown }).code === 'ECONNREFUSED')).toBe(true);
    const delays = restarts.map((l) => l.retryInMs as number);
    for (let i = 1; i < delays.length; i++) expect(delays[i]).toBeGreaterThanOrEqual(delays[i - 1]!);
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(100);
    expect(Math.max(...delays)).toBeLessThanOrEqual(1000);
  });

  it('resolves start() only once a listing has loaded, and rejects it when stopped first', async () => {
    await relay.cut();
    const warnings = () => logs.lines.filter((l) => l.msg === 'watch stopped; restarting').length;
    const warningsBeforeLate = warnings();
    const late = createProxyInformer({ kubeConfig: relayed, logger: logs.logger, initialBackoffMs: 100 });
    let started = false;
    const starting = late.start().then(() => {
      started = true;
    });
    // Several list attempts fail against the closed port meanwhile.
    await waitFor('three failed list attempts', () => warnings() >= warningsBeforeLate + 3);
    expect(started).toBe(false);
    expect(late.synced()).toBe(false);
    await relay.open();
    await starting;
    expect(late.synced()).toBe(true);
    expect(late.list(namespace).map((p) => p.metadata.name)).toContain('late');
    // Stopped and started again (a bridge restarted in-process): resumes from
    // its resourceVersion, lists nothing, and still counts as synced.
    await late.stop();
    await late.start();
    expect(late.synced()).toBe(true);
    await late.stop();

    await relay.cut();
    const abandoned = createProxyInformer({
      kubeConfig: relayed,
      logger: logs.logger,
      initialBackoffMs: 100,
    });
    const warningsBeforeAbandoned = warnings();
    const pending = abandoned.start();
    await waitFor('a failed list attempt', () => warnings() > warningsBeforeAbandoned);
    await abandoned.stop();
    await expect(pending).rejects.toThrow(/stopped before it synced/);
    await relay.open();
  });
});
