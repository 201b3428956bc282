/**
 * Continue-as-new: a run hands its state to a new run once the server
 * suggests it or the history reaches the input's maxHistoryEvents. Checked
 * at the top of each turn of the loop and of the deletion's waits.
 */
import { allHandlersFinished, condition, continueAsNew, workflowInfo } from '@temporalio/workflow';
import type { ProxyWorkflow } from './client.js';
import type { ProxyEntity } from './entity.js';

const DEFAULT_MAX_HISTORY_EVENTS = 4_000;

export function continueAsNewDue(entity: ProxyEntity): boolean {
  const info = workflowInfo();
  return (
    info.continueAsNewSuggested ||
    info.historyLength >= (entity.input.maxHistoryEvents ?? DEFAULT_MAX_HISTORY_EVENTS)
  );
}

/** Continues as new when due; returns (having done nothing) when not. */
export async function maybeContinueAsNew(entity: ProxyEntity): Promise<void> {
  if (!continueAsNewDue(entity)) return;
  const { input, state } = entity;
  // Handlers only mutate state, but wait for any in flight so nothing is lost.
  await condition(allHandlersFinished);
  state.nextPollAt = undefined;
  // What the start carried for a fresh run has served its purpose.
  const {
    recorded: _recorded,
    recordedVersion: _recordedVersion,
    indexedPhase: _indexedPhase,
    ...rest
  } = input;
  await continueAsNew<ProxyWorkflow>({ ...rest, desired: state.desired, carried: state });
}
