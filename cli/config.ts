/**
 * Control-plane configuration shared by every subcommand: read once from
 * flags and environment, validated into a typed object. Nothing here runs at
 * import time.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { parseDuration } from '../api/config.js';
import { DRIFT_SWEEP_DEFAULTS } from '../workflows/drift-sweep/types.js';
import { DEFAULT_RECONCILE_PERIOD_MS } from '../k8s-bridge/defaults.js';
import { DEFAULT_TIMING, type ProxyTiming } from '../workflows/proxy/types.js';
import {
  resolveTemporal,
  type ResolvedTemporal,
  type TemporalConnectionSettings,
  type TemporalFlags,
} from './temporal.js';

export const commonConfigSchema = z.strictObject({
  temporalAddress: z.string().min(1),
  temporalNamespace: z.string().min(1),
  /** TLS, API key and gRPC metadata for Temporal (cli/temporal.ts); undefined: plaintext, no key. */
  temporalConnection: z.custom<TemporalConnectionSettings>().optional(),
  taskQueue: z.string().min(1),
  /** Path of a kubeconfig; undefined means in-cluster config, then the default loading rules. */
  kubeconfig: z.string().min(1).optional(),
  /** Path of the providers config file; undefined only in `dev` (embedded defaults). */
  providersConfig: z.string().min(1).optional(),
  /** Where providers that keep state on disk keep it (the local provider's records). */
  stateDir: z.string().min(1),
  /** The installation identity mark; undefined derives it from the cluster at start. */
  installation: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'must be a lowercase DNS-1123 label')
    .optional(),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  gc: z.strictObject({
    /** 0 turns orphan GC off. */
    intervalMs: z.int().min(0),
    minAgeMs: z.int().min(0),
    dryRun: z.boolean(),
  }),
  /** 0 turns provider checks off. */
  providerCheckIntervalMs: z.int().min(0),
  /** Where a standalone worker serves /metrics (host:port); undefined: not served. */
  metricsAddr: z.string().optional(),
  /**
   * Workflows a worker keeps in memory (about 0.3-1 MiB each). One evicted
   * from the cache replays its history on its next task, which for a steady
   * Proxy comes every few hours or on a signal.
   */
  maxCachedWorkflows: z.int().positive(),
  /** The bridge's pass comparing Proxies with running workflows; at most 5 minutes by default. */
  reconcilePeriodMs: z.int().positive(),
  /** The worker's timing for Proxy workflows, read by each run from its worker. */
  timing: z.strictObject({
    provisioningPollMs: z.int().positive(),
    deletionPollMs: z.int().positive(),
    driftPollMs: z.int().positive(),
    safetyPollMs: z.int().positive(),
    quotaRetryMs: z.int().positive(),
    errorRetryMs: z.int().positive(),
  }),
  /** The drift sweep Schedule's interval; 0 turns it off (every Proxy then polls at driftPollMs). */
  driftSweepMs: z.int().min(0),
  /**
   * A namespace-scoped install: Proxies and cloud-init Secrets are watched
   * and listed in these namespaces only, one list/watch each, so Roles
   * suffice. Undefined: all namespaces (a ClusterRole).
   */
  watchNamespaces: z
    .array(
      z
        .string()
        .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, 'each must be a namespace name (DNS-1123 label)'),
    )
    .min(1)
    .optional(),
});

export type CommonConfig = z.infer<typeof commonConfigSchema>;

/** The flags every subcommand accepts, as commander parsed them (strings). */
export interface CommonFlags extends TemporalFlags {
  taskQueue?: string;
  kubeconfig?: string;
  providersConfig?: string;
  stateDir?: string;
  installation?: string;
  logLevel?: string;
  provisioningPoll?: string;
  driftPoll?: string;
  driftSweep?: string;
  safetyPoll?: string;
  gcInterval?: string;
  gcMinAge?: string;
  gcDryRun?: boolean;
  providerCheckInterval?: string;
  metricsAddr?: string;
  maxCachedWorkflows?: string;
  reconcilePeriod?: string;
  watchNamespaces?: string;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/**
 * Workflows that wake at once: provisioning, replacing, deleting, and the few
 * steady ones a signal wakes. A steady Proxy wakes every few hours, so an
 * evicted one rarely replays (docs/architecture.md, Decisions).
 */
export const DEFAULT_MAX_CACHED_WORKFLOWS = 100;

function positiveInt(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback;
  if (!/^[1-9][0-9]{0,8}$/.test(text.trim())) {
    throw new ConfigError(`${flag}: must be a positive whole number, got ${JSON.stringify(text)}`);
  }
  return Number(text.trim());
}

function durationMs(text: string | undefined, flag: string, fallback: number): number {
  if (text === undefined) return fallback;
  try {
    return parseDuration(text);
  } catch (error) {
    throw new ConfigError(`${flag}: ${(error as Error).message}`);
  }
}

/** `a, b,a` → ['a', 'b']; undefined or blank: all namespaces. */
function namespaceList(text: string | undefined): string[] | undefined {
  if (text === undefined || text.trim() === '') return undefined;
  return [...new Set(text.split(',').map((n) => n.trim()))];
}

export function defaultStateDir(env: Readonly<Record<string, string | undefined>>): string {
  return join(
    env.EGRESS_PROXIES_CACHE ?? join(env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'egress-proxies'),
    'state',
  );
}

export function readCommonConfig(
  env: Readonly<Record<string, string | undefined>>,
  flags: CommonFlags,
): CommonConfig {
  const timing: ProxyTiming = {
    ...DEFAULT_TIMING,
    provisioningPollMs: durationMs(
      flags.provisioningPoll,
      '--provisioning-poll',
      DEFAULT_TIMING.provisioningPollMs,
    ),
    driftPollMs: durationMs(flags.driftPoll, '--drift-poll', DEFAULT_TIMING.driftPollMs),
    safetyPollMs: durationMs(flags.safetyPoll, '--safety-poll', DEFAULT_TIMING.safetyPollMs),
  };
  timing.deletionPollMs = timing.provisioningPollMs;
  let temporal: ResolvedTemporal;
  try {
    temporal = resolveTemporal(env, flags);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
  const candidate = {
    temporalAddress: temporal.address,
    temporalNamespace: temporal.namespace,
    temporalConnection: temporal.settings,
    taskQueue: flags.taskQueue ?? 'egress-proxies',
    kubeconfig: flags.kubeconfig ?? env.KUBECONFIG,
    providersConfig: flags.providersConfig ?? env.PROVIDERS_CONFIG,
    stateDir: flags.stateDir ?? defaultStateDir(env),
    installation: flags.installation ?? env.INSTALLATION_ID,
    logLevel: flags.logLevel ?? env.LOG_LEVEL ?? 'info',
    gc: {
      intervalMs: durationMs(flags.gcInterval, '--gc-interval', 10 * 60_000),
      minAgeMs: durationMs(flags.gcMinAge, '--gc-min-age', 10 * 60_000),
      dryRun: flags.gcDryRun ?? false,
    },
    providerCheckIntervalMs: durationMs(flags.providerCheckInterval, '--provider-check-interval', 60_000),
    metricsAddr: flags.metricsAddr,
    maxCachedWorkflows: positiveInt(
      flags.maxCachedWorkflows ?? env.MAX_CACHED_WORKFLOWS,
      '--max-cached-workflows',
      DEFAULT_MAX_CACHED_WORKFLOWS,
    ),
    reconcilePeriodMs: durationMs(flags.reconcilePeriod, '--reconcile-period', DEFAULT_RECONCILE_PERIOD_MS),
    timing,
    driftSweepMs: durationMs(flags.driftSweep, '--drift-sweep', DRIFT_SWEEP_DEFAULTS.intervalMs),
    watchNamespaces: namespaceList(flags.watchNamespaces ?? env.WATCH_NAMESPACES),
  };
  const parsed = commonConfigSchema.safeParse(candidate);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    if (issue.path[0] === 'watchNamespaces') {
      throw new ConfigError(
        `--watch-namespaces: ${issue.message}, got ${JSON.stringify(flags.watchNamespaces ?? env.WATCH_NAMESPACES)}`,
      );
    }
    throw new ConfigError(`${issue.path.join('.') || 'config'}: ${issue.message}`);
  }
  return parsed.data;
}
