import { describe, expect, it } from 'vitest';
import {
  applyDeletion,
  applyHealth,
  applySpec,
  initialState,
  latch,
  observe,
} from '../../workflows/proxy/transitions.js';
import { buildConditions, buildStatus, derivePhase } from '../../workflows/proxy/status.js';
import { nextStep } from '../../workflows/proxy/steps.js';
import { FailureType } from '../../workflows/proxy/failure-types.js';
import { parseProxyWorkflowId, proxyWorkflowId } from '../../workflows/proxy/ids.js';
import type { DesiredSpec, ProxyState } from '../../workflows/proxy/types.js';
import { desiredSpec } from '../helpers/desired-spec.js';

const T0 = new Date('2026-11-29T10:00:00Z');

function desired(over: Partial<DesiredSpec> = {}): DesiredSpec {
  return desiredSpec({ legacySpecHashes: ['v1:old-aaaa'], ...over });
}

function state(over: Partial<DesiredSpec> = {}): ProxyState {
  return initialState({ ref: { namespace: 'ns', name: 'p', uid: 'u1' }, desired: desired(over) });
}

function running(s: ProxyState, ip = '127.0.0.5'): ProxyState {
  s.instanceId = 'local/proxy-x';
  s.instanceSpecHash = s.desired.specHash;
  observe(s, { found: true, state: 'Running', ip });
  return s;
}

describe('applySpec', () => {
  it('ignores an older generation arriving late (several bridges, restarts)', () => {
    const s = state({ generation: 3 });
    expect(applySpec(s, desired({ generation: 2, port: 9999 }))).toBe(false);
    expect(s.desired.port).toBe(3128);
  });

  it('treats a re-sent identical spec as no change', () => {
    const s = state();
    expect(applySpec(s, desired())).toBe(false);
  });

  it('never undoes a deletion request', () => {
    const s = state();
    applyDeletion(s, { skipCleanup: false });
    applySpec(s, desired({ generation: 2 }));
    expect(s.desired.deletionRequested).toBe(true);
  });

  it('clears a latched failure when the generation changes, and only then', () => {
    const s = state();
    latch(s, FailureType.Permanent, 'bad zone', T0);
    expect(applySpec(s, desired({ skipCleanup: true }))).toBe(true);
    expect(s.failure?.type).toBe(FailureType.Permanent);
    applySpec(s, desired({ generation: 2 }));
    expect(s.failure).toBeUndefined();
  });

  it('clears a cloud-init failure when the Secret content (hash) changes at the same generation', () => {
    const s = state();
    latch(s, FailureType.CloudInitError, 'Secret ns/s not found', T0);
    applySpec(s, desired({ specHash: 'v2:bbbb' }));
    expect(s.failure).toBeUndefined();
  });
});

describe('nextStep', () => {
  it('creates when there is no instance', () => {
    expect(nextStep(state())).toEqual({ kind: 'create' });
  });

  it('waits for a signal while a Permanent failure is latched for this generation', () => {
    const s = state();
    latch(s, FailureType.Permanent, 'x', T0);
    expect(nextStep(s)).toEqual({ kind: 'wait-for-signal' });
  });

  it('waits (no create) while the referenced Secret cannot be resolved', () => {
    expect(nextStep(state({ cloudInitProblem: 'Secret ns/s not found' }))).toEqual({
      kind: 'wait',
      ms: 'errorRetryMs',
    });
  });

  it('replaces on a spec-hash change', () => {
    const s = running(state());
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb' }));
    expect(nextStep(s)).toEqual({ kind: 'delete' });
  });

  it('keeps a running instance when its cloud-init Secret goes away, and adopts no hash meanwhile', () => {
    const s = running(state());
    applyHealth(s, { ip: '127.0.0.5', healthy: true, latencyMillis: 5, checkedAt: T0.toISOString() });
    // The bridge hashes no content at all while the Secret is missing.
    applySpec(s, desired({ specHash: 'v2:empty', cloudInitProblem: 'Secret ns/s not found' }));
    expect(nextStep(s)).toEqual({ kind: 'get' });
    expect(s.instanceSpecHash).toBe('v2:aaaa');
    const status = buildStatus(s, T0);
    expect(status.phase).toBe('Ready');
    expect(status.conditions?.find((c) => c.type === 'CloudInitError')).toMatchObject({
      status: 'True',
      message: 'Secret ns/s not found',
    });
    expect(status.conditions?.find((c) => c.type === 'Provisioned')?.status).toBe('True');
    // The Secret returns with the same content: nothing to replace.
    applySpec(s, desired());
    expect(nextStep(s)).toEqual({ kind: 'get' });
    expect(buildStatus(s, T0).conditions?.find((c) => c.type === 'CloudInitError')?.status).toBe('False');
  });

  it('tries a create latched on CloudInitError again once the latch is errorRetryMs old', () => {
    const s = state();
    latch(s, FailureType.CloudInitError, 'Secret ns/s not found', T0);
    const at = (ms: number) => ({ nowMs: T0.getTime() + ms, errorRetryMs: 60_000 });
    expect(nextStep(s, at(59_999))).toEqual({ kind: 'wait', ms: 'errorRetryMs' });
    expect(nextStep(s, at(60_000))).toEqual({ kind: 'create' });
    // Still no create while the bridge says the Secret cannot be read.
    applySpec(s, desired({ specHash: 'v2:empty', cloudInitProblem: 'Secret ns/s not found' }));
    expect(nextStep(s, at(3_600_000))).toEqual({ kind: 'wait', ms: 'errorRetryMs' });
  });

  it('adopts a hash that differs only by version without replacing', () => {
    const s = running(state());
    s.instanceSpecHash = 'v1:old-aaaa';
    expect(nextStep(s)).toEqual({ kind: 'get' });
    expect(s.instanceSpecHash).toBe('v2:aaaa');
  });

  it('External proxies make no provider calls', () => {
    expect(
      nextStep(
        state({ mode: 'External', provider: undefined, endpoint: { host: '198.51.100.1', port: 3128 } }),
      ),
    ).toEqual({
      kind: 'wait-for-signal',
    });
  });
});

describe('observe', () => {
  it('Running needs an IP: Running without one is Provisioning', () => {
    const s = state();
    s.instanceId = 'local/x';
    expect(observe(s, { found: true, state: 'Running' })).toBe('provisioningPollMs');
    expect(s.instanceState).toBe('Provisioning');
    expect(derivePhase(s)).toBe('Provisioning');
  });

  it('Stopped or Terminated starts a replacement (delete, then recreate)', () => {
    for (const st of ['Stopped', 'Terminated'] as const) {
      const s = running(state());
      expect(observe(s, { found: true, state: st })).toBe('now');
      expect(s.replacing).toBe('stopped');
      expect(nextStep(s)).toEqual({ kind: 'delete' });
    }
  });

  it('NotFound during a replacement lets the replacement be created', () => {
    const s = running(state());
    s.replacing = 'spec-changed';
    expect(observe(s, { found: true, state: 'Running', ip: '127.0.0.5' })).toBe('deletionPollMs');
    expect(observe(s, { found: false })).toBe('now');
    expect(s.instanceId).toBeUndefined();
    expect(nextStep(s)).toEqual({ kind: 'create' });
  });

  it('a new IP resets the health verdict to Unknown', () => {
    const s = running(state());
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: T0.toISOString() });
    expect(s.health.verdict).toBe('Healthy');
    observe(s, { found: true, state: 'Running', ip: '127.0.0.6' });
    expect(s.health.verdict).toBe('Unknown');
  });
});

describe('health and phase', () => {
  it('ignores a verdict for an address the proxy no longer has', () => {
    const s = running(state());
    expect(applyHealth(s, { ip: '127.0.0.99', healthy: true, checkedAt: T0.toISOString() })).toBe(false);
  });

  it('derives Ready / Unhealthy from the verdict once Running; Provisioning while Unknown (the seed rule)', () => {
    const s = running(state());
    expect(derivePhase(s)).toBe('Provisioning');
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: T0.toISOString(), latencyMillis: 12 });
    expect(derivePhase(s)).toBe('Ready');
    applyHealth(s, { ip: '127.0.0.5', healthy: false, checkedAt: T0.toISOString(), reason: 'ProxyRefused' });
    expect(derivePhase(s)).toBe('Unhealthy');
  });

  it('QuotaExceeded is a condition, never Failed; Permanent and unknown provider are Failed', () => {
    const s = state();
    latch(s, FailureType.QuotaExceeded, 'quota', T0);
    expect(derivePhase(s)).toBe('Pending');
    const conditions = buildConditions(s, T0);
    expect(conditions.find((c) => c.type === 'QuotaExceeded')?.status).toBe('True');
    expect(conditions.find((c) => c.type === 'Provisioned')).toMatchObject({
      status: 'False',
      reason: 'QuotaExceeded',
    });
    latch(s, FailureType.Permanent, 'bad', T0);
    expect(derivePhase(s)).toBe('Failed');
    latch(s, FailureType.ProviderNotConfigured, 'provider "x" is not configured', T0);
    expect(derivePhase(s)).toBe('Failed');
    expect(buildConditions(s, T0).find((c) => c.type === 'Provisioned')?.reason).toBe(
      'ProviderNotConfigured',
    );
  });

  it('Deleting wins over everything', () => {
    const s = running(state());
    applyDeletion(s, { skipCleanup: false });
    expect(derivePhase(s)).toBe('Deleting');
  });

  it('a deletion held up by a provider error shows it (deletion-shows-error), and the old runs keep "Deleting"', () => {
    const provisioned = (s: ProxyState) => buildConditions(s, T0).find((c) => c.type === 'Provisioned');
    const s = running(state());
    applyDeletion(s, { skipCleanup: false });
    latch(s, FailureType.Transient, 'gcp: delete x: could not obtain an access token', T0);
    // A run whose deletion began before the patch: as it always was.
    expect(provisioned(s)).toMatchObject({ status: 'False', reason: 'Deleting' });
    s.deletionShowsError = true;
    expect(derivePhase(s)).toBe('Deleting');
    expect(provisioned(s)).toMatchObject({
      status: 'False',
      reason: 'DeletionBlocked',
      message:
        'the instance cannot be deleted yet (retried): gcp: delete x: could not obtain an access token',
    });
    expect(buildStatus(s, T0).message).toBe('gcp: delete x: could not obtain an access token');
    s.failure = undefined;
    expect(provisioned(s)).toMatchObject({ status: 'False', reason: 'Deleting' });
  });
});

describe('conditions and status', () => {
  it('keeps lastTransitionTime while a condition status is unchanged, moves it on a change', () => {
    const s = running(state());
    buildStatus(s, T0);
    const t1 = new Date(T0.getTime() + 60_000);
    const again = buildStatus(s, t1);
    expect(again.conditions?.find((c) => c.type === 'Provisioned')?.lastTransitionTime).toBe(
      '2026-11-29T10:00:00Z',
    );
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: t1.toISOString() });
    const after = buildStatus(s, t1);
    expect(after.conditions?.find((c) => c.type === 'Healthy')).toMatchObject({
      status: 'True',
      lastTransitionTime: '2026-11-29T10:01:00Z',
    });
    expect(after.conditions?.find((c) => c.type === 'Provisioned')?.lastTransitionTime).toBe(
      '2026-11-29T10:00:00Z',
    );
  });

  it('a status built twice from the same state is identical (transition-only writes compare it)', () => {
    const s = running(state());
    const a = JSON.stringify(buildStatus(s, T0));
    const b = JSON.stringify(buildStatus(s, new Date(T0.getTime() + 5_000)));
    expect(b).toBe(a);
  });

  it('carries observedGeneration and the instance spec hash', () => {
    const s = running(state({ generation: 4 }));
    const status = buildStatus(s, T0);
    expect(status).toMatchObject({
      observedGeneration: 4,
      specHash: 'v2:aaaa',
      ip: '127.0.0.5',
      providerID: 'local/proxy-x',
    });
    expect(status.conditions?.every((c) => c.observedGeneration === 4)).toBe(true);
  });

  it('a QuotaExceeded condition, once seen, stays as False after recovery', () => {
    const s = state();
    latch(s, FailureType.QuotaExceeded, 'quota', T0);
    buildStatus(s, T0);
    running(s);
    const status = buildStatus(s, T0);
    expect(status.conditions?.find((c) => c.type === 'QuotaExceeded')).toMatchObject({ status: 'False' });
  });
});

describe('the Ready condition: leasable by the lease API’s rule', () => {
  const ready = (s: ProxyState) => buildConditions(s, T0).find((c) => c.type === 'Ready');

  it('is False with the blocking condition’s reason until running and healthy, then True', () => {
    const s = state();
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'Pending' });
    s.instanceId = 'local/proxy-x';
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'Provisioning' });
    running(s);
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'NotProbed' });
    applyHealth(s, { ip: '127.0.0.5', healthy: false, checkedAt: T0.toISOString(), reason: 'ProxyRefused' });
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'ProxyRefused' });
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: T0.toISOString() });
    expect(ready(s)).toMatchObject({ status: 'True', reason: 'Ready' });
  });

  it('follows the lease API, not the phase: a latched Permanent error on a healthy running proxy is still leasable', () => {
    const s = running(state());
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: T0.toISOString() });
    latch(s, FailureType.Permanent, 'bad zone', T0);
    expect(derivePhase(s)).toBe('Failed');
    expect(ready(s)).toMatchObject({ status: 'True' });
  });

  it('is False while replacing and once deletion is requested', () => {
    const s = running(state());
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: T0.toISOString() });
    applySpec(s, desired({ generation: 2, specHash: 'v2:bbbb' }));
    s.replacing = 'spec-changed';
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'Replacing' });
    s.replacing = undefined;
    applyDeletion(s, { skipCleanup: false });
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'Deleting' });
  });

  it('an External proxy is Ready once healthy', () => {
    const s = state({ mode: 'External', provider: undefined, endpoint: { host: '203.0.113.9', port: 3128 } });
    expect(ready(s)).toMatchObject({ status: 'False', reason: 'NotProbed' });
    applyHealth(s, { ip: '203.0.113.9', healthy: true, checkedAt: T0.toISOString() });
    expect(ready(s)).toMatchObject({ status: 'True' });
  });

  it('changes only when the rest of the status does, so it adds no status write', () => {
    const s = running(state());
    const before = JSON.stringify(buildStatus(s, T0));
    expect(JSON.stringify(buildStatus(s, new Date(T0.getTime() + 60_000)))).toBe(before);
  });

  it('lastHealthReportTime is the time of the report the workflow last heard', () => {
    const s = running(state());
    applyHealth(s, { ip: '127.0.0.5', healthy: true, checkedAt: '2026-11-29T10:05:00.000Z' });
    expect(buildStatus(s, T0).lastHealthReportTime).toBe('2026-11-29T10:05:00.000Z');
  });
});

describe('proxy workflow IDs', () => {
  it('parse back to the reference they were made from, and reject anything else', () => {
    const ref = { namespace: 'crawl-a', name: 'px-1', uid: '6f1c2a9e-0b1d-4c1e-9a57-1d2f3e4a5b6c' };
    expect(parseProxyWorkflowId(proxyWorkflowId(ref))).toEqual(ref);
    for (const id of ['gc/ns/name/uid', 'proxy/ns/name', 'proxy/ns/name/uid/extra', 'proxy//name/uid']) {
      expect(parseProxyWorkflowId(id)).toBeUndefined();
    }
  });
});
