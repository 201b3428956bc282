/**
 * Drift found per provider, not per Proxy: one run per Schedule fire, one
 * activity that lists every swept provider and signals only the Proxy
 * workflows whose instance differs from their recorded state. The report
 * is the run's result (visible in the Web UI and `temporal workflow show`).
 */
import { proxyActivities } from '@temporalio/workflow';
import type { DriftActivities, DriftSweepReport } from '../../activities/types.js';
import type { DriftSweepInput } from './types.js';

export async function driftSweepWorkflow(input: DriftSweepInput): Promise<DriftSweepReport> {
  // A sweep that fails (a worker lost mid-sweep) is retried once; after that
  // the next fire is the retry, so a failing backend sees one list per period.
  const sweep = proxyActivities<DriftActivities>({
    startToCloseTimeout: input.listTimeoutMs + 2 * 60_000,
    retry: { initialInterval: '5 seconds', maximumAttempts: 2 },
  });
  return sweep.sweepDrift({ listTimeoutMs: input.listTimeoutMs });
}
