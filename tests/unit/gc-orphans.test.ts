import { describe, expect, it } from 'vitest';
import {
  classify,
  orphansToCarry,
  previousSweep,
  sightingKey,
  sweepProvider,
  type SweepRules,
} from '../../workflows/gc/orphans.js';
import { SWEEP_REPORT_VERSION, type ListedInstance, type SweepReport } from '../../workflows/gc/types.js';
import { toListedInstances } from '../../activities/gc-activities.js';
import { validateSchedulesConfig } from '../../cli/schedules.js';

const NOW = Date.parse('2026-09-11T15:00:00Z');
const HOUR_AGO = new Date(NOW - 3_600_000).toISOString();
const MINUTE_AGO = new Date(NOW - 60_000).toISOString();

function rules(over: Partial<SweepRules> = {}): SweepRules {
  return {
    live: new Set(['uid-live', 'uid-deleting']),
    installation: 'inst-a',
    nowMs: NOW,
    minAgeMs: 600_000,
    previous: new Set(),
    ...over,
  };
}

const old = (id: string, uid: string, installation = 'inst-a'): ListedInstance => ({
  id,
  uid,
  installation,
  createdAt: HOUR_AGO,
});

describe('orphan rules', () => {
  it('keeps live, deleting, unmarked, other-installation and young instances; sights the orphan', () => {
    const r = rules();
    expect(classify('p', old('i-live', 'uid-live'), r)).toBe('live');
    expect(classify('p', old('i-deleting', 'uid-deleting'), r)).toBe('live');
    expect(classify('p', old('i-unmarked', ''), r)).toBe('unmarked');
    expect(classify('p', old('i-other', 'uid-gone', 'inst-b'), r)).toBe('other-installation');
    expect(classify('p', old('i-legacy', 'uid-gone', ''), r)).toBe('other-installation');
    expect(classify('p', { ...old('i-young', 'uid-gone'), createdAt: MINUTE_AGO }, r)).toBe('young');
    expect(classify('p', old('i-orphan', 'uid-gone'), r)).toBe('first-sighting');
  });

  it('treats an unknown creation time as very old and a future one as young', () => {
    const r = rules();
    expect(classify('p', { id: 'i', uid: 'uid-gone', installation: 'inst-a' }, r)).toBe('first-sighting');
    expect(
      classify('p', { ...old('i', 'uid-gone'), createdAt: new Date(NOW + 60_000).toISOString() }, r),
    ).toBe('young');
  });

  it('confirms only a sighting of the same provider, instance and UID on the previous sweep', () => {
    const prev = new Set([sightingKey({ provider: 'p', id: 'i-orphan', uid: 'uid-gone' })]);
    const r = rules({ previous: prev });
    expect(classify('p', old('i-orphan', 'uid-gone'), r)).toBe('confirmed');
    expect(classify('q', old('i-orphan', 'uid-gone'), r)).toBe('first-sighting');
    expect(classify('p', old('i-orphan', 'uid-other'), r)).toBe('first-sighting');
    // A sighting never overrides the other rules: a Proxy that came back is live.
    expect(
      classify('p', old('i-orphan', 'uid-gone'), rules({ previous: prev, live: new Set(['uid-gone']) })),
    ).toBe('live');
  });

  it('counts one provider listing and returns only confirmed orphans for deletion', () => {
    const prev = new Set([sightingKey({ provider: 'p', id: 'i-2', uid: 'uid-2' })]);
    const { sweep, confirmed } = sweepProvider(
      'p',
      [old('i-live', 'uid-live'), old('i-1', 'uid-1'), old('i-2', 'uid-2'), old('i-x', '')],
      rules({ previous: prev }),
    );
    expect(sweep.listed).toBe(4);
    expect(sweep.kept).toEqual({ live: 1, unmarked: 1, 'other-installation': 0, young: 0 });
    expect(sweep.firstSightings).toEqual([{ provider: 'p', id: 'i-1', uid: 'uid-1' }]);
    expect(confirmed).toEqual([{ provider: 'p', id: 'i-2', uid: 'uid-2' }]);
  });
});

describe('two-pass confirmation across runs', () => {
  const report = (orphans: SweepReport['orphans'], over: Partial<SweepReport> = {}): SweepReport => ({
    version: SWEEP_REPORT_VERSION,
    startedAt: HOUR_AGO,
    dryRun: false,
    installation: 'inst-a',
    hadPreviousSweep: false,
    providers: {},
    orphans,
    ...over,
  });

  it('reads the previous sweep from the last result, and nothing from anything else', () => {
    const o = { provider: 'p', id: 'i', uid: 'u' };
    expect(previousSweep(report([o]), 'inst-a')).toMatchObject({ available: true, orphans: [o] });
    expect(previousSweep(undefined, 'inst-a').available).toBe(false);
    expect(previousSweep(report([o]), 'inst-b').available).toBe(false);
    expect(previousSweep({ ...report([o]), version: 99 }, 'inst-a').available).toBe(false);
    expect(previousSweep(report([{ provider: 'p', id: 'i', uid: '' }]), 'inst-a').available).toBe(false);
    expect(previousSweep('garbage', 'inst-a').available).toBe(false);
  });

  it('carries sightings still present, and a skipped provider’s previous sightings, but not an unconfigured one’s', () => {
    const prev = previousSweep(
      report([
        { provider: 'down', id: 'd1', uid: 'ud1' },
        { provider: 'gone', id: 'g1', uid: 'ug1' },
        { provider: 'ok', id: 'stale', uid: 'us' },
      ]),
      'inst-a',
    );
    const ok = sweepProvider(
      'ok',
      [old('o1', 'uo1'), old('o2', 'uo2')],
      rules({ previous: new Set([sightingKey({ provider: 'ok', id: 'o2', uid: 'uo2' })]) }),
    );
    ok.sweep.failed.push({ ...ok.confirmed[0]!, error: 'Transient: boom' });
    const carried = orphansToCarry(prev, {
      ok: ok.sweep,
      down: { ...sweepProvider('down', [], rules()).sweep, error: 'ListTimeout' },
    });
    expect(carried).toEqual([
      { provider: 'down', id: 'd1', uid: 'ud1' },
      { provider: 'ok', id: 'o1', uid: 'uo1' },
      { provider: 'ok', id: 'o2', uid: 'uo2' },
    ]);
  });
});

describe('listing validation', () => {
  const good = {
    id: 'local/a',
    uid: 'u',
    installation: 'i',
    state: 'Running',
    createdAt: new Date(HOUR_AGO),
  };

  it('keeps the marks and age only', () => {
    expect(toListedInstances('p', [good, { ...good, id: 'local/b', createdAt: undefined }])).toEqual([
      { id: 'local/a', uid: 'u', installation: 'i', createdAt: HOUR_AGO },
      { id: 'local/b', uid: 'u', installation: 'i' },
    ]);
  });

  it.each([
    ['a non-array', { instances: [] }],
    ['an entry without id', [{ ...good, id: '' }]],
    ['a uid that is not a string', [{ ...good, uid: 7 }]],
    ['an invalid date', [{ ...good, createdAt: new Date('nope') }]],
    ['a duplicate id', [good, good]],
  ])('rejects the whole listing for %s', (_what, listed) => {
    expect(() => toListedInstances('p', listed)).toThrow(/ListGarbage|garbage|twice|non-array/);
  });
});

describe('schedule config validation', () => {
  const base = { taskQueue: 'q', gc: { intervalMs: 600_000 }, providerChecks: { intervalMs: 60_000 } };
  it('accepts the defaults and 0 (off)', () => {
    expect(validateSchedulesConfig(base)).toEqual([]);
    expect(
      validateSchedulesConfig({ ...base, gc: { intervalMs: 0 }, providerChecks: { intervalMs: 0 } }),
    ).toEqual([]);
  });
  it('rejects too-frequent intervals and a timeout longer than the interval', () => {
    expect(validateSchedulesConfig({ ...base, providerChecks: { intervalMs: 5_000 } })).toEqual([
      'provider check interval must be 0 (off) or at least 10s',
    ]);
    expect(
      validateSchedulesConfig({ ...base, providerChecks: { intervalMs: 60_000, timeoutMs: 120_000 } }),
    ).toHaveLength(1);
    expect(validateSchedulesConfig({ ...base, gc: { intervalMs: 1_000 } })).toEqual([
      'gc interval must be 0 (off) or at least 1m',
    ]);
  });
});
