/**
 * The ProxyPool's decisions as pure functions: from what it wants (replicas,
 * template hash, strategy) and what it sees (its members), how many to
 * make, which to remove and in what order, which to put back, and the
 * status that says so. No Temporal API here; workflow.ts runs the plan.
 *
 * The rules are a Deployment's, over Proxies instead of Pods:
 * - members on their way out (deleting: draining, then deleted) count for
 *   nothing: not towards replicas, not towards the surge;
 * - a rollout makes new members while the live ones stay within
 *   `replicas + maxSurge`, and removes old ones only while at least
 *   `replicas - maxUnavailable` members stay available (Ready and not
 *   draining): new ones take over before old ones drain;
 * - a scale-down removes the surplus, not-Ready first, then the oldest.
 */
import type { Condition, ProxyPoolStatus } from '../../resources/proxy-schema.js';
import type { PoolDesired, PoolMember, PoolObservation, PoolPlan, PoolState } from './types.js';
import { withTransitionTimes, type ConditionSpec } from '../conditions.js';

const POOL_LABEL = 'crawl.example.com/pool';

/** Order of removal: not-Ready first, then the oldest (then by name, so the plan is deterministic). */
export function removalOrder(a: PoolMember, b: PoolMember): number {
  if (a.ready !== b.ready) return a.ready ? 1 : -1;
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
  return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
}

export function available(m: PoolMember): boolean {
  return m.ready && !m.deleting && !m.draining;
}

export function planPool(desired: PoolDesired, seen: PoolObservation, poolName: string): PoolPlan {
  const replicas = desired.replicas;
  const { maxSurge, maxUnavailable } = desired.strategy;
  const hash = desired.templateHash;
  const live = seen.members.filter((m) => !m.deleting);
  const current = live.filter((m) => m.templateHash === hash);
  const old = live.filter((m) => m.templateHash !== hash);
  const minAvailable = Math.max(0, replicas - maxUnavailable);
  let availableCount = live.filter(available).length;

  const remove: PoolPlan['remove'] = [];
  let liveAfter = live.length;
  const take = (m: PoolMember, why: 'scale-down' | 'rollout'): boolean => {
    // Taking an available member must leave enough available ones.
    if (available(m)) {
      if (availableCount - 1 < minAvailable) return false;
      availableCount--;
    }
    remove.push({ name: m.name, uid: m.uid, why });
    liveAfter--;
    return true;
  };

  // Old members go as the rollout allows; not-Ready ones first (they serve nobody).
  for (const m of [...old].sort(removalOrder)) take(m, 'rollout');
  // Current members beyond replicas (a scale-down, or a surge that overshot).
  const currentSurplus = current.length - replicas;
  if (currentSurplus > 0) {
    let taken = 0;
    for (const m of [...current].sort(removalOrder)) {
      if (taken >= currentSurplus) break;
      if (take(m, 'scale-down')) taken++;
    }
  }

  // New members: up to replicas of the current template, within the surge.
  const stillCurrent = current.length - remove.filter((r) => r.why === 'scale-down').length;
  const wanted = Math.max(0, replicas - stillCurrent);
  const room = Math.max(0, replicas + maxSurge - liveAfter);
  const create = Math.min(wanted, room);

  const restore = current.filter((m) => !m.matchesTemplate).map((m) => ({ name: m.name, uid: m.uid }));

  const draining = seen.members.filter((m) => m.deleting || m.draining).length;
  const progressing =
    create > 0 ||
    remove.length > 0 ||
    restore.length > 0 ||
    old.length > 0 ||
    current.length !== replicas ||
    draining > 0 ||
    current.some((m) => !m.ready);

  const status: ProxyPoolStatus = {
    replicas: live.length,
    readyReplicas: live.filter((m) => m.ready).length,
    updatedReplicas: current.length,
    availableReplicas: live.filter(available).length,
    drainingReplicas: draining,
    selector: `${POOL_LABEL}=${poolName}`,
    templateHash: hash,
    observedGeneration: desired.generation,
  };
  return { create, remove, restore, progressing, status };
}

/** Available and Progressing, with Kubernetes semantics (lastTransitionTime moves only on a change of status). */
export function poolConditions(
  state: PoolState,
  plan: PoolPlan,
  seen: PoolObservation,
  now: Date,
): Condition[] {
  const { desired } = state;
  const s = plan.status;
  const minAvailable = Math.max(0, desired.replicas - desired.strategy.maxUnavailable);
  const availableOk = (s.availableReplicas ?? 0) >= minAvailable;
  const old = (s.replicas ?? 0) - (s.updatedReplicas ?? 0);
  const specs: ConditionSpec[] = [
    {
      type: 'Available',
      status: availableOk ? 'True' : 'False',
      reason: availableOk ? 'MinimumReplicasAvailable' : 'MinimumReplicasUnavailable',
      message: `${s.availableReplicas ?? 0} of ${desired.replicas} available (at least ${minAvailable} wanted)`,
    },
    progressingCondition(plan, old, seen),
  ];
  return withTransitionTimes(specs, state.conditions, desired.generation, now);
}

function progressingCondition(plan: PoolPlan, old: number, seen: PoolObservation): ConditionSpec {
  const s = plan.status;
  const c = (status: 'True' | 'False', reason: string, message: string): ConditionSpec => ({
    type: 'Progressing',
    status,
    reason,
    message,
  });
  if (!plan.progressing)
    return c('False', 'Complete', `${s.updatedReplicas} proxies from template ${s.templateHash}`);
  if (old > 0) return c('True', 'RollingOut', `${s.updatedReplicas} updated, ${old} from an older template`);
  const draining = seen.members.filter((m) => m.deleting).length;
  if (plan.remove.length > 0 || (draining > 0 && plan.create === 0))
    return c('True', 'ScalingDown', `${draining + plan.remove.length} proxies draining or going`);
  if (plan.restore.length > 0) return c('True', 'Restoring', `${plan.restore.length} proxies edited by hand`);
  return c('True', 'ScalingUp', `${s.readyReplicas} of ${s.updatedReplicas} ready`);
}

/** Deterministic member names: the pool's name and five characters from the workflow's seeded random. */
export function memberName(poolName: string, random: () => number): string {
  const alphabet = 'bcdfghjklmnpqrstvwxz2456789';
  let suffix = '';
  for (let i = 0; i < 5; i++) suffix += alphabet[Math.floor(random() * alphabet.length)];
  // Names are DNS subdomains (253); the suffix must survive a long pool name.
  return `${poolName.slice(0, 240)}-${suffix}`;
}

/** Applies a bridge report; an older generation never undoes a newer one; deletion is one-way. */
export function applyPoolDesired(state: PoolState, incoming: PoolDesired): boolean {
  const current = state.desired;
  if (incoming.generation < current.generation) {
    // An older spec, but the members may have moved: take only that.
    if (incoming.membersVersion === current.membersVersion && !incoming.deletionRequested) return false;
    state.desired = {
      ...current,
      membersVersion: incoming.membersVersion,
      deletionRequested: current.deletionRequested || incoming.deletionRequested,
    };
    return true;
  }
  const next = { ...incoming, deletionRequested: current.deletionRequested || incoming.deletionRequested };
  if (JSON.stringify(next) === JSON.stringify(current)) return false;
  state.desired = next;
  return true;
}
