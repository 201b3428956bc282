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
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { PoolActivities } from '../../activities/types.js';
import { DEFAULT_MAX_LEASES } from '../../resources/proxy-defaults.js';
import { PATCHES } from '../versions.js';
import { POOL_ACTIVITY_OPTIONS } from './activity-options.js';
import { applyDemandReport, aggregateDemand, decideReplicas, initialAutoscale } from './autoscale.js';
import { budgetCondition, costStatus, observeCost, rotationOverDayBudget, withinBudget } from './budget.js';
import { poolChangedSignal, poolDemandSignal, poolStateQuery } from './messages.js';
import { bannedOut, initialRotation, markBanned, markDue, recordBans } from './rotation.js';
import { applyPoolDesired, available, memberName, planPool, poolConditions } from './state.js';
import {
  DEFAULT_POOL_TIMING,
  type AutoscaleState,
  type PoolDemandReport,
  type PoolMember,
  type PoolState,
  type PoolWorkflowInput,
  type RotationReason,
} from './types.js';

const pool = proxyActivities<PoolActivities>(POOL_ACTIVITY_OPTIONS.members);
const statusWriter = proxyLocalActivities<PoolActivities>(POOL_ACTIVITY_OPTIONS.statusWrite);

const DEFAULT_MAX_HISTORY_EVENTS = 4_000;
/** While the day's budget holds rotation back, look again this often (spending leaves the 24-hour window only as time passes). */
const ROTATION_BUDGET_RECHECK_MS = 5 * 60_000;
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
  // Whether the provider was ready at the last look (the demand handler may not scale up when not).
  let providerReady = true;
  setHandler(poolChangedSignal, (desired) => {
    if (applyPoolDesired(state, desired)) woken = true;
  });
  // When the current wait ends (workflow time), and an earlier moment a
  // demand report asked to decide again at (a recommendation leaving a window).
  let waitingUntilMs = Number.POSITIVE_INFINITY;
  let recheckAtMs: number | undefined;
  setHandler(poolDemandSignal, (report: PoolDemandReport) => {
    // Wakes the loop only when the report changes what the pool does: a
    // steady demand costs the signal and nothing more. A report that moves
    // the next decision earlier than the wait's end shortens the wait (a
    // new timer, no look).
    const outcome = takeDemand(state, report, Date.now(), providerReady);
    if (outcome.changed) woken = true;
    else if (outcome.recheckAtMs !== undefined && outcome.recheckAtMs < waitingUntilMs)
      recheckAtMs = outcome.recheckAtMs;
  });
  setHandler(poolStateQuery, () => ({
    desired: state.desired,
    conditions: state.conditions,
    created: state.created,
    removed: state.removed,
    restored: state.restored,
    ...(state.lastPlan ? { lastPlan: state.lastPlan } : {}),
    looks: state.looks ?? 0,
    ...(state.lastLookMs !== undefined ? { lastLookMs: state.lastLookMs } : {}),
    ...(state.autoscale ? { autoscale: state.autoscale } : {}),
    ...(state.rotation ? { rotation: state.rotation } : {}),
  }));

  const wait = async (ms: number): Promise<void> => {
    waitingUntilMs = Date.now() + ms;
    while (!woken) {
      const ended = !(await condition(() => woken || recheckAtMs !== undefined, waitingUntilMs - Date.now()));
      if (ended || woken) break;
      waitingUntilMs = Math.max(Date.now() + 1, Math.min(waitingUntilMs, recheckAtMs!));
      recheckAtMs = undefined;
    }
    woken = false;
    recheckAtMs = undefined;
    waitingUntilMs = Number.POSITIVE_INFINITY;
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
    const nowMs = Date.now();
    state.lastAvailable = seen.members.filter(available).length;
    state.looks = (state.looks ?? 0) + 1;
    state.lastLookMs = nowMs;
    providerReady = seen.provider?.ready ?? true;
    const timers: number[] = [];
    // What the members cost and what the budget allows, before the size is
    // decided (runs whose list results carry no cost skip all of it).
    const cost = seen.cost ? observeCost(state, seen.cost, nowMs) : undefined;
    const { replicas, wanted } = keepSize(state, nowMs, providerReady, timers);
    // With a day budget, a replacement that would take the last 24 hours over it waits.
    const rotationHeld = cost ? rotationOverDayBudget(state, nowMs) : undefined;
    if (rotationHeld) timers.push(nowMs + ROTATION_BUDGET_RECHECK_MS);
    const { marked, nextDueAtMs } = markRotations(
      state,
      seen.members,
      nowMs,
      providerReady && rotationHeld === undefined,
    );
    if (nextDueAtMs !== undefined) timers.push(nextDueAtMs);
    // Paused by the provider: look again soon to see it back (nothing else would wake the pool).
    if (!providerReady && (state.desired.rotation || state.desired.autoscaling))
      timers.push(nowMs + timing.progressPollMs);
    const plan = planPool(state.desired, seen, state.ref.name, {
      replicas,
      marked,
      ...(state.autoscale ? { leasesByMember: state.autoscale.leasesByMember } : {}),
      ...(state.desired.autoscaling
        ? { minAvailableFloor: withinBudget(state, state.desired.autoscaling.minReplicas) }
        : {}),
    });
    const budget = budgetCondition(
      state,
      seen.provider?.name ?? '',
      wanted,
      state.desired.autoscaling !== undefined,
      rotationHeld,
    );
    const wasLimited = state.conditions.some((c) => c.type === 'BudgetLimited' && c.status === 'True');
    // Whether the autoscaler's want is over the budget (what the demand handler compares with).
    if (cost) cost.limited = budget?.status === 'True' && budget.reason === 'BudgetLimited';
    state.conditions = poolConditions(state, plan, seen, new Date(nowMs), budget ? [budget] : []);
    const status = {
      ...plan.status,
      ...(cost ? costStatus(cost, nowMs) : {}),
      ...extraStatus(state, nowMs, nextDueAtMs, seen.members.some(ends)),
      conditions: state.conditions,
    };
    // An Event when the budget starts holding the pool back (the condition keeps saying so).
    const event =
      budget?.status === 'True' && !wasLimited
        ? { type: 'Warning' as const, reason: budget.reason, note: budget.message }
        : undefined;
    const serialised = JSON.stringify(status);
    if (serialised !== state.lastWrittenStatus) {
      try {
        await statusWriter.writePoolStatus({ pool: state.ref, status, ...(event ? { event } : {}) });
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
    const removeMembers = async (): Promise<void> => {
      if (plan.remove.length === 0) return;
      const batch = plan.remove.slice(0, MAX_MEMBERS_PER_STEP);
      const isRotation = (r: (typeof batch)[number]) =>
        r.why === 'max-age' || r.why === 'banned' || r.why === 'expiring';
      const rotated = batch.filter(isRotation);
      const others = batch.filter((r) => !isRotation(r));
      if (others.length > 0) {
        await pool.deletePoolMembers({
          pool: state.ref,
          members: others.map(({ name, uid }) => ({ name, uid })),
          reason: others.some((r) => r.why === 'rollout') ? 'RollingOut' : 'ScalingDown',
        });
      }
      if (rotated.length > 0) {
        const reasonOf = (why: string): RotationReason =>
          why === 'banned' ? 'Banned' : why === 'expiring' ? 'Expiring' : 'MaxAge';
        await pool.deletePoolMembers({
          pool: state.ref,
          members: rotated.map(({ name, uid, why }) => ({ name, uid, rotation: reasonOf(why) })),
          reason: 'Rotated',
        });
        const rotation = (state.rotation ??= initialRotation());
        rotation.rotatedTotal += rotated.length;
        const last = rotated[rotated.length - 1]!;
        rotation.last = { name: last.name, reason: reasonOf(last.why), atMs: Date.now() };
      }
      state.removed += batch.length;
    };
    const createMembers = async (): Promise<void> => {
      if (plan.create === 0) return;
      const names = Array.from({ length: Math.min(plan.create, MAX_MEMBERS_PER_STEP) }, () =>
        memberName(state.ref.name, Math.random),
      );
      const made = await pool.createPoolMembers({
        pool: state.ref,
        templateHash: state.desired.templateHash,
        names,
      });
      state.created += made.created;
    };
    // Removals first: a member on its way out no longer counts, so making the
    // new ones after keeps live members within replicas + maxSurge (runs
    // started before this order keep theirs).
    if (patched(PATCHES.poolRemoveBeforeCreate.id)) {
      await removeMembers();
      await createMembers();
    } else {
      await createMembers();
      await removeMembers();
    }
    const acted = plan.create > 0 || plan.remove.length > 0 || plan.restore.length > 0;
    // After acting, look again at once when the members' events come in
    // (the bridge signals); the timer is the fallback.
    // Also look again when a member falls due or a recommendation leaves its window.
    const base = acted || plan.progressing ? timing.progressPollMs : timing.resyncMs;
    const soonest = Math.min(base, ...timers.map((at) => Math.max(1_000, at - Date.now())));
    await wait(soonest);
  }
}

/**
 * Takes a demand report in: `changed` when the pool should look again (its
 * size or a member's fate changed), else when the decision could next change.
 */
function takeDemand(
  state: PoolState,
  report: PoolDemandReport,
  nowMs: number,
  providerReady: boolean,
): { changed: boolean; recheckAtMs?: number } {
  const { autoscaling, rotation } = state.desired;
  const maxLeasesPerMember = state.desired.maxLeasesPerMember ?? DEFAULT_MAX_LEASES;
  let changed = false;
  let recheckAtMs: number | undefined;
  if (autoscaling) {
    const scale = (state.autoscale ??= initialAutoscale(autoscaling, state.desired.replicas));
    applyDemandReport(scale, report, nowMs, maxLeasesPerMember, autoscaling);
    const decision = decideReplicas(scale, nowMs, autoscaling, {
      scaleUpAllowed: providerReady,
      lastStepReady: lastStepReady(scale, state.lastAvailable),
    });
    // Within the budget: a want above it changes nothing but the condition, which a look writes once.
    if (withinBudget(state, decision.replicas) !== scale.replicas) changed = true;
    const allowed = state.cost?.allowed;
    if (
      allowed !== undefined &&
      askedFor(scale, decision.replicas, nowMs, autoscaling.scaleDownStabilizationMs) > allowed !==
        Boolean(state.cost?.limited)
    )
      changed = true;
    recheckAtMs = decision.recheckAtMs;
  }
  if (rotation?.afterBans && report.bans.length > 0) {
    const rotationState = (state.rotation ??= initialRotation());
    recordBans(rotationState, report.bans, nowMs, rotation.afterBans.windowMs);
    const burnt = bannedOut(rotationState, rotation.afterBans);
    if (burnt.length > 0) {
      markBanned(rotationState, burnt);
      log.info('members marked for rotation after ban reports', { pool: state.ref, members: burnt });
      changed = true;
    }
  }
  return recheckAtMs === undefined ? { changed } : { changed, recheckAtMs };
}

/**
 * The size to keep now: spec.replicas (kept as asked, even over the
 * budget: the condition says so), or the autoscaler's decision within the
 * budget (timers: when to decide again); and the size asked for before
 * the budget.
 */
function keepSize(
  state: PoolState,
  nowMs: number,
  providerReady: boolean,
  timers: number[],
): { replicas: number; wanted: number } {
  const spec = state.desired.autoscaling;
  if (!spec) {
    delete state.autoscale;
    return { replicas: state.desired.replicas, wanted: state.desired.replicas };
  }
  const scale = (state.autoscale ??= initialAutoscale(spec, state.desired.replicas));
  const decision = decideReplicas(scale, nowMs, spec, {
    scaleUpAllowed: providerReady,
    lastStepReady: lastStepReady(scale, state.lastAvailable),
  });
  const replicas = withinBudget(state, decision.replicas);
  if (replicas !== scale.replicas) {
    log.info('autoscaling', {
      pool: state.ref,
      from: scale.replicas,
      to: replicas,
      ...(replicas < decision.replicas ? { wanted: decision.replicas, capped: 'budget' } : {}),
    });
    scale.replicas = replicas;
    scale.lastScaleMs = nowMs;
  }
  if (decision.recheckAtMs !== undefined) timers.push(decision.recheckAtMs);
  return { replicas, wanted: askedFor(scale, decision.replicas, nowMs, spec.scaleDownStabilizationMs) };
}

/**
 * What demand asks for before the budget: the decision, or the highest
 * recommendation in force within the scale-down window when that is more
 * (the window the pool would not shrink within either, so the answer does
 * not flicker with each report's refusals). One rule for the look and the
 * demand handler, so a report never wakes the pool for a condition the
 * look would not change.
 */
function askedFor(scale: AutoscaleState, decided: number, nowMs: number, windowMs: number): number {
  let most = decided;
  const recs = scale.recommendations;
  for (let i = recs.length - 1; i >= 0; i--) {
    most = Math.max(most, recs[i]![1]);
    if (recs[i]![0] <= nowMs - windowMs) break;
  }
  return most;
}

/** At least 90 % of the size kept is available (all of it below ten members). */
function lastStepReady(scale: { replicas: number }, available: number | undefined): boolean {
  return available === undefined || available >= scale.replicas - Math.floor(scale.replicas / 10);
}

/**
 * Members to replace for age, bans or their provider's end; none while the
 * provider is not ready (rotation pauses). A pool without a rotation spec
 * still replaces members its provider ends by itself (vendor sessions):
 * runs from before that saw no member with an end (the list activity's
 * results in their histories carry none), so they take the same path.
 */
function markRotations(
  state: PoolState,
  members: readonly PoolMember[],
  nowMs: number,
  providerReady: boolean,
): { marked: Readonly<Record<string, RotationReason>>; nextDueAtMs?: number } {
  const spec = state.desired.rotation;
  if (!spec && !members.some(ends)) {
    if (state.rotation) state.rotation.marked = {};
    return { marked: {} };
  }
  const rotation = (state.rotation ??= initialRotation());
  if (!providerReady) return { marked: {} };
  const { nextDueAtMs } = markDue(
    rotation,
    members,
    spec,
    nowMs,
    state.desired.strategy.drainTimeoutSeconds * 1000,
  );
  return nextDueAtMs === undefined ? { marked: rotation.marked } : { marked: rotation.marked, nextDueAtMs };
}

/** A live member its provider ends by itself. */
const ends = (m: PoolMember): boolean => m.expiresAt !== undefined && !m.deleting;

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** The autoscaling and rotation parts of the status. */
function extraStatus(
  state: PoolState,
  nowMs: number,
  nextDueAtMs: number | undefined,
  membersEnd: boolean,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const scale = state.autoscale;
  if (state.desired.autoscaling && scale) {
    const demand = aggregateDemand(scale, nowMs);
    const capacity = scale.replicas * (state.desired.maxLeasesPerMember ?? DEFAULT_MAX_LEASES);
    const latest = Math.max(0, ...Object.values(scale.reports).map((r) => r.atMs));
    out.autoscaling = {
      ...(demand
        ? {
            activeLeases: demand.activeLeases,
            recentDenials: demand.denials,
            leaseCapacity: capacity,
            utilizationPercent: capacity > 0 ? Math.round((100 * demand.activeLeases) / capacity) : 0,
          }
        : {}),
      ...(scale.recommendations.length > 0
        ? { recommendation: scale.recommendations[scale.recommendations.length - 1]![1] }
        : {}),
      ...(scale.lastScaleMs !== undefined ? { lastScaleTime: iso(scale.lastScaleMs) } : {}),
      ...(latest > 0 ? { lastReportTime: iso(latest) } : {}),
    };
  }
  const rotation = state.rotation;
  // Without a rotation spec, only a pool whose members end by themselves,
  // or did (a Spot member replaced once its notice came), shows it (runs
  // from before saw no such member: the same status).
  if (rotation && (state.desired.rotation || membersEnd || rotation.last !== undefined)) {
    const nextDue = nextDueAtMs;
    out.rotation = {
      rotatedTotal: rotation.rotatedTotal,
      ...(rotation.last
        ? {
            lastRotated: rotation.last.name,
            lastRotationReason: rotation.last.reason,
            lastRotationTime: iso(rotation.last.atMs),
          }
        : {}),
      ...(nextDue !== undefined ? { nextRotationTime: iso(nextDue) } : {}),
    };
  }
  return out;
}
