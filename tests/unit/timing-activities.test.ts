/**
 * The run's first local activity: the worker's timing, and for a fresh
 * Proxy of a quick provider the create as well, or nothing of the create
 * (never an error) when it fails or takes too long; given the run's state,
 * the status write after that create too, built by the workflow's rules
 * and pinned to the resourceVersion the bridge read.
 */
import { describe, expect, it } from 'vitest';
import { desiredSpec } from '../helpers/desired-spec.js';
import { createTimingActivities } from '../../activities/drift-activities.js';
import type { CreateInstanceInput, CreateInstanceResult, KubeActivities } from '../../activities/types.js';
import type { ProviderRegistry } from '../../providers/config.js';
import type { Provider } from '../../providers/types.js';
import { applyCreated, initialState } from '../../workflows/proxy/transitions.js';
import { buildStatus } from '../../workflows/proxy/status.js';
import { DEFAULT_TIMING, type ProxyState } from '../../workflows/proxy/types.js';
import type { ProxyStatus } from '../../resources/proxy-schema.js';

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

/** The unhandled rejections `act` leads to, a turn of the event loop later (when Node reports them). */
async function unhandledAfter(act: () => void): Promise<unknown[]> {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  try {
    act();
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    return unhandled;
  } finally {
    process.off('unhandledRejection', onUnhandled);
  }
}

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
    const start = await activities.proxyTiming({ provider: 'quick', create });
    expect(started).toBe(true);
    expect(start.created).toBeUndefined();
    expect(await unhandledAfter(() => fail(new Error('too late')))).toEqual([]);
  });

  describe('with the run state: the status the create leaves', () => {
    /** A fresh run's state, as the workflow sends it (a copy). */
    const fresh = (): ProxyState =>
      initialState({
        ref: create.ref,
        desired: desiredSpec({ generation: 3, provider: 'quick', specHash: 'h' }),
      });
    type Write = Parameters<KubeActivities['writeProxyStatus']>[0];
    const timingWith = (
      writeProxyStatus: (input: Write) => Promise<'written' | 'gone' | 'stale'>,
      createAtStartMs?: number,
    ) =>
      createTimingActivities({
        registry: registryOf({ quick: { quickCreate: true } }),
        timing: DEFAULT_TIMING,
        sweepOn: false,
        createInstance: () => Promise.resolve(made),
        writeProxyStatus,
        ...(createAtStartMs ? { createAtStartMs } : {}),
      });

    /** A fresh run's start with its state (pinned to version 41), against this status write. */
    const startWith = (
      writeProxyStatus: (input: Write) => Promise<'written' | 'gone' | 'stale'>,
      createAtStartMs?: number,
    ) =>
      timingWith(writeProxyStatus, createAtStartMs).proxyTiming({
        provider: 'quick',
        create,
        report: { state: fresh(), resourceVersion: '41' },
      });

    it('writes what the workflow would, against the status it knows, and says so', async () => {
      const writes: Write[] = [];
      const previous: ProxyStatus = { conditions: [] };
      const activities = timingWith((input) => {
        writes.push(input);
        return Promise.resolve('written');
      });
      const start = await activities.proxyTiming({
        provider: 'quick',
        create,
        report: { state: fresh(), previous, resourceVersion: '41' },
      });
      expect(writes).toHaveLength(1);
      expect(writes[0]!.ref).toEqual(create.ref);
      expect(writes[0]!.previous).toEqual(previous);
      expect(writes[0]!.resourceVersion).toBe('41');
      expect(writes[0]!.status).toMatchObject({
        phase: 'Provisioning',
        providerID: 'local/p',
        ip: '127.0.0.2',
        observedGeneration: 3,
      });
      expect(start.reported).toEqual({ outcome: 'written', status: writes[0]!.status });
      // The workflow, taking those conditions, builds the same status later:
      // its first publish has nothing to write.
      const mine = fresh();
      applyCreated(mine, made, Date.now(), start);
      mine.conditions = start.reported!.status.conditions ?? [];
      expect(JSON.stringify(buildStatus(mine, new Date(Date.now() + 60_000)))).toBe(
        JSON.stringify(start.reported!.status),
      );
    });

    it('a Proxy gone by the write is reported gone', async () => {
      const start = await startWith(() => Promise.resolve('gone'));
      expect(start.created).toEqual(made);
      expect(start.reported?.outcome).toBe('gone');
    });

    it('a Proxy written to since the bridge read it is not written: the workflow writes itself', async () => {
      const start = await startWith(() => Promise.resolve('stale'));
      expect(start.created).toEqual(made);
      expect(start.reported).toBeUndefined();
    });

    it('a failed write keeps the create: the workflow writes itself', async () => {
      const start = await startWith(() => Promise.reject(new Error('apiserver down')));
      expect(start.created).toEqual(made);
      expect(start.reported).toBeUndefined();
    });

    it('a write past the deadline keeps the create and is left to finish; its late failure is nobody’s', async () => {
      let fail: (error: Error) => void = () => undefined;
      const start = await startWith(() => new Promise<'written'>((_, reject) => (fail = reject)), 20);
      expect(start.created).toEqual(made);
      expect(start.reported).toBeUndefined();
      expect(await unhandledAfter(() => fail(new Error('too late')))).toEqual([]);
    });
  });
});
