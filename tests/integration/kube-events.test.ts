/**
 * The Event recorder on the real apiserver: events.k8s.io/v1 objects about
 * a Proxy, what `kubectl describe` shows, and aggregation (a repeat within
 * the window is a series count on the same Event, not a new object).
 */
import { EventsV1Api, type KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { Counter, Registry } from 'prom-client';
import { beforeAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createKubeActivities } from '../../activities/kube-activities.js';
import { createProviderActivities } from '../../activities/provider-activities.js';
import { buildProviders, parseProvidersConfig } from '../../providers/config.js';
import { createEventRecorder } from '../../kube/events.js';
import type { ProxyStatus } from '../../resources/proxy-schema.js';
import { createNamespace, createProxy, kubeConfig, proxyClient, kubectl } from '../helpers/kube.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';

/** The recorder's egress_kube_events_total, in a registry of its own. */
function eventsCounter(): { registry: Registry; counter: Counter<'type' | 'outcome'> } {
  const registry = new Registry();
  const counter = new Counter({
    name: 'egress_kube_events_total',
    help: 'test',
    labelNames: ['type', 'outcome'] as const,
    registers: [registry],
  });
  return { registry, counter };
}

describe('Proxy Events on the real apiserver', () => {
  let kc: KubeConfig;
  let ns: string;
  let uid: string;

  beforeAll(async () => {
    kc = kubeConfig();
    ns = await createNamespace(kc, 'events');
    const proxy = await createProxy(proxyClient(kc), ns, 'flappy', {
      mode: 'External',
      endpoint: { host: '203.0.113.7' },
    });
    uid = proxy.metadata.uid!;
  });

  const eventsOf = async (reason?: string) =>
    (await kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: ns })).items.filter(
      (e) => e.regarding?.uid === uid && (reason === undefined || e.reason === reason),
    );

  it('a flapping reason is one Event whose series counts the repeats; describe shows it', async () => {
    let clock = Date.parse('2026-12-01T00:00:00Z');
    const { registry, counter } = eventsCounter();
    const recorder = createEventRecorder({
      kubeConfig: kc,
      logger: pino({ level: 'silent' }),
      reportingInstance: 'events-test',
      counter,
      now: () => clock,
    });
    const regarding = { namespace: ns, name: 'flappy', uid };
    const unhealthy = {
      type: 'Warning',
      reason: 'BadStatus',
      action: 'HealthCheck',
      note: 'became unhealthy: 500',
    } as const;
    const healthy = {
      type: 'Normal',
      reason: 'ProbeSucceeded',
      action: 'HealthCheck',
      note: 'became healthy',
    } as const;
    const outcomes: string[] = [];
    for (let i = 0; i < 10; i++) {
      clock += 5_000;
      outcomes.push(await recorder.record(regarding, unhealthy));
      outcomes.push(await recorder.record(regarding, healthy));
    }
    expect(outcomes.slice(0, 4)).toEqual(['created', 'created', 'series', 'series']);
    expect(outcomes.slice(4).every((o) => o === 'counted')).toBe(true);
    await recorder.flush();

    const bad = await eventsOf('BadStatus');
    const good = await eventsOf('ProbeSucceeded');
    expect(bad).toHaveLength(1);
    expect(good).toHaveLength(1);
    expect(bad[0]).toMatchObject({
      type: 'Warning',
      action: 'HealthCheck',
      note: 'became unhealthy: 500',
      reportingController: 'crawl.example.com/egress-proxies',
      reportingInstance: 'events-test',
      regarding: { kind: 'Proxy', name: 'flappy', namespace: ns },
      series: { count: 10 },
    });
    expect(good[0]?.series?.count).toBe(10);

    // After the window without a repeat the key is forgotten: the next occurrence is a new Event.
    clock += 7 * 60_000;
    await recorder.flush();
    expect(await recorder.record(regarding, unhealthy)).toBe('created');
    expect(await eventsOf('BadStatus')).toHaveLength(2);
    await recorder.close();

    const described = await kubectl(['describe', 'px', 'flappy', '-n', ns]);
    expect(described).toMatch(/Events:/);
    expect(described).toMatch(/Warning\s+BadStatus/);
    expect(described).toMatch(/Normal\s+ProbeSucceeded/);
    expect(await registry.metrics()).toMatch(
      /egress_kube_events_total\{type="Warning",outcome="counted"\} 8/,
    );
  });

  it('a failure to write is counted and logged, never thrown', async () => {
    const recorder = createEventRecorder({
      kubeConfig: kc,
      logger: pino({ level: 'silent' }),
      reportingInstance: 'events-test',
    });
    await expect(
      recorder.record(
        { namespace: 'no-such-namespace-x9', name: 'p', uid: 'u' },
        { type: 'Normal', reason: 'Running', action: 'Provision', note: 'n' },
      ),
    ).resolves.toBe('failed');
    await recorder.close();
  });

  it('a status write takes the Events against the status the workflow sends, and reads it on a retry', async () => {
    const proxy = await createProxy(proxyClient(kc), ns, 'writes', {
      mode: 'External',
      endpoint: { host: '203.0.113.8' },
    });
    const ref = { namespace: ns, name: 'writes', uid: proxy.metadata.uid! };
    const { counter } = eventsCounter();
    const recorder = createEventRecorder({
      kubeConfig: kc,
      logger: pino({ level: 'silent' }),
      reportingInstance: 'writes-test',
      counter,
    });
    // Occurrences recorded so far (a repeat joins its Event's series, so objects alone do not tell).
    const recorded = async () =>
      (await counter.get()).values
        .filter((v) => v.labels.outcome !== 'failed')
        .reduce((n, v) => n + v.value, 0);
    const kube = createKubeActivities({
      kubeConfig: kc,
      logger: pino({ level: 'silent' }),
      events: recorder,
    });
    const healthy = (message: string): ProxyStatus => ({
      phase: 'Ready',
      conditions: [
        {
          type: 'Healthy',
          status: 'True',
          reason: 'ProbeSucceeded',
          message,
          lastTransitionTime: '2026-12-05T00:00:00Z',
        },
      ],
    });
    const healthEvents = async () =>
      (await kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: ns })).items.filter(
        (e) => e.regarding?.uid === ref.uid && e.action === 'HealthCheck',
      );

    // No status yet: the first write reads it (none) and says "became healthy".
    await expect(kube.writeProxyStatus({ ref, status: healthy('first') })).resolves.toBe('written');
    expect(await healthEvents()).toHaveLength(1);
    expect(await recorded()).toBe(1);
    // Healthy already, but the workflow says what it knows holds nothing healthy: no read, a second occurrence.
    await expect(
      kube.writeProxyStatus({ ref, status: healthy('second'), previous: { conditions: [] } }),
    ).resolves.toBe('written');
    expect(await recorded()).toBe(2);
    // The same on a retry: the last attempt may have landed, so it reads, finds Healthy, and says nothing.
    const retry = new MockActivityEnvironment({ attempt: 2 });
    await expect(
      retry.run(() => kube.writeProxyStatus({ ref, status: healthy('third'), previous: { conditions: [] } })),
    ).resolves.toBe('written');
    expect(await recorded()).toBe(2);
    // Without `previous` it reads too: nothing new.
    await expect(kube.writeProxyStatus({ ref, status: healthy('fourth') })).resolves.toBe('written');
    expect(await recorded()).toBe(2);
    // And a real change is still said.
    const unhealthy = healthy('fifth');
    unhealthy.conditions = [{ ...unhealthy.conditions![0]!, status: 'False', reason: 'ProbeFailed' }];
    await kube.writeProxyStatus({ ref, status: unhealthy });
    expect(await recorded()).toBe(3);
    expect((await healthEvents()).map((e) => e.note).sort()).toEqual([
      'became healthy: first',
      'became unhealthy: fifth',
    ]);
    await recorder.close();
  });

  it('a create records Provisioning only for an instance not running at once; Running says the rest', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ep-events-create-'));
    const logger = pino({ level: 'silent' });
    // Two neighbouring /24s, so the providers never hand out the same address.
    const [, second, third] = privateLoopbackRange().split('.').map(Number) as [number, number, number];
    const registry = buildProviders(
      parseProvidersConfig(
        `providers:\n` +
          `  - name: quick\n    type: local\n    local: { stateDir: ${dir}/quick, addressRange: 127.${second}.${third}.0/24 }\n` +
          `  - name: slow\n    type: local\n    local: { stateDir: ${dir}/slow, addressRange: 127.${second}.${third + 1}.0/24, startDelaySeconds: 600 }\n`,
        'test',
      ),
      { logger, stateRoot: dir, installation: 'events-test' },
    );
    const recorder = createEventRecorder({ kubeConfig: kc, logger, reportingInstance: 'create-test' });
    const activities = createProviderActivities({
      registry,
      kubeConfig: kc,
      installation: 'events-test',
      logger,
      events: recorder,
    });
    const eventsAbout = async (u: string) =>
      (await kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: ns })).items.filter(
        (e) => e.regarding?.uid === u,
      );
    try {
      const created: Record<string, { uid: string; seen?: unknown }> = {};
      for (const provider of ['quick', 'slow']) {
        const proxy = await createProxy(proxyClient(kc), ns, `create-${provider}`, {
          mode: 'Managed',
          provider,
          port: 20000,
        });
        const ref = { namespace: ns, name: proxy.metadata.name, uid: proxy.metadata.uid! };
        const result = await activities.createInstance({ ref, provider, placement: {}, port: 20000 });
        created[provider] = { uid: ref.uid, seen: result.seen };
      }
      expect(created.quick!.seen).toMatchObject({ found: true, state: 'Running' });
      expect(created.slow!.seen).toMatchObject({ found: true, state: 'Provisioning' });
      expect(await eventsAbout(created.quick!.uid)).toEqual([]);
      const slow = await eventsAbout(created.slow!.uid);
      expect(slow.map((e) => [e.type, e.reason, e.action])).toEqual([['Normal', 'Provisioning', 'Create']]);
      expect(slow[0]!.note).toMatch(/^instance local\/\S+ created by provider slow$/);
    } finally {
      await recorder.close();
      await registry.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
