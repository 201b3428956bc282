/**
 * The prober with the real control plane: a Managed Proxy on the `local`
 * provider (a real forward proxy on the loopback), the prober watching the
 * real apiserver and signalling the real Proxy workflow, which writes status.
 * Then a prober restart (no flap), and the signaller across a Temporal outage
 * (a relay we cut).
 */
import { Client, Connection } from '@temporalio/client';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import type { Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { stateQuery } from '../../workflows/proxy/messages.js';
import type { HealthReport, ProxyRef } from '../../workflows/proxy/types.js';
import { createProxyProbeTargets } from '../../prober/kube-targets.js';
import type { ResilientInformer } from '../../kube/informer.js';
import { createProxyInformer } from '../../kube/proxy-informer.js';
import { cachedCredentials, createCredentialsSecretInformer } from '../../kube/proxy-credentials.js';
import type { V1Secret } from '@kubernetes/client-node';
import { createProber, type ProbeEvent, type Prober } from '../../prober/prober.js';
import { createTemporalHealthSignaller, type HealthSignaller } from '../../prober/signaller.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { createProxy, getProxy } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import { startProbeTarget, startTcpRelay, type ProbeTarget } from '../helpers/prober-fixtures.js';

describe('prober with the control plane', () => {
  let cp: ControlPlane;
  let target: ProbeTarget;
  let prober: Prober | undefined;
  let informer: ResilientInformer<Proxy> | undefined;
  /** The Proxies' generated credentials, as the api process reads them. */
  let credentialSecrets: ResilientInformer<V1Secret> | undefined;
  let signaller: HealthSignaller | undefined;
  let ref: ProxyRef;
  let ip: string;

  beforeAll(async () => {
    cp = await startControlPlane({ prefix: 'prober' });
    target = await startProbeTarget();
  });
  afterAll(async () => {
    await prober?.stop();
    await informer?.stop();
    await credentialSecrets?.stop();
    await signaller?.stop();
    await cp?.close();
    await target?.close();
  });

  const waitFor = (what: string, test: (p: Proxy) => boolean, timeoutMs = 60_000) =>
    eventually(
      `px-probed: ${what}`,
      async () => {
        const p = await getProxy(cp.api, cp.namespace, 'px-probed');
        return test(p) ? p : undefined;
      },
      { timeoutMs, intervalMs: 200 },
    );
  const waitForCondition = (name: string, test: (p: Proxy) => boolean) =>
    eventually(
      `${name}: condition`,
      async () => {
        const p = await getProxy(cp.api, cp.namespace, name);
        return test(p) ? p : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  const healthy = (p: Proxy) => p.status?.conditions?.find((c) => c.type === 'Healthy');
  const healthSignals = async (workflowId: string) =>
    (await cp.client.workflow.getHandle(workflowId).fetchHistory()).events?.filter(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'healthChanged',
    ) ?? [];

  /** The reason of the health report a signal's payload carries (JSON). */
  const reasonOf = (data: Uint8Array | null | undefined): string | undefined =>
    data ? (JSON.parse(Buffer.from(data).toString('utf8')) as HealthReport).reason : undefined;

  const signallerIdle = () =>
    eventually('signals delivered', () =>
      Promise.resolve(signaller!.stats().pending + signaller!.stats().inFlight === 0 ? true : undefined),
    );

  it('a Managed proxy becomes Ready when a probe really egresses through it, Unhealthy when the probe URL fails, Ready again', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-probed', {
      mode: 'Managed',
      provider: 'local',
      port: 18090,
      healthCheck: {
        probeURL: target.url,
        intervalSeconds: 1,
        timeoutSeconds: 2,
        // Above 1 both ways, so the workflow only ever hears of a verdict reached over two probes.
        successThreshold: 2,
        failureThreshold: 2,
      },
    });
    ref = { namespace: cp.namespace, name: 'px-probed', uid: created.metadata.uid! };

    signaller = createTemporalHealthSignaller(cp.client, { logger: cp.logger });
    informer = createProxyInformer({ kubeConfig: cp.kc, logger: cp.logger, namespace: cp.namespace });
    await informer.start();
    credentialSecrets = createCredentialsSecretInformer({
      kubeConfig: cp.kc,
      logger: cp.logger,
      scopes: [cp.namespace],
    });
    await credentialSecrets.start();
    prober = createProber({
      targets: createProxyProbeTargets(informer),
      credentials: cachedCredentials(credentialSecrets),
      signal: signaller.signal,
      logger: cp.logger,
      registry: new Registry(),
    });
    await prober.start();

    const ready = await waitFor(
      'Ready, Healthy=True',
      (p) => p.status?.phase === 'Ready' && healthy(p)?.status === 'True',
    );
    ip = ready.status!.ip!;
    expect(ip).toMatch(/^127\./);
    expect(ready.status?.latencyMillis).toEqual(expect.any(Number));
    expect(ready.status?.lastHealthReportTime).toEqual(expect.any(String));
    expect(target.requests.length).toBeGreaterThan(0);

    target.status = 500;
    const down = await waitFor(
      'Unhealthy, Healthy=False',
      (p) => p.status?.phase === 'Unhealthy' && healthy(p)?.status === 'False',
    );
    expect(healthy(down)).toMatchObject({ reason: 'BadStatus' });
    expect(healthy(down)?.message).toContain('500');
    expect(down.status?.latencyMillis).toBeUndefined();

    target.status = 204;
    await waitFor('Ready again', (p) => p.status?.phase === 'Ready' && healthy(p)?.status === 'True');

    // Let it run steady for a few more probes, then count: one signal per transition reached the workflow.
    const probesNow = target.requests.length;
    await eventually('three more probes', () =>
      Promise.resolve(target.requests.length >= probesNow + 3 ? true : undefined),
    );
    await prober.stop();
    await signallerIdle();
    // Exactly the three transitions: a latency update (rate-limited to one per ten minutes from the last
    // report) or a resync (5 min of disagreement) would be a bug in a run this short.
    expect(prober.stats().signals).toEqual({ transition: 3, latency: 0, resync: 0, reason: 0 });
    expect(signaller.stats()).toMatchObject({ delivered: 3, dropped: 0 });
    expect(await healthSignals(proxyWorkflowId(ref))).toHaveLength(3);
  });

  it('a restarted prober on a Ready proxy keeps its verdict: probes succeed and the workflow hears nothing', async () => {
    expect(ip).toBeDefined();
    const workflowId = proxyWorkflowId(ref);
    await waitFor('Ready, Healthy=True', (p) => p.status?.phase === 'Ready' && healthy(p)?.status === 'True');
    const before = (await healthSignals(workflowId)).length;
    const probes: ProbeEvent[] = [];
    // A new prober on the same informer, as after an api process restart: seeded from the Healthy condition.
    prober = createProber({
      targets: createProxyProbeTargets(informer!),
      credentials: cachedCredentials(credentialSecrets!),
      signal: signaller!.signal,
      logger: cp.logger,
      registry: new Registry(),
      onProbe: (e) => probes.push(e),
    });
    await prober.start();
    expect(prober.verdict(`${cp.namespace}/px-probed`)).toBe('Healthy');
    // More successes than successThreshold (2): a verdict wrongly restarted from Unknown would flip here.
    await eventually('four probes', () => Promise.resolve(probes.length >= 4 ? true : undefined));
    await prober.stop();
    await signallerIdle();
    expect(probes.every((e) => e.result.ok)).toBe(true);
    expect(prober.stats().signals).toEqual({ transition: 0, latency: 0, resync: 0, reason: 0 });
    expect(await healthSignals(workflowId)).toHaveLength(before);
    expect(healthy(await getProxy(cp.api, cp.namespace, 'px-probed'))?.status).toBe('True');
  });

  it('Temporal unreachable: the latest report per proxy is delivered when it is back, not a backlog', async () => {
    expect(ip).toBeDefined();
    const relay = await startTcpRelay(inject('temporalAddress'));
    const connection = await Connection.connect({ address: relay.address });
    const client = new Client({ connection, namespace: inject('temporalNamespace') });
    const outage = createTemporalHealthSignaller(client, {
      callTimeoutMs: 1_000,
      initialBackoffMs: 200,
      maxBackoffMs: 1_000,
    });
    const workflowId = proxyWorkflowId(ref);
    try {
      const before = (await healthSignals(workflowId)).length;
      relay.cut();
      const report = (reason: string): HealthReport => ({
        ip,
        healthy: false,
        checkedAt: new Date().toISOString(),
        reason,
        message: `report ${reason}`,
      });
      outage.signal(ref, report('Stale1'));
      outage.signal(ref, report('Stale2'));
      outage.signal(ref, report('Latest'));
      await eventually('a failed attempt', () =>
        Promise.resolve(outage.stats().failedAttempts > 0 ? true : undefined),
      );
      // One report left, waiting or on its next attempt: once the 200 ms pause is over it is in flight
      // against the cut relay, so it is counted in one field or the other depending on when we look.
      const during = outage.stats();
      expect(during).toMatchObject({ delivered: 0 });
      expect(during.pending + during.inFlight).toBe(1);
      expect(during.superseded).toBeGreaterThanOrEqual(1);
      expect(await healthSignals(workflowId)).toHaveLength(before);

      relay.restore();
      await eventually(
        'delivered',
        () =>
          Promise.resolve(outage.stats().delivered === 1 && outage.stats().pending === 0 ? true : undefined),
        {
          timeoutMs: 60_000,
        },
      );
      // Only the latest report lands: no backlog of the stale ones. (At
      // least once: an attempt whose deadline ran out as the relay came back
      // may also have reached the server, so the same report can land twice;
      // the workflow takes a repeat as nothing new.)
      const reasons = (await healthSignals(workflowId))
        .slice(before)
        .map((e) => reasonOf(e.workflowExecutionSignaledEventAttributes?.input?.payloads?.[0]?.data));
      expect(reasons.length).toBeGreaterThanOrEqual(1);
      expect(new Set(reasons)).toEqual(new Set(['Latest']));
      const view = await cp.client.workflow.getHandle(workflowId).query(stateQuery);
      expect(view.health).toMatchObject({ verdict: 'Unhealthy', reason: 'Latest' });
      await eventually('status shows the latest report', async () => {
        const p = await getProxy(cp.api, cp.namespace, 'px-probed');
        return p.status?.conditions?.find((c) => c.type === 'Healthy' && c.reason === 'Latest');
      });

      // A proxy without a workflow: the report is dropped, not retried forever.
      outage.signal({ ...ref, uid: 'no-such-uid' }, report('Nobody'));
      await eventually('dropped', () => Promise.resolve(outage.stats().dropped === 1 ? true : undefined));
      expect(outage.stats().pending).toBe(0);
    } finally {
      await outage.stop();
      await connection.close();
      await relay.close();
    }
  });

  it('a report for a Proxy whose workflow is not running yet waits for the workflow and lands when it starts; dropped once the Proxy is gone', async () => {
    // No bridge: the Proxy exists, its workflow does not (the prober saw it first).
    await cp.bridge.stop();
    const created = await createProxy(cp.api, cp.namespace, 'px-early', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: 1 },
      healthCheck: { probeURL: target.url, intervalSeconds: 300 },
    });
    const early: ProxyRef = { namespace: cp.namespace, name: 'px-early', uid: created.metadata.uid! };
    let proxyThere = true;
    const waiting = createTemporalHealthSignaller(cp.client, {
      stillWanted: (r, rep) => proxyThere && r.uid === early.uid && rep.ip === '127.0.0.1',
      notFoundInitialBackoffMs: 50,
      notFoundMaxBackoffMs: 500,
    });
    const later = cp.createBridge();
    try {
      waiting.signal(early, { ip: '127.0.0.1', healthy: true, checkedAt: new Date().toISOString() });
      await eventually('the report held for the workflow', () =>
        Promise.resolve(waiting.stats().notFoundRetries >= 2 ? true : undefined),
      );
      expect(waiting.stats()).toMatchObject({ delivered: 0, dropped: 0, waitingForWorkflow: 1 });

      // The bridge starts the workflow: the held report reaches it, and the status shows it.
      await later.start();
      await eventually(
        'delivered',
        () => Promise.resolve(waiting.stats().delivered === 1 ? true : undefined),
        {
          timeoutMs: 30_000,
        },
      );
      await waitForCondition('px-early', (p) => healthy(p)?.status === 'True');
      expect(waiting.stats()).toMatchObject({ dropped: 0, waitingForWorkflow: 0 });

      // A report for a Proxy that is gone is dropped at its next try, not held forever.
      proxyThere = false;
      waiting.signal({ ...early, uid: 'gone-uid' }, { ip: '127.0.0.1', healthy: true, checkedAt: '' });
      await eventually('dropped', () => Promise.resolve(waiting.stats().dropped === 1 ? true : undefined));
      expect(waiting.stats().waitingForWorkflow).toBe(0);
    } finally {
      await waiting.stop();
      await later.stop();
    }
  });
});
