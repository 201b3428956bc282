/**
 * The orphan rules, pure (no I/O, no clock): the workflow calls them with
 * what the activities listed and its own deterministic time, and unit tests
 * call them directly.
 *
 * An instance is deleted only when all of these hold:
 * - it carries our UID mark (the managed mark is implied: listByTag returns
 *   only marked instances);
 * - its UID is not in the live set (every Proxy the apiserver lists,
 *   including ones with a deletionTimestamp: their workflow owns that
 *   deletion);
 * - it carries this installation's mark (two installations sharing a
 *   backend never collect each other's instances);
 * - it is older than MinAge (it may be mid-create, its Proxy's status not
 *   yet written); an unknown creation time counts as very old;
 * - it met every rule above on the previous sweep too (two-pass
 *   confirmation), as the same provider, instance ID and UID.
 */
import {
  SWEEP_REPORT_VERSION,
  type ListedInstance,
  type OrphanSighting,
  type ProviderSweep,
  type SweepReport,
  type Verdict,
} from './types.js';

export interface SweepRules {
  /** Every Proxy UID the apiserver listed. */
  live: ReadonlySet<string>;
  installation: string;
  /** Workflow time, ms since the epoch. */
  nowMs: number;
  minAgeMs: number;
  /** Sighting keys (`sightingKey`) from the previous sweep. */
  previous: ReadonlySet<string>;
}

export function sightingKey(s: OrphanSighting): string {
  return `${s.provider}\u0000${s.id}\u0000${s.uid}`;
}

export function classify(provider: string, instance: ListedInstance, rules: SweepRules): Verdict {
  // Without an ownership proof, never delete.
  if (instance.uid === '') return 'unmarked';
  if (rules.live.has(instance.uid)) return 'live';
  if (instance.installation !== rules.installation) return 'other-installation';
  if (instance.createdAt !== undefined) {
    const created = Date.parse(instance.createdAt);
    // A creation time in the future (clock skew) is young too.
    if (!Number.isNaN(created) && rules.nowMs - created < rules.minAgeMs) return 'young';
  }
  const sighting = { provider, id: instance.id, uid: instance.uid };
  return rules.previous.has(sightingKey(sighting)) ? 'confirmed' : 'first-sighting';
}

export function emptyProviderSweep(error?: string): ProviderSweep {
  return {
    ...(error === undefined ? {} : { error }),
    listed: 0,
    kept: { live: 0, unmarked: 0, 'other-installation': 0, young: 0 },
    firstSightings: [],
    deleted: [],
    wouldDelete: [],
    failed: [],
  };
}

/** Classifies one provider's listing: the sweep record so far, and the confirmed orphans to delete. */
export function sweepProvider(
  provider: string,
  instances: readonly ListedInstance[],
  rules: SweepRules,
): { sweep: ProviderSweep; confirmed: OrphanSighting[] } {
  const sweep = emptyProviderSweep();
  sweep.listed = instances.length;
  const confirmed: OrphanSighting[] = [];
  for (const instance of instances) {
    const verdict = classify(provider, instance, rules);
    const sighting = { provider, id: instance.id, uid: instance.uid };
    switch (verdict) {
      case 'first-sighting':
        sweep.firstSightings.push(sighting);
        break;
      case 'confirmed':
        confirmed.push(sighting);
        break;
      default:
        sweep.kept[verdict]++;
    }
  }
  return { sweep, confirmed };
}

export interface PreviousSweep {
  /** False on the first run, after a manual trigger, or when the last result is not a sweep report we know. */
  available: boolean;
  keys: Set<string>;
  orphans: OrphanSighting[];
}

function isSighting(value: unknown): value is OrphanSighting {
  if (typeof value !== 'object' || value === null) return false;
  const s = value as Record<string, unknown>;
  return (
    typeof s.provider === 'string' && typeof s.id === 'string' && typeof s.uid === 'string' && s.uid !== ''
  );
}

/**
 * The previous sweep's sightings from `workflowInfo().lastResult`. Anything
 * unrecognised (another version's report, no previous run) means no
 * previous sweep: this sweep confirms nothing and deletes nothing, which is
 * the safe direction.
 */
export function previousSweep(lastResult: unknown, installation: string): PreviousSweep {
  const none: PreviousSweep = { available: false, keys: new Set(), orphans: [] };
  if (typeof lastResult !== 'object' || lastResult === null) return none;
  const report = lastResult as Partial<SweepReport>;
  if (report.version !== SWEEP_REPORT_VERSION || report.installation !== installation) return none;
  if (!Array.isArray(report.orphans) || !report.orphans.every(isSighting)) return none;
  const orphans = report.orphans.map((o) => ({ provider: o.provider, id: o.id, uid: o.uid }));
  return { available: true, keys: new Set(orphans.map(sightingKey)), orphans };
}

/**
 * What the next sweep confirms against: this sweep's sightings that are
 * still there (first sightings, failed deletions, dry-run candidates), plus
 * the previous sightings of every provider this sweep could not list. A
 * provider no longer configured carries nothing.
 */
export function orphansToCarry(
  previous: PreviousSweep,
  providers: Record<string, ProviderSweep>,
): OrphanSighting[] {
  const out: OrphanSighting[] = [];
  for (const o of previous.orphans) {
    const sweep = providers[o.provider];
    if (sweep?.error !== undefined) out.push(o);
  }
  for (const sweep of Object.values(providers)) {
    if (sweep.error !== undefined) continue;
    out.push(
      ...sweep.firstSightings,
      ...sweep.wouldDelete,
      ...sweep.failed.map(({ provider, id, uid }) => ({ provider, id, uid })),
    );
  }
  return out;
}
