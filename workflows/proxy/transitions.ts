/**
 * How the Proxy's state moves, as pure functions over ProxyState: a run's
 * start (fresh, or from the recorded status), each signal (spec, deletion,
 * health, drift, leases drained), and each provider answer (a create, a
 * Get). Each returns whether anything changed, so the workflow knows when
 * to wake. No Temporal API here (unit tests call these directly); what
 * comes next is steps.ts's, how long a wait is scheduling.ts's, and what
 * the state shows status.ts's.
 */
import type { InstanceState } from '../../providers/types.js';
import { FailureType } from './failure-types.js';
import { scheduleLook } from './scheduling.js';
import type {
  DesiredSpec,
  DriftReport,
  HealthReport,
  LeasesDrainedReport,
  ProxyState,
  ProxyWorkflowInput,
  RecordedStatus,
  WorkerTiming,
} from './types.js';

export function initialState(input: ProxyWorkflowInput): ProxyState {
  return {
    ref: input.ref,
    desired: input.desired,
    health: { verdict: 'Unknown' },
    conditions: [],
    phase: 'Pending',
  };
}

/**
 * Seeds a run that starts afresh from what the Proxy's status recorded, so
 * it knows its instance instead of adopting it blind:
 *
 * - the recorded spec hash is the instance's, so a spec edited while no run
 *   was there replaces the instance (create would adopt it under the new
 *   hash, and a changed port would never reach it);
 * - the recorded address and health stand until the first look, which is
 *   due at once: an unchanged instance stays Ready through the restart (the
 *   prober only re-sends a verdict it already sent after minutes), another
 *   address resets health as any address change does;
 * - the recorded conditions keep their lastTransitionTime.
 *
 * External proxies have no instance, and their endpoint may have changed
 * with the spec: nothing is seeded.
 */
export function resumeFromStatus(state: ProxyState, recorded: RecordedStatus): void {
  if (state.desired.mode !== 'Managed' || !recorded.providerID) return;
  state.instanceId = recorded.providerID;
  state.instanceSpecHash = recorded.specHash;
  state.conditions = recorded.conditions ?? [];
  state.nextLookAtMs = undefined;
  if (!recorded.ip) return;
  state.instanceState = 'Running';
  state.ip = recorded.ip;
  if (recorded.port) state.port = recorded.port;
  if (recorded.expiresAt) state.expiresAt = recorded.expiresAt;
  const healthy = recorded.conditions?.find((c) => c.type === 'Healthy');
  if (healthy?.status !== 'True' && healthy?.status !== 'False') return;
  const verdict = healthy.status === 'True' ? 'Healthy' : 'Unhealthy';
  // applyHealth's key order, so an identical report compares equal.
  state.health = {
    verdict,
    ...(verdict === 'Healthy' && recorded.latencyMillis !== undefined
      ? { latencyMillis: recorded.latencyMillis }
      : {}),
    ...(recorded.lastHealthReportTime ? { checkedAt: recorded.lastHealthReportTime } : {}),
    reason: healthy.reason,
    message: healthy.message,
  };
}

/**
 * Applies a spec signal. Idempotent and order-tolerant: several bridges and
 * bridge restarts re-send the same spec, and an older generation arriving
 * late is ignored. Returns true when anything changed.
 */
export function applySpec(state: ProxyState, incoming: DesiredSpec): boolean {
  const current = state.desired;
  if (incoming.generation < current.generation) return false;
  const next: DesiredSpec = {
    ...incoming,
    // Deletion is one-way: a re-sent older view must not undo it.
    deletionRequested: current.deletionRequested || incoming.deletionRequested,
  };
  if (JSON.stringify(next) === JSON.stringify(current)) return false;
  const generationChanged = incoming.generation > current.generation;
  const cloudInitChanged =
    incoming.specHash !== current.specHash ||
    incoming.cloudInitProblem !== current.cloudInitProblem ||
    incoming.credentialsProblem !== current.credentialsProblem;
  state.desired = next;
  // A spec edit recovers a latched failure; a Secret that changed recovers a cloud-init failure.
  if (
    state.failure &&
    (generationChanged || (cloudInitChanged && state.failure.type === FailureType.CloudInitError))
  ) {
    state.failure = undefined;
  }
  return true;
}

export function applyDeletion(state: ProxyState, request: { skipCleanup: boolean }): boolean {
  const before = JSON.stringify(state.desired);
  state.desired = {
    ...state.desired,
    deletionRequested: true,
    skipCleanup: state.desired.skipCleanup || request.skipCleanup,
  };
  return JSON.stringify(state.desired) !== before;
}

/** The address clients and the prober use: External endpoint, or the Running instance's IP. */
export function effectiveIp(state: ProxyState): string | undefined {
  if (state.desired.mode === 'External') return state.desired.endpoint?.host;
  return state.instanceState === 'Running' && !state.replacing ? state.ip : undefined;
}

/** Applies a prober verdict; a verdict for an address this proxy no longer has is stale and ignored. */
export function applyHealth(state: ProxyState, report: HealthReport): boolean {
  if (report.ip !== effectiveIp(state)) return false;
  const verdict = report.healthy ? 'Healthy' : 'Unhealthy';
  const next = {
    verdict,
    latencyMillis: report.latencyMillis,
    checkedAt: report.checkedAt,
    reason: report.reason,
    message: report.message,
  } as const;
  if (JSON.stringify(next) === JSON.stringify(state.health)) return false;
  state.health = { ...next };
  return true;
}

/**
 * Applies a drift sweep report: a look at the instance is due now. Only the
 * report's instance counts (the sweep read an older status while this run
 * replaced it), and a replacement or deletion polls on its own already.
 */
export function applyDrift(state: ProxyState, report: DriftReport): boolean {
  if (report.instanceId !== state.instanceId) return false;
  if (state.replacing || state.desired.deletionRequested) return false;
  if (state.nextLookAtMs === undefined) return false;
  state.nextLookAtMs = undefined;
  return true;
}

/**
 * Whether the instance must drain before it goes: the spec asks for it, and
 * there is a running instance at an address crawlers may hold leases on.
 * A cleanup that is skipped leaves the instance running: nothing to drain.
 */
export function needsDrain(state: ProxyState): boolean {
  const seconds = state.desired.drainTimeoutSeconds ?? 0;
  if (seconds <= 0 || state.desired.mode !== 'Managed') return false;
  if (state.desired.deletionRequested && state.desired.skipCleanup) return false;
  return state.instanceState === 'Running' && Boolean(state.ip) && !state.replacing;
}

/** Starts draining the current instance (once; a drain already running keeps its deadline). */
export function beginDrain(state: ProxyState, why: DrainWhy, nowMs: number): void {
  if (state.drain && state.drain.ip === state.ip) {
    state.drain.why = why;
    return;
  }
  // An instance its provider ends by itself has nothing to drain after that.
  const endsAtMs = state.expiresAt === undefined ? NaN : Date.parse(state.expiresAt);
  const timeoutAtMs = nowMs + (state.desired.drainTimeoutSeconds ?? 0) * 1000;
  state.drain = {
    why,
    ip: state.ip!,
    since: new Date(nowMs).toISOString(),
    untilMs: Number.isFinite(endsAtMs) ? Math.max(nowMs, Math.min(timeoutAtMs, endsAtMs)) : timeoutAtMs,
    drained: false,
  };
}

type DrainWhy = 'replacing' | 'deleting';

/** Whether the drain is over: no lease left, or its time is up. */
export function drainDone(state: ProxyState, nowMs: number): boolean {
  return !state.drain || state.drain.drained || nowMs >= state.drain.untilMs;
}

/** The lease API's word that no lease is left at the drained address; stale reports are ignored. */
export function applyLeasesDrained(state: ProxyState, report: LeasesDrainedReport): boolean {
  if (!state.drain || state.drain.drained || report.ip !== state.drain.ip) return false;
  state.drain.drained = true;
  return true;
}

/** A new instance (or none) starts with an unknown verdict. */
function resetHealth(state: ProxyState): void {
  state.health = { verdict: 'Unknown' };
}

export function specMatchesInstance(state: ProxyState): boolean {
  const recorded = state.instanceSpecHash;
  return (
    recorded === undefined ||
    recorded === state.desired.specHash ||
    state.desired.legacySpecHashes.includes(recorded)
  );
}

/** Marks the start of a replacement (delete, wait for NotFound, create under the same name). */
export function beginReplacement(state: ProxyState, why: 'spec-changed' | 'stopped'): void {
  state.replacing = state.replacing ?? why;
  state.drain = undefined;
  state.ip = undefined;
  state.port = undefined;
  state.expiresAt = undefined;
  resetHealth(state);
}

export type Observation =
  { found: false } | { found: true; state: InstanceState; ip?: string; port?: number; expiresAt?: string };

/** A provider's answer that counts as Running: the state, and an address to reach the instance at. */
export function runsWithAddress(seen: { state: InstanceState; ip?: string }): boolean {
  return seen.state === 'Running' && seen.ip !== undefined && seen.ip !== '';
}

/** What a create leaves behind: the instance, and (when its own first look answered) what that look saw. */
export interface Created {
  id: string;
  specHash: string;
  seen?: Observation;
}

/**
 * The state a create leaves: the instance, and its first look's answer.
 * The create activity's own first look stands for the Get that would follow
 * (histories from before it carry none: they Get). Also run by the first
 * local activity on a copy of the state, to write the status a create at
 * the start leaves: one rule for both.
 */
export function applyCreated(state: ProxyState, created: Created, nowMs: number, timing: WorkerTiming): void {
  state.instanceId = created.id;
  state.instanceSpecHash = created.specHash;
  state.instanceState = 'Provisioning';
  state.nextLookAtMs = undefined;
  if (state.failure?.type !== FailureType.Permanent) state.failure = undefined;
  if (created.seen) scheduleLook(state, observe(state, created.seen), nowMs, timing);
}

/**
 * Moves the state by a provider Get answer and says how long to wait before
 * the next look ('now' = act again at once).
 */
export function observe(
  state: ProxyState,
  seen: Observation,
): 'now' | 'provisioningPollMs' | 'driftPollMs' | 'deletionPollMs' {
  if (!seen.found) {
    // Gone: the replacement may be created now, or the instance vanished and is recreated.
    state.instanceId = undefined;
    state.instanceSpecHash = undefined;
    state.instanceState = undefined;
    state.ip = undefined;
    state.port = undefined;
    state.expiresAt = undefined;
    state.replacing = undefined;
    resetHealth(state);
    return 'now';
  }
  if (state.replacing) {
    state.instanceState = seen.state;
    return 'deletionPollMs';
  }
  if (seen.state === 'Stopped' || seen.state === 'Terminated') {
    state.instanceState = seen.state;
    beginReplacement(state, 'stopped');
    return 'now';
  }
  const running = runsWithAddress(seen);
  const ip = running ? seen.ip : undefined;
  // Sessions of one vendor share its address: a new port or session is a new proxy too.
  const port = running ? seen.port : undefined;
  if (ip !== state.ip || port !== state.port) resetHealth(state);
  state.instanceState = running ? 'Running' : 'Provisioning';
  state.ip = ip;
  if (port === undefined) delete state.port;
  else state.port = port;
  const expiresAt = running ? seen.expiresAt : undefined;
  if (expiresAt === undefined) delete state.expiresAt;
  else state.expiresAt = expiresAt;
  if (state.failure?.type === FailureType.Transient || state.failure?.type === FailureType.QuotaExceeded) {
    state.failure = undefined;
  }
  return running ? 'driftPollMs' : 'provisioningPollMs';
}

export function latch(state: ProxyState, type: string, message: string, now: Date): void {
  state.failure = { type, message, generation: state.desired.generation, at: now.toISOString() };
}
