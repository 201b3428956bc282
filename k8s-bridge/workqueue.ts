/**
 * A rate-limited work queue keyed by object, after controller-runtime's
 * (client-go's workqueue.RateLimitingInterface):
 *
 * - a key queued twice is processed once (dedupe while queued);
 * - a key is never processed by two workers at once: an add while it is in
 *   flight marks it dirty and it runs again after the current pass;
 * - a failed pass requeues the key after an exponential per-key delay
 *   (base * 2^(failures-1), capped); a pass that succeeds forgets the count;
 * - at most `concurrency` keys are processed at once.
 *
 * An add from an event (a watch update, a reconnect) is not delayed by the
 * key's backoff, as in client-go: new information is worth acting on now. The
 * retry count is kept until a pass succeeds, so the next failure waits longer.
 */
export interface WorkQueueOptions {
  concurrency: number;
  /** First retry delay; doubles with each consecutive failure of a key. */
  baseDelayMs: number;
  /** Cap on the per-key retry delay. */
  maxDelayMs: number;
  process(key: string): Promise<void>;
  /** Called on each failure with the delay chosen (logs, metrics). */
  onFailure?(key: string, error: unknown, failures: number, delayMs: number): void;
  /** Called after each pass (logs, metrics). */
  onProcessed?(key: string, ok: boolean): void;
}

export interface WorkQueue {
  add(key: string): void;
  /** Adds after `ms` unless the key is added sooner. */
  addAfter(key: string, ms: number): void;
  /** Consecutive failures of a key (0 after a success). */
  failures(key: string): number;
  /** Keys waiting (not in flight, not waiting for a retry delay). */
  depth(): number;
  /** Keys whose retry is scheduled. */
  waitingRetry(): number;
  inFlight(): number;
  /** Resolves when nothing is queued or in flight (retries waiting do not count). */
  idle(): Promise<void>;
  /** Stops taking work and drops scheduled retries; resolves when in-flight passes end. */
  shutDown(): Promise<void>;
  /** Takes work again after shutDown (a bridge stopped and started in one process). */
  resume(): void;
}

export function createWorkQueue(opts: WorkQueueOptions): WorkQueue {
  const order: string[] = [];
  const dirty = new Set<string>();
  const processing = new Set<string>();
  const failureCounts = new Map<string, number>();
  const timers = new Map<string, NodeJS.Timeout>();
  let idleWaiters: Array<() => void> = [];
  let drainWaiters: Array<() => void> = [];
  let stopped = false;

  const settleWaiters = (): void => {
    if (processing.size === 0 && order.length === 0) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const w of waiters) w();
    }
    if (processing.size === 0) {
      const waiters = drainWaiters;
      drainWaiters = [];
      for (const w of waiters) w();
    }
  };

  function add(key: string): void {
    if (stopped) return;
    const timer = timers.get(key);
    if (timer) {
      clearTimeout(timer);
      timers.delete(key);
    }
    if (dirty.has(key)) return;
    dirty.add(key);
    // In flight: it runs again when the current pass ends.
    if (processing.has(key)) return;
    order.push(key);
    pump();
  }

  function addAfter(key: string, ms: number): void {
    if (stopped) return;
    if (ms <= 0) {
      add(key);
      return;
    }
    // Queued already, or an earlier retry is due: nothing to add.
    if (dirty.has(key) && !processing.has(key)) return;
    const existing = timers.get(key);
    if (existing) clearTimeout(existing);
    const timer = setTimeout(() => {
      timers.delete(key);
      add(key);
    }, ms);
    timer.unref();
    timers.set(key, timer);
  }

  function pump(): void {
    while (!stopped && processing.size < opts.concurrency && order.length > 0) {
      const key = order.shift()!;
      dirty.delete(key);
      processing.add(key);
      void run(key);
    }
  }

  async function run(key: string): Promise<void> {
    let ok = true;
    try {
      await opts.process(key);
      failureCounts.delete(key);
    } catch (error) {
      ok = false;
      const failures = (failureCounts.get(key) ?? 0) + 1;
      failureCounts.set(key, failures);
      const delay = Math.min(opts.maxDelayMs, opts.baseDelayMs * 2 ** Math.min(failures - 1, 30));
      opts.onFailure?.(key, error, failures, delay);
      addAfter(key, delay);
    } finally {
      processing.delete(key);
      if (dirty.has(key) && !stopped) {
        // An event came in during the pass: act on it now, not after the retry delay.
        const timer = timers.get(key);
        if (timer) clearTimeout(timer);
        timers.delete(key);
        order.push(key);
      }
      opts.onProcessed?.(key, ok);
      pump();
      settleWaiters();
    }
  }

  return {
    add,
    addAfter,
    failures: (key) => failureCounts.get(key) ?? 0,
    depth: () => order.length,
    waitingRetry: () => timers.size,
    inFlight: () => processing.size,
    idle() {
      if (processing.size === 0 && order.length === 0) return Promise.resolve();
      return new Promise((resolve) => idleWaiters.push(resolve));
    },
    resume() {
      stopped = false;
    },
    async shutDown() {
      stopped = true;
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
      order.length = 0;
      dirty.clear();
      if (processing.size > 0) await new Promise<void>((resolve) => drainWaiters.push(resolve));
      settleWaiters();
    },
  };
}
