import { describe, expect, it } from 'vitest';
import {
  buildProviderHealthStatus,
  isValidObjectName,
  previousVerdicts,
  transitions,
  truncate,
  verdictsOf,
} from '../../workflows/provider-checks/status.js';
import type { CheckedTarget, ProviderCheckResult } from '../../workflows/provider-checks/types.js';
import { installationLabelValue } from '../../activities/provider-check-activities.js';
import { providerCheckTimeoutMs } from '../../cli/schedules.js';

const T0 = '2026-09-11T15:00:00.000Z';
const T1 = '2026-09-11T15:01:00.000Z';

const up = (name: string): CheckedTarget => ({
  name,
  address: `${name}:22`,
  ready: true,
  reason: 'Reachable',
  latencyMillis: 84,
});
const down = (name: string, reason: string): CheckedTarget => ({
  name,
  address: `${name}:22`,
  ready: false,
  reason,
  message: `${name} is down`,
});
const result = (
  targets: CheckedTarget[],
  checkedAt = T1,
  over: Partial<ProviderCheckResult> = {},
): ProviderCheckResult => ({
  provider: 'kvm-home',
  type: 'kvm',
  supported: true,
  targets,
  checkedAt,
  ...over,
});

describe('ProviderHealth status', () => {
  it('all ready: Ready True, n/m, transition times now', () => {
    const s = buildProviderHealthStatus(undefined, result([up('nas1'), up('nas2')]));
    expect(s.conditions).toEqual([
      {
        type: 'Ready',
        status: 'True',
        reason: 'AllTargetsReady',
        message: '2 of 2 targets ready',
        lastTransitionTime: T1,
      },
    ]);
    expect(s.targetsReady).toBe('2/2');
    expect(s.type).toBe('kvm');
    expect(s.lastCheckTime).toBe(T1);
    expect(s.targets?.map((t) => t.lastTransitionTime)).toEqual([T1, T1]);
  });

  it('one down: Ready False naming the failing target and its reason', () => {
    const s = buildProviderHealthStatus(undefined, result([up('nas1'), down('nas2', 'Unreachable')]));
    expect(s.conditions?.[0]).toMatchObject({
      status: 'False',
      reason: 'TargetsNotReady',
      message: 'nas2: Unreachable',
    });
    expect(s.targetsReady).toBe('1/2');
  });

  it('only a flip of ready moves a target’s lastTransitionTime; the condition keeps its own while its status holds', () => {
    const first = buildProviderHealthStatus(undefined, result([up('nas1'), up('nas2')], T0));
    const second = buildProviderHealthStatus(first, result([up('nas1'), down('nas2', 'Timeout')], T1));
    expect(second.targets?.map((t) => [t.name, t.lastTransitionTime])).toEqual([
      ['nas1', T0],
      ['nas2', T1],
    ]);
    expect(second.conditions?.[0]).toMatchObject({ status: 'False', lastTransitionTime: T1 });
    const third = buildProviderHealthStatus(
      second,
      result([up('nas1'), down('nas2', 'Unreachable')], '2026-09-11T15:02:00.000Z'),
    );
    expect(third.targets?.[1]).toMatchObject({ reason: 'Unreachable', lastTransitionTime: T1 });
    expect(third.conditions?.[0]).toMatchObject({
      status: 'False',
      message: 'nas2: Unreachable',
      lastTransitionTime: T1,
    });
    // The previous status is not modified.
    expect(first.conditions?.[0]?.status).toBe('True');
  });

  it('no check(): Unknown ChecksNotImplemented and no targetsReady; no targets: Unknown NoTargets', () => {
    const unsupported = buildProviderHealthStatus(
      undefined,
      result([], T1, { supported: false, type: 'gcp' }),
    );
    expect(unsupported.conditions?.[0]).toMatchObject({ status: 'Unknown', reason: 'ChecksNotImplemented' });
    expect(unsupported.targetsReady).toBeUndefined();
    const empty = buildProviderHealthStatus(undefined, result([]));
    expect(empty.conditions?.[0]).toMatchObject({ status: 'Unknown', reason: 'NoTargets' });
    expect(empty.targetsReady).toBe('0/0');
  });

  it('truncates long messages to 1,024 characters, counting code points', () => {
    const long = { ...down('nas1', 'APIError'), message: '€'.repeat(3000) };
    const s = buildProviderHealthStatus(undefined, result([long]));
    expect(Array.from(s.targets![0]!.message!)).toHaveLength(1024);
    expect(truncate('abc', 3)).toBe('abc');
    expect(truncate('abcd', 3)).toBe('ab…');
  });
});

describe('transition logging', () => {
  it('logs down, a changed reason and coming back; stays silent when steady', () => {
    const rounds = [
      [up('nas1')],
      [up('nas1')],
      [down('nas1', 'Unreachable')],
      [down('nas1', 'Unreachable')],
      [down('nas1', 'Timeout')],
      [up('nas1')],
    ];
    let previous = previousVerdicts(undefined, 'i').verdicts;
    const kinds: string[][] = [];
    for (const targets of rounds) {
      const results = [result(targets)];
      kinds.push(transitions(previous, results).map((t) => `${t.kind}:${t.reason}`));
      previous = verdictsOf(results);
    }
    expect(kinds).toEqual([
      ['first-ready:Reachable'],
      [],
      ['down:Unreachable'],
      [],
      ['reason-changed:Timeout'],
      ['up:Reachable'],
    ]);
  });

  it('a target first seen down is a WARNING', () => {
    expect(transitions([], [result([down('nas2', 'Forbidden')])])).toMatchObject([
      { kind: 'down', target: 'nas2', reason: 'Forbidden' },
    ]);
  });

  it('reads the previous verdicts only from a report of this installation', () => {
    const report = {
      version: 1,
      installation: 'i',
      verdicts: [{ provider: 'p', target: 't', ready: true, reason: 'Reachable' }],
      invalidNames: ['Bad_Name'],
    };
    expect(previousVerdicts(report, 'i')).toEqual({ verdicts: report.verdicts, invalidNames: ['Bad_Name'] });
    expect(previousVerdicts(report, 'other').verdicts).toEqual([]);
    expect(previousVerdicts({ ...report, version: 2 }, 'i').verdicts).toEqual([]);
  });
});

describe('names and budgets', () => {
  it('accepts DNS-1123 subdomains only as object names', () => {
    expect(isValidObjectName('kvm-home')).toBe(true);
    expect(isValidObjectName('a.b')).toBe(true);
    expect(isValidObjectName('Home_KVM')).toBe(false);
    expect(isValidObjectName('')).toBe(false);
    expect(isValidObjectName('x'.repeat(254))).toBe(false);
  });

  it('uses the installation as a label value when valid, else a stable hash', () => {
    expect(installationLabelValue('cluster-a')).toBe('cluster-a');
    const hashed = installationLabelValue('https://10.0.0.1:6443/some/long/path');
    expect(hashed).toMatch(/^sha256-[0-9a-f]{32}$/);
    expect(installationLabelValue('https://10.0.0.1:6443/some/long/path')).toBe(hashed);
  });

  it('bounds a round by 15 s or the interval when shorter', () => {
    expect(providerCheckTimeoutMs(60_000)).toBe(15_000);
    expect(providerCheckTimeoutMs(12_000)).toBe(12_000);
    expect(providerCheckTimeoutMs(60_000, 20_000)).toBe(20_000);
  });
});
