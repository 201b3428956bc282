/**
 * Orphan GC: one sweep per run, started by a Temporal Schedule.
 *
 * 1. Every configured provider's listByTag, in parallel, each as its own
 *    activity under its own deadline: a hung or failing backend is skipped
 *    for this sweep and stalls nothing else.
 * 2. Then the live set: every Proxy UID the apiserver lists. Listing the
 *    instances first means every listed instance was created before the
 *    live set was read, hence after its Proxy existed, so its owner is in
 *    the live set unless it is really gone. An unreadable live set skips the
 *    whole sweep.
 * 3. The rules (orphans.ts), against the previous sweep's sightings, which
 *    arrive as the last completed run's result (`workflowInfo().lastResult`).
 * 4. Deletion of confirmed orphans (or a report of them, in dry-run mode).
 *
 * The result is the sweep report, which is also what the next run confirms against.
 */
import { log, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { DeleteOrphanOutcome, GcActivities } from '../../activities/gc-activities.js';
import { describeFailure } from '../failures.js';
import { gcProgressQuery, type GcProgress } from './messages.js';
import {
  emptyProviderSweep,
  orphansToCarry,
  previousSweep,
  sweepProvider,
  type SweepRules,
} from './orphans.js';
import {
  GC_DEFAULTS,
  SWEEP_REPORT_VERSION,
  type ListedInstance,
  type OrphanGcInput,
  type OrphanSighting,
  type ProviderSweep,
  type SweepReport,
} from './types.js';

const environment = proxyActivities<GcActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumAttempts: 3 },
});

// The live set: retried through a short apiserver blip, then the sweep is skipped.
const liveSet = proxyActivities<GcActivities>({
  startToCloseTimeout: '1 minute',
  retry: {
    initialInterval: '2 seconds',
    backoffCoefficient: 2,
    maximumInterval: '10 seconds',
    maximumAttempts: 3,
  },
});

// One deletion: re-reads the marks, deletes; retried a few times, then left
// for the next sweep (the instance stays a confirmed orphan).
const deletion = proxyActivities<GcActivities>({
  startToCloseTimeout: '2 minutes',
  retry: {
    initialInterval: '2 seconds',
    backoffCoefficient: 2,
    maximumInterval: '30 seconds',
    maximumAttempts: 3,
    nonRetryableErrorTypes: ['Permanent', 'ProviderNotConfigured'],
  },
});

async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(Math.max(1, limit), items.length) }, async () => {
    while (next < items.length) await fn(items[next++]!);
  });
  await Promise.all(lanes);
}

export async function orphanGcWorkflow(input: OrphanGcInput = {}): Promise<SweepReport> {
  const opts = { ...GC_DEFAULTS, ...input };
  const startedAt = new Date().toISOString();
  const progress: GcProgress = { phase: 'listing-instances', pendingProviders: [], pendingDeletions: 0 };
  setHandler(gcProgressQuery, () => progress);

  const env = await environment.gcEnvironment();
  const previous = previousSweep(workflowInfo().lastResult, env.installation);
  const report: SweepReport = {
    version: SWEEP_REPORT_VERSION,
    startedAt,
    dryRun: opts.dryRun,
    installation: env.installation,
    hadPreviousSweep: previous.available,
    providers: {},
    orphans: [],
  };

  // 1. Instances, per provider, in parallel, each under its own deadline.
  const listing = proxyActivities<GcActivities>({
    // The activity enforces timeoutMs itself; this is the backstop.
    startToCloseTimeout: opts.listTimeoutMs + 10_000,
    retry: { maximumAttempts: 1 },
  });
  progress.pendingProviders = env.providers.map((p) => p.name);
  const listed = new Map<string, ListedInstance[]>();
  await Promise.all(
    env.providers.map(async ({ name }) => {
      try {
        listed.set(name, await listing.gcListInstances({ provider: name, timeoutMs: opts.listTimeoutMs }));
      } catch (error) {
        const reason = describeFailure(error);
        report.providers[name] = emptyProviderSweep(reason);
        log.warn('orphan GC: skipping provider for this sweep', { provider: name, error: reason });
      } finally {
        progress.pendingProviders = progress.pendingProviders.filter((p) => p !== name);
      }
    }),
  );

  // 2. The live set, read after the instances.
  progress.phase = 'listing-proxies';
  let live: string[];
  try {
    live = await liveSet.gcListLiveProxyUids();
  } catch (error) {
    const reason = `cannot list Proxies (${describeFailure(error)}); nothing can be proven orphaned`;
    log.error('WARNING: orphan GC skipped the whole sweep', { error: reason });
    progress.phase = 'done';
    return { ...report, skipped: reason, providers: {}, orphans: previous.orphans };
  }

  // 3. The rules.
  const rules: SweepRules = {
    live: new Set(live),
    installation: env.installation,
    nowMs: Date.now(),
    minAgeMs: opts.minAgeMs,
    previous: previous.keys,
  };
  const confirmed: Array<{ sighting: OrphanSighting; sweep: ProviderSweep }> = [];
  for (const { name } of env.providers) {
    const instances = listed.get(name);
    if (instances === undefined) continue;
    const { sweep, confirmed: mine } = sweepProvider(name, instances, rules);
    report.providers[name] = sweep;
    for (const s of sweep.firstSightings)
      log.info('orphan GC: first sighting of an orphan; deleted on the next sweep if still orphaned', {
        ...s,
      });
    for (const sighting of mine) confirmed.push({ sighting, sweep });
  }

  // 4. Confirmed orphans: delete, or report in dry-run mode.
  progress.phase = 'deleting';
  progress.pendingDeletions = confirmed.length;
  if (opts.dryRun) {
    for (const { sighting, sweep } of confirmed) {
      sweep.wouldDelete.push(sighting);
      log.warn('DRY RUN: orphan GC would delete orphaned instance', { ...sighting });
    }
  } else {
    await forEachLimited(confirmed, opts.deleteConcurrency, async ({ sighting, sweep }) => {
      try {
        const outcome: DeleteOrphanOutcome = await deletion.gcDeleteOrphan(sighting);
        if (outcome === 'deleted') {
          sweep.deleted.push(sighting);
          log.warn('WARNING: orphan GC deleted orphaned instance', { ...sighting });
        }
        // 'gone': nothing left to do; 'marks-changed': no longer ours to judge.
      } catch (error) {
        const reason = describeFailure(error);
        sweep.failed.push({ ...sighting, error: reason });
        log.error('orphan GC: deleting orphaned instance failed; retried next sweep', {
          ...sighting,
          error: reason,
        });
      } finally {
        progress.pendingDeletions--;
      }
    });
  }

  report.orphans = orphansToCarry(previous, report.providers);
  progress.phase = 'done';
  const total = (f: (s: ProviderSweep) => number) =>
    Object.values(report.providers).reduce((n, s) => n + f(s), 0);
  log.info('orphan GC sweep finished', {
    dryRun: opts.dryRun,
    providers: env.providers.length,
    skippedProviders: total((s) => (s.error === undefined ? 0 : 1)),
    listed: total((s) => s.listed),
    firstSightings: total((s) => s.firstSightings.length),
    deleted: total((s) => s.deleted.length),
    wouldDelete: total((s) => s.wouldDelete.length),
    failed: total((s) => s.failed.length),
  });
  return report;
}
