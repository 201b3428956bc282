/**
 * The Proxy workflow's edges on the real control plane: skip-cleanup, quota
 * and permanent errors through the local provider's failure mode, an unknown
 * provider that is configured later, External proxies, adoption after a
 * lost run, cloud-init Secrets that never reach history, and the search
 * attributes operators filter on.
 */
import { CoreV1Api, EventsV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ANNOTATION_SKIP_CLEANUP,
  FINALIZER,
  LABEL_CLOUD_INIT,
  type Proxy,
} from '../../resources/proxy-schema.js';
import { desiredSpecOf } from '../../k8s-bridge/desired.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider } from '../../providers/local/provider.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { deletionRequestedSignal, healthChangedSignal, stateQuery } from '../../workflows/proxy/messages.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  getProxy,
  isProvisioned,
  editProxySpec,
  patchProxy,
  proxyCondition,
  removeFinalizers,
  setProxyStatus,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { throughProxy } from '../helpers/kube.js';
import { privateLoopbackRange, startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { metricValue } from '../helpers/observability.js';
import { activityCalls, eventually, instanceCreates, maybeRecord } from '../helpers/temporal.js';
import { startTarget } from '../helpers/net.js';

describe('Proxy workflow edges', () => {
  let cp: ControlPlane;
  let target: Awaited<ReturnType<typeof startTarget>>;

  beforeAll(async () => {
    cp = await startControlPlane({
      prefix: 'edges',
      providersYaml: (root, range) => `providers:
  - name: local
    type: local
    local: { stateDir: ${root}/local, addressRange: ${range} }
  - name: local-quota
    type: local
    local: { stateDir: ${root}/quota, addressRange: ${range}, failureMode: quota }
  - name: local-broken
    type: local
    local: { stateDir: ${root}/broken, addressRange: ${range}, failureMode: permanent }
`,
    });
    target = await startTarget('edge ok');
  });
  afterAll(async () => {
    await cp?.close();
    await target?.close();
  });

  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);
  const condition = proxyCondition;
  const provisioned = isProvisioned;
  const remove = (name: string) => deleteProxy(cp.api, cp.namespace, name);
  const remove2 = (namespace: string, name: string) => deleteProxy(cp.api, namespace, name);
  const gone = (name: string) => waitForProxyGone(cp.api, cp.namespace, name);
  const completed = (id: string) =>
    eventually(`${id} completed`, async () =>
      (await cp.client.workflow.getHandle(id).describe()).status.name === 'COMPLETED' ? true : undefined,
    );

  it('skip-cleanup releases the Proxy and leaves the instance running', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'skip', {
      mode: 'Managed',
      provider: 'local',
      port: 18180,
    });
    const p = await waitFor('skip', 'Running', provisioned);
    await patchProxy(cp.api, cp.namespace, 'skip', () => ({
      annotations: { [ANNOTATION_SKIP_CLEANUP]: 'true' },
    }));
    await remove('skip');
    await gone('skip');
    await completed(proxyWorkflowId({ namespace: cp.namespace, name: 'skip', uid: created.metadata.uid! }));
    const local = cp.registry.get('local')!;
    const instance = await local.get(p.status!.providerID!, AbortSignal.timeout(5_000));
    expect(instance.state).toBe('Running');
    expect(await throughProxy(cp.kc, p, target.port)).toBe('edge ok');
    await local.delete(p.status!.providerID!, AbortSignal.timeout(5_000));
  });

  it('QuotaExceeded is a condition and a slow retry, never Failed', async () => {
    await createProxy(cp.api, cp.namespace, 'quota', { mode: 'Managed', provider: 'local-quota' });
    const p = await waitFor(
      'quota',
      'QuotaExceeded condition',
      (x) => condition(x, 'QuotaExceeded')?.status === 'True',
    );
    expect(p.status?.phase).toBe('Pending');
    expect(condition(p, 'Provisioned')).toMatchObject({ status: 'False', reason: 'QuotaExceeded' });
    await remove('quota');
    await gone('quota');
  });

  it('a Permanent error latches Failed for the generation; a spec edit tries again', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'broken', {
      mode: 'Managed',
      provider: 'local-broken',
    });
    const failed = await waitFor('broken', 'Failed', (x) => x.status?.phase === 'Failed');
    expect(condition(failed, 'Provisioned')).toMatchObject({ status: 'False', reason: 'PermanentError' });
    expect(condition(failed, 'Provisioned')?.message).toContain('local-broken');
    const handle = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name: 'broken', uid: created.metadata.uid! }),
    );
    const first = await handle.query(stateQuery);
    expect(first.lastError).toMatchObject({ type: 'Permanent', generation: 1 });
    await editProxySpec(cp.api, cp.namespace, 'broken', (spec) => ({
      ...spec,
      attributes: { edited: 'yes' },
    }));
    const retried = await eventually('retried at generation 2', async () => {
      const v = await handle.query(stateQuery);
      return v.lastError?.generation === 2 ? v : undefined;
    });
    expect(retried.phase).toBe('Failed');
    expect((await getProxy(cp.api, cp.namespace, 'broken')).status?.observedGeneration).toBe(2);
    await remove('broken');
    await gone('broken');
  });

  it('a Proxy naming an unknown provider is Failed naming it, and recovers when the provider is configured later', async () => {
    await createProxy(cp.api, cp.namespace, 'later', {
      mode: 'Managed',
      provider: 'added-later',
      port: 18181,
    });
    const failed = await waitFor('later', 'Failed', (x) => x.status?.phase === 'Failed');
    expect(condition(failed, 'Provisioned')).toMatchObject({ reason: 'ProviderNotConfigured' });
    expect(condition(failed, 'Provisioned')?.message).toContain('added-later');
    cp.registry.add(
      createLocalProvider({
        name: 'added-later',
        config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
        stateDir: `${cp.stateRoot}/added-later`,
        logger: cp.logger,
      }),
    );
    const recovered = await waitFor('later', 'Running after the provider appeared', provisioned);
    expect(await throughProxy(cp.kc, recovered, target.port)).toBe('edge ok');
    await remove('later');
    await gone('later');
  });

  it('External proxies: tracked, no finalizer, no provider calls, workflow completes on delete', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'ext', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: 3128 },
    });
    const p = await waitFor('ext', 'status written', (x) => x.status?.phase !== undefined);
    expect(p.status?.phase).toBe('Pending');
    expect(condition(p, 'Provisioned')).toMatchObject({ status: 'True', reason: 'External' });
    expect(p.metadata.finalizers ?? []).not.toContain(FINALIZER);
    expect(p.status?.providerID).toBeUndefined();
    await remove('ext');
    await completed(proxyWorkflowId({ namespace: cp.namespace, name: 'ext', uid: created.metadata.uid! }));
  });

  it('adopts the existing instance when a lost run is restarted by another bridge (no duplicate), staying Ready', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'adopt', {
      mode: 'Managed',
      provider: 'local',
      port: 18182,
    });
    const ref = { namespace: cp.namespace, name: 'adopt', uid: created.metadata.uid! };
    const provisionedBefore = await waitFor('adopt', 'Running', provisioned);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    // The verdict the prober would send (no prober runs here).
    await handle.signal(healthChangedSignal, {
      ip: provisionedBefore.status!.ip!,
      healthy: true,
      latencyMillis: 7,
      checkedAt: new Date().toISOString(),
    });
    const before = await waitFor('adopt', 'Ready', (p) => condition(p, 'Ready')?.status === 'True');
    const firstRun = (await handle.describe()).runId;
    await handle.terminate('test: lose the run that created the instance');
    // A second bridge (a restart, or a second replica) re-signals everything at start.
    const second = cp.createBridge();
    await second.start();
    try {
      const view = await eventually('new run Running', async () => {
        const h = cp.client.workflow.getHandle(proxyWorkflowId(ref));
        if ((await h.describe()).runId === firstRun) return undefined;
        const v = await h.query(stateQuery);
        return v.instanceState === 'Running' && v.nextPollAt ? v : undefined;
      });
      expect(view.providerID).toBe(before.status?.providerID);
      // The new run took the address and verdict its status recorded, and the
      // first look confirmed them: still Ready with no new health report.
      expect(view.phase).toBe('Ready');
      expect(view.health).toMatchObject({ verdict: 'Healthy', latencyMillis: 7 });
      // Its first status write (a local activity after the look) has landed:
      // the Ready condition did not move. The run read nothing itself: the
      // bridge sent the recorded status with the start.
      await eventually('the new run wrote status', async () => {
        const events = (await cp.client.workflow.getHandle(proxyWorkflowId(ref)).fetchHistory()).events ?? [];
        const looked = events.findIndex((e) => e.activityTaskCompletedEventAttributes);
        return looked >= 0 && activityCalls(events.slice(looked), 'writeProxyStatus') >= 1
          ? events
          : undefined;
      }).then((events) => expect(activityCalls(events, 'readRecordedStatus')).toBe(0));
      const after = await getProxy(cp.api, cp.namespace, 'adopt');
      expect(condition(after, 'Ready')).toEqual(condition(before, 'Ready'));
      const mine = await cp.instancesOf(ref.uid);
      expect(mine).toHaveLength(1);
      expect(view.ip).toBe(after.status?.ip);
      expect(await throughProxy(cp.kc, after, target.port)).toBe('edge ok');
    } finally {
      await second.stop();
    }
    await remove('adopt');
    await gone('adopt');
  });

  it('a spec edited while no run was there: the restarted run replaces the instance it finds recorded', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'edited-between', {
      mode: 'Managed',
      provider: 'local',
      port: 18190,
    });
    const ref = { namespace: cp.namespace, name: 'edited-between', uid: created.metadata.uid! };
    const before = await waitFor('edited-between', 'Running', provisioned);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const firstRun = (await handle.describe()).runId;
    await handle.terminate('test: an operator ends the run');
    // The bridge sees the new generation and starts a fresh run with it.
    await editProxySpec(cp.api, cp.namespace, 'edited-between', (spec) => ({ ...spec, port: 18191 }));
    const after = await waitFor(
      'edited-between',
      'Running on the new port',
      (p) =>
        provisioned(p) && p.status?.observedGeneration === 2 && p.status.specHash !== before.status?.specHash,
    );
    expect((await handle.describe()).runId).not.toBe(firstRun);
    expect(await throughProxy(cp.kc, after, target.port)).toBe('edge ok');
    await expect(throughProxy(cp.kc, before, target.port)).rejects.toThrow();
    expect(await cp.instancesOf(ref.uid)).toHaveLength(1);
    const view = await handle.query(stateQuery);
    expect(view.instanceSpecHash).toBe(view.specHash);
    await remove('edited-between');
    await gone('edited-between');
    await completed(proxyWorkflowId(ref));
    // The replay guard's history of this path: a fresh run resumes from the
    // recorded status, replaces the instance, and is deleted.
    maybeRecord('proxy-resume-from-recorded-status', await handle.fetchHistory());
  });

  it('cloud-init from a labelled Secret: never in workflow history; rotating it replaces the instance', async () => {
    const core = cp.kc.makeApiClient(CoreV1Api);
    const sentinel = 'SENTINEL-cloud-init-5f0c9e';
    await core.createNamespacedSecret({
      namespace: cp.namespace,
      body: {
        metadata: { name: 'ci', labels: { [LABEL_CLOUD_INIT]: 'true' } },
        stringData: { userdata: `#cloud-config\npassword: ${sentinel}\n` },
      },
    });
    const inlineSentinel = 'SENTINEL-inline-8d21aa';
    const created = await createProxy(cp.api, cp.namespace, 'secret', {
      mode: 'Managed',
      provider: 'local',
      port: 18183,
      cloudInit: { secretRef: { name: 'ci' } },
    });
    const inline = await createProxy(cp.api, cp.namespace, 'inline', {
      mode: 'Managed',
      provider: 'local',
      port: 18184,
      cloudInit: { inline: `#cloud-config\ntoken: ${inlineSentinel}\n` },
    });
    const first = await waitFor('secret', 'Running', provisioned);
    await waitFor('inline', 'Running', provisioned);

    await core.patchNamespacedSecret(
      {
        namespace: cp.namespace,
        name: 'ci',
        body: { stringData: { userdata: `#cloud-config\npassword: ${sentinel}-rotated\n` } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const rotated = await waitFor(
      'secret',
      'replaced after rotation',
      (x) => provisioned(x) && x.status?.specHash !== first.status?.specHash,
    );
    expect(rotated.status?.observedGeneration).toBe(1);

    for (const [name, uid] of [
      ['secret', created.metadata.uid!],
      ['inline', inline.metadata.uid!],
    ] as const) {
      const history = await cp.client.workflow
        .getHandle(proxyWorkflowId({ namespace: cp.namespace, name, uid }))
        .fetchHistory();
      const text = JSON.stringify(history);
      expect(text.length).toBeGreaterThan(1_000);
      expect(text).not.toContain(sentinel);
      expect(text).not.toContain(inlineSentinel);
      expect(text).not.toContain(Buffer.from(sentinel).toString('base64').slice(0, 16));
    }
    // Nor in the Proxies' Events (there are some: running, replacing; a
    // local instance runs at once, so no Provisioning one).
    const events = await cp.kc.makeApiClient(EventsV1Api).listNamespacedEvent({ namespace: cp.namespace });
    const mine = events.items.filter((e) => ['secret', 'inline'].includes(e.regarding?.name ?? ''));
    expect(mine.map((e) => e.reason)).toEqual(expect.arrayContaining(['Running', 'Replacing']));
    const eventText = JSON.stringify(mine);
    expect(eventText).not.toContain(sentinel);
    expect(eventText).not.toContain(inlineSentinel);
    expect(eventText).not.toContain(Buffer.from(sentinel).toString('base64').slice(0, 16));
    await remove('secret');
    await remove('inline');
    await gone('secret');
    await gone('inline');
  });

  it('a Secret without the label is a CloudInitError condition, not a crash; labelling it recovers', async () => {
    const core = cp.kc.makeApiClient(CoreV1Api);
    await core.createNamespacedSecret({
      namespace: cp.namespace,
      body: { metadata: { name: 'unlabelled' }, stringData: { userdata: '#cloud-config\n' } },
    });
    await createProxy(cp.api, cp.namespace, 'unlabelled', {
      mode: 'Managed',
      provider: 'local',
      port: 18185,
      cloudInit: { secretRef: { name: 'unlabelled' } },
    });
    const p = await waitFor(
      'unlabelled',
      'CloudInitError',
      (x) => condition(x, 'CloudInitError')?.status === 'True',
    );
    expect(condition(p, 'CloudInitError')?.message).toContain('unlabelled');
    await core.patchNamespacedSecret(
      {
        namespace: cp.namespace,
        name: 'unlabelled',
        body: { metadata: { labels: { [LABEL_CLOUD_INIT]: 'true' } } },
      },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const ok = await waitFor('unlabelled', 'Running after labelling', provisioned);
    expect(condition(ok, 'CloudInitError')?.status).toBe('False');
    await remove('unlabelled');
    await gone('unlabelled');
  });

  it('a cloud-init Secret that goes away keeps the running instance (CloudInitError); its return with the same content changes nothing', async () => {
    const core = cp.kc.makeApiClient(CoreV1Api);
    const secret = {
      metadata: { name: 'ci-keep', labels: { [LABEL_CLOUD_INIT]: 'true' } },
      stringData: { userdata: '#cloud-config\nkeep: me\n' },
    };
    await core.createNamespacedSecret({ namespace: cp.namespace, body: secret });
    const keep = await createProxy(cp.api, cp.namespace, 'keep', {
      mode: 'Managed',
      provider: 'local',
      port: 18186,
      cloudInit: { secretRef: { name: 'ci-keep' } },
    });
    const running = await waitFor('keep', 'Running', provisioned);

    await core.deleteNamespacedSecret({ namespace: cp.namespace, name: 'ci-keep' });
    const flagged = await waitFor(
      'keep',
      'CloudInitError',
      (x) => condition(x, 'CloudInitError')?.status === 'True',
    );
    expect(condition(flagged, 'CloudInitError')?.message).toContain('ci-keep');
    // Several drift polls (1 s here) later, counted in the run's history, the
    // same instance still runs and still forwards.
    const handle = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name: 'keep', uid: keep.metadata.uid! }),
    );
    const polls = async () =>
      ((await handle.fetchHistory()).events ?? []).filter(
        (e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'getInstance',
      ).length;
    const pollsAtFlag = await polls();
    await eventually('three more drift polls', async () =>
      (await polls()) >= pollsAtFlag + 3 ? true : undefined,
    );
    const kept = await getProxy(cp.api, cp.namespace, 'keep');
    expect(provisioned(kept)).toBe(true);
    expect(kept.status?.providerID).toBe(running.status?.providerID);
    expect(kept.status?.specHash).toBe(running.status?.specHash);
    expect(await throughProxy(cp.kc, kept, target.port)).toBe('edge ok');

    await core.createNamespacedSecret({ namespace: cp.namespace, body: secret });
    const resolved = await waitFor(
      'keep',
      'CloudInitError cleared',
      (x) => condition(x, 'CloudInitError')?.status === 'False',
    );
    expect(resolved.status?.providerID).toBe(running.status?.providerID);
    expect(resolved.status?.specHash).toBe(running.status?.specHash);
    await remove('keep');
    await gone('keep');
    await completed(handle.workflowId);
    maybeRecord('proxy-cloud-init-secret-gone-kept', await handle.fetchHistory());
  });

  it('Proxies deleted while no bridge watched: the next bridge ends their workflows, and the Managed one deletes its instance', async () => {
    const managed = await createProxy(cp.api, cp.namespace, 'unwatched', {
      mode: 'Managed',
      provider: 'local',
      port: 18187,
    });
    const external = await createProxy(cp.api, cp.namespace, 'unwatched-ext', {
      mode: 'External',
      endpoint: { host: '127.0.0.1', port: 3128 },
    });
    const managedRef = { namespace: cp.namespace, name: 'unwatched', uid: managed.metadata.uid! };
    const externalRef = { namespace: cp.namespace, name: 'unwatched-ext', uid: external.metadata.uid! };
    await waitFor('unwatched', 'Running', provisioned);
    await waitFor('unwatched-ext', 'status written', (x) => x.status?.phase !== undefined);
    const instanceOf = () => cp.instancesOf(managedRef.uid);
    expect(await instanceOf()).toHaveLength(1);

    await cp.bridge.stop();
    // An operator strips the finalizer by hand, then both Proxies are deleted.
    await removeFinalizers(cp.api, cp.namespace, 'unwatched');
    await remove('unwatched');
    await remove('unwatched-ext');
    await gone('unwatched');
    await gone('unwatched-ext');

    // A new bridge process: its cache never saw either Proxy.
    const next = cp.createBridge();
    await next.start();
    try {
      await completed(proxyWorkflowId(managedRef));
      await completed(proxyWorkflowId(externalRef));
      maybeRecord(
        'proxy-deleted-unwatched',
        await cp.client.workflow.getHandle(proxyWorkflowId(managedRef)).fetchHistory(),
      );
      expect(await metricValue(next.registry, 'egress_bridge_orphaned_runs_total')).toBeGreaterThanOrEqual(2);
      expect(await instanceOf()).toHaveLength(0);
    } finally {
      await next.stop();
      await cp.bridge.start();
    }
  });

  it('the bridge looks for such workflows again on its own period, and stops looking when stopped', async () => {
    const periodic = cp.createBridge({ reconcilePeriodMs: 200 });
    await periodic.start();
    try {
      expect(await metricValue(periodic.registry, 'egress_bridge_reconcile_passes_total')).toBe(1);
      await eventually('three more sweeps', () =>
        metricValue(periodic.registry, 'egress_bridge_reconcile_passes_total').then(
          (n) => n >= 4 || undefined,
        ),
      );
    } finally {
      await periodic.stop();
    }
    const stoppedAt = await metricValue(periodic.registry, 'egress_bridge_reconcile_passes_total');
    // A witness on the same period: once it has swept three more times, the
    // stopped bridge would have swept at least twice had it kept going.
    const witness = cp.createBridge({ reconcilePeriodMs: 200 });
    await witness.start();
    try {
      await eventually('three witness sweeps', () =>
        metricValue(witness.registry, 'egress_bridge_reconcile_passes_total').then(
          (n) => n >= 4 || undefined,
        ),
      );
    } finally {
      await witness.stop();
    }
    expect(await metricValue(periodic.registry, 'egress_bridge_reconcile_passes_total')).toBe(stoppedAt);
  });

  it('a Proxy deleted after its run was terminated, its instance never recorded: the new run finds the instance by its UID mark and deletes it', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'orphan-run', {
      mode: 'Managed',
      provider: 'local',
      port: 18188,
    });
    const ref = { namespace: cp.namespace, name: 'orphan-run', uid: created.metadata.uid! };
    await waitFor('orphan-run', 'Running', provisioned);
    const mine = () => cp.instancesOf(ref.uid);
    expect(await mine()).toHaveLength(1);
    await cp.client.workflow.getHandle(proxyWorkflowId(ref)).terminate('test: an operator ends the run');
    // As if the create had succeeded at the provider but the run ended
    // before recording it: the status names no instance.
    const recorded = await getProxy(cp.api, cp.namespace, 'orphan-run');
    const { providerID, ...withoutID } = recorded.status ?? {};
    if (providerID === undefined) throw new Error('orphan-run: its status names no instance to remove');
    await setProxyStatus(cp.api, recorded, withoutID);
    // The deletion event starts a new run that never saw the instance's ID.
    await remove('orphan-run');
    await gone('orphan-run');
    await completed(proxyWorkflowId(ref));
    expect(await mine()).toHaveLength(0);
    // The new run's history (the handle follows the latest run).
    const history = await cp.client.workflow.getHandle(proxyWorkflowId(ref)).fetchHistory();
    const scheduled = (history.events ?? []).map(
      (e) => e.activityTaskScheduledEventAttributes?.activityType?.name,
    );
    expect(scheduled).toContain('findInstanceByUid');
    expect(instanceCreates(history.events ?? [])).toBe(0);
    maybeRecord('proxy-delete-finds-instance-by-uid', history);
  });

  it('a create that failed on a Secret read in the gap is tried again on its own once the Secret is back', async () => {
    // The bridge's view and the activity's read disagree: the bridge saw the
    // Secret (a spec without any cloud-init problem), the activity found none.
    // No bridge watches this namespace, so the test sends what one would
    // have, and no later signal can rescue the run: only its own retry can.
    const namespace = await createNamespace(cp.kc, 'edges-gap');
    const core = cp.kc.makeApiClient(CoreV1Api);
    const userdata = '#cloud-config\ngap: true\n';
    const created = await createProxy(cp.api, namespace, 'gap', {
      mode: 'Managed',
      provider: 'local',
      port: 18189,
      cloudInit: { secretRef: { name: 'gap-ci' } },
    });
    const seen = {
      labels: { [LABEL_CLOUD_INIT]: 'true' },
      data: { userdata: Buffer.from(userdata).toString('base64') },
    };
    const desired = desiredSpecOf(created, () => seen);
    expect(desired.cloudInitProblem).toBeUndefined();
    const ref = { namespace, name: 'gap', uid: created.metadata.uid! };
    const handle = await cp.client.workflow.start('proxyWorkflow', {
      workflowId: proxyWorkflowId(ref),
      taskQueue: cp.taskQueue,
      args: [{ ref, desired }],
    });
    const latched = await eventually('the CloudInitError latch', async () => {
      const v = await handle.query(stateQuery);
      return v.lastError?.type === 'CloudInitError' ? v : undefined;
    });
    expect(latched.lastError?.message).toContain('gap-ci');
    expect(latched.providerID).toBeUndefined();

    await core.createNamespacedSecret({
      namespace,
      body: {
        metadata: { name: 'gap-ci', labels: { [LABEL_CLOUD_INIT]: 'true' } },
        stringData: { userdata },
      },
    });
    const running = await eventually('Running without any new signal', async () => {
      const v = await handle.query(stateQuery);
      return v.instanceState === 'Running' ? v : undefined;
    });
    expect(running.instanceSpecHash).toBe(desired.specHash);
    await handle.signal(deletionRequestedSignal, { skipCleanup: false });
    await completed(proxyWorkflowId(ref));
    const left = await cp.instancesOf(ref.uid);
    expect(left).toHaveLength(0);
    const history = await handle.fetchHistory();
    // Started without the recorded status (as a starter other than the bridge would): the run read it.
    expect(activityCalls(history.events ?? [], 'readRecordedStatus')).toBe(1);
    maybeRecord('proxy-cloud-init-latch-retried', history);
    await remove2(namespace, 'gap');
  });

  it('search attributes find a Proxy by namespace, name, provider and phase', async () => {
    await createProxy(cp.api, cp.namespace, 'findme', { mode: 'Managed', provider: 'local', port: 18186 });
    await waitFor('findme', 'Running', provisioned);
    const query = `ProxyNamespace = '${cp.namespace}' AND ProxyName = 'findme' AND ProxyProvider = 'local' AND ProxyPhase = 'Provisioning' AND ExecutionStatus = 'Running'`;
    const found = await eventually('visible in the list query', async () => {
      const ids: string[] = [];
      for await (const wf of cp.client.workflow.list({ query })) ids.push(wf.workflowId);
      return ids.length > 0 ? ids : undefined;
    });
    expect(found).toHaveLength(1);
    expect(found[0]).toContain(`/${cp.namespace}/findme/`);
    await remove('findme');
    await gone('findme');
  });
});
