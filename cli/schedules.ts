/**
 * The Temporal Schedules that run orphan GC (every 10 min), provider checks
 * (every 1 min) and the drift sweep (every 2 min), created or updated
 * idempotently: the worker
 * (`startWorker` in cli/processes.ts; `dev` runs one) calls `ensureSchedules`
 * at every start, and a second call with the same config changes nothing.
 * There is no separate setup command. An interval of 0 turns a schedule off
 * (it is deleted; turning checks off also deletes this installation's
 * ProviderHealth objects, so none is left claiming a stale Ready).
 *
 * Policies: overlap SKIP (a sweep still running when the next is due is not
 * doubled), a short catch-up window (after a Temporal outage at most one
 * missed run is taken, not a burst), and a run timeout on every scheduled
 * workflow, so a stuck run ends and never silently blocks the ones after it.
 * A schedule an operator paused stays paused across updates.
 */
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  ScheduleOverlapPolicy,
  WorkflowExecutionAlreadyStartedError,
  type Client,
  type ScheduleOptionsStartWorkflowAction,
  type Workflow,
} from '@temporalio/client';
import type { Logger } from 'pino';
import type { driftSweepWorkflow, orphanGcWorkflow, providerChecksWorkflow } from '../workflows/index.js';
import { DRIFT_SWEEP_DEFAULTS, type DriftSweepInput } from '../workflows/drift-sweep/types.js';
import { GC_DEFAULTS, type OrphanGcInput } from '../workflows/gc/types.js';
import { CHECK_DEFAULTS, type ProviderChecksInput } from '../workflows/provider-checks/types.js';

export const DEFAULT_GC_INTERVAL_MS = 10 * 60_000;
export const DEFAULT_PROVIDER_CHECK_INTERVAL_MS = 60_000;
/** The seed's floor for provider checks: keeps one status write per provider per round cheap. */
export const MIN_PROVIDER_CHECK_INTERVAL_MS = 10_000;
export const DEFAULT_CATCHUP_WINDOW_MS = 60_000;

export interface SchedulesConfig {
  taskQueue: string;
  /**
   * Schedule IDs are `<prefix>-orphan-gc`, `<prefix>-provider-checks`,
   * `<prefix>-drift-sweep`. Default: the task queue (`egress-proxies` unless
   * set), so installations that share a Temporal namespace on different task
   * queues keep schedules of their own.
   */
  idPrefix?: string;
  gc: {
    /** 0 turns orphan GC off. */
    intervalMs: number;
    minAgeMs?: number;
    listTimeoutMs?: number;
    dryRun?: boolean;
  };
  providerChecks: {
    /** 0 turns provider checks off. */
    intervalMs: number;
    /** The round's budget; default 15 s, or the interval when shorter. */
    timeoutMs?: number;
  };
  /** Absent: left as it is (callers that predate it). */
  driftSweep?: {
    /** 0 turns the drift sweep off. */
    intervalMs: number;
    listTimeoutMs?: number;
  };
  catchupWindowMs?: number;
}

export type ScheduleOutcome = 'created' | 'updated' | 'deleted' | 'absent';

/** The IDs every installation used before they followed the task queue. */
export const LEGACY_SCHEDULE_PREFIX = 'egress-proxies';

export function scheduleIds(prefix = LEGACY_SCHEDULE_PREFIX): {
  gc: string;
  providerChecks: string;
  checksCleanup: string;
  driftSweep: string;
} {
  return {
    gc: `${prefix}-orphan-gc`,
    providerChecks: `${prefix}-provider-checks`,
    checksCleanup: `${prefix}-provider-checks-cleanup`,
    driftSweep: `${prefix}-drift-sweep`,
  };
}

/** The sweep's floor for users: below it the sweep's own actions outweigh what it saves. */
export const MIN_DRIFT_SWEEP_INTERVAL_MS = 10_000;

/**
 * User-facing validation (flags, config file), one line per problem; the CLI
 * calls it before `ensureSchedules`, which accepts shorter intervals so
 * tests need not wait minutes.
 */
export function validateSchedulesConfig(cfg: SchedulesConfig): string[] {
  const problems: string[] = [];
  const nonNegative = (what: string, v: number | undefined) => {
    if (v !== undefined && !(Number.isFinite(v) && v >= 0))
      problems.push(`${what} must be a non-negative duration`);
  };
  nonNegative('gc interval', cfg.gc.intervalMs);
  nonNegative('gc min age', cfg.gc.minAgeMs);
  nonNegative('provider check interval', cfg.providerChecks.intervalMs);
  if (cfg.gc.intervalMs > 0 && cfg.gc.intervalMs < 60_000)
    problems.push('gc interval must be 0 (off) or at least 1m');
  if (cfg.gc.listTimeoutMs !== undefined && !(cfg.gc.listTimeoutMs > 0))
    problems.push('gc list timeout must be positive');
  const every = cfg.providerChecks.intervalMs;
  if (every > 0 && every < MIN_PROVIDER_CHECK_INTERVAL_MS)
    problems.push('provider check interval must be 0 (off) or at least 10s');
  const timeout = cfg.providerChecks.timeoutMs;
  if (timeout !== undefined && every > 0 && !(timeout > 0 && timeout <= every))
    problems.push(`provider check timeout must be positive and at most the interval (${every} ms)`);
  const sweep = cfg.driftSweep?.intervalMs;
  nonNegative('drift sweep interval', sweep);
  if (sweep !== undefined && sweep > 0 && sweep < MIN_DRIFT_SWEEP_INTERVAL_MS)
    problems.push('drift sweep interval must be 0 (off) or at least 10s');
  return problems;
}

/** The round budget: the configured one, else 15 s or the interval when that is shorter. */
export function providerCheckTimeoutMs(intervalMs: number, timeoutMs?: number): number {
  return timeoutMs ?? Math.min(CHECK_DEFAULTS.timeoutMs, intervalMs);
}

/** A schedule's start action, its arguments checked against the workflow's own signature (`W`). */
function startWorkflowAction<W extends Workflow>(
  workflowType: string,
  args: Parameters<W>,
  taskQueue: string,
  workflowId: string,
  runTimeoutMs: number,
): ScheduleOptionsStartWorkflowAction<Workflow> {
  return {
    type: 'startWorkflow',
    workflowType,
    args,
    taskQueue,
    workflowId,
    workflowRunTimeout: runTimeoutMs,
  };
}

async function upsert(
  client: Client,
  scheduleId: string,
  intervalMs: number,
  action: ScheduleOptionsStartWorkflowAction<Workflow>,
  catchupWindowMs: number,
  carried?: LegacyState,
): Promise<ScheduleOutcome> {
  const spec = { intervals: [{ every: intervalMs }] };
  const policies = {
    overlap: ScheduleOverlapPolicy.SKIP,
    catchupWindow: catchupWindowMs,
    pauseOnFailure: false,
  };
  try {
    await client.schedule.create({
      scheduleId,
      spec,
      action,
      policies,
      state: carried?.paused
        ? { paused: true, note: carried.note ?? 'paused before the move from its legacy ID' }
        : { note: 'managed by the egress-proxies worker (ensureSchedules)' },
    });
    return 'created';
  } catch (error) {
    if (!(error instanceof ScheduleAlreadyRunning)) throw error;
  }
  await client.schedule.getHandle(scheduleId).update((prev) => ({
    spec,
    action,
    policies,
    // An operator's pause (and its note) survives a redeploy.
    state: { paused: prev.state.paused, ...(prev.state.note === undefined ? {} : { note: prev.state.note }) },
  }));
  return 'updated';
}

async function remove(client: Client, scheduleId: string): Promise<ScheduleOutcome> {
  try {
    await client.schedule.getHandle(scheduleId).delete();
    return 'deleted';
  } catch (error) {
    if (error instanceof ScheduleNotFoundError) return 'absent';
    throw error;
  }
}

/**
 * An installation on a task queue other than `egress-proxies` used to own
 * the fixed `egress-proxies-*` IDs. Those that start workflows on our task
 * queue are ours from before the upgrade: deleted, or both would run. One on
 * another task queue belongs to another installation and is left alone.
 */
type ScheduleKey = 'gc' | 'providerChecks' | 'driftSweep';

/** An operator's pause, carried from a legacy schedule to the one that replaces it. */
interface LegacyState {
  paused: boolean;
  note?: string;
}

async function removeLegacySchedules(
  client: Client,
  ids: ReturnType<typeof scheduleIds>,
  keys: ScheduleKey[],
  taskQueue: string,
  logger?: Logger,
): Promise<Partial<Record<ScheduleKey, LegacyState>>> {
  const legacy = scheduleIds(LEGACY_SCHEDULE_PREFIX);
  const removed: Partial<Record<ScheduleKey, LegacyState>> = {};
  for (const key of keys) {
    if (legacy[key] === ids[key]) continue;
    let state: LegacyState;
    try {
      const described = await client.schedule.getHandle(legacy[key]).describe();
      if (described.action.type !== 'startWorkflow' || described.action.taskQueue !== taskQueue) continue;
      state = {
        paused: described.state.paused,
        ...(described.state.note ? { note: described.state.note } : {}),
      };
    } catch (error) {
      if (error instanceof ScheduleNotFoundError) continue;
      throw error;
    }
    if ((await remove(client, legacy[key])) === 'deleted') {
      removed[key] = state;
      logger?.info(
        { legacy: legacy[key], now: ids[key], paused: state.paused },
        'replaced a schedule of this task queue under its old ID',
      );
    }
  }
  return removed;
}

/** Creates, updates or deletes the schedules to match `cfg`. Safe to call at every start. */
export async function ensureSchedules(
  client: Client,
  cfg: SchedulesConfig,
  logger?: Logger,
): Promise<{ gc: ScheduleOutcome; providerChecks: ScheduleOutcome; driftSweep?: ScheduleOutcome }> {
  for (const [what, v] of [
    ['gc.intervalMs', cfg.gc.intervalMs],
    ['providerChecks.intervalMs', cfg.providerChecks.intervalMs],
  ] as const) {
    if (!(Number.isFinite(v) && v >= 0)) throw new Error(`${what} must be a non-negative number, got ${v}`);
  }
  const ids = scheduleIds(cfg.idPrefix ?? cfg.taskQueue);
  const managed: ScheduleKey[] = cfg.driftSweep
    ? ['gc', 'providerChecks', 'driftSweep']
    : ['gc', 'providerChecks'];
  const adopted = await removeLegacySchedules(client, ids, managed, cfg.taskQueue, logger);
  const catchup = cfg.catchupWindowMs ?? DEFAULT_CATCHUP_WINDOW_MS;

  let gc: ScheduleOutcome;
  if (cfg.gc.intervalMs === 0) {
    gc = await remove(client, ids.gc);
  } else {
    const input: OrphanGcInput = {
      minAgeMs: cfg.gc.minAgeMs ?? GC_DEFAULTS.minAgeMs,
      listTimeoutMs: cfg.gc.listTimeoutMs ?? GC_DEFAULTS.listTimeoutMs,
      dryRun: cfg.gc.dryRun ?? false,
    };
    // Room for the slowest listing plus the live set and deletions, and never shorter than the interval.
    const runTimeout = Math.max(cfg.gc.intervalMs, input.listTimeoutMs! + 2 * 60_000);
    gc = await upsert(
      client,
      ids.gc,
      cfg.gc.intervalMs,
      startWorkflowAction<typeof orphanGcWorkflow>(
        'orphanGcWorkflow',
        [input],
        cfg.taskQueue,
        ids.gc,
        runTimeout,
      ),
      catchup,
      adopted.gc,
    );
  }

  let providerChecks: ScheduleOutcome;
  const every = cfg.providerChecks.intervalMs;
  if (every === 0) {
    providerChecks = await remove(client, ids.providerChecks);
    try {
      const input: ProviderChecksInput = { cleanupOnly: true };
      await client.workflow.start<typeof providerChecksWorkflow>('providerChecksWorkflow', {
        workflowId: ids.checksCleanup,
        taskQueue: cfg.taskQueue,
        args: [input],
        workflowRunTimeout: 5 * 60_000,
      });
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
  } else {
    const timeoutMs = providerCheckTimeoutMs(every, cfg.providerChecks.timeoutMs);
    const input: ProviderChecksInput = {
      timeoutMs,
      staleAfterMs: Math.max(3 * every, CHECK_DEFAULTS.staleAfterMs),
    };
    const runTimeout = Math.max(every, timeoutMs + 60_000);
    providerChecks = await upsert(
      client,
      ids.providerChecks,
      every,
      startWorkflowAction<typeof providerChecksWorkflow>(
        'providerChecksWorkflow',
        [input],
        cfg.taskQueue,
        ids.providerChecks,
        runTimeout,
      ),
      catchup,
      adopted.providerChecks,
    );
  }
  let driftSweep: ScheduleOutcome | undefined;
  if (cfg.driftSweep && cfg.driftSweep.intervalMs === 0) {
    driftSweep = await remove(client, ids.driftSweep);
  } else if (cfg.driftSweep) {
    const input: DriftSweepInput = {
      listTimeoutMs: cfg.driftSweep.listTimeoutMs ?? DRIFT_SWEEP_DEFAULTS.listTimeoutMs,
    };
    const runTimeout = Math.max(cfg.driftSweep.intervalMs, input.listTimeoutMs + 3 * 60_000);
    driftSweep = await upsert(
      client,
      ids.driftSweep,
      cfg.driftSweep.intervalMs,
      startWorkflowAction<typeof driftSweepWorkflow>(
        'driftSweepWorkflow',
        [input],
        cfg.taskQueue,
        ids.driftSweep,
        runTimeout,
      ),
      catchup,
      adopted.driftSweep,
    );
  }
  logger?.info(
    {
      gc,
      providerChecks,
      driftSweep,
      ids,
      ...(Object.keys(adopted).length > 0 ? { replacedLegacy: adopted } : {}),
    },
    'schedules ensured',
  );
  return { gc, providerChecks, ...(driftSweep ? { driftSweep } : {}) };
}
