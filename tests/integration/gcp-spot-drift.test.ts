/**
 * A preempted Spot VM is replaced through the drift sweep (issue 26), on
 * the real worker, bridge, Temporal and apiserver, with the gcp provider
 * driving the real `@google-cloud/compute` client against the TLS fake
 * (tests/helpers/gcp-fake.ts, its GCE-like delays on). GCE preempts the VM
 * (instanceTerminationAction DELETE: it is gone after a moment); the
 * Proxy's own polls are an hour away, so what notices is the per-provider
 * sweep (one aggregated list), which signals only that Proxy, and the
 * workflow makes a new VM with a new IP.
 */
import type { temporal } from '@temporalio/proto';
import { OAuth2Client } from 'google-auth-library';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds } from '../../cli/schedules.js';
import { gcpConfigSchema } from '../../providers/gcp/config.js';
import { parseProviderId } from '../../providers/gcp/instance.js';
import { createGcpProvider } from '../../providers/gcp/provider.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { Proxy } from '../../resources/proxy-schema.js';
import { proxyWorkflowId } from '../../workflows/proxy/ids.js';
import { stateQuery } from '../../workflows/proxy/messages.js';
import { startControlPlane, type ControlPlane } from '../helpers/control-plane.js';
import { FakeCompute } from '../helpers/gcp-fake.js';
import { createProxy, isProvisioned, waitForProxy } from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';

const HOUR = 3_600_000;
const SWEEP_MS = 1_000;
const ZONE = 'europe-west1-b';
const PLACEMENT = {
  zone: ZONE,
  machineType: 'e2-micro',
  image: 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64',
};

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

const running = (p: Proxy) => Boolean(p.status?.ip) && isProvisioned(p);

describe('gcp: a preempted Spot VM is replaced through the drift sweep', () => {
  let cp: ControlPlane;
  let fake: FakeCompute;
  let prefix: string;

  beforeAll(async () => {
    fake = await FakeCompute.start('spot-project');
    // Per-proxy polls an hour away: anything noticed within the test was the sweep.
    cp = await startControlPlane({
      prefix: 'gcp-spot',
      installation: 'gcp-spot-test',
      driftSweepOn: true,
      timing: { driftPollMs: HOUR, safetyPollMs: HOUR },
    });
    const auth = new OAuth2Client();
    auth.setCredentials({ access_token: fake.token, expiry_date: Date.now() + HOUR });
    cp.registry.add(
      createGcpProvider({
        name: 'gcp-spot',
        config: gcpConfigSchema.parse({
          project: fake.project,
          ...fake.connection,
          provisioningModel: 'SPOT',
          instanceTerminationAction: 'DELETE',
          // One VM at the default budget is listed hourly; this lets the 1 s sweep list every 2 s.
          listCallsPerVmHour: 1_800,
        }),
        logger: cp.logger,
        authClient: auth,
        insertWaitMs: 5_000,
      }),
    );
    prefix = `gcp-spot-${cp.taskQueue}`;
    const outcome = await ensureSchedules(cp.client, {
      taskQueue: cp.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 0 },
      providerChecks: { intervalMs: 0 },
      driftSweep: { intervalMs: SWEEP_MS, listTimeoutMs: 5_000 },
    });
    expect(outcome.driftSweep).toBe('created');
  });
  afterAll(async () => {
    await cp?.client.schedule
      .getHandle(scheduleIds(prefix).driftSweep)
      .delete()
      .catch(() => undefined);
    await cp?.close();
    await fake?.stop();
  });

  it('GCE deletes the preempted VM; the sweep signals the Proxy, which gets a new VM and a new IP', async () => {
    const created = await createProxy(cp.api, cp.namespace, 'px-spot', {
      mode: 'Managed',
      provider: 'gcp-spot',
      placement: PLACEMENT,
      port: 3128,
    } as never);
    const uid = created.metadata.uid!;
    const name = instanceNameFromUid(uid);
    const first = await waitForProxy(cp.api, cp.namespace, 'px-spot', 'Running with an IP', running);
    expect(parseProviderId(first.status!.providerID!)).toMatchObject({ zone: ZONE, name });
    const handle = cp.client.workflow.getHandle(
      proxyWorkflowId({ namespace: cp.namespace, name: 'px-spot', uid }),
    );
    // Idle in its steady wait (the next look an hour away).
    await eventually('the workflow settled', async () => {
      const v = await handle.query(stateQuery);
      return v.instanceState === 'Running' && v.nextPollAt ? v : undefined;
    });

    const settledAt = ((await handle.fetchHistory()).events ?? []).length;
    const preemptedAt = Date.now();
    fake.preempt(ZONE, name);
    const replaced = await waitForProxy(
      cp.api,
      cp.namespace,
      'px-spot',
      'Running on a new VM',
      (p) => running(p) && p.status!.ip !== first.status!.ip,
      { timeoutMs: 60_000 },
    );
    console.log(
      `[gcp-spot] preempted → replacement Running in ${Date.now() - preemptedAt} ms (sweep ${SWEEP_MS} ms)`,
    );
    expect(replaced.status?.ip).toBe(fake.instance(ZONE, name)!.natIP);
    // The replacement is a Spot VM too, made by a second insert.
    const inserts = fake.insertBodies().filter((b) => b.name === name);
    expect(inserts).toHaveLength(2);
    expect(inserts[1]!.scheduling).toMatchObject({ provisioningModel: 'SPOT' });

    // After the preemption the first thing the workflow heard was the sweep's
    // signal: no timer of its own fired before it (its polls are an hour away;
    // the replacement's boot polls come after).
    const after: HistoryEvent[] = ((await handle.fetchHistory()).events ?? []).slice(settledAt);
    const drift = after.findIndex(
      (e) => e.workflowExecutionSignaledEventAttributes?.signalName === 'driftDetected',
    );
    expect(drift).toBeGreaterThanOrEqual(0);
    expect(after.slice(0, drift).filter((e) => e.timerFiredEventAttributes)).toEqual([]);
  });
});
