/**
 * Orphan GC on the real Temporal dev server and apiserver, through its
 * Temporal Schedule, against the real `local` provider: the seed's matrix in
 * one sweep, two-pass confirmation, a hung, a throwing and a garbage-listing
 * backend next to a working one, the deletion's WARNING lines, dry-run, and
 * the schedules' idempotent setup.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ScheduleOverlapPolicy } from '@temporalio/client';
import type { KubeConfig } from '@kubernetes/client-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureSchedules, scheduleIds, type SchedulesConfig } from '../../cli/schedules.js';
import { localConfigSchema } from '../../providers/local/config.js';
import { createLocalProvider, type LocalProvider } from '../../providers/local/provider.js';
import { readRecord, writeRecord, RECORD_SCHEMA_VERSION } from '../../providers/local/store.js';
import { instanceNameFromUid } from '../../providers/names.js';
import { providerError } from '../../providers/errors.js';
import { MARK_MANAGED, MARK_MANAGED_VALUE, type Instance, type Provider } from '../../providers/types.js';
import type { ProxyClient } from '../../kube/proxies.js';
import type { SweepReport } from '../../workflows/gc/types.js';
import { privateLoopbackRange } from '../helpers/control-plane.js';
import {
  createNamespace,
  createProxy,
  deleteProxy,
  kubeConfig,
  proxyClient,
  removeFinalizers,
} from '../helpers/kube.js';
import { eventually } from '../helpers/temporal.js';
import { LEVEL, mutableRegistry, nthResult, startScheduleWorker, type ScheduleWorker } from './gc-helpers.js';

const HOLD = 'test.example.com/hold';
const TWO_HOURS_AGO = () => new Date(Date.now() - 2 * 3_600_000).toISOString();

describe('orphan GC schedule', () => {
  let kc: KubeConfig;
  let api: ProxyClient;
  let namespace: string;
  let stateRoot: string;
  let local: LocalProvider;
  let sw: ScheduleWorker;
  const listCalls: string[] = [];
  /** A backend whose listByTag never answers and ignores its signal. */
  const hung: Provider = {
    name: 'gc-hung',
    type: 'hung',
    create: () => Promise.reject(new Error('unused')),
    get: () => Promise.reject(new Error('unused')),
    delete: () => Promise.reject(new Error('unused')),
    listByTag: () => {
      listCalls.push('gc-hung');
      return new Promise<never>(() => {});
    },
  };
  /** A backend whose listByTag throws (as the contract says it should when it cannot vouch for a list). */
  const throwing: Provider = {
    ...hung,
    name: 'gc-throw',
    type: 'throwing',
    listByTag: () => {
      listCalls.push('gc-throw');
      return Promise.reject(
        providerError({
          errorClass: 'Transient',
          operation: 'list',
          provider: 'gc-throw',
          instance: '',
          message: 'backend unreachable',
        }),
      );
    },
  };
  /** A backend whose listByTag breaks the contract: an entry with no UID. */
  const garbage: Provider = {
    ...hung,
    name: 'gc-garbage',
    type: 'garbage',
    listByTag: () => {
      listCalls.push('gc-garbage');
      return Promise.resolve([{ id: 'garbage/1', installation: 'x' } as unknown as Instance]);
    },
  };

  beforeAll(async () => {
    kc = kubeConfig();
    api = proxyClient(kc);
    namespace = await createNamespace(kc, 'gc');
    stateRoot = mkdtempSync(join(tmpdir(), 'ep-gc-'));
    local = createLocalProvider({
      name: 'gc-local',
      config: localConfigSchema.parse({ addressRange: privateLoopbackRange() }),
      stateDir: join(stateRoot, 'local'),
      logger: pino({ level: 'silent' }),
    });
    sw = await startScheduleWorker({
      prefix: 'gc',
      kubeConfig: kc,
      registry: mutableRegistry([local, hung, throwing, garbage]),
    });
  });

  afterAll(async () => {
    await sw?.close();
    await local?.close();
    if (api && namespace) {
      // Release the held Proxy so the namespace can go.
      await removeFinalizers(api, namespace, 'deleting').catch(() => undefined);
    }
    rmSync(stateRoot, { recursive: true, force: true });
  });

  const createInstance = async (uid: string, installation = sw.installation): Promise<string> =>
    local.create(
      {
        name: instanceNameFromUid(uid),
        uid,
        namespace,
        proxyName: 'gc',
        placement: {},
        port: 3128,
        installation,
      },
      AbortSignal.timeout(10_000),
    );

  /** Backdates an instance's creation time in the backend, as if created two hours ago. */
  const backdate = async (id: string): Promise<void> => {
    const name = id.slice('local/'.length);
    const read = await readRecord(local.stateDir, name);
    if (read.kind !== 'ok') throw new Error(`no record for ${id}`);
    await writeRecord(local.stateDir, { ...read.record, createdAt: TWO_HOURS_AGO() });
  };

  const exists = async (id: string): Promise<boolean> => {
    try {
      await local.get(id, AbortSignal.timeout(10_000));
      return true;
    } catch (error) {
      if ((error as { errorClass?: string }).errorClass === 'NotFound') return false;
      throw error;
    }
  };

  const config = (prefix: string, gc: Partial<SchedulesConfig['gc']> = {}): SchedulesConfig => ({
    taskQueue: sw.taskQueue,
    idPrefix: prefix,
    // Seconds, not minutes: MinAge is an hour, so "young" is decided by the backdating above.
    gc: { intervalMs: 5_000, minAgeMs: 3_600_000, listTimeoutMs: 1_500, ...gc },
    providerChecks: { intervalMs: 0 },
  });

  it('keeps live, deleting, young, unmarked and foreign instances, skips hung, throwing and garbage backends, deletes an orphan on its second sighting', async () => {
    const live = await createProxy(api, namespace, 'live', { mode: 'Managed', provider: 'gc-local' });
    const deleting = await createProxy(
      api,
      namespace,
      'deleting',
      { mode: 'Managed', provider: 'gc-local' },
      { finalizers: [HOLD] },
    );
    await deleteProxy(api, namespace, 'deleting');

    const ids = {
      live: await createInstance(live.metadata.uid!),
      deleting: await createInstance(deleting.metadata.uid!),
      orphan: await createInstance(randomUUID()),
      young: await createInstance(randomUUID()),
      foreign: await createInstance(randomUUID(), 'another-installation'),
    };
    for (const key of ['live', 'deleting', 'orphan', 'foreign'] as const) await backdate(ids[key]);
    // Managed mark but no UID mark: no ownership proof.
    await writeRecord(local.stateDir, {
      schema: RECORD_SCHEMA_VERSION,
      name: 'proxy-unmarked',
      labels: { [MARK_MANAGED]: MARK_MANAGED_VALUE },
      createdAt: TWO_HOURS_AGO(),
      readyAt: TWO_HOURS_AGO(),
      address: '',
      port: 3128,
      state: 'stopped',
    });
    const orphanUid = (await local.get(ids.orphan, AbortSignal.timeout(10_000))).uid;

    const prefix = `gc-${randomBytes(3).toString('hex')}`;
    expect(await ensureSchedules(sw.client, config(prefix))).toEqual({
      gc: 'created',
      providerChecks: 'absent',
    });
    const handle = sw.client.schedule.getHandle(scheduleIds(prefix).gc);
    try {
      const first = await nthResult<SweepReport>(sw.client, handle, 1);
      await handle.pause('test: look between sweeps');
      const between = await handle.describe();
      expect(first.hadPreviousSweep).toBe(false);
      expect(first.providers['gc-local']).toMatchObject({
        listed: 6,
        kept: { live: 2, unmarked: 1, 'other-installation': 1, young: 1 },
        firstSightings: [{ provider: 'gc-local', id: ids.orphan, uid: orphanUid }],
        deleted: [],
      });
      // The hung backend was asked, timed out alone, and the sweep went on without it;
      // so did the throwing one and the one listing garbage, each with its error recorded.
      expect(listCalls).toEqual(expect.arrayContaining(['gc-hung', 'gc-throw', 'gc-garbage']));
      expect(first.providers['gc-hung']?.error).toMatch(/ListTimeout/);
      expect(first.providers['gc-throw']).toMatchObject({
        error: 'Transient: gc-throw: list: backend unreachable (Transient)',
        listed: 0,
      });
      expect(first.providers['gc-garbage']).toMatchObject({
        error: 'ListGarbage: gc-garbage: listByTag returned garbage (garbage/1: uid is not a string)',
        listed: 0,
      });
      expect(first.orphans).toEqual([{ provider: 'gc-local', id: ids.orphan, uid: orphanUid }]);
      for (const [provider, type] of [
        ['gc-hung', 'ListTimeout'],
        ['gc-throw', 'Transient'],
        ['gc-garbage', 'ListGarbage'],
      ] as const) {
        expect(
          (
            await sw.logs.waitFor('listing instances failed; skipping this provider for this sweep', {
              provider,
              type,
            })
          ).level,
        ).toBe(LEVEL.warn);
        await sw.logs.waitFor('orphan GC: skipping provider for this sweep', {
          provider,
          error: first.providers[provider]?.error,
          sdkComponent: 'workflow',
          workflowType: 'orphanGcWorkflow',
        });
      }
      await sw.logs.waitFor(
        'orphan GC: first sighting of an orphan; deleted on the next sweep if still orphaned',
        {
          provider: 'gc-local',
          id: ids.orphan,
          uid: orphanUid,
        },
      );
      if (between.info.recentActions.length === 1 && between.info.runningActions.length === 0) {
        // Paused before the second sweep: the first sighting deleted nothing.
        expect(await exists(ids.orphan)).toBe(true);
        expect(sw.logs.find('WARNING: deleting orphaned instance')).toEqual([]);
      }

      await handle.unpause();
      const second = await nthResult<SweepReport>(sw.client, handle, 2);
      expect(second.hadPreviousSweep).toBe(true);
      expect(second.providers['gc-local']?.deleted).toEqual([
        { provider: 'gc-local', id: ids.orphan, uid: orphanUid },
      ]);
      // The same sweep that skipped the broken backends collected the local orphan.
      expect(second.providers['gc-hung']?.error).toMatch(/ListTimeout/);
      expect(second.providers['gc-throw']?.error).toMatch(/^Transient: /);
      expect(second.providers['gc-garbage']?.error).toMatch(/^ListGarbage: /);
      expect(await exists(ids.orphan)).toBe(false);
      // The WARNING lines naming provider, providerID and UID: the activity's
      // (before the delete) and the workflow's (after it).
      const warning = await sw.logs.waitFor('WARNING: deleting orphaned instance', {
        provider: 'gc-local',
        providerID: ids.orphan,
        uid: orphanUid,
      });
      expect(warning).toMatchObject({ level: LEVEL.warn, component: 'orphan-gc' });
      expect(
        await sw.logs.waitFor('WARNING: orphan GC deleted orphaned instance', {
          provider: 'gc-local',
          id: ids.orphan,
          uid: orphanUid,
        }),
      ).toMatchObject({ level: LEVEL.warn, taskQueue: sw.taskQueue, workflowType: 'orphanGcWorkflow' });
      expect(sw.logs.find('WARNING: deleting orphaned instance')).toHaveLength(1);
      for (const key of ['live', 'deleting', 'young', 'foreign'] as const)
        expect(await exists(ids[key]), key).toBe(true);
      expect((await readRecord(local.stateDir, 'proxy-unmarked')).kind).toBe('ok');
    } finally {
      await ensureSchedules(sw.client, config(prefix, { intervalMs: 0 }));
    }
  });

  it('dry-run reports a confirmed orphan and deletes nothing', async () => {
    const orphan = await createInstance(randomUUID());
    await backdate(orphan);
    const prefix = `gc-dry-${randomBytes(3).toString('hex')}`;
    await ensureSchedules(sw.client, config(prefix, { dryRun: true }));
    const handle = sw.client.schedule.getHandle(scheduleIds(prefix).gc);
    try {
      await nthResult<SweepReport>(sw.client, handle, 1);
      const second = await nthResult<SweepReport>(sw.client, handle, 2);
      expect(second.dryRun).toBe(true);
      expect(second.providers['gc-local']?.wouldDelete).toContainEqual(
        expect.objectContaining({ id: orphan }),
      );
      expect(second.providers['gc-local']?.deleted).toEqual([]);
      expect(await exists(orphan)).toBe(true);
      expect(
        await sw.logs.waitFor('DRY RUN: orphan GC would delete orphaned instance', {
          provider: 'gc-local',
          id: orphan,
        }),
      ).toMatchObject({ level: LEVEL.warn });
      expect(sw.logs.find('WARNING: deleting orphaned instance', { providerID: orphan })).toEqual([]);
    } finally {
      await ensureSchedules(sw.client, config(prefix, { intervalMs: 0 }));
    }
  });

  it('creates the schedules once, updates them in place, keeps an operator’s pause, and deletes them at 0', async () => {
    const prefix = `gc-setup-${randomBytes(3).toString('hex')}`;
    const ids = scheduleIds(prefix);
    const cfg: SchedulesConfig = {
      taskQueue: sw.taskQueue,
      idPrefix: prefix,
      gc: { intervalMs: 600_000 },
      providerChecks: { intervalMs: 60_000 },
    };
    try {
      expect(await ensureSchedules(sw.client, cfg)).toEqual({ gc: 'created', providerChecks: 'created' });
      expect(await ensureSchedules(sw.client, cfg)).toEqual({ gc: 'updated', providerChecks: 'updated' });

      const gc = await sw.client.schedule.getHandle(ids.gc).describe();
      expect(gc.spec.intervals?.[0]?.every).toBe(600_000);
      expect(gc.policies.overlap).toBe(ScheduleOverlapPolicy.SKIP);
      expect(gc.policies.catchupWindow).toBe(60_000);
      expect(gc.action).toMatchObject({
        workflowType: 'orphanGcWorkflow',
        taskQueue: sw.taskQueue,
        workflowRunTimeout: 600_000,
      });
      expect(gc.action.type === 'startWorkflow' ? gc.action.args : undefined).toEqual([
        { minAgeMs: 600_000, listTimeoutMs: 120_000, dryRun: false },
      ]);
      const checks = await sw.client.schedule.getHandle(ids.providerChecks).describe();
      expect(checks.spec.intervals?.[0]?.every).toBe(60_000);
      expect(checks.action).toMatchObject({
        workflowType: 'providerChecksWorkflow',
        workflowRunTimeout: 75_000,
      });
      expect(checks.action.type === 'startWorkflow' ? checks.action.args : undefined).toEqual([
        { timeoutMs: 15_000, staleAfterMs: 180_000 },
      ]);

      await sw.client.schedule.getHandle(ids.gc).pause('operator: investigating');
      expect(
        await ensureSchedules(sw.client, { ...cfg, gc: { intervalMs: 1_200_000, dryRun: true } }),
      ).toEqual({
        gc: 'updated',
        providerChecks: 'updated',
      });
      const updated = await sw.client.schedule.getHandle(ids.gc).describe();
      expect(updated.spec.intervals?.[0]?.every).toBe(1_200_000);
      expect(updated.state).toMatchObject({ paused: true, note: 'operator: investigating' });
      expect(updated.action.type === 'startWorkflow' ? updated.action.args : undefined).toEqual([
        { minAgeMs: 600_000, listTimeoutMs: 120_000, dryRun: true },
      ]);

      const off = { ...cfg, gc: { intervalMs: 0 }, providerChecks: { intervalMs: 0 } };
      expect(await ensureSchedules(sw.client, off)).toEqual({ gc: 'deleted', providerChecks: 'deleted' });
      expect(await ensureSchedules(sw.client, off)).toEqual({ gc: 'absent', providerChecks: 'absent' });
      // Turning checks off runs one cleanup round; it completes on this worker.
      await eventually('cleanup run completed', async () => {
        const d = await sw.client.workflow.getHandle(ids.checksCleanup).describe();
        return d.status.name === 'COMPLETED' ? true : undefined;
      });
    } finally {
      await ensureSchedules(sw.client, {
        ...cfg,
        gc: { intervalMs: 0 },
        providerChecks: { intervalMs: 0 },
      }).catch(() => undefined);
    }
  });
});
