import { describe, expect, it } from 'vitest';
import { desiredSpec } from '../helpers/desired-spec.js';
import {
  applyLeasesDrained,
  applySpec,
  beginDrain,
  drainDone,
  initialState,
  needsDrain,
  observe,
} from '../../workflows/proxy/transitions.js';
import { buildStatus } from '../../workflows/proxy/status.js';
import { scheduleLook } from '../../workflows/proxy/scheduling.js';
import { nextStep } from '../../workflows/proxy/steps.js';
import {
  DEFAULT_TIMING,
  type DesiredSpec,
  type ProxyState,
  type WorkerTiming,
} from '../../workflows/proxy/types.js';

const T0 = Date.parse('2026-12-03T10:00:00Z');

const desired = desiredSpec;

function running(over: Partial<DesiredSpec> = {}, ip = '127.0.0.5'): ProxyState {
  const s = initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired(over) });
  s.instanceId = 'local/proxy-x';
  s.instanceSpecHash = s.desired.specHash;
  observe(s, { found: true, state: 'Running', ip });
  return s;
}

const clock = (nowMs: number) => ({ nowMs, errorRetryMs: 60_000 });

describe('drain before a replacement', () => {
  it('without drainTimeoutSeconds a spec change deletes at once (the seed)', () => {
    const s = running();
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb' }));
    expect(needsDrain(s)).toBe(false);
    expect(nextStep(s, clock(T0))).toEqual({ kind: 'delete' });
  });

  it('with it, a spec change drains first, until the lease API says no lease is left', () => {
    const s = running({ drainTimeoutSeconds: 600 });
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb', drainTimeoutSeconds: 600 }));
    expect(nextStep(s, clock(T0))).toEqual({ kind: 'drain', untilMs: undefined });
    beginDrain(s, 'replacing', T0);
    expect(nextStep(s, clock(T0 + 1000))).toEqual({ kind: 'drain', untilMs: T0 + 600_000 });
    const status = buildStatus(s, new Date(T0));
    const draining = status.conditions!.find((c) => c.type === 'Draining');
    expect(draining).toMatchObject({ status: 'True', reason: 'Replacing' });
    // Still addressed (held leases keep working), but not Ready (no new lease).
    expect(status.ip).toBe('127.0.0.5');
    expect(status.conditions!.find((c) => c.type === 'Ready')).toMatchObject({
      status: 'False',
      reason: 'Draining',
    });
    // A report about another address is stale.
    expect(applyLeasesDrained(s, { ip: '127.0.0.9' })).toBe(false);
    expect(applyLeasesDrained(s, { ip: '127.0.0.5' })).toBe(true);
    expect(drainDone(s, T0 + 2000)).toBe(true);
    expect(nextStep(s, clock(T0 + 2000))).toEqual({ kind: 'delete' });
  });

  it('gives up waiting at the deadline', () => {
    const s = running({ drainTimeoutSeconds: 60 });
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb', drainTimeoutSeconds: 60 }));
    beginDrain(s, 'replacing', T0);
    expect(drainDone(s, T0 + 59_999)).toBe(false);
    expect(drainDone(s, T0 + 60_000)).toBe(true);
    expect(nextStep(s, clock(T0 + 60_000))).toEqual({ kind: 'delete' });
  });

  it('is called off when the spec goes back to what the instance runs', () => {
    const s = running({ drainTimeoutSeconds: 60 });
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb', drainTimeoutSeconds: 60 }));
    beginDrain(s, 'replacing', T0);
    buildStatus(s, new Date(T0));
    applySpec(s, desired({ generation: 3, specHash: 'v2:aaaa', drainTimeoutSeconds: 60 }));
    expect(nextStep(s, clock(T0 + 1000)).kind).toBe('get');
    expect(s.drain).toBeUndefined();
    const status = buildStatus(s, new Date(T0 + 1000));
    expect(status.conditions!.find((c) => c.type === 'Draining')).toMatchObject({ status: 'False' });
  });

  it('drains nothing that is not running, nor a deletion that skips cleanup', () => {
    const provisioning = running({ drainTimeoutSeconds: 60 });
    observe(provisioning, { found: true, state: 'Provisioning' });
    expect(needsDrain(provisioning)).toBe(false);
    const skip = running({ drainTimeoutSeconds: 60, deletionRequested: true, skipCleanup: true });
    expect(needsDrain(skip)).toBe(false);
    const external = running({ drainTimeoutSeconds: 60, mode: 'External' });
    expect(needsDrain(external)).toBe(false);
  });

  it('a Proxy that never drains writes no Draining condition (its status is as before)', () => {
    const s = running();
    const status = buildStatus(s, new Date(T0));
    expect(status.conditions!.map((c) => c.type)).not.toContain('Draining');
  });
});

describe('an instance its provider ends by itself (expiresAt)', () => {
  const ENDS = new Date(T0 + 90_000).toISOString();
  const timing: WorkerTiming = { ...DEFAULT_TIMING, swept: true };

  it('records the end while Running, shows it in status, and forgets it when the instance goes', () => {
    const s = running({ drainTimeoutSeconds: 600 });
    observe(s, { found: true, state: 'Running', ip: '127.0.0.5', port: 3128, expiresAt: ENDS });
    expect(s.expiresAt).toBe(ENDS);
    expect(buildStatus(s, new Date(T0)).expiresAt).toBe(ENDS);
    observe(s, { found: true, state: 'Terminated' });
    expect(s.expiresAt).toBeUndefined();
    expect(buildStatus(s, new Date(T0)).expiresAt).toBeUndefined();
  });

  it('a drain ends with the instance: its deadline is the earlier of the timeout and the end', () => {
    const s = running({ drainTimeoutSeconds: 600 });
    observe(s, { found: true, state: 'Running', ip: '127.0.0.5', expiresAt: ENDS });
    beginDrain(s, 'deleting', T0);
    expect(s.drain!.untilMs).toBe(T0 + 90_000);
    expect(drainDone(s, T0 + 89_999)).toBe(false);
    expect(drainDone(s, T0 + 90_000)).toBe(true);
    // Without an end, the timeout alone.
    const plain = running({ drainTimeoutSeconds: 600 });
    beginDrain(plain, 'deleting', T0);
    expect(plain.drain!.untilMs).toBe(T0 + 600_000);
  });

  it('the steady look falls at the end, not at the next steady poll', () => {
    const s = running();
    observe(s, { found: true, state: 'Running', ip: '127.0.0.5', expiresAt: ENDS });
    scheduleLook(s, 'driftPollMs', T0, timing);
    expect(s.nextLookAtMs).toBe(T0 + 90_000);
    // Past the end (a clock a little ahead): the usual poll, never a look in the past.
    scheduleLook(s, 'driftPollMs', T0 + 120_000, timing);
    expect(s.nextLookAtMs).toBe(T0 + 120_000 + DEFAULT_TIMING.safetyPollMs);
  });
});
