/**
 * The Proxy lifecycle end to end: real apiserver, real Temporal dev server,
 * real worker and bridge, the real `local` provider whose instances are real
 * forward proxies on the loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FINALIZER, type Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { healthChangedSignal, stateQuery } from '../../workflows/proxy/messages.js';
import {
  createProxy,
  deleteProxy,
  generatedCredentials,
  editProxySpec,
  getProxy,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { activityCalls, eventually, localActivityResults, maybeRecord } from '../helpers/temporal.js';
import type { RunStart } from '../../activities/types.js';
import { getThroughConnect, getThroughProxy, startTarget } from '../helpers/net.js';

describe('Proxy lifecycle with the local provider', () => {
  let cp: ControlPlane;
  let target: Awaited<ReturnType<typeof startTarget>>;

  beforeAll(async () => {
    cp = await startControlPlane({ prefix: 'lifecycle' });
    target = await startTarget('egress ok');
  });
  afterAll(async () => {
    await cp?.close();
    await target?.close();
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);
  const gone = (name: string) => waitForProxyGone(cp.api, cp.namespace, name);
  const remove = (name: string) => deleteProxy(cp.api, cp.namespace, name);

  it('creates a real forward proxy, Ready on a healthy verdict, replaces it on a spec change, and cleans up on delete', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-main', {
      mode: 'Managed',
      provider: 'local',
      port: 18080,
    });
    const ref = { namespace: cp.namespace, name: 'px-main', uid: created.metadata.uid! };

    const running = await waitFor('px-main', 'Provisioned=True with an IP', (p) =>
      Boolean(
        p.status?.ip && p.status.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True'),
      ),
    );
    expect(running.metadata.finalizers).toContain(FINALIZER);
    // No prober yet: Running but not known healthy stays Provisioning, Healthy Unknown (the seed's rule).
    expect(running.status?.phase).toBe('Provisioning');
    expect(running.status?.conditions?.find((c) => c.type === 'Healthy')?.status).toBe('Unknown');
    expect(running.status?.observedGeneration).toBe(1);
    const ip = running.status!.ip!;
    expect(ip).toMatch(/^127\./);
    // The bridge made the Proxy's credentials, owned by it; the proxy asks for them.
    const { authorization, secret } = await generatedCredentials(cp.kc, cp.namespace, 'px-main');
    expect(secret.type).toBe('kubernetes.io/basic-auth');
    expect(secret.metadata?.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'Proxy', name: 'px-main', uid: ref.uid, controller: true }),
    ]);
    await expect(getThroughConnect(ip, 18080, target.port)).rejects.toThrow(/407/);
    expect(await getThroughProxy(ip, 18080, target.port)).toMatchObject({ status: 407 });
    expect(await getThroughConnect(ip, 18080, target.port, 5_000, '127.0.0.1', authorization)).toBe(
      'egress ok',
    );
    expect(await getThroughProxy(ip, 18080, target.port, authorization)).toEqual({
      status: 200,
      body: 'egress ok',
    });

    // The query answers from the workflow itself.
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const view = await handle.query(stateQuery);
    expect(view).toMatchObject({ providerID: running.status!.providerID, ip, instanceState: 'Running' });

    // A healthy verdict for its address (what the prober sends) makes it Ready.
    await handle.signal(healthChangedSignal, {
      ip,
      healthy: true,
      latencyMillis: 5,
      checkedAt: new Date().toISOString(),
    });
    const ready = await waitFor('px-main', 'Ready', (p) => p.status?.phase === 'Ready');
    expect(ready.status?.latencyMillis).toBe(5);

    // Spec change: the instance is replaced under the same name, on the new port.
    const firstHash = running.status!.specHash;
    await editProxySpec(cp.api, cp.namespace, 'px-main', (spec) => ({ ...spec, port: 18081 }));
    const replaced = await waitFor(
      'px-main',
      'replacement Running on the new port',
      (p) =>
        p.status?.observedGeneration === 2 &&
        p.status.specHash !== firstHash &&
        p.status.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True') === true,
    );
    expect(replaced.status?.providerID).toBe(running.status?.providerID);
    const newIp = replaced.status!.ip!;
    expect(await getThroughConnect(newIp, 18081, target.port, 5_000, '127.0.0.1', authorization)).toBe(
      'egress ok',
    );
    await expect(getThroughConnect(ip, 18080, target.port, 1_000)).rejects.toThrow();
    const instances = await cp.registry.get('local')!.listByTag(AbortSignal.timeout(5_000));
    expect(instances.filter((i) => i.uid === ref.uid)).toHaveLength(1);

    // Delete: instance gone, finalizer removed (object gone), workflow completed.
    await remove('px-main');
    await gone('px-main');
    await expect(
      cp.registry.get('local')!.get(replaced.status!.providerID!, AbortSignal.timeout(5_000)),
    ).rejects.toMatchObject({
      errorClass: 'NotFound',
    });
    await expect(getThroughConnect(newIp, 18081, target.port, 1_000)).rejects.toThrow();
    const description = await eventually('workflow completed', async () => {
      const d = await handle.describe();
      return d.status.name === 'COMPLETED' ? d : undefined;
    });
    expect(description.status.name).toBe('COMPLETED');
    // The replay guard's history of this path.
    maybeRecord('proxy-create-ready-replace-delete', await handle.fetchHistory());
  });

  it('a quick provider provisions in one workflow task and one local activity: the timing, the create and the status it leaves', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-quick', {
      mode: 'Managed',
      provider: 'local',
      port: 18083,
    });
    const ref = { namespace: cp.namespace, name: 'px-quick', uid: created.metadata.uid! };
    const running = await waitFor('px-quick', 'Provisioned=True with an IP', (p) =>
      Boolean(
        p.status?.ip && p.status.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True'),
      ),
    );
    // The status is written inside the workflow task (a local activity): the
    // history has the task once it completes, with the timer it starts.
    const events = await eventually('the provisioning task in history', async () => {
      const all = (await cp.client.workflow.getHandle(proxyWorkflowId(ref)).fetchHistory()).events ?? [];
      return all.some((e) => e.timerStartedEventAttributes) ? all : undefined;
    });
    const firstTimer = events.findIndex((e) => e.timerStartedEventAttributes);
    const provisioning = events.slice(0, firstTimer);
    expect(provisioning.filter((e) => e.workflowTaskCompletedEventAttributes)).toHaveLength(1);
    expect(provisioning.filter((e) => e.activityTaskScheduledEventAttributes)).toHaveLength(0);
    // The run's first local activity brought the timing and made the instance.
    expect(activityCalls(provisioning, 'createInstance')).toBe(0);
    const starts = localActivityResults(provisioning, 'proxyTiming') as RunStart[];
    expect(starts).toHaveLength(1);
    expect(starts[0]).toMatchObject({
      quickCreate: true,
      created: {
        id: running.status?.providerID,
        seen: { found: true, state: 'Running', ip: running.status?.ip },
      },
    });
    // The same local activity wrote the status the create left, after the
    // create (nothing showed "Pending" for the moment it took), and the run,
    // finding it written, wrote nothing more.
    expect(starts[0]!.reported).toMatchObject({
      outcome: 'written',
      status: { phase: 'Provisioning', providerID: running.status?.providerID, ip: running.status?.ip },
    });
    expect(activityCalls(provisioning, 'writeProxyStatus')).toBe(0);
    expect(running.status?.conditions).toEqual(starts[0]!.reported!.status.conditions);
    expect(running.status?.providerID).toBeTruthy();
    await remove('px-quick');
    await gone('px-quick');
  });

  it('a Running proxy is polled every drift poll but its status is written only when it changes', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-quiet', {
      mode: 'Managed',
      provider: 'local',
      port: 18082,
    });
    const ref = { namespace: cp.namespace, name: 'px-quiet', uid: created.metadata.uid! };
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    /** Provider polls and status writes so far, from the workflow's history. */
    const counts = async () => {
      const events = (await handle.fetchHistory()).events ?? [];
      const scheduled = (type: string) =>
        events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type).length;
      // A fresh run's first write rides with its create, in its first local activity.
      const atStart = (localActivityResults(events, 'proxyTiming') as RunStart[]).filter((r) => r.reported);
      return {
        gets: scheduled('getInstance'),
        writes: activityCalls(events, 'writeProxyStatus') + atStart.length,
      };
    };
    await waitFor('px-quiet', 'Provisioned=True with an IP', (p) =>
      Boolean(
        p.status?.ip && p.status.conditions?.some((c) => c.type === 'Provisioned' && c.status === 'True'),
      ),
    );
    // Settled: the workflow is waiting for its next drift poll (FAST_TIMING: every second).
    const before = await eventually('waiting for the next drift poll', async () => {
      const v = await handle.query(stateQuery);
      return v.instanceState === 'Running' && v.nextPollAt ? v : undefined;
    });
    const settled = await getProxy(cp.api, cp.namespace, 'px-quiet');
    const first = await counts();
    expect(first.writes).toBeGreaterThan(0);

    // Wait for three more drift polls in the history (not for a time): a
    // status write, had there been one, would be recorded before them.
    const later = await eventually('three more drift polls', async () => {
      const c = await counts();
      return c.gets - first.gets >= 3 ? c : undefined;
    });
    // (nextPollAt is unset while a poll runs; the next wait sets it again, later than before.)
    const after = await eventually('the next drift poll scheduled', async () => {
      const v = await handle.query(stateQuery);
      return v.nextPollAt ? v : undefined;
    });
    // Later than before; not necessarily by 3 s: a look woken early (a recheck
    // brought forward) is one of the three gets too (seen once at load 4-6: 2.55 s).
    expect(Date.parse(after.nextPollAt!)).toBeGreaterThan(Date.parse(before.nextPollAt!));
    // ...and wrote nothing: no write attempted, the object exactly as it was.
    expect(later.writes).toBe(first.writes);
    const now = await getProxy(cp.api, cp.namespace, 'px-quiet');
    expect(now.metadata.resourceVersion).toBe(settled.metadata.resourceVersion);
    expect(now.status).toEqual(settled.status);

    await remove('px-quiet');
    await gone('px-quiet');
    await eventually('workflow completed', async () =>
      (await handle.describe()).status.name === 'COMPLETED' ? true : undefined,
    );
    // The replay guard's history of this path: status writes (local
    // activities) only on change across steady polls.
    maybeRecord('proxy-status-written-only-on-change', await handle.fetchHistory());
  });
});
