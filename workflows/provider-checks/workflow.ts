/**
 * Provider checks: one round per run, started by a Temporal Schedule.
 *
 * Every configured provider's check() runs in parallel under one timeout
 * (one activity); then one ProviderHealth write per provider with a valid
 * object name, in parallel; then the objects of providers no longer
 * configured are deleted. Transitions against the previous round (the last
 * completed run's result) are logged: WARNING when a target goes down or
 * changes its failure reason, info when it comes back, nothing when steady.
 */
import { log, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { ProviderCheckActivities } from '../../activities/provider-check-activities.js';
import { describeFailure } from '../failures.js';
import { checkResultsQuery } from './messages.js';
import { isValidObjectName, previousVerdicts, transitions, verdictsOf } from './status.js';
import {
  CHECK_DEFAULTS,
  CHECKS_REPORT_VERSION,
  type ChecksRoundReport,
  type ProviderCheckResult,
  type ProviderChecksInput,
  type Transition,
} from './types.js';

// Writes: retried through a short apiserver blip; the next round writes again anyway.
const kube = proxyActivities<ProviderCheckActivities>({
  startToCloseTimeout: '20 seconds',
  retry: {
    initialInterval: '1 second',
    backoffCoefficient: 2,
    maximumInterval: '5 seconds',
    maximumAttempts: 3,
  },
});

function logTransition(t: Transition): void {
  const fields = { provider: t.provider, target: t.target, address: t.address, reason: t.reason };
  switch (t.kind) {
    case 'down':
    case 'reason-changed':
      log.warn('WARNING: provider target not ready', { ...fields, message: t.message });
      break;
    case 'up':
      log.info('provider target ready', { ...fields, latencyMillis: t.latencyMillis });
      break;
    case 'first-ready':
      log.debug('provider target ready', { ...fields, latencyMillis: t.latencyMillis });
      break;
  }
}

export async function providerChecksWorkflow(input: ProviderChecksInput = {}): Promise<ChecksRoundReport> {
  const opts = { ...CHECK_DEFAULTS, ...input };
  const progress: { results?: ProviderCheckResult[] } = {};
  setHandler(checkResultsQuery, () => progress.results);

  if (opts.cleanupOnly) {
    const deleted = await kube.deleteStaleProviderHealth({ keep: [] });
    log.info('provider checks are off; deleted every ProviderHealth object of this installation', {
      deleted,
    });
    return {
      version: CHECKS_REPORT_VERSION,
      installation: '',
      cleanupOnly: true,
      verdicts: [],
      transitions: [],
      invalidNames: [],
      published: [],
      publishFailures: [],
      deleted,
    };
  }

  const checks = proxyActivities<ProviderCheckActivities>({
    // The activity bounds the round itself (timeout plus a short grace); this is the backstop.
    startToCloseTimeout: opts.timeoutMs + 10_000,
    retry: { maximumAttempts: 1 },
  });
  const round = await checks.checkProviders({ timeoutMs: opts.timeoutMs, staleAfterMs: opts.staleAfterMs });
  const results = round.results;
  progress.results = results;

  const previous = previousVerdicts(workflowInfo().lastResult, round.installation);
  const changed = transitions(previous.verdicts, results);
  for (const t of changed) logTransition(t);

  const valid = results.filter((r) => isValidObjectName(r.provider));
  const invalidNames = results.filter((r) => !isValidObjectName(r.provider)).map((r) => r.provider);
  for (const name of invalidNames) {
    if (!previous.invalidNames.includes(name)) {
      log.warn(
        'WARNING: provider name is not a valid object name; its ProviderHealth object is not written, its metrics are',
        {
          provider: name,
        },
      );
    }
  }

  const report: ChecksRoundReport = {
    version: CHECKS_REPORT_VERSION,
    installation: round.installation,
    cleanupOnly: false,
    verdicts: verdictsOf(results),
    transitions: changed,
    invalidNames,
    published: [],
    publishFailures: [],
    deleted: [],
  };

  await Promise.all(
    valid.map(async (result) => {
      try {
        await kube.publishProviderHealth({ result });
        report.published.push(result.provider);
      } catch (error) {
        const reason = describeFailure(error);
        report.publishFailures.push({ provider: result.provider, error: reason });
        log.error('writing ProviderHealth failed; the next round writes again', {
          provider: result.provider,
          error: reason,
        });
      }
    }),
  );
  report.published.sort();

  try {
    report.deleted = await kube.deleteStaleProviderHealth({ keep: valid.map((r) => r.provider) });
  } catch (error) {
    log.error('deleting stale ProviderHealth objects failed; the next round tries again', {
      error: describeFailure(error),
    });
  }
  return report;
}
