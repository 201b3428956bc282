/**
 * The per-Proxy entity workflow: the single writer of a Proxy's status.
 *
 * One run: start (start.ts), the steady loop until a deletion is requested
 * (loop.ts), the deletion (deletion.ts). Each turn derives the next step
 * from the state (steps.ts), acts through an activity, then waits on a
 * durable timer or a signal (waits.ts). Signals only change the entity's
 * state and wake the loop (entity.ts); they never call activities, so
 * there is one actor and no interleaving to reason about.
 */
import { setHandler } from '@temporalio/workflow';
import { runDeletion } from './deletion.js';
import { ProxyEntity } from './entity.js';
import { runUntilDeletion } from './loop.js';
import {
  deletionRequestedSignal,
  driftDetectedSignal,
  healthChangedSignal,
  leasesDrainedSignal,
  specChangedSignal,
  stateQuery,
} from './messages.js';
import { startRun } from './start.js';
import { view } from './status.js';
import type { ProxyWorkflowInput } from './types.js';

export async function proxyWorkflow(input: ProxyWorkflowInput): Promise<void> {
  const entity = new ProxyEntity(input);
  // Set before the first await: signals that came with the start reach the
  // state before the start decides on its create.
  setHandler(specChangedSignal, (desired) => entity.specChanged(desired));
  setHandler(deletionRequestedSignal, (request) => entity.deletionRequested(request));
  setHandler(healthChangedSignal, (report) => entity.healthChanged(report));
  setHandler(driftDetectedSignal, (report) => entity.driftDetected(report));
  setHandler(leasesDrainedSignal, (report) => entity.leasesDrained(report));
  setHandler(stateQuery, () => view(entity.state));

  const timing = await startRun(entity);
  await runUntilDeletion(entity, timing);
  await runDeletion(entity, timing);
}
