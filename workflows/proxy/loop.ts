/**
 * The steady loop of a Proxy that is not being deleted: take the next step
 * (steps.ts), act through an activity, wait on a durable timer or a
 * signal. Returns when a deletion is requested (deletion.ts takes over).
 */
import { log } from '@temporalio/workflow';
import { failureOf, provider, quickProvider } from './activity-proxies.js';
import { maybeContinueAsNew, continueAsNewDue } from './continue-as-new.js';
import type { ProxyEntity } from './entity.js';
import { FailureType } from './failure-types.js';
import { publish } from './publish.js';
import { failureWait, scheduleLook } from './scheduling.js';
import { createInputOf, nextStep } from './steps.js';
import { applyCreated, beginDrain, beginReplacement, drainDone, latch, observe } from './transitions.js';
import type { WorkerTiming } from './types.js';
import { pause, waitUntil } from './waits.js';

export async function runUntilDeletion(entity: ProxyEntity, timing: WorkerTiming): Promise<void> {
  const { state } = entity;
  for (;;) {
    // Checked before it is awaited: most turns of the loop continue nothing.
    if (continueAsNewDue(entity)) await maybeContinueAsNew(entity);
    if (state.desired.deletionRequested) return;
    // Date.now() is workflow time here: deterministic on replay.
    const step = nextStep(state, { nowMs: Date.now(), errorRetryMs: timing.errorRetryMs });
    switch (step.kind) {
      case 'wait-for-signal':
        await pause(entity);
        break;
      case 'wait':
        await pause(entity, timing[step.ms]);
        break;
      case 'wait-until':
        await waitUntil(entity, step.atMs);
        break;
      case 'drain': {
        // No new leases from the first status write on; the replacement
        // waits for the lease API's word that none is left, or the deadline.
        if (!state.drain) beginDrain(state, 'replacing', Date.now());
        if (!drainDone(state, Date.now()))
          await pause(entity, Math.max(state.drain!.untilMs - Date.now(), 1));
        break;
      }
      case 'create': {
        // A quick create's outcome is written a moment later, in the same
        // workflow task: a status write before it would show nobody anything.
        const quick = timing.quickCreate === true;
        if (!quick) await publish(entity);
        try {
          const created = await (quick ? quickProvider : provider).createInstance(createInputOf(state));
          applyCreated(state, created, Date.now(), timing);
        } catch (error) {
          if (failureOf(error).type === FailureType.ProxyGone) entity.proxyGone();
          await onFailure(entity, timing, error);
        }
        break;
      }
      case 'delete': {
        if (!state.replacing) beginReplacement(state, 'spec-changed');
        await publish(entity);
        try {
          await provider.deleteInstance({ provider: state.desired.provider ?? '', id: state.instanceId! });
          await look(entity, timing);
        } catch (error) {
          await onFailure(entity, timing, error);
        }
        break;
      }
      case 'get': {
        try {
          await look(entity, timing);
        } catch (error) {
          await onFailure(entity, timing, error);
        }
        break;
      }
    }
  }
}

/** One provider Get, the state moved by its answer, and the next look scheduled by it. */
async function look(entity: ProxyEntity, timing: WorkerTiming): Promise<void> {
  const { state } = entity;
  const seen = await provider.getInstance({
    provider: state.desired.provider ?? '',
    id: state.instanceId!,
  });
  scheduleLook(state, observe(state, seen), Date.now(), timing);
}

/** Latches a failed provider call and waits as its type calls for (scheduling.ts). */
async function onFailure(entity: ProxyEntity, timing: WorkerTiming, error: unknown): Promise<void> {
  const { state } = entity;
  const failure = failureOf(error);
  latch(state, failure.type, failure.message, new Date());
  const wait = failureWait(state, failure.type);
  if (failure.type === FailureType.Permanent) {
    log.warn('permanent provider error; latched until the spec changes', { message: failure.message });
  }
  if (wait === 'forever') await pause(entity);
  else if (state.instanceId) scheduleLook(state, wait, Date.now(), timing);
  else await pause(entity, timing[wait]);
}
