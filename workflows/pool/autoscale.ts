/**
 * The pool's autoscaler as pure functions: from the lease API replicas'
 * demand reports, the size that covers the leases held at the target
 * utilization plus the requests refused, smoothed by HPA-style
 * stabilization windows so the pool never flaps.
 *
 * - A recommendation is `ceil(held / (maxLeases x target))`, or, while
 *   requests are refused, maxReplicas; clamped to [min, max].
 * - A step up is at most a doubling (or +4), and the next step waits until
 *   the last one's members are up, so refusals while new members boot do
 *   not compound.
 * - Scaling up takes the lowest recommendation of the scale-up window, and
 *   scaling down the highest of the scale-down window: a size is changed
 *   only when every recommendation of its window agrees, so at most one
 *   change of direction per window.
 *
 * Both the workflow (deciding) and the api (deciding whether a report is
 * worth sending) use `recommendReplicas`.
 */
import type { AutoscaleState, PoolAutoscaling, PoolDemandReport } from './types.js';

/** Reports older than this no longer count towards the aggregate (a replica that went away). */
export const REPORT_EXPIRY_MS = 30 * 60_000;
/** Recommendations kept at most (one per report; the windows are what matters). */
const MAX_RECOMMENDATIONS = 500;

export interface DemandFigures {
  activeLeases: number;
  denials: number;
}

export function recommendReplicas(
  demand: DemandFigures,
  current: number,
  maxLeasesPerMember: number,
  spec: Pick<PoolAutoscaling, 'minReplicas' | 'maxReplicas' | 'targetUtilization'>,
): number {
  const clamp = (n: number) => Math.min(spec.maxReplicas, Math.max(spec.minReplicas, n));
  // A member that takes no leases gives no capacity: the demand cannot size the pool.
  if (maxLeasesPerMember <= 0) return clamp(current);
  // Refused requests mean the pool is short now, and how short is unknown
  // (a refused crawler retries at its own pace, so refusals per report
  // undercount it): as large as allowed; the step limit in decideReplicas
  // makes that a doubling per step while members come up.
  if (demand.denials > 0) return spec.maxReplicas;
  const perMember = maxLeasesPerMember * spec.targetUtilization;
  return clamp(Math.ceil(demand.activeLeases / perMember - 1e-9));
}

/** The largest step up from `current`: double, or four more. */
export function fastestGrowth(current: number): number {
  return Math.max(current * 2, current + 4);
}

/** Held leases and refusals across reporters: a shared store is seen whole by each (max), private ones add up. */
export function aggregateDemand(state: AutoscaleState, nowMs: number): DemandFigures | undefined {
  const fresh = Object.values(state.reports).filter((r) => nowMs - r.atMs <= REPORT_EXPIRY_MS);
  if (fresh.length === 0) return undefined;
  const shared = fresh.filter((r) => r.sharedStore);
  const own = fresh.filter((r) => !r.sharedStore);
  const activeLeases =
    (shared.length > 0 ? Math.max(...shared.map((r) => r.activeLeases)) : 0) +
    own.reduce((sum, r) => sum + r.activeLeases, 0);
  const denials = fresh.reduce((sum, r) => sum + r.denials, 0);
  return { activeLeases, denials };
}

export function initialAutoscale(spec: PoolAutoscaling, specReplicas: number): AutoscaleState {
  return {
    replicas: Math.min(spec.maxReplicas, Math.max(spec.minReplicas, specReplicas)),
    reports: {},
    leasesByMember: {},
    recommendations: [],
  };
}

/** Takes a report in: the reporter's figures, and a recommendation made now. */
export function applyDemandReport(
  state: AutoscaleState,
  report: PoolDemandReport,
  nowMs: number,
  maxLeasesPerMember: number,
  spec: PoolAutoscaling,
): void {
  state.reports[report.reporter] = {
    atMs: nowMs,
    sharedStore: report.sharedStore,
    activeLeases: report.activeLeases,
    denials: report.denials,
  };
  for (const [reporter, r] of Object.entries(state.reports)) {
    if (nowMs - r.atMs > REPORT_EXPIRY_MS) delete state.reports[reporter];
  }
  state.leasesByMember = { ...report.leasesByMember };
  const demand = aggregateDemand(state, nowMs);
  if (!demand) return;
  state.recommendations.push([nowMs, recommendReplicas(demand, state.replicas, maxLeasesPerMember, spec)]);
  pruneRecommendations(state, nowMs, spec);
}

function pruneRecommendations(state: AutoscaleState, nowMs: number, spec: PoolAutoscaling): void {
  const keep = Math.max(spec.scaleUpStabilizationMs, spec.scaleDownStabilizationMs);
  const recs = state.recommendations;
  // Keep the newest one outside the windows too: it is still the standing recommendation.
  while (recs.length > 1 && nowMs - recs[1]![0] >= keep) recs.shift();
  while (recs.length > MAX_RECOMMENDATIONS) recs.shift();
}

export interface ScaleDecision {
  replicas: number;
  /** When the decision could change with no new report (a recommendation leaving a window). */
  recheckAtMs?: number;
}

/**
 * The size to keep now. A recommendation stands until the next one, so each
 * window is judged on the recommendations in force during it: those made
 * within it, and the one made before it began.
 */
export function decideReplicas(
  state: AutoscaleState,
  nowMs: number,
  spec: PoolAutoscaling,
  limits: {
    /** False while the provider is not ready: no scale-up. */
    scaleUpAllowed: boolean;
    /** The members of the last step are up (a step's refusals say nothing until they are). */
    lastStepReady?: boolean;
  },
): ScaleDecision {
  const recs = state.recommendations;
  const current = Math.min(spec.maxReplicas, Math.max(spec.minReplicas, state.replicas));
  if (recs.length === 0) return { replicas: current };
  const inForce = (windowMs: number): number[] => {
    const start = nowMs - windowMs;
    const values: number[] = [];
    for (let i = recs.length - 1; i >= 0; i--) {
      values.push(recs[i]![1]);
      if (recs[i]![0] <= start) break;
    }
    return values;
  };
  const upFloor = Math.min(...inForce(spec.scaleUpStabilizationMs));
  const downCeiling = Math.max(...inForce(spec.scaleDownStabilizationMs));
  let replicas = current;
  if (upFloor > current && limits.scaleUpAllowed && limits.lastStepReady !== false)
    replicas = Math.min(upFloor, fastestGrowth(current));
  else if (downCeiling < current) replicas = downCeiling;
  // The next moment a recommendation leaves a window and the answer may move.
  let recheckAtMs: number | undefined;
  for (const [atMs] of recs.slice(1)) {
    for (const windowMs of [spec.scaleUpStabilizationMs, spec.scaleDownStabilizationMs]) {
      const leaves = atMs + windowMs;
      if (leaves > nowMs && (recheckAtMs === undefined || leaves < recheckAtMs)) recheckAtMs = leaves;
    }
  }
  return recheckAtMs === undefined ? { replicas } : { replicas, recheckAtMs };
}
