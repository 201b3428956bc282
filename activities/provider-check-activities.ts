/**
 * Activities of the provider-checks workflow: run every provider's check()
 * in parallel under one timeout (and keep the latest results for the
 * worker's gauges), write one ProviderHealth object per provider (never
 * one that carries another installation's label; one with no installation
 * label is adopted: labelled as ours, so the cleanup sees it), delete the
 * objects of providers no longer configured.
 *
 * A check that ignores its deadline is reported as Timeout on the targets it
 * named last time; one that throws or answers garbage is reported as a failed
 * target; none of them holds up or hides the other providers' verdicts.
 *
 * Metrics: `proxy_operator_provider_target_up`,
 * `proxy_operator_provider_check_duration_seconds` and
 * `proxy_operator_provider_check_timestamp_seconds`, each
 * `{provider,target}`, read at scrape time from the latest results this
 * worker process ran. A worker that stops receiving check tasks stops
 * exporting them once they are `staleAfterMs` old, so no stale series lingers.
 */
import { createHash } from 'node:crypto';
import { Context } from '@temporalio/activity';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Gauge, type Registry } from 'prom-client';
import type { ProviderRegistry } from '../providers/config.js';
import { isProviderError, safeCause } from '../providers/errors.js';
import type { Provider, TargetStatus } from '../providers/types.js';
import type { ProviderHealth } from '../resources/proxy-schema.js';
import {
  buildProviderHealthStatus,
  LABEL_INSTALLATION,
  isValidLabelValue,
  LABEL_MANAGED_BY,
  MANAGED_BY_VALUE,
  MAX_MESSAGE_CHARS,
  truncate,
} from '../workflows/provider-checks/status.js';
import type { CheckedTarget, ProviderCheckResult } from '../workflows/provider-checks/types.js';
import { nonRetryable } from './failures.js';
import { timeoutSignal } from '../providers/timeout-signal.js';
import { createProviderHealthClient } from '../kube/provider-healths.js';

/** Stable failure types of the provider-check activities (the workflow records them; it never branches on them). */
export const ProviderCheckFailure = {
  /** The ProviderHealth object of that name carries another installation's label. */
  ForeignProviderHealth: 'ForeignProviderHealth',
} as const;

export interface ProviderCheckActivities {
  /** Checks every configured provider; records the results for this worker's gauges. */
  checkProviders(input: { timeoutMs: number; staleAfterMs: number }): Promise<{
    installation: string;
    results: ProviderCheckResult[];
  }>;
  /**
   * Creates the provider's ProviderHealth object if missing, then replaces its status (one write).
   * An object carrying another installation's label is left alone: a non-retryable
   * `ForeignProviderHealth` failure, which the round reports under publishFailures. One with
   * no installation label (an older version's, or made by hand) is adopted first: it gets
   * this installation's labels, so the stale-object cleanup can remove it later.
   */
  publishProviderHealth(input: { result: ProviderCheckResult }): Promise<'created' | 'updated'>;
  /**
   * Deletes this installation's ProviderHealth objects whose name is not in `keep`; returns their
   * names. Each delete is pinned to the UID listed: an object recreated since is left alone.
   */
  deleteStaleProviderHealth(input: { keep: string[] }): Promise<string[]>;
}

export interface ProviderCheckActivityDeps {
  registry: ProviderRegistry;
  kubeConfig: KubeConfig;
  /** Label value on the objects; cleanup touches only objects with this installation's label. */
  installation: string;
  logger: Logger;
  /** Where the three gauges are registered (the worker process's /metrics registry). */
  metrics: Registry;
}

/** A check that ignores its signal gets this long past the deadline before its verdict is made up. */
const GRACE_MS = 1_000;

interface Latest {
  provider: string;
  target: string;
  up: boolean;
  durationSeconds: number;
  checkedAtSeconds: number;
  expiresAtMs: number;
}

function cancellation(): AbortSignal {
  try {
    return Context.current().cancellationSignal;
  } catch {
    return new AbortController().signal;
  }
}

/** A TargetStatus from a provider, checked: anything malformed is reported as a failed target, never thrown. */
function sanitise(value: unknown, fallbackLatency: number): CheckedTarget {
  const t = (typeof value === 'object' && value !== null ? value : {}) as Partial<TargetStatus>;
  if (
    typeof t.name !== 'string' ||
    t.name === '' ||
    typeof t.ready !== 'boolean' ||
    typeof t.reason !== 'string' ||
    t.reason === ''
  ) {
    return {
      name: typeof t.name === 'string' && t.name !== '' ? t.name : 'check',
      ready: false,
      reason: 'APIError',
      message: 'the provider returned a malformed verdict',
    };
  }
  const out: CheckedTarget = { name: t.name, ready: t.ready, reason: t.reason };
  if (typeof t.address === 'string' && t.address !== '') out.address = t.address;
  if (typeof t.message === 'string' && t.message !== '') out.message = truncate(t.message, MAX_MESSAGE_CHARS);
  out.latencyMillis =
    typeof t.latencyMillis === 'number' && Number.isFinite(t.latencyMillis)
      ? Math.max(0, t.latencyMillis)
      : fallbackLatency;
  if (t.details && typeof t.details === 'object') {
    const details = Object.fromEntries(Object.entries(t.details).filter(([, v]) => typeof v === 'string'));
    if (Object.keys(details).length > 0) out.details = details;
  }
  return out;
}

/**
 * What a throwing check() is reported as: a ProviderError's message (composed
 * from identifiers), else only the error's name and machine codes. Backend
 * text never reaches the ProviderHealth object.
 */
function describeThrown(error: unknown): string {
  if (isProviderError(error)) return error.message;
  const c = safeCause(error);
  const codes = [c.code, c.syscall, c.status === undefined ? undefined : `status ${c.status}`].filter(
    (v): v is string => v !== undefined,
  );
  return codes.length === 0 ? c.name : `${c.name} (${codes.join(', ')})`;
}

function safeErrorFields(error: unknown): Record<string, unknown> {
  return isProviderError(error) ? error.toJSON() : { ...safeCause(error) };
}

/** Registers (or re-registers, for a restarted worker on the same registry) one scrape-time gauge. */
function scrapeGauge(
  metrics: Registry,
  name: string,
  help: string,
  read: () => Array<{ labels: { provider: string; target: string }; value: number }>,
): void {
  if (metrics.getSingleMetric(name)) metrics.removeSingleMetric(name);
  new Gauge({
    name,
    help,
    labelNames: ['provider', 'target'] as const,
    registers: [metrics],
    collect() {
      this.reset();
      for (const { labels, value } of read()) this.set(labels, value);
    },
  });
}

/** The installation as a label value: itself when it is a valid one, else a stable hash of it. */
export function installationLabelValue(installation: string): string {
  if (isValidLabelValue(installation) && installation !== '') return installation;
  return `sha256-${createHash('sha256').update(installation, 'utf8').digest('hex').slice(0, 32)}`;
}

export function createProviderCheckActivities(deps: ProviderCheckActivityDeps): ProviderCheckActivities {
  const objects = createProviderHealthClient(deps.kubeConfig);
  const installationLabel = installationLabelValue(deps.installation);
  const log = deps.logger.child({ component: 'provider-checks' });

  /**
   * Labels an existing ProviderHealth that has no installation label as this
   * installation's. The patch is pinned to the version read (UID and
   * resourceVersion tests): if anything changed meanwhile, another
   * installation claiming it included, it fails (422) and the activity retries
   * on a fresh read. The other labels are kept.
   */
  const adopt = async (ph: ProviderHealth): Promise<ProviderHealth> => {
    const labels = {
      ...ph.metadata.labels,
      [LABEL_MANAGED_BY]: MANAGED_BY_VALUE,
      [LABEL_INSTALLATION]: installationLabel,
    };
    const adopted = await objects.setLabels(ph, labels);
    log.info(
      { provider: ph.metadata.name, installation: installationLabel },
      'adopted a ProviderHealth object without an installation label',
    );
    return adopted;
  };
  let latest: Latest[] = [];
  /** Targets (name, address) per provider from its last answer: what a check that never answers is reported as. */
  const knownTargets = new Map<string, Array<Pick<CheckedTarget, 'name' | 'address'>>>();

  const fresh = () => {
    const now = Date.now();
    return latest.filter((l) => l.expiresAtMs > now);
  };
  scrapeGauge(
    deps.metrics,
    'proxy_operator_provider_target_up',
    'Whether the target passed its latest provider health check (1) or not (0).',
    () => fresh().map((l) => ({ labels: { provider: l.provider, target: l.target }, value: l.up ? 1 : 0 })),
  );
  scrapeGauge(
    deps.metrics,
    'proxy_operator_provider_check_duration_seconds',
    "Duration of the target's latest provider health check.",
    () =>
      fresh().map((l) => ({ labels: { provider: l.provider, target: l.target }, value: l.durationSeconds })),
  );
  scrapeGauge(
    deps.metrics,
    'proxy_operator_provider_check_timestamp_seconds',
    "Unix time of the target's latest provider health check.",
    () =>
      fresh().map((l) => ({ labels: { provider: l.provider, target: l.target }, value: l.checkedAtSeconds })),
  );

  const checkOne = async (
    name: string,
    provider: Provider | undefined,
    signal: AbortSignal,
    deadlineMs: number,
  ): Promise<ProviderCheckResult> => {
    const type = provider?.type ?? '';
    const started = Date.now();
    const done = (supported: boolean, targets: CheckedTarget[]): ProviderCheckResult => ({
      provider: name,
      type,
      supported,
      targets,
      checkedAt: new Date().toISOString(),
    });
    if (provider?.check === undefined) return done(false, []);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), Math.max(0, deadlineMs - Date.now()) + GRACE_MS);
    });
    try {
      const answer = await Promise.race([provider.check(signal), late]);
      const elapsed = Date.now() - started;
      if (answer === 'late') {
        log.warn({ provider: name }, 'check ignored its deadline; reporting its targets as Timeout');
        const known = knownTargets.get(name) ?? [{ name: 'check' }];
        return done(
          true,
          known.map((target) => ({
            ...target,
            ready: false,
            reason: 'Timeout',
            message: 'check did not finish in time',
            latencyMillis: elapsed,
          })),
        );
      }
      if (!Array.isArray(answer)) {
        log.warn({ provider: name }, 'check returned a non-array; reporting it as a failed target');
        return done(true, [
          {
            name: 'check',
            ready: false,
            reason: 'APIError',
            message: 'check returned a non-array',
            latencyMillis: elapsed,
          },
        ]);
      }
      const targets = (answer as unknown[]).map((t) => sanitise(t, elapsed));
      knownTargets.set(
        name,
        targets.map((t) =>
          t.address === undefined ? { name: t.name } : { name: t.name, address: t.address },
        ),
      );
      return done(true, targets);
    } catch (error) {
      // The contract says check never throws; one that does is reported, not propagated.
      const what = describeThrown(error);
      log.warn(
        { provider: name, error: safeErrorFields(error) },
        'check threw instead of reporting a verdict',
      );
      return done(true, [
        {
          name: 'check',
          ready: false,
          reason: 'APIError',
          message: truncate(`check threw instead of reporting a verdict: ${what}`, MAX_MESSAGE_CHARS),
          latencyMillis: Date.now() - started,
        },
      ]);
    } finally {
      clearTimeout(timer);
    }
  };

  return {
    async checkProviders({ timeoutMs, staleAfterMs }) {
      const names = deps.registry.names();
      const deadline = timeoutSignal(cancellation(), timeoutMs);
      const signal = deadline.signal;
      const deadlineMs = Date.now() + timeoutMs;
      let results: ProviderCheckResult[];
      try {
        results = await Promise.all(
          names.map((name) => checkOne(name, deps.registry.get(name), signal, deadlineMs)),
        );
      } finally {
        deadline.clear();
      }
      const now = Date.now();
      latest = results.flatMap((r) =>
        r.targets.map((t) => ({
          provider: r.provider,
          target: t.name,
          up: t.ready,
          durationSeconds: (t.latencyMillis ?? 0) / 1000,
          checkedAtSeconds: Date.parse(r.checkedAt) / 1000,
          expiresAtMs: now + staleAfterMs,
        })),
      );
      return { installation: deps.installation, results };
    },

    async publishProviderHealth({ result }) {
      let existing = await objects.get(result.provider);
      let outcome: 'created' | 'updated' = 'updated';
      if (existing === undefined) {
        // Created concurrently (a retried round): the existing one is read back.
        const made = await objects.create(result.provider, {
          [LABEL_MANAGED_BY]: MANAGED_BY_VALUE,
          [LABEL_INSTALLATION]: installationLabel,
        });
        existing = made.object;
        if (made.created) {
          outcome = 'created';
          log.info({ provider: result.provider }, 'created ProviderHealth');
        }
      }
      // Another installation's object of the same name (two control planes on
      // one cluster, both with a provider of this name): never overwritten.
      // The failure is non-retryable and lands in the round's publishFailures.
      const owner = existing.metadata.labels?.[LABEL_INSTALLATION];
      if (owner !== undefined && owner !== installationLabel) {
        log.warn(
          { provider: result.provider, installation: installationLabel, owner },
          'WARNING: ProviderHealth object belongs to another installation; not overwriting it',
        );
        throw nonRetryable(
          ProviderCheckFailure.ForeignProviderHealth,
          `ProviderHealth ${result.provider} carries ${LABEL_INSTALLATION}=${owner}, not ${installationLabel}; left alone`,
        );
      }
      // Made by an older version or by hand for this provider name: ours from now on.
      if (owner === undefined) existing = await adopt(existing);
      const status = buildProviderHealthStatus(existing.status, result);
      // Pinned to the object read and to its owner: a recreated object, or one another installation has
      // claimed since, fails the write (422) and the activity retries on a fresh read (which then finds it foreign).
      await objects.writeStatus(existing, { key: LABEL_INSTALLATION, value: installationLabel }, status);
      return outcome;
    },

    async deleteStaleProviderHealth({ keep }) {
      const wanted = new Set(keep);
      const listed = await objects.list(
        `${LABEL_MANAGED_BY}=${MANAGED_BY_VALUE},${LABEL_INSTALLATION}=${installationLabel}`,
      );
      const deleted: string[] = [];
      for (const ph of listed) {
        if (wanted.has(ph.metadata.name)) continue;
        // Only the object listed: one recreated under this name since (its provider
        // configured again, another installation's) fails the precondition.
        if ((await objects.delete(ph)) === 'conflict') {
          log.info(
            { name: ph.metadata.name },
            'ProviderHealth recreated since it was listed; not deleted (the next round looks again)',
          );
          continue;
        }
        deleted.push(ph.metadata.name);
        log.info({ name: ph.metadata.name }, 'deleted the ProviderHealth of a provider no longer configured');
      }
      return deleted;
    },
  };
}
