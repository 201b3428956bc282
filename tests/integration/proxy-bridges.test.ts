/**
 * Several bridges at once (replicas, or a restart overlapping the old
 * process) are harmless: three bridges watch the same namespace and signal
 * the same task queue through a create, a spec edit and a delete of a few
 * Proxies. Each Proxy still gets one workflow run, one instance at a time,
 * exactly one replacement for one edit, one finalizer, and a clean delete.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FINALIZER, type Proxy } from '../../resources/proxy-schema.js';
import type { Bridge } from '../../k8s-bridge/bridge.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import {
  createProxy,
  deleteProxy,
  editProxySpec,
  isProvisioned,
  waitForProxy,
  waitForProxyGone,
} from '../helpers/kube.js';
import { throughProxy } from '../helpers/kube.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { activityCalls, eventually, instanceCreates } from '../helpers/temporal.js';
import { startTarget } from '../helpers/net.js';
import { metricValue } from '../helpers/observability.js';

/** specChanged signals (signalWithStart) a bridge has sent, from its metrics. */
const specSignals = (b: Bridge) =>
  metricValue(b.registry, 'egress_bridge_signals_total', { signal: 'specChanged' });

describe('several bridges at once', () => {
  let cp: ControlPlane;
  let target: Awaited<ReturnType<typeof startTarget>>;
  /** In addition to the control plane's own bridge. */
  const extra: Bridge[] = [];

  beforeAll(async () => {
    cp = await startControlPlane({ prefix: 'bridges' });
    target = await startTarget('bridges ok');
    for (let i = 0; i < 2; i++) {
      const bridge = cp.createBridge();
      await bridge.start();
      extra.push(bridge);
    }
  });
  afterAll(async () => {
    await Promise.all(extra.map((b) => b.stop()));
    await cp?.close();
    await target?.close();
  });

  const bridges = () => [cp.bridge, ...extra];
  const allIdle = () => Promise.all(bridges().map((b) => b.idle()));
  const waitFor = (name: string, what: string, test: (p: Proxy) => boolean) =>
    waitForProxy(cp.api, cp.namespace, name, what, test);
  const mine = (uid: string) => cp.instancesOf(uid);
  const events = async (name: string, uid: string) =>
    (
      await cp.client.workflow
        .getHandle(proxyWorkflowId({ namespace: cp.namespace, name, uid }))
        .fetchHistory()
    ).events ?? [];
  const activities = async (name: string, uid: string, type: string) =>
    activityCalls(await events(name, uid), type);
  const creates = async (name: string, uid: string) => instanceCreates(await events(name, uid));

  it('create, edit (one replacement) and delete of several Proxies with three bridges', async () => {
    const names = ['multi-a', 'multi-b', 'multi-c'];
    const port = (i: number, generation: 1 | 2) => 18480 + i * 2 + generation - 1;
    const uids = new Map<string, string>();
    await Promise.all(
      names.map(async (name, i) => {
        const p = await createProxy(cp.api, cp.namespace, name, {
          mode: 'Managed',
          provider: 'local',
          port: port(i, 1),
        });
        uids.set(name, p.metadata.uid!);
      }),
    );
    const uid = (name: string) => uids.get(name)!;

    // Create: one Running instance per Proxy, one finalizer, one run that every bridge signalled.
    const running = await Promise.all(names.map((name) => waitFor(name, 'Running', isProvisioned)));
    await allIdle();
    const runIds = new Map<string, string>();
    for (const [i, name] of names.entries()) {
      const p = running[i]!;
      expect(p.metadata.finalizers?.filter((f) => f === FINALIZER)).toHaveLength(1);
      expect((await mine(uid(name))).map((x) => x.id)).toEqual([p.status!.providerID]);
      expect(await throughProxy(cp.kc, p, target.port)).toBe('bridges ok');
      const history = await events(name, uid(name));
      expect(history.filter((e) => e.workflowExecutionStartedEventAttributes)).toHaveLength(1);
      // The status is written inside the workflow task that created the
      // instance (local activities): its history catches up when the task completes.
      await eventually('the create in history', async () =>
        (await creates(name, uid(name))) > 0 ? true : undefined,
      );
      expect(await creates(name, uid(name))).toBe(1);
      const d = await cp.client.workflow
        .getHandle(proxyWorkflowId({ namespace: cp.namespace, name, uid: uid(name) }))
        .describe();
      runIds.set(name, d.runId);
    }
    // Every bridge took part: each one signalled (or started) every Proxy's workflow.
    for (const b of bridges()) expect(await specSignals(b)).toBeGreaterThanOrEqual(names.length);

    // Edit: a new port on each; exactly one replacement each, whoever signalled.
    await Promise.all(
      names.map((name, i) =>
        editProxySpec(cp.api, cp.namespace, name, (spec) => ({ ...spec, port: port(i, 2) })),
      ),
    );
    const replaced = await Promise.all(
      names.map((name, i) =>
        waitFor(
          name,
          'replacement Running',
          (p) =>
            isProvisioned(p) &&
            p.status?.observedGeneration === 2 &&
            p.status.specHash !== running[i]!.status?.specHash,
        ),
      ),
    );
    await allIdle();
    for (const [i, name] of names.entries()) {
      const p = replaced[i]!;
      expect((await mine(uid(name))).map((x) => x.id)).toEqual([p.status!.providerID]);
      expect(await throughProxy(cp.kc, p, target.port)).toBe('bridges ok');
      // The replacement's create and status write are local activities of one
      // workflow task: the status can be read before that task is in history.
      await eventually('the replacement create in history', async () =>
        (await creates(name, uid(name))) > 1 ? true : undefined,
      );
      expect(await creates(name, uid(name))).toBe(2);
      expect(await activities(name, uid(name), 'deleteInstance')).toBe(1);
      const specSignals = (await events(name, uid(name))).filter(
        (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'specChanged',
      );
      // Several bridges did send the same specs (the workflow deduplicated them).
      expect(specSignals.length).toBeGreaterThan(2);
    }

    // Delete: finalizer removed (object gone), instance gone, the one run completed and not restarted.
    await Promise.all(names.map((name) => deleteProxy(cp.api, cp.namespace, name)));
    await Promise.all(names.map((name) => waitForProxyGone(cp.api, cp.namespace, name)));
    await allIdle();
    for (const name of names) {
      expect(await mine(uid(name))).toHaveLength(0);
      const handle = cp.client.workflow.getHandle(
        proxyWorkflowId({ namespace: cp.namespace, name, uid: uid(name) }),
      );
      const d = await eventually(`${name}: workflow completed`, async () => {
        const x = await handle.describe();
        return x.status.name === 'COMPLETED' ? x : undefined;
      });
      expect(d.runId).toBe(runIds.get(name));
      expect(await activities(name, uid(name), 'removeProxyFinalizer')).toBe(1);
    }
    // Late events from the other bridges do not start a new run. A marker
    // created after the deletions is seen by every bridge after every
    // deletion event (a watch delivers in order): once each has passed it on,
    // each has handled the late events too.
    const sentBefore = await Promise.all(bridges().map(specSignals));
    await createProxy(cp.api, cp.namespace, 'multi-marker', {
      mode: 'External',
      endpoint: { host: 'marker.example.net', port: 3128 },
    });
    await eventually('every bridge passed the marker on', () =>
      Promise.all(bridges().map(specSignals)).then(
        (sent) => sent.every((n, i) => n > sentBefore[i]!) || undefined,
      ),
    );
    await allIdle();
    for (const name of names) {
      const d = await cp.client.workflow
        .getHandle(proxyWorkflowId({ namespace: cp.namespace, name, uid: uid(name) }))
        .describe();
      expect(d.runId).toBe(runIds.get(name));
      expect(d.status.name).toBe('COMPLETED');
    }
  });
});
