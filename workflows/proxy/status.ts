/**
 * What the Proxy's state shows, as pure functions: its phase, its
 * conditions (Provisioned, Healthy, Ready, QuotaExceeded, CloudInitError,
 * Draining, with Kubernetes transition semantics), the status the workflow
 * writes, and the view the state query returns. No Temporal API here: the
 * first local activity builds a fresh Proxy's status with these same rules.
 */
import type { Condition, ProxyPhase, ProxyStatus } from '../../resources/proxy-schema.js';
import { FailureType } from './failure-types.js';
import { withTransitionTimes, type ConditionSpec } from '../conditions.js';
import { effectiveIp } from './transitions.js';
import type { ProxyState, ProxyStateView } from './types.js';

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
  if (desired.credentialsProblem && !state.instanceId)
    return c('False', 'CredentialsError', desired.credentialsProblem);
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
  if (ip && state.desired.mode === 'Managed') {
    status.ip = ip;
    if (state.port) status.port = state.port;
    if (state.expiresAt) status.expiresAt = state.expiresAt;
  }
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
    ...(state.port ? { port: state.port } : {}),
    ...(state.expiresAt ? { expiresAt: state.expiresAt } : {}),
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
