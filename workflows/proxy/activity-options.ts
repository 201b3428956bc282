/**
 * Every activity the Proxy workflow calls, with its timeouts and retries, in
 * one table: what each call may cost in time and attempts is read here, not
 * in six blocks scattered through the loop.
 */
import type { ActivityOptions, LocalActivityOptions } from '@temporalio/workflow';
import { NON_RETRYABLE_FAILURES } from './failure-types.js';

/** Capped exponential backoff from 1 s: the shape every retry here shares. */
const backoff = (maximumInterval: string) => ({
  initialInterval: '1 second',
  backoffCoefficient: 2,
  maximumInterval,
});

export const PROXY_ACTIVITY_OPTIONS = {
  // Provider calls: Transient failures retry here with capped exponential
  // backoff; after a few attempts the workflow itself takes over (records the
  // error in status, waits, re-evaluates), so a deletion or spec change is
  // never stuck behind an activity retrying forever. The activities
  // heartbeat every few seconds while a provider call runs: a worker killed
  // mid-call is noticed after heartbeatTimeout and the call retried
  // elsewhere, instead of only after startToCloseTimeout (2 minutes).
  provider: {
    startToCloseTimeout: '2 minutes',
    heartbeatTimeout: '15 seconds',
    retry: { ...backoff('30 seconds'), maximumAttempts: 5, nonRetryableErrorTypes: NON_RETRYABLE_FAILURES },
  },
  // A quick provider's create (ProviderCapabilities.quickCreate) as a local
  // activity, run in the worker that holds the workflow task. No heartbeat
  // (a local activity has none), so a shorter bound; and three attempts
  // (about 3 s), not five: until it ends the status shows nothing, so a
  // failing create is soon handed to the workflow, which shows the error
  // and tries again after errorRetryMs.
  quickCreate: {
    startToCloseTimeout: '30 seconds',
    retry: { ...backoff('30 seconds'), maximumAttempts: 3, nonRetryableErrorTypes: NON_RETRYABLE_FAILURES },
  },
  // Status writes: transition-only, so each one matters; retried through an
  // apiserver blip. Also run as local activities (statusWriteLocal).
  statusWrite: {
    startToCloseTimeout: '30 seconds',
    retry: { ...backoff('30 seconds'), maximumAttempts: 10 },
  },
  // The recorded status, read once when a run starts afresh: three tries, then the run goes on without it.
  statusRead: {
    startToCloseTimeout: '10 seconds',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumAttempts: 3 },
  },
  // The worker's timing, once per run.
  timing: { startToCloseTimeout: '10 seconds', retry: backoff('10 seconds') },
  // Finalizer removal must eventually happen or the Proxy stays Terminating: retry without limit.
  finalizer: { startToCloseTimeout: '30 seconds', retry: backoff('1 minute') },
} as const satisfies Record<string, ActivityOptions & LocalActivityOptions>;
