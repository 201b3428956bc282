/**
 * Drift found per provider (issue 10), on the real servers: the drift sweep
 * Schedule notices an instance deleted behind the workflow's back (by the
 * provider, or its record removed by hand from the local provider's state
 * directory) and only that Proxy's workflow is signalled; with the sweep
 * off, the safety poll notices it; a health signal only writes status (no
 * provider look, no new timer); and a new run takes its timing from its
 * worker.
 */
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { temporal } from '@temporalio/proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import { parseLocalProviderId } from '../../providers/local/provider.js';
import { instanceRecordPath } from '../../providers/local/store.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { healthChangedSignal, stateQuery } from '../../workflows/proxy/messages.js';
import type { ProxyRef } from '../../workflows/proxy/types.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { createProxy, deleteProxy, isProvisioned, waitForProxy, waitForProxyGone } from '../helpers/kube.js';
import { throughProxy } from '../helpers/kube.js';
import { startTarget } from '../helpers/net.js';
import { eventually, instanceCreates, maybeRecord } from '../helpers/temporal.js';

const HOUR = 3_600_000;
const SWEEP_MS = 2_000;

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** What a stretch of history did: provider looks, timers started and fired, drift signals. */
function tally(events: HistoryEvent[]) {
  const scheduled = (type: string) =>
    events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type).length;
  const signals = (name: string) =>
    events.filter((e) => e.workflowExecutionSignaledEventAttributes?.signalName === name).length;
  return {
    gets: scheduled('getInstance'),
    creates: instanceCreates(events),
    timersStarted: events.filter((e) => e.timerStartedEventAttributes).length,
    timersFired: events.filter((e) => e.timerFiredEventAttributes).length,
    drift: signals('driftDetected'),
    health: signals('healthChanged'),
  };
}

const running = (p: Proxy) => Boolean(p.status?.ip) && isProvisioned(p);

async function makeProxy(
  cp: ControlPlane,
  name: string,
  port: number,
): Promise<{ ref: ProxyRef; first: Proxy }> {
  const created = await createProxy(cp.api, cp.namespace, name, { mode: 'Managed', provider: 'local', port });
  const ref = { namespace: cp.namespace, name, uid: created.metadata.uid! };
  const first = await waitForProxy(cp.api, cp.namespace, name, 'Running with an IP', running);
  return { ref, first };
}

/** Waits until the workflow is idle in its steady wait (a look is scheduled, nothing in flight). */
async function settled(cp: ControlPlane, ref: ProxyRef) {
  const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
  return eventually('the workflow settled in its steady wait', async () => {
    const v = await handle.query(stateQuery);
    return v.instanceState === 'Running' && v.nextPollAt ? v : undefined;
  });
}

/**
 * The history once it holds the replacement's create. A quick create is a
 * local activity: the provider has the instance before the workflow task
 * that records its marker completes, so the provider's view alone is too early.
 */
async function historyWithReplacement(cp: ControlPlane, ref: ProxyRef) {
  const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
  return eventually(
    'the replacement create in history',
    async () => {
      const t = tally((await handle.fetchHistory()).events ?? []);
      return t.creates >= 2 ? t : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
}

describe('drift found by the per-provider sweep', () => {
  let cp: ControlPlane;
  let prefix: string;

  beforeAll(async () => {
    // Per-proxy polls an hour away: anything noticed within the test was the sweep.
    cp = await startControlPlane({
      prefix: 'drift-sweep',
      installation: 'drift-sweep-test',
      driftSweepOn: true,
      timing: { driftPollMs: HOUR, safetyPollMs: HOUR },
    });
    prefix = `drift-${cp.taskQueue}`;
    const outcome = await ensureSchedules(cp.client, {
      taskQueue: cp.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 0 },
      providerChecks: { intervalMs: 0 },
      driftSweep: { intervalMs: SWEEP_MS, listTimeoutMs: 1_500 },
    });
    expect(outcome.driftSweep).toBe('created');
  });
  afterAll(async () => {
    await cp?.client.schedule
      .getHandle(scheduleIds(prefix).driftSweep)
      .delete()
      .catch(() => undefined);
    await cp?.close();
  });

  it('replaces an instance deleted behind its back, signalling only that Proxy', async () => {
    const victim = await makeProxy(cp, 'px-victim', 18180);
    const bystander = await makeProxy(cp, 'px-bystander', 18181);
    await settled(cp, victim.ref);
    await settled(cp, bystander.ref);
    const bystanderHandle = cp.client.workflow.getHandle(proxyWorkflowId(bystander.ref));
    const bystanderBefore = tally((await bystanderHandle.fetchHistory()).events ?? []);

    // Behind the control plane's back: the provider's own delete (record and listener gone).
    const removedAt = Date.now();
    await cp.registry.get('local')!.delete(victim.first.status!.providerID!, AbortSignal.timeout(5_000));

    const replaced = await eventually(
      'a new instance for the victim',
      async () => {
        const mine = await cp.instancesOf(victim.ref.uid);
        return mine.length === 1 && mine[0]!.state === 'Running' ? mine[0] : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    await waitForProxy(cp.api, cp.namespace, 'px-victim', 'Running again', running);
    console.log(
      `[drift] instance deleted → replacement Running in ${Date.now() - removedAt} ms (sweep ${SWEEP_MS} ms)`,
    );
    expect(replaced.uid).toBe(victim.ref.uid);

    const t = await historyWithReplacement(cp, victim.ref);
    expect(t.drift).toBeGreaterThanOrEqual(1);
    // The hour-long safety timer never fired: the sweep's signal did it.
    expect(t.timersFired).toBe(0);
    expect(t.creates).toBe(2);

    // A later sweep has run (proving time moved past several sweeps): the bystander got nothing.
    const sweeps = async () =>
      (await cp.client.schedule.getHandle(scheduleIds(prefix).driftSweep).describe()).info.numActionsTaken;
    const seen = await sweeps();
    await eventually('two more sweeps', async () => ((await sweeps()) >= seen + 2 ? true : undefined), {
      timeoutMs: 30_000,
      intervalMs: 250,
    });
    const bystanderAfter = tally((await bystanderHandle.fetchHistory()).events ?? []);
    expect(bystanderAfter).toEqual(bystanderBefore);
    expect(bystanderAfter.drift).toBe(0);
  });

  it("replaces an instance whose record an operator removed from the local provider's state dir", async () => {
    const { ref, first } = await makeProxy(cp, 'px-record-gone', 18185);
    await settled(cp, ref);
    const name = parseLocalProviderId(first.status!.providerID!)!;
    const removedAt = Date.now();
    // What `rm` in the state directory does: no provider call, the worker is not told.
    await rm(instanceRecordPath(join(cp.stateRoot, 'local'), name));

    await eventually(
      'a fresh instance with a record',
      async () => {
        const mine = await cp.instancesOf(ref.uid);
        return mine.length === 1 && mine[0]!.state === 'Running' ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const again = await waitForProxy(cp.api, cp.namespace, 'px-record-gone', 'Running again', running);
    console.log(`[drift] record removed → replacement Running in ${Date.now() - removedAt} ms`);
    const t = await historyWithReplacement(cp, ref);
    expect(t.drift).toBeGreaterThanOrEqual(1);
    expect(t.timersFired).toBe(0);
    expect(t.creates).toBe(2);
    // The replacement forwards.
    const target = await startTarget('through the replacement');
    try {
      expect(await throughProxy(cp.kc, again, target.port)).toBe('through the replacement');
    } finally {
      await target.close();
    }
  });

  it('a health or latency signal writes status only: no provider look, no new timer', async () => {
    const { ref, first } = await makeProxy(cp, 'px-health', 18182);
    await settled(cp, ref);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const before = tally((await handle.fetchHistory()).events ?? []);
    const ip = first.status!.ip!;
    const latencies = [40, 95, 12, 300];
    for (const [i, latencyMillis] of latencies.entries()) {
      await handle.signal(healthChangedSignal, {
        ip,
        healthy: true,
        latencyMillis,
        checkedAt: new Date(Date.UTC(2026, 11, 1, 0, 0, i)).toISOString(),
      });
    }
    // The last latency reached status: every signal before it has been handled.
    await waitForProxy(
      cp.api,
      cp.namespace,
      'px-health',
      'the last latency in status',
      (p) => p.status?.latencyMillis === 300,
    );
    const after = tally((await handle.fetchHistory()).events ?? []);
    expect(after.health - before.health).toBe(latencies.length);
    expect(after.gets).toBe(before.gets);
    expect(after.timersStarted).toBe(before.timersStarted);
    const view = await handle.query(stateQuery);
    expect(view.phase).toBe('Ready');

    // The replay guard's history of this path: create, steady, health wake-ups, drift, replacement, delete.
    await cp.registry.get('local')!.delete(first.status!.providerID!, AbortSignal.timeout(5_000));
    await eventually(
      'replaced after the drift sweep',
      async () => {
        const t = tally((await handle.fetchHistory()).events ?? []);
        return t.drift >= 1 && t.creates === 2 ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    await waitForProxy(cp.api, cp.namespace, 'px-health', 'Running again', running);
    await deleteProxy(cp.api, cp.namespace, 'px-health');
    await waitForProxyGone(cp.api, cp.namespace, 'px-health');
    await eventually('workflow completed', async () =>
      (await handle.describe()).status.name === 'COMPLETED' ? true : undefined,
    );
    maybeRecord('proxy-health-wakeups-drift-replace-delete', await handle.fetchHistory());
  });
});

describe('drift found by the safety poll when the sweep is off', () => {
  let cp: ControlPlane;

  beforeAll(async () => {
    // Sweep off, so every Proxy's steady wait is min(drift poll, safety poll) = the safety poll.
    cp = await startControlPlane({
      prefix: 'drift-safety',
      installation: 'drift-safety-test',
      driftSweepOn: false,
      timing: { driftPollMs: 10 * HOUR, safetyPollMs: 3_000 },
      maxHistoryEvents: 120,
    });
  });
  afterAll(async () => {
    await cp?.close();
  });

  it('replaces an instance deleted behind its back at the next safety poll, with no drift signal', async () => {
    const { ref, first } = await makeProxy(cp, 'px-safety', 18183);
    await settled(cp, ref);
    await cp.registry.get('local')!.delete(first.status!.providerID!, AbortSignal.timeout(5_000));
    await eventually(
      'a new instance',
      async () => {
        const mine = await cp.instancesOf(ref.uid);
        return mine.length === 1 && mine[0]!.state === 'Running' ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
    const t = await historyWithReplacement(cp, ref);
    expect(t.drift).toBe(0);
    expect(t.timersFired).toBeGreaterThanOrEqual(1);
    expect(t.creates).toBe(2);
  });

  it("a new run takes its worker's timing", async () => {
    await cp.restartWorker({ safetyPollMs: HOUR });
    const { ref, first } = await makeProxy(cp, 'px-timing', 18184);
    const handle = cp.client.workflow.getHandle(proxyWorkflowId(ref));
    const nextPoll = async () => Date.parse((await settled(cp, ref)).nextPollAt!) - Date.now();
    const firstWait = await nextPoll();
    expect(firstWait).toBeGreaterThan(0.9 * HOUR);
    expect(firstWait).toBeLessThanOrEqual(HOUR);

    await cp.restartWorker({ safetyPollMs: 2 * HOUR });
    const firstRun = (await handle.describe()).runId;
    // Health signals grow the history until the run continues as new (maxHistoryEvents 120).
    let i = 0;
    await eventually(
      'a continue-as-new',
      async () => {
        await handle.signal(healthChangedSignal, {
          ip: first.status!.ip!,
          healthy: i % 2 === 0,
          latencyMillis: 10,
          checkedAt: new Date(Date.UTC(2026, 11, 1, 0, 0, i++)).toISOString(),
        });
        return (await handle.describe()).runId !== firstRun ? true : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100 },
    );
    const secondWait = await nextPoll();
    expect(secondWait).toBeGreaterThan(1.9 * HOUR);
    expect(secondWait).toBeLessThanOrEqual(2 * HOUR);
  });
});
