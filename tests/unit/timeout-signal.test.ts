/**
 * A bound that survives garbage collection. `AbortSignal.any([s,
 * AbortSignal.timeout(ms)])` never fires once a GC has taken the timeout
 * signal (nodejs/node#57736): a kubernetes-provider test hung 120 s on it
 * under a loaded suite. These tests run a full GC while the bound is pending.
 */
import { getEventListeners } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { boundedCall, CallEnded } from '../../providers/shared/bounded-call.js';
import { timeoutSignal } from '../../providers/timeout-signal.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * Resolves once `signal` has aborted, also when it already has: a listener
 * added after the abort would wait forever (a loaded machine, or a slow full
 * GC, can pass a 100 ms deadline before the test gets to listen).
 */
const aborted = (signal: AbortSignal) =>
  signal.aborted
    ? Promise.resolve()
    : new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));

describe('timeoutSignal', () => {
  it('fires at its deadline after a full garbage collection', async () => {
    const bounds = Array.from({ length: 20 }, () => timeoutSignal(new AbortController().signal, 100));
    // In the same synchronous run as the bounds' creation, so before any deadline can fire,
    // however slow the machine: the hazard (a collected timeout signal) is met every time.
    gc();
    await new Promise((r) => setTimeout(r, 10));
    gc();
    await Promise.all(bounds.map((b) => aborted(b.signal)));
    for (const b of bounds) {
      expect(b.timedOut()).toBe(true);
      expect((b.signal.reason as DOMException).name).toBe('TimeoutError');
    }
  });

  it("follows the caller's signal, and then is not a timeout", () => {
    const caller = new AbortController();
    const b = timeoutSignal(caller.signal, 60_000);
    caller.abort(new Error('shutting down'));
    expect(b.signal.aborted).toBe(true);
    expect(b.timedOut()).toBe(false);
    expect((b.signal.reason as Error).message).toBe('shutting down');
    b.clear();

    const already = timeoutSignal(AbortSignal.abort('gone'), 60_000);
    expect(already.signal.aborted).toBe(true);
    expect(already.timedOut()).toBe(false);
  });

  it('once cleared, neither the deadline nor the caller aborts it', async () => {
    const caller = new AbortController();
    const cleared = timeoutSignal(caller.signal, 50);
    cleared.clear();
    // A bound made after it, with the same deadline, firing shows the first one's deadline has passed.
    const later = timeoutSignal(new AbortController().signal, 50);
    await aborted(later.signal);
    caller.abort();
    expect(cleared.signal.aborted).toBe(false);
    expect(cleared.timedOut()).toBe(false);
  });

  it('many calls on one caller signal: no leak warning, and every listener gone once they end', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
    process.on('warning', onWarning);
    try {
      const caller = new AbortController();
      const bounds = Array.from({ length: 50 }, () => timeoutSignal(caller.signal, 60_000));
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(50);
      // Warnings are emitted on a later tick: one that comes after them.
      await new Promise((r) => setImmediate(r));
      for (const b of bounds) b.clear();
      expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
      expect(warnings.filter((w) => w.startsWith('MaxListenersExceededWarning'))).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});

describe('boundedCall', () => {
  it('ends a call that never answers at its timeout, across a garbage collection', async () => {
    const calls = Array.from({ length: 10 }, () =>
      boundedCall(
        new AbortController().signal,
        150,
        'apiserver call',
        () => new Promise<never>(() => undefined),
      ).catch((err: unknown) => err),
    );
    gc();
    await new Promise((r) => setTimeout(r, 10));
    gc();
    for (const err of await Promise.all(calls)) {
      expect(err).toBeInstanceOf(CallEnded);
      expect(err).toMatchObject({ by: 'timeout', message: 'apiserver call timed out after 150 ms' });
    }
  });

  it("says 'caller' when the caller's signal ended it, and hands the transport the bound signal", async () => {
    const caller = new AbortController();
    let handed: AbortSignal | undefined;
    const call = boundedCall(caller.signal, 60_000, 'apiserver call', (bounded) => {
      handed = bounded;
      return new Promise<never>(() => undefined);
    });
    caller.abort();
    await expect(call).rejects.toMatchObject({ by: 'caller', message: 'aborted by the caller' });
    expect(handed?.aborted).toBe(true);
  });
});
