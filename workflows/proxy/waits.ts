/**
 * The loop's waits: each publishes first, then waits for a signal (the
 * entity's `woken`) or a durable timer. A wait that a signal already
 * cut short starts no timer at all.
 */
import { CancellationScope, condition, sleep } from '@temporalio/workflow';
import type { ProxyEntity } from './entity.js';
import { publish } from './publish.js';

/** One pending steady-state timer, kept across wake-ups that do not move its deadline. */
export interface SteadyTimer {
  atMs: number;
  fired: boolean;
  scope: CancellationScope;
}

/** Publishes, then waits for a signal or `ms` (forever when undefined). */
export async function pause(entity: ProxyEntity, ms?: number): Promise<void> {
  const { state } = entity;
  state.nextPollAt = ms === undefined ? undefined : new Date(Date.now() + ms).toISOString();
  await publish(entity);
  if (entity.woken) {
    entity.woken = false;
    return;
  }
  if (ms === undefined) await condition(() => entity.woken);
  else await condition(() => entity.woken, ms);
  entity.woken = false;
  state.nextPollAt = undefined;
}

/**
 * Publishes, then waits for a signal or until workflow time `atMs`.
 *
 * Steady waits share one timer across wake-ups: a health signal that only
 * needs a status write leaves the timer running instead of cancelling it
 * and starting another (each started timer is a billed action).
 */
export async function waitUntil(entity: ProxyEntity, atMs: number): Promise<void> {
  const { state } = entity;
  state.nextPollAt = new Date(atMs).toISOString();
  await publish(entity);
  if (entity.woken) {
    entity.woken = false;
    return;
  }
  if (entity.steadyTimer?.atMs !== atMs) {
    entity.steadyTimer?.scope.cancel();
    const timer: SteadyTimer = { atMs, fired: false, scope: new CancellationScope() };
    // Cancelled when a later wait moves the deadline; nothing to do then.
    timer.scope
      .run(() => sleep(Math.max(atMs - Date.now(), 1)))
      .then(
        () => (timer.fired = true),
        () => undefined,
      );
    entity.steadyTimer = timer;
  }
  const timer = entity.steadyTimer;
  await condition(() => entity.woken || timer.fired);
  entity.woken = false;
  if (timer.fired) {
    entity.steadyTimer = undefined;
    // The task that sees the timer fire may run a hair before atMs in
    // workflow time: the look is due now, whatever the clocks say.
    if (state.nextLookAtMs === atMs) state.nextLookAtMs = undefined;
  }
}
