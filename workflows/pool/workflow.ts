/**
 * The per-ProxyPool entity workflow: keeps `replicas` Proxies made from the
 * pool's template, rolls them over to a new template (surge, then drain),
 * puts back members edited or deleted by hand, and writes the pool's
 * status (its single writer). On the pool's deletion it deletes every
 * member and ends once they are gone (their own workflows drain and delete
 * the instances, then remove the finalizers).
 *
 * One loop, as the Proxy workflow: look (one list activity), plan
 * (state.ts, pure), act through activities, then wait for the bridge's
 * signal or a timer. A steady pool costs a timer and a list per resync.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { PoolActivities } from '../../activities/types.js';
import { POOL_ACTIVITY_OPTIONS } from './activity-options.js';
import { poolChangedSignal, poolStateQuery } from './messages.js';
import { applyPoolDesired, memberName, planPool, poolConditions } from './state.js';
import { DEFAULT_POOL_TIMING, type PoolState, type PoolWorkflowInput } from './types.js';

const pool = proxyActivities<PoolActivities>(POOL_ACTIVITY_OPTIONS.members);
const statusWriter = proxyLocalActivities<PoolActivities>(POOL_ACTIVITY_OPTIONS.statusWrite);

const DEFAULT_MAX_HISTORY_EVENTS = 4_000;
/**
 * Members made or deleted per step: one activity makes them one after the
 * other within its one-minute timeout, and the next step follows at once
 * (the members' events wake it), so a pool of thousands grows in steps.
 */
const MAX_MEMBERS_PER_STEP = 50;

export async function proxyPoolWorkflow(input: PoolWorkflowInput): Promise<void> {
  const timing = { ...DEFAULT_POOL_TIMING, ...input.timing };
  const maxHistoryEvents = input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS;
  const state: PoolState = input.carried ?? {
    ref: input.ref,
    desired: input.desired,
    conditions: [],
    created: 0,
    removed: 0,
    restored: 0,
  };
  let woken = false;
  setHandler(poolChangedSignal, (desired) => {
    if (applyPoolDesired(state, desired)) woken = true;
  });
  setHandler(poolStateQuery, () => ({
    desired: state.desired,
    conditions: state.conditions,
    created: state.created,
    removed: state.removed,
    restored: state.restored,
    ...(state.lastPlan ? { lastPlan: state.lastPlan } : {}),
  }));

  const wait = async (ms: number): Promise<void> => {
    if (!woken) await condition(() => woken, ms);
    woken = false;
  };

  const maybeContinueAsNew = async (): Promise<void> => {
    const info = workflowInfo();
    if (!info.continueAsNewSuggested && info.historyLength < maxHistoryEvents) return;
    await condition(allHandlersFinished);
    await continueAsNew<typeof proxyPoolWorkflow>({ ...input, desired: state.desired, carried: state });
  };

  for (;;) {
    await maybeContinueAsNew();
    woken = false;
    const seen = await pool.listPoolMembers({ pool: state.ref });
    if (!seen.poolExists || state.desired.deletionRequested) {
      const left = seen.members.filter((m) => !m.deleting);
      if (seen.members.length === 0) {
        log.info('pool deleted and every member gone', { pool: state.ref });
        return;
      }
      const batch = left.slice(0, MAX_MEMBERS_PER_STEP);
      if (batch.length > 0) {
        await pool.deletePoolMembers({
          pool: state.ref,
          members: batch.map((m) => ({ name: m.name, uid: m.uid })),
          reason: 'PoolDeleted',
        });
        state.removed += batch.length;
      }
      // More to delete: the next batch at once; else wait for them to go.
      if (left.length > batch.length) continue;
      await wait(timing.progressPollMs);
      continue;
    }
    // The bridge's hash is the pool as it saw it; the apiserver's is newer
    // when they differ, and the bridge's next signal will say so too.
    if (seen.templateHash && seen.templateHash !== state.desired.templateHash) {
      state.desired = { ...state.desired, templateHash: seen.templateHash };
    }
    const plan = planPool(state.desired, seen, state.ref.name);
    state.conditions = poolConditions(state, plan, seen, new Date());
    const status = { ...plan.status, conditions: state.conditions };
    const serialised = JSON.stringify(status);
    if (serialised !== state.lastWrittenStatus) {
      try {
        await statusWriter.writePoolStatus({ pool: state.ref, status });
        state.lastWrittenStatus = serialised;
      } catch (error) {
        log.warn('pool status write failed; will retry on the next change', {
          error: error instanceof Error ? error.message : String(error),
        });
      }
    }
    state.lastPlan = {
      create: plan.create,
      remove: plan.remove.length,
      restore: plan.restore.length,
      progressing: plan.progressing,
    };
    if (plan.restore.length > 0) {
      await pool.restorePoolMembers({
        pool: state.ref,
        templateHash: state.desired.templateHash,
        members: plan.restore,
      });
      state.restored += plan.restore.length;
    }
    if (plan.create > 0) {
      const names = Array.from({ length: Math.min(plan.create, MAX_MEMBERS_PER_STEP) }, () =>
        memberName(state.ref.name, Math.random),
      );
      const made = await pool.createPoolMembers({
        pool: state.ref,
        templateHash: state.desired.templateHash,
        names,
      });
      state.created += made.created;
    }
    if (plan.remove.length > 0) {
      await pool.deletePoolMembers({
        pool: state.ref,
        members: plan.remove.slice(0, MAX_MEMBERS_PER_STEP).map(({ name, uid }) => ({ name, uid })),
        reason: plan.remove.some((r) => r.why === 'rollout') ? 'RollingOut' : 'ScalingDown',
      });
      state.removed += Math.min(plan.remove.length, MAX_MEMBERS_PER_STEP);
    }
    const acted = plan.create > 0 || plan.remove.length > 0 || plan.restore.length > 0;
    // After acting, look again at once when the members' events come in
    // (the bridge signals); the timer is the fallback.
    await wait(acted || plan.progressing ? timing.progressPollMs : timing.resyncMs);
  }
}
