/**
 * Serialisable types of the orphan GC workflow: its input (set by the
 * schedule), what the list activity returns, and the sweep report. The report
 * is the workflow's result, and Temporal hands the last completed run's
 * result to the next scheduled run (`workflowInfo().lastResult`): its
 * `orphans` are the previous sweep's sightings that two-pass confirmation
 * needs.
 */

export interface OrphanGcInput {
  /** Instances younger than this are never collected (may be mid-create). Default 10 min. */
  minAgeMs?: number;
  /** Each provider's listByTag runs under its own deadline of this length. Default 2 min. */
  listTimeoutMs?: number;
  /** Report what would be deleted; delete nothing. */
  dryRun?: boolean;
  /** Deletions in flight at once. Default 4. */
  deleteConcurrency?: number;
}

export const GC_DEFAULTS = {
  minAgeMs: 10 * 60_000,
  listTimeoutMs: 2 * 60_000,
  dryRun: false,
  deleteConcurrency: 4,
} as const satisfies Required<OrphanGcInput>;

/** One instance as GC sees it (the marks and age only). */
export interface ListedInstance {
  id: string;
  /** '' when the UID mark is missing or empty. */
  uid: string;
  /** '' when the installation mark is absent. */
  installation: string;
  /** RFC 3339; undefined counts as very old (contract: a provider that cannot tell is not protected by age). */
  createdAt?: string;
}

export interface GcProviderInfo {
  name: string;
  type: string;
}

export interface GcEnvironment {
  /** This worker's installation identity; GC deletes only instances carrying it. */
  installation: string;
  /** Configured providers, in config order. */
  providers: GcProviderInfo[];
}

/** An instance that met every orphan rule on a sweep. */
export interface OrphanSighting {
  provider: string;
  id: string;
  uid: string;
}

/** Why an instance was kept, or what happened to it. */
export type Verdict = 'live' | 'unmarked' | 'other-installation' | 'young' | 'first-sighting' | 'confirmed';

export interface ProviderSweep {
  /** Set when this provider was skipped this sweep (list failed, timed out or returned garbage). */
  error?: string;
  listed: number;
  kept: Record<Exclude<Verdict, 'first-sighting' | 'confirmed'>, number>;
  /** Orphans seen for the first time: deleted on the next sweep if still orphaned. */
  firstSightings: OrphanSighting[];
  /** Deleted this sweep (orphans on this sweep and the previous one). */
  deleted: OrphanSighting[];
  /** Dry run: what would have been deleted. */
  wouldDelete: OrphanSighting[];
  /** Deletions that failed; still orphans, so confirmed again next sweep. */
  failed: Array<OrphanSighting & { error: string }>;
}

export const SWEEP_REPORT_VERSION = 1;

export interface SweepReport {
  version: typeof SWEEP_REPORT_VERSION;
  /** RFC 3339, workflow time at the start of the sweep. */
  startedAt: string;
  dryRun: boolean;
  installation: string;
  /** Set when the whole sweep was skipped (no live set): nothing was deleted. */
  skipped?: string;
  /** Whether a previous sweep's sightings were available to confirm against. */
  hadPreviousSweep: boolean;
  providers: Record<string, ProviderSweep>;
  /**
   * Orphans still present after this sweep (sighted, not deleted): what the
   * next sweep confirms against. Carried forward unchanged for a provider
   * (or a whole sweep) that could not be listed.
   */
  orphans: OrphanSighting[];
}
