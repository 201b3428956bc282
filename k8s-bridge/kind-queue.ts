/**
 * The bridge's one work queue, with a lane per kind (Proxy, ProxyPool):
 * keys are namespace/name within a lane, and every lane retries a failed key
 * on the same backoff. Each lane keeps its own concurrency and its own
 * reconcile, so a burst of one kind never holds back the other.
 */
import { createWorkQueue, type WorkQueue, type WorkQueueOptions } from './workqueue.js';

/** A failed key's retry delay: `baseDelayMs`, doubled per consecutive failure, capped at `maxDelayMs`. */
export type Backoff = Pick<WorkQueueOptions, 'baseDelayMs' | 'maxDelayMs'>;

/** A kind's lane: how many of its keys run at once, its reconcile and its hooks (logs, metrics). */
export type Lane = Omit<WorkQueueOptions, keyof Backoff>;

export interface KindQueue {
  /** Opens a kind's lane: a queue of its keys, deduplicated and retried as `workqueue.ts` says. */
  lane(lane: Lane): WorkQueue;
  /** Resolves when no lane has a key queued or in flight (retries waiting do not count). */
  idle(): Promise<void>;
  /** Stops every lane and drops scheduled retries; resolves when in-flight reconciles end. */
  shutDown(): Promise<void>;
  /** Every lane takes work again (a bridge stopped and started in one process). */
  resume(): void;
}

export function createKindQueue(backoff: Backoff): KindQueue {
  const lanes: WorkQueue[] = [];
  return {
    lane(lane) {
      const queue = createWorkQueue({ ...backoff, ...lane });
      lanes.push(queue);
      return queue;
    },
    async idle() {
      for (const queue of lanes) await queue.idle();
    },
    async shutDown() {
      await Promise.all(lanes.map((queue) => queue.shutDown()));
    },
    resume() {
      for (const queue of lanes) queue.resume();
    },
  };
}
