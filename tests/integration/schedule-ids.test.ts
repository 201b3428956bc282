/**
 * Schedule IDs follow the task queue, on the real Temporal dev server: two
 * installations sharing a Temporal namespace on different task queues keep
 * schedules of their own, the default task queue keeps the IDs every
 * installation used before, and an installation on another task queue takes
 * over its schedules from those old IDs at its next start (an operator's
 * pause included) without touching another installation's.
 *
 * Only schedules are created here; nothing polls these task queues, and no
 * schedule is triggered, so no workflow runs.
 */
import { randomBytes } from 'node:crypto';
import { Client, Connection, ScheduleNotFoundError } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  ensureSchedules,
  LEGACY_SCHEDULE_PREFIX,
  scheduleIds,
  type SchedulesConfig,
} from '../../cli/schedules.js';
import { freshTemporalNamespace } from '../helpers/temporal.js';

const HOUR = 3_600_000;

function config(taskQueue: string, gcIntervalMs = HOUR): SchedulesConfig {
  return {
    taskQueue,
    gc: { intervalMs: gcIntervalMs },
    providerChecks: { intervalMs: HOUR },
    driftSweep: { intervalMs: HOUR },
  };
}

describe('schedule IDs follow the task queue', () => {
  let connection: Connection;
  let client: Client;

  beforeAll(async () => {
    // The legacy IDs are fixed per Temporal namespace: a namespace of its own
    // so no other test file's schedules are in play.
    const namespace = await freshTemporalNamespace('schedule-ids');
    connection = await Connection.connect({ address: inject('temporalAddress') });
    client = new Client({ connection, namespace });
  });
  afterAll(async () => {
    await connection?.close();
  });

  const taskQueueOf = async (id: string) => {
    const d = await client.schedule.getHandle(id).describe();
    return d.action.type === 'startWorkflow' ? d.action.taskQueue : undefined;
  };
  const exists = (id: string) =>
    client.schedule
      .getHandle(id)
      .describe()
      .then(
        () => true,
        (error: unknown) => {
          if (error instanceof ScheduleNotFoundError) return false;
          throw error;
        },
      );

  it('the default task queue keeps the old IDs; another task queue gets its own', async () => {
    const other = `team-b-${randomBytes(3).toString('hex')}`;
    expect(await ensureSchedules(client, config('egress-proxies'))).toEqual({
      gc: 'created',
      providerChecks: 'created',
      driftSweep: 'created',
    });
    expect(await ensureSchedules(client, config(other))).toEqual({
      gc: 'created',
      providerChecks: 'created',
      driftSweep: 'created',
    });
    const legacy = scheduleIds(LEGACY_SCHEDULE_PREFIX);
    expect(legacy.gc).toBe('egress-proxies-orphan-gc');
    for (const id of Object.values(scheduleIds('egress-proxies')).filter((i) => !i.includes('cleanup')))
      expect(await taskQueueOf(id)).toBe('egress-proxies');
    for (const id of [
      scheduleIds(other).gc,
      scheduleIds(other).providerChecks,
      scheduleIds(other).driftSweep,
    ])
      expect(await taskQueueOf(id)).toBe(other);

    // Each installation's restart updates its own schedules only.
    await ensureSchedules(client, config(other, 2 * HOUR));
    const mine = await client.schedule.getHandle(scheduleIds(other).gc).describe();
    const theirs = await client.schedule.getHandle(legacy.gc).describe();
    expect(mine.spec.intervals?.[0]?.every).toBe(2 * HOUR);
    expect(theirs.spec.intervals?.[0]?.every).toBe(HOUR);
    expect(await taskQueueOf(legacy.gc)).toBe('egress-proxies');

    for (const tq of ['egress-proxies', other])
      await ensureSchedules(client, {
        ...config(tq),
        gc: { intervalMs: 0 },
        providerChecks: { intervalMs: 0 },
        driftSweep: { intervalMs: 0 },
      });
  });

  it('takes its schedules over from the old IDs at its next start, pause and note included', async () => {
    const upgraded = `team-c-${randomBytes(3).toString('hex')}`;
    const legacy = scheduleIds(LEGACY_SCHEDULE_PREFIX);
    const ids = scheduleIds(upgraded);
    // What a worker on task queue `upgraded` created before IDs followed the task queue.
    await ensureSchedules(client, { ...config(upgraded), idPrefix: LEGACY_SCHEDULE_PREFIX });
    await client.schedule.getHandle(legacy.gc).pause('operator: investigating a GC run');
    expect(await taskQueueOf(legacy.gc)).toBe(upgraded);

    // The upgraded worker starts.
    expect(await ensureSchedules(client, config(upgraded))).toEqual({
      gc: 'created',
      providerChecks: 'created',
      driftSweep: 'created',
    });
    for (const key of ['gc', 'providerChecks', 'driftSweep'] as const) {
      expect(await exists(legacy[key])).toBe(false);
      expect(await taskQueueOf(ids[key])).toBe(upgraded);
    }
    const gc = await client.schedule.getHandle(ids.gc).describe();
    expect(gc.state).toMatchObject({ paused: true, note: 'operator: investigating a GC run' });
    const checks = await client.schedule.getHandle(ids.providerChecks).describe();
    expect(checks.state.paused).toBe(false);

    // A second start finds nothing under the old IDs and changes nothing else.
    expect(await ensureSchedules(client, config(upgraded))).toEqual({
      gc: 'updated',
      providerChecks: 'updated',
      driftSweep: 'updated',
    });
    expect((await client.schedule.getHandle(ids.gc).describe()).state.paused).toBe(true);

    await ensureSchedules(client, {
      ...config(upgraded),
      gc: { intervalMs: 0 },
      providerChecks: { intervalMs: 0 },
      driftSweep: { intervalMs: 0 },
    });
  });

  it("leaves the old IDs alone when they start another installation's workflows", async () => {
    const upgraded = `team-d-${randomBytes(3).toString('hex')}`;
    const legacy = scheduleIds(LEGACY_SCHEDULE_PREFIX);
    await ensureSchedules(client, config('egress-proxies'));
    await ensureSchedules(client, config(upgraded));
    for (const key of ['gc', 'providerChecks', 'driftSweep'] as const)
      expect(await taskQueueOf(legacy[key])).toBe('egress-proxies');
    for (const tq of ['egress-proxies', upgraded])
      await ensureSchedules(client, {
        ...config(tq),
        gc: { intervalMs: 0 },
        providerChecks: { intervalMs: 0 },
        driftSweep: { intervalMs: 0 },
      });
  });
});
