/**
 * The bridge's work queue: dedupe while queued, one pass per key at a time,
 * exponential per-key backoff forgotten on success, a global concurrency
 * limit. Driven by vitest's fake timers, so the delays are asserted exactly
 * and nothing waits on the wall clock.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createWorkQueue } from '../../k8s-bridge/workqueue.js';

/** A process() whose passes the test resolves or rejects one by one. */
function controlled() {
  const calls: Array<{ key: string; resolve: () => void; reject: (e: Error) => void }> = [];
  let active = 0;
  let maxActive = 0;
  const perKeyActive = new Map<string, number>();
  let overlap = false;
  return {
    calls,
    get maxActive() {
      return maxActive;
    },
    get overlap() {
      return overlap;
    },
    process: (key: string): Promise<void> => {
      active += 1;
      maxActive = Math.max(maxActive, active);
      const n = (perKeyActive.get(key) ?? 0) + 1;
      if (n > 1) overlap = true;
      perKeyActive.set(key, n);
      return new Promise<void>((resolve, reject) => {
        const done = () => {
          active -= 1;
          perKeyActive.set(key, (perKeyActive.get(key) ?? 1) - 1);
        };
        calls.push({
          key,
          resolve: () => {
            done();
            resolve();
          },
          reject: (e) => {
            done();
            reject(e);
          },
        });
      });
    },
  };
}

/** Runs pending promise callbacks (and timers due now) without moving the fake clock. */
const settle = () => vi.advanceTimersByTimeAsync(0);

describe('bridge work queue', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('processes a key queued many times once', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 1, baseDelayMs: 100, maxDelayMs: 1_000, process: c.process });
    q.add('busy');
    for (let i = 0; i < 5; i += 1) q.add('a');
    expect(q.depth()).toBe(1);
    c.calls[0]!.resolve();
    await settle();
    expect(c.calls.map((x) => x.key)).toEqual(['busy', 'a']);
    c.calls[1]!.resolve();
    await q.idle();
    expect(c.calls).toHaveLength(2);
  });

  it('never runs one key twice at once; an add in flight runs once more afterwards', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 4, baseDelayMs: 100, maxDelayMs: 1_000, process: c.process });
    q.add('a');
    q.add('a');
    q.add('a');
    expect(c.calls).toHaveLength(1);
    c.calls[0]!.resolve();
    await settle();
    expect(c.calls).toHaveLength(2);
    expect(c.overlap).toBe(false);
    c.calls[1]!.resolve();
    await q.idle();
    expect(c.calls).toHaveLength(2);
  });

  it('holds the global concurrency limit', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 3, baseDelayMs: 100, maxDelayMs: 1_000, process: c.process });
    for (let i = 0; i < 10; i += 1) q.add(`k${i}`);
    expect(c.calls).toHaveLength(3);
    expect(q.depth()).toBe(7);
    for (let i = 0; i < 10; i += 1) {
      await settle();
      expect(c.calls.length).toBeGreaterThan(i);
      c.calls[i]!.resolve();
    }
    await q.idle();
    expect(c.maxActive).toBe(3);
    expect(c.calls).toHaveLength(10);
  });

  it('retries a failing key with exponential per-key delays, capped, and forgets on success', async () => {
    const c = controlled();
    const delays: number[] = [];
    const q = createWorkQueue({
      concurrency: 2,
      baseDelayMs: 100,
      maxDelayMs: 500,
      process: c.process,
      onFailure: (_k, _e, _n, ms) => delays.push(ms),
    });
    q.add('a');
    for (let attempt = 0; attempt < 5; attempt += 1) {
      c.calls[attempt]!.reject(new Error('apiserver down'));
      await settle();
      expect(delays).toHaveLength(attempt + 1);
      // Not before its delay...
      await vi.advanceTimersByTimeAsync(delays[attempt]! - 1);
      expect(c.calls).toHaveLength(attempt + 1);
      // ...and right after it.
      await vi.advanceTimersByTimeAsync(1);
      expect(c.calls).toHaveLength(attempt + 2);
    }
    expect(delays).toEqual([100, 200, 400, 500, 500]);
    expect(q.failures('a')).toBe(5);
    c.calls[5]!.resolve();
    await q.idle();
    expect(q.failures('a')).toBe(0);
    // A new failure starts from the base delay again.
    q.add('a');
    c.calls[6]!.reject(new Error('again'));
    await settle();
    expect(delays).toHaveLength(6);
    expect(delays[5]).toBe(100);
    await q.shutDown();
  });

  it('keeps backoff per key: one failing key does not delay another', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 1, baseDelayMs: 1_000, maxDelayMs: 10_000, process: c.process });
    q.add('bad');
    c.calls[0]!.reject(new Error('no'));
    await settle();
    expect(q.waitingRetry()).toBe(1);
    q.add('good');
    await settle();
    expect(c.calls.map((x) => x.key)).toEqual(['bad', 'good']);
    c.calls[1]!.resolve();
    await q.idle();
    expect(q.failures('good')).toBe(0);
    expect(q.failures('bad')).toBe(1);
    await q.shutDown();
    expect(q.waitingRetry()).toBe(0);
  });

  it('an event for a key waiting out its backoff is acted on now, and the count is kept', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 1, baseDelayMs: 1_000, maxDelayMs: 10_000, process: c.process });
    q.add('a');
    c.calls[0]!.reject(new Error('no'));
    await settle();
    expect(q.waitingRetry()).toBe(1);
    q.add('a');
    expect(c.calls).toHaveLength(2);
    expect(q.waitingRetry()).toBe(0);
    c.calls[1]!.reject(new Error('still no'));
    await settle();
    expect(q.failures('a')).toBe(2);
    await q.shutDown();
  });

  it('addAfter never cuts a retry delay short and stops after shutDown', async () => {
    const c = controlled();
    const q = createWorkQueue({ concurrency: 1, baseDelayMs: 100, maxDelayMs: 100, process: c.process });
    q.addAfter('a', 300);
    await vi.advanceTimersByTimeAsync(299);
    expect(c.calls).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(c.calls).toHaveLength(1);
    c.calls[0]!.resolve();
    await q.idle();
    q.addAfter('b', 100);
    await q.shutDown();
    await vi.advanceTimersByTimeAsync(1_000);
    q.add('c');
    expect(c.calls).toHaveLength(1);
    // Resumed (a bridge started again in the same process): it takes work again.
    q.resume();
    q.add('c');
    expect(c.calls.map((x) => x.key)).toEqual(['a', 'c']);
  });
});
