import { describe, expect, it } from 'vitest';
import { toApplicationFailure } from '../../activities/failures.js';
import { createProviderCircuits, type CircuitView } from '../../activities/provider-circuit.js';
import { classOf, providerError } from '../../providers/errors.js';

const transient = () =>
  providerError({ errorClass: 'Transient', operation: 'get', provider: 'p', instance: 'i', message: 'down' });
const notFound = () =>
  providerError({ errorClass: 'NotFound', operation: 'get', provider: 'p', instance: 'i', message: 'gone' });

function harness() {
  let now = 0;
  const changes: Array<[string, CircuitView]> = [];
  const circuits = createProviderCircuits({
    failuresToOpen: 3,
    initialOpenMs: 1_000,
    maxOpenMs: 4_000,
    now: () => now,
    onChange: (p, v) => changes.push([p, v]),
  });
  let backendCalls = 0;
  let backendUp = false;
  const call = () =>
    circuits.run('p', 'get', 'i', () => {
      backendCalls += 1;
      return backendUp ? Promise.resolve('ok') : Promise.reject(transient());
    });
  return {
    circuits,
    changes,
    call,
    advance: (ms: number) => (now += ms),
    calls: () => backendCalls,
    up: () => (backendUp = true),
  };
}

describe('provider circuit', () => {
  it('pauses a provider after consecutive transient failures: calls fail fast without reaching it', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await expect(h.call()).rejects.toThrow('down');
    expect(h.calls()).toBe(3);
    expect(h.circuits.view('p')).toMatchObject({ open: true, consecutiveFailures: 3, retryInMs: 1_000 });
    for (let i = 0; i < 100; i++) {
      const error = await h.call().catch((e: unknown) => e);
      expect(classOf(error)).toBe('Transient');
      expect((error as Error).message).toMatch(/calls paused after 3 consecutive transient failures/);
      // Why it is paused stays visible: the last failure's own message.
      expect((error as Error).message).toContain('; last: p: get i: down (Transient)');
    }
    expect(h.calls()).toBe(3);
    expect(h.changes).toHaveLength(1);
  });

  it('lets one trial through per pause, doubling the pause up to its cap', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    const pauses: number[] = [];
    for (let round = 0; round < 5; round++) {
      pauses.push(h.circuits.view('p').retryInMs!);
      h.advance(h.circuits.view('p').retryInMs!);
      await h.call().catch(() => undefined);
    }
    expect(pauses).toEqual([1_000, 2_000, 4_000, 4_000, 4_000]);
    expect(h.calls()).toBe(3 + 5);
  });

  it('allows only one trial at a time while half-open', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    h.advance(1_000);
    let release!: () => void;
    const trial = h.circuits.run(
      'p',
      'get',
      'i',
      () => new Promise<string>((r) => (release = () => r('ok'))),
    );
    await expect(h.call()).rejects.toThrow(/calls paused/);
    release();
    await expect(trial).resolves.toBe('ok');
    expect(h.circuits.view('p').open).toBe(false);
  });

  it('closes on any answer from a working backend: success, or NotFound through run()', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    h.advance(1_000);
    await expect(h.circuits.run('p', 'get', 'i', () => Promise.reject(notFound()))).rejects.toThrow('gone');
    expect(h.circuits.view('p')).toEqual({ open: false, consecutiveFailures: 0 });
    expect(h.changes.map(([, v]) => v.open)).toEqual([true, false]);
  });

  it("the drift sweep's successful list closes it at once (recovery within one sweep)", async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    h.up();
    h.circuits.record('p', 'ok');
    await expect(h.call()).resolves.toBe('ok');
  });

  it('keeps providers apart', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    await expect(h.circuits.run('other', 'get', 'i', () => Promise.resolve(1))).resolves.toBe(1);
  });

  it('a paused call leaves the activity as a non-retryable Transient (the workflow paces the next try)', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) await h.call().catch(() => undefined);
    const paused = toApplicationFailure(await h.call().catch((e: unknown) => e));
    expect(paused).toMatchObject({ type: 'Transient', nonRetryable: true });
    // A failure from the backend itself stays retryable.
    expect(toApplicationFailure(transient())).toMatchObject({ type: 'Transient', nonRetryable: false });
  });
});
