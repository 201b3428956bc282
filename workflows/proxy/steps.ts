/**
 * What the loop does next, as pure functions over ProxyState: the next step
 * of a Proxy that is not being deleted, the next step of a deletion, and
 * what a create sends. A decision may settle the state on the way (a
 * drain called off, a re-hashed spec adopted); the workflow only runs the
 * step it gets. No Temporal API here.
 */
import type { CreateInstanceInput } from '../../activities/types.js';
import { FailureType } from './failure-types.js';
import { drainDone, needsDrain, specMatchesInstance } from './transitions.js';
import type { ProxyState } from './types.js';

/** Workflow time, for rules that depend on how old a latched failure is. */
export interface StepClock {
  nowMs: number;
  errorRetryMs: number;
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
    if (desired.cloudInitProblem || desired.credentialsProblem) return { kind: 'wait', ms: 'errorRetryMs' };
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
  if (desired.cloudInitProblem || desired.credentialsProblem) return look('get');
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

/** Provider calls are made for a deletion only for a Managed proxy whose cleanup is not skipped. */
export function deletionCleansUp(state: ProxyState): boolean {
  return state.desired.mode === 'Managed' && !state.desired.skipCleanup;
}

/** Deletion's next step: find a never-recorded instance, look at (and delete) the instance, or release. */
export function deletionStep(state: ProxyState): 'find-by-uid' | 'look' | 'release' {
  if (!deletionCleansUp(state)) return 'release';
  return state.instanceId ? 'look' : 'find-by-uid';
}

/** What the create step asks the provider for. */
export function createInputOf(state: ProxyState): CreateInstanceInput {
  return {
    ref: state.ref,
    provider: state.desired.provider ?? '',
    placement: state.desired.placement,
    port: state.desired.port,
    cloudInit: state.desired.cloudInit,
    ...(state.desired.credentialsSecret ? { credentialsSecret: state.desired.credentialsSecret } : {}),
  };
}
