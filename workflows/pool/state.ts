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
import type {
  PoolDesired,
  PoolMember,
  PoolObservation,
  PoolPlan,
  PoolState,
  RotationReason,
} from './types.js';
import { withTransitionTimes, type ConditionSpec } from '../conditions.js';

const POOL_LABEL = 'crawl.example.com/pool';

/** Order of removal: not-Ready first, then the fewest leases, then the oldest (then by name: deterministic). */
export function removalOrder(leases: Readonly<Record<string, number>> = {}) {
  return (a: PoolMember, b: PoolMember): number => {
    if (a.ready !== b.ready) return a.ready ? 1 : -1;
    const la = leases[a.uid] ?? 0;
    const lb = leases[b.uid] ?? 0;
    if (la !== lb) return la - lb;
    if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1;
    return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  };
}

export function available(m: PoolMember): boolean {
  return m.ready && !m.deleting && !m.draining;
}

export interface PlanOptions {
  /** The size to keep (spec.replicas, or the autoscaler's choice); desired.replicas by default. */
  replicas?: number;
  /** Members marked for rotation, by UID: replaced as a rollout replaces old ones. */
  marked?: Readonly<Record<string, RotationReason>>;
  /** Leases per member UID (scale-down takes the idlest first). */
  leasesByMember?: Readonly<Record<string, number>>;
  /** Never fewer available members than this (autoscaling's minReplicas). */
  minAvailableFloor?: number;
}

export function planPool(
  desired: PoolDesired,
  seen: PoolObservation,
  poolName: string,
  options: PlanOptions = {},
): PoolPlan {
  const replicas = options.replicas ?? desired.replicas;
  const marked = options.marked ?? {};
  const order = removalOrder(options.leasesByMember);
  const { maxSurge, maxUnavailable } = desired.strategy;
  const hash = desired.templateHash;
  const live = seen.members.filter((m) => !m.deleting);
  const replaced = (m: PoolMember) => m.templateHash !== hash || marked[m.uid] !== undefined;
  const current = live.filter((m) => !replaced(m));
  const old = live.filter(replaced);
  const minAvailable = Math.max(0, replicas - maxUnavailable, options.minAvailableFloor ?? 0);
  let availableCount = live.filter(available).length;

  const remove: PoolPlan['remove'] = [];
  let liveAfter = live.length;
  const take = (m: PoolMember, why: PoolPlan['remove'][number]['why']): boolean => {
    // Taking an available member must leave enough available ones.
    if (available(m)) {
      if (availableCount - 1 < minAvailable) return false;
      availableCount--;
    }
    remove.push({ name: m.name, uid: m.uid, why });
    liveAfter--;
    return true;
  };

  // Old and marked members go as the rollout allows; not-Ready ones first
  // (they serve nobody), then banned ones, then the rest by the usual order.
  const banned = (m: PoolMember) => (marked[m.uid] === 'Banned' ? 0 : 1);
  for (const m of [...old].sort((a, b) => banned(a) - banned(b) || order(a, b))) {
    const reason = marked[m.uid];
    take(
      m,
      m.templateHash !== hash || reason === undefined
        ? 'rollout'
        : reason === 'Banned'
          ? 'banned'
          : reason === 'Expiring'
            ? 'expiring'
            : 'max-age',
    );
  }
  // Current members beyond replicas (a scale-down, or a surge that overshot).
  const currentSurplus = current.length - replicas;
  if (currentSurplus > 0) {
    let taken = 0;
    for (const m of [...current].sort(order)) {
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
    updatedReplicas: live.filter((m) => m.templateHash === hash).length,
    availableReplicas: live.filter(available).length,
    drainingReplicas: draining,
    selector: `${POOL_LABEL}=${poolName}`,
    templateHash: hash,
    observedGeneration: desired.generation,
    desiredReplicas: replicas,
  };
  const rotating = old.filter((m) => m.templateHash === hash).length;
  return { create, remove, restore, progressing, rotating, status };
}

/**
 * Available and Progressing, with Kubernetes semantics (lastTransitionTime
 * moves only on a change of status); ProviderReady too when the pool
 * rotates or autoscales, since a provider outage pauses both.
 */
export function poolConditions(
  state: PoolState,
  plan: PoolPlan,
  seen: PoolObservation,
  now: Date,
  /** More conditions decided elsewhere (BudgetLimited, budget.ts). */
  extra: readonly ConditionSpec[] = [],
): Condition[] {
  const { desired } = state;
  const s = plan.status;
  const replicas = s.desiredReplicas ?? desired.replicas;
  const minAvailable = Math.max(0, replicas - desired.strategy.maxUnavailable);
  const availableOk = (s.availableReplicas ?? 0) >= minAvailable;
  const old = (s.replicas ?? 0) - (s.updatedReplicas ?? 0);
  const specs: ConditionSpec[] = [
    {
      type: 'Available',
      status: availableOk ? 'True' : 'False',
      reason: availableOk ? 'MinimumReplicasAvailable' : 'MinimumReplicasUnavailable',
      message: `${s.availableReplicas ?? 0} of ${replicas} available (at least ${minAvailable} wanted)`,
    },
    progressingCondition(plan, old, seen),
  ];
  if ((desired.autoscaling || desired.rotation) && seen.provider) {
    const { name, ready, message } = seen.provider;
    specs.push(
      ready
        ? {
            type: 'ProviderReady',
            status: 'True',
            reason: 'ProviderReady',
            message: `provider ${name} is ready`,
          }
        : {
            type: 'ProviderReady',
            status: 'False',
            reason: 'ProviderNotReady',
            message: `rotation and scale-up paused: provider ${name} is not ready: ${message}`.slice(0, 1024),
          },
    );
  }
  specs.push(...extra);
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
  if (plan.rotating > 0)
    return c(
      'True',
      'Rotating',
      `${plan.rotating} ${plan.rotating === 1 ? 'proxy' : 'proxies'} being replaced (age or bans)`,
    );
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
