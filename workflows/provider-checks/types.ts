/**
 * Serialisable types of the provider-checks workflow. One run is one round:
 * check every configured provider, publish one ProviderHealth object per
 * provider, delete the objects of providers no longer configured. The round
 * report is the workflow's result; the next scheduled run receives it
 * (`workflowInfo().lastResult`) and logs only what changed since.
 */

import type { TargetStatus } from '../../providers/types.js';

export interface ProviderChecksInput {
  /** The whole round's check budget: 15 s, or the interval when shorter (set by the schedule). */
  timeoutMs?: number;
  /** The worker stops exporting a provider's gauges this long after its last check. Default 3 min. */
  staleAfterMs?: number;
  /** Check nothing; delete every ProviderHealth object of this installation (checks turned off). */
  cleanupOnly?: boolean;
}

export const CHECK_DEFAULTS = {
  timeoutMs: 15_000,
  staleAfterMs: 3 * 60_000,
  cleanupOnly: false,
} as const satisfies Required<ProviderChecksInput>;

/** One target's verdict: the provider contract's TargetStatus, already plain serialisable data. */
export type CheckedTarget = TargetStatus;

export interface ProviderCheckResult {
  provider: string;
  type: string;
  /** False when the provider has no check(): Ready is Unknown, not False. */
  supported: boolean;
  targets: CheckedTarget[];
  /** RFC 3339: when this provider's check finished. */
  checkedAt: string;
}

export type TransitionKind = 'down' | 'reason-changed' | 'up' | 'first-ready';

export interface Transition {
  kind: TransitionKind;
  provider: string;
  target: string;
  address?: string;
  reason: string;
  message?: string;
  latencyMillis?: number;
}

export const CHECKS_REPORT_VERSION = 1;

export interface ChecksRoundReport {
  version: typeof CHECKS_REPORT_VERSION;
  installation: string;
  cleanupOnly: boolean;
  /** Each target's verdict this round: what the next round's transitions compare against. */
  verdicts: Array<{ provider: string; target: string; ready: boolean; reason: string }>;
  transitions: Transition[];
  /** Providers checked (and exported as metrics) but given no object: their names are not valid object names. */
  invalidNames: string[];
  /** ProviderHealth objects written this round. */
  published: string[];
  publishFailures: Array<{ provider: string; error: string }>;
  /** ProviderHealth objects deleted: their providers are no longer configured. */
  deleted: string[];
}
