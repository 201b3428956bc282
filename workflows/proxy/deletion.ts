/**
 * Deletion: delete, poll until the provider says NotFound, remove the
 * finalizer, complete. Never latches a permanent failure; skip-cleanup
 * (which may arrive while this loop runs) releases the Proxy without
 * provider calls. The decisions are steps.ts's and scheduling.ts's; this
 * only runs them.
 */
import { log, patched } from '@temporalio/workflow';
import { PATCHES } from '../versions.js';
import { failureOf, finalizer, provider } from './activity-proxies.js';
import { maybeContinueAsNew } from './continue-as-new.js';
import { publish } from './publish.js';
import type { ProxyEntity } from './entity.js';
import { deletionFailureAction } from './scheduling.js';
import { deletionStep } from './steps.js';
import { beginDrain, drainDone, latch, needsDrain } from './transitions.js';
import type { WorkerTiming } from './types.js';
import { pause } from './waits.js';

export async function runDeletion(entity: ProxyEntity, timing: WorkerTiming): Promise<void> {
  const { state } = entity;
  const providerName = state.desired.provider ?? '';
  if (!state.deletionShowsError && patched(PATCHES.deletionShowsError.id)) {
    state.deletionShowsError = true;
    // What failed before the deletion is not what holds it up.
    state.failure = undefined;
  }
  if (needsDrain(state)) {
    // The Proxy is deleting, so the lease API grants nothing new on it; the
    // leases held keep working until they end or the drain times out.
    beginDrain(state, 'deleting', Date.now());
    while (!drainDone(state, Date.now()) && !state.desired.skipCleanup) {
      await maybeContinueAsNew(entity);
      await pause(entity, Math.max(state.drain!.untilMs - Date.now(), 1));
    }
    state.drain = undefined;
  }
  if (deletionStep(state) === 'find-by-uid') {
    // A run started after an operator terminated the one that created the
    // instance (or a create that succeeded at the provider but was never
    // recorded): without this the finalizer would go and the instance stay
    // until orphan GC's second sighting.
    try {
      const found = await provider.findInstanceByUid({ provider: providerName, uid: state.ref.uid });
      if (found.id) {
        log.info('found the instance of a Proxy being deleted by its UID mark', { id: found.id });
        state.instanceId = found.id;
      }
    } catch (error) {
      log.warn('could not look the instance up by UID; releasing, orphan GC collects any left behind', {
        message: failureOf(error).message,
      });
    }
  }
  while (deletionStep(state) === 'look') {
    await maybeContinueAsNew(entity);
    await publish(entity);
    const id = state.instanceId!;
    try {
      const seen = await provider.getInstance({ provider: providerName, id });
      if (!seen.found) break;
      await provider.deleteInstance({ provider: providerName, id });
      // The provider answers again: nothing holds the deletion up any more.
      if (state.deletionShowsError) state.failure = undefined;
      await pause(entity, timing.deletionPollMs);
    } catch (error) {
      const failure = failureOf(error);
      const action = deletionFailureAction(failure.type);
      if (action === 'delete-then-release') {
        try {
          await provider.deleteInstance({ provider: providerName, id });
          log.warn('released a Proxy whose instance cannot be read', { id, message: failure.message });
          break;
        } catch (deleteError) {
          const again = failureOf(deleteError);
          latch(state, again.type, again.message, new Date());
          await pause(entity, timing.errorRetryMs);
          continue;
        }
      }
      latch(state, failure.type, failure.message, new Date());
      await pause(entity, timing[action]);
    }
  }
  if (state.desired.skipCleanup && state.instanceId) {
    log.warn('skip-cleanup: releasing the Proxy and leaving its instance to the administrator', {
      id: state.instanceId,
    });
  }
  if (state.desired.mode === 'Managed') await finalizer.removeProxyFinalizer({ ref: state.ref });
}
