/**
 * Serialisable types of the ProxyPool workflow. The template itself never
 * enters history (it may hold inline cloud-init): the workflow knows the
 * template by its hash, and the activities read the pool for the rest.
 */
import type { Condition, ProxyPoolStatus } from '../../resources/proxy-schema.js';

export interface PoolRef {
  namespace: string;
  name: string;
  uid: string;
}

export interface PoolStrategy {
  maxSurge: number;
  maxUnavailable: number;
  drainTimeoutSeconds: number;
}

/** `spec.autoscaling`, in milliseconds. */
export interface PoolAutoscaling {
  minReplicas: number;
  maxReplicas: number;
  /** Wanted activeLeases / (members x maxLeases), in (0, 1]. */
  targetUtilization: number;
  scaleUpStabilizationMs: number;
  scaleDownStabilizationMs: number;
}

/** `spec.rotation`, in milliseconds. */
export interface PoolRotation {
  maxAgeMs?: number;
  afterBans?: { reports: number; distinctTargets: number; windowMs: number };
}

/** `spec.budget`, in the providers config's currency. */
export interface PoolBudget {
  maxPerHour: number;
  maxPerDay?: number;
}

/** What the bridge saw of the pool and its members. Idempotent by (generation, membersVersion). */
export interface PoolDesired {
  generation: number;
  replicas: number;
  templateHash: string;
  strategy: PoolStrategy;
  autoscaling?: PoolAutoscaling;
  rotation?: PoolRotation;
  /** What the pool's instances may cost (absent in runs started before budgets). */
  budget?: PoolBudget;
  /** The template's maxLeases: one member's share of lease capacity (absent in runs started before autoscaling). */
  maxLeasesPerMember?: number;
  deletionRequested: boolean;
  /**
   * A digest of what the bridge saw of the pool's members (each one's
   * existence, readiness, drain and template hash): a new value wakes the
   * pool to look again.
   */
  membersVersion: string;
}

/** One Proxy the pool controls, as the list activity saw it. */
export interface PoolMember {
  name: string;
  uid: string;
  /** Its template-hash label. */
  templateHash: string;
  /** The Ready condition is True (leasable by the lease API's rule). */
  ready: boolean;
  /** Has a deletionTimestamp: on its way out (draining, then deleted). */
  deleting: boolean;
  /** The Draining condition is True. */
  draining: boolean;
  /** RFC 3339 creationTimestamp. */
  createdAt: string;
  /** RFC 3339 status.expiresAt: when its provider ends it by itself (a vendor session). */
  expiresAt?: string;
  /** Spec, labels and annotations are what the pool's current template makes (false: edited by hand). */
  matchesTemplate: boolean;
}

export interface PoolObservation {
  /** The pool with this UID still exists. */
  poolExists: boolean;
  /** The template hash of the pool as read now ('' when it is gone). */
  templateHash: string;
  members: PoolMember[];
  /**
   * The template's provider as this worker sees it: its ProviderHealth's
   * Ready condition and this worker's circuit. Not ready pauses rotation
   * and scale-up (replacing them would only churn).
   */
  provider?: { name: string; ready: boolean; message: string };
  /**
   * What the members cost, from the worker's providers config (absent in
   * runs from before prices: their histories' results carry none, and the
   * pool then writes no cost and keeps no budget).
   */
  cost?: PoolCostObservation;
}

export interface PoolCostObservation {
  /** The providers config's currency (absent: it names no prices). */
  currency?: string;
  /** One member's price per hour (its entry's, for the template's machine type); absent: unknown. */
  perInstanceHour?: number;
  /** Members whose instance runs now (phase Provisioning, Ready, Unhealthy or Deleting). */
  running: number;
}

/**
 * What one lease API replica tells a pool about its demand (signal
 * `poolDemand`): sent when the figure would change the pool's size, when
 * requests are refused, when crawlers report bans, and as a heartbeat.
 */
export interface PoolDemandReport {
  /** The api replica (its host name and process id). */
  reporter: string;
  /** The replica's lease store is shared (Redis): every reporter sees every lease. */
  sharedStore: boolean;
  /** Leases held on the pool's members. */
  activeLeases: number;
  /** Leases held per member UID (members with none absent): scale-down takes the idlest. */
  leasesByMember: Record<string, number>;
  /** Lease requests refused (409) that this pool would have served, since this reporter's last report. */
  denials: number;
  /** `banned` reports on members since the last report (at most 100 a report). */
  bans: Array<{ uid: string; target: string; atMs: number }>;
}

/** Expiring: its provider ends it by itself soon (status.expiresAt), rotation spec or not. */
export type RotationReason = 'MaxAge' | 'Banned' | 'Expiring';

export interface PoolPlan {
  /** How many new members to make from the current template. */
  create: number;
  /** Members to delete (each drains first), in the order chosen. */
  remove: Array<{
    name: string;
    uid: string;
    why: 'scale-down' | 'rollout' | 'max-age' | 'banned' | 'expiring';
  }>;
  /** Members edited by hand to put back to the template. */
  restore: Array<{ name: string; uid: string }>;
  /** What is still under way (a rollout, a scale, a drain): the pool looks again soon. */
  progressing: boolean;
  /** Members of the current template marked for rotation, not yet gone. */
  rotating: number;
  status: ProxyPoolStatus;
}

export interface PoolState {
  ref: PoolRef;
  desired: PoolDesired;
  /** Last status written, canonical JSON. */
  lastWrittenStatus?: string;
  conditions: Condition[];
  /** Members created so far, over the pool's life (for names and the query). */
  created: number;
  removed: number;
  restored: number;
  lastPlan?: { create: number; remove: number; restore: number; progressing: boolean };
  /** Looks (list, plan, act) taken by this run and the ones it continues. */
  looks?: number;
  /** When the last look was taken (workflow time, epoch ms). */
  lastLookMs?: number;
  /** Members available (Ready, not draining) at the last look. */
  lastAvailable?: number;
  /** The autoscaler's state (absent while the pool has no spec.autoscaling). */
  autoscale?: AutoscaleState;
  /** Rotation's state: ban tallies, members marked for replacement, the last rotation. */
  rotation?: RotationState;
  /** The instance cost the pool has seen, and what its budget allows (absent until a look observes a cost). */
  cost?: CostState;
}

export interface CostState {
  /** The run rate per hour from each look on (workflow time, epoch ms), oldest first; a day at most. */
  rates: Array<[atMs: number, perHour: number]>;
  /** The latest observation. */
  seen: PoolCostObservation;
  /** Members the budget pays for at the latest price (absent: no budget, or the price is unknown). */
  allowed?: number;
  /** The autoscaler's want was over the budget at the latest look (a report that changes it wakes the pool). */
  limited?: boolean;
}

export interface AutoscaleState {
  /** The size the pool keeps now. */
  replicas: number;
  /** Latest report per reporter. */
  reports: Record<string, { atMs: number; sharedStore: boolean; activeLeases: number; denials: number }>;
  /** Leases per member UID, from the latest report. */
  leasesByMember: Record<string, number>;
  /** Recommendations with the time they were made, oldest first, kept for the stabilization windows. */
  recommendations: Array<[atMs: number, replicas: number]>;
  lastScaleMs?: number;
}

export interface RotationState {
  /** Ban reports per member UID: [target, atMs], within the window. */
  bans: Record<string, Array<[target: string, atMs: number]>>;
  /** Members marked for replacement, and why. */
  marked: Record<string, RotationReason>;
  rotatedTotal: number;
  last?: { name: string; reason: RotationReason; atMs: number };
}

export interface PoolWorkflowInput {
  ref: PoolRef;
  desired: PoolDesired;
  /** Set by the bridge (`poolTiming`; the cost bench compresses the resync); defaults otherwise. */
  timing?: Partial<PoolTiming>;
  maxHistoryEvents?: number;
  carried?: PoolState;
}

export interface PoolTiming {
  /** Look again this soon while something is under way (members' events usually wake it first). */
  progressPollMs: number;
  /** Look again this long after the last change when nothing is under way: the safety net. */
  resyncMs: number;
}

export const DEFAULT_POOL_TIMING: PoolTiming = {
  progressPollMs: 30_000,
  resyncMs: 30 * 60_000,
};

export interface PoolStateView {
  desired: PoolDesired;
  conditions: Condition[];
  created: number;
  removed: number;
  restored: number;
  lastPlan?: PoolState['lastPlan'];
  looks: number;
  lastLookMs?: number;
  autoscale?: AutoscaleState;
  rotation?: RotationState;
}
