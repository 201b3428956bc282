/**
 * The Proxy lifecycle rules of drift-by-sweep (workflows/proxy's
 * transitions.ts, steps.ts, scheduling.ts): when a look at the instance is
 * due, what a wake-up does, the wait after each failure, deletion's steps,
 * and what a fresh run resumes from. Pure functions, no Temporal.
 */
import { describe, expect, it } from 'vitest';
import { desiredSpec } from '../helpers/desired-spec.js';
import {
  applyDeletion,
  applyDrift,
  applyHealth,
  applySpec,
  initialState,
  observe,
  resumeFromStatus,
} from '../../workflows/proxy/transitions.js';
import { buildStatus } from '../../workflows/proxy/status.js';
import {
  deletionFailureAction,
  failureWait,
  scheduleLook,
  steadyPollMs,
  waitMs,
} from '../../workflows/proxy/scheduling.js';
import { deletionStep, nextStep } from '../../workflows/proxy/steps.js';
import { FailureType } from '../../workflows/proxy/failure-types.js';
import {
  DEFAULT_TIMING,
  type DesiredSpec,
  type ProxyState,
  type WorkerTiming,
} from '../../workflows/proxy/types.js';

const NOW = Date.parse('2026-12-01T10:00:00Z');
const SWEPT: WorkerTiming = { ...DEFAULT_TIMING, swept: true };
const UNSWEPT: WorkerTiming = { ...DEFAULT_TIMING, swept: false };
const at = (ms: number) => ({ nowMs: NOW + ms, errorRetryMs: DEFAULT_TIMING.errorRetryMs });

const desired = desiredSpec;

/** A steady proxy: Running at 127.0.0.5, its next look scheduled by the answer that said so. */
function steady(timing: WorkerTiming = SWEPT): ProxyState {
  const s = initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired() });
  s.instanceId = 'local/proxy-x';
  s.instanceSpecHash = s.desired.specHash;
  scheduleLook(s, observe(s, { found: true, state: 'Running', ip: '127.0.0.5' }), NOW, timing);
  return s;
}

describe('steady waits', () => {
  it('a swept provider waits the safety poll; an unswept one its drift poll; the safety poll bounds both', () => {
    expect(steadyPollMs(SWEPT)).toBe(6 * 3_600_000);
    expect(steadyPollMs(UNSWEPT)).toBe(10 * 60_000);
    expect(steadyPollMs({ ...UNSWEPT, safetyPollMs: 5_000 })).toBe(5_000);
    expect(waitMs('driftPollMs', SWEPT)).toBe(steadyPollMs(SWEPT));
    expect(waitMs('provisioningPollMs', SWEPT)).toBe(DEFAULT_TIMING.provisioningPollMs);
  });

  it('a Running answer schedules the next look one steady poll later; nothing is asked before it', () => {
    const s = steady();
    expect(s.nextLookAtMs).toBe(NOW + steadyPollMs(SWEPT));
    expect(nextStep(s, at(1_000))).toEqual({ kind: 'wait-until', atMs: s.nextLookAtMs });
    expect(nextStep(s, at(steadyPollMs(SWEPT)))).toEqual({ kind: 'get' });
  });

  it('a provisioning answer schedules the next look at the provisioning poll', () => {
    const s = initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired() });
    s.instanceId = 'local/proxy-x';
    scheduleLook(s, observe(s, { found: true, state: 'Provisioning' }), NOW, SWEPT);
    expect(s.nextLookAtMs).toBe(NOW + DEFAULT_TIMING.provisioningPollMs);
  });

  it('NotFound makes the next step due at once (recreate)', () => {
    const s = steady();
    scheduleLook(s, observe(s, { found: false }), NOW, SWEPT);
    expect(s.nextLookAtMs).toBeUndefined();
    expect(nextStep(s, at(1))).toEqual({ kind: 'create' });
  });
});

describe('wake-ups', () => {
  it('a health or latency signal changes status only: the same deadline, no look', () => {
    const s = steady();
    const deadline = s.nextLookAtMs;
    expect(applyHealth(s, { ip: '127.0.0.5', healthy: true, latencyMillis: 40, checkedAt: 'x' })).toBe(true);
    expect(nextStep(s, at(2_000))).toEqual({ kind: 'wait-until', atMs: deadline });
    expect(applyHealth(s, { ip: '127.0.0.5', healthy: true, latencyMillis: 90, checkedAt: 'y' })).toBe(true);
    expect(nextStep(s, at(3_000))).toEqual({ kind: 'wait-until', atMs: deadline });
  });

  it('a drift report about the current instance makes a look due now', () => {
    const s = steady();
    expect(applyDrift(s, { instanceId: 'local/proxy-x', observed: { found: false } })).toBe(true);
    expect(nextStep(s, at(1))).toEqual({ kind: 'get' });
    // Already due: a second report changes nothing.
    expect(applyDrift(s, { instanceId: 'local/proxy-x', observed: { found: false } })).toBe(false);
  });

  it('ignores a drift report about another instance, or while replacing or deleting', () => {
    const other = steady();
    expect(applyDrift(other, { instanceId: 'local/proxy-old', observed: { found: false } })).toBe(false);
    const replacing = steady();
    applySpec(replacing, desired({ generation: 2, specHash: 'v2:bbbb' }));
    replacing.replacing = 'spec-changed';
    expect(applyDrift(replacing, { instanceId: 'local/proxy-x', observed: { found: false } })).toBe(false);
    const deleting = steady();
    applyDeletion(deleting, { skipCleanup: false });
    expect(applyDrift(deleting, { instanceId: 'local/proxy-x', observed: { found: false } })).toBe(false);
  });

  it('a spec change that replaces acts at once, before the deadline', () => {
    const s = steady();
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb' }));
    expect(nextStep(s, at(1))).toEqual({ kind: 'delete' });
  });

  it('a spec change that keeps the instance does not look early', () => {
    const s = steady();
    applySpec(s, desired({ generation: 2 }));
    expect(nextStep(s, at(1))).toEqual({ kind: 'wait-until', atMs: s.nextLookAtMs });
  });

  it('a replacement repeats its delete only at its own poll', () => {
    const s = steady();
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb' }));
    s.replacing = 'spec-changed';
    scheduleLook(s, observe(s, { found: true, state: 'Running', ip: '127.0.0.5' }), NOW, SWEPT);
    expect(s.nextLookAtMs).toBe(NOW + DEFAULT_TIMING.deletionPollMs);
    expect(nextStep(s, at(1))).toEqual({ kind: 'wait-until', atMs: s.nextLookAtMs });
    expect(nextStep(s, at(DEFAULT_TIMING.deletionPollMs))).toEqual({ kind: 'delete' });
  });
});

describe('failure waits', () => {
  it('Permanent waits for a signal; Quota, unconfigured provider, cloud-init and a gone Proxy retry slowly', () => {
    const s = steady();
    expect(failureWait(s, FailureType.Permanent)).toBe('forever');
    expect(failureWait(s, FailureType.QuotaExceeded)).toBe('quotaRetryMs');
    expect(failureWait(s, FailureType.ProviderNotConfigured)).toBe('errorRetryMs');
    expect(failureWait(s, FailureType.CloudInitError)).toBe('errorRetryMs');
    expect(failureWait(s, FailureType.ProxyGone)).toBe('errorRetryMs');
  });

  it('a transient failure of a steady look waits errorRetryMs; while provisioning, the provisioning poll', () => {
    expect(failureWait(steady(), FailureType.Transient)).toBe('errorRetryMs');
    const creating = initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired() });
    expect(failureWait(creating, FailureType.Transient)).toBe('provisioningPollMs');
    // A replacement's look polls as provisioning does.
    const replacing = steady();
    replacing.replacing = 'spec-changed';
    expect(failureWait(replacing, FailureType.Transient)).toBe('provisioningPollMs');
  });
});

describe('deletion', () => {
  it('looks for a never-recorded instance by UID, looks at a known one, releases without cleanup', () => {
    const s = initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired() });
    applyDeletion(s, { skipCleanup: false });
    expect(deletionStep(s)).toBe('find-by-uid');
    s.instanceId = 'local/proxy-x';
    expect(deletionStep(s)).toBe('look');
    applyDeletion(s, { skipCleanup: true });
    expect(deletionStep(s)).toBe('release');
    const external = initialState({
      ref: { namespace: 'ns', name: 'e', uid: 'u2' },
      desired: desired({ mode: 'External', endpoint: { host: 'h', port: 1 } }),
    });
    expect(deletionStep(external)).toBe('release');
  });

  it('a Get that can never succeed is answered with Delete-then-release; the rest wait and look again', () => {
    expect(deletionFailureAction(FailureType.Permanent)).toBe('delete-then-release');
    expect(deletionFailureAction(FailureType.ProviderNotConfigured)).toBe('delete-then-release');
    expect(deletionFailureAction(FailureType.QuotaExceeded)).toBe('quotaRetryMs');
    expect(deletionFailureAction(FailureType.Transient)).toBe('deletionPollMs');
  });
});

describe('a fresh run resumes from the recorded status', () => {
  const fresh = (over: Partial<DesiredSpec> = {}) =>
    initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired(over) });
  /** What a steady Ready Proxy's status records, as buildStatus wrote it. */
  const recordedOf = (s: ProxyState) => {
    s.health = { verdict: 'Healthy', latencyMillis: 42, checkedAt: '2026-12-01T09:59:00Z' };
    return buildStatus(s, new Date(NOW - 60_000));
  };

  it('knows its instance: an unchanged spec looks at once, and stays Ready through an unchanged answer', () => {
    const before = steady();
    const status = recordedOf(before);
    const s = fresh();
    resumeFromStatus(s, status);
    expect(s.instanceId).toBe('local/proxy-x');
    expect(nextStep(s, at(0))).toEqual({ kind: 'get' });
    expect(buildStatus(s, new Date(NOW)).phase).toBe('Ready');
    observe(s, { found: true, state: 'Running', ip: '127.0.0.5' });
    const after = buildStatus(s, new Date(NOW));
    expect(after.phase).toBe('Ready');
    expect(after.latencyMillis).toBe(42);
    // Kubernetes conventions: no transition, so the recorded times stand.
    expect(after.conditions).toEqual(status.conditions);
  });

  it('a spec edited while no run was there replaces the recorded instance', () => {
    const status = recordedOf(steady());
    const s = fresh({ generation: 2, port: 3129, specHash: 'v2:bbbb' });
    resumeFromStatus(s, status);
    expect(nextStep(s, at(0))).toEqual({ kind: 'delete' });
  });

  it('only the hash algorithm changed: adopted, not replaced', () => {
    const status = recordedOf(steady());
    const s = fresh({ specHash: 'v3:cccc', legacySpecHashes: ['v2:aaaa'] });
    resumeFromStatus(s, status);
    expect(nextStep(s, at(0))).toEqual({ kind: 'get' });
    expect(s.instanceSpecHash).toBe('v3:cccc');
  });

  it('another address at the first look resets the recorded health', () => {
    const s = fresh();
    resumeFromStatus(s, recordedOf(steady()));
    observe(s, { found: true, state: 'Running', ip: '127.0.0.9' });
    expect(s.health.verdict).toBe('Unknown');
    expect(buildStatus(s, new Date(NOW)).phase).toBe('Provisioning');
  });

  it('a deletion by a fresh run looks at the recorded instance instead of searching by UID', () => {
    const s = fresh({ deletionRequested: true });
    resumeFromStatus(s, recordedOf(steady()));
    expect(deletionStep(s)).toBe('look');
  });

  it('nothing recorded, or an External proxy: nothing seeded', () => {
    const empty = fresh();
    resumeFromStatus(empty, {});
    expect(empty).toEqual(fresh());
    expect(nextStep(empty, at(0))).toEqual({ kind: 'create' });
    const external = fresh({ mode: 'External', endpoint: { host: '127.0.0.7', port: 3128 } });
    resumeFromStatus(external, { providerID: 'x', ip: '127.0.0.7', conditions: [] });
    expect(external.instanceId).toBeUndefined();
  });

  it('an instance recorded without an address is looked at, with no health carried', () => {
    const s = fresh();
    resumeFromStatus(s, {
      providerID: 'local/proxy-x',
      specHash: 'v2:aaaa',
      conditions: [
        {
          type: 'Healthy',
          status: 'True',
          reason: 'ProbeSucceeded',
          message: 'ok',
          lastTransitionTime: '2026-12-01T09:00:00Z',
        },
      ],
    });
    expect(s.health.verdict).toBe('Unknown');
    expect(s.instanceState).toBeUndefined();
    expect(nextStep(s, at(0))).toEqual({ kind: 'get' });
  });
});
