/**
 * How long the Proxy workflow waits, as pure functions: when the next look
 * at the instance is due (the provisioning, deletion and steady polls, the
 * steady one set by whether a drift sweep covers the provider), and what
 * a failed provider call waits for. No Temporal API here.
 */
import { FailureType } from './failure-types.js';
import type { ProxyState, WorkerTiming } from './types.js';

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
  if (wait === 'now') {
    state.nextLookAtMs = undefined;
    return;
  }
  const atMs = nowMs + waitMs(wait, timing);
  // An instance its provider ends by itself is looked at when it ends: the
  // replacement follows at once rather than at the next steady look.
  const endsAtMs = wait === 'driftPollMs' && state.expiresAt ? Date.parse(state.expiresAt) : NaN;
  state.nextLookAtMs = Number.isFinite(endsAtMs) && endsAtMs > nowMs ? Math.min(atMs, endsAtMs) : atMs;
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
