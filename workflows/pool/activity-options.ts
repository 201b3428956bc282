/** Every activity the ProxyPool workflow calls, with its timeouts and retries. */
import type { ActivityOptions, LocalActivityOptions } from '@temporalio/workflow';

export const POOL_ACTIVITY_OPTIONS = {
  // Kubernetes reads and writes of the pool's members: retried through an
  // apiserver blip without limit (the pool has nothing else to do meanwhile,
  // and each call is idempotent), capped so an outage costs one try a minute.
  members: {
    startToCloseTimeout: '1 minute',
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '1 minute' },
  },
  // The pool's status: transition-only, as a local activity in the workflow task's worker.
  statusWrite: {
    startToCloseTimeout: '30 seconds',
    retry: {
      initialInterval: '1 second',
      backoffCoefficient: 2,
      maximumInterval: '30 seconds',
      maximumAttempts: 10,
    },
  },
} as const satisfies Record<string, ActivityOptions & LocalActivityOptions>;
