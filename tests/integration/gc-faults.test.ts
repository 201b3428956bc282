/**
 * Orphan GC under faults (issue 6, "Bad input and faults"):
 * - the apiserver unreachable: sweeps are skipped whole and delete nothing,
 *   then collect again (two-pass) once it is back. The apiserver is reached
 *   through a TCP relay that the test cuts, so the shared apiserver keeps
 *   running for the other test files;
 * - the Temporal server restarted: the schedules survive in its database and
 *   fire again. That test runs its own Temporal dev server (with a database
 *   file) so it can restart it without disturbing other test files.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client, ScheduleDescription, ScheduleHandle } from '@temporalio/client';
import type { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ensureSchedules, scheduleIds, type SchedulesConfig } from '../../cli/schedules.js';
import { startTemporalDevServer, type TemporalDevServer } from '../../local-servers/temporal.js';
import { portInUse } from '../../local-servers/ports.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/provider.js';
import type { ProxyClient } from '../../kube/proxies.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type { ChecksRoundReport } from '../../workflows/provider-checks/types.js';
import type { SweepReport } from '../../workflows/gc/types.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import { createNamespace, createProxy, kubeConfig, proxyClient } from '../helpers/kube.js';
import { portBelowEphemeralRange, TcpRelay } from '../helpers/net.js';
import { eventually } from '../helpers/temporal.js';
import {
  kubeConfigVia,
  mutableRegistry,
  nthResult,
  startScheduleWorker,
  type ScheduleWorker,
} from './gc-helpers.js';

/** Waits until no scheduled run is in flight (call after pausing) and returns the description. */
const idle = (handle: ScheduleHandle): Promise<ScheduleDescription> =>
  eventually(
    `schedule ${handle.scheduleId} idle`,
    async () => {
      const d = await handle.describe();
      return d.info.runningActions.length === 0 ? d : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100 },
  );

describe('orphan GC with the apiserver unreachable', () => {
  let kc: KubeConfig;
  let api: ProxyClient;
  let relay: TcpRelay;
  let namespace: string;
  let stateRoot: string;
  let local: LocalProvider;
  let sw: ScheduleWorker;

  beforeAll(async () => {
    kc = kubeConfig();
    api = proxyClient(kc);
    namespace = await createNamespace(kc, 'gc-faults');
    const apiserver = new URL(kc.getCurrentCluster()!.server);
    relay = new TcpRelay({ host: apiserver.hostname, port: Number(apiserver.port) });
    await relay.open();
    stateRoot = mkdtempSync(join(tmpdir(), 'ep-gc-faults-'));
    local = createLocalProvider({
      name: 'gc-local',
      config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
      stateDir: join(stateRoot, 'local'),
      logger: pino({ level: 'silent' }),
    });
    // The GC activities reach the apiserver only through the relay.
    sw = await startScheduleWorker({
      prefix: 'gc-faults',
      kubeConfig: kubeConfigVia(kc, relay.port),
      registry: mutableRegistry([local]),
    });
  });

  afterAll(async () => {
    await sw?.close();
    await local?.close();
    await relay?.cut();
    if (stateRoot) rmSync(stateRoot, { recursive: true, force: true });
  });

  const createInstance = (uid: string): Promise<string> =>
    local.create(
      {
        name: instanceNameFromUid(uid),
        uid,
        namespace,
        proxyName: 'gc-faults',
        placement: {},
        port: 3128,
        installation: sw.installation,
      },
      AbortSignal.timeout(10_000),
    );

  const exists = async (id: string): Promise<boolean> => {
    try {
      await local.get(id, AbortSignal.timeout(10_000));
      return true;
    } catch (error) {
      if ((error as { errorClass?: string }).errorClass === 'NotFound') return false;
      throw error;
    }
  };

  it('deletes nothing while the Proxy list is unreadable, and collects two-pass once it is back', async () => {
    const proxy = await createProxy(api, namespace, 'live', { mode: 'Managed', provider: 'gc-local' });
    const liveId = await createInstance(proxy.metadata.uid!);
    const orphanUid = randomUUID();
    const orphanId = await createInstance(orphanUid);
    const orphan = { provider: 'gc-local', id: orphanId, uid: orphanUid };

    await relay.cut();
    const prefix = `gc-faults-${randomBytes(3).toString('hex')}`;
    // MinAge 0: both instances are old enough at once; without the live set
    // both would be orphans on every sweep, confirmed on the second.
    const cfg = (intervalMs: number): SchedulesConfig => ({
      taskQueue: sw.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs, minAgeMs: 0, listTimeoutMs: 5_000 },
      providerChecks: { intervalMs: 0 },
    });
    await ensureSchedules(sw.client, cfg(2_000));
    const handle = sw.client.schedule.getHandle(scheduleIds(prefix).gc);
    try {
      // Two sweeps while the apiserver cannot be reached (each retries the
      // live set for ~6 s before giving up).
      await nthResult<SweepReport>(sw.client, handle, 2, 40_000);
      await handle.pause('test: restore the apiserver between sweeps');
      const outage = await idle(handle);
      const outageRuns = outage.info.recentActions.length;
      // Nothing deleted: both instances are still there, through the provider.
      expect(await exists(liveId)).toBe(true);
      expect(await exists(orphanId)).toBe(true);
      const listed = await local.listByTag(AbortSignal.timeout(10_000));
      expect(listed.map((i) => i.id).sort()).toEqual([liveId, orphanId].sort());
      // Every sweep of the outage says why it was skipped, and carries no sighting.
      const skipped: SweepReport[] = [];
      for (let n = 1; n <= outageRuns; n++) skipped.push(await nthResult<SweepReport>(sw.client, handle, n));
      expect(skipped.length).toBeGreaterThanOrEqual(2);
      for (const report of skipped) {
        expect(report.skipped).toMatch(/^cannot list Proxies \(.+\); nothing can be proven orphaned$/);
        expect(report.providers).toEqual({});
        expect(report.orphans).toEqual([]);
      }
      expect(skipped[1]?.hadPreviousSweep).toBe(true);

      // The apiserver is reachable again (same address): the next sweeps
      // sight the orphan, then delete it; the live instance is kept.
      await relay.open();
      await handle.unpause();
      const sighted = await nthResult<SweepReport>(sw.client, handle, outageRuns + 1, 30_000);
      expect(sighted.skipped).toBeUndefined();
      expect(sighted.providers['gc-local']).toMatchObject({
        listed: 2,
        kept: { live: 1 },
        firstSightings: [orphan],
        deleted: [],
      });
      expect(await exists(orphanId)).toBe(true);
      const collected = await nthResult<SweepReport>(sw.client, handle, outageRuns + 2, 30_000);
      expect(collected.skipped).toBeUndefined();
      expect(collected.providers['gc-local']).toMatchObject({ kept: { live: 1 }, deleted: [orphan] });
      expect(await exists(orphanId)).toBe(false);
      expect(await exists(liveId)).toBe(true);
    } finally {
      await relay.open().catch(() => undefined);
      await ensureSchedules(sw.client, cfg(0)).catch(() => undefined);
    }
  }, 60_000);
});

describe('orphan GC schedules across a Temporal server restart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ep-gc-restart-'));
  let temporal: TemporalDevServer | undefined;
  let port: number | undefined;
  let sw: ScheduleWorker;

  const startTemporal = async (): Promise<TemporalDevServer> => {
    const server = await startTemporalDevServer({
      cli: inject('temporalCli'),
      dataDir: join(dir, 'temporal'),
      persist: true,
      headless: true,
      // Below the ephemeral range: nothing else takes it while the server is down.
      port: port ?? portBelowEphemeralRange(),
    });
    temporal = server;
    port ??= Number(server.address.split(':')[1]);
    return server;
  };

  beforeAll(async () => {
    const server = await startTemporal();
    sw = await startScheduleWorker({
      prefix: 'gc-restart',
      kubeConfig: kubeConfig(),
      registry: mutableRegistry([]),
      temporal: { address: server.address, namespace: server.namespace },
    });
  });

  afterAll(async () => {
    await sw?.close();
    await temporal?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The first action the schedule took after `after`, once its run has completed, with its result. */
  const firstRunAfter = async <T>(client: Client, handle: ScheduleHandle, after: Date): Promise<T> => {
    const action = await eventually(
      `schedule ${handle.scheduleId} fires after the restart`,
      async () => {
        const d = await handle.describe();
        return d.info.recentActions.find((a) => a.takenAt.getTime() > after.getTime());
      },
      { timeoutMs: 30_000, intervalMs: 200 },
    );
    const wf = action.action.workflow;
    return (await client.workflow.getHandle(wf.workflowId, wf.firstExecutionRunId).result()) as T;
  };

  it('keeps the schedules, which fire again after the restart', async () => {
    const prefix = `gc-restart-${randomBytes(3).toString('hex')}`;
    const ids = scheduleIds(prefix);
    const cfg: SchedulesConfig = {
      taskQueue: sw.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 2_000, minAgeMs: 0, listTimeoutMs: 1_000 },
      providerChecks: { intervalMs: 2_000 },
    };
    expect(await ensureSchedules(sw.client, cfg)).toEqual({ gc: 'created', providerChecks: 'created' });
    const gc = sw.client.schedule.getHandle(ids.gc);
    const checks = sw.client.schedule.getHandle(ids.providerChecks);
    const before = await nthResult<SweepReport>(sw.client, gc, 1, 30_000);
    expect(before.skipped).toBeUndefined();
    await nthResult<ChecksRoundReport>(sw.client, checks, 1, 30_000);

    const oldAddress = temporal!.address;
    await temporal!.stop();
    const stoppedAt = new Date();
    // The same port for the restart, once it can be bound again.
    const port = Number(oldAddress.split(':')[1]);
    await eventually(`port ${port} free`, async () => ((await portInUse(port)) ? undefined : true));
    const server = await startTemporal();
    // Same port, so the client and the worker reconnect to the same address.
    expect(server.address).toBe(oldAddress);

    // Both schedules are still there, as created.
    const described = await eventually('schedules described after the restart', async () => [
      await gc.describe(),
      await checks.describe(),
    ]);
    expect(described.map((d) => d.action.type === 'startWorkflow' && d.action.workflowType)).toEqual([
      'orphanGcWorkflow',
      'providerChecksWorkflow',
    ]);
    expect(described.map((d) => d.spec.intervals?.[0]?.every)).toEqual([2_000, 2_000]);
    expect(described.every((d) => d.state.paused === false)).toBe(true);

    // And they fire again: runs taken by the restarted server complete on
    // the same (never restarted) worker; the GC run still confirms against
    // the last sweep before the restart.
    const after = await firstRunAfter<SweepReport>(sw.client, gc, stoppedAt);
    expect(after.skipped).toBeUndefined();
    expect(after.hadPreviousSweep).toBe(true);
    expect(after.installation).toBe(sw.installation);
    const round = await firstRunAfter<ChecksRoundReport>(sw.client, checks, stoppedAt);
    expect(round).toMatchObject({ installation: sw.installation, cleanupOnly: false });
    expect(sw.worker.getState()).toBe('RUNNING');
  }, 60_000);
});
