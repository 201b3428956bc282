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

/** What the bridge saw of the pool and its members. Idempotent by (generation, membersVersion). */
export interface PoolDesired {
  generation: number;
  replicas: number;
  templateHash: string;
  strategy: PoolStrategy;
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
  /** Spec, labels and annotations are what the pool's current template makes (false: edited by hand). */
  matchesTemplate: boolean;
}

export interface PoolObservation {
  /** The pool with this UID still exists. */
  poolExists: boolean;
  /** The template hash of the pool as read now ('' when it is gone). */
  templateHash: string;
  members: PoolMember[];
}

export interface PoolPlan {
  /** How many new members to make from the current template. */
  create: number;
  /** Members to delete (each drains first), in the order chosen. */
  remove: Array<{ name: string; uid: string; why: 'scale-down' | 'rollout' }>;
  /** Members edited by hand to put back to the template. */
  restore: Array<{ name: string; uid: string }>;
  /** What is still under way (a rollout, a scale, a drain): the pool looks again soon. */
  progressing: boolean;
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
}
