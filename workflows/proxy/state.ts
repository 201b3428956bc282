/**
 * The Proxy state machine as pure functions over ProxyState: how signals
 * change it, which step comes next, how a provider answer moves it, and
 * which phase, conditions and status it represents. No Temporal API here, so
 * every rule has a fast unit test; workflow.ts only wires these to
 * activities, timers and signals.
 */
import type { Condition, ProxyPhase, ProxyStatus } from '../../resources/proxy-schema.js';
import type { InstanceState } from '../../providers/types.js';
import { FailureType } from './failure-types.js';
import { withTransitionTimes, type ConditionSpec } from '../conditions.js';
import type {
  DesiredSpec,
  DriftReport,
  HealthReport,
  LeasesDrainedReport,
  ProxyState,
  ProxyStateView,
  ProxyWorkflowInput,
  RecordedStatus,
  WorkerTiming,
} from './types.js';

/** Workflow time, for rules that depend on how old a latched failure is. */
export interface StepClock {
  nowMs: number;
  errorRetryMs: number;
}

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
    incoming.specHash !== current.specHash || incoming.cloudInitProblem !== current.cloudInitProblem;
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
  state.drain = {
    why,
    ip: state.ip!,
    since: new Date(nowMs).toISOString(),
    untilMs: nowMs + (state.desired.drainTimeoutSeconds ?? 0) * 1000,
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

export type Step =
  | { kind: 'create' }
  | { kind: 'get' }
  /** Delete the current instance: it is being replaced. */
  | { kind: 'delete' }
  /** Nothing to do until a signal (a latched failure, or an External proxy). */
  | { kind: 'wait-for-signal' }
  /** Wait for a signal or this long, then look again. */
  | { kind: 'wait'; ms: 'errorRetryMs' | 'quotaRetryMs' }
  /** Nothing is due until this workflow time (ms); a signal may change that. */
  | { kind: 'wait-until'; atMs: number }
  /** Drain the instance before replacing it: start (untilMs undefined) or keep waiting until untilMs. */
  | { kind: 'drain'; untilMs?: number };

/** The next step of a Managed proxy that is not being deleted. */
export function nextStep(state: ProxyState, clock?: StepClock): Step {
  const { desired, failure } = state;
  if (desired.mode === 'External') return { kind: 'wait-for-signal' };
  if (failure && failure.generation === desired.generation) {
    switch (failure.type) {
      case FailureType.Permanent:
        return { kind: 'wait-for-signal' };
      case FailureType.CloudInitError: {
        // The bridge signals when the Secret appears or changes; the timer is
        // the safety net: once the latch is old enough, try again.
        const due = clock !== undefined && clock.nowMs - Date.parse(failure.at) >= clock.errorRetryMs;
        if (!due) return { kind: 'wait', ms: 'errorRetryMs' };
        break;
      }
      default:
        break;
    }
  }
  if (!state.instanceId) {
    if (desired.cloudInitProblem) return { kind: 'wait', ms: 'errorRetryMs' };
    return { kind: 'create' };
  }
  // A look (get, or the repeated delete of a replacement) waits until it is
  // due; starting a replacement does not.
  const notDue = clock !== undefined && state.nextLookAtMs !== undefined && clock.nowMs < state.nextLookAtMs;
  const look = (kind: 'get' | 'delete'): Step =>
    notDue ? { kind: 'wait-until', atMs: state.nextLookAtMs! } : { kind };
  if (state.replacing) return look('delete');
  // The hash of a spec whose cloud-init cannot be read says nothing about the
  // instance: keep it, and neither replace nor adopt that hash.
  if (desired.cloudInitProblem) return look('get');
  if (!specMatchesInstance(state)) {
    if (needsDrain(state) && (!state.drain || !drainDone(state, clock?.nowMs ?? 0))) {
      return { kind: 'drain', untilMs: state.drain?.untilMs };
    }
    return { kind: 'delete' };
  }
  // The spec went back to what the instance runs: the drain is called off.
  if (state.drain?.why === 'replacing') state.drain = undefined;
  // Only the hash algorithm changed: adopt the new hash, keep the instance.
  if (state.instanceSpecHash !== desired.specHash) state.instanceSpecHash = desired.specHash;
  return look('get');
}

/** How long a steady proxy waits between its own looks at the instance. */
export function steadyPollMs(timing: WorkerTiming): number {
  return timing.swept ? timing.safetyPollMs : Math.min(timing.driftPollMs, timing.safetyPollMs);
}

/** The wait an observe() answer or a failure calls for, in ms. */
export function waitMs(
  wait: 'provisioningPollMs' | 'driftPollMs' | 'deletionPollMs' | 'errorRetryMs' | 'quotaRetryMs',
  timing: WorkerTiming,
): number {
  return wait === 'driftPollMs' ? steadyPollMs(timing) : timing[wait];
}

/**
 * Records when the next look at the instance is due; 'now' makes it due at
 * once. The provider is asked only then, or when the drift sweep reports a
 * difference: a wake-up that only changes health publishes status and goes
 * back to the same timer.
 */
export function scheduleLook(
  state: ProxyState,
  wait: 'now' | 'provisioningPollMs' | 'driftPollMs' | 'deletionPollMs' | 'errorRetryMs' | 'quotaRetryMs',
  nowMs: number,
  timing: WorkerTiming,
): void {
  state.nextLookAtMs = wait === 'now' ? undefined : nowMs + waitMs(wait, timing);
}

/**
 * What a failed provider call of a non-deleting proxy waits for. Permanent
 * waits for a signal (a spec edit); the rest retry after a delay. A steady
 * proxy whose look failed transiently waits errorRetryMs, not the
 * provisioning poll: in a provider outage the instance most likely still
 * runs, and a fleet of them polling every few seconds is what makes an
 * outage loud.
 */
export function failureWait(
  state: ProxyState,
  type: string,
): 'forever' | 'quotaRetryMs' | 'errorRetryMs' | 'provisioningPollMs' {
  switch (type) {
    case FailureType.Permanent:
      return 'forever';
    case FailureType.QuotaExceeded:
      return 'quotaRetryMs';
    case FailureType.ProviderNotConfigured:
    case FailureType.CloudInitError:
    case FailureType.ProxyGone:
      return 'errorRetryMs';
    default:
      return state.instanceState === 'Running' && !state.replacing ? 'errorRetryMs' : 'provisioningPollMs';
  }
}

/** Provider calls are made for a deletion only for a Managed proxy whose cleanup is not skipped. */
export function deletionCleansUp(state: ProxyState): boolean {
  return state.desired.mode === 'Managed' && !state.desired.skipCleanup;
}

/** Deletion's next step: find a never-recorded instance, look at (and delete) the instance, or release. */
export function deletionStep(state: ProxyState): 'find-by-uid' | 'look' | 'release' {
  if (!deletionCleansUp(state)) return 'release';
  return state.instanceId ? 'look' : 'find-by-uid';
}

/**
 * A deletion's answer to a failed Get. Permanent (a malformed ID, a location
 * that is gone) and an unconfigured provider: Delete anyway and release if
 * that works (the seed's rule; deletion never latches Failed). Otherwise
 * wait and look again.
 */
export function deletionFailureAction(
  type: string,
): 'delete-then-release' | 'quotaRetryMs' | 'deletionPollMs' {
  if (type === FailureType.Permanent || type === FailureType.ProviderNotConfigured) {
    return 'delete-then-release';
  }
  return type === FailureType.QuotaExceeded ? 'quotaRetryMs' : 'deletionPollMs';
}

/** Marks the start of a replacement (delete, wait for NotFound, create under the same name). */
export function beginReplacement(state: ProxyState, why: 'spec-changed' | 'stopped'): void {
  state.replacing = state.replacing ?? why;
  state.drain = undefined;
  state.ip = undefined;
  resetHealth(state);
}

export type Observation = { found: false } | { found: true; state: InstanceState; ip?: string };

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
  if (ip !== state.ip) resetHealth(state);
  state.instanceState = running ? 'Running' : 'Provisioning';
  state.ip = ip;
  if (state.failure?.type === FailureType.Transient || state.failure?.type === FailureType.QuotaExceeded) {
    state.failure = undefined;
  }
  return running ? 'driftPollMs' : 'provisioningPollMs';
}

export function latch(state: ProxyState, type: string, message: string, now: Date): void {
  state.failure = { type, message, generation: state.desired.generation, at: now.toISOString() };
}

export function derivePhase(state: ProxyState): ProxyPhase {
  const { desired, failure } = state;
  if (desired.deletionRequested) return 'Deleting';
  if (
    failure &&
    failure.generation === desired.generation &&
    (failure.type === FailureType.Permanent || failure.type === FailureType.ProviderNotConfigured)
  ) {
    return 'Failed';
  }
  if (desired.mode === 'External' || (state.instanceState === 'Running' && state.ip && !state.replacing)) {
    switch (state.health.verdict) {
      case 'Healthy':
        return 'Ready';
      case 'Unhealthy':
        return 'Unhealthy';
      default:
        return desired.mode === 'External' ? 'Pending' : 'Provisioning';
    }
  }
  return state.instanceId || state.replacing ? 'Provisioning' : 'Pending';
}

function provisionedCondition(state: ProxyState): ConditionSpec {
  const { desired, failure } = state;
  const c = (status: ConditionSpec['status'], reason: string, message: string) => ({
    type: 'Provisioned',
    status,
    reason,
    message,
  });
  if (desired.mode === 'External') {
    return c('True', 'External', `external endpoint ${desired.endpoint?.host}:${desired.endpoint?.port}`);
  }
  if (desired.deletionRequested) {
    // A deletion held up by the provider (its credentials refused, the API
    // down) says why: "Deleting" alone reads as progress while the
    // finalizer is kept and the instance runs on.
    if (state.deletionShowsError && failure && failure.generation === desired.generation) {
      return c(
        'False',
        'DeletionBlocked',
        `the instance cannot be deleted yet (retried): ${failure.message}`,
      );
    }
    return c('False', 'Deleting', 'the instance is being deleted');
  }
  if (failure && failure.generation === desired.generation) {
    const reasons: Record<string, string> = {
      [FailureType.Permanent]: 'PermanentError',
      [FailureType.ProviderNotConfigured]: 'ProviderNotConfigured',
      [FailureType.QuotaExceeded]: 'QuotaExceeded',
      [FailureType.CloudInitError]: 'CloudInitError',
      [FailureType.Transient]: 'TransientError',
    };
    const reason = reasons[failure.type];
    if (reason && (state.instanceState !== 'Running' || failure.type !== FailureType.Transient)) {
      return c('False', reason, failure.message);
    }
  }
  if (desired.cloudInitProblem && !state.instanceId)
    return c('False', 'CloudInitError', desired.cloudInitProblem);
  if (state.replacing) {
    return c(
      'False',
      'Replacing',
      state.replacing === 'spec-changed'
        ? `replacing instance ${state.instanceId ?? ''}: the spec changed`
        : `replacing instance ${state.instanceId ?? ''}: it is ${state.instanceState ?? 'stopped'}`,
    );
  }
  if (state.instanceState === 'Running' && state.ip) {
    return c('True', 'Running', `instance ${state.instanceId} is running at ${state.ip}`);
  }
  if (state.instanceId) return c('False', 'Provisioning', `instance ${state.instanceId} is provisioning`);
  return c('False', 'Pending', 'no instance yet');
}

function healthyCondition(state: ProxyState): ConditionSpec {
  const h = state.health;
  if (h.verdict === 'Healthy') {
    return {
      type: 'Healthy',
      status: 'True',
      reason: h.reason ?? 'ProbeSucceeded',
      message: h.message ?? 'probe through the proxy succeeded',
    };
  }
  if (h.verdict === 'Unhealthy') {
    return {
      type: 'Healthy',
      status: 'False',
      reason: h.reason ?? 'ProbeFailed',
      message: h.message ?? 'probe through the proxy failed',
    };
  }
  return { type: 'Healthy', status: 'Unknown', reason: 'NotProbed', message: 'no health verdict yet' };
}

/** Conditions that are present only once they have been true, then stay as False. */
function flagCondition(
  state: ProxyState,
  type: 'QuotaExceeded' | 'CloudInitError',
): ConditionSpec | undefined {
  const failure = state.failure;
  const active =
    (failure?.type === type && failure.generation === state.desired.generation) ||
    (type === 'CloudInitError' && Boolean(state.desired.cloudInitProblem));
  const message =
    failure?.type === type
      ? failure.message
      : type === 'CloudInitError'
        ? (state.desired.cloudInitProblem ?? '')
        : '';
  if (active) return { type, status: 'True', reason: type, message };
  if (state.conditions.some((c) => c.type === type)) {
    return {
      type,
      status: 'False',
      reason: type === 'QuotaExceeded' ? 'QuotaAvailable' : 'CloudInitResolved',
      message: '',
    };
  }
  return undefined;
}

/**
 * Ready: the Proxy can be leased now, by the lease API's own rule (not being
 * deleted, an address, the Healthy condition True), so `kubectl wait
 * --for=condition=Ready` returns exactly when crawlers can use it. A
 * function of the rest of the status: it changes only when something else
 * written does, so it adds no status write (nor any Temporal action).
 * When False, the reason is the first thing in the way, taken from the
 * condition that says so.
 */
function readyCondition(
  state: ProxyState,
  provisioned: ConditionSpec,
  healthy: ConditionSpec,
): ConditionSpec {
  const c = (status: ConditionSpec['status'], reason: string, message: string) => ({
    type: 'Ready',
    status,
    reason,
    message,
  });
  if (state.desired.deletionRequested) return c('False', 'Deleting', 'the Proxy is being deleted');
  if (state.drain) return c('False', 'Draining', drainingCondition(state)!.message);
  const ip = effectiveIp(state);
  if (!ip) {
    return provisioned.status === 'True'
      ? c('False', 'NoAddress', 'the proxy has no address yet')
      : c('False', provisioned.reason, provisioned.message);
  }
  if (healthy.status !== 'True') return c('False', healthy.reason, healthy.message);
  return c('True', 'Ready', `leasable at ${ip}`);
}

/**
 * Draining: present only while a drain runs or after one ran (then False),
 * so a Proxy that never drains writes exactly the status it wrote before.
 */
function drainingCondition(state: ProxyState): ConditionSpec | undefined {
  const drain = state.drain;
  if (drain) {
    const until = new Date(drain.untilMs).toISOString().replace(/\.\d{3}Z$/, 'Z');
    return {
      type: 'Draining',
      status: 'True',
      reason: drain.why === 'deleting' ? 'Deleting' : 'Replacing',
      message: drain.drained
        ? `no lease left on ${drain.ip}; the instance goes now`
        : `no new leases on ${drain.ip}; held leases keep working until they end or ${until}`,
    };
  }
  if (state.conditions.some((c) => c.type === 'Draining')) {
    return { type: 'Draining', status: 'False', reason: 'Drained', message: '' };
  }
  return undefined;
}

/** Conditions with Kubernetes semantics: lastTransitionTime moves only when status changes. */
export function buildConditions(state: ProxyState, now: Date): Condition[] {
  const provisioned = provisionedCondition(state);
  const healthy = healthyCondition(state);
  const specs = [
    provisioned,
    healthy,
    readyCondition(state, provisioned, healthy),
    flagCondition(state, 'QuotaExceeded'),
    flagCondition(state, 'CloudInitError'),
    drainingCondition(state),
  ].filter((c): c is ConditionSpec => c !== undefined);
  return withTransitionTimes(specs, state.conditions, state.desired.generation, now);
}

/** Recomputes phase and conditions in place and returns the status to write. */
export function buildStatus(state: ProxyState, now: Date): ProxyStatus {
  state.conditions = buildConditions(state, now);
  state.phase = derivePhase(state);
  const status: ProxyStatus = {
    phase: state.phase,
    observedGeneration: state.desired.generation,
    conditions: state.conditions,
  };
  if (state.instanceId) status.providerID = state.instanceId;
  const ip = effectiveIp(state);
  if (ip && state.desired.mode === 'Managed') status.ip = ip;
  if (state.instanceSpecHash) status.specHash = state.instanceSpecHash;
  if (state.health.latencyMillis !== undefined && state.health.verdict === 'Healthy') {
    status.latencyMillis = state.health.latencyMillis;
  }
  if (state.health.checkedAt) status.lastHealthReportTime = state.health.checkedAt;
  if (state.failure && state.failure.generation === state.desired.generation)
    status.message = state.failure.message;
  return status;
}

export function view(state: ProxyState): ProxyStateView {
  return {
    phase: state.phase,
    providerID: state.instanceId,
    ip: effectiveIp(state),
    instanceState: state.instanceState,
    replacing: state.replacing,
    observedGeneration: state.desired.generation,
    specHash: state.desired.specHash,
    instanceSpecHash: state.instanceSpecHash,
    conditions: state.conditions,
    lastError: state.failure,
    health: state.health,
    nextPollAt: state.nextPollAt,
    deletionRequested: state.desired.deletionRequested,
    ...(state.drain ? { drain: state.drain } : {}),
  };
}
