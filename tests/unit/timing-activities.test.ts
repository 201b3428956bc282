/**
 * The run's first local activity: the worker's timing, and for a fresh
 * Proxy of a quick provider the create as well, or nothing of the create
 * (never an error) when it fails or takes too long.
 */
import { describe, expect, it } from 'vitest';
import { createTimingActivities } from '../../activities/drift-activities.js';
import type { CreateInstanceInput, CreateInstanceResult } from '../../activities/types.js';
import type { ProviderRegistry } from '../../providers/config.js';
import type { Provider } from '../../providers/types.js';
import { DEFAULT_TIMING } from '../../workflows/proxy/types.js';

/** A registry of named providers, each only as far as capabilities go. */
function registryOf(providers: Record<string, { quickCreate: boolean }>): ProviderRegistry {
  return {
    get: (name) =>
      providers[name]
        ? ({ name, capabilities: { quickCreate: providers[name].quickCreate } } as Provider)
        : undefined,
    names: () => Object.keys(providers),
    close: () => Promise.resolve(),
  };
}

const create: CreateInstanceInput = {
  ref: { namespace: 'ns', name: 'p', uid: 'u-1' },
  provider: 'quick',
  placement: {},
  port: 3128,
};
const made: CreateInstanceResult = {
  id: 'local/p',
  specHash: 'h',
  seen: { found: true, state: 'Running', ip: '127.0.0.2' },
};

describe('proxyTiming', () => {
  it('creates only when asked to and the provider is quick', async () => {
    const calls: string[] = [];
    const activities = createTimingActivities({
      registry: registryOf({ quick: { quickCreate: true }, slow: { quickCreate: false } }),
      timing: DEFAULT_TIMING,
      sweepOn: false,
      createInstance: (input) => {
        calls.push(input.provider);
        return Promise.resolve(made);
      },
    });
    await expect(activities.proxyTiming({ provider: 'quick', create })).resolves.toEqual({
      ...DEFAULT_TIMING,
      swept: false,
      quickCreate: true,
      created: made,
    });
    const notQuick = await activities.proxyTiming({
      provider: 'slow',
      create: { ...create, provider: 'slow' },
    });
    expect(notQuick).toEqual({ ...DEFAULT_TIMING, swept: false, quickCreate: false });
    const notAsked = await activities.proxyTiming({ provider: 'quick' });
    expect(notAsked.created).toBeUndefined();
    expect(calls).toEqual(['quick']);
  });

  it('a failed create leaves the timing alone: the workflow creates and meets the failure', async () => {
    const activities = createTimingActivities({
      registry: registryOf({ quick: { quickCreate: true } }),
      timing: DEFAULT_TIMING,
      sweepOn: false,
      createInstance: () => Promise.reject(new Error('quota')),
    });
    const start = await activities.proxyTiming({ provider: 'quick', create });
    expect(start).toMatchObject({ quickCreate: true });
    expect(start.created).toBeUndefined();
  });

  it('a create past the deadline is left to finish on its own; its late failure is nobody’s', async () => {
    let fail: (error: Error) => void = () => undefined;
    let started = false;
    const activities = createTimingActivities({
      registry: registryOf({ quick: { quickCreate: true } }),
      timing: DEFAULT_TIMING,
      sweepOn: false,
      createAtStartMs: 20,
      createInstance: () => {
        started = true;
        return new Promise<CreateInstanceResult>((_, reject) => (fail = reject));
      },
    });
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const start = await activities.proxyTiming({ provider: 'quick', create });
      expect(started).toBe(true);
      expect(start.created).toBeUndefined();
      fail(new Error('too late'));
      // A turn of the event loop for an unhandled rejection to be reported.
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
