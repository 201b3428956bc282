/**
 * The activities the Proxy workflow calls, as the workflow sees them: each
 * proxy bound to its options in activity-options.ts (timeouts and retries),
 * and what a failed call says.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  proxyActivities,
  proxyLocalActivities,
} from '@temporalio/workflow';
import type { KubeActivities, ProviderActivities, TimingActivities } from '../../activities/types.js';
import { PROXY_ACTIVITY_OPTIONS } from './activity-options.js';
import { FailureType } from './failure-types.js';

export const provider = proxyActivities<ProviderActivities>(PROXY_ACTIVITY_OPTIONS.provider);
// A quick provider's create in the workflow task that decided on it: the
// create and the status write after it need no second workflow task.
export const quickProvider = proxyLocalActivities<Pick<ProviderActivities, 'createInstance'>>(
  PROXY_ACTIVITY_OPTIONS.quickCreate,
);
// Status writes as local activities: they run in the worker that runs the
// workflow task, so a write costs no extra workflow task round trip (a
// provisioning takes 3 workflow tasks instead of 6). Safe because a write is
// short, idempotent and transition-only.
export const kubeLocal = proxyLocalActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.statusWrite);

// The recorded status, once per fresh run. A few quick attempts, then the
// run goes on without it (as runs did before): an apiserver that cannot be
// read must not hold up a create.
export const statusReader = proxyLocalActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.statusRead);

// The worker's timing, once per run: a local activity runs in the worker
// that runs this workflow task, so a changed --drift-sweep or --safety-poll
// reaches every Proxy at its next run without a bridge in the way.
export const workerConfig = proxyLocalActivities<TimingActivities>(PROXY_ACTIVITY_OPTIONS.timing);

export const finalizer = proxyActivities<KubeActivities>(PROXY_ACTIVITY_OPTIONS.finalizer);

/** A failed call's type (FailureType) and message. */
export function failureOf(error: unknown): { type: string; message: string } {
  const cause = error instanceof ActivityFailure ? error.cause : error;
  if (cause instanceof ApplicationFailure) {
    return { type: cause.type ?? FailureType.Transient, message: cause.message };
  }
  // Timeouts and anything else the SDK raises: retryable by nature.
  return { type: FailureType.Transient, message: cause instanceof Error ? cause.message : String(cause) };
}
